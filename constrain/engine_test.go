package constrain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

var _ engine.Constraint = (*constrain.JSONState)(nil)

// TestEngineJSON generates with the trained chat model under the JSON
// constraint. The model writes JSON only inside tool calls, so prompted
// with a tool call's opening it must produce its call's object, unchanged
// by the constraint and complete; prompted with a question it must at
// least never leave JSON.
func TestEngineJSON(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := engine.Open(dir, engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	j, err := constrain.JSON(m.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}

	// The reference case where the model calls get_weather without
	// thinking first.
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Prompt     string `json:"prompt"`
			GreedyText string `json:"greedy_text"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	const open = "<tool_call>\n"
	var toolPrompt, wantJSON string
	for _, c := range ref.Cases {
		if rest, ok := strings.CutPrefix(c.GreedyText, open); ok {
			toolPrompt = c.Prompt + open
			wantJSON, _, _ = strings.Cut(rest, "\n")
			break
		}
	}
	if toolPrompt == "" {
		t.Fatal("no tool-call case in reference.json")
	}

	generate := func(t *testing.T, prompt string, sp engine.SampleParams, maxTokens int) (*engine.Result, *constrain.JSONState) {
		c := j.New(m.StopIDs)
		var streamed string
		res, err := m.Generate(context.Background(), m.NewSession(0), engine.Request{
			Prompt:     m.Tokenizer.Encode(prompt, true),
			Sample:     sp,
			MaxTokens:  maxTokens,
			Constraint: c,
		}, func(tok engine.Token) error { streamed += tok.Text; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if c.Err() != nil {
			t.Fatal(c.Err())
		}
		if streamed != res.Text {
			t.Errorf("streamed %q, result %q", streamed, res.Text)
		}
		if prefix, _ := constrain.CheckJSON([]byte(res.Text)); !prefix {
			t.Fatalf("output %q is not a JSON prefix", res.Text)
		}
		t.Logf("%d tokens, stop %q: %q", len(res.IDs), res.StopReason, res.Text)
		return res, c
	}
	parses := func(t *testing.T, text string) {
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
	}

	t.Run("tool call greedy", func(t *testing.T) {
		res, c := generate(t, toolPrompt, engine.SampleParams{}, 200)
		if !c.Done() || res.StopReason != engine.StopToken || res.StopID != -1 {
			t.Fatalf("not complete: stop %q (%d), done %v", res.StopReason, res.StopID, c.Done())
		}
		// The model's last token is "}}\n": white space may follow the
		// object inside the token that closes it.
		if res.Text != wantJSON+"\n" {
			t.Fatalf("got %q, want the model's own %q", res.Text, wantJSON+"\n")
		}
		parses(t, res.Text)
	})
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("tool call seed %d", seed), func(t *testing.T) {
			res, c := generate(t, toolPrompt, engine.SampleParams{Temperature: 0.8, Seed: seed, HasSeed: true}, 200)
			if !c.Done() {
				t.Fatalf("not complete after %d tokens", len(res.IDs))
			}
			parses(t, res.Text)
		})
	}
	// Free questions: the model knows no JSON here; the output must stay a
	// JSON prefix, and parse when it completes.
	prompt, err := m.Templates.Default().Render(chat.Input{
		Messages:            []chat.Message{{Role: "user", Content: chat.Text("What is the capital of Japan? Answer in JSON.")}},
		AddGenerationPrompt: true,
		Kwargs:              map[string]any{"enable_thinking": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range []engine.SampleParams{{}, {Temperature: 1, Seed: 7, HasSeed: true}} {
		t.Run(fmt.Sprintf("question temperature %v", sp.Temperature), func(t *testing.T) {
			res, c := generate(t, prompt, sp, 60)
			if c.Done() {
				parses(t, res.Text)
			}
		})
	}
}
