package cpu

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
)

// benchQuantTypes are the four main types, Q5_0 and Q5_K (the other
// integer kernels), and Q3_K for the dequantizing path.
var benchQuantTypes = []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q5_0, compute.Q5_K, compute.Q3_K}

// BenchmarkQGEMV measures the decode matrix-vector product with quantized
// weights at the shapes of a 1B model (hidden 2048, MLP 8192), in GB/s of
// weights streamed; membw is the bandwidth baseline of the same run (as
// BenchmarkMemBandwidth). The weights are windows of benchBuf used in turn,
// so that the last-level cache cannot hold them; their random bytes make
// valid blocks.
func BenchmarkQGEMV(b *testing.B) {
	buf := benchBuf()
	for _, th := range benchThreads {
		b.Run(fmt.Sprintf("membw/threads=%d", th), func(b *testing.B) {
			pool := NewPool(th)
			defer pool.Close()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				StreamRead(buf, pool)
			}
		})
	}
	for _, sh := range []struct{ m, k int }{{2048, 8192}, {8192, 2048}} {
		for _, dt := range benchQuantTypes {
			if !packable(dt, sh.m, sh.k) {
				continue
			}
			for _, th := range benchThreads {
				b.Run(fmt.Sprintf("%dx%d/%s/packed/threads=%d", sh.m, sh.k, dt, th), func(b *testing.B) {
					rb, _ := dt.RowBytes(sh.k)
					size := sh.m * rb
					// The packed copies take the place of windows of benchBuf,
					// as many as fit in it.
					var ws []Weights
					for off := 0; off+size <= len(buf); off += size {
						w := Weights{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf[off : off+size]}
						w.pack = make([]byte, size)
						packWeights(w.pack, w)
						ws = append(ws, w)
					}
					x := randVec(rand.New(rand.NewPCG(1, 1)), sh.k)
					dst := make([]float32, sh.m)
					pool := NewPool(th)
					defer pool.Close()
					b.SetBytes(int64(size))
					i := 0
					for b.Loop() {
						MatMul(dst, x, 1, ws[i%len(ws)], pool)
						i++
					}
				})
			}
		}
		for _, dt := range benchQuantTypes {
			for _, l := range levels()[1:] {
				if dt == compute.Q3_K && l != detectLevel() {
					continue
				}
				for _, th := range benchThreads {
					name := fmt.Sprintf("%dx%d/%s/%s/threads=%d", sh.m, sh.k, dt, l, th)
					b.Run(name, func(b *testing.B) {
						rb, _ := dt.RowBytes(sh.k)
						size := sh.m * rb
						var ws []Weights
						for off := 0; off+size <= len(buf); off += size {
							ws = append(ws, Weights{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf[off : off+size]})
						}
						x := randVec(rand.New(rand.NewPCG(1, 1)), sh.k)
						dst := make([]float32, sh.m)
						pool := NewPool(th)
						defer pool.Close()
						defer setLevel(setLevel(l))
						b.SetBytes(int64(size))
						i := 0
						for b.Loop() {
							MatMul(dst, x, 1, ws[i%len(ws)], pool)
							i++
						}
					})
				}
			}
		}
	}
}

// BenchmarkQGEMM measures prefill with quantized weights: a 512-token
// prompt through a 2048×2048 projection, in GFLOP/s; bf16 is the float
// baseline of the same run (as BenchmarkGEMM). Packed Q8_0, Q4_0, Q4_K
// and Q6_K run with the VNNI kernels ("packed") and, where the CPU has
// AMX, on AMX ("packed+amx").
func BenchmarkQGEMM(b *testing.B) {
	const n, m, k = 512, 2048, 2048
	x := randVec(rand.New(rand.NewPCG(1, 1)), n*k)
	dst := make([]float32, n*m)
	amxOn()
	amx := amxOnce.on
	defer func() { amxOnce.on = amx }()
	run := func(name string, w Weights, l level, th int, withAMX bool) {
		mid := l.String()
		if w.pack != nil {
			mid = "packed"
		}
		if withAMX {
			mid += "+amx"
		}
		b.Run(fmt.Sprintf("%s/%s/threads=%d", name, mid, th), func(b *testing.B) {
			pool := NewPool(th)
			defer pool.Close()
			defer setLevel(setLevel(l))
			amxOnce.on = withAMX
			for b.Loop() {
				MatMul(dst, x, n, w, pool)
			}
			b.ReportMetric(2*n*m*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	for _, th := range benchThreads {
		run("bf16", Weights{DType: compute.BF16, Rows: m, Cols: k, Data: benchBuf()[:m*k*2]}, detectLevel(), th, false)
	}
	for _, dt := range benchQuantTypes {
		rb, _ := dt.RowBytes(k)
		w := Weights{DType: dt, Rows: m, Cols: k, Data: benchBuf()[:m*rb]}
		if packable(dt, m, k) {
			pw := w
			pw.pack = make([]byte, len(w.Data))
			packWeights(pw.pack, w)
			for _, th := range benchThreads {
				run(dt.String(), pw, detectLevel(), th, false)
				if amx && amxDtype(dt) {
					run(dt.String(), pw, detectLevel(), th, true)
				}
			}
		}
		for _, l := range levels()[1:] {
			if dt == compute.Q3_K && l != detectLevel() {
				continue
			}
			for _, th := range benchThreads {
				run(dt.String(), w, l, th, false)
			}
		}
	}
}

// BenchmarkQKernels compares other micro-kernel shapes, one thread: as
// gemv at 2048×8192 (GB/s) and gemm at 512×2048×2048 (GFLOP/s).
func BenchmarkQKernels(b *testing.B) {
	var cands []qkernelSet
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
		for l := levelAVX2; l <= detectLevel(); l++ {
			if ks := qkernels[l][dt]; ks != nil && ks.level == l {
				cands = append(cands, *ks)
			}
		}
	}
	extraFrom := len(cands)
	for _, ks := range qextraKernels {
		if ks.level <= detectLevel() && (ks.level < levelAVX512 || hasVNNI) {
			cands = append(cands, ks)
		}
	}
	for i, ks := range cands {
		// The extra kernels serve as both gemv and gemm: only one-row
		// shapes can do the former.
		if i < extraFrom || ks.gemmR == 1 {
			benchQGEMVKernel(b, ks)
		}
		if ks.gemmR > 1 {
			benchQGEMMKernel(b, ks)
		}
	}
}

func benchQGEMVKernel(b *testing.B, ks qkernelSet) {
	dt := ks.dtype
	b.Run(fmt.Sprintf("gemv/%s/%s", dt, funcName2(ks.gemv)), func(b *testing.B) {
		const m, k = 2048, 8192
		buf := benchBuf()
		rb, _ := dt.RowBytes(k)
		size := m * rb
		var ws []Weights
		for off := 0; off+size <= len(buf); off += size {
			ws = append(ws, Weights{DType: dt, Rows: m, Cols: k, Data: buf[off : off+size]})
		}
		x := randVec(rand.New(rand.NewPCG(1, 1)), k)
		dst := make([]float32, m)
		pool := NewPool(1)
		defer pool.Close()
		defer setLevel(setLevel(ks.level))
		saved := qkernels[ks.level][dt]
		defer func() { qkernels[ks.level][dt] = saved }()
		k2 := ks
		k2.gemm, k2.gemmR, k2.gemmC = saved.gemm, saved.gemmR, saved.gemmC
		qkernels[ks.level][dt] = &k2
		b.SetBytes(int64(size))
		i := 0
		for b.Loop() {
			MatMul(dst, x, 1, ws[i%len(ws)], pool)
			i++
		}
	})
}

func benchQGEMMKernel(b *testing.B, ks qkernelSet) {
	dt := ks.dtype
	b.Run(fmt.Sprintf("gemm/%s/%s", dt, funcName2(ks.gemm)), func(b *testing.B) {
		const n, m, k = 512, 2048, 2048
		rb, _ := dt.RowBytes(k)
		w := Weights{DType: dt, Rows: m, Cols: k, Data: benchBuf()[:m*rb]}
		x := randVec(rand.New(rand.NewPCG(1, 1)), n*k)
		dst := make([]float32, n*m)
		pool := NewPool(1)
		defer pool.Close()
		defer setLevel(setLevel(ks.level))
		defer swapQKernels(ks)()
		for b.Loop() {
			MatMul(dst, x, n, w, pool)
		}
		b.ReportMetric(2*n*m*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

func funcName2(f func(*qargs)) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return name[strings.LastIndexByte(name, '.')+1:]
}

// BenchmarkQPackPrefetch compares the packed one-row kernels without and
// with software prefetch at several distances and hints (qpackExtra), at
// 2048×8192, in GB/s; the default on this CPU (packPrefetch) is marked
// "(default)".
func BenchmarkQPackPrefetch(b *testing.B) {
	buf := benchBuf()
	for _, ks := range qpackExtra {
		dt := ks.dtype
		if qpackKernels[dt] == nil || ks.gfni && !hasGFNI {
			continue
		}
		for _, th := range benchThreads {
			name := packFuncName(ks.gemv)
			if def := qpackKernels[dt]; !ks.gfni && (ks.prefetch == def.prefetch || def.prefetch == "" && ks.prefetch == "0") {
				name += "(default)"
			}
			b.Run(fmt.Sprintf("%s/%s/threads=%d", dt, name, th), func(b *testing.B) {
				const m, k = 2048, 8192
				rb, _ := dt.RowBytes(k)
				size := m * rb
				// The speed does not depend on the bytes: the windows of
				// benchBuf serve as packed weights as they are.
				var ws []Weights
				for off := 0; off+size <= len(buf); off += size {
					w := Weights{DType: dt, Rows: m, Cols: k, Data: buf[off : off+size]}
					w.pack = w.Data
					ws = append(ws, w)
				}
				x := randVec(rand.New(rand.NewPCG(1, 1)), k)
				dst := make([]float32, m)
				pool := NewPool(th)
				defer pool.Close()
				saved := *qpackKernels[dt]
				defer func() { *qpackKernels[dt] = saved }()
				qpackKernels[dt].gemv = ks.gemv
				b.SetBytes(int64(size))
				i := 0
				for b.Loop() {
					MatMul(dst, x, 1, ws[i%len(ws)], pool)
					i++
				}
			})
		}
	}
}

func packFuncName(f func(*qpargs)) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return name[strings.LastIndexByte(name, '.')+1:]
}

// BenchmarkQGEMVLayer runs the seven decode products of one layer back to
// back, as a decode step does, at the shapes of llama-3.2-1b and
// qwen2.5-0.5b, with two threads; "stacked" runs q, k and v as one product
// and gate and up as one. It reports GB/s over the layer and logs each
// product's. The windows of benchBuf serve as packed weights.
func BenchmarkQGEMVLayer(b *testing.B) {
	buf := benchBuf()
	type shape struct{ m, k int }
	for _, md := range []struct {
		name              string
		hidden, kv, inter int
	}{{"llama-3.2-1b", 2048, 512, 8192}, {"qwen2.5-0.5b", 896, 128, 4864}} {
		h, kv, f := md.hidden, md.kv, md.inter
		layouts := map[string][]shape{
			"separate": {{h, h}, {kv, h}, {kv, h}, {h, h}, {f, h}, {f, h}, {h, f}},
			"stacked":  {{h + 2*kv, h}, {h, h}, {2 * f, h}, {h, f}},
		}
		for _, dt := range []compute.DType{compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q8_0, compute.Q5_0} {
			for _, lay := range []string{"separate", "stacked"} {
				b.Run(fmt.Sprintf("%s/%s/%s", md.name, dt, lay), func(b *testing.B) {
					shapes := layouts[lay]
					for _, s := range shapes {
						if s.k%dt.BlockSize() != 0 {
							b.Skipf("%d columns: not whole %s blocks", s.k, dt)
						}
					}
					// As many layers as fit in benchBuf, used in turn.
					var layers [][]Weights
					total := 0
					for off := 0; ; {
						var ws []Weights
						for _, s := range shapes {
							rb, _ := dt.RowBytes(s.k)
							size := s.m * rb
							if off+size > len(buf) {
								break
							}
							w := Weights{DType: dt, Rows: s.m, Cols: s.k, Data: buf[off : off+size]}
							w.pack = w.Data
							ws = append(ws, w)
							off += size
						}
						if len(ws) < len(shapes) {
							break
						}
						if total == 0 {
							for _, w := range ws {
								total += len(w.Data)
							}
						}
						layers = append(layers, ws)
					}
					x := randVec(rand.New(rand.NewPCG(1, 1)), max(h, f))
					dst := make([]float32, 2*f)
					pool := NewPool(2)
					defer pool.Close()
					per := make([]time.Duration, len(shapes))
					b.SetBytes(int64(total))
					i := 0
					for b.Loop() {
						for j, w := range layers[i%len(layers)] {
							t0 := time.Now()
							MatMul(dst[:w.Rows], x[:w.Cols], 1, w, pool)
							per[j] += time.Since(t0)
						}
						i++
					}
					var parts []string
					for j, s := range shapes {
						d := per[j] / time.Duration(i)
						rb, _ := dt.RowBytes(s.k)
						parts = append(parts, fmt.Sprintf("%dx%d %.1f", s.m, s.k, float64(s.m*rb)/d.Seconds()/1e9))
					}
					b.Logf("GB/s per product: %s", strings.Join(parts, ", "))
				})
			}
		}
	}
}

// BenchmarkQPackCompute runs the packed one-row kernels on a matrix that
// stays in the L2 cache (256×2048), one thread: the GB/s the kernel's
// instructions allow when memory is not the limit.
func BenchmarkQPackCompute(b *testing.B) {
	for _, dt := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q5_0, compute.Q4_K, compute.Q6_K} {
		const m, k = 256, 2048
		if !packable(dt, m, k) {
			continue
		}
		b.Run(dt.String(), func(b *testing.B) {
			rb, _ := dt.RowBytes(k)
			w := Weights{DType: dt, Rows: m, Cols: k, Data: benchBuf()[:m*rb]}
			w.pack = make([]byte, m*rb)
			packWeights(w.pack, w)
			x := randVec(rand.New(rand.NewPCG(1, 1)), k)
			dst := make([]float32, m)
			pool := NewPool(1)
			defer pool.Close()
			b.SetBytes(int64(m * rb))
			for b.Loop() {
				MatMul(dst, x, 1, w, pool)
			}
		})
	}
}
