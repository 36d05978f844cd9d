package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
)

// relErr returns ‖got - want‖ / ‖want‖.
func relErr(got, want []float32) float64 {
	var d, r float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		r += float64(want[i]) * float64(want[i])
	}
	if r == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / r)
}

// readBoth reads a pair of tensors.
func (h *harness) readBoth(p pair) (got, want []float32) {
	want = make([]float32, p.c.Len())
	h.c.Read(want, p.c)
	got = make([]float32, p.g.Len())
	h.g.Read(got, p.g)
	if err := h.g.Err(); err != nil {
		h.t.Fatal(err)
	}
	return got, want
}

// gemmEngines lists the prefill matmul engines present: cuBLAS when found,
// and the own kernel.
func gemmEngines(g *Backend) []string {
	if g.UseCUBLAS(true) {
		return []string{"cublas", "own"}
	}
	return []string{"own"}
}

func TestGEMMProbe(t *testing.T) {
	g := openGPU(t)
	t.Logf("backend: %s", g.Name())
	t.Logf("prefill matmul: %s", g.GEMM())
	for _, d := range cublasDirs() {
		t.Logf("cuBLAS search dir present: %s", d)
	}
}

// TestMatMulTensorCores compares the tensor-core prefill matmul (cuBLAS and
// the own kernel, fast and precise modes) with the CPU backend on odd sizes.
func TestMatMulTensorCores(t *testing.T) {
	h := newHarness(t)
	g := h.g
	defer g.UseCUBLAS(true)
	defer func(m matmulMode) { g.gemm.mode = m }(g.gemm.mode)
	shapes := []struct{ n, m, k int }{
		{5, 33, 64}, {67, 130, 72}, {130, 257, 200}, {128, 128, 128},
		{300, 1000, 1032}, {129, 385, 4104}, {17, 7, 24},
	}
	for _, engine := range gemmEngines(g) {
		g.UseCUBLAS(engine == "cublas")
		for _, dt := range []compute.DType{compute.BF16, compute.F16} {
			for _, s := range shapes {
				w := h.weight(dt, 0.5, s.m, s.k)
				x := h.act(1, s.n, s.k)
				dst := h.zeros(s.n, s.m)
				h.c.MatMul(dst.c, x.c, w.c)
				for _, mode := range []matmulMode{modeFast, modePrecise} {
					name := fmt.Sprintf("%s/%s/mode%d/n%d/m%d/k%d", engine, dt, mode, s.n, s.m, s.k)
					g.gemm.mode = mode
					g.MatMul(dst.g, x.g, w.g)
					got, want := h.readBoth(dst)
					e := relErr(got, want)
					tol := 1e-2
					if mode == modePrecise {
						tol = 2e-5
					}
					t.Logf("%s: ‖Δ‖/‖ref‖ = %.2e", name, e)
					if e > tol || math.IsNaN(e) {
						t.Errorf("%s: ‖Δ‖/‖ref‖ = %.3g > %g", name, e, tol)
					}
				}
			}
		}
	}
}

// BenchmarkGEMM measures prefill matmuls of 4096 rows on bf16 weights of
// llama-3.1-8b's shapes, with cuBLAS, the own tensor-core kernel and the
// f32 SIMT kernel, in TFLOP/s (the f32→bf16 activation conversion
// included).
func BenchmarkGEMM(b *testing.B) {
	g := openGPU(b)
	defer g.UseCUBLAS(true)
	defer func(m matmulMode) { g.gemm.mode = m }(g.gemm.mode)
	g.gemm.mode = modeFast
	b.Logf("prefill matmul: %s", g.GEMM())
	const n = 4096
	for _, s := range []struct{ m, k int }{{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}} {
		w, err := g.Weight(compute.BF16, []int{s.m, s.k}, randomBF16(s.m*s.k, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		x := g.Alloc(compute.F32, n, s.k)
		g.Upload(x, randVals(rand.New(rand.NewPCG(3, 4)), n*s.k, 1))
		dst := g.Alloc(compute.F32, n, s.m)
		for _, engine := range append(gemmEngines(g), "simt") {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", engine, n, s.m, s.k), func(b *testing.B) {
				g.UseCUBLAS(engine == "cublas")
				g.gemm.simt = engine == "simt"
				defer func() { g.gemm.simt = false }()
				for range 2 {
					g.MatMul(dst, x, w)
				}
				if err := g.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				t0 := time.Now()
				for range b.N {
					g.MatMul(dst, x, w)
				}
				if err := g.Synchronize(); err != nil {
					b.Fatal(err)
				}
				el := time.Since(t0).Seconds()
				b.ReportMetric(2*float64(n)*float64(s.m)*float64(s.k)*float64(b.N)/el/1e12, "TFLOP/s")
			})
		}
		g.Free(x)
		g.Free(dst)
	}
}

// TestModes checks the parsing of LEM_CUDA_MATMUL and LEM_CUDA_ATTENTION
// (host side, no GPU needed).
func TestModes(t *testing.T) {
	for _, tc := range []struct {
		s       string
		mm      matmulMode
		at      attnMode
		mmErr   bool
		attnErr bool
	}{
		{"", modeAuto, attnAuto, false, false},
		{"auto", modeAuto, attnAuto, false, false},
		{"fast", modeFast, 0, false, true},
		{"precise", modePrecise, 0, false, true},
		{"exact", 0, attnExact, true, false},
		{"flash", 0, attnFlash, true, false},
		{"bogus", 0, 0, true, true},
	} {
		mm, err := parseMatmulMode(tc.s)
		if (err != nil) != tc.mmErr || (err == nil && mm != tc.mm) {
			t.Errorf("parseMatmulMode(%q) = %v, %v", tc.s, mm, err)
		}
		at, err := parseAttnMode(tc.s)
		if (err != nil) != tc.attnErr || (err == nil && at != tc.at) {
			t.Errorf("parseAttnMode(%q) = %v, %v", tc.s, at, err)
		}
	}
	for _, c := range append(append([]flashConfig(nil), flashConfigs...), flashVariants...) {
		if c.shared() > 227<<10 || c.bq%64 != 0 || c.bkv%16 != 0 {
			t.Errorf("%s: %d bytes of shared memory, %d queries, %d keys per tile", c.name, c.shared(), c.bq, c.bkv)
		}
	}
}

// TestMatMulReusesConversion checks products that share an input (the
// conversion is reused) and one after the input changed (it is not).
func TestMatMulReusesConversion(t *testing.T) {
	h := newHarness(t)
	defer func(m matmulMode) { h.g.gemm.mode = m }(h.g.gemm.mode)
	h.g.gemm.mode = modeFast
	x := h.act(1, 70, 256)
	w1 := h.weight(compute.BF16, 0.5, 96, 256)
	w2 := h.weight(compute.BF16, 0.5, 40, 256)
	d1, d2 := h.zeros(70, 96), h.zeros(70, 40)
	check := func(what string) {
		for _, d := range []pair{d1, d2} {
			got, want := h.readBoth(d)
			if e := relErr(got, want); e > 1e-2 || math.IsNaN(e) {
				t.Errorf("%s: ‖Δ‖/‖ref‖ = %.3g", what, e)
			}
		}
	}
	h.c.MatMul(d1.c, x.c, w1.c)
	h.c.MatMul(d2.c, x.c, w2.c)
	h.g.MatMul(d1.g, x.g, w1.g)
	h.g.MatMul(d2.g, x.g, w2.g)
	check("shared input")
	v := randVals(h.r, 70*256, 3)
	h.c.Upload(x.c, v)
	h.g.Upload(x.g, v)
	h.c.MatMul(d1.c, x.c, w1.c)
	h.g.MatMul(d1.g, x.g, w1.g)
	h.c.MatMul(d2.c, x.c, w2.c)
	h.g.MatMul(d2.g, x.g, w2.g)
	check("changed input")
}
