package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

func TestAMXArgsLayout(t *testing.T) {
	var a amxArgs
	for i, off := range []uintptr{
		unsafe.Offsetof(a.cfg), unsafe.Offsetof(a.a), unsafe.Offsetof(a.lda), unsafe.Offsetof(a.b),
		unsafe.Offsetof(a.bnext), unsafe.Offsetof(a.chunks), unsafe.Offsetof(a.c), unsafe.Offsetof(a.ldc), unsafe.Offsetof(a.pairs),
	} {
		if off != uintptr(8*i) {
			t.Errorf("amxArgs field %d at offset %d, the assembly reads it at %d", i, off, 8*i)
		}
	}
}

// noAMX turns the AMX products off for the rest of the test.
func noAMX(t *testing.T) {
	amxOn()
	saved := amxOnce.on
	amxOnce.on = false
	t.Cleanup(func() { amxOnce.on = saved })
}

// TestAMXDequant checks the B tiles of packed groups: the Go dequantizer
// against the values quant decodes, and the assembly against the Go one.
func TestAMXDequant(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
		for _, nb := range []int{1, 2, 3, 8} {
			bs := dt.BlockSize()
			k := bs * nb
			w, wv := randQuantWeights(t, rng, dt, packRows, k, 0, false)
			p := withPack(w)
			got := make([]byte, k*32)
			amxDequantGo(got, p.pack, dt, nb)
			for r := range packRows {
				for e := range k {
					o := e/32*1024 + e%32/2*64 + 4*r + 2*(e%2)
					v := uint16(got[o]) | uint16(got[o+1])<<8
					if want := half.F32ToBF16(float32(wv[r*k+e])); v != want {
						t.Fatalf("%s nb=%d: row %d element %d = %#04x, want %#04x", dt, nb, r, e, v, want)
					}
				}
			}
			if !amxAsmDequant {
				continue
			}
			asm := make([]byte, k*32)
			amxDequant(asm, p.pack, dt, nb)
			for i := range asm {
				if asm[i] != got[i] {
					t.Fatalf("%s nb=%d: assembly byte %d = %#02x, Go %#02x", dt, nb, i, asm[i], got[i])
				}
			}
		}
	}
}

func TestAMXBF16Row(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	src := randVec(rng, 32*5+7)
	// Exact halves and their neighbours round to even.
	for i := range 16 {
		src[i] = math.Float32frombits(0x3f800000 + uint32(i)<<15 + uint32(i%3) - 1)
	}
	dst := make([]uint16, len(src))
	bf16Row(dst, src)
	for i, v := range src {
		if want := half.F32ToBF16(v); dst[i] != want {
			t.Fatalf("bf16(%g) [%d] = %#04x, want %#04x", v, i, dst[i], want)
		}
	}
}

// TestAMXMatMul checks matMulAMX, with the Go tile kernel and, on a CPU
// with AMX, with the assembly, against float64 sums of the bf16-rounded
// operands; and that MatMul takes the AMX path where it is on.
func TestAMXMatMul(t *testing.T) {
	if !amxAsmDequant {
		t.Skip("no AVX-512 BF16")
	}
	kernels := map[string]func(*amxArgs){"go": amxTileGo}
	if amxOn() {
		kernels["asm"] = amxKernel
	}
	rng := rand.New(rand.NewPCG(45, 46))
	for _, threads := range testThreads() {
		pool := NewPool(threads)
		defer pool.Close()
		for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
			for _, sh := range []struct{ n, m, k int }{{32, 32, 32}, {45, 48, 96}, {70, 80, 160}, {33, 16, 64}, {64, 96, 2304}, {96, 208, 64}} {
				// The k-quants' rows are whole super-blocks.
				bs := dt.BlockSize()
				sh.k = (sh.k + bs - 1) / bs * bs
				w, wv := randQuantWeights(t, rng, dt, sh.m, sh.k, 0, true)
				p := withPack(w)
				x := randVec(rng, sh.n*sh.k)
				for name, kern := range kernels {
					t.Run(fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d/threads=%d", name, dt, sh.n, sh.m, sh.k, threads), func(t *testing.T) {
						dst := randVec(rng, sh.n*sh.m+5)
						guard := append([]float32(nil), dst[sh.n*sh.m:]...)
						s := pool.lock()
						matMulAMX(s, dst, x, sh.n, p, kern)
						s.mu.Unlock()
						for i := range sh.n {
							for j := range sh.m {
								var sum, sa float64
								for q := range sh.k {
									xv := float64(bf16f(half.F32ToBF16(x[i*sh.k+q])))
									wq := float64(bf16f(half.F32ToBF16(float32(wv[j*sh.k+q]))))
									sum += xv * wq
									sa += math.Abs(xv * wq)
								}
								if got := float64(dst[i*sh.m+j]); math.Abs(got-sum) > 1e-5*sa+1e-30 || math.IsNaN(got) {
									t.Fatalf("dst[%d,%d] = %g, want %g (Σ|x·w| %g)", i, j, got, sum, sa)
								}
							}
						}
						for i, g := range guard {
							if dst[sh.n*sh.m+i] != g {
								t.Fatalf("matMulAMX wrote past n×m")
							}
						}
						if name != "asm" {
							return
						}
						via := make([]float32, sh.n*sh.m)
						MatMul(via, x, sh.n, p, pool)
						for i := range via {
							if via[i] != dst[i] {
								t.Fatalf("MatMul [%d] = %g, matMulAMX %g: MatMul did not take the AMX path", i, via[i], dst[i])
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkAMXTile measures the tile kernel alone, one thread, on operands
// that stay in the caches: 32 activation rows times pairs pairs of weight
// groups per call, in GMAC/s.
func BenchmarkAMXTile(b *testing.B) {
	if !amxOn() {
		b.Skip("no AMX")
	}
	for _, k := range []int{896, 4864} {
		for _, pairs := range []int{1, 6} {
			b.Run(fmt.Sprintf("k=%d/pairs=%d", k, pairs), func(b *testing.B) {
				nc := k / 32
				av := make([]uint16, amxRows*k)
				for i := range av {
					av[i] = half.F32ToBF16(float32(i%7) / 8)
				}
				bv := make([]byte, 2*pairs*nc*1024)
				for i := 1; i < len(bv); i += 2 {
					bv[i] = 0x3c
				}
				c := make([]float32, amxRows*32*pairs)
				a := amxArgs{cfg: amxConfig, a: &av[0], lda: 2 * k, b: &bv[0], bnext: nc * 1024, chunks: nc,
					c: &c[0], ldc: 128 * pairs, pairs: pairs}
				for b.Loop() {
					amxKernel(&a)
				}
				b.ReportMetric(float64(amxRows*32*k*pairs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
