package server

import (
	"fmt"
	"strings"
	"testing"
)

// boundDialect is one generation route, and how its requests spell the
// core's fields.
type boundDialect struct {
	name, path string
	// body returns a request with field set to value (JSON) and the
	// field's name as the dialect reports it; ok is false when the
	// dialect has no such field.
	body func(field, value string) (body, param string, ok bool)
}

func boundDialects() []boundDialect {
	const hi = `{"role":"user","content":"Hello!"}`
	msgs := func(role string) string {
		if role == "" {
			return `"messages":[` + hi + `]`
		}
		return `"messages":[{"role":` + role + `,"content":"Hello!"}]`
	}
	return []boundDialect{
		{"chat", "/v1/chat/completions", func(f, v string) (string, string, bool) {
			m, extra := msgs(""), `,"max_tokens":3`
			switch f {
			case "role":
				return `{"model":"chat",` + msgs(v) + extra + `}`, "messages[0].role", true
			case "max_tokens":
				extra = ""
			case "top_logprobs":
				extra += `,"logprobs":true`
			}
			return `{"model":"chat",` + m + extra + `,"` + f + `":` + v + `}`, f, true
		}},
		{"completions", "/v1/completions", func(f, v string) (string, string, bool) {
			extra := `,"max_tokens":3`
			switch f {
			case "role":
				return "", "", false
			case "max_tokens":
				extra = ""
			case "top_logprobs":
				f = "logprobs"
			}
			return `{"model":"chat","prompt":"Hello"` + extra + `,"` + f + `":` + v + `}`, f, true
		}},
		{"responses", "/v1/responses", func(f, v string) (string, string, bool) {
			extra := `,"max_output_tokens":3`
			switch f {
			case "role":
				return `{"model":"chat","input":[{"role":` + v + `,"content":"Hello!"}]` + extra + `}`, "input[0].role", true
			case "max_tokens":
				f, extra = "max_output_tokens", ""
			case "temperature", "top_p", "top_k", "min_p":
			default:
				return "", "", false
			}
			return `{"model":"chat","input":"Hello!"` + extra + `,"` + f + `":` + v + `}`, f, true
		}},
		{"messages", "/v1/messages", func(f, v string) (string, string, bool) {
			m, extra := msgs(""), `,"max_tokens":3`
			switch f {
			case "role":
				return `{"model":"chat",` + msgs(v) + extra + `}`, "messages[0].role", true
			case "max_tokens":
				extra = ""
			case "stop":
				f = "stop_sequences"
			case "temperature", "top_p", "top_k":
			default:
				return "", "", false
			}
			return `{"model":"chat",` + m + extra + `,"` + f + `":` + v + `}`, f, true
		}},
		{"ollama chat", "/api/chat", func(f, v string) (string, string, bool) {
			const opts = `"stream":false,"options":{"num_predict":3`
			switch f {
			case "role":
				return `{"model":"chat",` + msgs(v) + `,` + opts + `}}`, "messages[0].role", true
			case "max_tokens":
				return `{"model":"chat",` + msgs("") + `,"stream":false,"options":{"num_predict":` + v + `}}`, "options.num_predict", true
			case "top_logprobs":
				return `{"model":"chat",` + msgs("") + `,` + opts + `},"top_logprobs":` + v + `}`, f, true
			case "n", "logit_bias":
				return "", "", false
			case "repetition_penalty":
				f = "repeat_penalty"
			}
			return `{"model":"chat",` + msgs("") + `,` + opts + `,"` + f + `":` + v + `}}`, "options." + f, true
		}},
		{"ollama generate", "/api/generate", func(f, v string) (string, string, bool) {
			const opts = `"prompt":"Hello!","stream":false,"options":{"num_predict":3`
			switch f {
			case "role", "n", "logit_bias", "top_logprobs":
				return "", "", false
			case "max_tokens":
				return `{"model":"chat","prompt":"Hello!","stream":false,"options":{"num_predict":` + v + `}}`, "options.num_predict", true
			case "repetition_penalty":
				f = "repeat_penalty"
			}
			return `{"model":"chat",` + opts + `,"` + f + `":` + v + `}}`, "options." + f, true
		}},
	}
}

// TestBoundsEveryDialect sends every bound's out-of-range values to every
// dialect that has the field: each refuses it with a 400 naming the field
// as the dialect spells it. Values at the edge of a bound are taken
// everywhere.
func TestBoundsEveryDialect(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	seventeen := `["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]`
	long := `["` + strings.Repeat("x", MaxStopLen+1) + `"]`
	bad := []struct{ field, value, index string }{
		{"max_tokens", "1000000000000", ""},
		{"max_tokens", "1048577", ""}, // MaxTokensLimit plus one
		{"temperature", "-0.5", ""},
		{"temperature", "101", ""},
		{"top_p", "1.5", ""},
		{"top_p", "-0.1", ""},
		{"min_p", "2", ""},
		{"top_k", "-2", ""},
		{"presence_penalty", "2.5", ""},
		{"frequency_penalty", "-3", ""},
		{"repetition_penalty", "11", ""},
		{"stop", seventeen, ""},
		{"stop", `[""]`, "[0]"},
		{"stop", long, "[0]"},
		{"top_logprobs", "21", ""},
		{"n", "17", ""},
		{"logit_bias", `{"5":101}`, ""},
		{"role", `"bot"`, ""},
		{"role", `"function_call"`, ""},
	}
	for _, d := range boundDialects() {
		for _, b := range bad {
			body, param, ok := d.body(b.field, b.value)
			if !ok {
				continue
			}
			code, _, raw := post(t, ts.URL+d.path, body)
			if code != 400 || !strings.Contains(raw, param+b.index) {
				t.Errorf("%s %s=%.40s: %d %s, want a 400 naming %s", d.name, b.field, b.value, code, raw, param+b.index)
			}
		}
	}
	good := []struct{ field, value string }{
		{"max_tokens", "1"},
		{"temperature", "0"},
		{"temperature", "2"},
		{"top_p", "1"},
		{"top_k", "-1"}, // off
		{"min_p", "0"},
		{"stop", `["` + strings.Repeat("x", MaxStopLen) + `"]`},
		{"top_logprobs", "20"},
		{"n", "2"},
	}
	for _, d := range boundDialects() {
		for _, g := range good {
			body, _, ok := d.body(g.field, g.value)
			if !ok {
				continue
			}
			if code, _, raw := post(t, ts.URL+d.path, body); code != 200 {
				t.Errorf("%s %s=%.40s: %d %s", d.name, g.field, g.value, code, raw)
			}
		}
	}
}

// TestMaxTokensZero checks max_tokens 0: refused where the API has no use
// for it, and on /v1/completions a request to generate nothing, the
// prompt echoed and scored when echo and logprobs ask.
func TestMaxTokensZero(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	for _, d := range boundDialects() {
		if d.name == "completions" || strings.HasPrefix(d.name, "ollama") {
			continue
		}
		body, param, _ := d.body("max_tokens", "0")
		if code, _, raw := post(t, ts.URL+d.path, body); code != 400 || !strings.Contains(raw, param) || !strings.Contains(raw, "at least 1") {
			t.Errorf("%s: max_tokens 0: %d %s", d.name, code, raw)
		}
		body, _, _ = d.body("max_tokens", "-1")
		if code, _, raw := post(t, ts.URL+d.path, body); code != 400 {
			t.Errorf("%s: max_tokens -1: %d %s", d.name, code, raw)
		}
	}
	// Ollama: num_predict 0 and -1 are no limit, as in Ollama.
	for _, path := range []string{"/api/generate", "/api/chat"} {
		body := `{"model":"chat","prompt":"Hello!","messages":[{"role":"user","content":"Hello!"}],"stream":false,"options":{"num_predict":0,"temperature":0}}`
		if code, v, raw := post(t, ts.URL+path, body); code != 200 || v["eval_count"].(float64) < 1 {
			t.Errorf("%s num_predict 0: %d %s", path, code, raw)
		}
	}

	code, v, raw := post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"The capital of Japan is","max_tokens":0}`)
	if code != 200 {
		t.Fatalf("completions max_tokens 0: %d %s", code, raw)
	}
	c := v["choices"].([]any)[0].(map[string]any)
	if c["text"] != "" || c["finish_reason"] != "length" || v["usage"].(map[string]any)["completion_tokens"].(float64) != 0 {
		t.Errorf("max_tokens 0 generated: %s", raw)
	}
	if code, _, raw := post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"Hi","max_tokens":-1}`); code != 400 || !strings.Contains(raw, "max_tokens") {
		t.Errorf("completions max_tokens -1: %d %s", code, raw)
	}

	// Scoring: echo, logprobs and max_tokens 0 give the prompt's tokens
	// with their log-probabilities, the first without one.
	const prompt = "The capital of Japan is Tokyo."
	code, v, raw = post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"`+prompt+`","max_tokens":0,"echo":true,"logprobs":2}`)
	if code != 200 {
		t.Fatalf("scoring: %d %s", code, raw)
	}
	c = v["choices"].([]any)[0].(map[string]any)
	lp := c["logprobs"].(map[string]any)
	tokens, logps, tops := lp["tokens"].([]any), lp["token_logprobs"].([]any), lp["top_logprobs"].([]any)
	var joined strings.Builder
	for _, tok := range tokens {
		joined.WriteString(tok.(string))
	}
	if c["text"] != prompt || joined.String() != prompt || len(tokens) < 3 {
		t.Fatalf("scoring: text %q, tokens %q", c["text"], tokens)
	}
	if logps[0] != nil || tops[0] != nil {
		t.Errorf("the first token has a log-probability: %v %v", logps[0], tops[0])
	}
	for i := 1; i < len(tokens); i++ {
		l, ok := logps[i].(float64)
		top, _ := tops[i].(map[string]any)
		if !ok || l > 0 || l < -50 || len(top) != 2 {
			t.Fatalf("token %d %q: logprob %v, top %v", i, tokens[i], logps[i], tops[i])
		}
		best := -1e9
		for _, x := range top {
			best = max(best, x.(float64))
		}
		if l > best+1e-4 {
			t.Errorf("token %d %q: logprob %v above the best alternative %v", i, tokens[i], l, best)
		}
	}

	// The same scores come back streamed, and they are the model's: a
	// greedy continuation of the prompt's first tokens is scored as the
	// likeliest token at each position.
	code, _, raw = post(t, ts.URL+"/v1/completions", `{"model":"chat","prompt":"`+prompt+`","max_tokens":0,"echo":true,"logprobs":2,"stream":true}`)
	events := sseEvents(raw)
	if code != 200 || len(events) < 3 || !strings.Contains(events[0], `"token_logprobs":[null,`) || !strings.Contains(events[0], fmt.Sprintf("%.6g", logps[1].(float64))[:6]) {
		t.Errorf("streamed scoring: %d %s", code, raw)
	}
}
