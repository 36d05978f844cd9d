package model

import (
	"fmt"
	"math"
	"slices"

	"lem/gguf"
)

// GGUF layouts of the state-space families, as llama.cpp's
// convert_hf_to_gguf.py (Mamba2Model, FalconH1Model) writes them and
// src/models/{mamba2,falcon-h1}.cpp read them.
//
// The SSM mixer's tensors are blk.N.ssm_in (in_proj), ssm_conv1d (the
// depthwise convolution, squeezed from [channels, 1, width] to [channels,
// width], and its bias), ssm_dt.bias (dt_bias), ssm_a, ssm_d, ssm_norm and
// ssm_out (out_proj). The converter stores A rather than A_log: ssm_a =
// −exp(A_log), as a [heads, 1] matrix ({1, heads} in GGUF order) and
// without a ".weight" suffix, like ssm_d (D as [heads, 1]); the gated norm's
// weight is reshaped to [groups, inner/groups]. Keys: <arch>.ssm.conv_kernel,
// .ssm.inner_size, .ssm.state_size, .ssm.time_step_rank (the number of SSM
// heads), .ssm.group_count. The files carry no time-step limit: they are
// read with the reference default [0, ∞).
//
// mamba2 names its tensors from the backbone.* checkpoint (embeddings →
// token_embd, norm_f → output_norm, layers.N.norm → attn_norm) and writes
// feed_forward_length and attention.head_count as 0.

var (
	mamba2Global = map[string]string{
		"backbone.embeddings.weight": "token_embd.weight",
		"backbone.norm_f.weight":     "output_norm.weight",
		"lm_head.weight":             "output.weight",
	}
	mamba2GGUFLayer = map[string]string{
		"norm.weight":           "attn_norm.weight",
		"mixer.in_proj.weight":  "ssm_in.weight",
		"mixer.conv1d.weight":   "ssm_conv1d.weight",
		"mixer.conv1d.bias":     "ssm_conv1d.bias",
		"mixer.dt_bias":         "ssm_dt.bias",
		"mixer.A_log":           "ssm_a",
		"mixer.D":               "ssm_d",
		"mixer.norm.weight":     "ssm_norm.weight",
		"mixer.out_proj.weight": "ssm_out.weight",
	}
)

// ssmRules returns the shape and value changes of an SSM mixer's tensors
// whose Hugging Face names start with p ("mixer.", "mamba.").
func ssmRules(c *Config, p string) map[string]ggufRule {
	groups := max(c.SSM.Groups, 1)
	column := func(s []int) []int { return append(append([]int{}, s...), 1) } // [n] → [n, 1]
	flat := func(s []int) []int { return []int{shapeLen(s)} }
	return map[string]ggufRule{
		p + "conv1d.weight": {
			shape: func(s []int) []int {
				if len(s) == 3 && s[1] == 1 {
					return []int{s[0], s[2]}
				}
				return s
			},
			unshape: func(s []int) []int {
				if len(s) == 2 {
					return []int{s[0], 1, s[1]}
				}
				return s
			},
		},
		p + "A_log": {
			shape: column, unshape: flat,
			encode: func(row []float32, _ int) {
				for i, v := range row {
					row[i] = -float32(math.Exp(float64(v)))
				}
			},
			decode: func(row []float32, _ int) {
				for i, v := range row {
					row[i] = float32(math.Log(-float64(v)))
				}
			},
		},
		p + "D": {shape: column, unshape: flat},
		p + "norm.weight": {
			shape: func(s []int) []int {
				if n := shapeLen(s); len(s) == 1 && n%groups == 0 {
					return []int{groups, n / groups}
				}
				return s
			},
			unshape: flat,
		},
	}
}

// ggufMamba2Config builds the Config of a mamba2 file.
func ggufMamba2Config(f *gguf.File, k *ggufKeys, c *Config, g *GGUF) (*Config, error) {
	c.NumHiddenLayers = k.need("block_count")
	c.HiddenSize = k.need("embedding_length")
	c.MaxPositionEmbeddings, _ = k.uint("context_length")
	c.RMSNormEps = 1e-5
	k.eps("attention.layer_norm_rms_epsilon", &c.RMSNormEps)
	if err := ggufSSMConfig(c, k); err != nil {
		return nil, err
	}
	if k.err != nil {
		return nil, k.err
	}
	if c.NumHiddenLayers > MaxLayers {
		return nil, fmt.Errorf("key %s.block_count: %d layers is more than the %d supported", k.arch, c.NumHiddenLayers, MaxLayers)
	}
	if err := ggufVocab(f, c, g); err != nil {
		return nil, err
	}
	return c, nil
}

// ggufSSMConfig reads the ssm.* keys.
func ggufSSMConfig(c *Config, k *ggufKeys) error {
	s := &c.SSM
	c.ConvKernel = k.need("ssm.conv_kernel")
	s.Inner = k.need("ssm.inner_size")
	s.StateSize = k.need("ssm.state_size")
	s.Heads = k.need("ssm.time_step_rank")
	s.Groups = 1
	if n, ok := k.uint("ssm.group_count"); ok && n > 0 {
		s.Groups = n
	}
	if k.err != nil {
		return k.err
	}
	if s.Inner%s.Heads != 0 {
		return fmt.Errorf("key %s.ssm.inner_size: %d channels are not a multiple of %d heads (ssm.time_step_rank)", k.arch, s.Inner, s.Heads)
	}
	s.HeadDim = s.Inner / s.Heads
	s.TimeStepMin, s.TimeStepMax = 0, math.Inf(1)
	s.RMSNorm = true
	return nil
}

// ssmMetadata writes the ssm.* keys, after checking that the checkpoint's
// SSM settings are the ones the keys imply.
func (l *GGUFLayout) ssmMetadata(u32 func(string, int)) error {
	c := l.cfg
	s := c.SSM
	if s.TimeStepMin != 0 || !math.IsInf(s.TimeStepMax, 1) {
		return fmt.Errorf("%s: time_step_limit [%g, %g] has no GGUF key (files are read with [0, ∞))", c.ModelType, s.TimeStepMin, s.TimeStepMax)
	}
	if s.Heads <= 0 || s.Heads*s.HeadDim != s.Inner {
		return fmt.Errorf("%s: %d SSM heads of %d do not make %d channels", c.ModelType, s.Heads, s.HeadDim, s.Inner)
	}
	u32("ssm.conv_kernel", c.ConvKernel)
	u32("ssm.inner_size", s.Inner)
	u32("ssm.state_size", s.StateSize)
	u32("ssm.time_step_rank", s.Heads)
	u32("ssm.group_count", max(s.Groups, 1))
	return nil
}

// mamba2Metadata writes the keys of a mamba2 file.
func (l *GGUFLayout) mamba2Metadata(u32 func(string, int), f32 func(string, float64)) error {
	c := l.cfg
	if !c.SSM.RMSNorm || c.SSM.NormBeforeGate {
		return fmt.Errorf("%s: llama.cpp's mamba2 normalises the gated output (mamba_rms_norm true, norm_before_gate false)", c.ModelType)
	}
	// The converter's context length: mamba2 has no position limit.
	u32("context_length", 1<<20)
	u32("embedding_length", c.HiddenSize)
	u32("feed_forward_length", 0)
	u32("attention.head_count", 0)
	u32("block_count", c.NumHiddenLayers)
	f32("attention.layer_norm_rms_epsilon", c.NormEps())
	u32("vocab_size", c.VocabSize)
	return l.ssmMetadata(u32)
}

// Falcon-H1 (FalconH1Model, a Mamba2Model with attention): every layer runs
// attention and the SSM mixer side by side on attn_norm (input_layernorm),
// then the MLP on ffn_norm (pre_ff_layernorm). The converter folds the µP
// multipliers into the weights — embedding_multiplier into token_embd,
// lm_head_multiplier into output, attention_in_multiplier into attn_q, attn_k
// and attn_v (key_multiplier too into attn_k), attention_out_multiplier
// into attn_output, mlp_multipliers into ffn_gate and ffn_down,
// ssm_out_multiplier into ssm_out, and ssm_in_multiplier times the
// ssm_multipliers of the z, x, B, C and dt rows into ssm_in — and
// llama.cpp's graph applies none, so a file is read with every multiplier 1.
// Keys: the mamba2 ones, with feed_forward_length, attention.head_count(_kv),
// key_length and value_length of the attention half.

var (
	falconH1Global = map[string]string{
		"model.embed_tokens.weight":    "token_embd.weight",
		"model.final_layernorm.weight": "output_norm.weight",
		"lm_head.weight":               "output.weight",
	}
	falconH1GGUFLayer = map[string]string{
		"input_layernorm.weight":        "attn_norm.weight",
		"pre_ff_layernorm.weight":       "ffn_norm.weight",
		"feed_forward.gate_proj.weight": "ffn_gate.weight",
		"feed_forward.up_proj.weight":   "ffn_up.weight",
		"feed_forward.down_proj.weight": "ffn_down.weight",
		"mamba.in_proj.weight":          "ssm_in.weight",
		"mamba.conv1d.weight":           "ssm_conv1d.weight",
		"mamba.conv1d.bias":             "ssm_conv1d.bias",
		"mamba.dt_bias":                 "ssm_dt.bias",
		"mamba.A_log":                   "ssm_a",
		"mamba.D":                       "ssm_d",
		"mamba.norm.weight":             "ssm_norm.weight",
		"mamba.out_proj.weight":         "ssm_out.weight",
	}
)

// falconH1Rules are the SSM rules plus the folded multipliers.
func falconH1Rules(c *Config) map[string]ggufRule {
	rules := ssmRules(c, "mamba.")
	scale := func(name string, f float64) {
		if f == 1 || f == 0 {
			return
		}
		r := rules[name]
		s := float32(f)
		r.encode = func(row []float32, _ int) {
			for i := range row {
				row[i] *= s
			}
		}
		rules[name] = r
	}
	scale("model.embed_tokens.weight", c.EmbeddingMultiplier)
	scale("lm_head.weight", c.LMHeadMultiplier)
	scale("self_attn.q_proj.weight", c.AttentionInMultiplier)
	scale("self_attn.k_proj.weight", c.AttentionInMultiplier*c.KeyMultiplier)
	scale("self_attn.v_proj.weight", c.AttentionInMultiplier)
	scale("self_attn.o_proj.weight", c.AttentionOutMultiplier)
	scale("feed_forward.gate_proj.weight", c.MLPMultipliers[0])
	scale("feed_forward.down_proj.weight", c.MLPMultipliers[1])
	scale("mamba.out_proj.weight", c.SSMOutMultiplier)
	if mup := mupVector(c); mup != nil {
		r := rules["mamba.in_proj.weight"]
		r.encode = func(row []float32, i int) {
			s := mup[min(i, len(mup)-1)]
			for j := range row {
				row[j] *= s
			}
		}
		rules["mamba.in_proj.weight"] = r
	}
	return rules
}

// falconH1Metadata writes the SSM keys of a falcon-h1 file after checking
// that the weights can carry the multipliers.
func (l *GGUFLayout) falconH1Metadata(u32 func(string, int)) error {
	c := l.cfg
	if c.SSM.RMSNorm && c.SSM.NormBeforeGate {
		return fmt.Errorf("%s: mamba_norm_before_gate: llama.cpp normalises the SSM output after the gate", c.ModelType)
	}
	if c.AttentionBias || c.MLPBias {
		return fmt.Errorf("%s: biases cannot carry the µP multipliers that llama.cpp folds into the weights", c.ModelType)
	}
	if c.TieWordEmbeddings && c.EmbeddingMultiplier != c.LMHeadMultiplier {
		return fmt.Errorf("%s: tied embeddings with embedding_multiplier %g ≠ lm_head_multiplier %g cannot carry both folded", c.ModelType, c.EmbeddingMultiplier, c.LMHeadMultiplier)
	}
	return l.ssmMetadata(u32)
}

// LFM2 (LFM2Model): layers are short convolutions or attention, told apart
// by attention.head_count_kv, one count per layer with 0 for the
// convolution layers. The convolution's in_proj, out_proj and depthwise
// kernel (squeezed from [hidden, 1, width] to [hidden, width]) are
// shortconv.in_proj, shortconv.out_proj and shortconv.conv, its width
// shortconv.l_cache; operator_norm is attn_norm, feed_forward.w1/w3/w2 are
// ffn_gate/up/down, q_layernorm and k_layernorm attn_q_norm and
// attn_k_norm; the final norm, model.embedding_norm, is token_embd_norm.
// feed_forward_length is the width after block_auto_adjust_ff_dim.

var (
	lfm2Global = map[string]string{
		"model.embed_tokens.weight":   "token_embd.weight",
		"model.embedding_norm.weight": "token_embd_norm.weight",
		"lm_head.weight":              "output.weight",
	}
	lfm2GGUFLayer = map[string]string{
		"operator_norm.weight":         "attn_norm.weight",
		"ffn_norm.weight":              "ffn_norm.weight",
		"feed_forward.w1.weight":       "ffn_gate.weight",
		"feed_forward.w3.weight":       "ffn_up.weight",
		"feed_forward.w2.weight":       "ffn_down.weight",
		"self_attn.out_proj.weight":    "attn_output.weight",
		"self_attn.q_layernorm.weight": "attn_q_norm.weight",
		"self_attn.k_layernorm.weight": "attn_k_norm.weight",
		"conv.conv.weight":             "shortconv.conv.weight",
		"conv.in_proj.weight":          "shortconv.in_proj.weight",
		"conv.out_proj.weight":         "shortconv.out_proj.weight",
	}
)

// lfm2Rules squeezes the convolution kernels.
func lfm2Rules(c *Config) map[string]ggufRule {
	conv := ssmRules(c, "conv.")["conv.conv1d.weight"]
	return map[string]ggufRule{"conv.conv.weight": conv}
}

// ggufLFM2Config marks the convolution layers and reads their width.
func ggufLFM2Config(c *Config, k *ggufKeys, kvHeads []int) error {
	for i, n := range kvHeads {
		if n == 0 {
			c.LayerTypes[i] = "conv"
		}
	}
	c.ConvKernel, _ = k.uint("shortconv.l_cache")
	if slices.Contains(c.LayerTypes, "conv") && c.ConvKernel == 0 {
		return fmt.Errorf("missing key %s.shortconv.l_cache", k.arch)
	}
	return k.err
}
