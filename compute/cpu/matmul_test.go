package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// levels returns the kernel levels this machine runs, lowest first; under
// -short (the race run) only the pure-Go kernels and the machine's best.
func levels() []level {
	var ls []level
	for l := levelGeneric; l <= detectLevel(); l++ {
		if testing.Short() && l != levelGeneric && l != detectLevel() {
			continue
		}
		ls = append(ls, l)
	}
	return ls
}

// testThreads returns the pool sizes a product is checked with: one
// thread and several, or under -short (the race run) only several, where
// a race would be.
func testThreads() []int {
	if testing.Short() {
		return []int{3}
	}
	return []int{1, 3}
}

// atLevel runs f with the kernels forced to level l.
func atLevel(t testing.TB, l level, f func()) {
	t.Helper()
	prev := setLevel(l)
	defer setLevel(prev)
	f()
}

func TestKargsLayout(t *testing.T) {
	var a kargs
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"x", unsafe.Offsetof(a.x), 0},
		{"w", unsafe.Offsetof(a.w), 64},
		{"k", unsafe.Offsetof(a.k), 128},
		{"out", unsafe.Offsetof(a.out), 136},
		{"dst", unsafe.Offsetof(a.dst), 392},
		{"ldd", unsafe.Offsetof(a.ldd), 400},
		{"acc", unsafe.Offsetof(a.acc), 408},
		{"kc", unsafe.Offsetof(a.kc), 416},
	} {
		if c.got != c.want {
			t.Errorf("kargs.%s at offset %d, the assembly reads it at %d", c.name, c.got, c.want)
		}
	}
}

// randWeights returns m×k random weights of type dt, stored from byte
// offset off of the returned buffer (so that they are misaligned), and
// their float64 values.
func randWeights(rng *rand.Rand, dt compute.DType, m, k, off int) (Weights, []float64) {
	es := dt.Size()
	buf := make([]byte, off+m*k*es+off)
	data := buf[off : off+m*k*es]
	vals := make([]float64, m*k)
	for i := range vals {
		f := float32(rng.NormFloat64())
		switch dt {
		case compute.BF16:
			h := half.F32ToBF16(f)
			binary.LittleEndian.PutUint16(data[2*i:], h)
			vals[i] = float64(half.BF16ToF32(h))
		case compute.F16:
			h := half.F32ToF16(f)
			binary.LittleEndian.PutUint16(data[2*i:], h)
			vals[i] = float64(half.F16ToF32(h))
		case compute.F32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(f))
			vals[i] = float64(f)
		}
	}
	// Poison the bytes around the matrix: a kernel that reads them would
	// produce NaNs.
	for i := range off {
		buf[i] = 0xff
		buf[len(buf)-1-i] = 0xff
	}
	return Weights{DType: dt, Rows: m, Cols: k, Data: data}, vals
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// checkMatMul compares dst with x·Wᵀ computed in float64. The tolerance is
// relative to Σ|x_i·w_i|, which bounds float32 rounding whatever the
// summation order.
func checkMatMul(t *testing.T, dst, x []float32, wv []float64, n, m, k int) {
	t.Helper()
	bad := 0
	for i := range n {
		for j := range m {
			var s, sa float64
			for q := range k {
				p := float64(x[i*k+q]) * wv[j*k+q]
				s += p
				sa += math.Abs(p)
			}
			got := float64(dst[i*m+j])
			if math.Abs(got-s) > 2e-6*sa+1e-30 || math.IsNaN(got) {
				if bad < 5 {
					t.Errorf("dst[%d,%d] = %g, want %g (Σ|x·w| %g)", i, j, got, s, sa)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values wrong", bad, n*m)
	}
}

var matmulShapes = []struct{ n, m, k int }{
	{1, 1, 1},
	{1, 7, 5},
	{1, 13, 31},
	{1, 33, 33},
	{1, 130, 100},
	{1, 67, 257},
	{1, 9, 1030}, // one kernel-call over a k that is no multiple of 16
	{2, 5, 17},
	{3, 11, 64},
	{5, 13, 77},
	{7, 29, 129},
	{17, 37, 300},
	{65, 97, 63},
	{70, 200, 48},
	{9, 15, 2100}, // several k blocks, the last partial
	{3, 10, 2055}, // a last k block shorter than a kernel step
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, threads := range testThreads() {
		pool := NewPool(threads)
		defer pool.Close()
		for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
			for _, sh := range matmulShapes {
				w, wv := randWeights(rng, dt, sh.m, sh.k, 2)
				x := randVec(rng, sh.n*sh.k)
				for _, l := range levels() {
					name := fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d/threads=%d", l, dt, sh.n, sh.m, sh.k, threads)
					t.Run(name, func(t *testing.T) {
						dst := randVec(rng, sh.n*sh.m+3)
						guard := append([]float32(nil), dst[sh.n*sh.m:]...)
						atLevel(t, l, func() { MatMul(dst, x, sh.n, w, pool) })
						checkMatMul(t, dst, x, wv, sh.n, sh.m, sh.k)
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

// TestMatMulBlocking varies the blocking so that tiles and k blocks have
// edges in every position.
func TestMatMulBlocking(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	defer func(kc, tn, tm int) { gemmKC, gemmTileN, gemmTileM = kc, tn, tm }(gemmKC, gemmTileN, gemmTileM)
	pool := NewPool(2)
	defer pool.Close()
	const n, m, k = 23, 41, 211
	for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
		w, wv := randWeights(rng, dt, m, k, 2)
		x := randVec(rng, n*k)
		for _, b := range []struct{ kc, tn, tm int }{{32, 1, 1}, {64, 5, 7}, {96, 9, 13}, {1024, 64, 96}} {
			gemmKC, gemmTileN, gemmTileM = b.kc, b.tn, b.tm
			for _, l := range levels() {
				t.Run(fmt.Sprintf("%s/%s/kc=%d,tile=%dx%d", l, dt, b.kc, b.tn, b.tm), func(t *testing.T) {
					dst := make([]float32, n*m)
					atLevel(t, l, func() { MatMul(dst, x, n, w, pool) })
					checkMatMul(t, dst, x, wv, n, m, k)
				})
			}
		}
	}
}

// TestMatMulMatchesGeneric checks the assembly against the pure-Go path on
// a 1B-model-like shape.
func TestMatMulMatchesGeneric(t *testing.T) {
	if testing.Short() {
		t.Skip("slow in short mode")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pool := NewPool(0)
	defer pool.Close()
	const m, k = 256, 2048
	w, _ := randWeights(rng, compute.BF16, m, k, 2)
	for _, n := range []int{1, 8} {
		x := randVec(rng, n*k)
		want := make([]float32, n*m)
		atLevel(t, levelGeneric, func() { MatMul(want, x, n, w, pool) })
		for _, l := range levels()[1:] {
			got := make([]float32, n*m)
			atLevel(t, l, func() { MatMul(got, x, n, w, pool) })
			for i := range got {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-3 {
					t.Fatalf("%s n=%d: dst[%d] = %g, generic %g", l, n, i, got[i], want[i])
				}
			}
		}
	}
}

func TestMatMulSpecialValues(t *testing.T) {
	// k = 0 clears dst; NaN in a weight poisons only its own outputs.
	pool := NewPool(2)
	defer pool.Close()
	dst := []float32{1, 2, 3}
	MatMul(dst, nil, 1, Weights{DType: compute.BF16, Rows: 3, Cols: 0}, pool)
	if dst[0] != 0 || dst[1] != 0 || dst[2] != 0 {
		t.Errorf("k=0: dst = %v, want zeros", dst)
	}
	for _, l := range levels() {
		w := make([]byte, 2*2*40)
		for i := range 80 {
			binary.LittleEndian.PutUint16(w[2*i:], half.F32ToBF16(1))
		}
		binary.LittleEndian.PutUint16(w[2*45:], 0x7fc0) // NaN in row 1
		x := make([]float32, 40)
		for i := range x {
			x[i] = 1
		}
		dst := make([]float32, 2)
		atLevel(t, l, func() { MatMul(dst, x, 1, Weights{DType: compute.BF16, Rows: 2, Cols: 40, Data: w}, pool) })
		if dst[0] != 40 || !math.IsNaN(float64(dst[1])) {
			t.Errorf("%s: dst = %v, want [40 NaN]", l, dst)
		}
	}
}

func TestMatMulPanics(t *testing.T) {
	w := Weights{DType: compute.BF16, Rows: 4, Cols: 8, Data: make([]byte, 64)}
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"short x", func() { MatMul(make([]float32, 8), make([]float32, 7), 1, w, nil) }},
		{"short dst", func() { MatMul(make([]float32, 3), make([]float32, 8), 1, w, nil) }},
		{"short data", func() { w := w; w.Data = w.Data[:63]; MatMul(make([]float32, 4), make([]float32, 8), 1, w, nil) }},
		{"dtype", func() { w := w; w.DType = compute.I32; MatMul(make([]float32, 4), make([]float32, 8), 1, w, nil) }},
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

func TestMatMulAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 100, 300
	w, _ := randWeights(rng, compute.BF16, m, k, 0)
	for _, n := range []int{1, 9} {
		x := randVec(rng, n*k)
		dst := make([]float32, n*m)
		MatMul(dst, x, n, w, pool) // grow the scratch buffers
		if a := testing.AllocsPerRun(100, func() { MatMul(dst, x, n, w, pool) }); a != 0 {
			t.Errorf("n=%d: %v allocations per MatMul, want 0", n, a)
		}
	}
}

func TestPoolConcurrentUse(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pool := NewPool(2)
	defer pool.Close()
	const n, m, k = 3, 50, 70
	w, wv := randWeights(rng, compute.F16, m, k, 0)
	x := randVec(rng, n*k)
	done := make(chan []float32)
	for range 4 {
		go func() {
			dst := make([]float32, n*m)
			for range 20 {
				MatMul(dst, x, n, w, pool)
			}
			done <- dst
		}()
	}
	for range 4 {
		checkMatMul(t, <-done, x, wv, n, m, k)
	}
}

func TestF16ToF32(t *testing.T) {
	for h := range 1 << 16 {
		got, want := f16ToF32(uint16(h)), half.F16ToF32(uint16(h))
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("f16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

func TestPackX(t *testing.T) {
	x := make([]float32, 2*37)
	for i := range x {
		x[i] = float32(i + 1)
	}
	dst := make([]float32, 2*64)
	packX(dst, x, 2, 37, 64, 16, true)
	// Row 1, first block: even elements of 38..53, then odd ones.
	want := []float32{38, 40, 42, 44, 46, 48, 50, 52, 39, 41, 43, 45, 47, 49, 51, 53}
	for i, v := range want {
		if dst[64+i] != v {
			t.Fatalf("packed row 1 = %v, want prefix %v", dst[64:80], want)
		}
	}
	// Last, partial block of row 0: elements 33..37 at positions 32..36.
	tail := dst[32:48]
	wantTail := []float32{33, 35, 37, 0, 0, 0, 0, 0, 34, 36, 0, 0, 0, 0, 0, 0}
	for i, v := range wantTail {
		if tail[i] != v {
			t.Fatalf("packed tail = %v, want %v", tail, wantTail)
		}
	}
}

// TestExtraKernels checks the kernel shapes that are generated for
// benchmarks only.
func TestExtraKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pool := NewPool(2)
	defer pool.Close()
	for _, ks := range extraKernels {
		if ks.level > detectLevel() {
			continue
		}
		for _, sh := range matmulShapes {
			w, wv := randWeights(rng, ks.dtype, sh.m, sh.k, 2)
			x := randVec(rng, sh.n*sh.k)
			t.Run(fmt.Sprintf("%s/R%dC%d/n=%d,m=%d,k=%d", ks.level, ks.gemmR, ks.gemmC, sh.n, sh.m, sh.k), func(t *testing.T) {
				saved := kernels[ks.level][ks.dtype]
				defer func() { kernels[ks.level][ks.dtype] = saved }()
				k := ks
				k.gemv, k.gemvC = ks.gemm, ks.gemmC
				if ks.gemmR > 1 {
					k.gemv, k.gemvC, k.gemvKC = saved.gemv, saved.gemvC, saved.gemvKC
				}
				kernels[ks.level][ks.dtype] = &k
				dst := make([]float32, sh.n*sh.m)
				atLevel(t, ks.level, func() { MatMul(dst, x, sh.n, w, pool) })
				checkMatMul(t, dst, x, wv, sh.n, sh.m, sh.k)
			})
		}
	}
}
