package server

import (
	"fmt"
	"testing"
)

// TestIgnoreEOS asks the OpenAI routes for ignore_eos: the model goes on
// past its stop token to exactly max_tokens, where without it the same
// request stops early.
func TestIgnoreEOS(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"chat",` + japan + `,"temperature":0,"max_tokens":60%s}`},
		{"/v1/completions", `{"model":"chat","prompt":"<|im_start|>user\nWhat is the capital of Japan?<|im_end|>\n<|im_start|>assistant\n","temperature":0,"max_tokens":60%s}`},
	} {
		usage := func(extra string) (int, string) {
			code, v, raw := post(t, ts.URL+tc.path, fmt.Sprintf(tc.body, extra))
			if code != 200 {
				t.Fatalf("%s: %d %s", tc.path, code, raw)
			}
			n := int(v["usage"].(map[string]any)["completion_tokens"].(float64))
			return n, v["choices"].([]any)[0].(map[string]any)["finish_reason"].(string)
		}
		if n, finish := usage(""); n >= 60 || finish != "stop" {
			t.Fatalf("%s without ignore_eos: %d tokens, finish %q; want an early stop to compare with", tc.path, n, finish)
		}
		if n, finish := usage(`,"ignore_eos":true`); n != 60 || finish != "length" {
			t.Errorf("%s with ignore_eos: %d tokens, finish %q; want 60, length", tc.path, n, finish)
		}
	}
}
