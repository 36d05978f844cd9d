package server

import (
	"strconv"
	"strings"
	"testing"
)

// TestReasoningTokens checks that usage counts the reasoning tokens, from
// <think> to </think>, on chat completions (whole, streamed and over
// several choices) and the Responses API, and none with thinking off.
func TestReasoningTokens(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	const msgs = `"messages":[{"role":"user","content":"What is the capital of Japan?"}],"temperature":0`
	code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+msgs+`,"logprobs":true}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	// The tokens generated, from the logprobs: reasoning is the first of
	// them up to and with </think>.
	toks := v["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any)
	want := -1
	for i, lp := range toks {
		if lp.(map[string]any)["token"] == "</think>" {
			want = i + 1
		}
	}
	if want < 3 || toks[0].(map[string]any)["token"] != "<think>" {
		t.Fatalf("the model did not think: %s", raw)
	}
	usage := func(v map[string]any) (completion, reasoning float64) {
		u, _ := v["usage"].(map[string]any)
		d, _ := u["completion_tokens_details"].(map[string]any)
		completion, _ = u["completion_tokens"].(float64)
		reasoning, _ = d["reasoning_tokens"].(float64)
		return completion, reasoning
	}
	if c, r := usage(v); int(c) != len(toks) || int(r) != want {
		t.Errorf("chat: %v completion and %v reasoning tokens, want %d and %d", c, r, len(toks), want)
	}

	// Two choices add up.
	_, v, raw = post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+msgs+`,"n":2}`)
	if _, r := usage(v); int(r) != 2*want {
		t.Errorf("n 2: %v reasoning tokens, want %d: %s", r, 2*want, raw)
	}

	// Streamed, the usage chunk has them.
	_, _, raw = post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+msgs+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if !strings.Contains(raw, `"completion_tokens_details":{"reasoning_tokens":`+strconv.Itoa(want)+`}`) {
		t.Errorf("streamed: no reasoning_tokens %d in %s", want, raw)
	}

	// The Responses API.
	_, v, raw = post(t, ts.URL+"/v1/responses", `{"model":"chat","input":"What is the capital of Japan?","temperature":0}`)
	u, _ := v["usage"].(map[string]any)
	if r := u["output_tokens_details"].(map[string]any)["reasoning_tokens"]; r != float64(want) || u["output_tokens"] != float64(len(toks)) {
		t.Errorf("responses: usage %v, want %d reasoning tokens of %d", u, want, len(toks))
	}

	// Thinking off: none.
	_, v, raw = post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+msgs+`,"reasoning_effort":"none"}`)
	if c, r := usage(v); r != 0 || c == 0 {
		t.Errorf("thinking off: %v reasoning tokens of %v: %s", r, c, raw)
	}
	// A raw completion has no reasoning.
	_, v, raw = post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"<think>\nThe","max_tokens":8,"temperature":0}`)
	if _, r := usage(v); r != 0 {
		t.Errorf("completions: %v reasoning tokens: %s", r, raw)
	}
}
