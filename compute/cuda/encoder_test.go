package cuda

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// TestAttendAll compares the bidirectional attention of encoders with the
// CPU backend: inputs of several lengths packed in one tensor and attended
// one by one through views (as model's encoders call it), head dims
// 32/64/128, with and without a window, GQA, soft cap and sinks; on the
// exact f32 kernel and, where the head dim has one, on flash_attend (bf16
// operands).
func TestAttendAll(t *testing.T) {
	h := newHarness(t)
	lens := []int{1, 7, 33, 64, 130, 200}
	total := 0
	for _, n := range lens {
		total += n
	}
	for _, tc := range []struct {
		name               string
		heads, kvHeads, hd int
		window             int
		softCap            float32
		sinks              bool
	}{
		{"hd32", 4, 4, 32, 0, 0, false},
		{"hd32 window 5", 4, 4, 32, 5, 0, false},
		{"hd64", 4, 4, 64, 0, 0, false},
		{"hd64 window 65", 4, 4, 64, 65, 0, false},
		{"hd128", 2, 2, 128, 0, 0, false},
		{"hd128 window 17", 2, 2, 128, 17, 0, false},
		{"gqa softcap sinks hd64 window 40", 8, 2, 64, 40, 30, true},
		{"hd8", 4, 4, 8, 0, 0, false},
	} {
		for _, mode := range []attnMode{attnExact, attnFlash} {
			if _, _, ok := h.g.flashKernel(tc.hd); mode == attnFlash && !ok {
				continue
			}
			name := tc.name + "/exact"
			if mode == attnFlash {
				name = tc.name + "/flash"
			}
			t.Run(name, func(t *testing.T) {
				h.t = t
				defer h.g.pinAttention(mode)()
				a := &compute.Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd,
					Scale: float32(1 / math.Sqrt(float64(tc.hd))), SoftCap: tc.softCap, Window: tc.window}
				var sinks pair
				if tc.sinks {
					sinks = h.vec(compute.F32, 2, tc.heads)
				}
				q := h.act(2, total, tc.heads*tc.hd)
				k := h.act(2, total, tc.kvHeads*tc.hd)
				v := h.act(1, total, tc.kvHeads*tc.hd)
				dst := h.zeros(total, tc.heads*tc.hd)
				lo := 0
				for _, n := range lens {
					hi := lo + n
					a.Sinks = sinks.c
					h.c.AttendAll(h.c.View(dst.c, lo, hi), h.c.View(q.c, lo, hi), h.c.View(k.c, lo, hi), h.c.View(v.c, lo, hi), a)
					a.Sinks = sinks.g
					h.g.AttendAll(h.g.View(dst.g, lo, hi), h.g.View(q.g, lo, hi), h.g.View(k.g, lo, hi), h.g.View(v.g, lo, hi), a)
					lo = hi
				}
				if mode == attnExact {
					h.compare("attend all", dst, 2e-5)
					return
				}
				got, want := h.readBoth(dst)
				lo = 0
				qc := tc.heads * tc.hd
				for _, n := range lens {
					hi := lo + n
					e := relErr(got[lo*qc:hi*qc], want[lo*qc:hi*qc])
					t.Logf("%d rows: ‖Δ‖/‖ref‖ = %.2e", n, e)
					if e > 1e-2 || math.IsNaN(e) {
						t.Errorf("%d rows: ‖Δ‖/‖ref‖ = %.3g > 1e-2", n, e)
					}
					lo = hi
				}
			})
		}
	}
}

// encoderInputs reads an encoder fixture's reference and pairs its ids
// and token type ids as the encoder's inputs.
func encoderInputs(t *testing.T, dir string) (*archref.EncoderReference, []model.EncoderInput) {
	t.Helper()
	ref := archref.LoadEncoder(t, dir)
	inputs := make([]model.EncoderInput, len(ref.IDs))
	for i := range inputs {
		inputs[i] = model.EncoderInput{IDs: ref.IDs[i], TypeIDs: ref.TypeIDs[i]}
	}
	return ref, inputs
}

// vecDiff returns the cosine of got and want and their largest absolute
// difference.
func vecDiff(got, want []float32) (cos, worst float64) {
	var dot, ng, nw float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		dot += g * w
		ng += g * g
		nw += w * w
		worst = max(worst, math.Abs(g-w))
	}
	return dot / math.Sqrt(ng*nw), worst
}

// checkVec fails t unless got matches want: cosine ≥ 0.9999 and every
// value within 1e-3.
func checkVec(t *testing.T, what string, got, want []float32) {
	t.Helper()
	checkVecTol(t, what, got, want, 1e-3)
}

// checkVecTol is checkVec with another bound on the largest difference.
func checkVecTol(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	cos, worst := vecDiff(got, want)
	t.Logf("%s: cosine %.7f, max abs difference %.2e", what, cos, worst)
	if !(cos >= 0.9999) || !(worst <= tol) {
		t.Errorf("%s: cosine %.6f, max abs difference %.2g (want ≥ 0.9999 and ≤ %.0e)", what, cos, worst, tol)
	}
}

// TestEncoderReferences loads each encoder fixture on the GPU through the
// engine and matches transformers' references, the inputs in one batch.
func TestEncoderReferences(t *testing.T) {
	g := openGPU(t)
	for _, fx := range archref.Encoders {
		t.Run(fx.Name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "model", "testdata", "encoders", fx.Name)
			ref, inputs := encoderInputs(t, dir)
			e, err := engine.OpenEncoder(dir, engine.Options{Backend: g})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got := e.Net.Labels(); got != fx.Labels {
				t.Errorf("Labels() = %d, want %d", got, fx.Labels)
			}
			out, err := e.Net.Encode(inputs)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(inputs) {
				t.Fatalf("%d outputs for %d inputs", len(out), len(inputs))
			}
			for i := range out {
				checkVec(t, fmt.Sprintf("input %d (%d tokens) hidden states", i, len(inputs[i].IDs)), out[i].Hidden, ref.Hidden[i])
				if fx.Labels > 0 {
					checkVec(t, fmt.Sprintf("input %d logits", i), out[i].Logits, ref.Logits[i])
				}
			}
		})
	}
}

// TestEmbedScheduler runs the scheduler's embeddings of a decoder model
// (model.Batch.Hidden) on the GPU against the CPU's: last-token, mean and
// first-token pooling, inputs of several lengths batched together, one of
// them over several chunks.
func TestEmbedScheduler(t *testing.T) {
	g := openGPU(t)
	dir := fixtures.Dir(t, "archs", "llama")
	opts := engine.SchedulerOptions{Parallel: 4, Chunk: 16, BatchTokens: 24}
	sched := func(b compute.Backend) *engine.Scheduler {
		m, err := engine.Open(dir, engine.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		s, err := m.NewScheduler(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	gs, cs := sched(g), sched(cpu.New(2))
	prompt := func(n, seed int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*7919 + seed*104729 + 13) % 97)
		}
		return p
	}
	inputs := [][]int32{prompt(7, 1), prompt(40, 2), prompt(30, 3), {5}}
	for _, pool := range []engine.Pooling{engine.PoolLast, engine.PoolMean, engine.PoolFirst} {
		t.Run(pool.String(), func(t *testing.T) {
			got, err := gs.Embed(context.Background(), inputs, pool)
			if err != nil {
				t.Fatal(err)
			}
			want, err := cs.Embed(context.Background(), inputs, pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(inputs) {
				t.Fatalf("%d embeddings for %d inputs", len(got), len(inputs))
			}
			for i := range inputs {
				// The device's bound for a decoder's numbers against the
				// CPU's, as engine's device conformance test uses.
				checkVecTol(t, fmt.Sprintf("input %d (%d tokens)", i, len(inputs[i])), got[i], want[i], 2e-3)
			}
		})
	}
}
