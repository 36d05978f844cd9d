package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
)

// TestFusedDecode runs the operations of a llama-style block on one row,
// as decode issues them, on the GPU (where they fuse) and on the CPU, and
// compares every tensor they leave, step after step. It also checks that
// the step, captured, needs few launches.
func TestFusedDecode(t *testing.T) {
	h := newHarness(t)
	const hid, ff, ctx = 256, 512, 80
	saved, savedK := h.g.fgemvBlocks, h.g.stageK
	defer func() { h.g.fgemvBlocks, h.g.stageK = saved, savedK }()
	type setting struct {
		dt          compute.DType
		blocks      int // fgemv grid limit: 0 none (two rows per warp), 1 and 3 stride far
		heads, kvh  int
		hd          int // 64: the rotation folds into attention; 32: it does not
		interleaved bool
		kernels     int // launches of the captured step
		stageK      int // longest input row staged in shared memory (0: the device's)
	}
	var settings []setting
	for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
		settings = append(settings, setting{dt, saved, 4, 2, 64, false, 5, 0})
	}
	for _, blocks := range []int{0, 1, 3} {
		settings = append(settings, setting{compute.BF16, blocks, 4, 2, 64, false, 5, 0})
	}
	settings = append(settings,
		setting{compute.BF16, saved, 4, 1, 64, true, 5, 0},
		setting{compute.BF16, saved, 8, 2, 32, false, 6, 0},
		// The down product's input (ff) read from global memory.
		setting{compute.BF16, saved, 4, 2, 64, false, 5, hid},
		setting{compute.F32, saved, 4, 2, 64, false, 5, hid})
	for _, set := range settings {
		dt, heads, kvh, hd := set.dt, set.heads, set.kvh, set.hd
		t.Run(fmt.Sprintf("%s/blocks%d/%dx%d/hd%d/interleaved=%v/stage%d", dt, set.blocks, heads, kvh, hd, set.interleaved, set.stageK), func(t *testing.T) {
			h.t = t
			h.g.fgemvBlocks, h.g.stageK = set.blocks, savedK
			if set.stageK > 0 {
				h.g.stageK = set.stageK
			}
			inv := make([]float32, hd/2)
			for j := range inv {
				inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(hd)))
			}
			r := &compute.Rope{Dims: hd, InvFreq: inv, Scale: 1, Interleaved: set.interleaved}
			a := &compute.Attention{Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
			inNorm, ffNorm := h.vec(dt, 1, hid), h.vec(dt, 1, hid)
			wq, wk, wv := h.weight(dt, 0.1, heads*hd, hid), h.weight(dt, 0.1, kvh*hd, hid), h.weight(dt, 0.1, kvh*hd, hid)
			bq, bk, bv := h.weight(compute.BF16, 0.1, heads*hd), h.weight(compute.BF16, 0.1, kvh*hd), h.weight(compute.BF16, 0.1, kvh*hd)
			wo := h.weight(dt, 0.1, hid, heads*hd)
			wg, wu, wd := h.weight(dt, 0.1, ff, hid), h.weight(dt, 0.1, ff, hid), h.weight(dt, 0.1, hid, ff)
			x := h.act(1, 1, hid)
			hh, q, k, v := h.zeros(1, hid), h.zeros(1, heads*hd), h.zeros(1, kvh*hd), h.zeros(1, kvh*hd)
			att, o, g, u := h.zeros(1, heads*hd), h.zeros(1, hid), h.zeros(1, ff), h.zeros(1, ff)
			cc, gc := h.c.NewKVCache(ctx, kvh*hd, false), h.g.NewKVCache(ctx, kvh*hd, false)
			pos := h.ints([]int32{0})
			step := func(b compute.Backend, sel func(pair) *compute.Tensor, cache *compute.KVCache) {
				T := sel
				b.RMSNorm(T(hh), T(x), T(inNorm), 1e-5, 0)
				b.MatMul(T(q), T(hh), T(wq))
				b.Add(T(q), T(q), T(bq))
				b.MatMul(T(k), T(hh), T(wk))
				b.Add(T(k), T(k), T(bk))
				b.MatMul(T(v), T(hh), T(wv))
				b.Add(T(v), T(v), T(bv))
				b.RoPE(T(q), T(pos), heads, r)
				b.RoPE(T(k), T(pos), kvh, r)
				b.Attend(T(att), T(q), T(k), T(v), cache, T(pos), a)
				b.MatMul(T(o), T(att), T(wo))
				b.Add(T(x), T(x), T(o))
				b.RMSNorm(T(hh), T(x), T(ffNorm), 1e-5, 0)
				b.MatMul(T(g), T(hh), T(wg))
				b.MatMul(T(u), T(hh), T(wu))
				b.GLU(T(g), T(g), T(u), compute.SiLU)
				b.MatMul(T(o), T(g), T(wd))
				b.Add(T(x), T(x), T(o))
			}
			cpuT := func(p pair) *compute.Tensor { return p.c }
			gpuT := func(p pair) *compute.Tensor { return p.g }
			var graph compute.Graph
			for p := range 12 {
				h.c.UploadInts(pos.c, []int32{int32(p)})
				h.g.UploadInts(pos.g, []int32{int32(p)})
				step(h.c, cpuT, cc)
				switch {
				case p < 6 || !h.g.fuse:
					step(h.g, gpuT, gc)
				case graph == nil:
					var err error
					graph, err = h.g.Capture(func() { step(h.g, gpuT, gc) })
					if err != nil {
						t.Fatal(err)
					}
					defer graph.Close()
					if n := graph.(*Graph).Kernels(); n != set.kernels {
						t.Errorf("captured step has %d kernels, want %d", n, set.kernels)
					} else {
						t.Logf("captured step: %d kernels", n)
					}
					graph.Launch()
				default:
					graph.Launch()
				}
				tol := 1e-4
				for _, c := range []struct {
					name string
					p    pair
				}{{"h", hh}, {"q", q}, {"k", k}, {"v", v}, {"attention", att}, {"o", o}, {"g", g}, {"u", u}, {"x", x}} {
					h.compare(fmt.Sprintf("position %d: %s", p, c.name), c.p, tol)
				}
			}
			h.compare("cache K", pair{cc.K, gc.K}, 1e-4)
			h.compare("cache V", pair{cc.V, gc.V}, 1e-4)
		})
	}
}

// TestFusedLongRows runs fgemv on input rows about the longest it stages
// in shared memory: a norm and its product in one launch up to that bound
// and in two past it, and a product with a residual add, staged or read
// from global memory.
func TestFusedLongRows(t *testing.T) {
	h := newHarness(t)
	if !h.g.fuse {
		t.Skip("fusion off (LEM_CUDA_FUSE=0)")
	}
	for _, dt := range []compute.DType{compute.BF16, compute.F32} {
		for _, k := range []int{defaultStageK + 8, h.g.stageK, h.g.stageK + 8} {
			if k < 16 {
				continue // a device that reports no shared memory stages nothing
			}
			t.Run(fmt.Sprintf("%s/k%d", dt, k), func(t *testing.T) {
				h.t = t
				const m = 70
				nw, w := h.vec(dt, 1, k), h.weight(dt, 0.02, m, k)
				x, hh := h.act(1, 1, k), h.zeros(1, k)
				y, r := h.zeros(1, m), h.act(1, 1, m)
				step := func(b compute.Backend, T func(pair) *compute.Tensor) {
					b.RMSNorm(T(hh), T(x), T(nw), 1e-5, 0)
					b.MatMul(T(y), T(hh), T(w))
				}
				residual := func(b compute.Backend, T func(pair) *compute.Tensor) {
					b.MatMul(T(y), T(x), T(w))
					b.Add(T(r), T(r), T(y))
				}
				for i, fn := range []func(compute.Backend, func(pair) *compute.Tensor){step, residual} {
					fn(h.c, func(p pair) *compute.Tensor { return p.c })
					graph, err := h.g.Capture(func() { fn(h.g, func(p pair) *compute.Tensor { return p.g }) })
					if err != nil {
						t.Fatal(err)
					}
					want := 1
					if i == 0 && k > h.g.normK() {
						want = 2
					}
					if n := graph.(*Graph).Kernels(); n != want {
						t.Errorf("%d kernels, want %d", n, want)
					}
					defer graph.Close()
					graph.Launch()
				}
				h.compare("norm", hh, 1e-5)
				h.compare("product", y, 1e-4)
				h.compare("residual", r, 1e-4)
			})
		}
	}
}

// TestFgemvStageK checks the longest staged row on the shared memory of
// some GPUs: two blocks must fit an SM.
func TestFgemvStageK(t *testing.T) {
	for _, c := range []struct {
		name            string
		perSM, perBlock int
		want            int
	}{
		{"sm_90 (H100, H200)", 233472, 232448, maxStageK},
		{"sm_80 (A100)", 167936, 166912, 20672},
		{"sm_86, sm_89 (100 KiB an SM)", 102400, 101376, 12480},
		{"sm_75 (64 KiB an SM)", 65536, 65536, 7872},
		{"none reported", 0, 0, 0},
	} {
		if got := fgemvStageK(c.perSM, c.perBlock); got != c.want {
			t.Errorf("%s: fgemvStageK(%d, %d) = %d, want %d", c.name, c.perSM, c.perBlock, got, c.want)
		}
	}
}

// TestFusionRefused checks operations that must not fuse: an in-place norm,
// a product written over its own input's source, and an addend that the
// launch writes.
func TestFusionRefused(t *testing.T) {
	h := newHarness(t)
	w := h.weight(compute.BF16, 0.2, 64, 64)
	x := h.act(1, 1, 64)
	y := h.zeros(1, 64)
	// In-place norm, then a product of it.
	h.c.RMSNorm(x.c, x.c, nil, 1e-6, 0)
	h.g.RMSNorm(x.g, x.g, nil, 1e-6, 0)
	h.c.MatMul(y.c, x.c, w.c)
	h.g.MatMul(y.g, x.g, w.g)
	h.compare("in-place norm then matmul", y, 1e-4)
	// A norm whose product overwrites the norm's input.
	n := h.zeros(1, 64)
	h.c.RMSNorm(n.c, x.c, nil, 1e-6, 0)
	h.g.RMSNorm(n.g, x.g, nil, 1e-6, 0)
	h.c.MatMul(x.c, n.c, w.c)
	h.g.MatMul(x.g, n.g, w.g)
	h.compare("product over the norm's input", x, 1e-4)
	h.compare("norm", n, 1e-5)
	// Add whose other operand is the product's input.
	h.c.MatMul(y.c, x.c, w.c)
	h.g.MatMul(y.g, x.g, w.g)
	h.c.Add(x.c, x.c, y.c)
	h.g.Add(x.g, x.g, y.g)
	h.compare("residual over the input", x, 1e-4)
	// Two products of one input, the second written over the first.
	h.c.MatMul(y.c, x.c, w.c)
	h.g.MatMul(y.g, x.g, w.g)
	h.c.MatMul(y.c, x.c, w.c)
	h.g.MatMul(y.g, x.g, w.g)
	h.compare("same output twice", y, 1e-4)
}

// TestTopK compares the GPU's top-k with the CPU's, exactly, on rows with
// many equal values.
func TestTopK(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		rows, n, k int
		levels     float32 // values are rounded to 1/levels (0: not rounded)
	}{
		{1, 1000, 1, 0}, {1, 1000, 40, 0}, {3, 5000, 7, 4}, {1, 128256, 1, 8},
		{1, 128256, 40, 0}, {1, 128256, 256, 16}, {2, 151936, 100, 2}, {1, 300, 256, 1},
		{3, 128256, 1, 2}, {1, 8192 + 37, 1, 1}, {2, 151936, 1, 0}, {1, 128256, 1, 0},
	} {
		t.Run(fmt.Sprintf("%dx%d/k%d", tc.rows, tc.n, tc.k), func(t *testing.T) {
			h.t = t
			v := randVals(h.r, tc.rows*tc.n, 8)
			if tc.levels > 0 {
				for i := range v {
					v[i] = float32(math.Round(float64(v[i]*tc.levels))) / tc.levels
				}
			}
			v[len(v)/3] = float32(math.Copysign(0, -1))
			x := pair{h.c.Alloc(compute.F32, tc.rows, tc.n), h.g.Alloc(compute.F32, tc.rows, tc.n)}
			h.c.Upload(x.c, v)
			h.g.Upload(x.g, v)
			dst := h.zeros(tc.rows, 2*tc.k)
			h.c.TopK(dst.c, x.c, tc.k)
			h.g.TopK(dst.g, x.g, tc.k)
			h.compare("top k", dst, 0)
		})
	}
}

// TestWeightUpload uploads weights larger than the pinned staging buffers
// (and small ones, which are copied directly) and reads them back.
func TestWeightUpload(t *testing.T) {
	g := openGPU(t)
	for _, n := range []int{1000, 1<<18 + 5, 3*stageChunk/4 + 12345} {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i%100003) - 7
		}
		w, err := g.Weight(compute.F32, []int{n}, encode(compute.F32, v))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		g.Read(got, w)
		for i := range v {
			if got[i] != v[i] {
				t.Fatalf("%d values: value %d is %g, want %g", n, i, got[i], v[i])
			}
		}
	}
}

// TestOneRowUnits checks the choice between one and two rows per warp
// (host only).
func TestOneRowUnits(t *testing.T) {
	for _, c := range []struct {
		rows, warps int
		one         bool
	}{
		{3072, 2112, true},   // fewer than two per warp
		{4096, 2112, true},   // fewer than two per warp
		{6144, 2112, true},   // 3 short waves beat 2 long ones
		{14336, 2112, true},  // 7 short waves against 4 long
		{128256, 2112, true}, // 61 short waves against 31 long
		{8448, 2112, false},  // 2 full long waves or 4 short: the same
		{4225, 2112, true},   // 3 short waves against 2 long
	} {
		if got := oneRowUnits(c.rows, c.warps); got != c.one {
			t.Errorf("oneRowUnits(%d, %d) = %v, want %v", c.rows, c.warps, got, c.one)
		}
	}
}

// TestFeed checks that Feed hands argmax_rows's pick to the next step's
// inputs on the device, that reads left in flight by ReadAsync (as many
// as its slots, and one too large for a slot) return the values of the
// moment they were started, and that those whose slot a later read took
// fail.
func TestFeed(t *testing.T) {
	g := openGPU(t)
	logits := g.Alloc(compute.F32, 1, 2000)
	v := make([]float32, 2000)
	ids, pos, picked := g.Alloc(compute.I32, 1), g.Alloc(compute.I32, 1), g.Alloc(compute.F32, 1, 2)
	g.UploadInts(ids, []int32{5})
	g.UploadInts(pos, []int32{41})
	type read struct {
		got  [2]float32
		wait func() error
		want int
	}
	var reads []*read
	for step := range 6 {
		clear(v)
		best := 100 + 37*step
		v[best] = 1
		g.Upload(logits, v)
		g.TopK(picked, logits, 1)
		r := &read{want: best}
		r.wait = g.ReadAsync(r.got[:], picked)
		reads = append(reads, r)
		g.Feed(ids, pos, picked)
	}
	big := make([]float32, 2000) // more than a slot holds
	waitBig := g.ReadAsync(big, logits)
	for i, r := range reads[:len(reads)-readSlots] {
		if err := r.wait(); err == nil {
			t.Errorf("read %d, its slot reused: no error", i)
		}
	}
	for i, r := range reads[len(reads)-readSlots:] {
		if err := r.wait(); err != nil {
			t.Fatal(err)
		}
		if r.got != [2]float32{1, float32(r.want)} {
			t.Errorf("read %d: %v, want [1 %d]", i, r.got, r.want)
		}
	}
	if err := waitBig(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(big, v) {
		t.Error("large read differs from the logits")
	}
	var got [2]float32
	g.Read(got[:1], ids)
	g.Read(got[1:], pos)
	if id, p := int32(math.Float32bits(got[0])), int32(math.Float32bits(got[1])); id != int32(100+37*5) || p != 47 {
		t.Errorf("after six feeds: ids[0] = %d, pos[0] = %d; want %d, 47", id, p, 100+37*5)
	}
}

// TestFeedRows checks that FeedRows hands each row's pick to the same row
// of the next step's ids on the device, leaving the rows past n alone.
func TestFeedRows(t *testing.T) {
	g := openGPU(t)
	const rows, n, cols = 300, 257, 1000
	logits := g.Alloc(compute.F32, rows, cols)
	v := make([]float32, rows*cols)
	for r := range rows {
		v[r*cols+(r*7919)%cols] = 1
	}
	g.Upload(logits, v)
	picked, ids := g.Alloc(compute.F32, rows, 2), g.Alloc(compute.I32, rows)
	old := make([]int32, rows)
	for r := range old {
		old[r] = -1 - int32(r)
	}
	g.UploadInts(ids, old)
	g.TopK(picked, logits, 1)
	g.FeedRows(ids, picked, n)
	got := make([]float32, rows)
	g.Read(got, ids)
	for r, x := range got {
		want := old[r]
		if r < n {
			want = int32((r * 7919) % cols)
		}
		if id := int32(math.Float32bits(x)); id != want {
			t.Fatalf("ids[%d] = %d, want %d", r, id, want)
		}
	}
}

// BenchmarkTopK times the pick of a decode step over a vocabulary of
// 128256 logits: k = 1 (greedy) and k = 40 (Ollama's default top_k), 20
// picks recorded in a graph so that launch costs stay out; ns/op is per
// pick.
func BenchmarkTopK(b *testing.B) {
	g := openGPU(b)
	const n = 128256
	x := g.Alloc(compute.F32, 1, n)
	g.Upload(x, randVals(rand.New(rand.NewPCG(1, 2)), n, 8))
	dst := g.Alloc(compute.F32, 1, 2*compute.MaxTopK)
	for _, k := range []int{1, 40} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			const picks = 20
			graph, err := g.Capture(func() {
				for range picks {
					g.TopK(dst, x, k)
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer graph.Close()
			graph.Launch()
			g.Synchronize()
			t0 := time.Now()
			n := 0
			for b.Loop() {
				graph.Launch()
				n++
			}
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(n*picks), "ns/pick")
		})
	}
}
