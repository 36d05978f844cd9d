package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"lem/compute"
	"lem/internal/half"
	"lem/model"
)

// copyBandwidth measures the device's memory bandwidth with device-to-device
// copies of 1 GiB, counting bytes read and written, once per process.
var copyBandwidth = sync.OnceValues(func() (float64, error) {
	b, err := Open(0)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	const size = 1 << 30
	src, err := b.rawAlloc(size, false)
	if err != nil {
		return 0, err
	}
	dst, err := b.rawAlloc(size, false)
	if err != nil {
		return 0, err
	}
	cp := func() {
		b.enqueue(func(w *owner) error {
			return w.check("cuMemcpyDtoDAsync", call(w.d.cuMemcpyDtoDAsync, dst.ptr, src.ptr, size, w.stream))
		})
	}
	for range 3 {
		cp()
	}
	if err := b.Synchronize(); err != nil {
		return 0, err
	}
	const reps = 20
	t0 := time.Now()
	for range reps {
		cp()
	}
	if err := b.Synchronize(); err != nil {
		return 0, err
	}
	return 2 * size * reps / time.Since(t0).Seconds(), nil
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
// llama-3.2-1b's shapes, as GB/s of weights read and as a fraction of the
// copy bandwidth.
func BenchmarkGEMV(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []struct{ m, k int }{{2048, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}} {
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

// synthLlama1B loads a llama-3.2-1b-shaped model with random bf16 weights.
func synthLlama1B(b *Backend) (model.Model, int64, error) {
	cfg, err := model.ParseConfig([]byte(llama1BConfig))
	if err != nil {
		return nil, 0, err
	}
	h, f, v := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	q, kv := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	shapes := map[string][]int{
		"model.embed_tokens.weight": {v, h},
		"model.norm.weight":         {h},
	}
	bytes := int64(2 * v * h)
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
