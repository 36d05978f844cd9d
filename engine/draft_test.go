package engine

import (
	"slices"
	"testing"
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
// prompts in chunks; and that drafts were run and accepted.
func TestSchedDraftSame(t *testing.T) {
	var drafted, accepted int64
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			reqs := draftRequests(m.Net.Config().VocabSize)
			opts := SchedulerOptions{Parallel: 6, Context: 160, BlockSize: 4, Chunk: 8, BatchTokens: 24}
			want := alone(t, newSched(t, m, opts), reqs)
			opts.Draft = 5
			s := newSched(t, m, opts)
			sameCases(t, "alone, with drafts", alone(t, s, reqs), want)
			if !s.recurrent {
				cachedKeysOf(t, s, want)
			}
			sameCases(t, "in a batch, with drafts", together(t, s, reqs), want)
			// A step too small for every draft drops some.
			opts.BatchTokens = 4
			sameCases(t, "in a batch of 4 rows, with drafts", together(t, newSched(t, m, opts), reqs), want)
			st := waitIdle(t, s)
			t.Logf("drafts run %d, accepted %d, steps %d", st.DraftTokens, st.DraftAccepted, s.steps)
			if s.recurrent && st.DraftTokens != 0 {
				t.Errorf("a recurrent model ran %d drafts", st.DraftTokens)
			}
			drafted += st.DraftTokens
			accepted += st.DraftAccepted
		})
	}
	if drafted == 0 || accepted == 0 {
		t.Errorf("drafts run %d, accepted %d: the test checks nothing", drafted, accepted)
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
