package server

import (
	"bufio"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/engine"
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

// BenchmarkFrame measures the encoding of one per-token frame of the
// OpenAI dialect (BenchmarkAnthropicFrame and BenchmarkOllamaFrame measure
// the others).
func BenchmarkFrame(b *testing.B) {
	enc := newChatChunker("chatcmpl-0123456789ABCDEFGHIJKL", 1700000000, "qwen3-8b")
	rs := &respState{buf: make([]byte, 0, 512)}
	for _, bm := range []struct {
		name string
		f    func()
	}{
		{"chat", func() { enc.delta(0, "content", " Tokyo", nil) }},
		{"responses", func() { rs.textDeltaFrame("response.output_text.delta", "msg_0123456789ABCDEFGHIJKL", " Tokyo") }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bm.f()
			}
		})
	}
}

// BenchmarkServerOverhead compares a decode through the HTTP server (a
// streamed chat completion over loopback, read by a client) with the same
// decode run in-process on the engine: the same prompt and sampling, a
// resident session with prefix reuse and a callback per token, as the
// server has. Each iteration times two of each, interleaved, and the
// benchmark reports the median of the per-iteration ratios
// (server/engine) and the overhead in percent it means, besides the time
// per token of each. Run it with a count of iterations, such as
// -benchtime=20x.
func BenchmarkServerOverhead(b *testing.B) {
	const n = 128
	s, ts := newTestServer(b, Config{})
	m := s.models[0]
	eng := m.eng
	body := `{"model":"chat","messages":[{"role":"user","content":"Hello!"}],"stream":true,"temperature":0,"max_tokens":128,"logit_bias":{"2":-100}}`

	// The sampling the server derives from the body.
	sample := m.SampleDefaults()
	sample.Temperature = 0
	sample.LogitBias = map[int32]float32{2: -100}
	req := &Request{Messages: userMessage("Hello!"), MaxTokens: n, Sample: sample}
	p, err := m.Prepare(req)
	if err != nil {
		b.Fatal(err)
	}
	sess := eng.NewSession(m.ctxLen)
	direct := func() time.Duration {
		t0 := time.Now()
		kept := sess.Reuse(p.ids)
		res, err := eng.Generate(context.Background(), sess, engine.Request{Prompt: p.ids[kept:], Sample: sample, MaxTokens: n},
			func(engine.Token) error { return nil })
		d := time.Since(t0)
		if err != nil || len(res.IDs) != n {
			b.Fatalf("direct: %v", err)
		}
		return d
	}
	client := ts.Client()
	served := func() time.Duration {
		t0 := time.Now()
		resp, err := client.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
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
		d := time.Since(t0)
		if chunks < n/2 {
			b.Fatalf("served: %d chunks", chunks)
		}
		return d
	}
	// Warm both paths: the resident sessions, the connection, the caches.
	direct()
	served()
	// Each iteration runs engine, server, server, engine (or the mirror
	// image), so that a linear drift in the machine's speed cancels out
	// of the iteration's ratio; the median ratio discards iterations hit
	// by other work on the machine.
	var ratios []float64
	var td, tsrv time.Duration
	for b.Loop() {
		var d, sv time.Duration
		if len(ratios)%2 == 0 {
			d += direct()
			sv += served()
			sv += served()
			d += direct()
		} else {
			sv += served()
			d += direct()
			d += direct()
			sv += served()
		}
		td += d
		tsrv += sv
		ratios = append(ratios, float64(sv)/float64(d))
	}
	slices.Sort(ratios)
	median := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		median = (median + ratios[len(ratios)/2-1]) / 2
	}
	iters := float64(2 * len(ratios) * n)
	b.ReportMetric(float64(td.Nanoseconds())/iters, "engine-ns/token")
	b.ReportMetric(float64(tsrv.Nanoseconds())/iters, "server-ns/token")
	b.ReportMetric(median, "server/engine")
	b.ReportMetric(100*(median-1), "overhead-%")
}
