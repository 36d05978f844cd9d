package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
)

func TestExpertsRoute(t *testing.T) {
	b := New(2)
	logits := []float32{1, 3, 2, 0, 2.5}
	e := func(v ...float64) []float64 { return v }
	// Softmax over all five logits, for the SoftmaxTopK cases.
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v))
	}
	p := func(i int) float64 { return math.Exp(float64(logits[i])) / z }
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	for _, c := range []struct {
		name    string
		r       compute.Routing
		scale   []float32
		shared  []float32 // gate logits of the shared experts, nil for none
		ids     []int32
		weights []float64
	}{
		{
			name:    "softmax then top-k",
			r:       compute.Routing{Experts: 5, TopK: 2, Order: compute.SoftmaxTopK},
			ids:     []int32{1, 4},
			weights: e(p(1), p(4)),
		},
		{
			name:    "softmax then top-k, normalised",
			r:       compute.Routing{Experts: 5, TopK: 3, Order: compute.SoftmaxTopK, Normalize: true},
			ids:     []int32{1, 4, 2},
			weights: e(p(1)/(p(1)+p(4)+p(2)), p(4)/(p(1)+p(4)+p(2)), p(2)/(p(1)+p(4)+p(2))),
		},
		{
			name:    "top-k then softmax",
			r:       compute.Routing{Experts: 5, TopK: 2, Order: compute.TopKSoftmax},
			ids:     []int32{1, 4},
			weights: e(1/(1+math.Exp(-0.5)), math.Exp(-0.5)/(1+math.Exp(-0.5))),
		},
		{
			name:    "per-expert scale",
			r:       compute.Routing{Experts: 5, TopK: 2, Order: compute.SoftmaxTopK, Normalize: true},
			scale:   []float32{1, 2, 1, 1, 0.5},
			ids:     []int32{1, 4},
			weights: e(2*p(1)/(p(1)+p(4)), 0.5*p(4)/(p(1)+p(4))),
		},
		{
			name:    "shared experts with sigmoid gates",
			r:       compute.Routing{Experts: 5, TopK: 1, Order: compute.SoftmaxTopK, Shared: 2},
			shared:  []float32{0.5, -1},
			ids:     []int32{1, 5, 6},
			weights: e(p(1), sig(0.5), sig(-1)),
		},
		{
			name:    "shared expert without gate",
			r:       compute.Routing{Experts: 5, TopK: 1, Order: compute.TopKSoftmax, Shared: 1},
			ids:     []int32{1, 5},
			weights: e(1, 1),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Two rows: the logits, and the logits reversed.
			rows := append(slices.Clone(logits), logits...)
			slices.Reverse(rows[5:])
			lt := tensorOf(b, rows, 2, 5)
			if c.scale != nil {
				c.r.ExpertScale = tensorOf(b, c.scale, 5)
			}
			var sh *compute.Tensor
			if c.shared != nil {
				sh = tensorOf(b, append(slices.Clone(c.shared), c.shared...), 2, len(c.shared))
			}
			s := c.r.Slots()
			ids, wt := b.Alloc(compute.I32, 2, s), b.Alloc(compute.F32, 2, s)
			b.Route(ids, wt, lt, sh, &c.r)
			for row := range 2 {
				gotIDs := ids.Buf.([]int32)[row*s : (row+1)*s]
				gotW := f32(wt)[row*s : (row+1)*s]
				wantIDs := slices.Clone(c.ids)
				if row == 1 { // reversed logits pick mirrored experts
					for j := range c.r.TopK {
						wantIDs[j] = 4 - wantIDs[j]
					}
				}
				if !slices.Equal(gotIDs, wantIDs) {
					t.Errorf("row %d: ids %v, want %v", row, gotIDs, wantIDs)
				}
				for j, w := range c.weights {
					if row == 1 && c.scale != nil {
						break // the scale is not mirrored
					}
					if math.Abs(float64(gotW[j])-w) > 1e-6 {
						t.Errorf("row %d: weights %v, want %v", row, gotW, c.weights)
						break
					}
				}
			}
		})
	}
}

// tensorOf returns an F32 tensor holding vals.
func tensorOf(b *Backend, vals []float32, shape ...int) *compute.Tensor {
	t := b.Alloc(compute.F32, shape...)
	b.Upload(t, vals)
	return t
}

// testExperts builds ne random experts of the given geometry.
func testExperts(t testing.TB, b *Backend, rng *rand.Rand, dt compute.DType, ne, hid, inter int, fused, biases bool) []compute.Expert {
	t.Helper()
	weight := func(m, k int) *compute.Tensor {
		var w Weights
		if dt.Quantized() {
			w, _ = randQuantWeights(t, rng, dt, m, k, 0, true)
		} else {
			w, _ = randWeights(rng, dt, m, k, 0)
		}
		wt, err := b.Weight(dt, []int{m, k}, w.Data)
		if err != nil {
			t.Fatal(err)
		}
		return wt
	}
	experts := make([]compute.Expert, ne)
	for e := range experts {
		ex := &experts[e]
		if fused {
			ex.GateUp = weight(2*inter, hid)
		} else {
			ex.Gate, ex.Up = weight(inter, hid), weight(inter, hid)
		}
		ex.Down = weight(hid, inter)
		if biases {
			ex.GateUpBias = tensorOf(b, randVec(rng, 2*inter), 2*inter)
			ex.DownBias = tensorOf(b, randVec(rng, hid), hid)
		}
	}
	return experts
}

// refExperts computes ApplyExperts one row and one expert at a time through
// MatMul, with the activation and the weighted sum in float64.
func refExperts(b *Backend, x []float32, n, hid int, ids []int32, wt []float32, f *compute.ExpertFFN) []float64 {
	slots := len(ids) / n
	out := make([]float64, n*hid)
	xr := b.Alloc(compute.F32, 1, hid)
	for i := range n {
		b.Upload(xr, x[i*hid:(i+1)*hid])
		for j := range slots {
			ex := &f.Experts[ids[i*slots+j]]
			inter := ex.Inter()
			g, u := b.Alloc(compute.F32, 1, inter), b.Alloc(compute.F32, 1, inter)
			if ex.GateUp != nil {
				gu := b.Alloc(compute.F32, 1, 2*inter)
				b.MatMul(gu, xr, ex.GateUp)
				b.Columns(g, gu, 0)
				b.Columns(u, gu, inter)
			} else {
				b.MatMul(g, xr, ex.Gate)
				b.MatMul(u, xr, ex.Up)
			}
			a := b.Alloc(compute.F32, 1, inter)
			for c := range inter {
				gv, uv := float64(f32(g)[c]), float64(f32(u)[c])
				if ex.GateUpBias != nil {
					gv += float64(f32(ex.GateUpBias)[c])
					uv += float64(f32(ex.GateUpBias)[inter+c])
				}
				var v float64
				if f.Limit > 0 {
					l := float64(f.Limit)
					gv, uv = min(gv, l), min(max(uv, -l), l)
					v = (uv + 1) * gv / (1 + math.Exp(-float64(f.Alpha)*gv))
				} else {
					v = float64(activate(float32(gv), f.Act)) * uv
				}
				f32(a)[c] = float32(v)
			}
			y := b.Alloc(compute.F32, 1, hid)
			b.MatMul(y, a, ex.Down)
			for c := range hid {
				v := float64(f32(y)[c])
				if ex.DownBias != nil {
					v += float64(f32(ex.DownBias)[c])
				}
				out[i*hid+c] += float64(wt[i*slots+j]) * v
			}
		}
	}
	return out
}

func TestExpertsApply(t *testing.T) {
	const hid, inter, ne = 64, 96, 6
	for _, c := range []struct {
		dt             compute.DType
		fused, biases  bool
		limit          float32
		rows, topK, sh int
	}{
		{dt: compute.F32, rows: 1, topK: 2},
		{dt: compute.BF16, rows: 1, topK: 2},
		{dt: compute.BF16, rows: 7, topK: 2},
		{dt: compute.F16, rows: 5, topK: 3},
		{dt: compute.BF16, rows: 1, topK: 2, fused: true, biases: true, limit: 7},
		{dt: compute.BF16, rows: 9, topK: 2, fused: true, biases: true, limit: 0.5},
		{dt: compute.BF16, rows: 4, topK: 2, sh: 1},
		{dt: compute.Q8_0, rows: 1, topK: 2},
		{dt: compute.Q8_0, rows: 6, topK: 2, fused: true},
		{dt: compute.Q4_K, rows: 3, topK: 2},
	} {
		name := fmt.Sprintf("%s/rows=%d/top%d/fused=%t/biases=%t/limit=%g/shared=%d", c.dt, c.rows, c.topK, c.fused, c.biases, c.limit, c.sh)
		t.Run(name, func(t *testing.T) {
			h, in := hid, inter
			if c.dt == compute.Q4_K {
				h, in = 256, 256
			}
			b := New(2)
			rng := rand.New(rand.NewPCG(1, uint64(c.rows)))
			f := &compute.ExpertFFN{
				Experts: testExperts(t, b, rng, c.dt, ne+c.sh, h, in, c.fused, c.biases),
				Act:     compute.SiLU, Limit: c.limit, Alpha: 1.702,
			}
			r := &compute.Routing{Experts: ne, TopK: c.topK, Shared: c.sh}
			x := randVec(rng, c.rows*h)
			lt := tensorOf(b, randVec(rng, c.rows*ne), c.rows, ne)
			ids, wt := b.Alloc(compute.I32, c.rows, r.Slots()), b.Alloc(compute.F32, c.rows, r.Slots())
			b.Route(ids, wt, lt, nil, r)
			dst := b.Alloc(compute.F32, c.rows, h)
			for i := range f32(dst) {
				f32(dst)[i] = float32(math.NaN()) // must be overwritten
			}
			b.ApplyExperts(dst, tensorOf(b, x, c.rows, h), ids, wt, f)
			want := refExperts(b, x, c.rows, h, ids.Buf.([]int32), f32(wt), f)
			var scale float64
			for _, v := range want {
				scale = max(scale, math.Abs(v))
			}
			for i, v := range f32(dst) {
				if d := math.Abs(float64(v) - want[i]); !(d <= 1e-5*scale) {
					t.Fatalf("dst[%d] = %g, want %g (max |want| %g)", i, v, want[i], scale)
				}
			}
		})
	}
}

// TestExpertsReadOnlyPicked gives the experts that no row picks weights
// without data: reading them would panic.
func TestExpertsReadOnlyPicked(t *testing.T) {
	const hid, inter, ne = 32, 32, 8
	for _, c := range []struct {
		ids []int32
		wt  []float32
	}{
		{[]int32{5, 2}, []float32{0.75, 0.25}},
		{[]int32{2, 5, 5, 2, 2, 5}, []float32{0.5, 0.5, 0.25, 0.75, 1, 0}},
	} {
		rows := len(c.ids) / 2
		t.Run(fmt.Sprintf("rows=%d", rows), func(t *testing.T) {
			b := New(2)
			rng := rand.New(rand.NewPCG(3, 4))
			f := &compute.ExpertFFN{Experts: testExperts(t, b, rng, compute.BF16, ne, hid, inter, false, false)}
			ids := b.Alloc(compute.I32, rows, 2)
			b.UploadInts(ids, c.ids)
			wt := tensorOf(b, c.wt, rows, 2)
			for e := range f.Experts {
				if e == 2 || e == 5 {
					continue
				}
				for _, w := range []*compute.Tensor{f.Experts[e].Gate, f.Experts[e].Up, f.Experts[e].Down} {
					w.Buf = []byte(nil)
				}
			}
			x := randVec(rng, rows*hid)
			dst := b.Alloc(compute.F32, rows, hid)
			b.ApplyExperts(dst, tensorOf(b, x, rows, hid), ids, wt, f)
			want := refExperts(b, x, rows, hid, c.ids, c.wt, f)
			var scale float64
			for _, v := range want {
				scale = max(scale, math.Abs(v))
			}
			// Relative to the largest value, as in TestApplyExperts: the
			// kernels sum in another order than the float64 reference.
			for i, v := range f32(dst) {
				if d := math.Abs(float64(v) - want[i]); !(d <= 1e-5*scale) {
					t.Fatalf("dst[%d] = %g, want %g (max |want| %g)", i, v, want[i], scale)
				}
			}
		})
	}
}

func TestExpertsBadIDPanics(t *testing.T) {
	b := New(1)
	rng := rand.New(rand.NewPCG(5, 6))
	f := &compute.ExpertFFN{Experts: testExperts(t, b, rng, compute.F32, 2, 8, 8, false, false)}
	ids := b.Alloc(compute.I32, 1, 1)
	b.UploadInts(ids, []int32{2})
	defer func() {
		if recover() == nil {
			t.Error("expert 2 of 2 did not panic")
		}
	}()
	b.ApplyExperts(b.Alloc(compute.F32, 1, 8), b.Alloc(compute.F32, 1, 8), ids, b.Alloc(compute.F32, 1, 1), f)
}

// BenchmarkExpertsDecode measures one token through a mixture-of-experts
// block of Qwen3-30B-A3B's expert geometry (hidden 2048, expert width 768,
// top 8 of 128) with 24 bf16 experts, as many as the benchmark buffer
// holds: routing, then the picked experts. It reports the bandwidth over
// the weights a token reads (its experts only), beside two baselines run
// with the same threads: a dense MLP of the same bytes (width 8·768) and
// the machine's read bandwidth. The routed step must not allocate.
func BenchmarkExpertsDecode(bm *testing.B) {
	const hid, inter, ne, topK = 2048, 768, 24, 8
	buf := benchBuf()
	b := New(0)
	off := 0
	weight := func(m, k int) *compute.Tensor {
		w, err := b.Weight(compute.BF16, []int{m, k}, buf[off:off+m*k*2])
		if err != nil {
			bm.Fatal(err)
		}
		off += m * k * 2
		return w
	}
	f := &compute.ExpertFFN{Act: compute.SiLU}
	for range ne {
		f.Experts = append(f.Experts, compute.Expert{Gate: weight(inter, hid), Up: weight(inter, hid), Down: weight(hid, inter)})
	}
	active := int64(topK * 3 * hid * inter * 2)
	rng := rand.New(rand.NewPCG(7, 8))
	x := tensorOf(b, randVec(rng, hid), 1, hid)
	dst := b.Alloc(compute.F32, 1, hid)

	bm.Run("experts", func(bm *testing.B) {
		r := &compute.Routing{Experts: ne, TopK: topK, Order: compute.SoftmaxTopK, Normalize: true}
		// Router logits of 64 tokens, cycled, so that tokens pick
		// different experts as they do in a real decode.
		const tokens = 64
		lt := tensorOf(b, randVec(rng, tokens*ne), tokens, ne)
		var views [tokens]*compute.Tensor
		for i := range views {
			views[i] = b.View(lt, i, i+1)
		}
		ids, wt := b.Alloc(compute.I32, 1, topK), b.Alloc(compute.F32, 1, topK)
		tok := 0
		step := func() {
			b.Route(ids, wt, views[tok%tokens], nil, r)
			b.ApplyExperts(dst, x, ids, wt, f)
			tok++
		}
		step()
		bm.ReportAllocs()
		bm.SetBytes(active)
		for bm.Loop() {
			step()
		}
	})
	bm.Run("dense-baseline", func(bm *testing.B) {
		// Windows of the buffer in turn, each as big as a token's experts'
		// gate, up and down projections together.
		type mlp struct{ gate, up, down Weights }
		var mlps []mlp
		size := topK * inter * hid * 2
		for off := 0; off+3*size <= len(buf); off += 3 * size {
			win := buf[off:]
			mlps = append(mlps, mlp{
				gate: Weights{DType: compute.BF16, Rows: topK * inter, Cols: hid, Data: win[:size]},
				up:   Weights{DType: compute.BF16, Rows: topK * inter, Cols: hid, Data: win[size : 2*size]},
				down: Weights{DType: compute.BF16, Rows: hid, Cols: topK * inter, Data: win[2*size : 3*size]},
			})
		}
		g, u := make([]float32, topK*inter), make([]float32, topK*inter)
		xs, d := f32(x), f32(dst)
		bm.ReportAllocs()
		bm.SetBytes(active)
		i := 0
		for bm.Loop() {
			m := &mlps[i%len(mlps)]
			MatMul(g, xs, 1, m.gate, b.pool)
			MatMul(u, xs, 1, m.up, b.pool)
			for i := range g {
				g[i] = activate(g[i], compute.SiLU) * u[i]
			}
			MatMul(d, g, 1, m.down, b.pool)
			i++
		}
	})
	bm.Run("bandwidth-baseline", func(bm *testing.B) {
		bm.SetBytes(int64(len(buf)))
		for bm.Loop() {
			StreamRead(buf, b.pool)
		}
	})
}
