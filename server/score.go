package server

import (
	"context"
	"fmt"
	"slices"

	"github.com/lem-engine/lem/engine"
)

// scorePrompt runs p's prompt through the model from its start and
// returns each prompt token with its log-probability given the tokens
// before it and the p.req.TopLogprobs likeliest tokens at its position.
// The first token has none. It runs on the model's scheduler and checks
// ctx between its steps.
func (m *Model) scorePrompt(ctx context.Context, p *Prepared) ([]TokenLogprob, error) {
	scored, err := m.sched.PromptLogprobs(ctx, p.ids, p.req.TopLogprobs)
	if err != nil {
		return nil, err
	}
	tok := m.eng.Tokenizer
	text := func(id int32) string { return tokenText(tok.Decode([]int32{id}, false)) }
	out := make([]TokenLogprob, len(p.ids))
	out[0] = TokenLogprob{ID: p.ids[0], Token: text(p.ids[0])}
	for i, t := range scored {
		lp := TokenLogprob{ID: t.ID, Token: text(t.ID), Logprob: t.Logprob}
		for _, c := range t.Top {
			lp.Top = append(lp.Top, TopLogprob{ID: c.ID, Token: text(c.ID), Logprob: c.Logprob})
		}
		out[i+1] = lp
	}
	return out, nil
}

// scoreStop adds the stop token that ended a choice to its logprobs when
// the prompt is scored too (echo): the engine does not report the stop
// token, and a client that scores a continuation by cutting the generated
// token off the end of the echoed list (lm-evaluation-harness) must find
// it there. It scores the whole sequence again, on the prefix cache.
func (r *choiceRun) scoreStop(ctx context.Context, res *engine.Result) error {
	req := r.p.req
	if !req.PromptLogprobs || !req.Logprobs || res.StopID < 0 {
		return nil
	}
	ids := slices.Concat(r.p.ids, res.IDs, []int32{res.StopID})
	scored, err := r.m.sched.PromptLogprobs(ctx, ids, req.TopLogprobs)
	if err != nil {
		return fmt.Errorf("scoring the stop token: %w", err)
	}
	r.addLogprob(scored[len(scored)-1])
	return nil
}
