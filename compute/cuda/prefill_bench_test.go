package cuda

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"lem/compute"
	"lem/engine"
	"lem/internal/half"
	"lem/model"
)

const llama8BConfig = `{"model_type": "llama", "architectures": ["LlamaForCausalLM"],
 "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
 "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "hidden_act": "silu", "max_position_embeddings": 131072, "tie_word_embeddings": false}`

// synthLlama loads a llama-shaped model of the given config with random
// bf16 weights (every matrix a slice of one random buffer) and returns it
// with its weight bytes.
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
	bytes := int64(2 * v * h)
	if !cfg.TieWordEmbeddings {
		shapes["lm_head.weight"] = []int{v, h}
		bytes *= 2
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
	src := &synthSource{shapes: shapes, data: randomBF16(max(v*h, f*h), 0.02), ones: ones}
	m, err := model.Load(cfg, src, b)
	return m, bytes, err
}

// prefillTokens is the prompt length of BenchmarkPrefill8B:
// LEM_PREFILL_TOKENS, else 4096.
func prefillTokens() int {
	if n, err := strconv.Atoi(os.Getenv("LEM_PREFILL_TOKENS")); err == nil && n > 0 {
		return n
	}
	return 4096
}

// BenchmarkPrefill8B measures the prefill of one prompt (4096 tokens by
// default) on a llama-3.1-8b-shaped model with random bf16 weights, as
// tokens/s and as TFLOP/s of the matmuls (2·params·tokens) plus attention.
func BenchmarkPrefill8B(b *testing.B) {
	g := openGPU(b)
	t0 := time.Now()
	m, weightBytes, err := synthLlama(g, llama8BConfig)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.Logf("8B synthetic model: %.1f GB of bf16 weights loaded in %v; prefill matmul: %s",
		float64(weightBytes)/1e9, time.Since(t0), g.GEMM())
	cfg := m.Config()
	n := prefillTokens()
	st := m.NewState(n)
	ids, pos := g.Alloc(compute.I32, n), g.Alloc(compute.I32, n)
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(i * 7 % cfg.VocabSize)
	}
	g.UploadInts(ids, v)
	for i := range v {
		v[i] = int32(i)
	}
	g.UploadInts(pos, v)
	last := g.Alloc(compute.F32, 1, cfg.VocabSize)
	host := make([]float32, cfg.VocabSize)
	run := func() {
		m.Forward(st, ids, pos, last)
		g.Read(host, last)
	}
	run() // warm-up: scratch memory, cuBLAS plans
	if err := g.Err(); err != nil {
		b.Fatal(err)
	}
	// Matmul FLOPs: every layer weight once per token, the output head for
	// the last row only. Attention: QKᵀ and PV over the causal half.
	layers := float64(weightBytes/2) - 2*float64(cfg.VocabSize*cfg.HiddenSize)
	flops := 2*layers*float64(n) + 2*float64(cfg.VocabSize*cfg.HiddenSize)
	attn := 4 * float64(cfg.NumHiddenLayers*cfg.NumAttentionHeads*cfg.HeadDim) * float64(n) * float64(n+1) / 2
	var el float64
	b.Run(fmt.Sprint(n), func(b *testing.B) {
		t1 := time.Now()
		for range b.N {
			run()
		}
		el = time.Since(t1).Seconds() / float64(b.N)
		if err := g.Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/el, "tok/s")
		b.ReportMetric((flops+attn)/el/1e12, "TFLOP/s")
	})
	// Through an engine session, as `lem bench` prefills: in chunks.
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(i * 7 % cfg.VocabSize)
	}
	for _, chunk := range []int{engine.DefaultChunk, 1024, n} {
		s := engine.NewSession(m, g, n)
		s.SetChunk(chunk)
		b.Run(fmt.Sprintf("session/chunk%d", chunk), func(b *testing.B) {
			for range b.N {
				s.Reset()
				if _, err := s.Append(tokens); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		s.Close()
	}
	if err := g.setProfile(true); err == nil {
		run()
		b.Logf("profile of one prefill (stream synchronised around each op): %s", g.profileReport())
		g.setProfile(false)
	}
	b.Logf("%d tokens: %.3f s per prefill; matmul %.1f TFLOP + attention %.1f TFLOP per prefill", n, el, flops/1e12, attn/1e12)
}
