package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// spanBackend is the CPU backend that checks, in every AttendPaged call,
// the host spans of compute.Pages against the rows' sequences and
// positions, and counts the spans it saw. Its calls wait until gate is
// closed.
type spanBackend struct {
	*cpu.Backend
	gate   chan struct{}
	mu     sync.Mutex
	err    error
	calls  int // calls with spans
	chunks int // spans of several rows after cached positions
	mixed  int // calls with a span of one row beside one of several
}

func (b *spanBackend) AttendPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	<-b.gate
	b.check(pg, pos, q.Rows())
	b.Backend.AttendPaged(dst, q, k, v, pool, pg, pos, a)
}

func (b *spanBackend) check(pg *compute.Pages, pos *compute.Tensor, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil || pg.Spans == nil {
		return
	}
	seq, ps := pg.Seq.Buf.([]int32), pos.Buf.([]int32) // the CPU backend's I32 tensors
	b.calls++
	row, one, many := 0, false, false
	for i, sp := range pg.Spans {
		if sp.Row != row || sp.Rows < 1 {
			b.err = fmt.Errorf("span %d of %v: row %d+%d, want rows from %d", i, pg.Spans, sp.Row, sp.Rows, row)
			return
		}
		for r := sp.Row; r < sp.Row+sp.Rows; r++ {
			if seq[r] != seq[sp.Row] || int(ps[r]) != sp.Start+r-sp.Row {
				b.err = fmt.Errorf("span %d of %v: row %d is sequence %d at position %d, want sequence %d at %d", i, pg.Spans, r, seq[r], ps[r], seq[sp.Row], sp.Start+r-sp.Row)
				return
			}
		}
		if i > 0 && seq[sp.Row] == seq[pg.Spans[i-1].Row] {
			b.err = fmt.Errorf("spans %d and %d of %v are of the same sequence", i-1, i, pg.Spans)
			return
		}
		if sp.Rows > 1 && sp.Start > 0 {
			b.chunks++
		}
		one, many = one || sp.Rows == 1, many || sp.Rows > 1
		row += sp.Rows
	}
	if row != n {
		b.err = fmt.Errorf("spans %v cover %d rows of %d", pg.Spans, row, n)
	}
	if one && many {
		b.mixed++
	}
}

// TestSchedSpans runs requests of different prompt lengths together, in
// chunks that start inside blocks, beside decoding sequences: every paged
// attention call of a step the scheduler fills carries spans that match
// its rows' sequences and positions (what CUDA's AttendPaged relies on to
// attend prompt chunks with flash attention).
func TestSchedSpans(t *testing.T) {
	b := &spanBackend{Backend: cpu.New(0), gate: make(chan struct{})}
	m, err := Open(fixtures.Dir(t, "archs", "llama"), Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 4, Chunk: 7, BatchTokens: 16})
	open := sync.OnceFunc(func() { close(b.gate) })
	defer open() // a failed test still lets the scheduler's step end
	var wg sync.WaitGroup
	prompts := []int{3, 30, 45, 17}
	errs := make(chan error, len(prompts))
	for i, n := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Generate(context.Background(), Request{Prompt: testPrompt(n, i, vocab), MaxTokens: 12, IgnoreModelStops: true}, nil)
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		}()
	}
	// The first step waits until every request is in: the shortest prompt
	// then decodes while the others still run chunks, however the
	// goroutines were scheduled.
	deadline := time.Now().Add(30 * time.Second)
	for st := s.Stats(); st.Running+st.Waiting < len(prompts); st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("%d running and %d waiting after 30s, want %d", st.Running, st.Waiting, len(prompts))
		}
		time.Sleep(time.Millisecond)
	}
	open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Logf("%d calls with spans, %d later chunks, %d calls mixing decode rows and chunks", b.calls, b.chunks, b.mixed)
	if b.calls == 0 || b.chunks == 0 || b.mixed == 0 {
		t.Errorf("%d calls with spans, %d chunks after cached positions, %d mixed calls: want some of each", b.calls, b.chunks, b.mixed)
	}
}
