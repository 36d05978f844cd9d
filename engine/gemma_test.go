package engine

import (
	"fmt"
	"math"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// gemmaNext are the fixtures of Gemma 3n and Gemma 4: per-layer inputs,
// KV-shared layers, per-layer head sizes, proportional rope, AltUp, LAuReL,
// activation sparsity and Gemma 4's mixture-of-experts block.
var gemmaNext = []string{"gemma3n_text", "gemma4_text", "gemma4_text-kvshared", "gemma4_text-moe"}

func TestGemmaNextConformance(t *testing.T) {
	for _, name := range gemmaNext {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

// fullStack hands the model a logits tensor where the session passes none,
// so that every prefill chunk runs every layer: prefill without the
// KV-shared shortcut.
type fullStack struct {
	model.Model
	logits *compute.Tensor
}

func (f fullStack) Forward(st model.State, ids, pos, logits *compute.Tensor) {
	if logits == nil {
		logits = f.logits
	}
	f.Model.Forward(st, ids, pos, logits)
}

// countingBackend counts attention calls.
type countingBackend struct {
	*cpu.Backend
	attends int
}

func (c *countingBackend) Attend(dst, q, k, v *compute.Tensor, cache *compute.KVCache, pos *compute.Tensor, a *compute.Attention) {
	c.attends++
	c.Backend.Attend(dst, q, k, v, cache, pos, a)
}

// TestKVSharedPrefillShortcut checks that skipping the KV-shared layers on
// prefill chunks before the last changes nothing: the logits after the
// prompt and of a greedy continuation are bit for bit those of a prefill
// through every layer, for chunks shorter and longer than the sliding
// window, and that the layers are skipped.
func TestKVSharedPrefillShortcut(t *testing.T) {
	for _, name := range []string{"gemma3n_text", "gemma4_text-kvshared"} {
		dir := fixtures.Dir(t, "archs", name)
		b := &countingBackend{Backend: cpu.New(0)}
		m, err := model.OpenDir(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ref := archref.Load(t, dir)
		cfg := m.Config()
		layers, shared := cfg.NumHiddenLayers, cfg.NumKVSharedLayers
		full := fullStack{m, b.Alloc(compute.F32, 1, cfg.VocabSize)}
		for _, chunk := range []int{3, 8, 13} {
			t.Run(fmt.Sprintf("%s/chunk=%d", name, chunk), func(t *testing.T) {
				run := func(m model.Model) (attends int, logits [][]float32, ids []int32) {
					s := NewSession(m, b, 64)
					s.SetChunk(chunk)
					b.attends = 0
					row, err := s.Append(ref.InputIDs)
					if err != nil {
						t.Fatal(err)
					}
					attends = b.attends
					for range 16 {
						logits = append(logits, append([]float32(nil), row...))
						id := argmax(row)
						ids = append(ids, id)
						if row, err = s.Append([]int32{id}); err != nil {
							t.Fatal(err)
						}
					}
					return attends, logits, ids
				}
				gotAttends, got, gotIDs := run(m)
				wantAttends, want, wantIDs := run(full)
				for i := range want {
					for j := range want[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
							t.Fatalf("step %d: logit %d = %g with the shortcut, %g without (ids %v, %v)", i, j, got[i][j], want[i][j], gotIDs, wantIDs)
						}
					}
				}
				chunks := (len(ref.InputIDs) + chunk - 1) / chunk
				if wantAttends != chunks*layers || gotAttends != chunks*layers-(chunks-1)*shared {
					t.Errorf("attention calls in prefill: %d with the shortcut, %d without; want %d and %d",
						gotAttends, wantAttends, chunks*layers-(chunks-1)*shared, chunks*layers)
				}
			})
		}
	}
}
