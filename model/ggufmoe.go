package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"lem/gguf"
)

// GGUF layouts of the mixture-of-experts families, as llama.cpp's
// convert_hf_to_gguf.py writes them and src/models/{qwen3moe,openai-moe}.cpp
// read them:
//
//   - Experts are stacked per projection: blk.N.ffn_gate_exps.weight and
//     ffn_up_exps.weight hold [experts, expert_ff, hidden] (GGUF dims
//     {hidden, expert_ff, experts}), ffn_down_exps.weight [experts, hidden,
//     expert_ff]. The router is ffn_gate_inp (weight [experts, hidden], and
//     for gpt-oss a bias). Keys: <arch>.expert_count,
//     <arch>.expert_used_count, <arch>.expert_feed_forward_length.
//   - qwen3moe: Qwen2MoeModel stacks the per-expert checkpoint tensors
//     (mlp.experts.E.{gate,up,down}_proj.weight). llama.cpp always
//     renormalises the top-k weights of qwen3moe and never windows its
//     attention; a checkpoint that does otherwise is written with
//     <arch>.expert_weights_norm = false or <arch>.attention.sliding_window,
//     which lem reads and llama.cpp ignores (the layout warns).
//   - gpt-oss: GptOssModel splits the input-major gate_up_proj [experts,
//     hidden, 2·ff], whose columns alternate gate and up, into transposed
//     ffn_gate_exps (the even columns) and ffn_up_exps (the odd ones), the
//     bias the same way, and transposes down_proj [experts, ff, hidden];
//     sinks become attn_sinks.weight and post_attention_layernorm
//     post_attention_norm. expert_feed_forward_length is intermediate_size.
//     llama.cpp slides every other layer (sliding_window_pattern 2, the
//     first layer sliding), uses the clamped SwiGLU with α = 1.702 and
//     limit 7, and picks the top k router logits before the softmax. The
//     published checkpoints store the experts in MXFP4, which llama.cpp's
//     converter repacks into MXFP4 tensors of the same names; ToGGUF
//     writes from float checkpoints only.
//
// The experts reach the loader as stacked tensors under Hugging Face-style
// names (mlp.experts.gate_proj.weight, …: the moeStacked layout), viewed
// per expert in their stored type.

var (
	moeStackedLayer = map[string]string{
		"mlp.experts.gate_proj.weight": "ffn_gate_exps.weight",
		"mlp.experts.up_proj.weight":   "ffn_up_exps.weight",
		"mlp.experts.down_proj.weight": "ffn_down_exps.weight",
	}
	qwen3moeLayer = merge(preNormLayer, moeStackedLayer, map[string]string{
		"mlp.gate.weight": "ffn_gate_inp.weight",
	})
	gptOssLayer = merge(moeStackedLayer, map[string]string{
		"post_attention_layernorm.weight": "post_attention_norm.weight",
		"self_attn.sinks":                 "attn_sinks.weight",
		"mlp.router.weight":               "ffn_gate_inp.weight",
		"mlp.router.bias":                 "ffn_gate_inp.bias",
		"mlp.experts.gate_proj.bias":      "ffn_gate_exps.bias",
		"mlp.experts.up_proj.bias":        "ffn_up_exps.bias",
		"mlp.experts.down_proj.bias":      "ffn_down_exps.bias",
	})
)

// merge returns the union of maps (later ones win).
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// stackExperts stacks per-expert projections (EXPERTS.E.proj.weight, as
// Qwen MoE checkpoints store them) into one tensor per projection and
// layer, EXPERTS.proj.weight [experts, rows, cols].
func stackExperts(c *Config, src Source, names []string) ([]composite, error) {
	type key struct{ layer, proj string }
	parts := map[key][]string{}
	var order []key
	for _, n := range names {
		_, suffix, ok := layerSuffix(n)
		if !ok {
			continue
		}
		rest, ok := strings.CutPrefix(suffix, "mlp.experts.")
		if !ok {
			continue
		}
		e, proj, ok := strings.Cut(rest, ".")
		if _, err := strconv.Atoi(e); !ok || err != nil {
			continue
		}
		k := key{strings.TrimSuffix(n, suffix) + "mlp.experts.", proj}
		if _, seen := parts[k]; !seen {
			order = append(order, k)
		}
		parts[k] = append(parts[k], n)
	}
	var out []composite
	for _, k := range order {
		ne := c.NumExperts
		if len(parts[k]) != ne {
			return nil, fmt.Errorf("%s*.%s: %d experts in the checkpoint, config says %d", k.layer, k.proj, len(parts[k]), ne)
		}
		ps := make([]string, ne)
		for e := range ne {
			ps[e] = k.layer + strconv.Itoa(e) + "." + k.proj
		}
		var first Stored
		for e, p := range ps {
			s, ok := src.Lookup(p)
			if !ok {
				return nil, fmt.Errorf("tensor %s is missing", p)
			}
			if e == 0 {
				first = s
			}
			if s.DType != first.DType || !slices.Equal(s.Shape, first.Shape) || len(s.Data) != len(first.Data) {
				return nil, fmt.Errorf("tensor %s is %s %v, expert 0 is %s %v: experts must agree to be stacked", p, s.DType, s.Shape, first.DType, first.Shape)
			}
		}
		if len(first.Shape) != 2 {
			return nil, fmt.Errorf("tensor %s has shape %v, want a matrix", ps[0], first.Shape)
		}
		out = append(out, composite{
			name: k.layer + k.proj, parts: ps, dtype: first.DType,
			shape: []int{ne, first.Shape[0], first.Shape[1]},
			build: func() []byte {
				var data []byte
				for _, p := range ps {
					s, _ := src.Lookup(p)
					data = append(data, s.Data...)
				}
				return data
			},
		})
	}
	return out, nil
}

// splitGptOssExperts turns gpt-oss's input-major fused experts into the
// stacked output-major projections llama.cpp stores.
func splitGptOssExperts(c *Config, src Source, names []string) ([]composite, error) {
	var out []composite
	for _, n := range names {
		_, suffix, ok := layerSuffix(n)
		if !ok {
			continue
		}
		p := strings.TrimSuffix(n, suffix) + "mlp.experts."
		s, _ := src.Lookup(n)
		es := s.DType.Size()
		if strings.HasPrefix(suffix, "mlp.experts.") && (es == 0 || s.DType.Quantized()) {
			return nil, fmt.Errorf("tensor %s is %s: gpt-oss experts are rearranged element by element, which needs a float type", n, s.DType)
		}
		ne := c.NumExperts
		want := func(shape ...int) error {
			if !slices.Equal(s.Shape, shape) || len(s.Data) != es*shapeLen(shape) {
				return fmt.Errorf("tensor %s has shape %v (%d bytes of %s), want %v", n, s.Shape, len(s.Data), s.DType, shape)
			}
			return nil
		}
		switch suffix {
		case "mlp.experts.gate_up_proj":
			hid, inter := c.HiddenSize, c.IntermediateSize
			if err := want(ne, hid, 2*inter); err != nil {
				return nil, err
			}
			for half, proj := range []string{"gate_proj.weight", "up_proj.weight"} {
				out = append(out, composite{
					name: p + proj, parts: []string{n}, dtype: s.DType, shape: []int{ne, inter, hid},
					build: func() []byte {
						s, _ := src.Lookup(n)
						var data []byte
						per := inter * hid * es
						for e := range ne {
							t := deinterleaveT(slab(s, e, ne), hid, inter, es)
							data = append(data, t[half*per:(half+1)*per]...)
						}
						return data
					},
				})
			}
		case "mlp.experts.gate_up_proj_bias":
			inter := c.IntermediateSize
			if err := want(ne, 2*inter); err != nil {
				return nil, err
			}
			for half, proj := range []string{"gate_proj.bias", "up_proj.bias"} {
				out = append(out, composite{
					name: p + proj, parts: []string{n}, dtype: s.DType, shape: []int{ne, inter},
					build: func() []byte {
						s, _ := src.Lookup(n)
						data := make([]byte, 0, len(s.Data)/2)
						for i := half; i < 2*ne*inter; i += 2 {
							data = append(data, s.Data[i*es:(i+1)*es]...)
						}
						return data
					},
				})
			}
		case "mlp.experts.down_proj":
			hid, inter := c.HiddenSize, c.IntermediateSize
			if err := want(ne, inter, hid); err != nil {
				return nil, err
			}
			out = append(out, composite{
				name: p + "down_proj.weight", parts: []string{n}, dtype: s.DType, shape: []int{ne, hid, inter},
				build: func() []byte {
					s, _ := src.Lookup(n)
					var data []byte
					for e := range ne {
						data = append(data, transpose(slab(s, e, ne), inter, hid, es)...)
					}
					return data
				},
			})
		case "mlp.experts.down_proj_bias":
			if err := want(ne, c.HiddenSize); err != nil {
				return nil, err
			}
			out = append(out, composite{
				name: p + "down_proj.bias", parts: []string{n}, dtype: s.DType, shape: s.Shape,
				build: func() []byte { s, _ := src.Lookup(n); return s.Data },
			})
		}
	}
	return out, nil
}

// ggufMoEConfig reads the expert keys of the mixture-of-experts families.
func ggufMoEConfig(c *Config, k *ggufKeys) {
	c.NumExperts = k.need("expert_count")
	c.NumExpertsPerTok = k.need("expert_used_count")
	if k.err == nil && c.NumExpertsPerTok > c.NumExperts {
		k.fail(fmt.Errorf("key %s.expert_used_count: %d of %d experts", k.arch, c.NumExpertsPerTok, c.NumExperts))
	}
	ff, hasFF := k.uint("expert_feed_forward_length")
	switch k.arch {
	case "qwen3moe":
		// llama.cpp's default when the key is absent.
		if !hasFF && c.NumExpertsPerTok > 0 {
			ff = c.IntermediateSize / c.NumExpertsPerTok
		}
		c.MoEIntermediateSize = ff
		c.DecoderSparseStep = 1
		c.NormTopKProb = true
		if v, ok := k.f.Value(k.arch + ".expert_weights_norm"); ok {
			b, ok := v.Bool()
			if !ok {
				k.fail(fmt.Errorf("key %s.expert_weights_norm: want a bool, got %s", k.arch, v.Type()))
			}
			c.NormTopKProb = b
		}
	case "qwen3next", "qwen35moe":
		// llama.cpp's defaults when the keys are absent.
		if !hasFF && c.NumExpertsPerTok > 0 {
			ff = c.IntermediateSize / c.NumExpertsPerTok
		}
		c.MoEIntermediateSize = ff
		c.SharedExpertIntermediateSize = c.IntermediateSize
		if v, ok := k.uint("expert_shared_feed_forward_length"); ok {
			c.SharedExpertIntermediateSize = v
		}
		c.DecoderSparseStep = 1
		c.NormTopKProb = true
		if v, ok := k.f.Value(k.arch + ".expert_weights_norm"); ok && k.arch == "qwen3next" {
			b, ok := v.Bool()
			if !ok {
				k.fail(fmt.Errorf("key %s.expert_weights_norm: want a bool, got %s", k.arch, v.Type()))
			}
			c.NormTopKProb = b
		}
	case "gpt-oss":
		if !hasFF {
			k.fail(fmt.Errorf("missing key %s.expert_feed_forward_length", k.arch))
		}
		c.IntermediateSize = ff
		c.SwiGLULimit = 7
	}
	if k.err == nil && (c.MoEIntermediateSize == 0 && c.IntermediateSize == 0) {
		k.fail(fmt.Errorf("key %s.expert_feed_forward_length is 0", k.arch))
	}
}

// moeMetadata writes the expert keys of the mixture-of-experts families.
func (l *GGUFLayout) moeMetadata(u32 func(string, int)) error {
	c := l.cfg
	u32("expert_count", c.NumExperts)
	u32("expert_used_count", c.NumExpertsPerTok)
	switch l.Arch {
	case "qwen3moe":
		for i := range c.NumHiddenLayers {
			if !c.SparseLayer(i) {
				return fmt.Errorf("%s: layer %d has a dense MLP (mlp_only_layers, decoder_sparse_step), which llama.cpp's qwen3moe cannot hold", c.ModelType, i)
			}
		}
		if c.NumSharedExperts > 0 || c.SharedExpertIntermediateSize > 0 {
			return fmt.Errorf("%s: shared experts have no place in llama.cpp's qwen3moe", c.ModelType)
		}
		u32("expert_feed_forward_length", c.MoEIntermediateSize)
		if !c.NormTopKProb {
			l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".expert_weights_norm", Value: gguf.Bool(false)})
			l.Warnings = append(l.Warnings, "norm_topk_prob is false: written as qwen3moe.expert_weights_norm, which llama.cpp ignores (it renormalises the top-k weights)")
		}
	case "qwen3next", "qwen35moe":
		return l.linearMoEMetadata(u32)
	case "gpt-oss":
		u32("expert_feed_forward_length", c.IntermediateSize)
		if c.SwiGLULimit != 7 {
			return fmt.Errorf("%s: swiglu_limit %g: llama.cpp's gpt-oss clamps at 7", c.ModelType, c.SwiGLULimit)
		}
	}
	return nil
}

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
