package server

import (
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

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

var (
	chatModelOnce sync.Once
	chatModel     *engine.Model
	chatModelErr  error
)

// openChatModel loads the chat-model fixture once for the package.
func openChatModel(t testing.TB) *engine.Model {
	t.Helper()
	dir := fixtures.Dir(t, "chat-model")
	chatModelOnce.Do(func() { chatModel, chatModelErr = engine.Open(dir, engine.Options{Backend: cpu.New(0)}) })
	if chatModelErr != nil {
		t.Fatal(chatModelErr)
	}
	return chatModel
}

// newTestServer serves the chat model as "chat" on a loopback port.
func newTestServer(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	return serveModels(t, cfg, mustModel(t, "chat", openChatModel(t), ModelOptions{}))
}

// mustModel makes e the served model id, failing the test on error.
func mustModel(t testing.TB, id string, e *engine.Model, opts ModelOptions) *Model {
	t.Helper()
	m, err := NewModel(id, e, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serveModels serves the models with cfg on a loopback port, its logs
// discarded when cfg has no logger; the server closes when the test ends.
func serveModels(t testing.TB, cfg Config, models ...*Model) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(cfg, models...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	return s, ts
}

// post sends a JSON body and returns the status and decoded response.
func post(t testing.TB, url, body string, hdr ...string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var v map[string]any
	json.Unmarshal(data, &v)
	return resp.StatusCode, v, string(data)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(body string) []string {
	var out []string
	for _, block := range strings.Split(body, "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, d)
			}
		}
	}
	return out
}

func mustJSON(v any) string {
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(v)
	return b.String()
}

// holdModel takes every slot of m's queue, as requests running on all of
// them would; the function returned gives them back.
func holdModel(t testing.TB, m *Model) (release func()) {
	t.Helper()
	for range m.q.slots {
		if err := m.q.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for range m.q.slots {
			m.q.release()
		}
	}
}
