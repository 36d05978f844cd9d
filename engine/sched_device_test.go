package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
)

// nearTie is the largest gap between a Session's two most likely tokens
// (in log-probability) at which the scheduler may pick the other on a
// device, whose batched products and paged attention sum in another order.
const nearTie = 1e-2

// TestSchedOnDevice runs the scheduler on the device LEM_TEST_DEVICE
// names (skipped when unset): on every fixture, greedy sequences of
// different lengths joining and leaving mid-batch, some with logprobs
// (every logit read) and some without (the backend picks the token), give
// the ids a Session gives alone on the device, up to a near tie. On a
// backend that records graphs, the decode steps of models without
// recurrent layers are replayed from each bucket's graph; and the default
// paged cache comes from the device's free memory.
func TestSchedOnDevice(t *testing.T) {
	b := testDevice(t)
	if r, ok := b.(compute.MemoryReporter); ok {
		free, err := r.FreeMemory()
		if err != nil || free <= 0 {
			t.Fatalf("free memory %d, %v", free, err)
		}
		t.Logf("free memory %d MiB", free>>20)
	}
	names := slices.Concat(archref.Dense, moeFixtures, gemmaNext, hybridFixtures, ssmFixtures)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { testSchedOn(t, name, b) })
	}
	t.Run("default cache", func(t *testing.T) {
		m, err := Open(fixtures.Dir(t, "archs", "llama"), Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s := newSched(t, m, SchedulerOptions{})
		if _, err := s.Generate(context.Background(), Request{Prompt: testPrompt(20, 1, m.Net.Config().VocabSize), MaxTokens: 4}, nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("default: %+v", s.Stats())
	})
}

func testSchedOn(t *testing.T, name string, b compute.Backend) {
	m := openOn(t, b, name)
	vocab := m.Net.Config().VocabSize
	var reqs []Request
	for i, n := range []int{5, 23, 9, 40, 2, 17} {
		reqs = append(reqs, Request{Prompt: testPrompt(n, i, vocab), MaxTokens: 8 + 2*i, IgnoreModelStops: true, Logprobs: i%2 == 0})
	}
	want := sessionTokens(t, m, reqs)
	s := newSched(t, m, SchedulerOptions{Parallel: 6, Context: 128, BlockSize: 16, Chunk: 32})
	nearSame(t, together(t, s, reqs), want)
	net, _ := batched(m.Net)
	graphs := padsSteps(b) && net.KVLayout().StateBytes == 0
	t.Logf("%d steps padded (%d padding rows), %d replayed from graphs, %d queued ahead; recording failed: %v; %d values read", s.padded, s.padRows, s.replays, s.aheadSteps, s.graphFailed, s.readFloats)
	if graphs && (s.replays == 0 || s.graphFailed) {
		t.Errorf("no decode step replayed from a graph (%d padded steps, recording failed: %v)", s.padded, s.graphFailed)
	}
	if s.ahead && s.aheadSteps == 0 {
		t.Errorf("no greedy step queued ahead (%d padded steps)", s.padded)
	}
}

// sessionTokens returns each request's greedy tokens from a Session alone,
// with the two most likely alternatives of each.
func sessionTokens(t *testing.T, m *Model, reqs []Request) [][]Token {
	t.Helper()
	var want [][]Token
	for _, r := range reqs {
		r.Logprobs, r.TopLogprobs = true, 2
		var toks []Token
		if _, err := m.Generate(context.Background(), m.NewSession(128), r, func(t Token) error {
			if t.ID >= 0 {
				toks = append(toks, t)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		want = append(want, toks)
	}
	return want
}

// nearSame checks that the scheduler's greedy ids are the session's up to
// the first near tie of each request.
func nearSame(t *testing.T, got []schedCase, want [][]Token) {
	t.Helper()
	for i := range want {
		for j, w := range want[i] {
			if j >= len(got[i].ids) {
				t.Errorf("request %d: %d ids, want %d", i, len(got[i].ids), len(want[i]))
				break
			}
			if got[i].ids[j] == w.ID {
				continue
			}
			if len(w.Top) >= 2 && w.Top[0].Logprob-w.Top[1].Logprob < nearTie {
				t.Logf("request %d: token %d: %d for %d at a near tie (%v)", i, j, got[i].ids[j], w.ID, w.Top)
			} else {
				t.Errorf("request %d: token %d: %d, want %d (session's top %v)", i, j, got[i].ids[j], w.ID, w.Top)
			}
			break
		}
	}
}

// TestSchedPreemptionOnDevice is TestSchedPreemption on the device
// LEM_TEST_DEVICE names, greedy: sequences that outgrow a tiny pool are
// preempted, recomputed or copied to host memory and back (where the
// backend moves rows), and give the session's ids up to a near tie.
func TestSchedPreemptionOnDevice(t *testing.T) {
	b := testDevice(t)
	_, moves := b.(compute.RowMover)
	for _, name := range []string{"llama", "gemma2", "gemma4_text-kvshared", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			m := openOn(t, b, name)
			vocab := m.Net.Config().VocabSize
			var reqs []Request
			for i := range 4 {
				reqs = append(reqs, Request{Prompt: testPrompt(10+i, i, vocab), MaxTokens: 30, IgnoreModelStops: true, Logprobs: i%2 == 0})
			}
			want := sessionTokens(t, m, reqs)
			opts := SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 4, Chunk: 8, KVBytes: poolBytes(m, 4, 20, 4*5, 4)}
			for _, swap := range []int64{-1, 0} {
				if swap == 0 && !moves {
					continue
				}
				opts.SwapBytes = swap
				preemptRun(t, newSched(t, m, opts), reqs, func(got []schedCase) { nearSame(t, got, want) }, swap == 0)
			}
		})
	}
}

// TestSchedDraftsOnDevice runs greedy sequences with prompt-lookup drafts
// on the device LEM_TEST_DEVICE names: their ids are the session's up to
// a near tie, drafts were run and accepted, and on a backend that records
// graphs the steps that carried drafts were padded steps too.
func TestSchedDraftsOnDevice(t *testing.T) {
	b := testDevice(t)
	for _, name := range []string{"llama", "gemma2", "qwen3_moe", "gemma4_text-kvshared"} {
		t.Run(name, func(t *testing.T) {
			m := openOn(t, b, name)
			vocab := m.Net.Config().VocabSize
			var reqs []Request
			for i := range 4 {
				reqs = append(reqs, Request{Prompt: testPrompt(7, 10+i, vocab), MaxTokens: 60, IgnoreModelStops: true, Logprobs: i == 1})
			}
			want := sessionTokens(t, m, reqs)
			s := newSched(t, m, SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 16, Chunk: 32, Draft: 7})
			nearSame(t, together(t, s, reqs), want)
			st := waitIdle(t, s)
			t.Logf("%+v; %d padded steps, %d with drafts, %d replayed", st, s.padded, s.padDrafts, s.replays)
			if st.DraftTokens == 0 || st.DraftAccepted == 0 {
				t.Errorf("drafts run %d, accepted %d: the test checks too little", st.DraftTokens, st.DraftAccepted)
			}
			if padsSteps(b) && s.padDrafts == 0 {
				t.Errorf("no padded step ran drafts (%d padded steps)", s.padded)
			}
		})
	}
}

// openOn opens the architecture fixture name on backend b, closed when
// the test ends.
func openOn(t *testing.T, b compute.Backend, name string) *Model {
	t.Helper()
	m, err := Open(fixtures.Dir(t, "archs", name), Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
