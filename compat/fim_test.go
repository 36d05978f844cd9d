package compat

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/server"
	"github.com/lem-engine/lem/tokenizer"
)

// TestFillInTheMiddle fills in the middle through openai-go's
// Completions.New and Ollama's Generate with a suffix, on the chat
// model, whose tokenizer declares Qwen's <|fim_prefix|> markers: both
// answer what the FIM prompt sent as token ids answers. /api/show tells
// Ollama's client that suffix works.
func TestFillInTheMiddle(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	tok := chatModel(t).Tokenizer
	f, ok := tok.FIM()
	if !ok {
		t.Fatal("the chat model declares no FIM tokens")
	}
	const prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
	var ids []int64
	for _, id := range f.Prompt(tok.EncodePlain(prefix, false), tok.EncodePlain(suffix, false)) {
		ids = append(ids, int64(id))
	}
	p := openai.CompletionNewParams{
		Model:       "chat-model",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids},
		MaxTokens:   param.NewOpt[int64](8),
		Temperature: param.NewOpt(0.0),
	}
	ref, err := client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := ref.Choices[0].Text

	p.Prompt = openai.CompletionNewParamsPromptUnion{OfString: param.NewOpt(prefix)}
	p.Suffix = param.NewOpt(suffix)
	res, err := client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Text != want || res.Usage.PromptTokens != int64(len(ids)) {
		t.Errorf("openai suffix: %q after %d prompt tokens, want %q after %d", res.Choices[0].Text, res.Usage.PromptTokens, want, len(ids))
	}

	c := newOllama(t, base, "")
	var got api.GenerateResponse
	err = c.Generate(ctx, &api.GenerateRequest{Model: "chat-model", Prompt: prefix, Suffix: suffix, Stream: &olFalse,
		Options: map[string]any{"temperature": 0, "num_predict": 8}}, func(r api.GenerateResponse) error { got = r; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.Response != want || got.PromptEvalCount != len(ids) {
		t.Errorf("ollama suffix: %q after %d prompt tokens, want %q after %d", got.Response, got.PromptEvalCount, want, len(ids))
	}

	show, err := c.Show(ctx, &api.ShowRequest{Model: "chat-model"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(show.Template, "{{ .Suffix }}") || !slices.Contains(show.Capabilities, "insert") {
		t.Errorf("show: template %q, capabilities %v: clients will not offer suffix", show.Template, show.Capabilities)
	}
}

// TestFillInTheMiddleUnsupported sends a suffix through both SDKs to a
// model whose tokenizer declares no FIM tokens (lem-tiny with Llama 2's
// tokenizer): a 400 that says so.
func TestFillInTheMiddleUnsupported(t *testing.T) {
	e, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Tokenizer, err = tokenizer.LoadDir(fixtures.Dir(t, "tokenizers", "llama2")); err != nil {
		t.Fatal(err)
	}
	e.Templates = nil
	base, _ := serve(t, server.Config{}, "plain-llm", e, server.ModelOptions{})
	ctx := context.Background()
	client := newClient(base)
	_, err = client.Completions.New(ctx, openai.CompletionNewParams{
		Model:  "plain-llm",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: param.NewOpt("def f(")},
		Suffix: param.NewOpt("):\n"),
	})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || !strings.Contains(oe.Message, "fill-in-the-middle") || oe.Param != "suffix" {
		t.Errorf("openai: %v, want a 400 about fill-in-the-middle on suffix", err)
	}
	err = newOllama(t, base, "").Generate(ctx, &api.GenerateRequest{Model: "plain-llm", Prompt: "def f(", Suffix: "):\n"},
		func(api.GenerateResponse) error { return nil })
	if !isStatus(err, 400) || !strings.Contains(err.Error(), "fill-in-the-middle") {
		t.Errorf("ollama: %v, want a 400 about fill-in-the-middle", err)
	}
	show, err := newOllama(t, base, "").Show(ctx, &api.ShowRequest{Model: "plain-llm"})
	if err != nil || strings.Contains(show.Template, "Suffix") || slices.Contains(show.Capabilities, "insert") {
		t.Errorf("show: %v, template %q, capabilities %v", err, show.Template, show.Capabilities)
	}
}
