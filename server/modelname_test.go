package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// TestModelNames checks that a server of one model answers any model name
// with it, in every dialect, as llama-server does, and that a server of
// two answers an unknown name with 404.
func TestModelNames(t *testing.T) {
	_, one := newTestServer(t, Config{})
	tiny, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewModel("chat", openChatModel(t), ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewModel("tiny", tiny, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := New(Config{Logger: slog.New(slog.DiscardHandler)}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	two := httptest.NewServer(s2.Handler())
	t.Cleanup(func() { s2.Close(); two.Close() })

	const msg = `"messages":[{"role":"user","content":"What is the capital of Japan?"}]`
	for _, tt := range []struct{ path, body, model string }{
		{"/v1/chat/completions", `{"model":"gpt-4o","max_tokens":2,` + msg + `}`, "chat"},
		{"/v1/completions", `{"model":"text-davinci-003","max_tokens":2,"prompt":"Hi"}`, "chat"},
		{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":2,` + msg + `}`, "chat"},
		{"/api/chat", `{"model":"llama3.2","stream":false,"options":{"num_predict":2},` + msg + `}`, ""},
		{"/api/generate", `{"model":"qwen3:8b","stream":false,"prompt":"Hi","options":{"num_predict":2}}`, ""},
		{"/api/show", `{"model":"mistral"}`, ""},
		{"/v1/embeddings", `{"model":"text-embedding-3-small","input":"a"}`, ""},
	} {
		code, v, raw := post(t, one.URL+tt.path, tt.body)
		if code != 200 {
			t.Errorf("one model, %s: %d %s", tt.path, code, raw)
			continue
		}
		if tt.model != "" && v["model"] != tt.model {
			t.Errorf("one model, %s: answered as model %v, want %s", tt.path, v["model"], tt.model)
		}
		code, _, raw = post(t, two.URL+tt.path, tt.body)
		var v2 map[string]any
		json.Unmarshal([]byte(tt.body), &v2)
		if code != 404 || !strings.Contains(raw, v2["model"].(string)) {
			t.Errorf("two models, %s: %d %s, want 404", tt.path, code, raw)
		}
	}
	// The served names still work with two.
	for _, id := range []string{"chat", "tiny"} {
		if code, v, raw := post(t, two.URL+"/v1/chat/completions", `{"model":"`+id+`","max_tokens":2,`+msg+`}`); code != 200 || v["model"] != id {
			t.Errorf("two models, %s: %d %s", id, code, raw)
		}
	}
}

// lockedBuffer is a bytes.Buffer that logs may write to from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogDurations checks that the request and generation logs give their
// durations in milliseconds, as numbers under duration_ms.
func TestLogDurations(t *testing.T) {
	var buf lockedBuffer
	s, ts := newTestServer(t, Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if code, _, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","max_tokens":3,"messages":[{"role":"user","content":"Hi"}]}`); code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	s.Close()
	seen := map[string]bool{}
	for line := range strings.Lines(buf.String()) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := e["msg"].(string)
		if msg != "request" && msg != "generation" {
			continue
		}
		seen[msg] = true
		ms, ok := e["duration_ms"].(float64)
		if !ok || ms <= 0 || ms > 10*60*1000 {
			t.Errorf("%s log: duration_ms = %v, want milliseconds: %s", msg, e["duration_ms"], line)
		}
		if _, ok := e["duration"]; ok {
			t.Errorf("%s log still has a duration in nanoseconds: %s", msg, line)
		}
	}
	if !seen["request"] || !seen["generation"] {
		t.Errorf("logged %v, want request and generation lines:\n%s", seen, buf.String())
	}
}
