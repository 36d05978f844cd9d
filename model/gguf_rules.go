package model

import (
	"fmt"
	"github.com/lem-engine/lem/gguf"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Rules that several families' GGUF layouts share: the SSM mixer's tensors
// and keys (Mamba2, Falcon-H1, and the convolution kernels of LFM2 and the
// delta-rule hybrids), stacked experts and their keys (Qwen MoE, gpt-oss,
// the Qwen delta-rule hybrids), and the helpers that regroup a checkpoint's
// tensors into the ones a file stores.

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
			encode: negExp, decode: logNeg,
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

// ssmKeys are the Hugging Face keys a family's table maps to the ssm.*
// keys (Mamba2 and Falcon-H1 spell them differently); a name the table
// lacks is the GGUF key itself.
type ssmKeys struct{ conv, inner, state, heads, groups string }

// ggufSSMConfig reads the ssm.* keys.
func ggufSSMConfig(c *Config, k *ggufKeys, n ssmKeys) error {
	s := &c.SSM
	c.ConvKernel = k.need(n.conv)
	s.Inner = k.need(n.inner)
	s.StateSize = k.need(n.state)
	s.Heads = k.need(n.heads)
	s.Groups = 1
	if g, ok := k.uint(n.groups); ok && g > 0 {
		s.Groups = g
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
func (l *GGUFLayout) ssmMetadata(w *ggufWriter, n ssmKeys) error {
	c := l.cfg
	s := c.SSM
	if s.TimeStepMin != 0 || !math.IsInf(s.TimeStepMax, 1) {
		return fmt.Errorf("%s: time_step_limit [%g, %g] has no GGUF key (files are read with [0, ∞))", c.ModelType, s.TimeStepMin, s.TimeStepMax)
	}
	if s.Heads <= 0 || s.Heads*s.HeadDim != s.Inner {
		return fmt.Errorf("%s: %d SSM heads of %d do not make %d channels", c.ModelType, s.Heads, s.HeadDim, s.Inner)
	}
	w.u32(n.conv, c.ConvKernel)
	w.u32(n.inner, s.Inner)
	w.u32(n.state, s.StateSize)
	w.u32(n.heads, s.Heads)
	w.u32(n.groups, max(s.Groups, 1))
	return nil
}

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

var moeStackedLayer = map[string]string{
	"mlp.experts.gate_proj.weight": "ffn_gate_exps.weight",
	"mlp.experts.up_proj.weight":   "ffn_up_exps.weight",
	"mlp.experts.down_proj.weight": "ffn_down_exps.weight",
}

// negExp and logNeg convert A_log rows of SSM and delta-rule layers to
// the A = -exp(A_log) that GGUF files store, and back.
func negExp(row []float32, _ int) {
	for i, v := range row {
		row[i] = -float32(math.Exp(float64(v)))
	}
}

func logNeg(row []float32, _ int) {
	for i, v := range row {
		row[i] = float32(math.Log(-float64(v)))
	}
}

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

// ggufExperts reads the expert counts of the mixture-of-experts families
// and the experts' width, under ffKey; the family's read sets the rest and
// calls checkExpertFF.
func ggufExperts(c *Config, k *ggufKeys, ffKey string) (ff int, ok bool) {
	c.NumExperts = k.need("num_experts")
	c.NumExpertsPerTok = k.need("num_experts_per_tok")
	if k.err == nil && c.NumExpertsPerTok > c.NumExperts {
		k.fail(fmt.Errorf("key %s.expert_used_count: %d of %d experts", k.arch, c.NumExpertsPerTok, c.NumExperts))
	}
	return k.uint(ffKey)
}

// checkExpertFF fails when the file gives the experts no width.
func checkExpertFF(c *Config, k *ggufKeys) {
	if k.err == nil && (c.MoEIntermediateSize == 0 && c.IntermediateSize == 0) {
		k.fail(fmt.Errorf("key %s.expert_feed_forward_length is 0", k.arch))
	}
}

// ggufExpertNorm reads expert_weights_norm into NormTopKProb, true when
// absent (llama.cpp's default).
func ggufExpertNorm(c *Config, k *ggufKeys) {
	c.NormTopKProb = true
	if v, ok := k.f.Value(k.arch + ".expert_weights_norm"); ok {
		b, ok := v.Bool()
		if !ok {
			k.fail(fmt.Errorf("key %s.expert_weights_norm: want a bool, got %s", k.arch, v.Type()))
		}
		c.NormTopKProb = b
	}
}

// writeExpertNorm writes expert_weights_norm when the checkpoint does not
// renormalise the top-k weights, which llama.cpp's family always does.
func (l *GGUFLayout) writeExpertNorm() {
	if !l.cfg.NormTopKProb {
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".expert_weights_norm", Value: gguf.Bool(false)})
		l.Warnings = append(l.Warnings, fmt.Sprintf("norm_topk_prob is false: written as %s.expert_weights_norm, which llama.cpp ignores (it renormalises the top-k weights)", l.Arch))
	}
}

// checkAllSparse fails unless every layer is a mixture of experts.
func (l *GGUFLayout) checkAllSparse() error {
	c := l.cfg
	for i := range c.NumHiddenLayers {
		if !c.SparseLayer(i) {
			return fmt.Errorf("%s: layer %d has a dense MLP (mlp_only_layers, decoder_sparse_step), which llama.cpp's %s cannot hold", c.ModelType, i, l.Arch)
		}
	}
	return nil
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
