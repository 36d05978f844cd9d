package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// The request fuzz targets drive the real handler in-process with
// lem-tiny, the embedded model, so that they need no fixtures. A body
// that passes validation really generates: seeds ask for a few tokens,
// the context is small and each request has a deadline, so that a
// mutation asking for many tokens costs at most that.

var (
	tinyOnce sync.Once
	tinyEng  *engine.Model
	tinyErr  error
)

// fuzzContext is the context length of the fuzzed model: room for a
// short conversation and a few tokens, so that no request generates for
// long.
const fuzzContext = 256

// fuzzDeadline bounds one fuzzed request; a request cut by it is not
// judged by its status.
const fuzzDeadline = 2 * time.Second

// newFuzzServer serves lem-tiny as "chat" through Server.Handler.
func newFuzzServer(tb testing.TB) (*Server, *Model) {
	tb.Helper()
	tinyOnce.Do(func() { tinyEng, tinyErr = engine.OpenTiny(engine.Options{Backend: cpu.New(0)}) })
	if tinyErr != nil {
		tb.Fatal(tinyErr)
	}
	m, err := NewModel("chat", tinyEng, ModelOptions{Context: fuzzContext})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, m)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s, m
}

// fuzzPost sends body to path as a local client would and checks the
// response: never a 5xx (unless the deadline cut the request), an error
// as a JSON object with an "error" member, a success as JSON, or as SSE
// or NDJSON frames that each hold JSON. It returns the status and body.
func fuzzPost(t *testing.T, h http.Handler, path string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "http://127.0.0.1"+path, bytes.NewReader(body))
	req.Host = "127.0.0.1"
	req.RemoteAddr = "127.0.0.1:50000"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	out := rec.Body.Bytes()
	if ctx.Err() != nil {
		return res.StatusCode, out
	}
	if res.StatusCode >= 500 {
		t.Fatalf("POST %s %q: status %d: %s", path, body, res.StatusCode, out)
	}
	ct := res.Header.Get("Content-Type")
	switch {
	case res.StatusCode >= 400:
		var e map[string]json.RawMessage
		if err := json.Unmarshal(out, &e); err != nil || e["error"] == nil {
			t.Fatalf("POST %s %q: status %d with a body that is not a JSON error: %s", path, body, res.StatusCode, out)
		}
	case strings.HasPrefix(ct, "text/event-stream"):
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if ok && data != "[DONE]" && !json.Valid([]byte(data)) {
				t.Fatalf("POST %s %q: SSE frame is not JSON: %s", path, body, data)
			}
		}
	case strings.HasPrefix(ct, "application/x-ndjson"):
		for line := range bytes.SplitSeq(bytes.TrimSpace(out), []byte("\n")) {
			if len(bytes.TrimSpace(line)) > 0 && !json.Valid(line) {
				t.Fatalf("POST %s %q: NDJSON line is not JSON: %s", path, body, line)
			}
		}
	default:
		if !json.Valid(out) {
			t.Fatalf("POST %s %q: status %d, %s body is not JSON: %s", path, body, res.StatusCode, ct, out)
		}
	}
	return res.StatusCode, out
}

// fuzzRoute is the body of a request fuzz target: seeds, then every input
// posted to path.
func fuzzRoute(f *testing.F, path string, seeds []string) {
	s, _ := newFuzzServer(f)
	h := s.Handler()
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzPost(t, h, path, body)
	})
}

// badBodies are seeds every route must refuse with a 4xx.
var badBodies = []string{`{"messages":7}`, `[]`, `null`, `{"messages":[{}]}`, `{`, ``, `{"model":"nope"}`}

// FuzzChatRequest posts arbitrary bodies to /v1/chat/completions.
func FuzzChatRequest(f *testing.F) {
	fuzzRoute(f, "/v1/chat/completions", append([]string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["a"],"n":2,"max_tokens":2,"stream":true}`,
		`{"model":"chat","max_tokens":3,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"1","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"model":"chat","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":3},"response_format":{"type":"text"},"reasoning_effort":"none","chat_template_kwargs":{"x":[1,{"a":null}]}}`,
		`{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}},"logprobs":true,"top_logprobs":2}`,
	}, badBodies...))
}

// FuzzCompletionRequest posts arbitrary bodies to /v1/completions.
func FuzzCompletionRequest(f *testing.F) {
	fuzzRoute(f, "/v1/completions", append([]string{
		`{"model":"chat","prompt":"Once","max_tokens":3}`,
		`{"model":"chat","prompt":["a","b"],"max_tokens":2,"n":2,"echo":true,"logprobs":2}`,
		`{"model":"chat","prompt":[1,2,3],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"chat","prompt":[[1,2],[3]],"max_tokens":0,"echo":true,"logprobs":1}`,
		`{"model":"chat","prompt":"x","suffix":"y"}`, `{"prompt":[]}`, `{"prompt":[[]]}`,
	}, badBodies...))
}

// FuzzAnthropicRequest posts arbitrary bodies to /v1/messages.
func FuzzAnthropicRequest(f *testing.F) {
	fuzzRoute(f, "/v1/messages", append([]string{
		`{"model":"chat","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"chat","max_tokens":3,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"a","name":"f","input":{"x":1}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"r"}]}]}],` +
			`"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"thinking":{"type":"enabled","budget_tokens":2}}`,
		`{"model":"chat","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}],"stop_sequences":["a"],"temperature":0.2,"output_config":{"format":{"type":"json_schema","schema":{}}}}`,
		`{"max_tokens":1,"messages":[{"role":"user","content":[{}]}]}`,
	}, badBodies...))
}

// FuzzAnthropicCountTokens posts arbitrary bodies to
// /v1/messages/count_tokens; a count it returns is a positive integer.
func FuzzAnthropicCountTokens(f *testing.F) {
	s, _ := newFuzzServer(f)
	h := s.Handler()
	for _, seed := range append([]string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"chat","system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{}}]}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}],"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"model":"chat","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r","is_error":true}]}]}`,
	}, badBodies...) {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		status, out := fuzzPost(t, h, "/v1/messages/count_tokens", body)
		if status != http.StatusOK {
			return
		}
		var c struct {
			InputTokens *int `json:"input_tokens"`
		}
		if err := json.Unmarshal(out, &c); err != nil || c.InputTokens == nil || *c.InputTokens <= 0 {
			t.Fatalf("%q: count %s", body, out)
		}
	})
}

// FuzzOllamaChatRequest posts arbitrary bodies to /api/chat.
func FuzzOllamaChatRequest(f *testing.F) {
	fuzzRoute(f, "/api/chat", append([]string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}`,
		`{"model":"chat","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","thinking":"t","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","content":"r","tool_name":"f"}],` +
			`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"think":"high","format":"json","options":{"num_predict":5,"stop":["x"],"seed":1}}`,
		`{"options":{"temperature":1e309}}`,
	}, badBodies...))
}

// FuzzOllamaGenerateRequest posts arbitrary bodies to /api/generate.
func FuzzOllamaGenerateRequest(f *testing.F) {
	fuzzRoute(f, "/api/generate", append([]string{
		`{"model":"chat","prompt":"hi","stream":false,"options":{"num_predict":3}}`,
		`{"model":"chat","prompt":"<|im_start|>user\nhi<|im_end|>\n","raw":true,"options":{"num_predict":2,"temperature":0}}`,
		`{"model":"chat","prompt":"hi","system":"s","think":false,"context":[1,2,3],"options":{"num_predict":2},"logprobs":true,"top_logprobs":1}`,
		`{"model":"chat","prompt":"","keep_alive":0}`, `{"model":"chat","prompt":"x","suffix":"y"}`, `{"model":"chat","prompt":"x","template":"{{.Prompt}}"}`,
	}, badBodies...))
}

// FuzzOllamaOptions posts /api/generate requests whose options and format
// are arbitrary JSON values.
func FuzzOllamaOptions(f *testing.F) {
	s, _ := newFuzzServer(f)
	h := s.Handler()
	for _, seed := range [][2]string{
		{`{"num_predict":2}`, `null`},
		{`{"num_predict":3,"temperature":0.5,"top_k":4,"top_p":0.9,"min_p":0.1,"repeat_penalty":1.1,"repeat_last_n":8,"presence_penalty":0.5,"frequency_penalty":0.5,"seed":7,"stop":["x","y"],"num_ctx":128}`, `"json"`},
		{`{"num_predict":4}`, `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`},
		{`{"num_predict":-1,"num_ctx":1}`, `{"type":"array","items":{"enum":[1,"a",null]},"maxItems":2}`},
		{`{"temperature":"hot"}`, `"xml"`},
		{`{"stop":"x","num_predict":1e9,"mirostat":2,"num_gpu":1,"use_mmap":false}`, `{"$ref":"#/x"}`},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, options, format []byte) {
		if !json.Valid(options) || !json.Valid(format) {
			return
		}
		body := []byte(`{"model":"chat","prompt":"hi","stream":false,"options":` + string(options) + `,"format":` + string(format) + `}`)
		fuzzPost(t, h, "/api/generate", body)
	})
}

// FuzzOllamaShow posts arbitrary bodies to /api/show.
func FuzzOllamaShow(f *testing.F) {
	fuzzRoute(f, "/api/show", append([]string{`{"model":"chat"}`, `{"name":"chat","verbose":true}`, `{"model":"chat:latest"}`}, badBodies...))
}

// FuzzResponsesInput does the same for /v1/responses input items.
func FuzzResponsesInput(f *testing.F) {
	for _, seed := range []string{`"hi"`, `[{"role":"user","content":"hi"}]`,
		`[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]`,
		`[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image"}]}]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		if !json.Valid(input) {
			return
		}
		if _, err := respMessages(input, nil); err != nil {
			if e := AsError(err); e.Status != 400 {
				t.Fatalf("%s: %v", input, err)
			}
		}
	})
}
