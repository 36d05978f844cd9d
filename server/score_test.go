package server

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestScorePromptMatchesGeneration scores a prompt that ends with a
// greedy continuation: each continued token's log-probability is the one
// generation reported for it, and it is the likeliest at its position.
func TestScorePromptMatchesGeneration(t *testing.T) {
	_, m := newTestModel(t, Config{})
	// Longer than a chunk of scoring (engine.PromptLogprobs runs 32
	// positions a pass), so that chunks follow each other.
	ids := m.eng.Tokenizer.Encode(strings.Repeat("The capital of France is Paris. ", 5)+"The capital of Japan is", false)
	if len(ids) <= 32 {
		t.Fatalf("a prompt of %d tokens", len(ids))
	}
	gen := &Request{PromptIDs: ids, MaxTokens: 8, Logprobs: true, TopLogprobs: 1, Sample: samp(func(s *sampleP) {})}
	p, err := m.Prepare(gen)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Generate(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Choices[0].Logprobs
	if len(out) == 0 {
		t.Fatal("nothing generated")
	}
	all := append([]int32(nil), ids...)
	for _, lp := range out {
		all = append(all, lp.ID)
	}
	score := &Request{PromptIDs: all, MaxTokensSet: true, ZeroTokens: true, PromptLogprobs: true, TopLogprobs: 3}
	p, err = m.Prepare(score)
	if err != nil {
		t.Fatal(err)
	}
	res, err = m.Generate(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CompletionTokens != 0 || res.Choices[0].Finish != FinishLength || len(res.PromptLogprobs) != len(all) {
		t.Fatalf("scoring: %d tokens generated, finish %q, %d prompt logprobs for %d tokens",
			res.Usage.CompletionTokens, res.Choices[0].Finish, len(res.PromptLogprobs), len(all))
	}
	if first := res.PromptLogprobs[0]; first.Logprob != 0 || first.Top != nil || first.ID != all[0] {
		t.Errorf("first token %+v", first)
	}
	for i, want := range out {
		got := res.PromptLogprobs[len(ids)+i]
		if got.ID != want.ID || math.Abs(float64(got.Logprob-want.Logprob)) > 1e-3 {
			t.Errorf("token %d: scored %d %v, generated %d %v", i, got.ID, got.Logprob, want.ID, want.Logprob)
		}
		if len(got.Top) != 3 || got.Top[0].ID != want.ID || got.Top[0].Logprob < got.Top[1].Logprob || got.Top[1].Logprob < got.Top[2].Logprob {
			t.Errorf("token %d: alternatives %+v, want the greedy token %d first", i, got.Top, want.ID)
		}
	}
}
