package model

import (
	"fmt"

	"lem/compute"
)

// gpt-oss: attention with q/k/v/o biases and a learned sink logit per head
// that joins each softmax, layers alternating between a sliding window and
// full attention (layer_types), YaRN rope, and a mixture of experts on
// every layer whose router has a bias and picks the top k logits before
// the softmax:
//
//	h = x + Attn(RMSNorm(x))
//	y = h + MoE(RMSNorm(h))
//	MoE(h) = Σ_{e ∈ top-k(l)} softmax(l_top-k)_e · FFN_e(h),   l = W_r·h + b_r
//	FFN_e(h) = D_e·((u + 1) ⊙ g ⊙ σ(α·g)) + d_e
//	g = min(G_e·h + b_g, L),   u = clamp(U_e·h + b_u, -L, L)
//
// with α = 1.702 and L = swiglu_limit (7). Checkpoints store the experts
// input-major with gate and up columns interleaved.
func init() {
	Register(Arch{ModelTypes: []string{"gpt_oss"}, Load: loadGptOss, GGUF: "gpt-oss",
		Tensors: &TensorLayout{act: "silu", layer: gptOssLayer, swaPeriod: 2, compose: splitGptOssExperts}})
}

// gptOssAlpha is the slope of the sigmoid in gpt-oss's SwiGLU.
const gptOssAlpha = 1.702

func loadGptOss(cfg *Config, src Source, b compute.Backend) (Model, error) {
	names := llamaNames
	names.moe = &moeSpec{
		router:     "mlp.router",
		experts:    "mlp.experts",
		layout:     moeFusedInterleaved,
		hidden:     cfg.HiddenSize,
		numExperts: cfg.NumExperts,
		topK:       cfg.NumExpertsPerTok,
		order:      compute.TopKSoftmax,
		inter:      cfg.IntermediateSize,
		limit:      float32(cfg.SwiGLULimit),
		alpha:      gptOssAlpha,
	}
	m, err := loadDense(cfg, src, b, names)
	if err != nil {
		return nil, err
	}
	l := &loader{src: src, b: b}
	for i := range m.layers {
		m.layers[i].attn.Sinks = l.vector(fmt.Sprintf("model.layers.%d.self_attn.sinks", i), cfg.NumAttentionHeads)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}
