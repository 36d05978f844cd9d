package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// schedFixtures are the families the scheduler tests run on: dense,
// sliding-window, MoE, KV-shared, recurrent and hybrid.
var schedFixtures = []string{"llama", "gemma2", "qwen3_moe", "gemma4_text-kvshared", "mamba2", "qwen3_next"}

// openFixture opens an architecture fixture on its own CPU backend.
func openFixture(t testing.TB, name string) *Model {
	t.Helper()
	m, err := Open(fixtures.Dir(t, "archs", name), Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// newSched starts a scheduler that the test closes.
func newSched(t testing.TB, m *Model, opts SchedulerOptions) *Scheduler {
	t.Helper()
	s, err := m.NewScheduler(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testPrompt returns n token ids below vocab, different for each seed.
func testPrompt(n, seed, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*7919 + seed*104729 + 13) % (vocab - 1))
	}
	return p
}

// schedCase is one request of the tests and what it gave.
type schedCase struct {
	req Request
	ids []int32
	lps []float32
}

// schedRequests returns requests of different prompt lengths and output
// lengths, greedy and seeded, with logprobs so that the logits themselves
// are compared.
func schedRequests(vocab int) []Request {
	var reqs []Request
	for i, n := range []int{5, 23, 9, 40, 2, 17} {
		r := Request{Prompt: testPrompt(n, i, vocab), MaxTokens: 6 + 3*i, IgnoreModelStops: true, Logprobs: true}
		if i%2 == 1 {
			r.Sample = SampleParams{Temperature: 0.9, TopP: 0.95, Seed: uint64(i), HasSeed: true, RepetitionPenalty: 1.1}
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// runCase runs one request and records its tokens and logprobs.
func runCase(ctx context.Context, s *Scheduler, req Request, onToken func(Token) error) (schedCase, error) {
	c := schedCase{req: req}
	res, err := s.Generate(ctx, req, func(t Token) error {
		if t.ID >= 0 {
			c.lps = append(c.lps, t.Logprob)
		}
		if onToken != nil {
			return onToken(t)
		}
		return nil
	})
	if res != nil {
		c.ids = res.IDs
	}
	return c, err
}

// together runs the requests at once, each after the one before it has
// produced its second token, so that sequences join mid-batch (and leave
// at their own lengths).
func together(t *testing.T, s *Scheduler, reqs []Request) []schedCase {
	t.Helper()
	out := make([]schedCase, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	var launch func(i int)
	launch = func(i int) {
		if i == len(reqs) {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			n := 0
			out[i], errs[i] = runCase(context.Background(), s, reqs[i], func(Token) error {
				if n++; n == 2 {
					once.Do(func() { launch(i + 1) })
				}
				return nil
			})
			once.Do(func() { launch(i + 1) })
		}()
	}
	launch(0)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// alone runs the requests one after another.
func alone(t *testing.T, s *Scheduler, reqs []Request) []schedCase {
	t.Helper()
	var out []schedCase
	for i, r := range reqs {
		c, err := runCase(context.Background(), s, r, nil)
		if err != nil {
			t.Fatalf("request %d alone: %v", i, err)
		}
		out = append(out, c)
	}
	return out
}

// sameCases fails unless the runs gave bitwise the same tokens and
// logprobs.
func sameCases(t *testing.T, what string, got, want []schedCase) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i].ids, want[i].ids) {
			t.Errorf("%s: request %d: ids %v, want %v", what, i, got[i].ids, want[i].ids)
			continue
		}
		if !slices.Equal(got[i].lps, want[i].lps) {
			t.Errorf("%s: request %d: logprobs %v, want bitwise %v", what, i, got[i].lps, want[i].lps)
		}
	}
}

// waitIdle waits until the scheduler runs nothing and holds no block.
func waitIdle(t *testing.T, s *Scheduler) SchedulerStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := s.Stats()
		if st.Running == 0 && st.Waiting == 0 && st.BlocksUsed == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("scheduler not idle: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSchedDeterminism checks that each sequence's tokens and logprobs
// are bitwise the same alone and in batches with up to five others of
// other prompt lengths joining and leaving, prompts cut in chunks and
// steps bounded so that prompts take several steps, over f32 and f16
// paged pools.
func TestSchedDeterminism(t *testing.T) {
	for _, name := range schedFixtures {
		for _, pool := range []compute.DType{compute.F32, compute.F16} {
			t.Run(name+"/"+pool.String(), func(t *testing.T) {
				m := openFixture(t, name)
				if err := m.Backend.(compute.KVPooler).SetKVPoolType(pool); err != nil {
					t.Fatal(err)
				}
				testSchedDeterminism(t, m)
			})
		}
	}
}

func testSchedDeterminism(t *testing.T, m *Model) {
	reqs := schedRequests(m.Net.Config().VocabSize)
	s := newSched(t, m, SchedulerOptions{Parallel: 6, Context: 128, BlockSize: 4, Chunk: 8, BatchTokens: 12})
	want := alone(t, s, reqs)
	got := together(t, s, reqs)
	sameCases(t, "in a batch", got, want)
	// Without the prefix cache's help: a fresh scheduler, all at once.
	s2 := newSched(t, m, SchedulerOptions{Parallel: 6, Context: 128, BlockSize: 4, Chunk: 8, BatchTokens: 12})
	sameCases(t, "fresh, in a batch", together(t, s2, reqs), want)
	waitIdle(t, s)
	waitIdle(t, s2)
}

// TestSchedMatchesSession checks that greedy generation over the
// scheduler gives the ids Model.Generate gives on a Session.
func TestSchedMatchesSession(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			ref := openFixture(t, name)
			m := openFixture(t, name)
			s := newSched(t, m, SchedulerOptions{Parallel: 2, Context: 128})
			for i, n := range []int{3, 30} {
				req := Request{Prompt: testPrompt(n, i, m.Net.Config().VocabSize), MaxTokens: 12, IgnoreModelStops: true}
				want, err := ref.Generate(context.Background(), ref.NewSession(128), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Generate(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.IDs, want.IDs) || got.StopReason != want.StopReason || got.PromptTokens != want.PromptTokens {
					t.Errorf("prompt of %d: scheduler %v (%s), session %v (%s)", n, got.IDs, got.StopReason, want.IDs, want.StopReason)
				}
			}
			// A constraint and stop ids end generation alike.
			req := Request{Prompt: testPrompt(8, 3, m.Net.Config().VocabSize), MaxTokens: 30, Constraint: &everyThird{left: 6}}
			want, err := ref.Generate(context.Background(), ref.NewSession(128), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Constraint = &everyThird{left: 6}
			got, err := s.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, want.IDs) || got.StopReason != want.StopReason || got.StopID != want.StopID || len(got.IDs) > 6 {
				t.Errorf("constrained: scheduler %v (%s %d), session %v (%s %d)", got.IDs, got.StopReason, got.StopID, want.IDs, want.StopReason, want.StopID)
			}
			for _, id := range got.IDs {
				if id%3 != 0 {
					t.Errorf("constrained: token %d is not a multiple of 3", id)
				}
			}
		})
	}
}

// TestSchedMatchesSessionTiny compares the embedded chat model's output
// text over the scheduler and a Session, its stop tokens included.
func TestSchedMatchesSessionTiny(t *testing.T) {
	ref, err := OpenTiny(Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := OpenTiny(Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	s := newSched(t, m, SchedulerOptions{Parallel: 2})
	prompt := m.Tokenizer.Encode("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", true)
	req := Request{Prompt: prompt, MaxTokens: 40}
	want, err := ref.Generate(context.Background(), ref.NewSession(0), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	got, err := s.Generate(context.Background(), req, func(t Token) error {
		streamed.WriteString(t.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, want.IDs) || got.Text != want.Text || got.StopID != want.StopID {
		t.Errorf("scheduler %q (stop %d), session %q (stop %d)", got.Text, got.StopID, want.Text, want.StopID)
	}
	if streamed.String() != got.Text {
		t.Errorf("streamed %q, result %q", streamed.String(), got.Text)
	}
}

// blockBytes returns the bytes of one block of every group of m.
func blockBytes(m *Model, bs int) int64 {
	return poolBytes(m, bs, 1, 1, 0)
}

// poolBytes returns the memory of a pool of full blocks in each
// full-attention group, window blocks in each sliding window's, and the
// state slots of parallel sequences with a checkpoint each.
func poolBytes(m *Model, bs, full, window, parallel int) int64 {
	net, _ := batched(m.Net)
	if net == nil {
		return 1
	}
	l := net.KVLayout()
	n := int64(2*parallel) * l.StateBytes
	for _, g := range l.Groups {
		k := full
		if g.Window > 0 {
			k = window
		}
		n += int64(k*bs) * g.PositionBytes
	}
	return n
}

// TestSchedPreemption runs sequences that together outgrow a pool of a
// few blocks: the newest are preempted, recompute, and give the outputs
// they give alone in an ample pool.
func TestSchedPreemption(t *testing.T) {
	for _, name := range []string{"llama", "gemma2", "gemma4_text-kvshared", "qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			var reqs []Request
			for i := range 4 {
				r := Request{Prompt: testPrompt(10+i, i, vocab), MaxTokens: 30, IgnoreModelStops: true, Logprobs: true}
				if i%2 == 1 {
					r.Sample = SampleParams{Temperature: 0.9, Seed: uint64(i), HasSeed: true, PresencePenalty: 0.5}
				}
				reqs = append(reqs, r)
			}
			opts := SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 4, Chunk: 8}
			want := alone(t, newSched(t, m, opts), reqs)
			// Each sequence grows to 10 or 11 blocks; the four fit at
			// admission (3 blocks each) and not at their ends. Sliding
			// windows take 5 blocks per sequence (7 positions before a
			// chunk of 8).
			opts.KVBytes = poolBytes(m, 4, 20, 4*5, 4)
			var rows [2]int64 // recomputing, swapping
			for mode, swap := range []int64{-1, 0} {
				opts.SwapBytes = swap
				check := func(got []schedCase) {
					sameCases(t, fmt.Sprintf("under a tiny pool (swapping %v)", swap == 0), got, want)
				}
				rows[mode] = preemptRun(t, newSched(t, m, opts), reqs, check, swap == 0)
			}
			if rows[1] >= rows[0] && !strings.HasPrefix(name, "qwen3_next") {
				t.Errorf("swapping to host memory ran %d rows, recomputing %d", rows[1], rows[0])
			}
		})
	}
}

// preemptRun runs the requests at once on s, whose pool is too small for
// all of them, checks their outputs with check and that sequences were
// preempted (and with swapping, restored from host memory), and returns
// the rows the scheduler ran.
func preemptRun(t *testing.T, s *Scheduler, reqs []Request, check func([]schedCase), swapping bool) int64 {
	t.Helper()
	got := make([]schedCase, len(reqs))
	errs := make([]error, len(reqs))
	// Every sequence waits in its first token's callback until
	// all four have one (or a generous while has passed): all
	// run at once from then on.
	var first sync.WaitGroup
	first.Add(len(reqs))
	all := make(chan struct{})
	go func() {
		first.Wait()
		close(all)
	}()
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			got[i], errs[i] = runCase(context.Background(), s, r, func(Token) error {
				if n++; n == 1 {
					first.Done()
					select {
					case <-all:
					case <-time.After(30 * time.Second):
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	check(got)
	st := waitIdle(t, s)
	t.Logf("swapping %v: %+v, %d rows", swapping, st, s.rows)
	if st.Preemptions == 0 {
		t.Errorf("no preemption in a pool of %d blocks", st.BlocksTotal)
	}
	if restores := !s.recurrent && swapping; restores != (st.Restored > 0) {
		t.Errorf("swapping %v: %d sequences restored from host memory", swapping, st.Restored)
	}
	return s.rows
}

// TestSchedPrefixCache runs a prompt, then one that shares a long prefix
// with it: the second reuses the cached blocks, runs fewer rows, and
// gives the output of a cold run.
func TestSchedPrefixCache(t *testing.T) {
	for _, name := range []string{"llama", "gemma2", "gemma4_text-kvshared", "qwen3_next", "mamba2"} {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			opts := SchedulerOptions{Parallel: 2, Context: 128, BlockSize: 4, Chunk: 8}
			first := testPrompt(50, 1, vocab)
			second := append(slices.Clone(first[:45]), testPrompt(6, 2, vocab)...)
			req := Request{Prompt: second, MaxTokens: 8, IgnoreModelStops: true, Logprobs: true}

			cold := newSched(t, m, opts)
			want, err := runCase(context.Background(), cold, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			coldRows := cold.rows

			s := newSched(t, m, opts)
			if _, err := s.Generate(context.Background(), Request{Prompt: first, MaxTokens: 2}, nil); err != nil {
				t.Fatal(err)
			}
			before := s.rows
			res, err := s.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			rows := s.rows - before
			// Attention-only models reuse 44 positions (11 blocks);
			// recurrent ones the last checkpoint at a chunk's end, 40.
			wantCached := 44
			if net, _ := batched(m.Net); net.KVLayout().StateBytes > 0 {
				wantCached = 40
			}
			if res.CachedTokens != wantCached {
				t.Errorf("CachedTokens %d, want %d", res.CachedTokens, wantCached)
			}
			if st := s.Stats(); st.CachedTokens != int64(wantCached) || st.PromptTokens != int64(len(first)+len(second)) {
				t.Errorf("stats: %d of %d prompt tokens cached, want %d of %d", st.CachedTokens, st.PromptTokens, wantCached, len(first)+len(second))
			}
			if rows != coldRows-int64(res.CachedTokens) {
				t.Errorf("warm run: %d rows, cold %d, cached %d", rows, coldRows, res.CachedTokens)
			}
			if !slices.Equal(res.IDs, want.ids) {
				t.Errorf("warm ids %v, cold %v", res.IDs, want.ids)
			}
			warm, err := runCase(context.Background(), s, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			sameCases(t, "warm against cold", []schedCase{warm}, []schedCase{want})
			waitIdle(t, s)
		})
	}
}

// TestSchedEviction fills a small pool with one prompt's cached blocks,
// then runs another that needs them: the cached blocks are evicted
// rather than the request failing, and the first prompt later runs
// cold.
func TestSchedEviction(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 1, Context: 128, BlockSize: 4, Chunk: 8, KVBytes: 20 * blockBytes(m, 4)})
	a := Request{Prompt: testPrompt(60, 1, vocab), MaxTokens: 4, IgnoreModelStops: true}
	b := Request{Prompt: testPrompt(60, 2, vocab), MaxTokens: 4, IgnoreModelStops: true}
	for i, tt := range []struct {
		req    Request
		cached int
	}{{a, 0}, {a, 56}, {b, 0}, {a, 0}} {
		res, err := s.Generate(context.Background(), tt.req, nil)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if res.CachedTokens != tt.cached {
			t.Errorf("run %d: %d tokens cached, want %d", i, res.CachedTokens, tt.cached)
		}
	}
	if st := waitIdle(t, s); st.Preemptions != 0 {
		t.Errorf("%d preemptions of a lone sequence", st.Preemptions)
	}
}

// TestSchedCancel cancels one sequence mid-prefill and one mid-decode
// while another runs: their blocks go back and the other's output is
// unchanged.
func TestSchedCancel(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 3, Context: 512, BlockSize: 4, Chunk: 2, BatchTokens: 3})
	other := Request{Prompt: testPrompt(10, 3, vocab), MaxTokens: 60, IgnoreModelStops: true}
	want, err := runCase(context.Background(), s, other, nil)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var got schedCase
	var otherErr error
	wg.Add(1)
	started := make(chan struct{})
	go func() {
		defer wg.Done()
		n := 0
		got, otherErr = runCase(context.Background(), s, other, func(Token) error {
			if n++; n == 1 {
				close(started)
			}
			return nil
		})
	}()
	<-started

	// Mid-decode: the callback cancels after three tokens.
	dctx, dcancel := context.WithCancel(context.Background())
	n := 0
	_, err = s.Generate(dctx, Request{Prompt: testPrompt(7, 4, vocab), MaxTokens: 100, IgnoreModelStops: true}, func(Token) error {
		if n++; n == 3 {
			dcancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("mid-decode: err %v, want context.Canceled", err)
	}

	// Mid-prefill: a prompt of 500 takes 250 chunks of 2; cancel once it
	// holds 10 blocks.
	done := make(chan error, 1)
	tokens := 0
	go func() {
		_, err := s.Generate(ctx, Request{Prompt: testPrompt(500, 5, vocab), MaxTokens: 4}, func(Token) error {
			tokens++
			return nil
		})
		done <- err
	}()
	for s.Stats().PromptTokens < int64(2*len(other.Prompt)+7+500) || s.Stats().BlocksUsed < 10 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || tokens > 0 {
		t.Errorf("mid-prefill: err %v after %d tokens, want context.Canceled before any", err, tokens)
	}
	wg.Wait()
	if otherErr != nil {
		t.Fatal(otherErr)
	}
	sameCases(t, "beside cancelled sequences", []schedCase{got}, []schedCase{want})
	waitIdle(t, s)
}

// TestSchedTooLarge checks that a request longer than the whole pool
// fails at once with a clear error, and that bad requests fail as
// Model.Generate's do.
func TestSchedTooLarge(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 2, Context: 256, BlockSize: 4, KVBytes: 10 * blockBytes(m, 4)})
	for _, tt := range []struct {
		name string
		req  Request
		want string
	}{
		{"larger than the pool", Request{Prompt: testPrompt(41, 1, vocab)}, "context length exceeded"},
		{"empty prompt", Request{}, "empty prompt"},
		{"bad token", Request{Prompt: []int32{1, int32(vocab)}}, "out of range"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Generate(context.Background(), tt.req, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
	// A prompt that fills the pool exactly runs and stops by length.
	res, err := s.Generate(context.Background(), Request{Prompt: testPrompt(39, 1, vocab), IgnoreModelStops: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != StopLength || len(res.IDs) != 2 {
		t.Errorf("%d tokens (%s) after 39 of 40 positions, want 2 (length)", len(res.IDs), res.StopReason)
	}
	waitIdle(t, s)
}

// TestSchedPromptLogprobs compares prompt scoring over the scheduler,
// beside generating sequences, with Model.PromptLogprobs on a Session.
func TestSchedPromptLogprobs(t *testing.T) {
	for _, c := range []struct {
		name string
		pool compute.DType
		tol  float32
	}{
		{"llama", compute.F32, 1e-4}, {"qwen3_next", compute.F32, 1e-4},
		// Keys and values rounded to f16 move log-probabilities by ~1e-3.
		{"llama", compute.F16, 5e-3}, {"gemma2", compute.F16, 5e-3},
	} {
		t.Run(c.name+"/"+c.pool.String(), func(t *testing.T) {
			m := openFixture(t, c.name)
			vocab := m.Net.Config().VocabSize
			ids := testPrompt(45, 7, vocab)
			want, err := m.PromptLogprobs(context.Background(), m.NewSession(128), ids, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Backend.(compute.KVPooler).SetKVPoolType(c.pool); err != nil {
				t.Fatal(err)
			}
			s := newSched(t, m, SchedulerOptions{Parallel: 3, Context: 128, BlockSize: 4, Chunk: 8, BatchTokens: 12})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.Generate(context.Background(), Request{Prompt: testPrompt(9, 1, vocab), MaxTokens: 20}, nil)
			}()
			got, err := s.PromptLogprobs(context.Background(), ids, 3)
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d tokens, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].ID != want[i].ID || abs32(got[i].Logprob-want[i].Logprob) > c.tol {
					t.Errorf("token %d: %d %g, want %d %g", i, got[i].ID, got[i].Logprob, want[i].ID, want[i].Logprob)
				}
				if len(got[i].Top) != 3 || got[i].Top[0].ID != want[i].Top[0].ID {
					t.Errorf("token %d: top %v, want %v", i, got[i].Top, want[i].Top)
				}
			}
			waitIdle(t, s)
		})
	}
}

func abs32(x float32) float32 { return max(x, -x) }

// TestSchedClose ends waiting and running generations with
// ErrSchedulerClosed.
func TestSchedClose(t *testing.T) {
	m := openFixture(t, "llama")
	s, err := m.NewScheduler(SchedulerOptions{Parallel: 1, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	started := make(chan struct{})
	var once sync.Once
	for i := range 2 {
		go func() {
			_, err := s.Generate(context.Background(), Request{Prompt: testPrompt(5, i, 320), IgnoreModelStops: true}, func(Token) error {
				once.Do(func() { close(started) })
				return nil
			})
			errs <- err
		}()
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrSchedulerClosed) {
			t.Errorf("err %v, want ErrSchedulerClosed", err)
		}
	}
	if _, err := s.Generate(context.Background(), Request{Prompt: []int32{1}}, nil); !errors.Is(err, ErrSchedulerClosed) {
		t.Errorf("after Close: err %v", err)
	}
}

// TestSchedSlowConsumer holds one stream's callback until another stream
// has finished: the slow stream only misses steps, the other runs on.
func TestSchedSlowConsumer(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 2, Context: 256})
	fast := Request{Prompt: testPrompt(6, 1, vocab), MaxTokens: 100, IgnoreModelStops: true}
	want, err := runCase(context.Background(), s, fast, nil)
	if err != nil {
		t.Fatal(err)
	}
	fastDone := make(chan struct{})
	slowHeld := make(chan struct{})
	slow := make(chan error, 1)
	go func() {
		n := 0
		_, err := s.Generate(context.Background(), Request{Prompt: testPrompt(9, 2, vocab), MaxTokens: 5, IgnoreModelStops: true}, func(Token) error {
			if n++; n == 2 {
				close(slowHeld)
				<-fastDone
			}
			return nil
		})
		slow <- err
	}()
	<-slowHeld
	start := time.Now()
	got, err := runCase(context.Background(), s, fast, nil)
	close(fastDone)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	sameCases(t, "beside a slow consumer", []schedCase{got}, []schedCase{want})
	// Waiting out the hold-off every step would take 100 × 20 ms.
	t.Logf("100 tokens beside a stalled stream in %v", time.Since(start))
	waitIdle(t, s)
}

// TestSchedSlidingWindow generates far past the window with a sliding
// group of only the blocks one step needs: the blocks that leave the
// window go back as the sequence advances, and the output is that of an
// ample pool.
func TestSchedSlidingWindow(t *testing.T) {
	for _, name := range []string{"gemma2", "gemma4_text-kvshared", "qwen3_moe"} {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			req := []Request{{Prompt: testPrompt(30, 1, vocab), MaxTokens: 80, IgnoreModelStops: true, Logprobs: true}}
			opts := SchedulerOptions{Parallel: 1, Context: 128, BlockSize: 4, Chunk: 8}
			want := alone(t, newSched(t, m, opts), req)
			// 5 blocks hold a window of 8 before a chunk of 8; the
			// sequence reaches 110 positions (28 blocks).
			opts.KVBytes = poolBytes(m, 4, 30, 5, 1)
			s := newSched(t, m, opts)
			got := alone(t, s, req)
			sameCases(t, "in a window's worth of blocks", got, want)
			st := waitIdle(t, s)
			if st.Preemptions != 0 {
				t.Errorf("%d preemptions of a lone sequence", st.Preemptions)
			}
		})
	}
}

// TestSchedOptions checks the sizes chosen for zero options and the
// errors of impossible ones.
func TestSchedOptions(t *testing.T) {
	m, err := OpenTiny(Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	s := newSched(t, m, SchedulerOptions{})
	st := s.Stats()
	ctx := min(m.ContextLength(), DefaultContext)
	if st.Parallel < 1 || st.Parallel > maxDefaultParallel(m.Backend) || s.seqCap != ctx || st.BlocksTotal*DefaultBlockSize < st.Parallel*ctx {
		t.Errorf("defaults: parallel %d, %d positions per sequence, %d blocks of %d; want 1 to %d sequences of %d positions, all held at once",
			st.Parallel, s.seqCap, st.BlocksTotal, DefaultBlockSize, maxDefaultParallel(m.Backend), ctx)
	}
	if s.chunk%s.bs != 0 || s.batchTokens != s.chunk+s.parallel {
		t.Errorf("defaults: chunk %d, block %d, batch %d", s.chunk, s.bs, s.batchTokens)
	}
	for _, tt := range []struct {
		name string
		opts SchedulerOptions
		want string
	}{
		{"negative", SchedulerOptions{Parallel: -1}, "negative option"},
		{"no block", SchedulerOptions{KVBytes: 100}, "no block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := m.NewScheduler(tt.opts)
			if err == nil {
				s.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
	// A recurrent model needs room for its state slots.
	r := openFixture(t, "mamba2")
	if _, err := r.NewScheduler(SchedulerOptions{Parallel: 2, KVBytes: 100}); err == nil || !strings.Contains(err.Error(), "recurrent states") {
		t.Errorf("mamba2 in 100 bytes: err %v", err)
	}
}

// everyThird is a Constraint that allows only token ids divisible by 3,
// and is done after left tokens.
type everyThird struct{ left int }

func (c *everyThird) Mask(logits []float32) {
	for i := range logits {
		if i%3 != 0 {
			logits[i] = float32(math.Inf(-1))
		}
	}
}
func (c *everyThird) Accept(int32) { c.left-- }
func (c *everyThird) Done() bool   { return c.left <= 0 }

// TestSchedLongPrompt prefills a long prompt beside a decoding stream:
// the stream goes on producing tokens while the prompt runs in chunks.
func TestSchedLongPrompt(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	s := newSched(t, m, SchedulerOptions{Parallel: 2, Context: 4096, BlockSize: 4, Chunk: 8})
	var mu sync.Mutex
	streamed := 0
	started := make(chan struct{})
	stream := make(chan error, 1)
	// The stream runs until the test cancels it (or reaches 4,096
	// positions, far later).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := s.Generate(ctx, Request{Prompt: testPrompt(5, 1, vocab), IgnoreModelStops: true}, func(Token) error {
			mu.Lock()
			defer mu.Unlock()
			if streamed++; streamed == 1 {
				close(started)
			}
			return nil
		})
		stream <- err
	}()
	<-started
	mu.Lock()
	before := streamed
	mu.Unlock()
	// 480 tokens: 60 chunks of 8, one per step beside the stream's token.
	var during int
	_, err := s.Generate(context.Background(), Request{Prompt: testPrompt(480, 2, vocab), MaxTokens: 1}, func(t Token) error {
		if t.ID >= 0 {
			mu.Lock()
			during = streamed - before
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-stream; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream: err %v, want context.Canceled", err)
	}
	t.Logf("the stream produced %d tokens during a prefill of 60 steps", during)
	if during < 10 {
		t.Errorf("the stream produced %d tokens during a prefill of 60 steps", during)
	}
}
