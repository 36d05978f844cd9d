package server

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"lem/compute/cpu"
	"lem/engine"
	"lem/internal/fixtures"
	"lem/tokenizer"
)

// TestFillInTheMiddle checks suffix on /v1/completions and /api/generate:
// the prompt is the model's FIM prompt (the chat-model fixture's
// tokenizer declares Qwen's <|fim_prefix|> markers), the same on both
// dialects, and requests it cannot serve are a 400 naming what is wrong.
func TestFillInTheMiddle(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tok := openChatModel(t).Tokenizer
	f, ok := tok.FIM()
	if !ok {
		t.Fatal("the chat-model fixture declares no FIM tokens")
	}
	const prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
	want := slices.Concat([]int32{f.Prefix}, tok.EncodePlain(prefix, false), []int32{f.Suffix}, tok.EncodePlain(suffix, false), []int32{f.Middle})

	// The reference: the FIM prompt sent as token ids.
	code, v, raw := post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":`+mustJSON(want)+`,"max_tokens":8,"temperature":0}`)
	if code != 200 {
		t.Fatalf("ids: %d %s", code, raw)
	}
	ref := v["choices"].([]any)[0].(map[string]any)["text"].(string)

	body := `{"model":"chat","prompt":` + mustJSON(prefix) + `,"suffix":` + mustJSON(suffix) + `,"max_tokens":8,"temperature":0}`
	code, v, raw = post(t, ts.URL+"/v1/completions", body)
	if code != 200 {
		t.Fatalf("completions suffix: %d %s", code, raw)
	}
	if got := v["choices"].([]any)[0].(map[string]any)["text"]; got != ref {
		t.Errorf("completions suffix: %q, want %q (the FIM prompt as ids)", got, ref)
	}
	if n := v["usage"].(map[string]any)["prompt_tokens"].(float64); int(n) != len(want) {
		t.Errorf("completions suffix: %v prompt tokens, want %d", n, len(want))
	}

	code, v, raw = post(t, ts.URL+"/api/generate", `{"model":"chat","prompt":`+mustJSON(prefix)+`,"suffix":`+mustJSON(suffix)+`,"stream":false,"options":{"num_predict":8,"temperature":0}}`)
	if code != 200 {
		t.Fatalf("ollama suffix: %d %s", code, raw)
	}
	if v["response"] != ref || int(v["prompt_eval_count"].(float64)) != len(want) {
		t.Errorf("ollama suffix: %q after %v prompt tokens, want %q after %d", v["response"], v["prompt_eval_count"], ref, len(want))
	}
	// Streamed, the pieces add up to the same text.
	code, _, raw = post(t, ts.URL+"/v1/completions", strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if code != 200 || !strings.HasSuffix(strings.TrimSpace(raw), "data: [DONE]") {
		t.Errorf("streamed suffix: %d %s", code, raw)
	}

	// Marker text in the prefix stays text: it is not a second marker.
	code, v, raw = post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"<|fim_middle|>","suffix":"x","max_tokens":1}`)
	if code != 200 {
		t.Fatalf("marker text: %d %s", code, raw)
	}
	if n := int(v["usage"].(map[string]any)["prompt_tokens"].(float64)); n != 4+len(tok.EncodePlain("<|fim_middle|>", false)) || n <= 5 {
		t.Errorf("marker text in the prefix: %d prompt tokens", n)
	}

	for _, tc := range []struct{ path, body, param string }{
		{"/v1/completions", `{"model":"chat","prompt":"a","suffix":"b","echo":true}`, "echo"},
		{"/v1/completions", `{"model":"chat","prompt":[1,2,3],"suffix":"b"}`, "suffix"},
	} {
		if code, _, raw := post(t, ts.URL+tc.path, tc.body); code != 400 || !strings.Contains(raw, tc.param) {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, code, raw)
		}
	}
}

// TestFillInTheMiddleUnsupported checks the 400 for a model whose
// tokenizer declares no FIM tokens: lem-tiny served with Llama 2's
// published tokenizer, which has none.
func TestFillInTheMiddleUnsupported(t *testing.T) {
	e, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Tokenizer, err = tokenizer.LoadDir(fixtures.Dir(t, "tokenizers", "llama2")); err != nil {
		t.Fatal(err)
	}
	e.Templates = nil
	m, err := NewModel("plain-llm", e, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, m)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	for _, path := range []string{"/v1/completions", "/api/generate"} {
		code, _, raw := post(t, ts.URL+path, `{"model":"plain-llm","prompt":"def f(","suffix":"):\n","stream":false}`)
		if code != 400 || !strings.Contains(raw, `\"plain-llm\"`) || !strings.Contains(raw, "fill-in-the-middle") || !strings.Contains(raw, "suffix") {
			t.Errorf("%s: %d %s", path, code, raw)
		}
	}
}
