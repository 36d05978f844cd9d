package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// batchRows are the row counts of decode batches the product tests cover.
var batchRows = []int{2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 64}

// launched runs fn and returns the names of the kernels it recorded.
func launched(t *testing.T, g *Backend, fn func()) []string {
	t.Helper()
	if err := g.Synchronize(); err != nil {
		t.Fatal(err)
	}
	mark := len(g.pending)
	fn()
	var names []string
	for _, o := range g.pending[mark:] {
		if o.fn != 0 || o.work {
			names = append(names, o.name)
		}
	}
	return names
}

// TestMatMulBatch checks float products of decode batches (n = 2…64 rows)
// against the CPU: f32 weights on the gemv kernels up to 4 rows, f16 and
// bf16 on the tensor cores from gemvRows+1 rows.
func TestMatMulBatch(t *testing.T) {
	h := newHarness(t)
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		for _, s := range []struct{ m, k int }{{33, 64}, {257, 200}, {130, 1024}} {
			w := h.weight(dt, 0.5, s.m, s.k)
			for _, n := range batchRows {
				name := fmt.Sprintf("%s/n%d/m%d/k%d", dt, n, s.m, s.k)
				x := h.act(1, n, s.k)
				dst := h.zeros(n, s.m)
				h.c.MatMul(dst.c, x.c, w.c)
				h.g.MatMul(dst.g, x.g, w.g)
				h.compare(name, dst, 2e-5*math.Sqrt(float64(s.k)))
			}
		}
	}
}

// TestQuantMatMulBatch checks that quantized products of decode batches
// up to qgemvBatch rows read the packed weight (qgemv_*_8 from 5 rows)
// instead of widening it to f16 for the tensor cores, and that the
// batched kernels match the CPU at every row count up to 64 (forced onto
// them); TestQuantMatMul
// checks the default paths' results.
func TestQuantMatMulBatch(t *testing.T) {
	h := newHarness(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, dt := range quantTypes(t) {
		if _, ok := qsplitOf(dt); !ok {
			continue // widened to bf16 at load
		}
		const m, k = 40, 512
		data := quantBlocks(t, r, dt, m, k)
		w, err := h.g.Weight(dt, []int{m, k}, data)
		if err != nil {
			t.Fatal(err)
		}
		wc, err := h.c.Weight(dt, []int{m, k}, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range batchRows {
			x := h.act(2, n, k)
			dst := h.zeros(n, m)
			if n > 4 {
				ops := launched(t, h.g, func() { h.g.MatMul(dst.g, x.g, w) })
				joined := strings.Join(ops, " ")
				batched := strings.Contains(joined, "qgemv8_") && !strings.Contains(joined, "qdequant")
				if want := n <= qgemvBatch; batched != want {
					t.Errorf("%s n=%d: launched %v (weight read packed: %v, want %v)", dt, n, ops, batched, want)
				}
			}
			h.c.MatMul(dst.c, x.c, wc)
			// The rows four at a time on the per-row-count kernels: the
			// same quantized activations and sums.
			ref := h.g.Alloc(compute.F32, n, m)
			for i := 0; i < n; i += 4 {
				e := min(n, i+4)
				h.g.MatMul(h.g.View(ref, i, e), h.g.View(x.g, i, e), w)
			}
			want := readGPU(t, h.g, ref)
			{
				name := fmt.Sprintf("%s/n%d/batched", dt, n)
				func() {
					defer func(q quantState) { h.g.quant = q }(h.g.quant)
					h.g.quant.rows, h.g.quant.batch = 1, 64
					h.g.MatMul(dst.g, x.g, w)
				}()
				got, cpu := h.readBoth(dst)
				if e := relErr(got, want); e > 1e-6 {
					t.Errorf("%s: differs from the per-row-count kernels by %.3g", name, e)
				}
				// The GPU and the CPU quantize the activations per 32 and
				// per 256 elements (k-quants).
				if e := relErr(got, cpu); e > 1e-2 {
					t.Errorf("%s: differs from the CPU by %.3g", name, e)
				}
			}
		}
	}
}

// weightCopies uploads enough copies of a weight that together they
// exceed the L2 cache several times over, so that a benchmark cycling
// through them reads device memory.
func weightCopies(b *testing.B, g *Backend, dt compute.DType, m, k int, data []byte) []*compute.Tensor {
	b.Helper()
	copies := max(2, int((384<<20)/int64(len(data))+1))
	var ws []*compute.Tensor
	for range copies {
		w, err := g.Weight(dt, []int{m, k}, data)
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	return ws
}

// BenchmarkMatMulBatch measures products of decode batches on llama-3.1-8b
// shapes (gate/up 14336×4096, down 4096×14336), bf16 and Q4_K, at n = 1
// (the fused one-row kernels), 2, 4, 8, 16, 32 and 64 rows, by the path
// the backend picks ("auto") and forced onto the tensor cores ("tc") and,
// for Q4_K, onto the batched kernels ("rows8"), for bf16 up to 4 rows onto
// the gemv kernels ("gemv"). GB/s counts the
// weight bytes read once per product; x-n1 is the time against n = 1;
// of-4.8TB is the fraction of the H200's nominal bandwidth.
func BenchmarkMatMulBatch(b *testing.B) {
	g := openGPU(b)
	r := rand.New(rand.NewPCG(13, 14))
	one := map[string]float64{}
	for _, dt := range []compute.DType{compute.BF16, compute.Q4_K} {
		for _, s := range []struct{ m, k int }{{14336, 4096}, {4096, 14336}} {
			var data []byte
			if dt == compute.BF16 {
				data = randomBF16(s.m*s.k, 0.02)
			} else {
				data = quantBlocks(b, r, dt, s.m, s.k)
			}
			ws := weightCopies(b, g, dt, s.m, s.k, data)
			shape := fmt.Sprintf("%s/%dx%d", dt, s.m, s.k)
			for _, n := range []int{1, 2, 4, 8, 16, 32, 64} {
				paths := []string{"auto"}
				if n > 1 {
					paths = append(paths, "tc")
					if dt.Quantized() {
						paths = append(paths, "rows8")
					} else if n <= 4 {
						paths = append(paths, "gemv")
					}
				}
				for _, path := range paths {
					b.Run(fmt.Sprintf("%s/n%d/%s", shape, n, path), func(b *testing.B) {
						defer func(f int, q quantState) { g.gemvRows, g.quant = f, q }(g.gemvRows, g.quant)
						switch path {
						case "rows8":
							g.quant.rows, g.quant.batch = 1, 64
						case "gemv":
							g.gemvRows = 4
						case "tc":
							g.gemvRows, g.quant.rows, g.quant.batch = 1, 1, 1
						}
						// Two inputs in turn, so that every quantized
						// product quantizes its input as in a model.
						xs := []*compute.Tensor{gpuRandom(g, 1, 1, n, s.k), gpuRandom(g, 2, 1, n, s.k)}
						dst := g.Alloc(compute.F32, n, s.m)
						sec := timeOps(b, g, func() {
							for i, w := range ws {
								g.MatMul(dst, xs[i%2], w)
							}
						}) / float64(len(ws))
						bytes := float64(len(data))
						b.ReportMetric(sec*1e6, "µs/product")
						b.ReportMetric(bytes/sec/1e9, "GB/s")
						b.ReportMetric(bytes/sec/4.8e12, "of-4.8TB")
						if n == 1 {
							one[shape] = sec
						} else if t1 := one[shape]; t1 > 0 {
							b.ReportMetric(sec/t1, "x-n1")
						}
						g.Free(xs[0])
						g.Free(xs[1])
						g.Free(dst)
					})
				}
			}
		}
	}
}
