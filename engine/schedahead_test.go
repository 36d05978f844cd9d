package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// greedyRequests returns greedy requests (the backend picks one candidate
// each) of different prompt and output lengths; the last runs into the
// end of a 64-position context.
func greedyRequests(vocab int) []Request {
	var reqs []Request
	for i, n := range []int{5, 23, 9, 40, 2, 17, 50} {
		reqs = append(reqs, Request{Prompt: testPrompt(n, 40+i, vocab), MaxTokens: 5 + 4*i, IgnoreModelStops: true})
	}
	return reqs
}

// TestSchedAhead checks greedy steps queued ahead (padded steps, no
// drafts): every sequence gives bitwise the tokens of unpadded steps
// alone and in batches that mix greedy rows with rows that need every
// logit, also when a stop token ends it while its next step is in flight,
// when it reaches the end of the context, when its caller is slow to
// take its tokens, and when its caller cancels.
func TestSchedAhead(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			opts := SchedulerOptions{Parallel: 7, Context: 64, BlockSize: 4, Chunk: 8, BatchTokens: 16, Draft: -1}
			s := newSchedPad(t, m, opts, true)
			if !s.pad {
				if s.ahead {
					t.Fatal("steps run ahead without padding")
				}
				return
			}
			if !s.ahead {
				t.Fatal("padded greedy steps do not run ahead")
			}
			ref := newSchedPad(t, m, opts, false)
			want := alone(t, ref, greedyRequests(vocab))
			// A stop token met mid-stream: the step queued after it
			// runs for nothing.
			stopped := greedyRequests(vocab)[3]
			stopped.StopIDs = []int32{want[3].ids[4]}
			wantStopped := alone(t, ref, []Request{stopped})
			if len(wantStopped[0].ids) >= len(want[3].ids) {
				t.Fatalf("the stop token did not end the request: %d tokens", len(wantStopped[0].ids))
			}

			sameCases(t, "alone", alone(t, s, greedyRequests(vocab)), want)
			if s.aheadSteps == 0 {
				t.Fatalf("no step queued ahead (%d padded steps)", s.padded)
			}
			sameCases(t, "together", together(t, s, greedyRequests(vocab)), want)
			sameCases(t, "stopped", alone(t, s, []Request{stopped}), wantStopped)

			mixed := func() []Request { return append(greedyRequests(vocab)[:4], mixedRequests(vocab)...) }
			sameCases(t, "beside other requests", together(t, s, mixed()), alone(t, ref, mixed()))

			// A slow caller: the step queued ahead lands before the
			// caller hands in the token it ran from.
			slow := 0
			c, err := runCase(context.Background(), s, greedyRequests(vocab)[2], func(Token) error {
				if slow++; slow <= 3 {
					time.Sleep(holdoff + 5*time.Millisecond)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sameCases(t, "slow caller", []schedCase{c}, want[2:3])

			ctx, cancel := context.WithCancel(context.Background())
			n := 0
			_, err = runCase(ctx, s, greedyRequests(vocab)[4], func(Token) error {
				if n++; n == 3 {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled mid-stream: %v", err)
			}
			sameCases(t, "after a cancel", alone(t, s, greedyRequests(vocab)[:2]), want[:2])
			waitIdle(t, s)
		})
	}
}

// TestSchedAheadReplaced hands in a token other than the one the device
// fed ahead: the rows run from the device's token are dropped, and the
// sequence goes on exactly as one that was handed the caller's token
// without running ahead.
func TestSchedAheadReplaced(t *testing.T) {
	m := openFixture(t, "llama")
	vocab := m.Net.Config().VocabSize
	opts := SchedulerOptions{Parallel: 2, Context: 64, BlockSize: 4, Chunk: 8, Draft: -1}
	prompt := testPrompt(9, 3, vocab)
	// run feeds the picks, but replaces the third with the token after
	// it, and returns the candidates handed over and whether a token fed
	// ahead was replaced.
	run := func(s *Scheduler) (got []candidate, replaced bool) {
		q := newSequence(slices.Clone(prompt), false)
		q.pick = 1
		defer s.leave(q)
		st := &schedSteps{s: s, q: q}
		ctx := context.Background()
		_, c, err := st.prompt(ctx, prompt)
		for i := 0; err == nil && i < 8; i++ {
			got = append(got, c[0])
			id := c[0].id
			if i == 3 {
				id = (id + 1) % int32(vocab)
				s.mu.Lock()
				replaced = q.fed > 0
				s.mu.Unlock()
			}
			if err = st.feed(ctx, id, 8-i); err == nil {
				_, c, err = st.result(ctx)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		return got, replaced
	}
	want, _ := run(newSchedPad(t, m, opts, false))
	s := newSchedPad(t, m, opts, true)
	got, replaced := run(s)
	if !replaced {
		t.Fatalf("no token fed ahead when the caller handed in another (%d steps queued ahead)", s.aheadSteps)
	}
	if !slices.Equal(got, want) {
		t.Errorf("after a replaced token fed ahead: %v, want %v", got, want)
	}
	waitIdle(t, s)
}
