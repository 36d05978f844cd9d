package model

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lem-engine/lem/compute"
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
		Tensors:  &TensorLayout{act: "silu", layer: gptOssLayer, swaPeriod: 2, compose: splitGptOssExperts},
		Meta:     ggufMeta{read: gptOssFromGGUF, write: gptOssToGGUF, windowed: true, yarnNoTruncate: true},
		Defaults: map[string]string{"swiglu_limit": "7.0"}})
	registerParams(func(c *Config, f *fields) { c.GptOssParams.read(f) },
		func(c *Config, prefix string) error { return c.GptOssParams.check(prefix) })
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

// gptOssLayer names the tensors of a gpt-oss layer.
var gptOssLayer = merge(moeStackedLayer, map[string]string{
	"post_attention_layernorm.weight": "post_attention_norm.weight",
	"self_attn.sinks":                 "attn_sinks.weight",
	"mlp.router.weight":               "ffn_gate_inp.weight",
	"mlp.router.bias":                 "ffn_gate_inp.bias",
	"mlp.experts.gate_proj.bias":      "ffn_gate_exps.bias",
	"mlp.experts.up_proj.bias":        "ffn_up_exps.bias",
	"mlp.experts.down_proj.bias":      "ffn_down_exps.bias",
})

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

// gptOssFromGGUF reads the expert keys; the experts are intermediate_size
// wide and clamped at llama.cpp's limit.
func gptOssFromGGUF(k *ggufKeys, c *Config, _ *GGUF) error {
	ff, hasFF := ggufExperts(c, k, "expert_feed_forward_length")
	if !hasFF {
		k.fail(fmt.Errorf("missing key %s.expert_feed_forward_length", k.arch))
	}
	c.IntermediateSize = ff
	c.SwiGLULimit = 7
	checkExpertFF(c, k)
	return k.err
}

// gptOssToGGUF writes the expert keys.
func gptOssToGGUF(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	w.u32("num_experts", c.NumExperts)
	w.u32("num_experts_per_tok", c.NumExpertsPerTok)
	w.u32("expert_feed_forward_length", c.IntermediateSize)
	if c.SwiGLULimit != 7 {
		return fmt.Errorf("%s: swiglu_limit %g: llama.cpp's gpt-oss clamps at 7", c.ModelType, c.SwiGLULimit)
	}
	return nil
}

// GptOssParams are gpt-oss's own parameters.
type GptOssParams struct {
	// SwiGLULimit clamps the gate and up projections of the experts
	// (swiglu_limit; 7 when absent from a gpt_oss config).
	SwiGLULimit float64
}

func (p *GptOssParams) read(f *fields) {
	f.float("swiglu_limit", &p.SwiGLULimit)
}

func (p *GptOssParams) check(prefix string) error {
	if p.SwiGLULimit < 0 || math.IsInf(p.SwiGLULimit, 0) {
		return fmt.Errorf("key %q: %g is not a non-negative number", prefix+"swiglu_limit", p.SwiGLULimit)
	}
	return nil
}
