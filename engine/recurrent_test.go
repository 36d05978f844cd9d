package engine

import (
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// TestRecurrentReuse checks prompt-prefix reuse on models with recurrent
// state (state-space, short-convolution and delta-rule layers), which
// cannot rewind position by position: a second turn that extends the first
// (prompt and reply) prefills only its new tokens, a turn that diverges
// inside the first prompt restarts from the nearest checkpoint at or before
// the divergence, and both continue token-identically to a cold run.
func TestRecurrentReuse(t *testing.T) {
	for _, tt := range []struct {
		name string
		// Whether the model can rewind to any position: the lfm2 fixture's
		// layers all attend, so its state has nothing recurrent.
		exact bool
	}{
		{"mamba2", false},
		{"falcon_h1", false},
		{"lfm2", true},
		{"qwen3_5_text", false},
		{"qwen3_next", false},
		{"qwen3_5_moe_text", false},
		{"olmo_hybrid", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", tt.name)
			b := cpu.New(0)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := archref.Load(t, dir).InputIDs

			// The first turn: a 30-token prompt prefilled in chunks of 8
			// (checkpoints at 8, 16, 24 and 30), then a 4-token reply.
			s := NewSession(m, b, 64)
			s.SetChunk(8)
			logits, err := s.Append(ids[:30])
			if err != nil {
				t.Fatal(err)
			}
			greedy(t, s, logits, 4)
			turn := slices.Clone(s.Tokens())

			for _, c := range []struct {
				name   string
				prompt []int32
				kept   int
			}{
				{"extends the conversation", slices.Concat(turn, ids[30:36]), len(turn)},
				// The checkpoint at 24 is the latest at or before 27.
				{"diverges mid-prompt", slices.Concat(ids[:27], []int32{7, 8, 9, 10}), pick(tt.exact, 27, 24)},
				{"diverges before the first checkpoint", slices.Concat(ids[:5], []int32{7, 8, 9}), pick(tt.exact, 5, 0)},
			} {
				t.Run(c.name, func(t *testing.T) {
					cold := NewSession(m, b, 64)
					want, err := cold.Append(c.prompt)
					if err != nil {
						t.Fatal(err)
					}
					wantLogits := slices.Clone(want)
					wantIDs := greedy(t, cold, want, 8)

					// Start from the state the first turn left.
					warm := NewSession(m, b, 64)
					warm.SetChunk(8)
					lg, err := warm.Append(ids[:30])
					if err != nil {
						t.Fatal(err)
					}
					greedy(t, warm, lg, 4)

					kept := warm.Reuse(c.prompt)
					if kept != c.kept {
						t.Errorf("Reuse kept %d tokens, want %d", kept, c.kept)
					}
					if !slices.Equal(warm.Tokens(), c.prompt[:kept]) {
						t.Fatalf("session holds %v after Reuse, want the prompt's first %d", warm.Tokens(), kept)
					}
					got, err := warm.Append(c.prompt[kept:])
					if err != nil {
						t.Fatal(err)
					}
					if d := archref.MaxDiff(got, wantLogits); d > 1e-4 {
						t.Errorf("max |Δlogit| against a cold run = %.2e", d)
					}
					if gotIDs := greedy(t, warm, got, 8); !slices.Equal(gotIDs, wantIDs) {
						t.Errorf("continuation %v, cold run %v", gotIDs, wantIDs)
					}
				})
			}
		})
	}
}

// greedy appends n greedily chosen tokens after logits and returns them.
func greedy(t *testing.T, s *Session, logits []float32, n int) []int32 {
	t.Helper()
	var ids []int32
	for range n {
		id := argmax(logits)
		ids = append(ids, id)
		var err error
		if logits, err = s.Append([]int32{id}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// pick returns a if cond holds, else b.
func pick(cond bool, a, b int) int {
	if cond {
		return a
	}
	return b
}
