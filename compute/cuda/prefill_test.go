package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// readAll reads a GPU tensor into a new slice.
func (b *Backend) readAll(t *compute.Tensor) []float32 {
	v := make([]float32, t.Len())
	b.Read(v, t)
	return v
}

// closeTo reports the worst |got − want| / (1 + |want|).
func closeTo(got, want []float32) (float64, int) {
	worst, at := 0.0, 0
	for i := range want {
		d := math.Abs(float64(got[i])-float64(want[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}

// TestChunkedMatchesSequential runs the chunked prefill kernels of the
// delta rule and the selective scan against the GPU's own recurrent step,
// over one long call and then a decode step, from a carried state.
func TestChunkedMatchesSequential(t *testing.T) {
	h := newHarness(t)
	g := h.g
	defer func() { g.prefill.sequential, g.prefill.staged = false, false }()
	for _, n := range []int{2, 31, 32, 33, 95, 257} {
		t.Run(fmt.Sprintf("delta rule %d rows", n), func(t *testing.T) {
			r := &compute.DeltaRule{KeyHeads: 2, ValueHeads: 6, KeyDim: 64, ValueDim: 48,
				Scale: 0.125, NormEps: 1e-6}
			alog, dtb := h.act(1, r.ValueHeads), h.act(1, r.ValueHeads)
			r.ALog, r.DtBias = alog.g, dtb.g
			init := randVals(h.r, r.ValueHeads*r.ValueDim*r.KeyDim, 0.3)
			qkv := h.act(1, n, r.Width())
			a, b := h.act(3, n, r.ValueHeads), h.act(3, n, r.ValueHeads)
			var outs, states [3][]float32
			for i, mode := range []int{0, 1, 2} { // sequential, global, staged
				g.prefill.sequential, g.prefill.staged = mode == 0, mode == 2
				state := g.Alloc(compute.F32, r.ValueHeads, r.ValueDim, r.KeyDim)
				g.Upload(state, init)
				dst := g.Alloc(compute.F32, n, r.ValueHeads*r.ValueDim)
				g.DeltaRule(dst, qkv.g, a.g, b.g, state, r)
				outs[i], states[i] = g.readAll(dst), g.readAll(state)
			}
			for i, name := range []string{"chunked", "staged"} {
				if d, at := closeTo(outs[i+1], outs[0]); d > 2e-5 {
					t.Errorf("%s output: relative difference %.3g at %d", name, d, at)
				}
				if d, at := closeTo(states[i+1], states[0]); d > 2e-5 {
					t.Errorf("%s state: relative difference %.3g at %d", name, d, at)
				}
			}
		})
		t.Run(fmt.Sprintf("ssm %d rows", n), func(t *testing.T) {
			const heads, hd, groups, ns = 4, 24, 2, 64
			a, d, bias := h.ssmParams(heads)
			p := &compute.SSM{Heads: heads, HeadDim: hd, Groups: groups, StateSize: ns,
				A: a.g, D: d.g, DTBias: bias.g, DTMax: float32(math.Inf(1))}
			init := randVals(h.r, heads*hd*ns, 0.5)
			x, dt := h.act(1, n, heads*hd), h.act(3, n, heads)
			bm, cm := h.act(1, n, groups*ns), h.act(1, n, groups*ns)
			var outs, states [3][]float32
			for i, mode := range []int{0, 1, 2} { // sequential, global, staged
				g.prefill.sequential, g.prefill.staged = mode == 0, mode == 2
				state := g.Alloc(compute.F32, heads, hd*ns)
				g.Upload(state, init)
				y := g.Alloc(compute.F32, n, heads*hd)
				g.SSMScan(y, x.g, dt.g, bm.g, cm.g, state, p)
				outs[i], states[i] = g.readAll(y), g.readAll(state)
			}
			for i, name := range []string{"chunked", "staged"} {
				if d, at := closeTo(outs[i+1], outs[0]); d > 2e-5 {
					t.Errorf("%s y: relative difference %.3g at %d", name, d, at)
				}
				if d, at := closeTo(states[i+1], states[0]); d > 2e-5 {
					t.Errorf("%s state: relative difference %.3g at %d", name, d, at)
				}
			}
		})
	}
}

// TestGroupedMatchesPerPair runs the grouped expert kernels against the
// per-pair ones on the GPU.
func TestGroupedMatchesPerPair(t *testing.T) {
	h := newHarness(t)
	g := h.g
	defer func() { g.prefill.sequential, g.prefill.tensorCores = false, false }()
	const hid, inter, routed, k = 256, 96, 16, 4
	set := h.experts(compute.BF16, hid, inter, routed, 64, 1, false, false)
	if !tensorCoreExperts(g.expertTable(&set.g, hid).host, hid) {
		t.Fatal("the test's experts do not take the tensor-core kernels")
	}
	set.g.Act = compute.SiLU
	r := &compute.Routing{Experts: routed, TopK: k, Normalize: true, Shared: 1}
	for _, n := range []int{2, 31, 200} {
		x, logits := h.act(1, n, hid), h.act(3, n, routed)
		ids, wts := g.Alloc(compute.I32, n, r.Slots()), g.Alloc(compute.F32, n, r.Slots())
		g.Route(ids, wts, logits.g, nil, r)
		var outs [3][]float32
		for i := range outs { // per pair, grouped on the SIMT cores, on the tensor cores
			g.prefill.sequential, g.prefill.tensorCores = i == 0, i == 2
			dst := g.Alloc(compute.F32, n, hid)
			g.ApplyExperts(dst, x.g, ids, wts, &set.g)
			outs[i] = g.readAll(dst)
		}
		if d, at := closeTo(outs[1], outs[0]); d > 1e-5 {
			t.Errorf("%d rows, SIMT: relative difference %.3g at %d", n, d, at)
		}
		if d, at := closeTo(outs[2], outs[0]); d > 5e-5 {
			t.Errorf("%d rows, tensor cores: relative difference %.3g at %d", n, d, at)
		}
	}
}

func TestTensorCoreExperts(t *testing.T) {
	const hid = 64
	bf := uint64(compute.BF16) | uint64(compute.BF16)<<8
	ok := []uint64{0x1000, 0x2000, 0x3000, 0, 0, 0, 24, bf}
	for _, tc := range []struct {
		name string
		desc []uint64
		hid  int
		want bool
	}{
		{"bf16", ok, hid, true},
		{"two experts", append(append([]uint64{}, ok...), ok...), hid, true},
		{"hidden off 8", ok, 60, false},
		{"inter off 8", []uint64{0x1000, 0x2000, 0x3000, 0, 0, 0, 20, bf}, hid, false},
		{"f16 gate", []uint64{0x1000, 0x2000, 0x3000, 0, 0, 0, 24, uint64(compute.F16) | uint64(compute.BF16)<<8}, hid, false},
		{"f32 down", []uint64{0x1000, 0x2000, 0x3000, 0, 0, 0, 24, uint64(compute.BF16) | uint64(compute.F32)<<8}, hid, false},
		{"unaligned up", []uint64{0x1000, 0x2008, 0x3000, 0, 0, 0, 24, bf}, hid, false},
		{"none", nil, hid, false},
	} {
		if got := tensorCoreExperts(tc.desc, tc.hid); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStagedAndTensorCores reruns the CPU comparisons and the fixtures with
// the opt-in prefill kernels: the recurrences carried through shared
// memory (dr_carry, ssm_carry) and the grouped experts on the tensor cores
// (moe_mgateup, moe_mgdown).
func TestStagedAndTensorCores(t *testing.T) {
	g := openGPU(t)
	g.prefill.staged, g.prefill.tensorCores = true, true
	defer func() { g.prefill.staged, g.prefill.tensorCores = false, false }()
	t.Run("DeltaRule", TestDeltaRule)
	t.Run("SSMScan", TestSSMScan)
	t.Run("ApplyExperts", TestApplyExperts)
	t.Run("ModernConformance", TestModernConformance)
}
