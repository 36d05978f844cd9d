package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

type dtoMetric = dto.Metric

const japan = `"messages":[{"role":"user","content":"What is the capital of Japan?"}]`

func TestHTTPErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxBodyBytes: 4096})
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		param  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model":"chat",`, 400, ""},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, ""},
		{"empty body", "/v1/chat/completions", ``, 400, ""},
		{"wrong type", "/v1/chat/completions", `{"model":"chat",` + japan + `,"temperature":"hot"}`, 400, "temperature"},
		{"bad message", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":42}]}`, 400, "messages[0]"},
		{"no messages", "/v1/chat/completions", `{"model":"chat","messages":[]}`, 400, "messages"},
		{"no model", "/v1/chat/completions", `{` + japan + `}`, 400, "model"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9",` + japan + `}`, 404, "model"},
		{"too large", "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, ""},
		{"max tokens over context", "/v1/chat/completions", `{"model":"chat",` + japan + `,"max_tokens":5000}`, 400, "max_tokens"},
		{"max completion tokens over context", "/v1/chat/completions", `{"model":"chat",` + japan + `,"max_completion_tokens":5000}`, 400, "max_completion_tokens"},
		{"bad tool choice", "/v1/chat/completions", `{"model":"chat",` + japan + `,"tool_choice":"sometimes"}`, 400, "tool_choice"},
		{"bad tool", "/v1/chat/completions", `{"model":"chat",` + japan + `,"tools":[{"type":"function"}]}`, 400, "tools[0]"},
		{"json schema", "/v1/chat/completions", `{"model":"chat",` + japan + `,"response_format":{"type":"json_schema"}}`, 400, "response_format.json_schema"},
		{"json schema keyword", "/v1/chat/completions", `{"model":"chat",` + japan + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"s":{"type":"string","pattern":"\\ba"}}}}}}`, 400, "response_format.json_schema.schema.properties.s.pattern"},
		{"json schema shape", "/v1/chat/completions", `{"model":"chat",` + japan + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","required":["a"]}}}}`, 400, "response_format.json_schema.schema.required"},
		{"response_format xml", "/v1/chat/completions", `{"model":"chat",` + japan + `,"response_format":{"type":"xml"}}`, 400, "response_format.type"},
		{"responses schema keyword", "/v1/responses", `{"model":"chat","input":"hi","text":{"format":{"type":"json_schema","name":"x","strict":true,"schema":{"type":"string","format":"hostname"}}}}`, 400, "text.format.schema.format"},
		{"bad effort", "/v1/chat/completions", `{"model":"chat",` + japan + `,"reasoning_effort":"extreme"}`, 400, "reasoning_effort"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"model":"chat",` + japan + `,"top_logprobs":3}`, 400, "top_logprobs"},
		{"stop type", "/v1/chat/completions", `{"model":"chat",` + japan + `,"stop":5}`, 400, ""},
		{"logit bias key", "/v1/chat/completions", `{"model":"chat",` + japan + `,"logit_bias":{"abc":1}}`, 400, "logit_bias"},
		{"suffix with ids", "/v1/completions", `{"model":"chat","prompt":[1,2],"suffix":"b"}`, 400, "suffix"},
		{"no prompt", "/v1/completions", `{"model":"chat"}`, 400, "prompt"},
		{"prompt type", "/v1/completions", `{"model":"chat","prompt":{"a":1}}`, 400, "prompt"},
		{"responses no input", "/v1/responses", `{"model":"chat"}`, 400, "input"},
		{"responses bad item", "/v1/responses", `{"model":"chat","input":[{"type":"web_search_call"}]}`, 400, "input[0].type"},
		{"responses bad tool", "/v1/responses", `{"model":"chat","input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{"responses unknown previous", "/v1/responses", `{"model":"chat","input":"hi","previous_response_id":"resp_nope"}`, 404, "previous_response_id"},
		{"unknown route", "/v1/engines", `{}`, 404, ""},
		{"wrong method", "/v1/models", `{}`, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, raw)
			}
			e, _ := v["error"].(map[string]any)
			if e == nil || e["message"] == "" || e["type"] == nil {
				t.Fatalf("no OpenAI error object: %s", raw)
			}
			if p, _ := e["param"].(string); tt.param != "" && p != tt.param {
				t.Errorf("param %q, want %q (%s)", p, tt.param, raw)
			}
		})
	}
}

func TestContextErrorNamesNumbers(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	_, v, _ := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`,"max_tokens":2040}`)
	msg := v["error"].(map[string]any)["message"].(string)
	for _, n := range []string{"15", "2040", "2055", "2048", "2033"} {
		if !strings.Contains(msg, n) {
			t.Errorf("message %q lacks %s", msg, n)
		}
	}
}

func TestAuth(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "sekret"})
	body := `{"model":"chat",` + japan + `,"max_tokens":2}`
	for _, tt := range []struct {
		hdr  []string
		want int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer wrong"}, 401},
		{[]string{"Authorization", "Bearer sekret"}, 200},
		{[]string{"Authorization", "bearer sekret"}, 200},
		{[]string{"X-Api-Key", "sekret"}, 200},
		{[]string{"X-Api-Key", "sekre"}, 401},
	} {
		if code, _, raw := post(t, ts.URL+"/v1/chat/completions", body, tt.hdr...); code != tt.want {
			t.Errorf("headers %v: status %d, want %d: %s", tt.hdr, code, tt.want, raw)
		}
	}
	for path, want := range map[string]int{"/health": 200, "/v1/models": 401, "/metrics": 401} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a key: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestCORS(t *testing.T) {
	_, ts := newTestServer(t, Config{CORSOrigins: []string{"http://app.example"}})
	for origin, want := range map[string]string{"http://app.example": "http://app.example", "http://evil.example": ""} {
		req, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != want || resp.StatusCode != 204 {
			t.Errorf("preflight from %s: %d allow-origin %q, want %q", origin, resp.StatusCode, got, want)
		}
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Origin", "http://app.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example" {
		t.Error("no CORS header on an allowed origin's request")
	}
}

func TestQueueFullAndShutdown(t *testing.T) {
	s, ts := newTestServer(t, Config{MaxQueue: -1})
	m := s.models[0]
	// Hold the model as running requests would.
	release := holdModel(t, m)
	code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`,"stream":true}`)
	if code != 429 || v["error"].(map[string]any)["code"] != CodeQueueFull {
		t.Errorf("full queue: %d %s", code, raw)
	}
	release()
	s.stopAdmitting()
	if code, _, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`}`); code != 503 {
		t.Errorf("shutting down: %d %s", code, raw)
	}
}

func TestMetricsAndHealth(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`,"temperature":0}`)
	post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`,"temperature":0}`)
	post(t, ts.URL+"/v1/chat/completions", `{"model":"nope",`+japan+`}`)
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(data)
	for _, want := range []string{
		`lem_http_requests_total{code="200",route="POST /v1/chat/completions"} 2`,
		`lem_http_requests_total{code="404",route="POST /v1/chat/completions"} 1`,
		`lem_prompt_tokens_total{model="chat"} 30`,
		`lem_generated_tokens_total{model="chat"} 48`,
		// The 15-token prompt fills no block of the cache: nothing of
		// it is kept (TestParallelMetrics counts hits of a long prefix).
		`lem_prefix_cache_hit_tokens_total{model="chat"} 0`,
		`lem_time_to_first_token_seconds_count{model="chat"} 2`,
		`lem_inter_token_latency_seconds_count{model="chat"} 46`,
		`lem_queue_depth{model="chat"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	resp, err = http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(data), `"ok"`) {
		t.Errorf("health: %d %s", resp.StatusCode, data)
	}
}

// longStream is a streamed request that cannot end early: the end-of-turn
// token is banned.
const longStream = `{"model":"chat","messages":[{"role":"user","content":"Hello!"}],"stream":true,"max_tokens":%d,"logit_bias":{"2":-100}}`

func serveLoopback(t *testing.T, s *Server, drain time.Duration) (url string, stop context.CancelFunc, done chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, drain) }()
	return "http://" + ln.Addr().String(), cancel, done
}

// TestGracefulShutdown stops the server while a stream runs: the stream
// finishes, new connections are refused.
func TestGracefulShutdown(t *testing.T) {
	_, m := newTestModel(t, Config{})
	s := m.srv
	url, stop, done := serveLoopback(t, s, 30*time.Second)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(longStream, "%d", "60", 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop()
	rest, _ := io.ReadAll(r)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"length"`) {
		t.Errorf("the stream did not finish: ...%s", rest[max(0, len(rest)-200):])
	}
	if err := <-done; err != nil && err != http.ErrServerClosed {
		t.Errorf("Serve: %v", err)
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

// TestShutdownDeadline cuts a stream that outlasts the drain deadline.
func TestShutdownDeadline(t *testing.T) {
	_, m := newTestModel(t, Config{})
	url, stop, done := serveLoopback(t, m.srv, 100*time.Millisecond)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(longStream, "%d", "2000", 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	r.ReadString('\n')
	start := time.Now()
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the drain deadline")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	rest, _ := io.ReadAll(r)
	if strings.Contains(string(rest), "[DONE]") {
		t.Error("a 2000-token stream finished within the drain deadline")
	}
}

// TestDisconnectFreesModel closes a stream mid-way: generation stops, and
// the model is free for the next request long before the abandoned one
// could have finished.
func TestDisconnectFreesModel(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(strings.Replace(longStream, "%d", "2000", 1)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for range 6 {
		r.ReadString('\n')
	}
	cancel()
	resp.Body.Close()
	code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat",`+japan+`,"chat_template_kwargs":{"enable_thinking":false},"temperature":0}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	msg := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "The capital of Japan is Tokyo." {
		t.Errorf("reply %v", msg)
	}
	// The abandoned request stopped after a handful of tokens (its first
	// chunks plus the time the server took to see the connection close).
	var gen dtoMetric
	s.models[0].obs.genTokens.Write(&gen)
	t.Logf("abandoned: %v tokens", gen.GetCounter().GetValue()-7)
	if n := gen.GetCounter().GetValue() - 7; n > 200 {
		t.Errorf("the abandoned request generated %v tokens", n)
	}
}

// TestModelsBothDialects checks that /v1/models answers in a shape both
// the OpenAI and the Anthropic clients read, pages as Anthropic's does,
// and reports errors in the shape of the client's dialect.
func TestModelsBothDialects(t *testing.T) {
	var models []*Model
	for _, id := range []string{"a", "b", "c"} {
		m, err := NewModel(id, openChatModel(t), ModelOptions{Created: time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, m)
	}
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, models...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	get := func(path string, anthropic bool) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if anthropic {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, v
	}
	ids := func(v map[string]any) string {
		var out []string
		for _, d := range v["data"].([]any) {
			out = append(out, d.(map[string]any)["id"].(string))
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct {
		path, ids   string
		more        bool
		first, last any
	}{
		{"/v1/models", "a,b,c", false, "a", "c"},
		{"/v1/models?limit=2", "a,b", true, "a", "b"},
		{"/v1/models?limit=2&after_id=b", "c", false, "c", "c"},
		{"/v1/models?limit=1&before_id=c", "b", true, "b", "b"},
		{"/v1/models?after_id=c", "", false, nil, nil},
	} {
		code, v := get(tt.path, true)
		if code != 200 || ids(v) != tt.ids || v["has_more"] != tt.more || v["first_id"] != tt.first || v["last_id"] != tt.last || v["object"] != "list" {
			t.Errorf("%s: %d %v", tt.path, code, v)
		}
	}
	_, v := get("/v1/models", false)
	m := v["data"].([]any)[0].(map[string]any)
	for k, want := range map[string]any{"object": "model", "type": "model", "created": 1746100800.0, "created_at": "2025-05-01T12:00:00Z", "display_name": "a", "owned_by": "lem"} {
		if m[k] != want {
			t.Errorf("model %s = %v, want %v", k, m[k], want)
		}
	}
	// Errors in each dialect's shape.
	for _, tt := range []struct {
		path      string
		anthropic bool
		status    int
	}{
		{"/v1/models/nope", true, 404}, {"/v1/models/nope", false, 404},
		{"/v1/models?limit=0", true, 400}, {"/v1/models?limit=x", false, 400},
		{"/v1/models?after_id=zz", true, 404}, {"/v1/models?after_id=a&before_id=c", true, 400},
	} {
		code, v := get(tt.path, tt.anthropic)
		e, _ := v["error"].(map[string]any)
		switch {
		case code != tt.status || e == nil || e["message"] == "":
			t.Errorf("%s: %d %v", tt.path, code, v)
		case tt.anthropic && (v["type"] != "error" || e["type"] == "invalid_request_error" && tt.status == 404):
			t.Errorf("%s: not Anthropic's shape: %v", tt.path, v)
		case !tt.anthropic && e["code"] == nil:
			t.Errorf("%s: not OpenAI's shape: %v", tt.path, v)
		}
	}
}
