package model

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"lem/gguf"
)

// GGUF layouts of the gated delta-rule hybrids, as llama.cpp's converter
// (Qwen3NextModel, and Qwen3_5TextModel and Qwen3_5MoeTextModel in
// conversion/qwen.py) writes them and src/models/{qwen3next,qwen35,
// qwen35moe}.cpp read them. The architectures are qwen3next, qwen35 and
// qwen35moe.
//
//   - Every RMSNorm weight is stored as w+1 (the checkpoints store w and
//     scale by 1+w), except the gated norm of the linear-attention layers,
//     linear_attn.norm (ssm_norm), which scales by w.
//   - Linear-attention layers: in_proj_qkv is attn_qkv and in_proj_z
//     attn_gate; Qwen3-Next's fused in_proj_qkvz, grouped per key head as
//     [q k v z], is regrouped into the two (all queries, then all keys,
//     then all values; the z rows apart). in_proj_ba (Qwen3-Next, grouped
//     [b a] per key head, kept so) is ssm_ba; in_proj_b and in_proj_a
//     (Qwen3.5) are ssm_beta and ssm_alpha. conv1d is ssm_conv1d, squeezed
//     from [channels, 1, width] to [channels, width]; dt_bias is
//     ssm_dt.bias; A_log is stored as ssm_a = −exp(A_log), a vector with no
//     ".weight" suffix; norm is ssm_norm and out_proj ssm_out.
//   - Qwen3.5 files hold the value heads in tiled order when there are
//     more value heads than key heads: value head j = v·kh + g is the
//     checkpoint's head g·r + v (r value heads per key head g), in the rows
//     of attn_qkv's values, attn_gate, ssm_beta, ssm_alpha, the value
//     channels of ssm_conv1d, ssm_a, ssm_dt and the columns of ssm_out, so
//     that value head j reads key head j mod kh. lem reads them in that
//     order (Config.LinearTiledHeads, compute.DeltaRule.Tiled); Qwen3-Next
//     files keep the grouped order.
//   - Keys: ssm.conv_kernel (linear_conv_kernel_dim), ssm.state_size
//     (linear_key_head_dim), ssm.group_count (linear_num_key_heads),
//     ssm.time_step_rank (linear_num_value_heads), ssm.inner_size
//     (linear_value_head_dim × linear_num_value_heads), and
//     full_attention_interval: every n-th layer attends (4 when absent).
//     llama.cpp also reads attention.recurrent_layers, one bool per layer,
//     which lem writes when layer_types follows no interval.
//     rope.dimension_count is head_dim × partial_rotary_factor; Qwen3.5's
//     rope is llama.cpp's interleaved multi-section rope, whose
//     rope.dimension_sections (mrope_section, [11, 11, 10, 0] when absent)
//     change nothing for text, every section seeing the token's position.
//   - The attention layers keep q_proj's per-head [query gate] rows as
//     attn_q; post_attention_layernorm is post_attention_norm.
//   - The mixture of experts (qwen3next, qwen35moe): experts stacked as for
//     qwen3moe; shared_expert.{gate,up,down}_proj are ffn_{gate,up,down}_shexp
//     and shared_expert_gate ([1, hidden]) ffn_gate_inp_shexp. Keys
//     expert_feed_forward_length and expert_shared_feed_forward_length.
//     llama.cpp's graph renormalises the top-k weights and puts a MoE block
//     on every layer.

var (
	linearGGUFLayer = map[string]string{
		"post_attention_layernorm.weight": "post_attention_norm.weight",
		"linear_attn.in_proj_qkv.weight":  "attn_qkv.weight",
		"linear_attn.in_proj_z.weight":    "attn_gate.weight",
		"linear_attn.in_proj_ba.weight":   "ssm_ba.weight",
		"linear_attn.in_proj_b.weight":    "ssm_beta.weight",
		"linear_attn.in_proj_a.weight":    "ssm_alpha.weight",
		"linear_attn.conv1d.weight":       "ssm_conv1d.weight",
		"linear_attn.dt_bias":             "ssm_dt.bias",
		"linear_attn.A_log":               "ssm_a",
		"linear_attn.norm.weight":         "ssm_norm.weight",
		"linear_attn.out_proj.weight":     "ssm_out.weight",
	}
	linearMoELayer = merge(linearGGUFLayer, moeStackedLayer, map[string]string{
		"mlp.gate.weight":                    "ffn_gate_inp.weight",
		"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
		"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
		"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
		"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
	})
)

// isLinearArch reports whether a GGUF architecture is a delta-rule hybrid.
func isLinearArch(arch string) bool {
	return arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe"
}

// linearRules squeezes the convolution kernel and stores A as −exp(A_log).
func linearRules(c *Config) map[string]ggufRule {
	const p = "linear_attn."
	return map[string]ggufRule{
		p + "conv1d.weight": ssmRules(c, p)[p+"conv1d.weight"],
		p + "A_log": {
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
	}
}

// composeAll runs several compose functions over a checkpoint.
func composeAll(fns ...func(*Config, Source, []string) ([]composite, error)) func(*Config, Source, []string) ([]composite, error) {
	return func(c *Config, src Source, names []string) ([]composite, error) {
		var out []composite
		for _, fn := range fns {
			cs, err := fn(c, src, names)
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
		return out, nil
	}
}

// splitQKVZ regroups Qwen3-Next's fused in_proj_qkvz ([q k v z] per key
// head) into in_proj_qkv (every query, then every key, then every value)
// and in_proj_z, moving whole rows.
func splitQKVZ(c *Config, src Source, names []string) ([]composite, error) {
	kh, vh := c.LinearNumKeyHeads, c.LinearNumValueHeads
	dk, dv := c.LinearKeyHeadDim, c.LinearValueHeadDim
	if kh <= 0 || vh%kh != 0 {
		return nil, fmt.Errorf("%s: %d value heads are not a multiple of %d key heads", c.ModelType, vh, kh)
	}
	r := vh / kh
	group := 2*dk + 2*r*dv
	var q, k, v, z []int
	for g := range kh {
		o := g * group
		q = appendRange(q, o, o+dk)
		k = appendRange(k, o+dk, o+2*dk)
		v = appendRange(v, o+2*dk, o+2*dk+r*dv)
		z = appendRange(z, o+2*dk+r*dv, o+group)
	}
	qkv := append(append(q, k...), v...)
	var out []composite
	for _, n := range names {
		p, ok := strings.CutSuffix(n, "linear_attn.in_proj_qkvz.weight")
		if !ok {
			continue
		}
		for _, part := range []struct {
			name string
			rows []int
		}{{"linear_attn.in_proj_qkv.weight", qkv}, {"linear_attn.in_proj_z.weight", z}} {
			cp, err := selectRows(src, n, p+part.name, []int{kh * group, c.HiddenSize}, part.rows)
			if err != nil {
				return nil, err
			}
			out = append(out, cp)
		}
	}
	return out, nil
}

// tileValueHeads reorders the value heads of a Qwen3.5 checkpoint's
// linear-attention layers from grouped to tiled order, as the converter
// does when there are more value heads than key heads.
func tileValueHeads(c *Config, src Source, names []string) ([]composite, error) {
	kh, vh := c.LinearNumKeyHeads, c.LinearNumValueHeads
	dk, dv := c.LinearKeyHeadDim, c.LinearValueHeadDim
	if c.LinearTiledHeads || kh == vh {
		return nil, nil
	}
	if kh <= 0 || vh%kh != 0 {
		return nil, fmt.Errorf("%s: %d value heads are not a multiple of %d key heads", c.ModelType, vh, kh)
	}
	// tiled maps heads of size n to their tiled order, after skip
	// untouched leading rows.
	tiled := func(skip, n int) []int {
		order := appendRange(nil, 0, skip)
		for j := range vh {
			old := (j%kh)*(vh/kh) + j/kh
			order = appendRange(order, skip+old*n, skip+(old+1)*n)
		}
		return order
	}
	qk := 2 * kh * dk
	var out []composite
	for _, n := range names {
		_, suffix, ok := layerSuffix(n)
		if !ok {
			continue
		}
		s, _ := src.Lookup(n)
		var cp composite
		var err error
		switch suffix {
		case "linear_attn.in_proj_qkv.weight":
			cp, err = selectRows(src, n, n, []int{qk + vh*dv, c.HiddenSize}, tiled(qk, dv))
		case "linear_attn.in_proj_z.weight":
			cp, err = selectRows(src, n, n, []int{vh * dv, c.HiddenSize}, tiled(0, dv))
		case "linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight":
			cp, err = selectRows(src, n, n, []int{vh, c.HiddenSize}, tiled(0, 1))
		case "linear_attn.A_log", "linear_attn.dt_bias":
			cp, err = selectRows(src, n, n, []int{vh}, tiled(0, 1))
		case "linear_attn.conv1d.weight":
			cp, err = selectRows(src, n, n, []int{qk + vh*dv, 1, c.LinearConvKernelDim}, tiled(qk, dv))
		case "linear_attn.out_proj.weight":
			cp, err = selectColumns(src, n, []int{c.HiddenSize, vh * dv}, tiled(0, dv))
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		if cp.dtype != s.DType {
			return nil, fmt.Errorf("tensor %s: internal error: dtype changed", n)
		}
		out = append(out, cp)
	}
	return out, nil
}

// selectRows returns the composite name built from the listed rows of the
// tensor part (outermost dimension; shape is its expected shape), moving
// whole rows in the stored type.
func selectRows(src Source, part, name string, shape, rows []int) (composite, error) {
	s, ok := src.Lookup(part)
	if !ok {
		return composite{}, fmt.Errorf("tensor %s is missing", part)
	}
	if !slices.Equal(s.Shape, shape) {
		return composite{}, fmt.Errorf("tensor %s has shape %v, want %v", part, s.Shape, shape)
	}
	cols := 1
	if len(shape) > 1 {
		cols = shapeLen(shape[1:])
	}
	rb, err := s.DType.RowBytes(cols)
	if err != nil || len(s.Data) != shape[0]*rb {
		return composite{}, fmt.Errorf("tensor %s: %d bytes do not hold %v %s values", part, len(s.Data), shape, s.DType)
	}
	out := append([]int{len(rows)}, shape[1:]...)
	return composite{
		name: name, parts: []string{part}, dtype: s.DType, shape: out,
		build: func() []byte {
			s, _ := src.Lookup(part)
			data := make([]byte, 0, len(rows)*rb)
			for _, r := range rows {
				data = append(data, s.Data[r*rb:(r+1)*rb]...)
			}
			return data
		},
	}, nil
}

// selectColumns returns the matrix part with its columns in the listed
// order; it moves single elements, so the type must not be block
// quantized.
func selectColumns(src Source, part string, shape, cols []int) (composite, error) {
	s, ok := src.Lookup(part)
	if !ok {
		return composite{}, fmt.Errorf("tensor %s is missing", part)
	}
	es := s.DType.Size()
	if es == 0 || s.DType.Quantized() {
		return composite{}, fmt.Errorf("tensor %s is %s: its columns are reordered element by element, which needs a float type", part, s.DType)
	}
	if !slices.Equal(s.Shape, shape) || len(shape) != 2 || len(s.Data) != es*shapeLen(shape) {
		return composite{}, fmt.Errorf("tensor %s has shape %v (%d bytes of %s), want %v", part, s.Shape, len(s.Data), s.DType, shape)
	}
	return composite{
		name: part, parts: []string{part}, dtype: s.DType, shape: shape,
		build: func() []byte {
			s, _ := src.Lookup(part)
			data := make([]byte, 0, len(s.Data))
			for r := range shape[0] {
				row := s.Data[r*shape[1]*es:]
				for _, c := range cols {
					data = append(data, row[c*es:(c+1)*es]...)
				}
			}
			return data
		},
	}, nil
}

// ggufLinearConfig reads the linear-attention keys and marks which layers
// are recurrent.
func ggufLinearConfig(c *Config, k *ggufKeys) error {
	c.LinearConvKernelDim = k.need("ssm.conv_kernel")
	c.LinearKeyHeadDim = k.need("ssm.state_size")
	c.LinearNumKeyHeads = k.need("ssm.group_count")
	c.LinearNumValueHeads = k.need("ssm.time_step_rank")
	inner := k.need("ssm.inner_size")
	if k.err != nil {
		return k.err
	}
	if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
		return fmt.Errorf("key %s.ssm.time_step_rank: %d value heads are not a multiple of %d key heads (ssm.group_count)", k.arch, c.LinearNumValueHeads, c.LinearNumKeyHeads)
	}
	if inner%c.LinearNumValueHeads != 0 {
		return fmt.Errorf("key %s.ssm.inner_size: %d channels are not a multiple of %d value heads (ssm.time_step_rank)", k.arch, inner, c.LinearNumValueHeads)
	}
	c.LinearValueHeadDim = inner / c.LinearNumValueHeads
	c.LinearTiledHeads = k.arch != "qwen3next"
	n := c.NumHiddenLayers
	recurrent := make([]bool, n)
	key := k.arch + ".attention.recurrent_layers"
	if v, ok := k.f.Value(key); ok {
		bs, ok := gguf.ArrayOf[bool](v)
		if !ok || len(bs) != n {
			return fmt.Errorf("key %s: want %d bools, got %s", key, n, v.Type())
		}
		copy(recurrent, bs)
	} else {
		interval := 4
		if v, ok := k.uint("full_attention_interval"); ok {
			if v == 0 {
				return fmt.Errorf("key %s.full_attention_interval is 0", k.arch)
			}
			interval = v
		}
		for i := range recurrent {
			recurrent[i] = (i+1)%interval != 0
		}
	}
	c.FullAttentionInterval = 0
	for i, r := range recurrent {
		c.LayerTypes[i] = FullAttention
		if r {
			c.LayerTypes[i] = "linear_attention"
		}
	}
	return k.err
}

// linearMetadata writes the linear-attention keys and which layers attend.
func (l *GGUFLayout) linearMetadata(u32 func(string, int)) error {
	c := l.cfg
	if err := checkLinear(c); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	if c.LinearKeyHeadDim != c.LinearValueHeadDim {
		l.Warnings = append(l.Warnings, fmt.Sprintf("linear_key_head_dim %d ≠ linear_value_head_dim %d: llama.cpp sizes both from ssm.state_size and will not load the file", c.LinearKeyHeadDim, c.LinearValueHeadDim))
	}
	u32("ssm.conv_kernel", c.LinearConvKernelDim)
	u32("ssm.state_size", c.LinearKeyHeadDim)
	u32("ssm.group_count", c.LinearNumKeyHeads)
	u32("ssm.time_step_rank", c.LinearNumValueHeads)
	u32("ssm.inner_size", c.LinearValueHeadDim*c.LinearNumValueHeads)
	recurrent := make([]bool, c.NumHiddenLayers)
	for i := range recurrent {
		switch t := c.LayerType(i); t {
		case "linear_attention":
			recurrent[i] = true
		case FullAttention:
		default:
			return fmt.Errorf("%s: layer %d is %q; want linear_attention or full_attention", c.ModelType, i, t)
		}
	}
	interval := cmp.Or(c.FullAttentionInterval, 4)
	follows := func(n int) bool {
		for i, r := range recurrent {
			if r != ((i+1)%n != 0) {
				return false
			}
		}
		return true
	}
	if !follows(interval) {
		interval = 0
		for n := 1; n <= c.NumHiddenLayers+1 && interval == 0; n++ {
			if follows(n) {
				interval = n
			}
		}
	}
	if interval > 0 {
		u32("full_attention_interval", interval)
	} else {
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".attention.recurrent_layers", Value: gguf.Array(recurrent)})
	}
	if l.Arch != "qwen3next" {
		sections := []int32{11, 11, 10, 0}
		if s := c.Rope(FullAttention).MRopeSection; len(s) > 0 {
			if len(s) > 4 {
				return fmt.Errorf("%s: mrope_section %v has more than 4 sections", c.ModelType, s)
			}
			sections = make([]int32, 4)
			for i, v := range s {
				sections[i] = int32(v)
			}
		}
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".rope.dimension_sections", Value: gguf.Array(sections)})
	}
	return nil
}

// linearMoEMetadata writes the expert keys of qwen3next and qwen35moe.
func (l *GGUFLayout) linearMoEMetadata(u32 func(string, int)) error {
	c := l.cfg
	for i := range c.NumHiddenLayers {
		if l.Arch == "qwen3next" && !c.SparseLayer(i) {
			return fmt.Errorf("%s: layer %d has a dense MLP (mlp_only_layers, decoder_sparse_step), which llama.cpp's %s cannot hold", c.ModelType, i, l.Arch)
		}
	}
	if c.SharedExpertIntermediateSize <= 0 {
		return fmt.Errorf("%s: llama.cpp's %s needs the shared expert (shared_expert_intermediate_size)", c.ModelType, l.Arch)
	}
	u32("expert_feed_forward_length", c.MoEIntermediateSize)
	u32("expert_shared_feed_forward_length", c.SharedExpertIntermediateSize)
	if l.Arch == "qwen3next" && !c.NormTopKProb {
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".expert_weights_norm", Value: gguf.Bool(false)})
		l.Warnings = append(l.Warnings, "norm_topk_prob is false: written as qwen3next.expert_weights_norm, which llama.cpp ignores (it renormalises the top-k weights)")
	}
	return nil
}
