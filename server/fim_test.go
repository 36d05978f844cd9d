package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/tokenizer"
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
// openTinyLlama2 opens lem-tiny with the llama2 tokenizer fixture, which
// has no fill-in-the-middle tokens.
func openTinyLlama2(t *testing.T) *engine.Model {
	t.Helper()
	e, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Tokenizer, err = tokenizer.LoadDir(fixtures.Dir(t, "tokenizers", "llama2")); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestFillInTheMiddleUnsupported(t *testing.T) {
	e := openTinyLlama2(t)
	e.Templates = nil
	_, ts := serveModels(t, Config{}, mustModel(t, "plain-llm", e, ModelOptions{}))
	for _, path := range []string{"/v1/completions", "/api/generate"} {
		code, _, raw := post(t, ts.URL+path, `{"model":"plain-llm","prompt":"def f(","suffix":"):\n","stream":false}`)
		if code != 400 || !strings.Contains(raw, `\"plain-llm\"`) || !strings.Contains(raw, "fill-in-the-middle") || !strings.Contains(raw, "suffix") {
			t.Errorf("%s: %d %s", path, code, raw)
		}
	}
}

// TestScoreLoglikelihood sends lm-evaluation-harness's loglikelihood
// request (token-id prompts in a batch, max_tokens 1, echo, logprobs 1,
// temperature 0) and checks what it reads: per choice, the prompt's
// tokens scored (the first null) and then the generated token, also when
// that token is the model's stop token, so that cutting the last entry
// off leaves exactly the prompt's scores.
func TestScoreLoglikelihood(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	// The chat model ends the first prompt with its stop token.
	prompts := [][]int32{{100, 200, 300, 400}, {10, 20, 30}}
	code, v, raw := post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":`+mustJSON(prompts)+`,"temperature":0,"max_tokens":1,"logprobs":1,"seed":1234,"echo":true}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	stops := 0
	for i, c := range v["choices"].([]any) {
		c := c.(map[string]any)
		lp := c["logprobs"].(map[string]any)
		logps, tops := lp["token_logprobs"].([]any), lp["top_logprobs"].([]any)
		if len(logps) != len(prompts[i])+1 || len(tops) != len(logps) || logps[0] != nil {
			t.Fatalf("choice %d (%s): %d logprobs for a prompt of %d and one generated token: %v", i, c["finish_reason"], len(logps), len(prompts[i]), logps)
		}
		if c["finish_reason"] == "stop" {
			stops++
		}
		// The prompt's scores are those of scoring it alone (max_tokens 0),
		// and the generated token's is that of scoring the prompt and it.
		gen := lp["tokens"].([]any)[len(prompts[i])].(string)
		ids := openChatModel(t).Tokenizer.Encode(gen, false)
		if len(ids) != 1 {
			t.Fatalf("choice %d: generated token %q encodes as %v", i, gen, ids)
		}
		_, w, raw := post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":`+mustJSON(append(slices.Clone(prompts[i]), ids[0]))+`,"max_tokens":0,"logprobs":1,"echo":true}`)
		want := w["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["token_logprobs"].([]any)
		for j := 1; j < len(want); j++ {
			if d := logps[j].(float64) - want[j].(float64); d > 1e-3 || d < -1e-3 {
				t.Errorf("choice %d token %d: logprob %v, scored alone %v (%s)", i, j, logps[j], want[j], raw)
			}
		}
	}
	if stops == 0 {
		t.Error("no choice ended on the stop token: the test no longer covers it")
	}
}

// TestOllamaShowFIM checks that /api/show tells Ollama's clients a model
// fills in the middle: the insert capability, and a template that reads
// .Suffix in the model's FIM markers before the chat template; a model
// without FIM tokens has neither.
func TestOllamaShowFIM(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	code, v, raw := post(t, ts.URL+"/api/show", `{"model":"chat"}`)
	tmpl, _ := v["template"].(string)
	want := "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>{{- else }}"
	if code != 200 || !strings.HasPrefix(tmpl, want) || !strings.HasSuffix(tmpl, "{{- end }}") || !strings.Contains(tmpl, "<|im_start|>") {
		t.Errorf("template: %d %q", code, tmpl)
	}
	if !slices.Contains(v["capabilities"].([]any), any("insert")) || !strings.Contains(v["modelfile"].(string), ".Suffix") {
		t.Errorf("capabilities %v, modelfile %q: %s", v["capabilities"], v["modelfile"], raw)
	}

	_, ts2 := serveModels(t, Config{}, mustModel(t, "plain-llm", openTinyLlama2(t), ModelOptions{}))
	code, v, raw = post(t, ts2.URL+"/api/show", `{"model":"plain-llm"}`)
	if code != 200 || strings.Contains(raw, "Suffix") || slices.Contains(v["capabilities"].([]any), any("insert")) {
		t.Errorf("no FIM tokens: %d %s", code, raw)
	}
}
