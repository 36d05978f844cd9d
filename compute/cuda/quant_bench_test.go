package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
)

// randomBlocks returns rows×cols values of dt as random codes with small
// finite scales (speed does not depend on the values; NaNs are avoided so
// that outputs stay readable).
func randomBlocks(dt compute.DType, rows, cols int) []byte {
	rb, _ := dt.RowBytes(cols)
	out := make([]byte, rows*rb)
	bb := dt.BlockBytes()
	nblk := len(out) / bb
	var scales [][2]int // byte ranges of f16 scales within a block
	es := 2
	switch dt {
	case compute.Q8_0, compute.Q4_0, compute.Q5_0:
		scales = [][2]int{{0, 2}}
	case compute.Q4_K, compute.Q5_K:
		scales = [][2]int{{0, 2}, {2, 4}}
	case compute.Q6_K:
		scales = [][2]int{{208, 210}}
	default:
		if _, _, sc, ok := dt.MLX(); ok {
			es = sc.Size()
			scales = [][2]int{{0, es}, {es, 2 * es}}
		}
	}
	var wg sync.WaitGroup
	const parts = 16
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 11))
			lo, hi := p*nblk/parts, (p+1)*nblk/parts
			seg := out[lo*bb : hi*bb]
			for i := 0; i+8 <= len(seg); i += 8 {
				binary.LittleEndian.PutUint64(seg[i:], r.Uint64())
			}
			for b := lo; b < hi; b++ {
				blk := out[b*bb:]
				for _, s := range scales {
					v := 0.001 * (1 + r.Float32())
					if s[1]-s[0] == 4 {
						binary.LittleEndian.PutUint32(blk[s[0]:], uint32(half.F32ToBF16(v))<<16)
					} else if es == 2 && dt.String()[:3] == "mlx" {
						binary.LittleEndian.PutUint16(blk[s[0]:], half.F32ToBF16(v))
					} else {
						binary.LittleEndian.PutUint16(blk[s[0]:], half.F32ToF16(v))
					}
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// timeGraph captures reps calls of fn as one graph and returns the time
// of one call, from replays of the graph.
func timeGraph(tb testing.TB, g *Backend, fn func(), reps int) time.Duration {
	fn() // allocates scratch outside the capture
	gr, err := g.Capture(func() {
		for range reps {
			fn()
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer gr.Close()
	gr.Launch()
	if err := g.Synchronize(); err != nil {
		tb.Fatal(err)
	}
	const launches = 10
	t0 := time.Now()
	for range launches {
		gr.Launch()
	}
	if err := g.Synchronize(); err != nil {
		tb.Fatal(err)
	}
	return time.Since(t0) / (launches * time.Duration(reps))
}

// BenchmarkQuantGEMV measures decode products (n = 1) on quantized weights
// of llama-3.1-8b and llama-3.2-1b shapes, from CUDA graphs of 20
// products: "matmul" is what MatMul runs (activation quantization and the
// dp4a kernel), "kernel1" and "kernel2" the dp4a kernel alone with one and
// two weight rows per warp. It reports GB/s of weight bytes
// (the file's size) and the fraction of the copy bandwidth measured in the
// same process; bf16 GEMV on the same shape is the dense baseline.
func BenchmarkQuantGEMV(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("copy bandwidth %.0f GB/s", bw/1e9)
	mlx4 := mlxType(b, 4, 64, compute.BF16)
	shapes := []struct{ m, k int }{{14336, 4096}, {4096, 14336}, {128256, 4096}, {2048, 8192}, {8192, 2048}, {2048, 2048}}
	for _, s := range shapes {
		types := []compute.DType{compute.BF16, compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K, mlx4, compute.Q5_0}
		for _, dt := range types {
			name := fmt.Sprintf("%dx%d/%s", s.m, s.k, dt)
			var data []byte
			if dt == compute.BF16 {
				data = randomBF16(s.m*s.k, 0.02)
			} else {
				data = randomBlocks(dt, s.m, s.k)
			}
			w, err := g.Weight(dt, []int{s.m, s.k}, data)
			if err != nil {
				b.Fatal(err)
			}
			x := g.Alloc(compute.F32, 1, s.k)
			g.Upload(x, randVals(rand.New(rand.NewPCG(1, 1)), s.k, 1))
			dst := g.Alloc(compute.F32, 1, s.m)
			modes := []string{"matmul", "kernel1", "kernel2"}
			if dt == compute.BF16 {
				modes = []string{"dense"}
			}
			for _, mode := range modes {
				b.Run(name+"/"+mode, func(b *testing.B) {
					fn := func() { g.MatMul(dst, x, w) }
					if mode == "kernel1" || mode == "kernel2" {
						qx := g.qxScratch(1, s.k)
						g.MatMul(dst, x, w) // quantizes x into qx once
						rpw := 1
						if mode == "kernel2" {
							rpw = 2
						}
						fn = func() { g.qgemv(dst, qx, w, 1, rpw) }
					}
					var per time.Duration
					for range b.N {
						per = timeGraph(b, g, fn, 20)
					}
					rate := float64(len(data)) / per.Seconds()
					b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
					b.ReportMetric(rate/1e9, "GB/s")
					b.ReportMetric(rate/bw, "of-copy-bw")
				})
			}
			if err := g.Err(); err != nil {
				b.Fatal(err)
			}
			g.Free(x)
			g.Free(dst)
			freeWeight(g, w)
		}
	}
}

// freeWeight releases a weight's device memory (tests only: weights are
// otherwise freed by Close).
func freeWeight(g *Backend, w *compute.Tensor) {
	p := buf(w).ptr
	g.Synchronize()
	g.do(func(o *owner) error {
		call(o.d.cuMemFree, p)
		return nil
	})
	for i, q := range g.all {
		if q == p {
			g.all = append(g.all[:i], g.all[i+1:]...)
			break
		}
	}
}

// quantSource serves random quantized weights for a llama geometry: the
// matrices in type mat, the (tied) embedding in type emb, norms in bf16.
type quantSource struct {
	shapes   map[string][]int
	mat, emb compute.DType
	matData  []byte
	embData  []byte
	ones     []byte
}

func (s *quantSource) Lookup(name string) (model.Stored, bool) {
	shape, ok := s.shapes[name]
	if !ok {
		return model.Stored{}, false
	}
	if len(shape) == 1 {
		return model.Stored{DType: compute.BF16, Shape: shape, Data: s.ones[:2*shape[0]]}, true
	}
	dt, data := s.mat, s.matData
	if strings.Contains(name, "embed_tokens") {
		dt, data = s.emb, s.embData
	}
	rb, _ := dt.RowBytes(shape[1])
	return model.Stored{DType: dt, Shape: shape, Data: data[:shape[0]*rb]}, true
}

// BenchmarkQuantDecodeStep measures decode steps of a llama-3.2-1b-shaped
// model with quantized weights as `lem quant --gguf q4_0` writes them
// (and q8_0, and all matrices Q4_K as a stand-in for q4_k_m): matrices in
// Q4_0 (Q8_0, Q4_K), the tied embedding and output projection in Q6_K, replayed from a CUDA graph at context position ~512. It also
// times a graph of the step's matrix products alone (with their activation
// quantization) to give the products' share of the step.
func BenchmarkQuantDecodeStep(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := model.ParseConfig([]byte(llama1BConfig))
	if err != nil {
		b.Fatal(err)
	}
	h, v := cfg.HiddenSize, cfg.VocabSize
	layerMats := llama1BMats(cfg)
	for _, mat := range []compute.DType{compute.Q4_0, compute.Q8_0, compute.Q4_K} {
		b.Run(mat.String(), func(b *testing.B) {
			emb := compute.Q6_K
			m, src, bytes := loadQuantLlama1B(b, g, mat, emb)
			const ctx, prompt = 4096, 512
			st := m.NewState(ctx)
			ids, pos := g.Alloc(compute.I32, prompt), g.Alloc(compute.I32, prompt)
			pids := make([]int32, prompt)
			for i := range pids {
				pids[i] = int32(i * 7 % v)
			}
			g.UploadInts(ids, pids)
			for i := range pids {
				pids[i] = int32(i)
			}
			g.UploadInts(pos, pids)
			last := g.Alloc(compute.F32, 1, v)
			m.Forward(st, ids, pos, last) // warm up (kernels, scratch)
			g.Synchronize()
			t0 := time.Now()
			m.Forward(st, ids, pos, last)
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.Logf("%s prefill of %d tokens: %v (%.0f tok/s)", mat, prompt, time.Since(t0), prompt/time.Since(t0).Seconds())
			st = m.NewState(ctx)
			m.Forward(st, ids, pos, last)

			id1, pos1 := g.Alloc(compute.I32, 1), g.Alloc(compute.I32, 1)
			host := make([]float32, v)
			p := prompt
			g.UploadInts(id1, []int32{1})
			g.UploadInts(pos1, []int32{int32(p)})
			m.Forward(st, id1, pos1, last)
			graph, err := g.Capture(func() { m.Forward(st, id1, pos1, last) })
			if err != nil {
				b.Fatal(err)
			}
			defer graph.Close()
			step := func() {
				g.UploadInts(id1, []int32{int32(p * 13 % v)})
				g.UploadInts(pos1, []int32{int32(p)})
				graph.Launch()
				g.Read(host, last)
				if p++; p >= ctx {
					p = prompt
				}
			}
			for range 5 {
				step()
			}
			b.ResetTimer()
			t0 = time.Now()
			for range b.N {
				step()
			}
			el := time.Since(t0).Seconds()
			b.StopTimer()
			if err := g.Err(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			for range 100 {
				graph.Launch()
			}
			g.Synchronize()
			replay := time.Since(t1) / 100

			// The step's products alone, on weights of the same shapes.
			// Inputs as the model has them: q, k, v share one, gate and
			// up another.
			var ws []*compute.Tensor
			var xs, ds []*compute.Tensor
			for j, s := range layerMats {
				w, err := g.Weight(mat, s[:], src.matData[:s[0]*mustRowBytes(mat, s[1])])
				if err != nil {
					b.Fatal(err)
				}
				ws = append(ws, w)
				if j == 1 || j == 2 || j == 5 {
					xs = append(xs, xs[j-1])
				} else {
					xs = append(xs, g.Alloc(compute.F32, 1, s[1]))
				}
				ds = append(ds, g.Alloc(compute.F32, 1, s[0]))
			}
			lm, err := g.Weight(emb, []int{v, h}, src.embData)
			if err != nil {
				b.Fatal(err)
			}
			xl := g.Alloc(compute.F32, 1, h)
			products := timeGraph(b, g, func() {
				for range cfg.NumHiddenLayers {
					for j := range ws {
						g.MatMul(ds[j], xs[j], ws[j])
					}
				}
				g.MatMul(last, xl, lm)
			}, 1)
			b.Logf("%s: graph replay %v/step (%.0f GB/s of weights, %.0f%% of copy bandwidth); its matrix products alone %v (%.0f%% of the replay, %.0f GB/s)",
				mat, replay, float64(bytes)/replay.Seconds()/1e9, 100*float64(bytes)/replay.Seconds()/bw,
				products, 100*products.Seconds()/replay.Seconds(), float64(bytes)/products.Seconds()/1e9)
			rate := float64(bytes) * float64(b.N) / el
			b.ReportMetric(float64(b.N)/el, "tok/s")
			b.ReportMetric(rate/1e9, "GB/s")
			b.ReportMetric(rate/bw, "of-copy-bw")
			b.ReportMetric(float64(bytes)/1e6, "MB/step")
			for _, w := range append(ws, lm) {
				freeWeight(g, w)
			}
		})
	}
}

func mustRowBytes(dt compute.DType, cols int) int {
	rb, err := dt.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	return rb
}

// BenchmarkQuantPrefill measures a prefill product (512 rows of
// activations) on a 14336×4096 weight: quantized weights widen to f16 in
// chunks and run the dense product, against the dense product on bf16 and
// f16 weights in the same run; "widen" is the widening alone.
func BenchmarkQuantPrefill(b *testing.B) {
	g := openGPU(b)
	const m, k, n = 14336, 4096, 512
	x := g.Alloc(compute.F32, n, k)
	g.Upload(x, randVals(rand.New(rand.NewPCG(2, 2)), n*k, 1))
	dst := g.Alloc(compute.F32, n, m)
	for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
		var data []byte
		switch dt {
		case compute.BF16:
			data = randomBF16(m*k, 0.02)
		case compute.F16:
			data = make([]byte, 2*m*k)
			for i := 0; i < len(data); i += 2 {
				binary.LittleEndian.PutUint16(data[i:], half.F32ToF16(float32(i%97)/5000))
			}
		default:
			data = randomBlocks(dt, m, k)
		}
		w, err := g.Weight(dt, []int{m, k}, data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(dt.String(), func(b *testing.B) {
			var per time.Duration
			for range b.N {
				per = timeGraph(b, g, func() { g.MatMul(dst, x, w) }, 3)
			}
			b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
			b.ReportMetric(2*float64(m)*float64(k)*float64(n)/per.Seconds()/1e12, "TFLOP/s")
		})
		if buf(w).q != nil {
			b.Run(dt.String()+"/widen", func(b *testing.B) {
				tmp := g.scratch(&g.quant.deq, m*k*2)
				var per time.Duration
				for range b.N {
					per = timeGraph(b, g, func() { g.dequant(tmp, compute.F16, 0, 0, m, w) }, 3)
				}
				b.ReportMetric(float64(per.Nanoseconds())/1e3, "us/op")
				b.ReportMetric(float64(len(data)+2*m*k)/per.Seconds()/1e9, "GB/s")
			})
		}
		freeWeight(g, w)
	}
}
