package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
)

// copyBandwidth measures the device's memory bandwidth once per process
// (Backend.CopyBandwidth over 1 GiB, bytes read and written).
var copyBandwidth = sync.OnceValues(func() (float64, error) {
	b, err := Open(0)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	return b.CopyBandwidth(1 << 30)
})

func BenchmarkCopy(b *testing.B) {
	openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(bw/1e9, "GB/s")
}

// randomBF16 returns n random bf16 values of magnitude about scale.
func randomBF16(n int, scale float32) []byte {
	out := make([]byte, 2*n)
	var wg sync.WaitGroup
	const parts = 16
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), 7))
			for i := p * n / parts; i < (p+1)*n/parts; i++ {
				binary.LittleEndian.PutUint16(out[2*i:], half.F32ToBF16((r.Float32()*2-1)*scale))
			}
		}()
	}
	wg.Wait()
	return out
}

// BenchmarkGEMV measures the decode matrix-vector product on bf16 weights of
// llama-3.2-1b and llama-3.1-8b shapes, as GB/s of weights read and as a fraction of the
// copy bandwidth.
func BenchmarkGEMV(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct{ m, k int }{{2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}, {6144, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}} {
		b.Run(fmt.Sprintf("%dx%d", s.m, s.k), func(b *testing.B) {
			w, err := g.Weight(compute.BF16, []int{s.m, s.k}, randomBF16(s.m*s.k, 0.02))
			if err != nil {
				b.Fatal(err)
			}
			x := g.Alloc(compute.F32, 1, s.k)
			dst := g.Alloc(compute.F32, 1, s.m)
			for range 3 {
				g.MatMul(dst, x, w)
			}
			g.Synchronize()
			b.ResetTimer()
			t0 := time.Now()
			for range b.N {
				g.MatMul(dst, x, w)
			}
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			el := time.Since(t0).Seconds()
			rate := float64(2*s.m*s.k) * float64(b.N) / el
			b.ReportMetric(rate/1e9, "GB/s")
			b.ReportMetric(rate/bw, "of-copy-bw")
			g.Free(x)
			g.Free(dst)
		})
	}
}

// synthSource serves random bf16 weights for a llama geometry, all slices
// of one buffer.
type synthSource struct {
	shapes map[string][]int
	data   []byte
	ones   []byte
}

func (s *synthSource) Lookup(name string) (model.Stored, bool) {
	shape, ok := s.shapes[name]
	if !ok {
		return model.Stored{}, false
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if strings.HasSuffix(name, "norm.weight") {
		return model.Stored{DType: compute.BF16, Shape: shape, Data: s.ones[:2*n]}, true
	}
	return model.Stored{DType: compute.BF16, Shape: shape, Data: s.data[:2*n]}, true
}

const llama1BConfig = `{"model_type": "llama", "architectures": ["LlamaForCausalLM"],
 "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
 "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "hidden_act": "silu", "max_position_embeddings": 131072, "tie_word_embeddings": true}`

const llama8BConfig = `{"model_type": "llama", "architectures": ["LlamaForCausalLM"],
 "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
 "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "hidden_act": "silu", "max_position_embeddings": 131072, "tie_word_embeddings": false}`

// synthLlama1B loads a llama-3.2-1b-shaped model with random bf16 weights.
func synthLlama1B(b *Backend) (model.Model, int64, error) { return synthLlama(b, llama1BConfig) }

// synthLlama loads a llama model of the given config with random bf16
// weights, and returns the bytes of weights a decode step reads.
func synthLlama(b *Backend, config string) (model.Model, int64, error) {
	cfg, err := model.ParseConfig([]byte(config))
	if err != nil {
		return nil, 0, err
	}
	h, f, v := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	q, kv := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	shapes := map[string][]int{
		"model.embed_tokens.weight": {v, h},
		"model.norm.weight":         {h},
	}
	bytes := int64(2 * v * h) // the output projection; the embedding reads a row
	if !cfg.TieWordEmbeddings {
		shapes["lm_head.weight"] = []int{v, h}
	}
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for name, s := range map[string][]int{
			"input_layernorm.weight": {h}, "post_attention_layernorm.weight": {h},
			"self_attn.q_proj.weight": {q, h}, "self_attn.k_proj.weight": {kv, h},
			"self_attn.v_proj.weight": {kv, h}, "self_attn.o_proj.weight": {h, q},
			"mlp.gate_proj.weight": {f, h}, "mlp.up_proj.weight": {f, h}, "mlp.down_proj.weight": {h, f},
		} {
			shapes[p+name] = s
			if len(s) == 2 {
				bytes += int64(2 * s[0] * s[1])
			}
		}
	}
	ones := make([]byte, 2*max(h, f))
	for i := 0; i < len(ones); i += 2 {
		binary.LittleEndian.PutUint16(ones[i:], half.F32ToBF16(1))
	}
	src := &synthSource{shapes: shapes, data: randomBF16(v*h, 0.05), ones: ones}
	m, err := model.Load(cfg, src, b)
	return m, bytes, err
}

// BenchmarkDecodeStep measures one decode step (upload id and position,
// forward, read the logits) of a llama-3.2-1b-shaped bf16 model at context
// position ~512, run directly and replayed from a CUDA graph. It reports
// tokens/s and the weight bytes read per second against the copy bandwidth.
func BenchmarkDecodeStep(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	m, weightBytes, err := synthLlama1B(g)
	if err != nil {
		b.Fatal(err)
	}
	vocab := m.Config().VocabSize
	const ctx, prompt = 4096, 512
	for _, mode := range []string{"direct", "graph"} {
		b.Run(mode, func(b *testing.B) {
			st := m.NewState(ctx)
			// Prefill the prompt in one chunk.
			ids, pos := g.Alloc(compute.I32, prompt), g.Alloc(compute.I32, prompt)
			pids := make([]int32, prompt)
			for i := range pids {
				pids[i] = int32(i * 7 % vocab)
			}
			g.UploadInts(ids, pids)
			for i := range pids {
				pids[i] = int32(i)
			}
			g.UploadInts(pos, pids)
			last := g.Alloc(compute.F32, 1, vocab)
			t0 := time.Now()
			m.Forward(st, ids, pos, last)
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.Logf("prefill of %d tokens: %v (%.0f tok/s)", prompt, time.Since(t0), prompt/time.Since(t0).Seconds())

			id1, pos1 := g.Alloc(compute.I32, 1), g.Alloc(compute.I32, 1)
			host := make([]float32, vocab)
			p := prompt
			var graph compute.Graph
			step := func() {
				g.UploadInts(id1, []int32{int32(p * 13 % vocab)})
				g.UploadInts(pos1, []int32{int32(p)})
				if graph != nil {
					graph.Launch()
				} else {
					m.Forward(st, id1, pos1, last)
				}
				g.Read(host, last)
				if p++; p >= ctx {
					p = prompt
				}
			}
			step() // allocates the decode scratch
			if mode == "graph" {
				graph, err = g.Capture(func() { m.Forward(st, id1, pos1, last) })
				if err != nil {
					b.Fatal(err)
				}
				defer graph.Close()
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
			if graph != nil && b.N > 1 {
				// Where the time goes: the replay alone, and the logits read.
				t1 := time.Now()
				for range 100 {
					graph.Launch()
				}
				g.Synchronize()
				replay := time.Since(t1) / 100
				t1 = time.Now()
				for range 100 {
					g.Read(host, last)
				}
				b.Logf("graph replay alone %v/step (%.0f GB/s of weights); logits read %v", replay,
					float64(weightBytes)/replay.Seconds()/1e9, time.Since(t1)/100)
			}
			rate := float64(weightBytes) * float64(b.N) / el
			b.ReportMetric(float64(b.N)/el, "tok/s")
			b.ReportMetric(rate/1e9, "GB/s")
			b.ReportMetric(rate/bw, "of-copy-bw")
		})
	}
}

// BenchmarkDecodeKernels decodes llama-3.2-1b- and llama-3.1-8b-shaped bf16
// models (random weights) at context ~64 in several backend settings, and
// reports for each the replay time of the captured step (graph) with its
// weight bandwidth against the copy bandwidth, the kernels it launches, and
// where the device time of a step goes (each launch timed apart).
func BenchmarkDecodeKernels(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	type setting struct {
		name      string
		fuse, pdl bool
		blocks    int
	}
	settings := []setting{
		{"plain", false, false, 0},
		{"fused", true, false, fgemvGrid(g.info.SMs)},
		{"fused+pdl", true, g.pdl, fgemvGrid(g.info.SMs)},
		{"fused+pdl/grid-all", true, g.pdl, 0},
	}
	saved := []any{g.fuse, g.pdl, g.fgemvBlocks}
	defer func() { g.fuse, g.pdl, g.fgemvBlocks = saved[0].(bool), saved[1].(bool), saved[2].(int) }()
	for _, geo := range []struct{ name, config string }{{"1b", llama1BConfig}, {"8b", llama8BConfig}} {
		m, weightBytes, err := synthLlama(g, geo.config)
		if err != nil {
			b.Fatal(err)
		}
		for _, set := range settings {
			b.Run(geo.name+"/"+set.name, func(b *testing.B) {
				g.fuse, g.pdl, g.fgemvBlocks = set.fuse, set.pdl, set.blocks
				profileDecodeStep(b, g, m, geo.name+" "+set.name, weightBytes, bw)
			})
		}
	}
}

// profileDecodeStep prefills 64 positions of a fresh state of m, records
// its decode step as a graph and reports, under label, the replay time of
// the step with its weight bandwidth against the copy bandwidth bw, its
// kernels, and where the device time of a step goes (each launch timed
// apart, outside the graph, over four steps).
func profileDecodeStep(b *testing.B, g *Backend, m model.Model, label string, weightBytes int64, bw float64) {
	vocab := m.Config().VocabSize
	const ctx, prompt = 512, 64
	st := m.NewState(ctx)
	ids, pos := g.Alloc(compute.I32, prompt), g.Alloc(compute.I32, prompt)
	p := make([]int32, prompt)
	for i := range p {
		p[i] = int32(i * 7 % vocab)
	}
	g.UploadInts(ids, p)
	for i := range p {
		p[i] = int32(i)
	}
	g.UploadInts(pos, p)
	logits := g.Alloc(compute.F32, 1, vocab)
	m.Forward(st, ids, pos, logits)
	id1, pos1 := g.Alloc(compute.I32, 1), g.Alloc(compute.I32, 1)
	at := prompt
	step := func() {
		g.UploadInts(id1, []int32{int32(at * 13 % vocab)})
		g.UploadInts(pos1, []int32{int32(at)})
		at++
	}
	step()
	m.Forward(st, id1, pos1, logits)
	step()
	graph, err := g.Capture(func() { m.Forward(st, id1, pos1, logits) })
	if err != nil {
		b.Fatal(err)
	}
	defer graph.Close()
	const reps = 40
	for range 3 {
		graph.Launch()
	}
	g.Synchronize()
	t0 := time.Now()
	for range reps {
		graph.Launch()
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	replay := time.Since(t0) / reps
	// Timed launches, outside the graph, four steps.
	byName := map[string]*KernelTime{}
	for range 4 {
		step()
		prof, err := g.ProfileLaunches(func() { m.Forward(st, id1, pos1, logits) })
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range prof {
			if byName[k.Name] == nil {
				byName[k.Name] = &KernelTime{Name: k.Name}
			}
			byName[k.Name].Launches += k.Launches
			byName[k.Name].Time += k.Time
		}
	}
	var prof []KernelTime
	var sum time.Duration
	for _, k := range byName {
		prof = append(prof, *k)
		sum += k.Time
	}
	slices.SortFunc(prof, func(a, c KernelTime) int { return int(c.Time - a.Time) })
	b.Logf("%s: replay %v/step = %.0f tok/s, %.0f GB/s of weights = %.1f%% of copy bandwidth; %d kernels; timed launches sum to %v/step:",
		label, replay, 1/replay.Seconds(), float64(weightBytes)/replay.Seconds()/1e9,
		100*float64(weightBytes)/replay.Seconds()/bw, graph.(*Graph).Kernels(), sum/4)
	for _, k := range prof {
		b.Logf("  %-22s %4d/step %9v/step %5.1f%%", k.Name, k.Launches/4, k.Time/4, 100*float64(k.Time)/float64(sum))
	}
	b.ReportMetric(1/replay.Seconds(), "tok/s")
	b.ReportMetric(float64(weightBytes)/replay.Seconds()/bw, "of-copy-bw")
	g.Free(ids)
	g.Free(pos)
	g.Free(logits)
	g.Free(id1)
	g.Free(pos1)
}
