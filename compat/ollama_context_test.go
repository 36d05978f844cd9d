package compat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/lem-engine/lem/server"
)

// TestOllamaLongChat sends, through Ollama's client, a chat history longer
// than the served context (2048 tokens): by default its oldest turns are
// dropped and the model answers; with truncate false it is a 400.
func TestOllamaLongChat(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	msgs := []api.Message{{Role: "system", Content: "You are terse."}}
	for i := range 40 {
		msgs = append(msgs,
			olUser(fmt.Sprintf("question %d: %s", i, strings.Repeat("tell me more about it ", 6))),
			api.Message{Role: "assistant", Content: fmt.Sprintf("answer %d: %s", i, strings.Repeat("here is more about it ", 6))})
	}
	msgs = append(msgs, olUser("and now?"))
	opts := map[string]any{"temperature": 0, "num_predict": 4}

	chunks := olChat(t, c, &api.ChatRequest{Model: "chat-model", Messages: msgs, Options: opts})
	last := chunks[len(chunks)-1]
	if last.PromptEvalCount <= 0 || last.PromptEvalCount+4 > 2048 {
		t.Errorf("truncated history: a prompt of %d tokens, want at most %d", last.PromptEvalCount, 2048-4)
	}

	err := c.Chat(context.Background(), &api.ChatRequest{Model: "chat-model", Messages: msgs, Options: opts, Truncate: &olFalse},
		func(api.ChatResponse) error { return nil })
	if !isStatus(err, 400) || !strings.Contains(err.Error(), "context") {
		t.Errorf("truncate false: %v, want a 400 about the context", err)
	}
}

// TestOllamaNumCtx checks num_ctx bounds a request's prompt and output, and
// that /api/show gives the served context and a num_ctx parameter.
func TestOllamaNumCtx(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	var got api.GenerateResponse
	err := c.Generate(context.Background(), &api.GenerateRequest{Model: "chat-model", Stream: &olFalse,
		Prompt: strings.Repeat("tell me more about it ", 10), Options: map[string]any{"temperature": 0, "num_ctx": 120}},
		func(r api.GenerateResponse) error { got = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := got.PromptEvalCount + got.EvalCount; n > 120 || (got.DoneReason == "length" && n != 120) {
		t.Errorf("num_ctx 120: %d prompt and %d output tokens (%s)", got.PromptEvalCount, got.EvalCount, got.DoneReason)
	}

	show, err := c.Show(context.Background(), &api.ShowRequest{Model: "chat-model"})
	if err != nil {
		t.Fatal(err)
	}
	if show.ModelInfo["qwen3.context_length"] != 2048.0 || !strings.Contains(show.Parameters, "num_ctx") ||
		!strings.Contains(show.Parameters, "2048") {
		t.Errorf("show: context_length %v, parameters %q, want 2048 and num_ctx 2048", show.ModelInfo["qwen3.context_length"], show.Parameters)
	}
}

// TestOllamaNoRoute checks a route lem does not serve answers a 404 whose
// message the client reads.
func TestOllamaNoRoute(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	err := c.Push(context.Background(), &api.PushRequest{Model: "chat-model"}, func(api.ProgressResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || !strings.HasPrefix(se.ErrorMessage, "no route POST /api/push") {
		t.Errorf("push: %#v, want a 404 whose message is the text (as the JavaScript client shows it too), not a JSON object", err)
	}
}

// TestOllamaLongPrompt sends, through Ollama's client, a generate prompt
// longer than the served context (2048 tokens): by default its oldest
// tokens are dropped, the end kept with room for num_predict, and the
// model answers; with truncate false it is a 400 about the context.
func TestOllamaLongPrompt(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	var b strings.Builder
	for i := range 600 {
		fmt.Fprintf(&b, "item %d is here. ", i)
	}
	opts := map[string]any{"temperature": 0, "num_predict": 4}
	for _, raw := range []bool{false, true} {
		var got api.GenerateResponse
		err := c.Generate(context.Background(), &api.GenerateRequest{Model: "chat-model", Prompt: b.String(), Raw: raw, Stream: &olFalse, Options: opts},
			func(r api.GenerateResponse) error { got = r; return nil })
		if err != nil {
			t.Fatalf("raw %v: %v", raw, err)
		}
		if got.PromptEvalCount+4 > 2048 || got.PromptEvalCount < 2048-4-16 || got.EvalCount == 0 {
			t.Errorf("raw %v: a prompt of %d tokens and %d generated, want the prompt to fill 2048 less num_predict 4", raw, got.PromptEvalCount, got.EvalCount)
		}
	}
	err := c.Generate(context.Background(), &api.GenerateRequest{Model: "chat-model", Prompt: b.String(), Options: opts, Truncate: &olFalse},
		func(api.GenerateResponse) error { return nil })
	if !isStatus(err, 400) || !strings.Contains(err.Error(), "context") || !strings.Contains(err.Error(), "truncate") {
		t.Errorf("truncate false: %v, want a 400 about the context", err)
	}
}
