package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestQueuedStreamKeepAlive queues a streamed request of every dialect
// behind the model's running request: its status and headers arrive
// while the model is still held, then keep-alive frames its clients
// ignore, and once the model is free the reply streams as usual.
func TestQueuedStreamKeepAlive(t *testing.T) {
	s, ts := newTestServer(t, Config{KeepAlive: 10 * time.Millisecond})
	m := s.models[0]
	user := `"messages":[{"role":"user","content":"Hello!"}]`
	sse := func(frame string) func(*bufio.Reader) error {
		return func(r *bufio.Reader) error {
			got := make([]byte, len(frame))
			if _, err := io.ReadFull(r, got); err != nil {
				return err
			}
			if string(got) != frame {
				return &Error{Message: "got frame " + strconvQuote(string(got)) + ", want " + strconvQuote(frame)}
			}
			return nil
		}
	}
	ndjson := func(field string) func(*bufio.Reader) error {
		return func(r *bufio.Reader) error {
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				return err
			}
			text := v["response"]
			if field == "message" {
				msg, _ := v["message"].(map[string]any)
				text = msg["content"]
			}
			if v["done"] != false || text != "" || v["model"] != "chat" {
				return &Error{Message: "keep-alive line " + strconvQuote(line)}
			}
			return nil
		}
	}
	for _, tc := range []struct {
		name, path, body, ctype, end string
		keepAlive                    func(*bufio.Reader) error
	}{
		{"chat", "/v1/chat/completions", `{"model":"chat",` + user + `,"stream":true,"max_tokens":5}`,
			"text/event-stream", "data: [DONE]\n\n", sse(": keep-alive\n\n")},
		{"completions", "/v1/completions", `{"model":"chat","prompt":"Hello","stream":true,"max_tokens":5}`,
			"text/event-stream", "data: [DONE]\n\n", sse(": keep-alive\n\n")},
		{"responses", "/v1/responses", `{"model":"chat","input":"Hello!","stream":true,"max_output_tokens":5}`,
			"text/event-stream", `"type":"response.incomplete"`, sse(": keep-alive\n\n")},
		{"messages", "/v1/messages", `{"model":"chat","max_tokens":5,` + user + `,"stream":true}`,
			"text/event-stream", "event: message_stop\n", sse("event: ping\ndata: {\"type\":\"ping\"}\n\n")},
		{"ollama chat", "/api/chat", `{"model":"chat",` + user + `,"options":{"num_predict":5}}`,
			"application/x-ndjson", `"done":true`, ndjson("message")},
		{"ollama generate", "/api/generate", `{"model":"chat","prompt":"Hello!","options":{"num_predict":5}}`,
			"application/x-ndjson", `"done":true`, ndjson("response")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Hold the model, as long requests would.
			release := holdModel(t, m)
			held := true
			defer func() {
				if held {
					release()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+tc.path, strings.NewReader(tc.body))
			type answer struct {
				resp *http.Response
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				got <- answer{resp, err}
			}()
			var resp *http.Response
			select {
			case a := <-got:
				if a.err != nil {
					t.Fatal(a.err)
				}
				resp = a.resp
			case <-time.After(30 * time.Second):
				t.Fatal("no status and headers while the request waits for the model")
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) {
				t.Fatalf("queued: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			r := bufio.NewReader(resp.Body)
			for i := range 3 {
				if err := tc.keepAlive(r); err != nil {
					t.Fatalf("keep-alive frame %d: %v", i, err)
				}
			}
			if n := m.q.waiting(); n != 1 {
				t.Fatalf("%d requests wait, want the one streaming keep-alives", n)
			}
			held = false
			release()
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(rest), tc.end) {
				t.Errorf("the reply after the wait lacks %q:\n%s", tc.end, rest)
			}
		})
	}
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(data), `lem_queue_wait_seconds_count{model="chat"} 6`) {
		t.Errorf("metrics lack the six waits:\n%s", grepLines(string(data), "lem_queue_wait"))
	}
	if !strings.Contains(string(data), `lem_queue_wait_seconds_bucket{model="chat",le="0.001"} 0`) {
		t.Errorf("a wait of three keep-alives counted under 1 ms:\n%s", grepLines(string(data), "lem_queue_wait"))
	}
}

// TestQueuedStreamClientLeaves checks that a queued stream whose client
// goes away gives up its place.
func TestQueuedStreamClientLeaves(t *testing.T) {
	s, ts := newTestServer(t, Config{KeepAlive: 10 * time.Millisecond})
	m := s.models[0]
	defer holdModel(t, m)()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(`{"model":"chat",`+japan+`,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != ": keep-alive\n" {
		t.Fatalf("%q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for m.q.waiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request whose client left still waits")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRetryAfter checks that refusals for a full queue (429) and for
// shutting down (503) say when to retry, in every dialect.
func TestRetryAfter(t *testing.T) {
	s, ts := newTestServer(t, Config{MaxQueue: -1})
	m := s.models[0]
	release := holdModel(t, m)
	user := `"messages":[{"role":"user","content":"Hello!"}]`
	routes := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"chat",` + user + `,"stream":true}`},
		{"/v1/completions", `{"model":"chat","prompt":"Hello"}`},
		{"/v1/responses", `{"model":"chat","input":"Hello!"}`},
		{"/v1/messages", `{"model":"chat","max_tokens":5,` + user + `,"stream":true}`},
		{"/api/chat", `{"model":"chat",` + user + `}`},
		{"/api/generate", `{"model":"chat","prompt":"Hello!","stream":false}`},
	}
	check := func(status int, want string) {
		t.Helper()
		for _, rt := range routes {
			resp, err := http.Post(ts.URL+rt.path, "application/json", strings.NewReader(rt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != status || resp.Header.Get("Retry-After") != want {
				t.Errorf("%s: status %d, Retry-After %q; want %d, %q", rt.path, resp.StatusCode, resp.Header.Get("Retry-After"), status, want)
			}
		}
	}
	// No request has ended yet: the estimate is the minimum.
	check(http.StatusTooManyRequests, "1")
	release()
	s.stopAdmitting()
	check(http.StatusServiceUnavailable, "5")
}

// TestQueueRetryAfterEstimate checks the estimate of a full queue's
// Retry-After: what the running request has left of the average hold.
func TestQueueRetryAfterEstimate(t *testing.T) {
	for _, tc := range []struct {
		hold, ran, want time.Duration
	}{
		{0, 0, time.Second}, // nothing ended yet
		{10 * time.Second, 3 * time.Second, 7 * time.Second}, // 7 s left
		{10 * time.Second, 30 * time.Second, time.Second},    // overdue
		{10 * time.Minute, 0, time.Minute},                   // capped
		{2500 * time.Millisecond, 0, 3 * time.Second},        // rounded up
	} {
		q := newQueue(1, 0, nil)
		if err := q.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		q.hold, q.running[0] = tc.hold, time.Now().Add(-tc.ran)
		q.mu.Unlock()
		err := q.acquire(context.Background())
		e, ok := err.(*Error)
		if !ok || e.Code != CodeQueueFull {
			t.Fatalf("acquire on a full queue: %v", err)
		}
		if e.RetryAfter != tc.want {
			t.Errorf("hold %v, ran %v: Retry-After %v, want %v", tc.hold, tc.ran, e.RetryAfter, tc.want)
		}
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// grepLines returns the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
