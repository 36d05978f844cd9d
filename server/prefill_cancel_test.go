package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/synth"
)

// newSlowServer serves as "slow" a random-weight model whose prefill is slow
// on the CPU (lem synth's small geometry: about a second for 2,048 tokens
// on two idle cores).
func newSlowServer(t *testing.T) (*Model, *httptest.Server) {
	t.Helper()
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Options{Like: "small", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	em, err := engine.Open(dir, engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	// One sequence at a time: the test is of a request queued behind
	// another's prefill.
	m := mustModel(t, "slow", em, ModelOptions{Context: 4096, Parallel: 1})
	_, ts := serveModels(t, Config{}, m)
	return m, ts
}

// TestDisconnectDuringPrefill has a client leave while the model prefills
// its long prompt, with a second request queued behind it: the model is
// freed within a chunk, so the queued request is served long before the
// abandoned prefill would have ended, and its reply is the one it gets
// from an idle server (the cancelled prefill left the resident session
// consistent).
func TestDisconnectDuringPrefill(t *testing.T) {
	m, ts := newSlowServer(t)
	long := func(seed int) []int32 {
		ids := make([]int32, 2048)
		for i := range ids {
			ids[i] = int32((i*7919 + seed) % 500)
		}
		return ids
	}
	body := func(prompt []int32, maxTokens int, stream bool) []byte {
		b, err := json.Marshal(map[string]any{"model": "slow", "prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": stream})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	complete := func(prompt []int32) (string, error) {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", bytes.NewReader(body(prompt, 8, false)))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("status %d: %s", resp.StatusCode, data)
		}
		return string(data), err
	}
	text := func(data string) string {
		var v struct{ Choices []struct{ Text string } }
		if err := json.Unmarshal([]byte(data), &v); err != nil || len(v.Choices) != 1 {
			t.Fatalf("completion %q: %v", data, err)
		}
		return v.Choices[0].Text
	}

	// B's reply from the idle server, and how long a long prompt's prefill
	// takes (one token generated).
	short := long(1)[:24]
	refB, err := complete(short)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := complete(long(2)); err != nil {
		t.Fatal(err)
	}
	full := time.Since(t0)

	// A streams a long prompt of its own (nothing in common with the
	// resident session); its headers come once it holds the model.
	ctxA, leave := context.WithCancel(context.Background())
	defer leave()
	reqA, err := http.NewRequestWithContext(ctxA, "POST", ts.URL+"/v1/completions", bytes.NewReader(body(long(3), 8, true)))
	if err != nil {
		t.Fatal(err)
	}
	reqA.Header.Set("Content-Type", "application/json")
	respA, err := http.DefaultClient.Do(reqA)
	if err != nil {
		t.Fatal(err)
	}
	defer respA.Body.Close()

	// B queues behind A.
	type reply struct {
		data string
		err  error
		at   time.Time
	}
	done := make(chan reply, 1)
	go func() {
		data, err := complete(short)
		done <- reply{data, err, time.Now()}
	}()
	for deadline := time.Now().Add(30 * time.Second); m.q.waiting() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	// A leaves an eighth of the way into its prefill.
	time.Sleep(full / 8)
	left := time.Now()
	leave()

	var b reply
	select {
	case b = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the queued request was not served")
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	if got, want := text(b.data), text(refB); got != want {
		t.Errorf("after the abandoned prefill the reply is %q, from an idle server %q", got, want)
	}
	// Without cancellation inside the prefill, B waits for the rest of
	// A's: about 7/8 of full.
	if d := b.at.Sub(left); d > full/2 {
		t.Errorf("the queued request was served %v after the client left; a long prompt's prefill takes %v", d, full)
	}
	t.Logf("prefill of %d tokens %v; the queued request was served %v after the client left", len(long(0)), full, b.at.Sub(left))
}
