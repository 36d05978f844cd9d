package model

import (
	"math"

	"lem/compute"
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
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", normShift: 1, layer: gemmaLayer, swaPeriod: 2}})
	Register(Arch{ModelTypes: []string{"gemma3_text"}, Load: loadGemma, GGUF: "gemma3",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", normShift: 1, layer: gemmaLayer, swaPeriod: 6}})
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
