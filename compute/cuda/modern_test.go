package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// set uploads the same values to both tensors of p.
func (h *harness) set(p pair, v []float32) {
	h.c.Upload(p.c, v)
	h.g.Upload(p.g, v)
}

// vals makes an F32 tensor holding v.
func (h *harness) vals(v []float32, shape ...int) pair {
	p := h.zeros(shape...)
	h.set(p, v)
	return p
}

// readInts reads an I32 tensor of each backend.
func (h *harness) readInts(p pair) (want, got []int32) {
	want = append([]int32(nil), p.c.Buf.([]int32)[:p.c.Len()]...)
	raw := make([]float32, p.g.Len())
	h.g.Read(raw, p.g)
	got = make([]int32, len(raw))
	for i, v := range raw {
		got[i] = int32(math.Float32bits(v))
	}
	return want, got
}

func TestCausalConv(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name   string
		c, k   int
		bias   bool
		silu   bool
		chunks []int
	}{
		{"k4 silu bias", 37, 4, true, true, []int{5, 1, 1, 3, 1}},
		{"k3 plain", 64, 3, false, false, []int{1, 1, 1, 9, 1}},
		{"k2 short chunks", 19, 2, true, false, []int{1, 2, 1}},
		{"k4 chunk shorter than window", 8, 4, false, true, []int{2, 1, 1, 1, 2}},
		{"k1", 12, 1, true, true, []int{3, 1}},
		{"wide", 1000, 4, true, true, []int{70, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			w := h.act(0.7, tc.c, tc.k)
			var bias pair
			if tc.bias {
				bias = h.act(0.5, tc.c)
			}
			state := h.act(1, tc.k-1, tc.c) // a sequence already under way
			for step, n := range tc.chunks {
				x := h.act(2, n, tc.c)
				dst := h.zeros(n, tc.c)
				h.c.CausalConv(dst.c, x.c, w.c, bias.c, state.c, tc.silu)
				h.g.CausalConv(dst.g, x.g, w.g, bias.g, state.g, tc.silu)
				h.compare(fmt.Sprintf("step %d (%d rows): output", step, n), dst, 1e-5)
				h.compare(fmt.Sprintf("step %d (%d rows): state", step, n), state, 0)
			}
		})
	}
}

// ssmParams makes the per-head parameters of an SSM layer on both backends.
func (h *harness) ssmParams(heads int) (a, d, bias pair) {
	av := randVals(h.r, heads, 1)
	for i := range av {
		av[i] = -float32(math.Exp(float64(av[i]))) // −exp(A_log)
	}
	return h.vals(av, heads), h.act(1, heads), h.act(1, heads)
}

func TestSSMScan(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name                         string
		heads, hd, groups, stateSize int
		dtMin, dtMax                 float32
		chunks                       []int
	}{
		{"groups", 4, 16, 2, 16, 0, float32(math.Inf(1)), []int{7, 1, 1, 70, 1}},
		{"odd sizes", 3, 5, 1, 33, 0, float32(math.Inf(1)), []int{1, 2, 65, 1}},
		{"clamped", 2, 8, 2, 8, 0.01, 0.5, []int{9, 1}},
		{"large state", 2, 64, 2, 128, 0, float32(math.Inf(1)), []int{100, 1, 1}},
		{"state 256", 2, 4, 1, 256, 0, float32(math.Inf(1)), []int{3, 1}},
		// Chunked prefill: lengths off the chunk of 32, several chunks
		// per call, the state carried from one call into the next.
		{"chunked odd", 3, 20, 3, 24, 0, float32(math.Inf(1)), []int{97, 1, 33, 31, 2}},
		{"chunked mamba2 head", 4, 64, 1, 128, 0, float32(math.Inf(1)), []int{200, 1, 64}},
		{"chunked state 256", 2, 17, 2, 256, 0.001, 0.3, []int{45, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			a, d, bias := h.ssmParams(tc.heads)
			hp, gn := tc.heads*tc.hd, tc.groups*tc.stateSize
			p := &compute.SSM{Heads: tc.heads, HeadDim: tc.hd, Groups: tc.groups, StateSize: tc.stateSize,
				DTMin: tc.dtMin, DTMax: tc.dtMax}
			state := h.act(0.5, tc.heads, tc.hd*tc.stateSize)
			for step, n := range tc.chunks {
				x, dt := h.act(1, n, hp), h.act(3, n, tc.heads)
				bm, cm := h.act(1, n, gn), h.act(1, n, gn)
				y := h.zeros(n, hp)
				p.A, p.D, p.DTBias = a.c, d.c, bias.c
				h.c.SSMScan(y.c, x.c, dt.c, bm.c, cm.c, state.c, p)
				p.A, p.D, p.DTBias = a.g, d.g, bias.g
				h.g.SSMScan(y.g, x.g, dt.g, bm.g, cm.g, state.g, p)
				h.compare(fmt.Sprintf("step %d (%d rows): y", step, n), y, 2e-5)
				h.compare(fmt.Sprintf("step %d (%d rows): state", step, n), state, 2e-5)
			}
		})
	}
}

func TestDeltaRule(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name           string
		kh, vh, dk, dv int
		chunks         []int
		tiled, negEig  bool
	}{
		{"grouped", 2, 4, 32, 16, []int{5, 1, 1, 70, 1}, false, false},
		{"tiled", 2, 6, 32, 16, []int{5, 1, 1, 70, 1}, true, false},
		{"odd sizes", 1, 3, 20, 7, []int{1, 65, 1}, false, false},
		{"qwen3.5 head", 1, 2, 128, 128, []int{64, 1, 1}, false, false},
		{"key dim 256", 1, 1, 256, 9, []int{3, 1}, false, false},
		// Chunked prefill: lengths off the chunk of 32, several chunks
		// per call, the state carried from one call into the next.
		{"chunked odd", 2, 4, 20, 37, []int{97, 1, 33, 31, 2}, true, false},
		{"chunked qwen3.5 head", 2, 4, 128, 128, []int{200, 1, 64}, false, false},
		{"chunked key dim 256", 1, 2, 256, 40, []int{70, 1}, false, false},
		{"chunked key dim 13", 1, 2, 13, 5, []int{40, 1, 3}, false, false},
		// OLMo Hybrid: β = 2σ(b), step and chunked.
		{"negative eigenvalues", 2, 4, 16, 16, []int{70, 1, 1}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			r := &compute.DeltaRule{KeyHeads: tc.kh, ValueHeads: tc.vh, KeyDim: tc.dk, ValueDim: tc.dv,
				Scale: float32(1 / math.Sqrt(float64(tc.dk))), NormEps: 1e-6, Tiled: tc.tiled, NegEigval: tc.negEig}
			alog, dtb := h.act(1, tc.vh), h.act(1, tc.vh)
			state := h.act(0.3, tc.vh, tc.dv, tc.dk)
			for step, n := range tc.chunks {
				qkv := h.act(1, n, r.Width())
				a, b := h.act(3, n, tc.vh), h.act(3, n, tc.vh)
				dst := h.zeros(n, tc.vh*tc.dv)
				r.ALog, r.DtBias = alog.c, dtb.c
				h.c.DeltaRule(dst.c, qkv.c, a.c, b.c, state.c, r)
				r.ALog, r.DtBias = alog.g, dtb.g
				h.g.DeltaRule(dst.g, qkv.g, a.g, b.g, state.g, r)
				h.compare(fmt.Sprintf("step %d (%d rows): output", step, n), dst, 5e-5)
				h.compare(fmt.Sprintf("step %d (%d rows): state", step, n), state, 5e-5)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name         string
		n, ne, k     int
		order        compute.RouteOrder
		normalize    bool
		scale        bool
		shared       int
		sharedLogits bool
		ties         bool
	}{
		{"softmax top-k", 5, 37, 4, compute.SoftmaxTopK, false, false, 0, false, false},
		{"normalized", 3, 8, 2, compute.SoftmaxTopK, true, false, 0, false, false},
		{"top-k softmax", 6, 32, 4, compute.TopKSoftmax, false, false, 0, false, false},
		{"expert scale", 4, 16, 3, compute.SoftmaxTopK, true, true, 0, false, false},
		{"shared gated", 3, 60, 8, compute.SoftmaxTopK, true, false, 1, true, false},
		{"shared ungated", 2, 10, 2, compute.SoftmaxTopK, false, false, 2, false, false},
		{"many experts", 3, 515, 10, compute.SoftmaxTopK, true, false, 0, false, false},
		{"ties", 4, 40, 5, compute.TopKSoftmax, false, false, 0, false, true},
		{"all", 2, 5, 5, compute.SoftmaxTopK, false, false, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			r := &compute.Routing{Experts: tc.ne, TopK: tc.k, Order: tc.order, Normalize: tc.normalize, Shared: tc.shared}
			lv := randVals(h.r, tc.n*tc.ne, 4)
			if tc.ties {
				for i := range lv {
					lv[i] = float32(math.Round(float64(lv[i]))) // few distinct values
				}
			}
			logits := h.vals(lv, tc.n, tc.ne)
			var scale, shared pair
			if tc.scale {
				scale = h.act(2, tc.ne)
			}
			if tc.sharedLogits {
				shared = h.act(3, tc.n, tc.shared)
			}
			slots := r.Slots()
			ids := pair{h.c.Alloc(compute.I32, tc.n, slots), h.g.Alloc(compute.I32, tc.n, slots)}
			wts := h.zeros(tc.n, slots)
			r.ExpertScale = scale.c
			h.c.Route(ids.c, wts.c, logits.c, shared.c, r)
			r.ExpertScale = scale.g
			h.g.Route(ids.g, wts.g, logits.g, shared.g, r)
			want, got := h.readInts(ids)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("ids differ at %d:\n got %v\nwant %v", i, got, want)
				}
			}
			h.compare("weights", wts, 1e-6)
		})
	}
}

// expertSet builds the same random experts on both backends.
type expertSet struct{ c, g compute.ExpertFFN }

// experts makes routed experts of width inter and shared ones of width
// sharedInter, fused (GateUp) or not, with biases or not, in dtype dt.
func (h *harness) experts(dt compute.DType, hid, inter, routed, sharedInter, shared int, fused, biases bool) *expertSet {
	s := new(expertSet)
	for e := range routed + shared {
		w := inter
		if e >= routed {
			w = sharedInter
		}
		var ps [5]pair
		if fused {
			ps[0] = h.weight(dt, 0.3, 2*w, hid)
		} else {
			ps[0], ps[1] = h.weight(dt, 0.3, w, hid), h.weight(dt, 0.3, w, hid)
		}
		ps[2] = h.weight(dt, 0.3, hid, w)
		if biases {
			ps[3], ps[4] = h.act(0.5, 2*w), h.act(0.5, hid)
		}
		for side, ffn := range []*compute.ExpertFFN{&s.c, &s.g} {
			get := func(p pair) *compute.Tensor {
				if side == 0 {
					return p.c
				}
				return p.g
			}
			ex := compute.Expert{Down: get(ps[2]), GateUpBias: get(ps[3]), DownBias: get(ps[4])}
			if fused {
				ex.GateUp = get(ps[0])
			} else {
				ex.Gate, ex.Up = get(ps[0]), get(ps[1])
			}
			ffn.Experts = append(ffn.Experts, ex)
		}
	}
	return s
}

func TestApplyExperts(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name                string
		dt                  compute.DType
		hid, inter, routed  int
		sharedInter, shared int
		k                   int
		fused, biases       bool
		act                 compute.Activation
		limit, alpha        float32
		rows                []int
	}{
		{"qwen moe bf16", compute.BF16, 64, 24, 8, 0, 0, 2, false, false, compute.SiLU, 0, 0, []int{1, 3, 70}},
		{"shared expert", compute.BF16, 48, 16, 6, 40, 1, 3, false, false, compute.SiLU, 0, 0, []int{1, 5}},
		{"gpt-oss clamped", compute.BF16, 40, 16, 5, 0, 0, 2, true, true, compute.SiLU, 7, 1.702, []int{1, 9}},
		{"gemma fused gelu", compute.BF16, 32, 8, 4, 0, 0, 2, true, false, compute.GELUTanh, 0, 0, []int{2}},
		{"odd sizes f32", compute.F32, 37, 13, 5, 7, 1, 2, false, true, compute.SiLU, 0, 0, []int{1, 4}},
		{"f16", compute.F16, 72, 20, 4, 0, 0, 4, false, false, compute.SiLU, 0, 0, []int{1, 3}},
		// Grouped prefill: several tiles of 32 pairs per expert, widths
		// off the tile of 64 columns, rows off the vector loads.
		{"grouped many rows", compute.BF16, 136, 72, 5, 0, 0, 2, false, false, compute.SiLU, 0, 0, []int{150, 1, 33}},
		{"grouped odd bf16", compute.BF16, 44, 20, 6, 30, 1, 3, true, true, compute.SiLU, 7, 1.702, []int{41}},
		{"grouped shared f32", compute.F32, 96, 40, 9, 100, 2, 4, false, true, compute.GELUTanh, 0, 0, []int{67}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			set := h.experts(tc.dt, tc.hid, tc.inter, tc.routed, tc.sharedInter, tc.shared, tc.fused, tc.biases)
			for _, f := range []*compute.ExpertFFN{&set.c, &set.g} {
				f.Act, f.Limit, f.Alpha = tc.act, tc.limit, tc.alpha
			}
			r := &compute.Routing{Experts: tc.routed, TopK: tc.k, Normalize: true, Shared: tc.shared}
			for _, n := range tc.rows {
				x := h.act(1, n, tc.hid)
				logits := h.act(3, n, tc.routed)
				slots := r.Slots()
				ids := pair{h.c.Alloc(compute.I32, n, slots), h.g.Alloc(compute.I32, n, slots)}
				wts := h.zeros(n, slots)
				h.c.Route(ids.c, wts.c, logits.c, nil, r)
				h.g.Route(ids.g, wts.g, logits.g, nil, r)
				dst := h.zeros(n, tc.hid)
				h.c.ApplyExperts(dst.c, x.c, ids.c, wts.c, &set.c)
				h.g.ApplyExperts(dst.g, x.g, ids.g, wts.g, &set.g)
				h.compare(fmt.Sprintf("%d rows", n), dst, 1e-4)
			}
			// Experts picked by hand, one of them twice in a row.
			ids := h.ints([]int32{0, int32(tc.routed - 1), int32(tc.routed - 1), 1})
			ids.c.Shape, ids.g.Shape = []int{2, 2}, []int{2, 2}
			wts := h.vals([]float32{0.7, 0.3, 0.5, 0.5}, 2, 2)
			x := h.act(1, 2, tc.hid)
			dst := h.zeros(2, tc.hid)
			h.c.ApplyExperts(dst.c, x.c, ids.c, wts.c, &set.c)
			h.g.ApplyExperts(dst.g, x.g, ids.g, wts.g, &set.g)
			h.compare("picked ids", dst, 1e-4)
		})
	}
}

func TestRowOps(t *testing.T) {
	h := newHarness(t)
	x := h.act(2, 5, 45)
	s := h.act(1, 5, 4)
	dst := h.act(1, 5, 45)
	h.c.AxpyRows(dst.c, x.c, s.c, 2)
	h.g.AxpyRows(dst.g, x.g, s.g, 2)
	h.compare("axpy rows", dst, 1e-6)

	for _, tc := range []struct {
		name     string
		c, rc    int
		floor    float32
		xscale   float32
		inPlace  bool
		wideRows bool
	}{
		{"same width", 45, 45, 1e-5, 1, false, false},
		{"wider ref", 37, 300, 1e-5, 2, false, false},
		{"floor", 64, 64, 1, 1e-3, false, false},
		{"in place", 1100, 1100, 1e-5, 3, true, false},
	} {
		x := h.act(tc.xscale, 5, tc.c)
		ref := h.act(2, 5, tc.rc)
		dst := x
		if !tc.inPlace {
			dst = h.zeros(5, tc.c)
		}
		h.c.MatchRMS(dst.c, x.c, ref.c, tc.floor)
		h.g.MatchRMS(dst.g, x.g, ref.g, tc.floor)
		h.compare("match rms "+tc.name, dst, 1e-5)
	}

	for _, c := range []int{45, 301, 2048} {
		x := h.act(3, 6, c)
		dst := h.zeros(6, c)
		h.c.GaussianTopK(dst.c, x.c, 1.6448536)
		h.g.GaussianTopK(dst.g, x.g, 1.6448536)
		h.compare(fmt.Sprintf("gaussian top-k %d", c), dst, 1e-5)
		h.c.GaussianTopK(x.c, x.c, 0.5) // in place
		h.g.GaussianTopK(x.g, x.g, 0.5)
		h.compare(fmt.Sprintf("gaussian top-k in place %d", c), x, 1e-5)
	}
}

// TestModernOpsGraph records one decode step that runs every optional
// operation as a CUDA graph and replays it with new inputs: the recurrent
// states must advance in place and the routing must follow the new rows,
// as on the CPU.
func TestModernOpsGraph(t *testing.T) {
	h := newHarness(t)
	const (
		c, k                 = 48, 4 // convolution channels and width
		heads, hd, groups, n = 2, 8, 1, 16
		kh, vh, dk, dv       = 1, 2, 16, 8
		hid, inter, ne, topK = 32, 12, 6, 2
	)
	// Inputs, rewritten before every step.
	convIn := h.zeros(1, c)
	dtIn, bIn, cIn := h.zeros(1, heads), h.zeros(1, groups*n), h.zeros(1, groups*n)
	dr := &compute.DeltaRule{KeyHeads: kh, ValueHeads: vh, KeyDim: dk, ValueDim: dv, Scale: 0.25, NormEps: 1e-6}
	qkv, aIn, betaIn := h.zeros(1, dr.Width()), h.zeros(1, vh), h.zeros(1, vh)
	x, logits := h.zeros(1, hid), h.zeros(1, ne)
	// Parameters and states.
	convW, convState := h.act(0.5, c, k), h.zeros(k-1, c)
	a, d, bias := h.ssmParams(heads)
	ssmState := h.zeros(heads, hd*n)
	alog, dtb := h.act(1, vh), h.act(1, vh)
	deltaState := h.zeros(vh, dv, dk)
	set := h.experts(compute.BF16, hid, inter, ne, 0, 0, false, false)
	routing := &compute.Routing{Experts: ne, TopK: topK, Normalize: true}
	// Outputs.
	convOut, y, core := h.zeros(1, c), h.zeros(1, heads*hd), h.zeros(1, vh*dv)
	ids := pair{h.c.Alloc(compute.I32, 1, topK), h.g.Alloc(compute.I32, 1, topK)}
	wts, moe, sparse := h.zeros(1, topK), h.zeros(1, hid), h.zeros(1, hid)

	step := func(gpu bool) {
		side := func(p pair) *compute.Tensor {
			if gpu {
				return p.g
			}
			return p.c
		}
		var be interface {
			compute.Convolver
			compute.SSMScanner
			compute.DeltaRuler
			compute.Experts
			compute.RowOps
		} = h.c
		ffn := &set.c
		if gpu {
			be, ffn = h.g, &set.g
		}
		be.CausalConv(side(convOut), side(convIn), side(convW), nil, side(convState), true)
		p := &compute.SSM{Heads: heads, HeadDim: hd, Groups: groups, StateSize: n,
			A: side(a), D: side(d), DTBias: side(bias), DTMax: float32(math.Inf(1))}
		be.SSMScan(side(y), h.viewCols(side(convOut), gpu, heads*hd), side(dtIn), side(bIn), side(cIn), side(ssmState), p)
		dr.ALog, dr.DtBias = side(alog), side(dtb)
		be.DeltaRule(side(core), side(qkv), side(aIn), side(betaIn), side(deltaState), dr)
		be.Route(side(ids), side(wts), side(logits), nil, routing)
		be.ApplyExperts(side(moe), side(x), side(ids), side(wts), ffn)
		be.GaussianTopK(side(sparse), side(moe), 0.5)
		be.MatchRMS(side(sparse), side(sparse), side(x), 1e-6)
	}
	feed := func() {
		for _, p := range []pair{convIn, dtIn, bIn, cIn, qkv, aIn, betaIn, x, logits} {
			h.set(p, randVals(h.r, p.c.Len(), 2))
		}
	}
	check := func(when string) {
		t.Helper()
		for _, o := range []struct {
			name string
			p    pair
		}{
			{"conv", convOut}, {"conv state", convState}, {"ssm", y}, {"ssm state", ssmState},
			{"delta rule", core}, {"delta state", deltaState}, {"route weights", wts}, {"experts", moe}, {"row ops", sparse},
		} {
			h.compare(when+": "+o.name, o.p, 5e-5)
		}
		want, got := h.readInts(ids)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: expert ids %v, want %v", when, got, want)
			}
		}
	}

	feed()
	step(false)
	step(true)
	check("direct step")
	g, err := h.g.Capture(func() { step(true) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 4 {
		feed()
		step(false)
		g.Launch()
		check(fmt.Sprintf("replay %d", i))
	}
}

// viewCols returns the first cols columns of a one-row tensor as a tensor
// of its own (the SSM input taken from the convolution's output).
func (h *harness) viewCols(t *compute.Tensor, gpu bool, cols int) *compute.Tensor {
	if gpu {
		return &compute.Tensor{DType: t.DType, Shape: []int{1, cols}, Buf: t.Buf}
	}
	return &compute.Tensor{DType: t.DType, Shape: []int{1, cols}, Buf: t.Buf.([]float32)[:cols]}
}
