package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Layer types as config.json spells them in layer_types.
const (
	FullAttention    = "full_attention"
	SlidingAttention = "sliding_attention"
)

// MaxLayers bounds num_hidden_layers, so that a corrupt config cannot make
// the loader allocate per-layer tables without limit.
const MaxLayers = 100_000

// Config is the typed view of a Hugging Face config.json that engines need.
//
// Multimodal wrappers that nest the language model under text_config (Gemma
// 3, Llama 4, Qwen-VL, ...) are read through it: the text model's keys
// override the wrapper's, ModelType is the text model's model_type and
// OuterModelType the wrapper's. Wrapper keys fill in what text_config
// lacks (so Gemma 3's wrapper-level eos_token_id [1, 106] is kept, where
// transformers' text config would fall back to its class default).
//
// Unless a field says otherwise, a zero value means the key was absent or
// null. Everything is also kept raw (Raw, Get) so architecture files can
// read family-specific keys without widening this struct.
type Config struct {
	ModelType      string   // model_type of the text model
	OuterModelType string   // model_type of the wrapper when text_config is nested, else ""
	Architectures  []string // as listed (the wrapper's, when nested)
	DType          string   // "dtype" or "torch_dtype", e.g. "bfloat16"

	VocabSize             int
	HiddenSize            int
	IntermediateSize      int   // the first layer's when intermediate_size is a per-layer list
	IntermediateSizes     []int // per layer, when intermediate_size is a list (Gemma 3n); else nil
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int // defaults to NumAttentionHeads
	HeadDim               int // defaults to HiddenSize / NumAttentionHeads
	MaxPositionEmbeddings int

	RMSNormEps   float64 // rms_norm_eps, norm_eps or rms_norm_epsilon
	LayerNormEps float64 // layer_norm_eps, layer_norm_epsilon or norm_epsilon
	HiddenAct    string  // hidden_activation when present (Gemma), else hidden_act

	TieWordEmbeddings bool // false when absent, except for Gemma families, whose default is true
	AttentionBias     bool
	MLPBias           bool

	// Sliding-window attention. SlidingWindow is the window in tokens (0
	// when absent, null, or switched off by use_sliding_window: false);
	// which layers use it is in LayerTypes.
	SlidingWindow    int
	UseSlidingWindow bool // use_sliding_window (Qwen 2); true when absent
	MaxWindowLayers  int

	// LayerTypes has one entry per layer: "full_attention",
	// "sliding_attention", "linear_attention", "conv", ... When config.json
	// has no layer_types it is derived from sliding_window_pattern,
	// use_sliding_window with max_window_layers, full_attn_idxs,
	// full_attention_interval, or a window applying to every layer, and is
	// otherwise all "full_attention".
	LayerTypes []string

	BOSTokenID  *int
	EOSTokenIDs []int // eos_token_id, which may be one id or a list
	PadTokenID  *int

	FinalLogitSoftcapping float64 // 0: no cap
	AttnLogitSoftcapping  float64 // 0: no cap

	PartialRotaryFactor float64 // top-level partial_rotary_factor (or rotary_pct); 1 when absent
	// NoRopeLayers is SmolLM 3's and Llama 4's no_rope_layers: one entry
	// per layer, nonzero where the layer DOES apply rope. Derived from
	// no_rope_layer_interval when only that is given. Use UsesRope.
	NoRopeLayers []int

	// Mixture of experts.
	NumExperts                   int // num_experts, num_local_experts or n_routed_experts
	NumExpertsPerTok             int // num_experts_per_tok, top_k_experts or moe_topk
	NumSharedExperts             int // n_shared_experts
	MoEIntermediateSize          int
	SharedExpertIntermediateSize int
	NormTopKProb                 bool
	// DecoderSparseStep and MLPOnlyLayers say which layers are sparse
	// (Qwen MoE): use SparseLayer.
	DecoderSparseStep int
	MLPOnlyLayers     []int

	// Parameters of one family, defined, read and checked in the
	// family's file (see registerParams). Every config reads them;
	// absent, they have no effect.
	FalconH1Params
	GemmaParams
	Gemma4Params
	GraniteParams
	GptOssParams
	LFM2Params
	LinearParams
	// State-space layers: Mamba2, and the SSM half of Falcon-H1 layers.
	SSM SSMParams

	// ConvKernel is the width of short causal convolutions: conv_kernel
	// or mamba_d_conv (the convolution before a scan), or conv_L_cache
	// (LFM2's convolution layers); 0 when absent.
	ConvKernel int

	// RopeParams holds the rotary embedding parameters shared by all layers;
	// RopeByLayerType those keyed by layer type when the config gives them
	// per type (Gemma 3, Gemma 4). Use the Rope method.
	RopeParams      RopeParams
	RopeByLayerType map[string]RopeParams

	Quantization *Quantization // nil when the weights are not quantized

	// Raw holds every key of the (merged) text config as written.
	Raw map[string]json.RawMessage

	perLayer map[int]layerOverride
}

// RopeParams are the rotary position embedding parameters of one layer
// type, normalised from either the transformers 5 rope_parameters or the
// older rope_theta and rope_scaling.
type RopeParams struct {
	// Type is "default", "linear", "dynamic", "yarn", "longrope", "llama3",
	// "proportional", ... ("mrope" is reported as "default" with
	// MRopeSection set; "su" as "longrope").
	Type  string
	Theta float64 // 10000 when given nowhere

	Factor                        float64 // 1 when absent
	LowFreqFactor, HighFreqFactor float64 // llama3
	// OriginalMaxPositionEmbeddings comes from the rope parameters or,
	// failing that, the top-level key of the same name; 0 when neither.
	OriginalMaxPositionEmbeddings int
	AttentionFactor               float64 // yarn, longrope; 0 when absent
	BetaFast, BetaSlow            float64 // yarn; 32 and 1 when absent
	MScale, MScaleAllDim          float64 // yarn (DeepSeek) mscale, mscale_all_dim; 0 when absent
	NoTruncate                    bool    // yarn "truncate": false (gpt-oss); the default truncates
	PartialRotaryFactor           float64 // fraction of head_dim rotated; 1 when absent
	ShortFactor, LongFactor       []float64
	MRopeSection                  []int
	MRopeInterleaved              bool

	// FreqFactors, when set, divides the frequency of each rotated pair
	// (dims/2 values): the per-pair factors GGUF files store as
	// rope_freqs.weight in place of Llama 3's rope parameters.
	FreqFactors []float64
	// Interleaved rotates adjacent pairs instead of the Hugging Face half
	// split. GGUF files of the llama family need it: llama.cpp's converter
	// permutes their Q and K rows so that rope pairs are adjacent.
	Interleaved bool
}

// QuantParams are the parameters of grouped integer quantization.
type QuantParams struct {
	GroupSize int
	Bits      int
	Mode      string // MLX "mode", e.g. "affine" or "mxfp4"; "" when absent
}

// Quantization describes quantized weights: MLX's "quantization" block
// ({group_size, bits} plus per-module overrides), or a Hugging Face
// "quantization_config".
type Quantization struct {
	QuantParams
	Method string // quantization_config's quant_method ("fp8", "gptq", "mxfp4", ...); "" for MLX
	// Modules holds MLX per-module overrides, keyed by module path. A nil
	// entry means the module is not quantized.
	Modules map[string]*QuantParams
}

// For returns the quantization of the named module and whether it is
// quantized at all.
func (q *Quantization) For(module string) (QuantParams, bool) {
	if q == nil {
		return QuantParams{}, false
	}
	if p, ok := q.Modules[module]; ok {
		if p == nil {
			return QuantParams{}, false
		}
		return *p, true
	}
	return q.QuantParams, true
}

// layerOverride is one entry of per_layer_config.
type layerOverride struct {
	headDim, kvHeads, intermediate int
	raw                            map[string]json.RawMessage
}

// LoadConfig reads dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// subConfigKeys are the wrapper keys that are not merged into the text
// config.
var subConfigKeys = []string{"text_config", "vision_config", "audio_config", "model_type"}

// ParseConfig parses the contents of a config.json. Errors name the key
// that is missing or wrong.
func ParseConfig(data []byte) (*Config, error) {
	top, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &Config{}
	outer := &fields{raw: top}
	outer.str("model_type", &c.ModelType)

	merged := top
	if tc, ok := outer.get("text_config"); ok {
		inner, err := decodeObject(tc)
		if err != nil {
			return nil, fmt.Errorf("config: key \"text_config\": %w", err)
		}
		merged = make(map[string]json.RawMessage, len(top)+len(inner))
		for k, v := range top {
			if !slices.Contains(subConfigKeys, k) {
				merged[k] = v
			}
		}
		for k, v := range inner {
			merged[k] = v
		}
		c.OuterModelType = c.ModelType
		(&fields{raw: inner, prefix: "text_config."}).str("model_type", &c.ModelType)
		if outer.err != nil {
			return nil, fmt.Errorf("config: %w", outer.err)
		}
	}
	if outer.err != nil {
		return nil, fmt.Errorf("config: %w", outer.err)
	}
	prefix := ""
	if c.OuterModelType != "" {
		prefix = "text_config."
	}
	applyDefaults(merged, c.ModelType)
	c.Raw = merged
	f := &fields{raw: merged, prefix: prefix}
	if err := c.read(f); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// applyDefaults adds the family's Defaults for the keys raw lacks.
func applyDefaults(raw map[string]json.RawMessage, modelType string) {
	a, ok := archByType[modelType]
	if !ok {
		return
	}
	for k, v := range a.Defaults {
		if _, ok := raw[k]; ok {
			continue
		}
		// The transformers 5 spellings supersede the old keys.
		if _, ok := raw["rope_parameters"]; ok && (k == "rope_theta" || k == "rope_local_base_freq") {
			continue
		}
		if _, ok := raw["layer_types"]; ok && k == "sliding_window_pattern" {
			continue
		}
		raw[k] = json.RawMessage(v)
	}
}

// read fills c from the merged text config: the keys most families share,
// then the parameters of each family (registerParams), their checks and
// derived values, per_layer_config, the rope parameters and the
// quantization. A new family adds no line here.
func (c *Config) read(f *fields) error {
	c.readShared(f)
	for _, p := range familyParams {
		p.read(c, f)
	}
	if f.err != nil {
		return f.err
	}
	if err := c.checkShared(f); err != nil {
		return err
	}
	for _, p := range familyParams {
		if p.check == nil {
			continue
		}
		if err := p.check(c, f.prefix); err != nil {
			return err
		}
	}
	for _, read := range []func(*fields) error{c.readPerLayer, c.readRope, c.readQuantization} {
		if err := read(f); err != nil {
			return err
		}
	}
	return f.err
}

// readShared reads the keys most families share.
func (c *Config) readShared(f *fields) {
	f.strs("architectures", &c.Architectures)
	if !f.str("dtype", &c.DType) {
		f.str("torch_dtype", &c.DType)
	}

	f.size("vocab_size", &c.VocabSize)
	f.size("hidden_size", &c.HiddenSize)
	if raw, ok := f.get("intermediate_size"); ok && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		if f.sizes("intermediate_size", &c.IntermediateSizes) && len(c.IntermediateSizes) > 0 {
			c.IntermediateSize = c.IntermediateSizes[0]
		}
	} else {
		f.size("intermediate_size", &c.IntermediateSize)
	}
	f.size("num_hidden_layers", &c.NumHiddenLayers)
	f.size("num_attention_heads", &c.NumAttentionHeads)
	f.size("num_key_value_heads", &c.NumKeyValueHeads)
	f.size("head_dim", &c.HeadDim)
	if !f.size("max_position_embeddings", &c.MaxPositionEmbeddings) {
		f.size("n_positions", &c.MaxPositionEmbeddings)
	}
	_ = f.float("rms_norm_eps", &c.RMSNormEps) || f.float("norm_eps", &c.RMSNormEps) || f.float("rms_norm_epsilon", &c.RMSNormEps)
	_ = f.float("layer_norm_eps", &c.LayerNormEps) || f.float("layer_norm_epsilon", &c.LayerNormEps) || f.float("norm_epsilon", &c.LayerNormEps)
	if !f.str("hidden_activation", &c.HiddenAct) {
		f.str("hidden_act", &c.HiddenAct)
	}
	f.boolean("tie_word_embeddings", &c.TieWordEmbeddings)
	f.boolean("attention_bias", &c.AttentionBias)
	f.boolean("mlp_bias", &c.MLPBias)

	f.size("sliding_window", &c.SlidingWindow)
	c.UseSlidingWindow = true
	if f.boolean("use_sliding_window", &c.UseSlidingWindow) && !c.UseSlidingWindow {
		c.SlidingWindow = 0 // as transformers does: the window is off
	}
	f.size("max_window_layers", &c.MaxWindowLayers)
	f.strs("layer_types", &c.LayerTypes)

	c.BOSTokenID = f.optInt("bos_token_id")
	c.EOSTokenIDs = f.intOrInts("eos_token_id")
	c.PadTokenID = f.optInt("pad_token_id")

	f.float("final_logit_softcapping", &c.FinalLogitSoftcapping)
	f.float("attn_logit_softcapping", &c.AttnLogitSoftcapping)
	c.PartialRotaryFactor = 1
	_ = f.float("partial_rotary_factor", &c.PartialRotaryFactor) || f.float("rotary_pct", &c.PartialRotaryFactor)
	f.ints("no_rope_layers", &c.NoRopeLayers)

	_ = f.size("num_experts", &c.NumExperts) || f.size("num_local_experts", &c.NumExperts) || f.size("n_routed_experts", &c.NumExperts)
	_ = f.size("num_experts_per_tok", &c.NumExpertsPerTok) || f.size("top_k_experts", &c.NumExpertsPerTok) || f.size("moe_topk", &c.NumExpertsPerTok) || f.size("experts_per_token", &c.NumExpertsPerTok)
	f.size("n_shared_experts", &c.NumSharedExperts)
	f.size("moe_intermediate_size", &c.MoEIntermediateSize)
	f.size("shared_expert_intermediate_size", &c.SharedExpertIntermediateSize)
	f.boolean("norm_topk_prob", &c.NormTopKProb)
	f.size("decoder_sparse_step", &c.DecoderSparseStep)
	f.ints("mlp_only_layers", &c.MLPOnlyLayers)
	_ = f.size("conv_kernel", &c.ConvKernel) || f.size("mamba_d_conv", &c.ConvKernel) || f.size("conv_L_cache", &c.ConvKernel)
}

// checkShared checks the required and shared keys and fills in their
// defaults and derived values (head_dim, layer_types, no_rope_layers).
func (c *Config) checkShared(f *fields) error {
	for _, k := range []struct {
		key string
		v   int
	}{{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumHiddenLayers}} {
		if k.v <= 0 {
			if _, ok := f.get(k.key); ok {
				return fmt.Errorf("key %q: must be positive, got %d", f.prefix+k.key, k.v)
			}
			return fmt.Errorf("missing required key %q", f.prefix+k.key)
		}
	}
	if c.NumHiddenLayers > MaxLayers {
		return fmt.Errorf("key %q: %d layers is more than the %d supported", f.prefix+"num_hidden_layers", c.NumHiddenLayers, MaxLayers)
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.NumAttentionHeads > 0 && c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("key %q: %d attention heads are not a multiple of %d key/value heads", f.prefix+"num_key_value_heads", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("key %q absent, and hidden_size %d is not a multiple of num_attention_heads %d", f.prefix+"head_dim", c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	n := c.NumHiddenLayers
	if c.IntermediateSizes != nil && len(c.IntermediateSizes) != n {
		return fmt.Errorf("key %q: %d entries for %d layers", f.prefix+"intermediate_size", len(c.IntermediateSizes), n)
	}
	if c.LayerTypes == nil {
		var err error
		if c.LayerTypes, err = deriveLayerTypes(c, f); err != nil {
			return err
		}
	}
	if len(c.LayerTypes) != n {
		return fmt.Errorf("key %q: %d entries for %d layers", f.prefix+"layer_types", len(c.LayerTypes), n)
	}
	if err := c.checkRanges(f); err != nil {
		return err
	}
	if c.NoRopeLayers == nil {
		var interval int
		if f.size("no_rope_layer_interval", &interval) && interval > 0 {
			c.NoRopeLayers = make([]int, n)
			for i := range n {
				if (i+1)%interval != 0 {
					c.NoRopeLayers[i] = 1
				}
			}
		}
	} else if len(c.NoRopeLayers) != n {
		return fmt.Errorf("key %q: %d entries for %d layers", f.prefix+"no_rope_layers", len(c.NoRopeLayers), n)
	}
	if c.NumExperts > 0 && c.NumExpertsPerTok > c.NumExperts {
		return fmt.Errorf("key %q: %d experts per token of %d experts", f.prefix+"num_experts_per_tok", c.NumExpertsPerTok, c.NumExperts)
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 || l >= n {
			return fmt.Errorf("key %q: layer %d out of range [0, %d)", f.prefix+"mlp_only_layers", l, n)
		}
	}
	return nil
}

// normEpsKeys are the spellings of the normalisation epsilons.
var normEpsKeys = []string{"rms_norm_eps", "norm_eps", "rms_norm_epsilon", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"}

// checkRanges refuses values no model can have: a normalisation epsilon
// that is not a positive float32, a special token id outside the
// vocabulary, and a head count or head size given as 0.
func (c *Config) checkRanges(f *fields) error {
	for _, key := range normEpsKeys {
		var v float64
		if !f.float(key, &v) {
			continue
		}
		if err := checkEps(v); err != nil {
			return fmt.Errorf("key %q: %w", f.prefix+key, err)
		}
	}
	ids := []struct {
		key string
		id  *int
	}{{"bos_token_id", c.BOSTokenID}, {"pad_token_id", c.PadTokenID}}
	for i := range c.EOSTokenIDs {
		ids = append(ids, struct {
			key string
			id  *int
		}{"eos_token_id", &c.EOSTokenIDs[i]})
	}
	for _, t := range ids {
		if t.id != nil && *t.id >= c.VocabSize {
			return fmt.Errorf("key %q: token id %d is outside the vocabulary (vocab_size %d)", f.prefix+t.key, *t.id, c.VocabSize)
		}
	}
	for _, key := range []string{"num_attention_heads", "num_key_value_heads", "head_dim"} {
		var v int
		if f.size(key, &v) && v == 0 {
			return fmt.Errorf("key %q: must be positive, got 0", f.prefix+key)
		}
	}
	if c.NumKeyValueHeads > c.NumAttentionHeads {
		return fmt.Errorf("key %q: %d key/value heads for %d attention heads", f.prefix+"num_key_value_heads", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	return nil
}

// checkEps checks a normalisation epsilon: positive, and neither 0 nor
// infinite once rounded to the float32 the kernels use.
func checkEps(v float64) error {
	// A value read from a float32 (GGUF) prints as its float32 self.
	bits := 64
	if float64(float32(v)) == v {
		bits = 32
	}
	s := strconv.FormatFloat(v, 'g', -1, bits)
	switch {
	case !(v > 0):
		return fmt.Errorf("must be positive, got %s", s)
	case float32(v) == 0 || math.IsInf(float64(float32(v)), 0):
		return fmt.Errorf("%s is out of float32 range", s)
	}
	return nil
}

// deriveLayerTypes builds layer_types for configs that predate it.
func deriveLayerTypes(c *Config, f *fields) ([]string, error) {
	n := c.NumHiddenLayers
	types := make([]string, n)
	fill := func(pick func(i int) string) []string {
		for i := range types {
			types[i] = pick(i)
		}
		return types
	}
	var pattern, interval int
	var fullIdxs []int
	switch {
	case (f.size("sliding_window_pattern", &pattern) || f.size("_sliding_window_pattern", &pattern)) && pattern > 0 && c.SlidingWindow > 0:
		// Gemma 2 and 3: every pattern-th layer is global.
		return fill(func(i int) string {
			if (i+1)%pattern == 0 {
				return FullAttention
			}
			return SlidingAttention
		}), nil
	case f.has("use_sliding_window"):
		// Qwen 2: when enabled, layers from max_window_layers on slide.
		return fill(func(i int) string {
			if c.UseSlidingWindow && c.SlidingWindow > 0 && i >= c.MaxWindowLayers {
				return SlidingAttention
			}
			return FullAttention
		}), nil
	case f.ints("full_attn_idxs", &fullIdxs):
		// LFM2: the listed layers attend, the rest are short convolutions.
		return fill(func(i int) string {
			if slices.Contains(fullIdxs, i) {
				return FullAttention
			}
			return "conv"
		}), nil
	case f.size("full_attention_interval", &interval) && interval > 0:
		// Qwen3-Next: every interval-th layer is full attention.
		return fill(func(i int) string {
			if (i+1)%interval == 0 {
				return FullAttention
			}
			return "linear_attention"
		}), nil
	case c.SlidingWindow > 0:
		// Mistral, Phi-3, Starcoder 2: one window for every layer.
		return fill(func(int) string { return SlidingAttention }), nil
	}
	return fill(func(int) string { return FullAttention }), f.err
}

func (c *Config) readPerLayer(f *fields) error {
	raw, ok := f.get("per_layer_config")
	if !ok {
		return nil
	}
	key := f.prefix + "per_layer_config"
	m, err := decodeObject(raw)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	c.perLayer = make(map[int]layerOverride, len(m))
	for k, v := range m {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= c.NumHiddenLayers {
			return fmt.Errorf("key %q: %q is not a layer index in [0, %d)", key, k, c.NumHiddenLayers)
		}
		obj, err := decodeObject(v)
		if err != nil {
			return fmt.Errorf("key %q: layer %s: %w", key, k, err)
		}
		lf := &fields{raw: obj, prefix: key + "." + k + "."}
		o := layerOverride{raw: obj}
		lf.size("head_dim", &o.headDim)
		lf.size("num_key_value_heads", &o.kvHeads)
		lf.size("intermediate_size", &o.intermediate)
		if lf.err != nil {
			return lf.err
		}
		c.perLayer[i] = o
	}
	return nil
}

func (c *Config) readRope(f *fields) error {
	// Fallbacks from the top level.
	base := RopeParams{Type: "default", Theta: 10000, Factor: 1, PartialRotaryFactor: c.PartialRotaryFactor}
	f.float("rope_theta", &base.Theta)
	f.size("original_max_position_embeddings", &base.OriginalMaxPositionEmbeddings)
	if f.err != nil {
		return f.err
	}
	if err := base.validate(f.prefix); err != nil {
		return err
	}

	if raw, ok := f.get("rope_parameters"); ok {
		key := f.prefix + "rope_parameters"
		obj, err := decodeObject(raw)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		if isRopeObject(obj) {
			c.RopeParams, err = parseRope(obj, key+".", base)
			return err
		}
		// Keyed by layer type.
		c.RopeByLayerType = make(map[string]RopeParams, len(obj))
		for lt, v := range obj {
			sub, err := decodeObject(v)
			if err != nil {
				return fmt.Errorf("key %q: %w", key+"."+lt, err)
			}
			if c.RopeByLayerType[lt], err = parseRope(sub, key+"."+lt+".", base); err != nil {
				return err
			}
		}
		c.RopeParams = base
		if p, ok := c.RopeByLayerType[FullAttention]; ok {
			c.RopeParams = p
		}
		return nil
	}

	// The older form: rope_theta plus an optional rope_scaling.
	p := base
	if raw, ok := f.get("rope_scaling"); ok {
		key := f.prefix + "rope_scaling"
		obj, err := decodeObject(raw)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		if p, err = parseRope(obj, key+".", base); err != nil {
			return err
		}
	}
	c.RopeParams = p
	var local float64
	if f.float("rope_local_base_freq", &local) {
		// Gemma 3 (and 3n): sliding layers use their own base and no
		// scaling; the scaling applies to the global layers only.
		sliding := base
		sliding.Theta = local
		c.RopeByLayerType = map[string]RopeParams{FullAttention: p, SlidingAttention: sliding}
	}
	return f.err
}

// isRopeObject reports whether a rope_parameters object describes one set
// of parameters rather than a map from layer type to parameters.
func isRopeObject(obj map[string]json.RawMessage) bool {
	for _, k := range []string{"rope_type", "type", "rope_theta"} {
		if _, ok := obj[k]; ok {
			return true
		}
	}
	for _, v := range obj {
		if !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
			return true
		}
	}
	return len(obj) == 0
}

func parseRope(obj map[string]json.RawMessage, prefix string, base RopeParams) (RopeParams, error) {
	f := &fields{raw: obj, prefix: prefix}
	p := base
	if !f.str("rope_type", &p.Type) {
		f.str("type", &p.Type)
	}
	switch p.Type {
	case "", "mrope":
		p.Type = "default"
	case "su":
		p.Type = "longrope"
	}
	f.float("rope_theta", &p.Theta)
	f.float("factor", &p.Factor)
	f.float("low_freq_factor", &p.LowFreqFactor)
	f.float("high_freq_factor", &p.HighFreqFactor)
	f.size("original_max_position_embeddings", &p.OriginalMaxPositionEmbeddings)
	f.float("attention_factor", &p.AttentionFactor)
	if p.Type == "yarn" {
		p.BetaFast, p.BetaSlow = 32, 1
	}
	f.float("beta_fast", &p.BetaFast)
	f.float("beta_slow", &p.BetaSlow)
	f.float("mscale", &p.MScale)
	f.float("mscale_all_dim", &p.MScaleAllDim)
	truncate := true
	f.boolean("truncate", &truncate)
	p.NoTruncate = !truncate
	f.float("partial_rotary_factor", &p.PartialRotaryFactor)
	f.floats("short_factor", &p.ShortFactor)
	f.floats("long_factor", &p.LongFactor)
	f.ints("mrope_section", &p.MRopeSection)
	f.boolean("mrope_interleaved", &p.MRopeInterleaved)
	if f.err != nil {
		return p, f.err
	}
	return p, p.validate(prefix)
}

// validate rejects parameters no rope can be built from.
func (p RopeParams) validate(prefix string) error {
	switch {
	case !(p.Theta > 0) || math.IsInf(p.Theta, 0):
		return fmt.Errorf("key %q: rope_theta %g is not a positive number", prefix+"rope_theta", p.Theta)
	case !(p.PartialRotaryFactor > 0 && p.PartialRotaryFactor <= 1):
		return fmt.Errorf("key %q: %g is outside (0, 1]", prefix+"partial_rotary_factor", p.PartialRotaryFactor)
	case !(p.Factor > 0) || math.IsInf(p.Factor, 0):
		return fmt.Errorf("key %q: %g is not a positive number", prefix+"factor", p.Factor)
	}
	return nil
}

func (c *Config) readQuantization(f *fields) error {
	key := "quantization"
	raw, ok := f.get(key)
	if !ok {
		if raw, ok = f.get("quantization_config"); !ok {
			return nil
		}
		key = "quantization_config"
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return fmt.Errorf("key %q: %w", f.prefix+key, err)
	}
	q := &Quantization{}
	qf := &fields{raw: obj, prefix: f.prefix + key + "."}
	qf.size("group_size", &q.GroupSize)
	qf.size("bits", &q.Bits)
	qf.str("mode", &q.Mode)
	qf.str("quant_method", &q.Method)
	// MLX lists per-module overrides beside the defaults: an object of
	// parameters, or false for a module left unquantized.
	for k, v := range obj {
		v = bytes.TrimSpace(v)
		if q.Method != "" || len(v) == 0 {
			continue
		}
		switch v[0] {
		case '{':
			m, err := decodeObject(v)
			if err != nil {
				return fmt.Errorf("key %q: %w", qf.prefix+k, err)
			}
			mf := &fields{raw: m, prefix: qf.prefix + k + "."}
			var p QuantParams
			if !mf.size("group_size", &p.GroupSize) {
				p.GroupSize = q.GroupSize
			}
			if !mf.size("bits", &p.Bits) {
				p.Bits = q.Bits
			}
			if !mf.str("mode", &p.Mode) {
				p.Mode = q.Mode
			}
			if mf.err != nil {
				return mf.err
			}
			if q.Modules == nil {
				q.Modules = make(map[string]*QuantParams)
			}
			q.Modules[k] = &p
		case 'f':
			if q.Modules == nil {
				q.Modules = make(map[string]*QuantParams)
			}
			q.Modules[k] = nil
		}
	}
	if qf.err != nil {
		return qf.err
	}
	c.Quantization = q
	return nil
}

// Rope returns the rotary embedding parameters for layers of the given type
// ("full_attention", "sliding_attention", ...): the per-type parameters
// when the config has them, else the shared ones.
func (c *Config) Rope(layerType string) RopeParams {
	if p, ok := c.RopeByLayerType[layerType]; ok {
		return p
	}
	return c.RopeParams
}

// LayerType returns the type of layer i, "full_attention" when unknown.
func (c *Config) LayerType(i int) string {
	if i >= 0 && i < len(c.LayerTypes) {
		return c.LayerTypes[i]
	}
	return FullAttention
}

// HeadDimFor returns the attention head size of layer i, honouring
// per_layer_config, then global_head_dim for full-attention layers.
func (c *Config) HeadDimFor(i int) int {
	if o, ok := c.perLayer[i]; ok && o.headDim > 0 {
		return o.headDim
	}
	if c.GlobalHeadDim > 0 && c.LayerType(i) == FullAttention {
		return c.GlobalHeadDim
	}
	return c.HeadDim
}

// KVHeadsFor returns the number of key/value heads of layer i, honouring
// per_layer_config.
func (c *Config) KVHeadsFor(i int) int {
	if o, ok := c.perLayer[i]; ok && o.kvHeads > 0 {
		return o.kvHeads
	}
	return c.NumKeyValueHeads
}

// IntermediateSizeFor returns the MLP width of layer i, honouring
// per_layer_config and a per-layer intermediate_size list.
func (c *Config) IntermediateSizeFor(i int) int {
	if o, ok := c.perLayer[i]; ok && o.intermediate > 0 {
		return o.intermediate
	}
	if i >= 0 && i < len(c.IntermediateSizes) {
		return c.IntermediateSizes[i]
	}
	return c.IntermediateSize
}

// SparseLayer reports whether layer i's feed-forward block is a mixture of
// experts: the model has experts, the layer is not in mlp_only_layers, and
// it is a multiple of decoder_sparse_step (counting from 1; a step of 0 or
// 1 makes every layer sparse). Families with a switch of their own (Gemma
// 4's enable_moe_block) check it as well.
func (c *Config) SparseLayer(i int) bool {
	if c.NumExperts == 0 || i < 0 || i >= c.NumHiddenLayers || slices.Contains(c.MLPOnlyLayers, i) {
		return false
	}
	return c.DecoderSparseStep <= 1 || (i+1)%c.DecoderSparseStep == 0
}

// UsesRope reports whether layer i applies rotary embeddings (false only
// for layers that no_rope_layers marks 0).
func (c *Config) UsesRope(i int) bool {
	if i >= 0 && i < len(c.NoRopeLayers) {
		return c.NoRopeLayers[i] != 0
	}
	return true
}

// NormEps returns RMSNormEps, or LayerNormEps when that is all the config
// gives.
func (c *Config) NormEps() float64 {
	if c.RMSNormEps != 0 {
		return c.RMSNormEps
	}
	return c.LayerNormEps
}

// Get decodes the raw value of key into dst. It reports false, with no
// error, when the key is absent or null, and an error naming the key when
// the value does not fit dst.
func (c *Config) Get(key string, dst any) (bool, error) {
	return getRaw(c.Raw, key, dst)
}

// LayerGet is Get for the per_layer_config entry of layer i.
func (c *Config) LayerGet(i int, key string, dst any) (bool, error) {
	o, ok := c.perLayer[i]
	if !ok {
		return false, nil
	}
	ok, err := getRaw(o.raw, key, dst)
	if err != nil {
		return false, fmt.Errorf("per_layer_config.%d: %w", i, err)
	}
	return ok, nil
}

func getRaw(m map[string]json.RawMessage, key string, dst any) (bool, error) {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return false, nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return false, fmt.Errorf("config: key %q: %w", key, err)
	}
	return true, nil
}

// GenerationConfig is the typed view of generation_config.json. Nil
// pointers and empty slices mean the key was absent.
type GenerationConfig struct {
	BOSTokenID        *int
	EOSTokenIDs       []int
	PadTokenID        *int
	DoSample          *bool
	Temperature       *float64
	TopK              *int
	TopP              *float64
	MinP              *float64
	RepetitionPenalty *float64
	MaxNewTokens      *int
	MaxLength         *int

	Raw map[string]json.RawMessage
}

// LoadGenerationConfig reads dir/generation_config.json. A missing file
// gives the zero GenerationConfig, not an error.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// ParseGenerationConfig parses the contents of a generation_config.json.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	raw, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	f := &fields{raw: raw}
	g := &GenerationConfig{Raw: raw}
	g.BOSTokenID = f.optInt("bos_token_id")
	g.EOSTokenIDs = f.intOrInts("eos_token_id")
	g.PadTokenID = f.optInt("pad_token_id")
	var b bool
	if f.boolean("do_sample", &b) {
		g.DoSample = &b
	}
	optFloat := func(key string) *float64 {
		var v float64
		if f.float(key, &v) {
			return &v
		}
		return nil
	}
	optSize := func(key string) *int {
		var v int
		if f.size(key, &v) {
			return &v
		}
		return nil
	}
	g.Temperature = optFloat("temperature")
	g.TopK = optSize("top_k")
	g.TopP = optFloat("top_p")
	g.MinP = optFloat("min_p")
	g.RepetitionPenalty = optFloat("repetition_penalty")
	g.MaxNewTokens = optSize("max_new_tokens")
	g.MaxLength = optSize("max_length")
	if f.err != nil {
		return nil, fmt.Errorf("generation config: %w", f.err)
	}
	return g, nil
}

// fields reads typed values from a JSON object, remembering the first
// error. Absent keys and nulls read as absent. Each reader returns whether
// it stored a value.
type fields struct {
	raw    map[string]json.RawMessage
	prefix string // for error messages, e.g. "text_config."
	err    error
}

func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return nil, fmt.Errorf("want a JSON object, got %s", te.Value)
		}
		return nil, err
	}
	if m == nil {
		return nil, errors.New("want a JSON object, got null")
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func (f *fields) has(key string) bool {
	_, ok := f.get(key)
	return ok
}

// get returns the raw value of key, or false when it is absent or null.
func (f *fields) get(key string) (json.RawMessage, bool) {
	raw, ok := f.raw[key]
	if !ok || isNull(raw) {
		return nil, false
	}
	return raw, true
}

func (f *fields) fail(key, want string, raw json.RawMessage) {
	if f.err == nil {
		got := string(bytes.TrimSpace(raw))
		if len(got) > 40 {
			got = got[:40] + "..."
		}
		f.err = fmt.Errorf("key %q: want %s, got %s", f.prefix+key, want, got)
	}
}

// parseInt parses raw as an integer, accepting integral floats such as 1e5.
func parseInt(raw json.RawMessage) (int, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false // json.Number would accept a quoted number
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil && int64(int(i)) == i {
		return int(i), true
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil || v != math.Trunc(v) || math.Abs(v) > 1<<53 {
		return 0, false
	}
	return int(v), true
}

// size reads a non-negative integer.
func (f *fields) size(key string, dst *int) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	v, ok := parseInt(raw)
	if !ok || v < 0 {
		f.fail(key, "a non-negative integer", raw)
		return false
	}
	*dst = v
	return true
}

// optInt reads a token id; negative ids (some configs use -1) mean none.
func (f *fields) optInt(key string) *int {
	raw, ok := f.get(key)
	if !ok {
		return nil
	}
	v, ok := parseInt(raw)
	if !ok {
		f.fail(key, "an integer token id", raw)
		return nil
	}
	if v < 0 {
		return nil
	}
	return &v
}

// intOrInts reads one token id or a list of them, dropping negative ids.
func (f *fields) intOrInts(key string) []int {
	raw, ok := f.get(key)
	if !ok {
		return nil
	}
	if v, ok := parseInt(raw); ok {
		if v < 0 {
			return nil
		}
		return []int{v}
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		f.fail(key, "a token id or a list of them", raw)
		return nil
	}
	var ids []int
	for _, r := range list {
		v, ok := parseInt(r)
		if !ok {
			f.fail(key, "a token id or a list of them", raw)
			return nil
		}
		if v >= 0 && !slices.Contains(ids, v) {
			ids = append(ids, v)
		}
	}
	return ids
}

func (f *fields) float(key string, dst *float64) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		f.fail(key, "a number", raw)
		return false
	}
	*dst = v
	return true
}

func (f *fields) boolean(key string, dst *bool) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		f.fail(key, "true or false", raw)
		return false
	}
	return true
}

func (f *fields) str(key string, dst *string) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		f.fail(key, "a string", raw)
		return false
	}
	return true
}

func (f *fields) strs(key string, dst *[]string) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	var v []string
	if err := json.Unmarshal(raw, &v); err != nil {
		f.fail(key, "a list of strings", raw)
		return false
	}
	if v == nil {
		v = []string{}
	}
	*dst = v
	return true
}

func (f *fields) ints(key string, dst *[]int) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		f.fail(key, "a list of integers", raw)
		return false
	}
	v := make([]int, len(list))
	for i, r := range list {
		n, ok := parseInt(r)
		if !ok {
			f.fail(key, "a list of integers", raw)
			return false
		}
		v[i] = n
	}
	*dst = v
	return true
}

// sizes reads a list of non-negative integers.
func (f *fields) sizes(key string, dst *[]int) bool {
	var v []int
	if !f.ints(key, &v) {
		return false
	}
	for _, n := range v {
		if n < 0 {
			f.fail(key, "a list of non-negative integers", f.raw[key])
			return false
		}
	}
	*dst = v
	return true
}

// extFloats reads a list of numbers that may hold non-finite values as
// transformers 5 writes them: {"__float__": "Infinity"}, "-Infinity" or
// "NaN".
func (f *fields) extFloats(key string) ([]float64, bool) {
	raw, ok := f.get(key)
	if !ok {
		return nil, false
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		f.fail(key, "a list of numbers", raw)
		return nil, false
	}
	v := make([]float64, len(list))
	for i, r := range list {
		if json.Unmarshal(r, &v[i]) == nil {
			continue
		}
		var ext struct {
			Float string `json:"__float__"`
		}
		if json.Unmarshal(r, &ext) != nil {
			f.fail(key, "a list of numbers", raw)
			return nil, false
		}
		switch ext.Float {
		case "Infinity", "inf":
			v[i] = math.Inf(1)
		case "-Infinity", "-inf":
			v[i] = math.Inf(-1)
		case "NaN", "nan":
			v[i] = math.NaN()
		default:
			f.fail(key, "a list of numbers", raw)
			return nil, false
		}
	}
	return v, true
}

func (f *fields) floats(key string, dst *[]float64) bool {
	raw, ok := f.get(key)
	if !ok {
		return false
	}
	var v []float64
	if err := json.Unmarshal(raw, &v); err != nil {
		f.fail(key, "a list of numbers", raw)
		return false
	}
	*dst = v
	return true
}

// String summarises the config for logs.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d layers, hidden %d, heads %d/%d×%d, vocab %d", c.ModelType, c.NumHiddenLayers, c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.VocabSize)
	if c.NumExperts > 0 {
		fmt.Fprintf(&b, ", %d experts (top %d)", c.NumExperts, c.NumExpertsPerTok)
	}
	return b.String()
}
