package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"lem/gguf"
)

// GGUF layout of Gemma 3n (text), as llama.cpp's converter (Gemma3NModel in
// conversion/gemma.py) writes it and src/models/gemma3n.cpp reads it, as
// architecture gemma3n.
//
//   - Norm weights are stored as they are (Gemma 3n scales by w, not 1+w).
//   - The per-layer inputs: embed_tokens_per_layer is per_layer_token_embd
//     (padded with zero rows to vocab_size), per_layer_model_projection
//     per_layer_model_proj, per_layer_projection_norm per_layer_proj_norm;
//     per layer, per_layer_input_gate is inp_gate, per_layer_projection
//     proj and post_per_layer_input_norm post_norm.
//   - AltUp: the k−1 altup_projections and altup_unembed_projections are
//     stacked into altup_proj and altup_unembd_proj [k−1, hidden, hidden];
//     per layer, altup.correction_coefs is altup_correct_coef,
//     correct_output_scale altup_correct_scale, prediction_coefs
//     altup_predict_coef, modality_router altup_router and router_norm
//     altup_router_norm. LAuReL: laurel.linear_left, linear_right and
//     post_laurel_norm are laurel_l, laurel_r and laurel_post_norm.
//   - Keys: altup.active_idx, altup.num_inputs,
//     embedding_length_per_layer_input, attention.shared_kv_layers,
//     attention.sliding_window_pattern (one bool per layer),
//     activation_sparsity_scale (per layer, the standard normal quantile of
//     activation_sparsity_pattern: −∞ for a dense layer), and
//     feed_forward_length as one value per layer when intermediate_size is
//     a list. rope.freq_base is the full-attention layers' base;
//     rope.freq_base_swa, which llama.cpp reads, the sliding layers'.
//
// What llama.cpp's gemma3n graph fixes rather than reads, and lem reads
// from the file: the LAuReL rank (from laurel_l's shape), where the
// KV-shared layers start (llama.cpp: layer 20, the published geometries),
// and which layers are sparse (llama.cpp: the first 10); ToGGUF warns when a
// checkpoint differs. altup_coef_clip has no key: the converter leaves the
// coefficients as they are and llama.cpp does not clip, so ToGGUF stores
// the correction coefficients clipped (as lem's reading of the checkpoint
// uses them), which changes nothing for weights within the clip.

var (
	gemma3nGlobal = map[string]string{
		"model.embed_tokens.weight":               "token_embd.weight",
		"model.norm.weight":                       "output_norm.weight",
		"lm_head.weight":                          "output.weight",
		"model.embed_tokens_per_layer.weight":     "per_layer_token_embd.weight",
		"model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
		"model.per_layer_projection_norm.weight":  "per_layer_proj_norm.weight",
		"model.altup_projections.weight":          "altup_proj.weight",
		"model.altup_unembed_projections.weight":  "altup_unembd_proj.weight",
	}
	gemma3nGGUFLayer = merge(gemmaLayer, map[string]string{
		"per_layer_input_gate.weight":      "inp_gate.weight",
		"per_layer_projection.weight":      "proj.weight",
		"post_per_layer_input_norm.weight": "post_norm.weight",
		"altup.correction_coefs.weight":    "altup_correct_coef.weight",
		"altup.correct_output_scale":       "altup_correct_scale.weight",
		"altup.prediction_coefs.weight":    "altup_predict_coef.weight",
		"altup.modality_router.weight":     "altup_router.weight",
		"altup.router_norm.weight":         "altup_router_norm.weight",
		"laurel.linear_left.weight":        "laurel_l.weight",
		"laurel.linear_right.weight":       "laurel_r.weight",
		"laurel.post_laurel_norm.weight":   "laurel_post_norm.weight",
	})
)

// gemma3nRules clips the AltUp correction coefficients as lem's reading of
// a checkpoint does (altup_coef_clip), the clip having no key.
func gemma3nRules(c *Config) map[string]ggufRule {
	var clip float64
	if _, err := c.Get("altup_coef_clip", &clip); err != nil || clip <= 0 {
		return nil
	}
	lim := float32(clip)
	return map[string]ggufRule{"altup.correction_coefs.weight": {
		encode: func(row []float32, _ int) {
			for i, v := range row {
				row[i] = min(max(v, -lim), lim)
			}
		},
	}}
}

// composeGemma3n stacks the AltUp projections and pads the per-layer
// embedding table to the vocabulary, as the converter does.
func composeGemma3n(c *Config, src Source, names []string) ([]composite, error) {
	var out []composite
	for _, p := range []string{"model.altup_projections.", "model.altup_unembed_projections."} {
		var parts []string
		for j := 0; ; j++ {
			n := p + strconv.Itoa(j) + ".weight"
			if _, ok := src.Lookup(n); !ok {
				break
			}
			parts = append(parts, n)
		}
		if len(parts) == 0 {
			continue
		}
		var first Stored
		for j, n := range parts {
			s, _ := src.Lookup(n)
			if j == 0 {
				first = s
			}
			if len(s.Shape) != 2 || s.DType != first.DType || len(s.Data) != len(first.Data) {
				return nil, fmt.Errorf("tensor %s is %s %v, %s is %s %v: the projections must agree to be stacked", n, s.DType, s.Shape, parts[0], first.DType, first.Shape)
			}
		}
		out = append(out, composite{
			name: p + "weight", parts: parts, dtype: first.DType,
			shape: []int{len(parts), first.Shape[0], first.Shape[1]},
			build: func() []byte {
				var data []byte
				for _, n := range parts {
					s, _ := src.Lookup(n)
					data = append(data, s.Data...)
				}
				return data
			},
		})
	}
	const table = "model.embed_tokens_per_layer.weight"
	if s, ok := src.Lookup(table); ok && len(s.Shape) == 2 && s.Shape[0] < c.VocabSize {
		if s.DType.Quantized() {
			return nil, fmt.Errorf("tensor %s is %s: padding it to the vocabulary needs a float type", table, s.DType)
		}
		rb := len(s.Data) / s.Shape[0]
		out = append(out, composite{
			name: table, parts: []string{table}, dtype: s.DType, shape: []int{c.VocabSize, s.Shape[1]},
			build: func() []byte {
				s, _ := src.Lookup(table)
				data := make([]byte, c.VocabSize*rb) // zero rows for the ids beyond the table
				copy(data, s.Data)
				return data
			},
		})
	}
	return out, nil
}

// gemma3nRaw are the config keys of Gemma 3n that only its loader reads
// (through Config.Get).
type gemma3nRaw struct {
	AltUpNumInputs    int       `json:"altup_num_inputs"`
	AltUpActiveIdx    int       `json:"altup_active_idx"`
	AltUpCorrectScale bool      `json:"altup_correct_scale"`
	LaurelRank        int       `json:"laurel_rank"`
	Sparsity          []float64 `json:"activation_sparsity_pattern"`
}

// ggufGemma3nConfig reads the keys and shapes of a gemma3n file.
func ggufGemma3nConfig(c *Config, k *ggufKeys, g *GGUF, ff []int) error {
	n := c.NumHiddenLayers
	r := gemma3nRaw{AltUpNumInputs: 4, AltUpCorrectScale: true}
	if v, ok := k.uint("altup.num_inputs"); ok {
		r.AltUpNumInputs = v
	}
	r.AltUpActiveIdx, _ = k.uint("altup.active_idx")
	c.HiddenSizePerLayerInput = k.need("embedding_length_per_layer_input")
	c.NumKVSharedLayers, _ = k.uint("attention.shared_kv_layers")
	if k.err != nil {
		return k.err
	}
	if c.NumKVSharedLayers >= n {
		return fmt.Errorf("key %s.attention.shared_kv_layers: %d of %d layers", k.arch, c.NumKVSharedLayers, n)
	}
	if t, ok := g.tensors["model.embed_tokens_per_layer.weight"]; ok && len(t.Dims) == 2 {
		c.VocabSizePerLayerInput = int(t.Dims[1])
	}
	if t, ok := g.tensors["model.layers.0.laurel.linear_left.weight"]; ok && len(t.Dims) == 2 {
		r.LaurelRank = int(t.Dims[1])
	}
	key := k.arch + ".activation_sparsity_scale"
	if v, ok := k.f.Value(key); ok {
		scales, ok := gguf.ArrayOf[float32](v)
		if !ok || len(scales) != n {
			return fmt.Errorf("key %s: want %d float32s, got %s", key, n, v.Type())
		}
		r.Sparsity = make([]float64, n)
		for i, s := range scales {
			// The fraction of a standard normal below s: 0 for −∞.
			r.Sparsity[i] = 0.5 * math.Erfc(-float64(s)/math.Sqrt2)
		}
	}
	if ff != nil {
		c.perLayer = map[int]layerOverride{}
		for i, v := range ff {
			if v != c.IntermediateSize {
				c.perLayer[i] = layerOverride{intermediate: v}
			}
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for key, v := range raw {
		c.Raw[key] = v
	}
	return nil
}

// gemma3nMetadata writes the keys of a gemma3n file.
func (l *GGUFLayout) gemma3nMetadata(u32 func(string, int), f32 func(string, float64)) error {
	c := l.cfg
	a := l.Arch + "."
	r := gemma3nRaw{AltUpNumInputs: 4, AltUpCorrectScale: true}
	for _, k := range []struct {
		key string
		dst any
	}{
		{"altup_num_inputs", &r.AltUpNumInputs}, {"altup_active_idx", &r.AltUpActiveIdx},
		{"altup_correct_scale", &r.AltUpCorrectScale}, {"activation_sparsity_pattern", &r.Sparsity},
	} {
		if _, err := c.Get(k.key, k.dst); err != nil {
			return err
		}
	}
	if !r.AltUpCorrectScale {
		return fmt.Errorf("%s: altup_correct_scale false: llama.cpp's gemma3n always scales the correction", c.ModelType)
	}
	if c.HiddenSizePerLayerInput <= 0 {
		return fmt.Errorf("%s: llama.cpp's gemma3n needs per-layer inputs (hidden_size_per_layer_input)", c.ModelType)
	}
	u32("altup.active_idx", r.AltUpActiveIdx)
	u32("altup.num_inputs", r.AltUpNumInputs)
	u32("embedding_length_per_layer_input", c.HiddenSizePerLayerInput)
	u32("attention.shared_kv_layers", c.NumKVSharedLayers)
	if first := c.NumHiddenLayers - c.NumKVSharedLayers; c.NumKVSharedLayers > 0 && first != 20 {
		l.Warnings = append(l.Warnings, fmt.Sprintf("KV-shared layers start at layer %d: llama.cpp's gemma3n starts them at layer 20 whatever attention.shared_kv_layers says", first))
	}
	if r.Sparsity != nil {
		if len(r.Sparsity) != c.NumHiddenLayers {
			return fmt.Errorf("%s: activation_sparsity_pattern has %d entries for %d layers", c.ModelType, len(r.Sparsity), c.NumHiddenLayers)
		}
		scales := make([]float32, len(r.Sparsity))
		llama := true
		for i, p := range r.Sparsity {
			if p < 0 || p >= 1 {
				return fmt.Errorf("%s: activation_sparsity_pattern[%d] = %g, want [0, 1)", c.ModelType, i, p)
			}
			scales[i] = float32(math.Sqrt2 * math.Erfinv(2*p-1))
			if (p > 0) != (i < 10) {
				llama = false
			}
		}
		l.KV = append(l.KV, gguf.KV{Key: a + "activation_sparsity_scale", Value: gguf.Array(scales)})
		if !llama {
			l.Warnings = append(l.Warnings, "activation_sparsity_pattern: llama.cpp's gemma3n makes exactly the first 10 layers sparse")
		}
	}
	var ffList []int
	if _, err := c.Get("intermediate_size", &ffList); err == nil && len(ffList) > 0 {
		if len(ffList) != c.NumHiddenLayers {
			return fmt.Errorf("%s: intermediate_size has %d entries for %d layers", c.ModelType, len(ffList), c.NumHiddenLayers)
		}
		ff := make([]uint32, len(ffList))
		for i, v := range ffList {
			ff[i] = uint32(v)
		}
		for i, kv := range l.KV {
			if kv.Key == a+"feed_forward_length" {
				l.KV[i].Value = gguf.Array(ff)
			}
		}
	}
	pattern := make([]bool, c.NumHiddenLayers)
	for i := range pattern {
		switch t := c.LayerType(i); t {
		case SlidingAttention:
			pattern[i] = true
		case FullAttention:
		default:
			return fmt.Errorf("%s: layer %d is %q", c.ModelType, i, t)
		}
	}
	if c.SlidingWindow > 0 {
		u32("attention.sliding_window", c.SlidingWindow)
	}
	l.KV = append(l.KV, gguf.KV{Key: a + "attention.sliding_window_pattern", Value: gguf.Array(pattern)})
	if local, ok := c.RopeByLayerType[SlidingAttention]; ok {
		f32("rope.freq_base_swa", local.Theta)
	}
	return nil
}
