package compat

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/lem-engine/lem/server"
)

// TestReasoningTokens reads the reasoning tokens of the chat model's
// thinking through the SDK's usage on chat completions and the Responses
// API: the same count on both, at least the reasoning's text and its two
// markers, less than all the output; none with thinking off.
func TestReasoningTokens(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	res, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)))
	if err != nil {
		t.Fatal(err)
	}
	u := res.Usage
	n := u.CompletionTokensDetails.ReasoningTokens
	thought := int64(len(chatModel(t).Tokenizer.EncodePlain(japanThink, false)))
	if n < thought+2 || n >= u.CompletionTokens {
		t.Errorf("chat: %d reasoning tokens of %d, want at least %d (the reasoning and its markers) and fewer than all", n, u.CompletionTokens, thought+2)
	}

	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(japan)},
		Temperature: param.NewOpt(0.0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Usage.OutputTokensDetails.ReasoningTokens; got != n || r.Usage.OutputTokens != u.CompletionTokens {
		t.Errorf("responses: %d reasoning tokens of %d, want %d of %d as on chat completions", got, r.Usage.OutputTokens, n, u.CompletionTokens)
	}

	res, err = client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Usage.CompletionTokensDetails.ReasoningTokens; got != 0 || res.Choices[0].Message.Content != tokyo {
		t.Errorf("thinking off: %d reasoning tokens, answer %q", got, res.Choices[0].Message.Content)
	}
}
