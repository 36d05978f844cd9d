package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// rowStableNs are the batch sizes the row-stability tests compare against
// one row at a time.
var rowStableNs = []int{1, 2, 3, 5, 8, 17, 33, 70}

// rowStableCase is a weight matrix of the row-stability tests.
type rowStableCase struct {
	name string
	w    Weights
}

// rowStableCases returns weights of every type MatMul reads: float, every
// ggml block type (unpacked, and packed where the backend packs it), and
// the MLX affine types, with shapes whose rows end in a partial kernel
// block and, for the packed ones, in rows after the last packed group.
// The float shapes also span several blocks of gemmKC elements, with a
// last partial vector that the AVX2 kernels leave to Go, alone (k=2050)
// or after part of a block (k=4133).
func rowStableCases(t *testing.T, rng *rand.Rand) []rowStableCase {
	var cs []rowStableCase
	add := func(name string, w Weights) {
		cs = append(cs, rowStableCase{fmt.Sprintf("%s/m=%d,k=%d", name, w.Rows, w.Cols), w})
	}
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		for _, sh := range []struct{ m, k int }{{37, 100}, {19, 2112}, {9, 2050}, {11, 4133}, {67, 64}} {
			w, _ := randWeights(rng, dt, sh.m, sh.k, 1)
			add(dt.String(), w)
		}
	}
	for _, dt := range quantTypes {
		k := 2 * 256
		w, _ := randQuantWeights(t, rng, dt, 37, k, 0, true)
		add(dt.String(), w)
		for _, p := range packTypes {
			if p == dt {
				add(dt.String()+"/packed", withPack(w))
				w, _ := randQuantWeights(t, rng, dt, 48, 3*dt.BlockSize(), 0, false)
				add(dt.String()+"/packed", withPack(w))
			}
		}
	}
	for _, dt := range mlxTestTypes(t) {
		w, _, _, _ := randMLXWeights(t, rng, dt, 21, 256)
		add(dt.String(), w)
	}
	return cs
}

// rowStablePool returns a pool of the given threads with row-stable
// products on.
func rowStablePool(t *testing.T, threads int) *Pool {
	return rowStableModePool(t, threads, true)
}

// rowStableModePool returns a pool of the given threads with row-stable
// products on or off.
func rowStableModePool(t *testing.T, threads int, on bool) *Pool {
	p := NewPool(threads)
	t.Cleanup(p.Close)
	s := p.lock()
	s.rowStable = on
	s.mu.Unlock()
	return p
}

// checkRowStable multiplies the rows of x by w one at a time, then the
// first n rows together for every n of rowStableNs, and fails unless
// every row has the same bits.
func checkRowStable(t *testing.T, w Weights, x []float32, pool *Pool) {
	t.Helper()
	m, k := w.Rows, w.Cols
	rows := len(x) / k
	one := make([]float32, rows*m)
	for i := range rows {
		MatMul(one[i*m:(i+1)*m], x[i*k:(i+1)*k], 1, w, pool)
	}
	for _, n := range rowStableNs {
		if n > rows {
			continue
		}
		dst := make([]float32, n*m)
		MatMul(dst, x, n, w, pool)
		for i := range n * m {
			if math.Float32bits(dst[i]) != math.Float32bits(one[i]) {
				t.Fatalf("n=%d: row %d column %d = %g (%#08x), computed alone %g (%#08x)",
					n, i/m, i%m, dst[i], math.Float32bits(dst[i]), one[i], math.Float32bits(one[i]))
			}
		}
	}
}

// TestRowStableMatMul checks that every row of a product has the bits it
// has computed alone, whatever the number of rows of the call, for every
// weight type, kernel level and pool size, with row-stable products on
// and, where AMX is not in use (TestRowStableAMX), off too: the one-row
// kernels of float weights, and of the types dequantized to float, sum as
// the many-row ones.
func TestRowStableMatMul(t *testing.T) {
	noAMX(t)
	rng := rand.New(rand.NewPCG(61, 62))
	cases := rowStableCases(t, rng)
	for _, on := range []bool{true, false} {
		for _, threads := range testThreads() {
			pool := rowStableModePool(t, threads, on)
			for _, c := range cases {
				x := randVec(rng, 70*c.w.Cols)
				for _, l := range levels() {
					t.Run(fmt.Sprintf("rowstable=%t/%s/%s/threads=%d", on, levelNames[l], c.name, threads), func(t *testing.T) {
						atLevel(t, l, func() { checkRowStable(t, c.w, x, pool) })
					})
				}
			}
		}
	}
}

// TestRowStableAMX checks that with row-stable products on, a product of
// packed weights of the types AMX takes gives every row the bits of the
// one-row product, where the many-row products would run on AMX (here
// through the Go tile kernel, which every CPU runs).
func TestRowStableAMX(t *testing.T) {
	amxOn()
	saved, savedKernel := amxOnce.on, amxKernel
	amxOnce.on, amxKernel = true, amxTileGo
	t.Cleanup(func() { amxOnce.on, amxKernel = saved, savedKernel })
	rng := rand.New(rand.NewPCG(63, 64))
	pool := rowStablePool(t, 2)
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
		t.Run(dt.String(), func(t *testing.T) {
			w, _ := randQuantWeights(t, rng, dt, 32, 256, 0, true)
			checkRowStable(t, withPack(w), randVec(rng, 70*256), pool)
		})
	}
}

// TestSetRowStable checks that the backend's switch reaches its products.
// Products of float and unpacked weights give every row the bits it has
// alone whether it is on or off (TestFloatMatMulRowIndependent); what it
// changes is that packed weights of many rows keep off AMX, whose bf16
// operands give other numbers (here through the Go tile kernel, which
// every CPU runs).
func TestSetRowStable(t *testing.T) {
	amxOn()
	saved, savedKernel := amxOnce.on, amxKernel
	amxOnce.on, amxKernel = true, amxTileGo
	t.Cleanup(func() { amxOnce.on, amxKernel = saved, savedKernel })
	rng := rand.New(rand.NewPCG(65, 66))
	b := New(2)
	const m, k, n = 2 * packRows, 256, amxMinRows
	qw, _ := randQuantWeights(t, rng, compute.Q8_0, m, k, 0, true)
	w, err := b.Weight(compute.Q8_0, []int{m, k}, qw.Data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Buf.(*packedWeight); !ok {
		t.Skip("weights are not packed in this build (purego): no AMX, so row-stable changes nothing")
	}
	x := tensorOf(b, randVec(rng, n*k), n, k)
	differ := func() bool {
		many := b.Alloc(compute.F32, n, m)
		b.MatMul(many, x, w)
		for i := range n {
			one := b.Alloc(compute.F32, 1, m)
			b.MatMul(one, b.View(x, i, i+1), w)
			for j := range m {
				if math.Float32bits(f32(one)[j]) != math.Float32bits(f32(many)[i*m+j]) {
					return true
				}
			}
		}
		return false
	}
	if !differ() {
		t.Fatal("with row-stable off, one-row products have the bits of AMX many-row ones: this test cannot see the switch")
	}
	b.SetRowStable(true)
	if differ() {
		t.Fatal("with row-stable on, a one-row product differs from the row of a many-row one")
	}
	b.SetRowStable(false)
	if !differ() {
		t.Fatal("row-stable stayed on after SetRowStable(false)")
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		// bf16 of moderate exponents: the high byte of each pair
		// 0x3c-0x3f or 0xbc-0xbf.
		if i%2 == 1 {
			b[i] = byte(0x3c+rng.IntN(4)) | byte(rng.IntN(2))<<7
		} else {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}

// rowOp is an operation of a batched forward pass, run on rows lo..hi−1
// of its inputs; it returns the output rows.
type rowOp struct {
	name string
	run  func(b *Backend, lo, hi int) []float32
}

// TestRowStableOps checks that, with row-stable products on, the
// operations a batched pass runs over the whole batch give every row the
// bits it gets computed alone: norms, element-wise operations with and
// without broadcast, gated activations (long enough to be split over the
// threads), rotations, soft caps, column slices, token picks, the RowOps,
// and routed experts (float and packed quantized weights).
func TestRowStableOps(t *testing.T) {
	for _, l := range levels() {
		t.Run(levelNames[l], func(t *testing.T) { atLevel(t, l, func() { testRowStableOps(t) }) })
	}
}

func testRowStableOps(t *testing.T) {
	noAMX(t)
	const n, d, heads, hd = 37, 2880, 45, 64
	rng := rand.New(rand.NewPCG(67, 68))
	b := New(3)
	b.SetRowStable(true)
	view := func(x *compute.Tensor, lo, hi int) *compute.Tensor { return b.View(x, lo, hi) }
	out := func(dst *compute.Tensor) []float32 { return append([]float32(nil), f32(dst)...) }
	x := tensorOf(b, randVec(rng, n*d), n, d)
	y := tensorOf(b, randVec(rng, n*d), n, d)
	row := tensorOf(b, randVec(rng, d), 1, d)
	head := tensorOf(b, randVec(rng, hd), hd)
	bias := tensorOf(b, randVec(rng, d), d)
	table, err := b.Weight(compute.BF16, []int{50, d}, randBytes(rng, 2*50*d))
	if err != nil {
		t.Fatal(err)
	}
	ids := b.Alloc(compute.I32, n, 1)
	pos := b.Alloc(compute.I32, n, 1)
	for i := range n {
		ids.Buf.([]int32)[i] = int32(rng.IntN(50))
		pos.Buf.([]int32)[i] = int32(rng.IntN(5000))
	}
	inv := make([]float32, hd/2)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -2*float64(i)/hd))
	}
	rope := &compute.Rope{Dims: hd, InvFreq: inv, Scale: 1}
	s := tensorOf(b, randVec(rng, n*3), n, 3)

	// Experts: float and packed Q4_0 weights, routed by softmax then top-k.
	const ne, hid, inter = 6, 64, 96
	var moe []rowOp
	for _, dt := range []compute.DType{compute.BF16, compute.Q4_0} {
		f := &compute.ExpertFFN{Experts: testExperts(t, b, rng, dt, ne, hid, inter, dt == compute.Q4_0, true), Act: compute.SiLU}
		r := &compute.Routing{Experts: ne, TopK: 3, Normalize: true}
		xe := tensorOf(b, randVec(rng, n*hid), n, hid)
		logits := tensorOf(b, randVec(rng, n*ne), n, ne)
		moe = append(moe, rowOp{"Route+ApplyExperts/" + dt.String(), func(b *Backend, lo, hi int) []float32 {
			ids, wt := b.Alloc(compute.I32, hi-lo, r.Slots()), b.Alloc(compute.F32, hi-lo, r.Slots())
			b.Route(ids, wt, view(logits, lo, hi), nil, r)
			dst := b.Alloc(compute.F32, hi-lo, hid)
			b.ApplyExperts(dst, view(xe, lo, hi), ids, wt, f)
			return append(out(dst), f32(wt)...)
		}})
	}

	unary := func(name string, f func(dst, x *compute.Tensor)) rowOp {
		return rowOp{name, func(b *Backend, lo, hi int) []float32 {
			dst := b.Alloc(compute.F32, hi-lo, d)
			f(dst, view(x, lo, hi))
			return out(dst)
		}}
	}
	binary := func(name string, f func(dst, x, y *compute.Tensor), broadcast bool) rowOp {
		return rowOp{name, func(b *Backend, lo, hi int) []float32 {
			dst := b.Alloc(compute.F32, hi-lo, d)
			yy := row
			if !broadcast {
				yy = view(y, lo, hi)
			}
			f(dst, view(x, lo, hi), yy)
			return out(dst)
		}}
	}
	ops := []rowOp{
		{"Embed", func(b *Backend, lo, hi int) []float32 {
			dst := b.Alloc(compute.F32, hi-lo, d)
			b.Embed(dst, table, view(ids, lo, hi))
			return out(dst)
		}},
		unary("RMSNorm", func(dst, x *compute.Tensor) { b.RMSNorm(dst, x, row, 1e-6, 1) }),
		unary("RMSNorm/heads", func(dst, x *compute.Tensor) { b.RMSNorm(dst, x, head, 1e-6, 0) }),
		unary("RMSNorm/nil", func(dst, x *compute.Tensor) { b.RMSNorm(dst, x, nil, 1e-6, 0) }),
		unary("LayerNorm", func(dst, x *compute.Tensor) { b.LayerNorm(dst, x, row, bias, 1e-5) }),
		binary("Add", b.Add, false),
		binary("Add/broadcast", b.Add, true),
		binary("Mul", b.Mul, false),
		binary("Mul/broadcast", b.Mul, true),
		binary("GLU/silu", func(dst, g, u *compute.Tensor) { b.GLU(dst, g, u, compute.SiLU) }, false),
		binary("GLU/gelu_tanh", func(dst, g, u *compute.Tensor) { b.GLU(dst, g, u, compute.GELUTanh) }, false),
		unary("Activate/gelu", func(dst, x *compute.Tensor) { b.Activate(dst, x, compute.GELU) }),
		unary("Scale", func(dst, x *compute.Tensor) { b.Scale(dst, x, 0.37) }),
		unary("SoftCap", func(dst, x *compute.Tensor) { b.SoftCap(dst, x, 30) }),
		{"Columns", func(b *Backend, lo, hi int) []float32 {
			dst := b.Alloc(compute.F32, hi-lo, 100)
			b.Columns(dst, view(x, lo, hi), 7)
			return out(dst)
		}},
		{"RoPE", func(b *Backend, lo, hi int) []float32 {
			dst := tensorOf(b, f32(view(x, lo, hi)), hi-lo, d)
			b.RoPE(dst, view(pos, lo, hi), heads, rope)
			return out(dst)
		}},
		{"TopK", func(b *Backend, lo, hi int) []float32 {
			dst := b.Alloc(compute.F32, hi-lo, 2*8)
			b.TopK(dst, view(x, lo, hi), 8)
			return out(dst)
		}},
		{"AxpyRows", func(b *Backend, lo, hi int) []float32 {
			dst := tensorOf(b, f32(view(y, lo, hi)), hi-lo, d)
			b.AxpyRows(dst, view(x, lo, hi), view(s, lo, hi), 1)
			return out(dst)
		}},
		binary("MatchRMS", func(dst, x, y *compute.Tensor) { b.MatchRMS(dst, x, y, 1e-6) }, false),
		unary("GaussianTopK", func(dst, x *compute.Tensor) { b.GaussianTopK(dst, x, 1.645) }),
	}
	for _, op := range append(ops, moe...) {
		t.Run(op.name, func(t *testing.T) {
			all := op.run(b, 0, n)
			c := len(all) / n
			for i := range n {
				one := op.run(b, i, i+1)
				if strings.HasPrefix(op.name, "Route") {
					// The outputs, then the routing weights.
					c, hid := len(one), hid
					one = append(one[:hid:hid], one[hid:]...)
					got := append(append([]float32(nil), all[i*hid:(i+1)*hid]...), all[n*hid+i*(c-hid):n*hid+(i+1)*(c-hid)]...)
					compareBits(t, i, got, one)
					continue
				}
				compareBits(t, i, all[i*c:(i+1)*c], one)
			}
		})
	}
}

// compareBits fails unless row i of a batch, got, has the bits of the
// same row computed alone.
func compareBits(t *testing.T, i int, got, alone []float32) {
	t.Helper()
	for j := range alone {
		if math.Float32bits(got[j]) != math.Float32bits(alone[j]) {
			t.Fatalf("row %d [%d] = %g in the batch, %g alone", i, j, got[j], alone[j])
		}
	}
}
