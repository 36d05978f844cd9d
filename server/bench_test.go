package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"lem/engine"
)

// TestFrameEncodingAllocs checks that encoding a per-token stream frame
// allocates nothing, for each dialect's text deltas.
func TestFrameEncodingAllocs(t *testing.T) {
	enc := newChatChunker("chatcmpl-0123456789", 1700000000, "chat")
	comp := newCompletionChunker("cmpl-0123456789", 1700000000, "chat")
	rs := &respState{buf: make([]byte, 0, 512)}
	for name, f := range map[string]func(){
		"chat content":      func() { enc.delta(0, "content", " Tokyo", nil) },
		"chat reasoning":    func() { enc.delta(0, "reasoning_content", " \"quoted\"\n", nil) },
		"completion":        func() { comp.text(0, " Tokyo", nil, "") },
		"responses text":    func() { rs.textDeltaFrame("response.output_text.delta", "msg_0123456789", " Tokyo") },
		"responses reasons": func() { rs.textDeltaFrame("response.reasoning_text.delta", "rs_0123456789", "é") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per frame", name, n)
		}
	}
	// And the frames are valid.
	for _, frame := range [][]byte{enc.delta(1, "content", "a\"b\\c\n\x01é", nil), comp.text(2, "x", nil, "stop")} {
		data, ok := strings.CutPrefix(string(frame), "data: ")
		if !ok || !strings.HasSuffix(data, "\n\n") || !json.Valid([]byte(data)) {
			t.Errorf("bad frame %q", frame)
		}
	}
	frame := string(rs.textDeltaFrame("response.output_text.delta", "msg_1", "hi"))
	if _, data, ok := strings.Cut(frame, "\ndata: "); !ok || !json.Valid([]byte(data)) {
		t.Errorf("bad frame %q", frame)
	}
}

// BenchmarkFrame measures the encoding of one per-token frame.
func BenchmarkFrame(b *testing.B) {
	enc := newChatChunker("chatcmpl-0123456789ABCDEFGHIJKL", 1700000000, "qwen3-8b")
	rs := &respState{buf: make([]byte, 0, 512)}
	b.Run("chat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			enc.delta(0, "content", " Tokyo", nil)
		}
	})
	b.Run("responses", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rs.textDeltaFrame("response.output_text.delta", "msg_0123456789ABCDEFGHIJKL", " Tokyo")
		}
	})
}

// BenchmarkServerOverhead compares a decode through the HTTP server (a
// streamed chat completion over loopback, read by a client) with the same
// decode run in-process on the engine, in the same run, and reports the
// server's share as overhead-%.
func BenchmarkServerOverhead(b *testing.B) {
	const n = 128
	s, ts := newTestServer(b, Config{})
	m := s.models[0]
	eng := m.eng
	body := `{"model":"chat","messages":[{"role":"user","content":"Hello!"}],"stream":true,"temperature":0,"max_tokens":128,"logit_bias":{"2":-100}}`

	// The engine alone: the same prompt, a resident session with prefix
	// reuse, and a callback per token, as the server has.
	req := &Request{Messages: userMessage("Hello!"), MaxTokens: n, Sample: engine.SampleParams{LogitBias: map[int32]float32{2: -100}}}
	p, err := m.Prepare(req)
	if err != nil {
		b.Fatal(err)
	}
	sess := eng.NewSession(m.ctxLen)
	direct := func() {
		kept := sess.Reuse(p.ids)
		res, err := eng.Generate(context.Background(), sess, engine.Request{Prompt: p.ids[kept:], Sample: req.Sample, MaxTokens: n},
			func(engine.Token) error { return nil })
		if err != nil || len(res.IDs) != n {
			b.Fatalf("direct: %v", err)
		}
	}
	served := func() {
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		chunks := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				chunks++
			}
		}
		resp.Body.Close()
		if chunks < n/2 {
			b.Fatalf("served: %d chunks", chunks)
		}
	}
	direct()
	served()
	var td, ts2 time.Duration
	for b.Loop() {
		t0 := time.Now()
		direct()
		t1 := time.Now()
		served()
		td += t1.Sub(t0)
		ts2 += time.Since(t1)
	}
	b.ReportMetric(float64(td.Nanoseconds())/float64(b.N*n), "engine-ns/token")
	b.ReportMetric(float64(ts2.Nanoseconds())/float64(b.N*n), "server-ns/token")
	b.ReportMetric(100*(float64(ts2)/float64(td)-1), "overhead-%")
}
