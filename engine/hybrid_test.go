package engine

import (
	"slices"
	"testing"

	"lem/internal/archref"
	"lem/internal/fixtures"
	"lem/model"
)

// hybridFixtures are the families whose stacks mix Gated DeltaNet linear
// attention with gated softmax attention.
var hybridFixtures = []string{"qwen3_5_text", "qwen3_next", "qwen3_5_moe_text"}

func TestHybridConformance(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

// TestHybridReuse checks prompt-prefix reuse on models with recurrent
// state, which cannot rewind position by position: a follow-up turn that
// extends the conversation prefills only its new tokens, and a prompt that
// diverges mid-way resumes from the latest checkpoint before the
// divergence. Both must produce what a cold session produces.
func TestHybridReuse(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			b := defaultBackend()
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ref := archref.Load(t, dir)
			const chunk = 8 // a checkpoint after every 8 prompt tokens

			// cold runs prompt in a fresh session and returns the last
			// logits and the greedy continuation.
			cold := func(prompt []int32) ([]float32, []int32) {
				s := NewSession(m, b, 64)
				s.SetChunk(chunk)
				logits, err := s.Append(prompt)
				if err != nil {
					t.Fatal(err)
				}
				first := slices.Clone(logits)
				return first, greedy(t, s, logits, 6)
			}
			// warm reuses s for prompt, checks how many tokens it kept, and
			// compares with a cold run.
			warm := func(s *Session, prompt []int32, wantKept int, what string) {
				t.Helper()
				kept := s.Reuse(prompt)
				if kept != wantKept {
					t.Errorf("%s: Reuse kept %d tokens, want %d", what, kept, wantKept)
				}
				if !slices.Equal(s.Tokens(), prompt[:kept]) {
					t.Fatalf("%s: session holds %v after Reuse, want the prompt's first %d tokens", what, s.Tokens(), kept)
				}
				logits, err := s.Append(prompt[kept:])
				if err != nil {
					t.Fatal(err)
				}
				wantLogits, wantIDs := cold(prompt)
				if d := archref.MaxDiff(logits, wantLogits); d > 1e-4 {
					t.Errorf("%s: max |Δlogit| against a cold run = %.2e", what, d)
				}
				if got := greedy(t, s, logits, 6); !slices.Equal(got, wantIDs) {
					t.Errorf("%s: greedy continuation %v, cold run %v", what, got, wantIDs)
				}
			}

			s := NewSession(m, b, 64)
			s.SetChunk(chunk)
			// Turn 1: a 20-token prompt (checkpoints at 8, 16, 20) and a
			// 6-token reply.
			logits, err := s.Append(ref.InputIDs[:20])
			if err != nil {
				t.Fatal(err)
			}
			greedy(t, s, logits, 6)
			turn1 := slices.Clone(s.Tokens())

			// Turn 2 extends the conversation: everything is kept, only the
			// three new tokens run.
			turn2 := slices.Concat(turn1, []int32{7, 8, 9})
			warm(s, turn2, len(turn1), "extended conversation")

			// Turn 3 diverges at position 13: the state resumes from the
			// checkpoint at 8 and prefills from there.
			turn3 := slices.Concat(ref.InputIDs[:13], []int32{3, 1, 4, 1, 5, 9, 2, 6})
			warm(s, turn3, 8, "diverging prompt")

			// Turn 4 diverges at 4, before every checkpoint: a full prefill.
			turn4 := slices.Concat(ref.InputIDs[:4], []int32{11, 12, 13})
			warm(s, turn4, 0, "early divergence")
		})
	}
}

// BenchmarkHybridDecodeStep measures a decode step of each hybrid fixture:
// the delta-rule step of the linear-attention layers beside gated
// attention (and the experts of qwen3_5_moe_text). The steady-state step
// must not allocate.
func BenchmarkHybridDecodeStep(b *testing.B) { benchDecodeSteps(b, hybridFixtures) }
