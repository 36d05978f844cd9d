package server

import "context"

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
