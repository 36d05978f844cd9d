package model

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// Gemma 2 and Gemma 3 (text): sandwich norms around both blocks, RMSNorm
// weights stored as w - 1, embeddings scaled by √hidden, attention scaled by
// query_pre_attn_scalar^-½, and soft caps on attention scores (Gemma 2) and
// logits.
//
//	h = x + RMSNorm(Attn(RMSNorm(x)))
//	y = h + RMSNorm(MLP(RMSNorm(h))),   MLP(h) = down(gelu(gate(h)) ⊙ up(h))
//
// Gemma 3 adds per-head q/k norms and alternates sliding-window layers
// (local rope base) with global layers (global rope base).
func init() {
	Register(Arch{ModelTypes: []string{"gemma2"}, Load: loadGemma, GGUF: "gemma2",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", normShift: 1, layer: gemmaLayer, swaPeriod: 2},
		Meta:    ggufMeta{eps: 1e-6, windowed: true, read: gemmaFromGGUF, write: gemmaToGGUF},
		// Gemma 2 alternates, starting with a sliding layer.
		Defaults: map[string]string{"tie_word_embeddings": "true", "sliding_window_pattern": "2"}})
	Register(Arch{ModelTypes: []string{"gemma3_text"}, Load: loadGemma, GGUF: "gemma3",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", normShift: 1, layer: gemmaLayer, swaPeriod: 6},
		Meta: ggufMeta{eps: 1e-6, windowed: true, read: gemmaFromGGUF, write: gemmaToGGUF,
			writeRope: gemma3SlidingRope},
		Defaults: gemma3Defaults})
	registerParams(func(c *Config, f *fields) {
		f.float("query_pre_attn_scalar", &c.QueryPreAttnScalar)
	}, nil)
}

// GemmaParams are the parameters of Gemma 2 and Gemma 3.
type GemmaParams struct {
	// QueryPreAttnScalar scales queries by 1/sqrt(query_pre_attn_scalar);
	// 0 when absent (scale by 1/sqrt(head_dim)).
	QueryPreAttnScalar float64
}

var gemmaNames = denseNames{
	inNorm:       "input_layernorm",
	postAttnNorm: "post_attention_layernorm",
	preFFNorm:    "pre_feedforward_layernorm",
	postFFNorm:   "post_feedforward_layernorm",
}

func loadGemma(cfg *Config, src Source, b compute.Backend) (Model, error) {
	names := gemmaNames
	if cfg.ModelType == "gemma3_text" {
		names.qNorm, names.kNorm = "self_attn.q_norm", "self_attn.k_norm"
	}
	m, err := loadDense(cfg, src, b, names)
	if err != nil {
		return nil, err
	}
	m.normOffset = 1
	m.embedScale = float32(math.Sqrt(float64(cfg.HiddenSize)))
	m.finalSoftCap = float32(cfg.FinalLogitSoftcapping)
	for i := range m.layers {
		m.layers[i].normOffset = 1
		a := &m.layers[i].attn
		if cfg.QueryPreAttnScalar > 0 {
			a.Scale = float32(1 / math.Sqrt(cfg.QueryPreAttnScalar))
		}
		a.SoftCap = float32(cfg.AttnLogitSoftcapping)
	}
	return m, nil
}

// gemmaLayer names the four norms of a Gemma layer in GGUF files.
var gemmaLayer = map[string]string{
	"post_attention_layernorm.weight":   "post_attention_norm.weight",
	"pre_feedforward_layernorm.weight":  "ffn_norm.weight",
	"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}

// gemmaFromGGUF reads the query scale of gemma2 and gemma3 files, and
// gemma3's sliding rope.
func gemmaFromGGUF(k *ggufKeys, c *Config, _ *GGUF) error {
	// llama.cpp scales queries by 1/√head_dim, except for the 27B models
	// (46 and 62 layers), which use 1/√(hidden/heads). A file that says
	// otherwise carries attention.scale.
	c.QueryPreAttnScalar = llamaCppGemmaQueryScalar(k.arch, c)
	if s, ok := k.float("attention.scale"); ok && s > 0 {
		c.QueryPreAttnScalar = 1 / (s * s)
	}
	if k.arch == "gemma3" {
		ggufSlidingRope(c, k)
	}
	return k.err
}

// ggufSlidingRope gives the sliding layers of gemma3 and gemma3n files
// their own rope base (rope.freq_base_swa, 10000 when absent) and no
// scaling.
func ggufSlidingRope(c *Config, k *ggufKeys) {
	p := c.RopeParams
	local := RopeParams{Type: "default", Theta: 10000, Factor: 1, PartialRotaryFactor: p.PartialRotaryFactor, Interleaved: p.Interleaved}
	if v, ok := k.float("rope.freq_base_swa"); ok {
		local.Theta = v
	}
	c.RopeByLayerType = map[string]RopeParams{FullAttention: p, SlidingAttention: local}
}

// gemma3SlidingRope writes the sliding layers' rope base, which llama.cpp
// does not read.
func gemma3SlidingRope(l *GGUFLayout, w *ggufWriter) {
	local, ok := l.cfg.RopeByLayerType[SlidingAttention]
	if !ok {
		return
	}
	w.f32("rope.freq_base_swa", local.Theta)
	if local.Theta != 10000 {
		l.Warnings = append(l.Warnings, fmt.Sprintf("sliding layers' rope_theta %g: written as gemma3.rope.freq_base_swa, which llama.cpp ignores (its gemma3 rotates sliding layers with base 10000)", local.Theta))
	}
}

// gemmaToGGUF writes the query scale, which llama.cpp does not read.
func gemmaToGGUF(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	if c.QueryPreAttnScalar > 0 {
		w.f32("attention.scale", 1/math.Sqrt(c.QueryPreAttnScalar))
		if want := llamaCppGemmaQueryScalar(l.Arch, c); c.QueryPreAttnScalar != want {
			l.Warnings = append(l.Warnings, fmt.Sprintf("query_pre_attn_scalar %g: written as %s.attention.scale, which llama.cpp ignores (its %s scales queries by 1/√%g: 1/√head_dim, or 1/√(hidden_size/num_attention_heads) for the 27B model, told by its layer count)",
				c.QueryPreAttnScalar, l.Arch, l.Arch, want))
		}
	}
	return nil
}

// llamaCppGemmaQueryScalar returns the query_pre_attn_scalar llama.cpp's
// gemma2 and gemma3 use whatever the file says: hidden_size/heads for the
// 27B models (46 and 62 layers), head_dim otherwise.
func llamaCppGemmaQueryScalar(arch string, c *Config) float64 {
	if (arch == "gemma2" && c.NumHiddenLayers == 46) || (arch == "gemma3" && c.NumHiddenLayers == 62) {
		return float64(c.HiddenSize / c.NumAttentionHeads)
	}
	return float64(c.HeadDim)
}

// gemma3Defaults are the values of transformers' Gemma3TextConfig, which
// the text_config of published Gemma 3 checkpoints leaves out.
var gemma3Defaults = map[string]string{
	"vocab_size":              "262208",
	"hidden_size":             "2304",
	"intermediate_size":       "9216",
	"num_hidden_layers":       "26",
	"num_attention_heads":     "8",
	"num_key_value_heads":     "4",
	"head_dim":                "256",
	"hidden_activation":       `"gelu_pytorch_tanh"`,
	"max_position_embeddings": "131072",
	"rms_norm_eps":            "1e-06",
	"rope_theta":              "1000000.0",
	"rope_local_base_freq":    "10000.0",
	"query_pre_attn_scalar":   "256",
	"sliding_window":          "4096",
	"sliding_window_pattern":  "6",
	"tie_word_embeddings":     "true",
	"pad_token_id":            "0",
	"eos_token_id":            "1",
	"bos_token_id":            "2",
}
