package compat

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/lem-engine/lem/server"
)

// TestScorePrompt scores a prompt through openai-go as evaluation
// harnesses do: echo, logprobs and max_tokens 0 return the prompt's
// tokens with their log-probabilities (the first null) and generate
// nothing, whole and streamed.
func TestScorePrompt(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	const prompt = "The capital of Japan is Tokyo."
	n := len(chatModel(t).Tokenizer.Encode(prompt, false))
	p := openai.CompletionNewParams{
		Model:     "chat-model",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: param.NewOpt(prompt)},
		MaxTokens: param.NewOpt[int64](0),
		Echo:      param.NewOpt(true),
		Logprobs:  param.NewOpt[int64](1),
	}
	res, err := client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	lp := c.Logprobs
	if c.Text != prompt || res.Usage.CompletionTokens != 0 || res.Usage.PromptTokens != int64(n) {
		t.Errorf("text %q, %d completion tokens of %d prompt: want the prompt alone", c.Text, res.Usage.CompletionTokens, res.Usage.PromptTokens)
	}
	if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || strings.Join(lp.Tokens, "") != prompt {
		t.Fatalf("logprobs of %d tokens %q, want the prompt's %d", len(lp.TokenLogprobs), lp.Tokens, n)
	}
	if !strings.Contains(lp.RawJSON(), `"token_logprobs":[null,`) || !strings.Contains(lp.RawJSON(), `"top_logprobs":[null,{`) {
		t.Errorf("the first token's logprob is not null: %s", lp.RawJSON())
	}
	sum := 0.0
	for i, v := range lp.TokenLogprobs[1:] {
		if v > 0 || math.IsNaN(v) {
			t.Errorf("token %d %q: logprob %v", i+1, lp.Tokens[i+1], v)
		}
		sum += v
	}
	if sum >= 0 {
		t.Errorf("the prompt's log-likelihood is %v", sum)
	}

	// Streamed: the same tokens and log-probabilities, nothing generated.
	stream := client.Completions.NewStreaming(ctx, p)
	var text strings.Builder
	var toks []string
	var logps []float64
	var raw strings.Builder
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Text)
			toks = append(toks, c.Logprobs.Tokens...)
			logps = append(logps, c.Logprobs.TokenLogprobs...)
			raw.WriteString(c.Logprobs.RawJSON())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != prompt || len(toks) != n || !strings.Contains(raw.String(), `"token_logprobs":[null`) {
		t.Fatalf("streamed %q, %d tokens, logprobs %s", text.String(), len(toks), raw.String())
	}
	for i := range logps {
		if d := logps[i] - lp.TokenLogprobs[i]; math.Abs(d) > 1e-4 {
			t.Errorf("streamed token %d: logprob %v, whole %v", i, logps[i], lp.TokenLogprobs[i])
		}
	}
}
