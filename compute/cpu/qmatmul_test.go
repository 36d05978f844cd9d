package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
)

func TestQargsLayout(t *testing.T) {
	var a qargs
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"x", unsafe.Offsetof(a.x), 0},
		{"w", unsafe.Offsetof(a.w), 64},
		{"nb", unsafe.Offsetof(a.nb), 128},
		{"dst", unsafe.Offsetof(a.dst), 136},
		{"ldd", unsafe.Offsetof(a.ldd), 144},
		{"rows", unsafe.Offsetof(a.rows), 152},
		{"rstride", unsafe.Offsetof(a.rstride), 160},
		{"out", unsafe.Offsetof(a.out), 168},
		{"scr", unsafe.Offsetof(a.scr), 424},
		{"gsub", unsafe.Offsetof(a.gsub), 3576},
	} {
		if c.got != c.want {
			t.Errorf("qargs.%s at offset %d, the assembly reads it at %d", c.name, c.got, c.want)
		}
	}
	if len(a.scr) != qmaxC*384+64 {
		t.Errorf("qargs.scr has %d bytes, the assembly uses %d", len(a.scr), qmaxC*384+64)
	}
}

// quantTypes are the block-quantized types MatMul multiplies.
var quantTypes = []compute.DType{
	compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K,
	compute.Q4_1, compute.Q5_0, compute.Q5_1, compute.Q2_K, compute.Q3_K, compute.Q5_K,
	compute.IQ4_NL, compute.MXFP4,
}

// scaleFields lists the byte offsets of the float16 scales in a block of
// each type (the E8M0 exponent of MXFP4 is handled apart).
var scaleFields = map[compute.DType][]int{
	compute.Q8_0: {0}, compute.Q4_0: {0}, compute.Q4_1: {0, 2}, compute.Q5_0: {0}, compute.Q5_1: {0, 2},
	compute.Q2_K: {80, 82}, compute.Q3_K: {108}, compute.Q4_K: {0, 2}, compute.Q5_K: {0, 2}, compute.Q6_K: {208},
	compute.IQ4_NL: {0},
}

// randQuantWeights returns m×k random weights of type dt stored from byte
// offset off of a buffer poisoned around them, and their values as
// quant.Dequantize decodes them. With encode set (and a type quant can
// write), rows of normal values are quantized; otherwise every code byte
// is random and the scales are random float16 values of moderate size.
func randQuantWeights(t testing.TB, rng *rand.Rand, dt compute.DType, m, k, off int, encode bool) (Weights, []float64) {
	t.Helper()
	rb, err := dt.RowBytes(k)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, off+m*rb+off)
	data := buf[off : off+m*rb]
	if encode && quant.CanQuantize(dt) {
		row := make([]float32, k)
		for j := range m {
			for i := range row {
				row[i] = float32(rng.NormFloat64())
			}
			if err := quant.Quantize(data[j*rb:(j+1)*rb], row, dt); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		bb := dt.BlockBytes()
		for b := 0; b < len(data); b += bb {
			if dt == compute.MXFP4 {
				data[b] = byte(120 + rng.IntN(10))
			}
			for _, f := range scaleFields[dt] {
				v := float32(math.Exp(rng.Float64()*4-6)) * float32(1-2*rng.IntN(2))
				binary.LittleEndian.PutUint16(data[b+f:], half.F32ToF16(v))
			}
		}
	}
	for i := range off {
		buf[i] = 0xff
		buf[len(buf)-1-i] = 0xff
	}
	vals := make([]float64, m*k)
	row := make([]float32, k)
	for j := range m {
		if err := quant.Dequantize(row, data[j*rb:(j+1)*rb], dt); err != nil {
			t.Fatal(err)
		}
		for i, v := range row {
			vals[j*k+i] = float64(v)
		}
	}
	return Weights{DType: dt, Rows: m, Cols: k, Data: data}, vals
}

// actBlock returns the size of the blocks in which MatMul quantizes the
// activations for weights of type dt, or 0 when it does not.
func actBlock(dt compute.DType) int {
	switch dt {
	case compute.Q8_0, compute.Q4_0, compute.Q5_0, compute.IQ4_NL:
		return 32
	case compute.Q4_K, compute.Q6_K, compute.Q5_K:
		return 256
	}
	return 0
}

// checkQuantMatMul compares dst with x·Wᵀ computed in float64 from the
// dequantized weights. Quantizing an activation block moves each value by
// at most half its step max|x|/127, so a product may differ from the
// reference by Σ over blocks of step/2 · Σ|w| in the block; on top of that,
// float32 rounding of up to 1e-5 · Σ|x·w|.
func checkQuantMatMul(t *testing.T, dst, x []float32, wv []float64, n, m, k int, dt compute.DType) {
	t.Helper()
	ab := actBlock(dt)
	bad := 0
	for i := range n {
		xr := x[i*k : (i+1)*k]
		var steps []float64
		if ab > 0 {
			for b := 0; b < k; b += ab {
				var amax float64
				for _, v := range xr[b : b+ab] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				steps = append(steps, amax/127)
			}
		}
		for j := range m {
			wr := wv[j*k : (j+1)*k]
			var s, sa, qe float64
			for q := range k {
				p := float64(xr[q]) * wr[q]
				s += p
				sa += math.Abs(p)
				if ab > 0 {
					qe += steps[q/ab] / 2 * math.Abs(wr[q])
				}
			}
			got := float64(dst[i*m+j])
			if math.Abs(got-s) > 1.01*qe+1e-5*sa+1e-30 || math.IsNaN(got) {
				if bad < 5 {
					t.Errorf("dst[%d,%d] = %g, want %g ± %g (Σ|x·w| %g)", i, j, got, s, 1.01*qe+1e-5*sa, sa)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values wrong", bad, n*m)
	}
}

var qmatmulShapes = []struct{ n, m, k int }{
	{1, 1, 32},
	{1, 7, 96}, // an odd number of 32-element blocks
	{3, 9, 64},
	{1, 17, 192},
	{2, 7, 160},
	{1, 13, 256},
	{1, 37, 512},
	{1, 67, 288},
	{1, 130, 1024},
	{2, 5, 256},
	{3, 11, 768},
	{5, 13, 96},
	{7, 29, 512},
	{17, 37, 256},
	{9, 15, 1056},
	{65, 41, 256},
	{33, 70, 2304},
}

func TestQuantMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, threads := range testThreads() {
		pool := NewPool(threads)
		defer pool.Close()
		for _, dt := range quantTypes {
			for _, sh := range qmatmulShapes {
				if sh.k%dt.BlockSize() != 0 {
					continue
				}
				for _, encode := range []bool{false, true} {
					if encode && (!quant.CanQuantize(dt) || threads > 1) {
						continue
					}
					w, wv := randQuantWeights(t, rng, dt, sh.m, sh.k, 3, encode)
					x := randVec(rng, sh.n*sh.k)
					for _, l := range levels() {
						name := fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d/threads=%d", l, dt, sh.n, sh.m, sh.k, threads)
						if encode {
							name += "/encoded"
						}
						t.Run(name, func(t *testing.T) {
							dst := randVec(rng, sh.n*sh.m+3)
							guard := append([]float32(nil), dst[sh.n*sh.m:]...)
							atLevel(t, l, func() { MatMul(dst, x, sh.n, w, pool) })
							checkQuantMatMul(t, dst, x, wv, sh.n, sh.m, sh.k, dt)
							for i, g := range guard {
								if dst[sh.n*sh.m+i] != g {
									t.Errorf("MatMul wrote past n×m")
								}
							}
						})
					}
				}
			}
		}
	}
}

// TestQuantMatMulMatchesGeneric checks the assembly against the pure-Go
// kernels, which compute the same integer sums: only the float rounding
// differs.
func TestQuantMatMulMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 75, 2560
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q5_0, compute.IQ4_NL, compute.Q5_K} {
		w, wv := randQuantWeights(t, rng, dt, m, k, 1, false)
		for _, n := range []int{1, 11} {
			x := randVec(rng, n*k)
			want := make([]float32, n*m)
			atLevel(t, levelGeneric, func() { MatMul(want, x, n, w, pool) })
			for _, l := range levels()[1:] {
				got := make([]float32, n*m)
				atLevel(t, l, func() { MatMul(got, x, n, w, pool) })
				for i := range got {
					var sa float64
					for q := range k {
						sa += math.Abs(float64(x[i/m*k+q]) * wv[i%m*k+q])
					}
					if d := math.Abs(float64(got[i] - want[i])); d > 2e-6*sa {
						t.Fatalf("%s %s n=%d: dst[%d] = %g, generic %g (Σ|x·w| %g)", l, dt, n, i, got[i], want[i], sa)
					}
				}
			}
		}
	}
}

// TestQuantMatMulBlocking varies the tiling of the many-row product.
func TestQuantMatMulBlocking(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	defer func(xb, tm, df int) { qgemmXBytes, qgemmTileM, qdeqFloats = xb, tm, df }(qgemmXBytes, qgemmTileM, qdeqFloats)
	pool := NewPool(2)
	defer pool.Close()
	const n, m, k = 23, 41, 512
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q5_0, compute.Q5_K, compute.Q3_K} {
		w, wv := randQuantWeights(t, rng, dt, m, k, 0, false)
		x := randVec(rng, n*k)
		for _, b := range []struct{ xb, tm, df int }{{1, 1, 1}, {5000, 7, 3000}, {1 << 20, 96, 1 << 20}} {
			qgemmXBytes, qgemmTileM, qdeqFloats = b.xb, b.tm, b.df
			for _, l := range levels() {
				t.Run(fmt.Sprintf("%s/%s/xb=%d,tm=%d", l, dt, b.xb, b.tm), func(t *testing.T) {
					dst := make([]float32, n*m)
					atLevel(t, l, func() { MatMul(dst, x, n, w, pool) })
					checkQuantMatMul(t, dst, x, wv, n, m, k, dt)
				})
			}
		}
	}
}

// TestQuantKernelSets checks every generated kernel set, those this CPU
// does not pick (the AVX-512 Q4_0 kernels without VBMI) and the shapes
// generated for benchmarks included.
func TestQuantKernelSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	pool := NewPool(2)
	defer pool.Close()
	for _, ks := range append(append([]qkernelSet(nil), asmQKernels...), qextraKernels...) {
		if ks.level > detectLevel() || ks.level == levelAVX512 && !hasVNNI || ks.vbmi && !hasVBMI {
			continue
		}
		for _, sh := range []struct{ n, m, k int }{{1, 19, 768}, {1, 9, 288}, {7, 23, 512}, {13, 11, 1280}} {
			if sh.k%ks.dtype.BlockSize() != 0 {
				continue
			}
			w, wv := randQuantWeights(t, rng, ks.dtype, sh.m, sh.k, 1, false)
			x := randVec(rng, sh.n*sh.k)
			t.Run(fmt.Sprintf("%s/%s/R%dC%d/n=%d", ks.level, ks.dtype, ks.gemmR, ks.gemmC, sh.n), func(t *testing.T) {
				defer swapQKernels(ks)()
				dst := make([]float32, sh.n*sh.m)
				atLevel(t, ks.level, func() { MatMul(dst, x, sh.n, w, pool) })
				checkQuantMatMul(t, dst, x, wv, sh.n, sh.m, sh.k, ks.dtype)
			})
		}
	}
}

// swapQKernels installs ks as the kernels of its level and type and
// returns a function that restores the previous ones.
func swapQKernels(ks qkernelSet) func() {
	saved := qkernels[ks.level][ks.dtype]
	if ks.gemmR > 1 {
		// A one-row kernel reading the same activation layout: the gemv
		// of a kernel set, or an extra kernel of one row.
		var cands []qkernelSet
		cands = append(cands, asmQKernels...)
		for _, o := range qextraKernels {
			if o.gemmR == 1 {
				cands = append(cands, o)
			}
		}
		for _, o := range cands {
			if o.level == ks.level && o.dtype == ks.dtype && o.xf == ks.xf {
				ks.gemv, ks.gemvC = o.gemv, o.gemvC
				break
			}
		}
	}
	qkernels[ks.level][ks.dtype] = &ks
	return func() { qkernels[ks.level][ks.dtype] = saved }
}

func TestQuantMatMulSpecialValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 5, 512
	for _, dt := range quantTypes {
		w, _ := randQuantWeights(t, rng, dt, m, k, 0, false)
		for _, l := range levels() {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
				x := randVec(rng, 2*k)
				x[300] = bad // row 0 only
				dst := make([]float32, 2*m)
				atLevel(t, l, func() { MatMul(dst, x, 2, w, pool) })
				for j := range m {
					if !math.IsNaN(float64(dst[j])) && !math.IsInf(float64(dst[j]), 0) {
						t.Errorf("%s %s x has %g: dst[0,%d] = %g, want NaN or Inf", l, dt, bad, j, dst[j])
					}
					if v := float64(dst[m+j]); math.IsNaN(v) || math.IsInf(v, 0) {
						t.Errorf("%s %s: dst[1,%d] = %g, a row without %g", l, dt, j, v, bad)
					}
				}
			}
			// Zero activations give zero.
			x := make([]float32, k)
			dst := randVec(rng, m)
			atLevel(t, l, func() { MatMul(dst, x, 1, w, pool) })
			for j, v := range dst {
				if v != 0 {
					t.Errorf("%s %s: zero x gives dst[%d] = %g", l, dt, j, v)
				}
			}
		}
	}
}

func TestQuantMatMulPanics(t *testing.T) {
	w := Weights{DType: compute.Q4_K, Rows: 2, Cols: 256, Data: make([]byte, 2*144)}
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"short data", func() { w := w; w.Data = w.Data[:287]; MatMul(make([]float32, 2), make([]float32, 256), 1, w, nil) }},
		{"partial block", func() { w := w; w.Cols = 128; MatMul(make([]float32, 2), make([]float32, 128), 1, w, nil) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			c.f()
		}()
	}
}

func TestQuantMatMulAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 100, 512
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q5_0, compute.Q5_K, compute.Q3_K} {
		w, _ := randQuantWeights(t, rng, dt, m, k, 0, false)
		for _, l := range levels() {
			for _, n := range []int{1, 9} {
				x := randVec(rng, n*k)
				dst := make([]float32, n*m)
				atLevel(t, l, func() {
					MatMul(dst, x, n, w, pool) // grow the scratch buffers
					if a := testing.AllocsPerRun(50, func() { MatMul(dst, x, n, w, pool) }); a != 0 {
						t.Errorf("%s %s n=%d: %v allocations per MatMul, want 0", l, dt, n, a)
					}
				})
			}
		}
	}
}

// TestQuantizeX checks the activation layouts against each other: every
// layout holds the same codes and scales.
func TestQuantizeX(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	const k = 96 * 8 // 24 blocks of 32, 3 super-blocks
	x := randVec(rng, k)
	x[5] = 0.0078125 * 127 // exactly representable codes
	l32 := make([]byte, xfL32.rowBytes(k))
	quantizeX(l32, x, xfL32, 8)
	code := func(i int) int8 { return int8(l32[i/32*96+i%32]) }
	scale := func(i int) float32 { return getF32(l32[i/32*96+32:]) }
	for i, v := range x {
		d := scale(i)
		if e := math.Abs(float64(v - float32(code(i))*d)); e > float64(d)/2*1.0001 {
			t.Fatalf("x[%d] = %g quantized to %d×%g", i, v, code(i), d)
		}
	}
	for _, f := range []xfmt{xfL64Q4, xfL64Q8, xfL128Q4} {
		buf := make([]byte, f.rowBytes(k+32))
		quantizeX(buf, append(x, make([]float32, 32)...), f, 0)
		for i := range k {
			G := f.group()
			p, e := i/G, i%G
			b := e / 32 // block of the group
			pos := e
			switch f {
			case xfL64Q4:
				pos = 16*b + e%32%16 + 32*(e%32/16)
			case xfL128Q4:
				pos = 16*b + e%32%16 + 64*(e%32/16)
			}
			g := buf[p*f.bytes():]
			if int8(g[pos]) != code(i) {
				t.Fatalf("%d: element %d has code %d, xfL32 %d", f, i, int8(g[pos]), code(i))
			}
			lane := pos % 64 / 4
			so := 64
			if f == xfL128Q4 {
				so = 128
			}
			if getF32(g[so+4*lane:]) != scale(i) {
				t.Fatalf("%d: element %d in lane %d of scale %g, want %g", f, i, lane, getF32(g[so+4*lane:]), scale(i))
			}
		}
	}
	for _, f := range []xfmt{xfK4, xfK6} {
		buf := make([]byte, f.rowBytes(k))
		quantizeX(buf, x, f, 0)
		for sb := range k / 256 {
			g := buf[sb*384:]
			d := getF32(g[320:])
			var sums [16]int32
			for i := range 256 {
				sums[i/16] += int32(int8(g[i]))
			}
			for j := range 16 {
				var want float32
				switch {
				case f == xfK6:
					want = d * float32(sums[j])
				case j < 8:
					want = d * float32(sums[2*j]+sums[2*j+1])
				}
				if got := getF32(g[256+4*j:]); got != want {
					t.Fatalf("%d: super-block %d correction %d = %g, want %g", f, sb, j, got, want)
				}
			}
		}
	}
}

func TestBackendQuantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	b := New(2)
	const m, k = 9, 512
	for _, dt := range quantTypes {
		w, wv := randQuantWeights(t, rng, dt, m, k, 0, false)
		wt, err := b.Weight(dt, []int{m, k}, w.Data)
		if err != nil {
			t.Fatal(err)
		}
		// Embed dequantizes rows.
		ids := b.Alloc(compute.I32, 3)
		b.UploadInts(ids, []int32{4, 0, 8})
		emb := b.Alloc(compute.F32, 3, k)
		b.Embed(emb, wt, ids)
		for i, id := range []int{4, 0, 8} {
			for q := range k {
				if got, want := f32(emb)[i*k+q], wv[id*k+q]; float64(got) != want {
					t.Fatalf("%s: Embed row %d [%d] = %g, want %g", dt, id, q, got, want)
				}
			}
		}
		// MatMul, and on a view of rows.
		x := b.Alloc(compute.F32, 2, k)
		xs := randVec(rng, 2*k)
		b.Upload(x, xs)
		dst := b.Alloc(compute.F32, 2, m)
		b.MatMul(dst, x, wt)
		checkQuantMatMul(t, f32(dst), xs, wv, 2, m, k, dt)
		v := b.View(wt, 2, 5)
		dv := b.Alloc(compute.F32, 2, 3)
		b.MatMul(dv, x, v)
		checkQuantMatMul(t, f32(dv), xs, wv[2*k:5*k], 2, 3, k, dt)
	}
	if _, err := b.Weight(compute.Q4_K, []int{2, 128}, make([]byte, 144)); err == nil {
		t.Errorf("Weight accepted Q4_K rows of 128 elements")
	}
	if _, err := b.Weight(compute.Q4_0, []int{2, 64}, make([]byte, 71)); err == nil {
		t.Errorf("Weight accepted a short Q4_0 tensor")
	}
}

// TestQuantMatMulExact checks the integer kernels of every level against
// a float64 reference computed from the quantized activations themselves
// (codes times scales, from the xfL32 or xfK layouts) and the dequantized
// weights: what remains is float32 rounding only.
func TestQuantMatMulExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	pool := NewPool(2)
	defer pool.Close()
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q5_0, compute.IQ4_NL, compute.Q5_K} {
		for _, sh := range []struct{ n, m, k int }{{1, 21, 2304}, {6, 13, 768}} {
			w, wv := randQuantWeights(t, rng, dt, sh.m, sh.k, 0, false)
			x := randVec(rng, sh.n*sh.k)
			for i := range x {
				x[i] *= float32(math.Exp(rng.Float64()*6 - 3)) // uneven block scales
			}
			xf := xfL32
			if dt.BlockSize() == 256 {
				xf = xfK4
			}
			xh := make([]float64, len(x))
			buf := make([]byte, xf.rowBytes(sh.k))
			g := xf.group()
			for i := range sh.n {
				quantizeX(buf, x[i*sh.k:(i+1)*sh.k], xf, 0)
				for q := range sh.k {
					grp := buf[q/g*xf.bytes():]
					d := getF32(grp[g:])
					if xf == xfK4 {
						d = getF32(grp[320:])
					}
					xh[i*sh.k+q] = float64(int8(grp[q%g])) * float64(d)
				}
			}
			for _, l := range levels() {
				dst := make([]float32, sh.n*sh.m)
				atLevel(t, l, func() { MatMul(dst, x, sh.n, w, pool) })
				for i := range sh.n {
					for j := range sh.m {
						var s, sa float64
						for q := range sh.k {
							p := xh[i*sh.k+q] * wv[j*sh.k+q]
							s += p
							sa += math.Abs(p)
						}
						if got := float64(dst[i*sh.m+j]); math.Abs(got-s) > 2e-6*sa {
							t.Fatalf("%s %s n=%d: dst[%d,%d] = %g, want %g (Σ|x̂·w| %g)", l, dt, sh.n, i, j, got, s, sa)
						}
					}
				}
			}
		}
	}
}

// TestQuantizeAsm checks that the assembly quantizers write the bytes
// quantizeGo writes, special values included.
func TestQuantizeAsm(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 40))
	for _, k := range []int{32, 96, 256, 768, 2304} {
		x := randVec(rng, k)
		for i := range x {
			x[i] *= float32(math.Exp(rng.Float64()*8 - 4))
		}
		if k >= 256 {
			// A block with NaN, one with +Inf, one of zeros, one tiny.
			x[3] = float32(math.NaN())
			x[40] = float32(math.Inf(-1))
			clear(x[64:96])
			for i := 96; i < 128; i++ {
				x[i] = 1e-31 * float32(i-100)
			}
			x[127] = -float32(math.Inf(1))
		}
		for _, f := range []xfmt{xfL32, xfL64Q4, xfL64Q8, xfL128Q4, xfK4, xfK6} {
			if k%256 != 0 && (f == xfK4 || f == xfK6) {
				continue
			}
			for _, l := range levels()[1:] {
				want := make([]byte, f.rowBytes(k))
				got := make([]byte, f.rowBytes(k))
				for i := range got {
					got[i] = 0xA5
				}
				quantizeGo(want, x, f, 8)
				var ok bool
				atLevel(t, l, func() { ok = quantizeAsm(got, x, f, 8) })
				if !ok {
					continue
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s layout %d k=%d: byte %d (group %d, offset %d) = %#x, want %#x", l, f, k, i, i/f.bytes(), i%f.bytes(), got[i], want[i])
					}
				}
			}
		}
	}
}
