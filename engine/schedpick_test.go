package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// mixedRequests returns requests whose rows the backend picks candidates
// for (greedy, top-k sampling) and requests that need every logit
// (logprobs, penalties, a logit bias, a constraint), of different prompt
// and output lengths. Each call makes new constraints.
func mixedRequests(vocab int) []Request {
	seeded := func(i int, p SampleParams) SampleParams {
		p.Temperature, p.Seed, p.HasSeed = 0.8, uint64(i), true
		return p
	}
	reqs := []Request{
		{MaxTokens: 14},
		{MaxTokens: 9, Sample: seeded(1, SampleParams{TopK: 20, TopP: 0.9})},
		{MaxTokens: 11, Logprobs: true, TopLogprobs: 3},
		{MaxTokens: 16, Sample: seeded(3, SampleParams{TopK: 40, RepetitionPenalty: 1.2})},
		{MaxTokens: 7, Constraint: &everyThird{left: 5}},
		{MaxTokens: 12, Sample: seeded(5, SampleParams{TopK: 5, LogitBias: map[int32]float32{7: 2}})},
		{MaxTokens: 10, Sample: seeded(6, SampleParams{TopK: 3, MinP: 0.1})},
	}
	for i := range reqs {
		reqs[i].Prompt = testPrompt(3+5*i%17, 20+i, vocab)
		reqs[i].IgnoreModelStops = true
	}
	return reqs
}

// newSchedPad starts a scheduler that the test closes, its decode steps
// padded to buckets or not.
func newSchedPad(t testing.TB, m *Model, opts SchedulerOptions, pad bool) *Scheduler {
	t.Helper()
	net, ok := batched(m.Net)
	if !ok {
		t.Fatalf("%s runs no batched passes", m.Name)
	}
	s, err := newScheduler(m, net, opts, pad)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSchedPickedRows runs requests whose candidates the backend picks
// beside requests that read every logit, and prompt scoring: each gives
// the tokens it gives alone on the scheduler and on a Session.
func TestSchedPickedRows(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			opts := SchedulerOptions{Parallel: 8, Context: 128, BlockSize: 4, Chunk: 8, BatchTokens: 16}
			var picked, full int
			for _, r := range mixedRequests(vocab) {
				if pickK(m.Backend, &r, vocab) > 0 {
					picked++
				} else {
					full++
				}
			}
			if picked < 3 || full < 3 {
				t.Fatalf("%d requests picked, %d full: want both kinds", picked, full)
			}
			want := alone(t, newSched(t, m, opts), mixedRequests(vocab))
			for i, r := range mixedRequests(vocab) {
				res, err := m.Generate(context.Background(), m.NewSession(128), r, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.IDs, want[i].ids) {
					t.Errorf("request %d: scheduler %v, session %v", i, want[i].ids, res.IDs)
				}
			}
			s := newSched(t, m, opts)
			score := testPrompt(30, 99, vocab)
			wantScore, err := s.PromptLogprobs(context.Background(), score, 2)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			var gotScore []Token
			var scoreErr error
			go func() {
				defer wg.Done()
				gotScore, scoreErr = s.PromptLogprobs(context.Background(), score, 2)
			}()
			got := together(t, s, mixedRequests(vocab))
			wg.Wait()
			sameCases(t, "in a mixed batch", got, want)
			if scoreErr != nil {
				t.Fatal(scoreErr)
			}
			if !slices.EqualFunc(gotScore, wantScore, func(a, b Token) bool { return a.ID == b.ID && a.Logprob == b.Logprob }) {
				t.Errorf("prompt scoring in a mixed batch differs from alone")
			}
		})
	}
}

// TestSchedPickedReads checks what a step reads to the host: only the
// picked candidates of greedy streams, every logit of a stream with
// logprobs.
func TestSchedPickedReads(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	// No drafts: each greedy token reads one candidate.
	s := newSched(t, m, SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 4, Chunk: 8, Draft: -1})
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{Prompt: testPrompt(5+3*i, i, vocab), MaxTokens: 8 + i, IgnoreModelStops: true})
	}
	tokens := 0
	for _, c := range together(t, s, reqs) {
		tokens += len(c.ids)
	}
	waitIdle(t, s)
	// Each token was picked from one candidate: its logit and its id.
	if got := s.readFloats; got != int64(2*tokens) {
		t.Errorf("%d greedy tokens read %d values; want %d (a candidate each), not %d logits each", tokens, got, 2*tokens, vocab)
	}
	before := s.readFloats
	lp := reqs[0]
	lp.Logprobs = true
	c := alone(t, s, []Request{lp})
	if got := s.readFloats - before; got != int64(len(c[0].ids)*vocab) {
		t.Errorf("%d tokens with logprobs read %d values; want %d (every logit)", len(c[0].ids), got, len(c[0].ids)*vocab)
	}
}

// TestSchedPadded runs decode steps padded to buckets of rows, as on a
// backend that records graphs: every sequence gives bitwise the tokens
// and logprobs of unpadded steps, alone and in batches. Models with
// recurrent layers are not padded.
func TestSchedPadded(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			opts := SchedulerOptions{Parallel: 7, Context: 128, BlockSize: 4, Chunk: 8, BatchTokens: 16}
			fresh := func() []Request { return append(schedRequests(vocab), mixedRequests(vocab)[:3]...) }
			want := alone(t, newSchedPad(t, m, opts, false), fresh())
			s := newSchedPad(t, m, opts, true)
			net, _ := batched(m.Net)
			if recurrent := net.KVLayout().StateBytes > 0; recurrent {
				if s.pad {
					t.Fatal("a recurrent model's steps are padded")
				}
				return
			}
			if !s.pad {
				t.Fatal("steps not padded")
			}
			sameCases(t, "padded, alone", alone(t, s, fresh()), want)
			sameCases(t, "padded, in a batch", together(t, s, fresh()), want)
			st := waitIdle(t, s)
			if s.padded == 0 || s.padRows == 0 {
				t.Errorf("%d padded steps, %d padding rows: want some of each", s.padded, s.padRows)
			}
			if st.BlocksUsed != 0 || st.BlocksTotal != newSchedPad(t, m, opts, false).Stats().BlocksTotal {
				t.Errorf("padded: %+v; the scratch block is not the pool's", st)
			}
		})
	}
}

// memBackend is the CPU backend reporting a given free memory, as a GPU
// backend does (compute.MemoryReporter).
type memBackend struct {
	*cpu.Backend
	free int64
	err  error
}

func (b *memBackend) FreeMemory() (int64, error) { return b.free, b.err }

// TestSchedFreeMemory checks that the default paged cache follows the
// free memory a backend reports, and the host's when it cannot tell.
func TestSchedFreeMemory(t *testing.T) {
	b := &memBackend{Backend: cpu.New(0)}
	m, err := Open(fixtures.Dir(t, "archs", "llama"), Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const ctx, bs = 128, 4
	perSeq := poolBytes(m, bs, ctx/bs, 0, 0) // llama: one full-attention group
	for _, free := range []int64{2 * perSeq, 7 * perSeq, 1 << 30} {
		b.free = free
		if got := defaultKVBytes(b); got != free/2 {
			t.Errorf("free %d: default cache %d bytes, want half", free, got)
		}
		s := newSched(t, m, SchedulerOptions{Context: ctx, BlockSize: bs})
		// Half the free memory; at most maxDefaultParallel sequences,
		// and room for each at full context twice over.
		parallel := int(min(max(free/2/perSeq, 1), int64(maxDefaultParallel(b))))
		ref := newSched(t, m, SchedulerOptions{Context: ctx, BlockSize: bs, Parallel: parallel, KVBytes: min(free/2, 2*int64(parallel)*perSeq)})
		if g, w := s.Stats(), ref.Stats(); g.Parallel != w.Parallel || g.BlocksTotal != w.BlocksTotal {
			t.Errorf("free %d: %d sequences, %d blocks; want %d sequences, %d blocks", free, g.Parallel, g.BlocksTotal, w.Parallel, w.BlocksTotal)
		}
	}
	b.err = errors.New("no device")
	// The host's available memory moves while other processes run: read
	// it on both sides and allow what it did in between.
	before := memAvailable()
	got := defaultKVBytes(b)
	after := memAvailable()
	lo, hi := min(before, after)/4, max(before, after)/4
	if before > 0 && (got < lo-1<<20 || got > hi+1<<20) {
		t.Errorf("failing FreeMemory: default cache %d bytes, want a quarter of the host's %d..%d", got, min(before, after), max(before, after))
	}
}
