package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/synth"
)

// geometrySource serves a synth geometry's tensors with random bf16 values
// (all slices of one buffer), ones or zeros as the geometry says.
type geometrySource struct {
	specs              map[string]synth.TensorSpec
	random, ones, zero []byte
}

func (s *geometrySource) Lookup(name string) (model.Stored, bool) {
	t, ok := s.specs[name]
	if !ok {
		return model.Stored{}, false
	}
	n := 2 * t.Elements()
	data := s.random
	switch t.Init {
	case synth.Ones:
		data = s.ones
	case synth.Zeros:
		data = s.zero
	}
	return model.Stored{DType: compute.BF16, Shape: t.Shape, Data: data[:n]}, true
}

// synthModel loads `lem synth --like like` (cut to layers layers when
// positive) onto b with random bf16 weights.
func synthModel(b compute.Backend, like string, layers int) (model.Model, model.WeightReads, error) {
	g, err := synth.Like(like)
	if err != nil {
		return nil, model.WeightReads{}, err
	}
	if layers > 0 {
		if err := g.CutLayers(layers); err != nil {
			return nil, model.WeightReads{}, err
		}
	}
	d, _ := synth.ParseDType("bf16")
	js, err := g.Config(d)
	if err != nil {
		return nil, model.WeightReads{}, err
	}
	cfg, err := model.ParseConfig(js)
	if err != nil {
		return nil, model.WeightReads{}, err
	}
	src := &geometrySource{specs: map[string]synth.TensorSpec{}}
	var most, small int64
	for _, t := range g.Tensors() {
		src.specs[t.Name] = t
		most = max(most, t.Elements())
		if t.Init != synth.Normal {
			small = max(small, t.Elements())
		}
	}
	// 64 MiB of random values, repeated over the largest tensor.
	block := randomBF16(min(int(most), 32<<20), 0.05)
	src.random = make([]byte, 2*most)
	for o := 0; o < len(src.random); o += len(block) {
		copy(src.random[o:], block)
	}
	src.ones, src.zero = make([]byte, 2*small), make([]byte, 2*small)
	for i := 0; i < len(src.ones); i += 2 {
		binary.LittleEndian.PutUint16(src.ones[i:], half.F32ToBF16(1))
	}
	return model.LoadReads(cfg, src, b)
}

// synthCase is one model of BenchmarkSynthModels.
type synthCase struct {
	like   string
	layers int // 0: all
}

// synthCases returns the models to benchmark: LEM_BENCH_LIKES (like or
// like:layers, comma-separated) or the issue 7 set.
func synthCases() []synthCase {
	spec := os.Getenv("LEM_BENCH_LIKES")
	if spec == "" {
		spec = "qwen3.5-0.8b,gemma-4-e2b,qwen3-30b-a3b:4"
	}
	var cs []synthCase
	for _, f := range strings.Split(spec, ",") {
		name, layers, _ := strings.Cut(strings.TrimSpace(f), ":")
		n, _ := strconv.Atoi(layers)
		cs = append(cs, synthCase{name, n})
	}
	return cs
}

// meanSD returns the mean and standard deviation of v.
func meanSD(v []float64) (float64, float64) {
	var s, ss float64
	for _, x := range v {
		s += x
	}
	m := s / float64(len(v))
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	if len(v) < 2 {
		return m, 0
	}
	return m, math.Sqrt(ss / float64(len(v)-1))
}

// BenchmarkSynthModels measures prefill (pp512, a fresh state each time)
// and decode (tg64 after the prompt, replayed from a CUDA graph as lem's
// engine runs it) of `lem synth` geometries with random bf16 weights, with
// the sequential prefill kernels (one recurrence step per row, one expert
// GEMV per (row, slot) pair) and the chunked and grouped ones, in one run.
// Decode reports GB/s of the weights one token reads (active experts only)
// against the device copy bandwidth. Run with -test.benchtime 1x.
func BenchmarkSynthModels(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	const prompt, gen, reps = 512, 64, 3
	for _, sc := range synthCases() {
		name := sc.like
		if sc.layers > 0 {
			name += fmt.Sprintf("-%dlayers", sc.layers)
		}
		b.Run(name, func(b *testing.B) {
			t0 := time.Now()
			m, reads, err := synthModel(g, sc.like, sc.layers)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if c, ok := m.(interface{ Close() error }); ok {
					c.Close()
				}
			}()
			b.Logf("%s: %.2f GiB of weights, %.2f GiB read per token, loaded in %v (copy bandwidth %.0f GB/s)",
				name, float64(reads.Bytes)/(1<<30), float64(reads.PerToken)/(1<<30), time.Since(t0).Round(time.Millisecond), bw/1e9)
			vocab := m.Config().VocabSize
			ids, pos := g.Alloc(compute.I32, prompt), g.Alloc(compute.I32, prompt)
			v := make([]int32, prompt)
			for i := range v {
				v[i] = int32(i * 7919 % vocab)
			}
			g.UploadInts(ids, v)
			for i := range v {
				v[i] = int32(i)
			}
			g.UploadInts(pos, v)
			last := g.Alloc(compute.F32, 1, vocab)
			host := make([]float32, vocab)
			prefill := func() (model.State, float64) {
				st := m.NewState(prompt + gen + 8)
				t := time.Now()
				m.Forward(st, ids, pos, last)
				g.Read(host, last)
				return st, time.Since(t).Seconds()
			}
			var st model.State
			// chunked: the default kernels; fast: the staged carries and
			// the tensor-core experts as well.
			for _, mode := range []string{"sequential", "chunked", "fast"} {
				b.Run("pp512-"+mode, func(b *testing.B) {
					ps := &g.prefill
					ps.sequential, ps.staged, ps.tensorCores = mode == "sequential", mode == "fast", mode == "fast"
					defer func() { ps.sequential, ps.staged, ps.tensorCores = false, false, false }()
					prefill() // warm up: scratch, expert tables
					var rates []float64
					for range reps {
						var s float64
						st, s = prefill()
						rates = append(rates, prompt/s)
					}
					if err := g.Err(); err != nil {
						b.Fatal(err)
					}
					mean, sd := meanSD(rates)
					b.Logf("%s pp%d %s: %.1f ± %.1f tok/s", name, prompt, mode, mean, sd)
					b.ReportMetric(mean, "tok/s")
				})
			}
			b.Run(fmt.Sprintf("tg%d", gen), func(b *testing.B) {
				id1, pos1 := g.Alloc(compute.I32, 1), g.Alloc(compute.I32, 1)
				var rates []float64
				for r := range reps + 1 {
					st, _ = prefill()
					p := prompt
					step := func(graph compute.Graph) {
						g.UploadInts(id1, []int32{int32(p * 13 % vocab)})
						g.UploadInts(pos1, []int32{int32(p)})
						if graph != nil {
							graph.Launch()
						} else {
							m.Forward(st, id1, pos1, last)
						}
						g.Read(host, last)
						p++
					}
					step(nil) // decode scratch and expert tables exist before capture
					graph, err := g.Capture(func() { m.Forward(st, id1, pos1, last) })
					if err != nil {
						b.Fatal(err)
					}
					t := time.Now()
					for range gen {
						step(graph)
					}
					s := time.Since(t).Seconds()
					graph.Close()
					if r > 0 { // the first round warms up
						rates = append(rates, gen/s)
					}
				}
				if err := g.Err(); err != nil {
					b.Fatal(err)
				}
				mean, sd := meanSD(rates)
				gbs := mean * float64(reads.PerToken) / 1e9
				b.Logf("%s tg%d: %.1f ± %.1f tok/s, %.0f GB/s of weights read, %.1f%% of the copy bandwidth (%.0f GB/s)",
					name, gen, mean, sd, gbs, 100*gbs*1e9/bw, bw/1e9)
				b.ReportMetric(mean, "tok/s")
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs*1e9/bw, "of-copy-bw")
			})
		})
	}
}

// timeOps runs fn b.N times after a warm-up and returns the seconds per call.
func timeOps(b *testing.B, g *Backend, fn func()) float64 {
	b.Helper()
	for range 3 {
		fn()
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t := time.Now()
	for range b.N {
		fn()
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	s := time.Since(t).Seconds() / float64(b.N)
	b.ReportMetric(s*1e6, "µs/call")
	return s
}

// gpuRandom makes an F32 device tensor of random values.
func gpuRandom(g *Backend, seed uint64, scale float32, shape ...int) *compute.Tensor {
	t := g.Alloc(compute.F32, shape...)
	v := randVals(newRand(seed), t.Len(), scale)
	g.Upload(t, v)
	return t
}

// BenchmarkModernOps measures the modern families' operations on the
// geometries of one layer of qwen3.5-0.8b (delta rule: 16 heads of 128 ×
// 128), mamba2-1.3b (SSM: 64 heads of 64 channels, state 128) and
// qwen3-30b-a3b (128 experts of 768, top 8): one row (decode) and 512 rows
// (prefill), the prefill with the sequential and the chunked or grouped
// kernels.
func BenchmarkModernOps(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { g.prefill.sequential = false }()
	defer func() { g.prefill.staged = false }()
	modes := []struct {
		name        string
		seq, staged bool
	}{{"sequential", true, false}, {"chunked", false, false}, {"chunked-staged", false, true}}

	dr := &compute.DeltaRule{KeyHeads: 16, ValueHeads: 16, KeyDim: 128, ValueDim: 128, Scale: 1 / math.Sqrt2 / 8, NormEps: 1e-6}
	dr.ALog, dr.DtBias = gpuRandom(g, 1, 1, dr.ValueHeads), gpuRandom(g, 2, 1, dr.ValueHeads)
	drState := g.Alloc(compute.F32, dr.ValueHeads, dr.ValueDim, dr.KeyDim)
	ssm := &compute.SSM{Heads: 64, HeadDim: 64, Groups: 1, StateSize: 128, DTMax: float32(math.Inf(1))}
	av := randVals(newRand(3), ssm.Heads, 1)
	for i := range av {
		av[i] = -float32(math.Exp(float64(av[i])))
	}
	ssm.A = g.Alloc(compute.F32, ssm.Heads)
	g.Upload(ssm.A, av)
	ssm.D, ssm.DTBias = gpuRandom(g, 4, 1, ssm.Heads), gpuRandom(g, 5, 1, ssm.Heads)
	ssmState := g.Alloc(compute.F32, ssm.Heads, ssm.HeadDim*ssm.StateSize)

	for _, n := range []int{1, 512} {
		qkv := gpuRandom(g, 6, 1, n, dr.Width())
		a, bt := gpuRandom(g, 7, 3, n, dr.ValueHeads), gpuRandom(g, 8, 3, n, dr.ValueHeads)
		out := g.Alloc(compute.F32, n, dr.ValueHeads*dr.ValueDim)
		hp, gn := ssm.Heads*ssm.HeadDim, ssm.Groups*ssm.StateSize
		x, dt := gpuRandom(g, 9, 1, n, hp), gpuRandom(g, 10, 3, n, ssm.Heads)
		bm, cm := gpuRandom(g, 11, 1, n, gn), gpuRandom(g, 12, 1, n, gn)
		y := g.Alloc(compute.F32, n, hp)
		for _, md := range modes {
			if n == 1 && !md.seq {
				continue // one row always takes the recurrent step
			}
			label := fmt.Sprintf("n%d", n)
			if n > 1 {
				label += "-" + md.name
			}
			b.Run("DeltaRule/qwen3.5-0.8b/"+label, func(b *testing.B) {
				g.prefill.sequential, g.prefill.staged = md.seq, md.staged
				s := timeOps(b, g, func() { g.DeltaRule(out, qkv, a, bt, drState, dr) })
				b.ReportMetric(float64(n)/s, "rows/s")
			})
			b.Run("SSMScan/mamba2-1.3b/"+label, func(b *testing.B) {
				g.prefill.sequential, g.prefill.staged = md.seq, md.staged
				s := timeOps(b, g, func() { g.SSMScan(y, x, dt, bm, cm, ssmState, ssm) })
				b.ReportMetric(float64(n)/s, "rows/s")
			})
		}
		if n == 1 {
			continue
		}
		// The kernels of each chunked form on their own.
		g.prefill.sequential = false
		b.Run("DeltaRule/qwen3.5-0.8b/n512-prep", func(b *testing.B) {
			timeOps(b, g, func() { g.deltaPrep(qkv, a, bt, dr) })
		})
		scr := g.deltaPrep(qkv, a, bt, dr)
		cb := g.ssmCB(bm, cm, ssm)
		b.Run("SSMScan/mamba2-1.3b/n512-cb", func(b *testing.B) {
			timeOps(b, g, func() { g.ssmCB(bm, cm, ssm) })
		})
		for _, staged := range []bool{false, true} {
			g.prefill.staged = staged
			label := map[bool]string{false: "carry", true: "carry-staged"}[staged]
			b.Run("DeltaRule/qwen3.5-0.8b/n512-"+label, func(b *testing.B) {
				timeOps(b, g, func() { g.deltaCarry(out, drState, scr, n, dr) })
			})
			b.Run("SSMScan/mamba2-1.3b/n512-"+label, func(b *testing.B) {
				timeOps(b, g, func() { g.ssmCarry(y, x, dt, bm, cm, ssmState, cb, ssm) })
			})
		}
		g.prefill.staged = false
	}

	// Experts of qwen3-30b-a3b's shape: routing and the expert MLPs.
	const hid, inter, ne, topK = 2048, 768, 128, 8
	ffn := &compute.ExpertFFN{Act: compute.SiLU}
	w := randomBF16(inter*hid, 0.05)
	for range ne {
		var ex compute.Expert
		for _, p := range []**compute.Tensor{&ex.Gate, &ex.Up, &ex.Down} {
			shape := []int{inter, hid}
			if p == &ex.Down {
				shape = []int{hid, inter}
			}
			t, err := g.Weight(compute.BF16, shape, w)
			if err != nil {
				b.Fatal(err)
			}
			*p = t
		}
		ffn.Experts = append(ffn.Experts, ex)
	}
	routing := &compute.Routing{Experts: ne, TopK: topK, Normalize: true}
	for _, n := range []int{1, 512} {
		x := gpuRandom(g, 13, 1, n, hid)
		logits := gpuRandom(g, 14, 3, n, ne)
		ids, wts := g.Alloc(compute.I32, n, topK), g.Alloc(compute.F32, n, topK)
		dst := g.Alloc(compute.F32, n, hid)
		g.Route(ids, wts, logits, nil, routing)
		for _, md := range modes {
			if n == 1 && !md.seq || md.staged {
				continue
			}
			label := fmt.Sprintf("n%d", n)
			if n > 1 {
				label += "-" + md.name
			}
			b.Run("Route/qwen3-30b-a3b/"+label, func(b *testing.B) {
				timeOps(b, g, func() { g.Route(ids, wts, logits, nil, routing) })
			})
			b.Run("ApplyExperts/qwen3-30b-a3b/"+label, func(b *testing.B) {
				g.prefill.sequential = md.seq
				s := timeOps(b, g, func() { g.ApplyExperts(dst, x, ids, wts, ffn) })
				b.ReportMetric(float64(n)/s, "rows/s")
				if n == 1 {
					rate := float64(topK*3*inter*hid*2) / s
					b.ReportMetric(rate/1e9, "GB/s")
					b.ReportMetric(rate/bw, "of-copy-bw")
				} else {
					b.ReportMetric(float64(n*topK*3*inter*hid*2)/s/1e12, "TFLOP/s")
				}
			})
		}
		if n > 1 {
			b.Run("ApplyExperts/qwen3-30b-a3b/n512-chunked-tensorcores", func(b *testing.B) {
				g.prefill.sequential, g.prefill.tensorCores = false, true
				defer func() { g.prefill.tensorCores = false }()
				s := timeOps(b, g, func() { g.ApplyExperts(dst, x, ids, wts, ffn) })
				b.ReportMetric(float64(n)/s, "rows/s")
				b.ReportMetric(float64(n*topK*3*inter*hid*2)/s/1e12, "TFLOP/s")
			})
		}
	}
}

// newRand returns a seeded source of random values.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }
