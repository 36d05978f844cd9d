package model

import (
	"fmt"
	"slices"

	"github.com/lem-engine/lem/compute"
)

// Qwen3 MoE: Qwen 3's attention (per-head q/k RMSNorm before rope) with a
// mixture of experts in place of the MLP on the sparse layers.
//
//	h = x + Attn(RMSNorm(x))
//	y = h + MoE(RMSNorm(h))
//	MoE(h) = Σ_{e ∈ top-k(p)} p_e · down_e(silu(gate_e(h)) ⊙ up_e(h)),   p = softmax(W_r·h)
//
// with p_e renormalised over the top k when norm_topk_prob is set. Layers
// listed in mlp_only_layers, or off the decoder_sparse_step, keep a dense
// MLP of intermediate_size. Every layer attends within sliding_window
// when the config gives one.
func init() {
	Register(Arch{ModelTypes: []string{"qwen3_moe"}, Load: loadQwen3MoE, GGUF: "qwen3moe",
		Tensors: &TensorLayout{act: "silu", layer: qwen3moeLayer, compose: stackExperts},
		Keys:    []ConfigKey{{"moe_intermediate_size", "expert_feed_forward_length"}},
		Meta:    ggufMeta{read: qwen3moeFromGGUF, write: qwen3moeToGGUF}})
}

func loadQwen3MoE(cfg *Config, src Source, b compute.Backend) (Model, error) {
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	names := llamaNames
	names.qNorm, names.kNorm = "self_attn.q_norm", "self_attn.k_norm"
	names.moe = &moeSpec{
		router:     "mlp.gate",
		experts:    "mlp.experts",
		layout:     moePerExpert,
		hidden:     cfg.HiddenSize,
		numExperts: cfg.NumExperts,
		topK:       cfg.NumExpertsPerTok,
		order:      compute.SoftmaxTopK,
		normalize:  cfg.NormTopKProb,
		inter:      cfg.MoEIntermediateSize,
		act:        act,
	}
	m, err := loadDense(cfg, src, b, names)
	if err != nil {
		return nil, err
	}
	// transformers 5 windows every layer of Qwen3 MoE whenever config.json
	// gives a sliding_window, whatever use_sliding_window says (the
	// reference fixture shows it); published checkpoints set it to null.
	var window int
	if _, err := cfg.Get("sliding_window", &window); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	if !slices.Contains(cfg.LayerTypes, SlidingAttention) {
		for i := range m.layers {
			m.layers[i].attn.Window = window
		}
	}
	return m, nil
}

// qwen3moeLayer names the tensors of a qwen3moe layer.
var qwen3moeLayer = merge(preNormLayer, moeStackedLayer, map[string]string{
	"mlp.gate.weight": "ffn_gate_inp.weight",
})

// qwen3moeWindow returns the window transformers applies to every layer of
// a Qwen3 MoE checkpoint whose config gives a sliding_window (see
// loadQwen3MoE), or 0.
func qwen3moeWindow(c *Config) (int, error) {
	if slices.Contains(c.LayerTypes, SlidingAttention) {
		return 0, nil
	}
	var window int
	if _, err := c.Get("sliding_window", &window); err != nil {
		return 0, err
	}
	return window, nil
}

// qwen3moeFromGGUF reads the expert keys.
func qwen3moeFromGGUF(k *ggufKeys, c *Config, _ *GGUF) error {
	ff, hasFF := ggufExperts(c, k, "moe_intermediate_size")
	// llama.cpp's default when the key is absent.
	if !hasFF && c.NumExpertsPerTok > 0 {
		ff = c.IntermediateSize / c.NumExpertsPerTok
	}
	c.MoEIntermediateSize = ff
	c.DecoderSparseStep = 1
	ggufExpertNorm(c, k)
	checkExpertFF(c, k)
	return k.err
}

// qwen3moeToGGUF writes the expert keys and the window transformers
// applies to every layer, which llama.cpp's qwen3moe ignores.
func qwen3moeToGGUF(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	w.u32("num_experts", c.NumExperts)
	w.u32("num_experts_per_tok", c.NumExpertsPerTok)
	if err := l.checkAllSparse(); err != nil {
		return err
	}
	if c.NumSharedExperts > 0 || c.SharedExpertIntermediateSize > 0 {
		return fmt.Errorf("%s: shared experts have no place in llama.cpp's qwen3moe", c.ModelType)
	}
	w.u32("moe_intermediate_size", c.MoEIntermediateSize)
	l.writeExpertNorm()
	win, err := qwen3moeWindow(c)
	if err != nil {
		return err
	}
	if win > 0 {
		w.u32("sliding_window", win)
		l.Warnings = append(l.Warnings, "sliding_window windows every layer (as transformers does): written as qwen3moe.attention.sliding_window, which llama.cpp ignores")
		w.window = true
	}
	return nil
}
