package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/chat"
)

// TestPrepareGate checks the byte semaphore: requests that fit go at
// once, others wait in arrival order, one heavier than the whole bound
// runs alone, and a request whose context ends stops waiting without
// keeping bytes.
func TestPrepareGate(t *testing.T) {
	g := newPrepareGate(100)
	g.freeMem = func() {}
	ctx := t.Context()
	a, err := g.acquire(ctx, 60)
	if err != nil || a != 60 {
		t.Fatalf("acquire(60) = %d, %v", a, err)
	}
	got := make(chan int64, 3)
	wait := func(n int64) {
		go func() {
			w, err := g.acquire(ctx, n)
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
	}
	wait(50) // does not fit beside 60
	waitFor(t, func() bool { return g.queued() == 1 })
	wait(10) // fits, but waits behind the 50
	waitFor(t, func() bool { return g.queued() == 2 })

	// A waiter that gives up.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error)
	go func() {
		_, err := g.acquire(cctx, 1)
		gaveUp <- err
	}()
	waitFor(t, func() bool { return g.queued() == 3 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("acquire went on after its context ended")
	}
	select {
	case w := <-got:
		t.Fatalf("a waiter got %d bytes while 60 of 100 were taken and the head needs 50", w)
	default:
	}
	g.release(a)
	w1, w2 := <-got, <-got
	if w1+w2 != 60 {
		t.Fatalf("waiters got %d and %d bytes, want 50 and 10", w1, w2)
	}
	// One heavier than the bound waits for everything, then takes it all.
	wait(1000)
	waitFor(t, func() bool { return g.queued() == 1 })
	g.release(50)
	select {
	case w := <-got:
		t.Fatalf("the heavy request got %d bytes while 10 were taken", w)
	case <-time.After(10 * time.Millisecond):
	}
	g.release(10)
	if w := <-got; w != 100 {
		t.Fatalf("the heavy request took %d bytes, want the whole 100", w)
	}
	g.release(100)
	if g.used != 0 || g.queued() != 0 {
		t.Fatalf("after all releases: %d bytes used, %d waiting", g.used, g.queued())
	}
}

func (g *prepareGate) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestPrepareWaitsForGate checks that Prepare waits while the server's
// bound is taken and that its context ending ends the wait.
func TestPrepareWaitsForGate(t *testing.T) {
	s, m := newTestModel(t, Config{MaxPrepareBytes: 1000})
	n, err := s.prepare.acquire(t.Context(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := m.PrepareContext(ctx, &Request{Messages: []chat.Message{{Role: "user", Content: chat.Text("Hello!")}}})
		done <- err
	}()
	waitFor(t, func() bool { return s.prepare.queued() == 1 })
	cancel()
	if e := AsError(<-done); e.Status != 499 {
		t.Fatalf("a request whose client left while waiting: %+v", e)
	}
	s.prepare.release(n)
	if _, err := m.PrepareContext(t.Context(), &Request{Messages: []chat.Message{{Role: "user", Content: chat.Text("Hello!")}}}); err != nil {
		t.Fatalf("after the bound was freed: %v", err)
	}
}

// TestPromptTooLongEarly checks the two early refusals: a prompt whose
// bytes alone need more tokens than the context holds, and one within
// that bound whose tokens pass the context while it is tokenized, on
// the chat and completion paths, with the context_length_exceeded error.
func TestPromptTooLongEarly(t *testing.T) {
	_, m := newTestModel(t, Config{})
	per := m.Engine().Tokenizer.MaxTokenBytes()
	if per <= 0 {
		t.Fatalf("the chat model's tokenizer has no bound on bytes per token")
	}
	huge := strings.Repeat("a", per*m.ContextLength())
	// Single digits are one token each in Qwen's pipeline: a text the byte
	// bound lets through that has more tokens than the context.
	digits := strings.Repeat("7", 2*m.ContextLength())
	if len(digits)/per >= m.ContextLength() {
		t.Fatalf("digits too long for the test")
	}
	for _, c := range []struct {
		name string
		req  Request
		want string
	}{
		{"chat by bytes", Request{Messages: []chat.Message{{Role: "user", Content: chat.Text(huge)}}}, "messages"},
		{"completion by bytes", Request{Prompt: huge}, "prompt"},
		{"chat by tokens", Request{Messages: []chat.Message{{Role: "user", Content: chat.Text(digits)}}}, "messages"},
		{"completion by tokens", Request{Prompt: digits}, "prompt"},
		{"completion ids", Request{PromptIDs: make([]int32, m.ContextLength())}, "prompt"},
	} {
		_, err := m.Prepare(&c.req)
		e := AsError(err)
		if err == nil || e.Status != 400 || e.Code != CodeContextExceeded || e.Param != c.want || !strings.Contains(e.Message, "at least") {
			t.Errorf("%s: got %v (%+v), want a 400 context_length_exceeded on %s", c.name, err, e, c.want)
		}
	}
}
