package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// The llama family and the dense architectures that differ from it only in
// tensor names, biases, norms or scalar multipliers.
//
//	h = x + Attn(RMSNorm(x))
//	y = h + MLP(RMSNorm(h)),   MLP(h) = down(silu(gate(h)) ⊙ up(h))
func init() {
	preNorm := func(permuted bool) *TensorLayout {
		return &TensorLayout{act: "silu", permuted: permuted, layer: preNormLayer}
	}
	Register(Arch{ModelTypes: []string{"llama"}, Load: loadLlama, GGUF: "llama", Tensors: preNorm(true)})
	// Mistral is written as llama and reads back as llama.
	Register(Arch{ModelTypes: []string{"mistral"}, Load: loadMistral, GGUF: "llama"})
	// q/k/v biases are read when present.
	Register(Arch{ModelTypes: []string{"qwen2"}, Load: loadLlama, GGUF: "qwen2", Tensors: preNorm(false)})
	Register(Arch{ModelTypes: []string{"qwen3"}, Load: loadQwen3, GGUF: "qwen3", Tensors: preNorm(false)})
	Register(Arch{ModelTypes: []string{"smollm3"}, Load: loadSmolLM3, GGUF: "smollm3", Tensors: preNorm(true),
		Meta: ggufMeta{noRope: true, read: smolLM3FromGGUF, write: smolLM3ToGGUF}})
	Register(Arch{ModelTypes: []string{"granite"}, Load: loadGranite, GGUF: "granite", Tensors: preNorm(true),
		Keys: []ConfigKey{
			{"embedding_multiplier", "embedding_scale"},
			{"residual_multiplier", "residual_scale"},
			{"logits_scaling", "logit_scale"},
			{"attention_multiplier", "attention.scale"},
		},
		Meta: ggufMeta{read: graniteFromGGUF, write: graniteToGGUF}})
	Register(Arch{ModelTypes: []string{"olmo2"}, Load: loadOlmo2, GGUF: "olmo2",
		Tensors: &TensorLayout{act: "silu", layer: olmo2Layer}, Meta: ggufMeta{windowed: true}})
	Register(Arch{ModelTypes: []string{"phi3"}, Load: loadPhi3, GGUF: "phi3", Tensors: preNorm(false),
		Meta: ggufMeta{windowIgnoredSince: "May 2025"}})
	registerParams(func(c *Config, f *fields) { c.GraniteParams.read(f) }, nil)
}

func loadLlama(cfg *Config, src Source, b compute.Backend) (Model, error) {
	return loadDense(cfg, src, b, llamaNames)
}

// loadMistral: every layer attends within the sliding window when the
// config sets one.
func loadMistral(cfg *Config, src Source, b compute.Backend) (Model, error) {
	m, err := loadDense(cfg, src, b, llamaNames)
	if err != nil {
		return nil, err
	}
	slideAll(m)
	return m, nil
}

// slideAll applies the config's sliding window to every layer (families
// whose configs have one window and no layer_types).
func slideAll(m *dense) {
	if len(m.cfg.LayerTypes) > 0 {
		return
	}
	for i := range m.layers {
		m.layers[i].attn.Window = m.cfg.SlidingWindow
	}
}

// loadQwen3: RMSNorm of each query and key head before rope.
func loadQwen3(cfg *Config, src Source, b compute.Backend) (Model, error) {
	names := llamaNames
	names.qNorm, names.kNorm = "self_attn.q_norm", "self_attn.k_norm"
	return loadDense(cfg, src, b, names)
}

// loadSmolLM3: some layers use no rotary embedding (no_rope_layers[i] == 0).
func loadSmolLM3(cfg *Config, src Source, b compute.Backend) (Model, error) {
	m, err := loadDense(cfg, src, b, llamaNames)
	if err != nil {
		return nil, err
	}
	for i := range m.layers {
		if !cfg.UsesRope(i) {
			m.layers[i].rope = nil
		}
	}
	return m, nil
}

// loadGranite: scalar multipliers on the embeddings, each residual branch,
// the attention scores and the logits.
func loadGranite(cfg *Config, src Source, b compute.Backend) (Model, error) {
	m, err := loadDense(cfg, src, b, llamaNames)
	if err != nil {
		return nil, err
	}
	if cfg.EmbeddingMultiplier != 0 {
		m.embedScale = float32(cfg.EmbeddingMultiplier)
	}
	if cfg.ResidualMultiplier != 0 {
		m.residualScale = float32(cfg.ResidualMultiplier)
	}
	if cfg.LogitsScaling != 0 {
		m.logitScale = float32(1 / cfg.LogitsScaling)
	}
	if cfg.AttentionMultiplier != 0 {
		for i := range m.layers {
			m.layers[i].attn.Scale = float32(cfg.AttentionMultiplier)
		}
	}
	return m, nil
}

// loadOlmo2: norms after each block instead of before it, and RMSNorm over
// the whole query and key projections.
//
//	h = x + RMSNorm(Attn(x))
//	y = h + RMSNorm(MLP(h))
func loadOlmo2(cfg *Config, src Source, b compute.Backend) (Model, error) {
	return loadDense(cfg, src, b, denseNames{
		postAttnNorm: "post_attention_layernorm",
		postFFNorm:   "post_feedforward_layernorm",
		qNorm:        "self_attn.q_norm",
		kNorm:        "self_attn.k_norm",
	})
}

// loadPhi3: fused qkv and gate/up projections, and a sliding window on
// every layer when the config sets one.
func loadPhi3(cfg *Config, src Source, b compute.Backend) (Model, error) {
	m, err := loadDense(cfg, src, b, llamaNames)
	if err != nil {
		return nil, err
	}
	slideAll(m)
	return m, nil
}

// GGUF tensor names of the llama-family layers beyond the shared ones: a
// pre-norm layer's second norm is ffn_norm; OLMo 2 normalises after
// attention and after the MLP instead.
var (
	preNormLayer = map[string]string{
		"post_attention_layernorm.weight": "ffn_norm.weight",
	}
	olmo2Layer = map[string]string{
		"post_attention_layernorm.weight":   "post_attention_norm.weight",
		"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
	}
)

// smolLM3FromGGUF leaves rope out of every fourth layer, as llama.cpp
// does.
func smolLM3FromGGUF(_ *ggufKeys, c *Config, _ *GGUF) error {
	c.NoRopeLayers = make([]int, c.NumHiddenLayers)
	for i := range c.NoRopeLayers {
		if (i+1)%4 != 0 {
			c.NoRopeLayers[i] = 1
		}
	}
	return nil
}

// smolLM3ToGGUF checks that the checkpoint leaves rope out of the layers
// llama.cpp does.
func smolLM3ToGGUF(l *GGUFLayout, _ *ggufWriter) error {
	c := l.cfg
	for i := range c.NumHiddenLayers {
		if c.UsesRope(i) != ((i+1)%4 != 0) {
			return fmt.Errorf("smollm3: no_rope_layers differs from llama.cpp's every-fourth-layer rule at layer %d", i)
		}
	}
	return nil
}

// graniteFromGGUF reads Granite's multipliers.
func graniteFromGGUF(k *ggufKeys, c *Config, _ *GGUF) error {
	if v, ok := k.float("embedding_multiplier"); ok {
		c.EmbeddingMultiplier = v
	}
	if v, ok := k.float("residual_multiplier"); ok {
		c.ResidualMultiplier = v
	}
	if v, ok := k.float("logits_scaling"); ok && v != 0 {
		c.LogitsScaling = v
	}
	if v, ok := k.float("attention_multiplier"); ok {
		c.AttentionMultiplier = v
	}
	return k.err
}

// graniteToGGUF writes Granite's multipliers.
func graniteToGGUF(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	w.f32("embedding_multiplier", c.EmbeddingMultiplier)
	w.f32("residual_multiplier", c.ResidualMultiplier)
	w.f32("logits_scaling", c.LogitsScaling)
	if c.AttentionMultiplier != 0 {
		w.f32("attention_multiplier", c.AttentionMultiplier)
	}
	return nil
}

// GraniteParams are Granite's multipliers (Falcon-H1 shares
// EmbeddingMultiplier). EmbeddingMultiplier, ResidualMultiplier and
// LogitsScaling are 1 when absent; AttentionMultiplier is 0 when absent
// (scale by 1/sqrt(head_dim)).
type GraniteParams struct {
	EmbeddingMultiplier float64
	ResidualMultiplier  float64
	AttentionMultiplier float64
	LogitsScaling       float64
}

func (p *GraniteParams) read(f *fields) {
	p.EmbeddingMultiplier, p.ResidualMultiplier, p.LogitsScaling = 1, 1, 1
	f.float("embedding_multiplier", &p.EmbeddingMultiplier)
	f.float("residual_multiplier", &p.ResidualMultiplier)
	f.float("attention_multiplier", &p.AttentionMultiplier)
	f.float("logits_scaling", &p.LogitsScaling)
}
