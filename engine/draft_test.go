package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/synth"
)

func TestLookupDraft(t *testing.T) {
	for _, c := range []struct {
		name string
		hist []int32
		k    int
		want []int32
	}{
		{"none", []int32{1, 2, 3, 4}, 4, nil},
		{"too short", []int32{1}, 4, nil},
		{"no room", []int32{1, 2, 9, 1, 2}, 0, nil},
		{"bigram", []int32{1, 2, 9, 8, 7, 1, 2}, 2, []int32{9, 8}},
		{"latest occurrence", []int32{1, 2, 5, 0, 1, 2, 6, 0, 1, 2}, 3, []int32{6, 0, 1}},
		{"longest tail first", []int32{7, 1, 2, 5, 3, 1, 2, 6, 7, 1, 2}, 1, []int32{5}},
		{"a loop goes on", []int32{3, 4, 5, 3, 4}, 8, []int32{5, 3, 4, 5, 3, 4, 5, 3}},
		{"a repeated token", []int32{9, 7, 7, 7}, 3, []int32{7, 7, 7}},
		{"a unigram is not enough", []int32{3, 9, 8, 3}, 4, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := lookupDraft(nil, c.hist, c.k); !slices.Equal(got, c.want) {
				t.Errorf("lookupDraft(%v, %d) = %v, want %v", c.hist, c.k, got, c.want)
			}
		})
	}
}

// draftRequests returns schedRequests and long ones whose greedy output
// falls into loops on the fixtures (random weights), which lookup drafts
// guess: picked on the backend, every logit on the host (logprobs), and
// seeded with a penalty.
func draftRequests(vocab int) []Request {
	reqs := schedRequests(vocab)
	for i := range 4 {
		r := Request{Prompt: testPrompt(7, 10+i, vocab), MaxTokens: 80, IgnoreModelStops: true, Logprobs: i == 1}
		if i == 3 {
			r.Sample = SampleParams{Temperature: 0.5, Seed: 3, HasSeed: true, FrequencyPenalty: 0.1}
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// TestSchedDraftSame checks that drafts change nothing but the number of
// steps: every sequence's tokens and logprobs are bitwise those of a
// scheduler without drafts, alone and in batches, greedy and seeded, with
// prompts in chunks, in steps too small for every draft and under
// preemption; and that drafts were run and accepted.
func TestSchedDraftSame(t *testing.T) {
	var drafted, accepted, preempted int64
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			reqs := draftRequests(m.Net.Config().VocabSize)
			opts := SchedulerOptions{Parallel: 6, Context: 160, BlockSize: 4, Chunk: 8, BatchTokens: 24, Draft: -1}
			want := alone(t, newSched(t, m, opts), reqs)
			opts.Draft = 5
			s := newSched(t, m, opts)
			sameCases(t, "alone, with drafts", alone(t, s, reqs), want)
			if !s.recurrent {
				cachedKeysOf(t, s, want)
			}
			sameCases(t, "in a batch, with drafts", together(t, s, reqs), want)
			if !s.recurrent {
				// Decode steps padded to buckets (a GPU's recorded
				// graphs) carry drafts too.
				ps := newSchedPad(t, m, opts, true)
				sameCases(t, "padded, with drafts", together(t, ps, reqs), want)
				if ps.padDrafts == 0 {
					t.Errorf("no padded step ran drafts (%d padded steps, %d drafts run)", ps.padded, ps.Stats().DraftTokens)
				}
			}
			// A step too small for every draft drops some.
			small := opts
			small.BatchTokens = 4
			sameCases(t, "in a batch of 4 rows, with drafts", together(t, newSched(t, m, small), reqs), want)
			// A pool of 30 blocks (the longest run needs 23) preempts
			// sequences that hold drafts.
			tiny := opts
			tiny.KVBytes = poolBytes(m, 4, 30, 6*6, 6)
			ts := newSched(t, m, tiny)
			sameCases(t, "under a tiny pool, with drafts", together(t, ts, reqs), want)
			tst := waitIdle(t, ts)
			t.Logf("tiny pool: %d preemptions, drafts run %d, accepted %d", tst.Preemptions, tst.DraftTokens, tst.DraftAccepted)
			if tst.DraftAccepted > 0 {
				preempted += tst.Preemptions
			}
			st := waitIdle(t, s)
			t.Logf("drafts run %d, accepted %d, steps %d", st.DraftTokens, st.DraftAccepted, s.steps)
			if s.recurrent && st.DraftTokens != 0 {
				t.Errorf("a recurrent model ran %d drafts", st.DraftTokens)
			}
			drafted += st.DraftTokens
			accepted += st.DraftAccepted
		})
	}
	if drafted == 0 || accepted == 0 || preempted == 0 {
		t.Errorf("drafts run %d, accepted %d, preemptions with drafts %d: the test checks too little", drafted, accepted, preempted)
	}
}

// cachedKeysOf fails unless every block the prefix cache names holds
// tokens of the runs: a rejected draft must never name a block.
func cachedKeysOf(t *testing.T, s *Scheduler, runs []schedCase) {
	t.Helper()
	valid := map[blockKey]bool{}
	for _, c := range runs {
		for _, k := range s.hash.chain(nil, slices.Concat(c.req.Prompt, c.ids), s.bs) {
			valid[k] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.groups {
		for k := range g.pool.cached {
			if n++; !valid[k] {
				t.Errorf("the prefix cache names a block of tokens no run had")
				return
			}
		}
	}
	if n == 0 {
		t.Errorf("nothing cached")
	}
}

// follow is a Constraint that makes the output the tokens of want, as a
// model would that copies its input (an edit that keeps most of a file).
type follow struct {
	want []int32
	at   int
}

func (f *follow) Mask(logits []float32) {
	keep := f.want[f.at]
	for i := range logits {
		if int32(i) != keep {
			logits[i] = float32(math.Inf(-1))
		}
	}
}

func (f *follow) Accept(int32) { f.at++ }
func (f *follow) Done() bool   { return f.at == len(f.want) }

// BenchmarkSchedDraft measures one stream's decode over the scheduler
// with and without drafts (Draft 7 and -1) on lem synth's small geometry, or the
// model at $LEM_BENCH_DRAFT_MODEL (a model directory or GGUF file), 2
// threads. Each request has a prompt of 256 random tokens and its output
// is made to be 128 tokens: a span of the prompt ("copy"), the same span
// with every 16th, 4th or 3rd token changed ("edit16", "edit4", "edit3":
// drafts that fail after a few tokens; with every 3rd, each lookup's first
// draft fails), or tokens that repeat nothing
// ("fresh"). It reports decode tokens/s and tokens per step.
func BenchmarkSchedDraft(b *testing.B) {
	m := benchModel(b, "LEM_BENCH_DRAFT_MODEL")
	vocab := m.Net.Config().VocabSize
	const plen, gen = 256, 128
	outputs := map[string]func(prompt []int32, seed int) []int32{
		"copy":   func(p []int32, _ int) []int32 { return slices.Clone(p[64 : 64+gen]) },
		"edit16": func(p []int32, _ int) []int32 { return editEvery(p[64:64+gen], 16, vocab) },
		"edit4":  func(p []int32, _ int) []int32 { return editEvery(p[64:64+gen], 4, vocab) },
		"edit3":  func(p []int32, _ int) []int32 { return editEvery(p[64:64+gen], 3, vocab) },
		"fresh": func(_ []int32, seed int) []int32 {
			rng := rand.New(rand.NewPCG(uint64(seed), 9))
			out := make([]int32, gen)
			for i := range out {
				out[i] = int32(rng.IntN(vocab))
			}
			return out
		},
	}
	for _, kind := range []string{"copy", "edit16", "edit4", "edit3", "fresh"} {
		for _, draft := range []int{-1, 7} {
			b.Run(fmt.Sprintf("%s/draft=%d", kind, draft), func(b *testing.B) {
				s, err := m.NewScheduler(SchedulerOptions{Parallel: 1, Context: plen + gen + 8, Draft: draft})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var tokens int
				var elapsed time.Duration
				steps0 := s.steps
				iter := 0
				for b.Loop() {
					// A new prompt each time: no prefix is cached.
					p := outputs["fresh"](nil, 1e6+iter)[:gen]
					p = append(p, outputs["fresh"](nil, 2e6+iter)...)
					iter++
					req := Request{Prompt: p, MaxTokens: gen, IgnoreModelStops: true, Constraint: &follow{want: outputs[kind](p, iter)}}
					res, err := s.Generate(context.Background(), req, nil)
					if err != nil {
						b.Fatal(err)
					}
					tokens += len(res.IDs) - 1
					elapsed += res.Decode
				}
				b.ReportMetric(float64(tokens)/elapsed.Seconds(), "decode-tok/s")
				b.ReportMetric(float64(tokens+b.N)/float64(s.steps-steps0-int64(b.N)), "tok/step")
			})
		}
	}
}

// benchModel opens, on the CPU with 2 threads, the model at $env (a model
// directory or GGUF file), or lem synth's small geometry when it is unset.
func benchModel(b *testing.B, env string) *Model {
	path := os.Getenv(env)
	if path == "" {
		path = b.TempDir()
		if _, err := synth.Write(path, synth.Options{Like: "small", Seed: 5}); err != nil {
			b.Fatal(err)
		}
	}
	m, err := Open(path, Options{Backend: cpu.New(2)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// editEvery returns a copy of src with every nth token changed.
func editEvery(src []int32, n, vocab int) []int32 {
	out := slices.Clone(src)
	for i := n - 1; i < len(out); i += n {
		out[i] = (out[i] + 1) % int32(vocab)
	}
	return out
}
