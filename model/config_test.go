package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lem-engine/lem/internal/fixtures"
)

func ptr[T any](v T) *T { return &v }

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

const (
	full    = FullAttention
	sliding = SlidingAttention
	linear  = "linear_attention"
)

// defaultRope is what a plain rope_theta gives.
func defaultRope(theta float64) RopeParams {
	return RopeParams{Type: "default", Theta: theta, Factor: 1, PartialRotaryFactor: 1}
}

// check compares selected fields of a parsed config.
type check struct {
	modelType        string
	vocab, hidden    int
	intermediate     int
	layers           int
	heads, kvHeads   int
	headDim          int
	maxPos           int
	rmsEps, lnEps    float64
	act              string
	tie, attnBias    bool
	window           int
	layerTypes       []string
	bos              *int
	eos              []int
	pad              *int
	ropes            map[string]RopeParams // layer type -> params; "" for the shared ones
	headDims         map[int]int           // layer -> HeadDimFor
	experts, topK    int
	moeInter, shared int
	normTopK         bool
}

func (want check) verify(t *testing.T, c *Config) {
	t.Helper()
	ints := []struct {
		name      string
		got, want int
	}{
		{"VocabSize", c.VocabSize, want.vocab},
		{"HiddenSize", c.HiddenSize, want.hidden},
		{"IntermediateSize", c.IntermediateSize, want.intermediate},
		{"NumHiddenLayers", c.NumHiddenLayers, want.layers},
		{"NumAttentionHeads", c.NumAttentionHeads, want.heads},
		{"NumKeyValueHeads", c.NumKeyValueHeads, want.kvHeads},
		{"HeadDim", c.HeadDim, want.headDim},
		{"MaxPositionEmbeddings", c.MaxPositionEmbeddings, want.maxPos},
		{"SlidingWindow", c.SlidingWindow, want.window},
		{"NumExperts", c.NumExperts, want.experts},
		{"NumExpertsPerTok", c.NumExpertsPerTok, want.topK},
		{"MoEIntermediateSize", c.MoEIntermediateSize, want.moeInter},
		{"SharedExpertIntermediateSize", c.SharedExpertIntermediateSize, want.shared},
	}
	for _, v := range ints {
		if v.got != v.want {
			t.Errorf("%s = %d, want %d", v.name, v.got, v.want)
		}
	}
	if c.ModelType != want.modelType {
		t.Errorf("ModelType = %q, want %q", c.ModelType, want.modelType)
	}
	if c.RMSNormEps != want.rmsEps || c.LayerNormEps != want.lnEps {
		t.Errorf("eps = %g/%g, want %g/%g", c.RMSNormEps, c.LayerNormEps, want.rmsEps, want.lnEps)
	}
	if c.HiddenAct != want.act {
		t.Errorf("HiddenAct = %q, want %q", c.HiddenAct, want.act)
	}
	if c.TieWordEmbeddings != want.tie || c.AttentionBias != want.attnBias {
		t.Errorf("tie, attention bias = %v, %v, want %v, %v", c.TieWordEmbeddings, c.AttentionBias, want.tie, want.attnBias)
	}
	if c.NormTopKProb != want.normTopK {
		t.Errorf("NormTopKProb = %v, want %v", c.NormTopKProb, want.normTopK)
	}
	if diff := cmp.Diff(want.layerTypes, c.LayerTypes); diff != "" {
		t.Errorf("LayerTypes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.bos, c.BOSTokenID); diff != "" {
		t.Errorf("BOSTokenID (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.eos, c.EOSTokenIDs); diff != "" {
		t.Errorf("EOSTokenIDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.pad, c.PadTokenID); diff != "" {
		t.Errorf("PadTokenID (-want +got):\n%s", diff)
	}
	for lt, wp := range want.ropes {
		got := c.RopeParams
		if lt != "" {
			got = c.Rope(lt)
		}
		if diff := cmp.Diff(wp, got); diff != "" {
			t.Errorf("Rope(%q) (-want +got):\n%s", lt, diff)
		}
	}
	for layer, hd := range want.headDims {
		if got := c.HeadDimFor(layer); got != hd {
			t.Errorf("HeadDimFor(%d) = %d, want %d", layer, got, hd)
		}
	}
}

// tiny is what every fixture shares.
func tiny(modelType string, layers int) check {
	return check{
		modelType: modelType, vocab: 320, hidden: 64, intermediate: 128, layers: layers,
		heads: 4, kvHeads: 2, headDim: 16, maxPos: 512, rmsEps: 1e-6, act: "silu",
		layerTypes: repeat(full, layers), bos: ptr(1), eos: []int{2}, pad: ptr(0),
		ropes: map[string]RopeParams{"": defaultRope(10000)},
	}
}

func TestFixtureConfigs(t *testing.T) {
	root := fixtures.Dir(t, "archs")
	gemma := func(modelType string, layers int) check {
		c := tiny(modelType, layers)
		c.act = "gelu_pytorch_tanh"
		c.window = 8
		return c
	}
	want := map[string]func() check{
		"llama": func() check { return tiny("llama", 4) },
		"llama3-rope": func() check {
			c := tiny("llama", 3)
			c.ropes = map[string]RopeParams{"": {Type: "llama3", Theta: 10000, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 16, PartialRotaryFactor: 1}}
			return c
		},
		"mistral": func() check {
			c := tiny("mistral", 4)
			c.window = 8
			c.layerTypes = repeat(sliding, 4) // no layer_types: the window applies everywhere
			return c
		},
		"qwen2": func() check {
			return tiny("qwen2", 4) // use_sliding_window false: no window
		},
		"qwen2-yarn": func() check {
			c := tiny("qwen2", 3)
			c.ropes = map[string]RopeParams{"": {Type: "yarn", Theta: 10000, Factor: 4, OriginalMaxPositionEmbeddings: 128, BetaFast: 32, BetaSlow: 1, PartialRotaryFactor: 1}}
			return c
		},
		"qwen3_moe": func() check {
			c := tiny("qwen3_moe", 4)
			c.experts, c.topK, c.moeInter = 4, 2, 32
			return c
		},
		"qwen3_next": func() check {
			c := tiny("qwen3_next", 4)
			c.layerTypes = []string{linear, linear, linear, full}
			c.experts, c.topK, c.moeInter, c.shared, c.normTopK = 4, 2, 32, 32, true
			r := defaultRope(10000)
			r.PartialRotaryFactor = 0.25
			c.ropes = map[string]RopeParams{"": r, full: r}
			return c
		},
		"qwen3_5_moe_text": func() check {
			c := tiny("qwen3_5_moe_text", 4)
			c.intermediate = 0
			c.layerTypes = []string{linear, linear, linear, full}
			c.experts, c.topK, c.moeInter, c.shared = 4, 2, 32, 32
			r := defaultRope(10000)
			r.PartialRotaryFactor = 0.25
			c.ropes = map[string]RopeParams{"": r}
			return c
		},
		"phi3": func() check {
			c := tiny("phi3", 3)
			c.rmsEps = 1e-5
			c.window = 8
			c.layerTypes = repeat(sliding, 3)
			r := defaultRope(10000)
			r.OriginalMaxPositionEmbeddings = 4096 // from the top level
			c.ropes = map[string]RopeParams{"": r}
			return c
		},
		"gemma2": func() check {
			c := gemma("gemma2", 4)
			c.layerTypes = []string{sliding, full, sliding, full}
			return c
		},
		"gemma3_text": func() check {
			c := gemma("gemma3_text", 6)
			c.layerTypes = append(repeat(sliding, 5), full)
			c.ropes = map[string]RopeParams{full: defaultRope(1e6), sliding: defaultRope(1e4), "": defaultRope(1e6)}
			return c
		},
		"gemma4_text": func() check {
			c := gemma("gemma4_text", 6)
			c.layerTypes = []string{sliding, sliding, sliding, full, sliding, full}
			c.experts, c.moeInter = 4, 32
			c.ropes = map[string]RopeParams{
				full:    {Type: "proportional", Theta: 1e6, Factor: 1, PartialRotaryFactor: 0.25},
				sliding: defaultRope(1e4),
			}
			c.headDims = map[int]int{0: 16, 2: 16, 3: 32, 4: 16, 5: 32}
			return c
		},
		"gemma4_text-moe": func() check {
			c := gemma("gemma4_text", 6)
			c.layerTypes = []string{sliding, sliding, sliding, full, sliding, full}
			c.experts, c.topK, c.moeInter = 4, 2, 32
			c.ropes = map[string]RopeParams{sliding: defaultRope(1e4)}
			c.headDims = map[int]int{3: 32, 1: 16}
			return c
		},
		"gpt_oss": func() check {
			c := tiny("gpt_oss", 4)
			c.rmsEps = 1e-5
			c.window = 8
			c.attnBias = true
			c.layerTypes = []string{sliding, full, sliding, full}
			c.experts, c.topK = 4, 2
			c.ropes = map[string]RopeParams{"": {Type: "yarn", Theta: 150000, Factor: 32, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, NoTruncate: true, PartialRotaryFactor: 1}}
			return c
		},
		"mamba2": func() check {
			c := tiny("mamba2", 3)
			c.intermediate, c.heads, c.kvHeads, c.maxPos = 0, 0, 0, 0
			c.rmsEps, c.lnEps = 0, 1e-5
			return c
		},
		"lfm2": func() check {
			c := tiny("lfm2", 4)
			c.act = ""
			c.rmsEps = 1e-5
			c.ropes = map[string]RopeParams{"": defaultRope(1e6)}
			return c
		},
	}
	dirs, err := filepath.Glob(filepath.Join(root, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures in %s", root)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			c, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if w, ok := want[name]; ok {
				w().verify(t, c)
			}
			// Invariants every fixture meets.
			if len(c.LayerTypes) != c.NumHiddenLayers {
				t.Errorf("%d layer types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
			}
			for i := range c.NumHiddenLayers {
				if r := c.Rope(c.LayerType(i)); r.Theta <= 0 || r.Type == "" {
					t.Errorf("layer %d: rope %+v", i, r)
				}
				if c.NumAttentionHeads > 0 && c.HeadDimFor(i) <= 0 {
					t.Errorf("layer %d: head dim %d", i, c.HeadDimFor(i))
				}
			}
			if len(c.Architectures) != 1 || !strings.HasSuffix(c.Architectures[0], "ForCausalLM") {
				t.Errorf("Architectures = %q", c.Architectures)
			}
			if c.DType != "bfloat16" {
				t.Errorf("DType = %q", c.DType)
			}
			g, err := LoadGenerationConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&GenerationConfig{BOSTokenID: ptr(1), EOSTokenIDs: []int{2}, PadTokenID: ptr(0)}, g, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Raw" }, cmp.Ignore())); diff != "" {
				t.Errorf("generation config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFixtureExtras(t *testing.T) {
	root := fixtures.Dir(t, "archs")
	c, err := LoadConfig(filepath.Join(root, "gemma3n_text"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.IntermediateSizes, repeat6(128)) || c.IntermediateSize != 128 || c.IntermediateSizeFor(5) != 128 {
		t.Errorf("gemma3n intermediate sizes = %v / %d", c.IntermediateSizes, c.IntermediateSize)
	}
	var shared int
	if ok, err := c.Get("num_kv_shared_layers", &shared); !ok || err != nil || shared != 2 {
		t.Errorf("Get(num_kv_shared_layers) = %d, %v, %v", shared, ok, err)
	}
	var s string
	if ok, err := c.Get("num_kv_shared_layers", &s); ok || err == nil || !strings.Contains(err.Error(), "num_kv_shared_layers") {
		t.Errorf("Get into the wrong type = %v, %v", ok, err)
	}
	if ok, err := c.Get("no_such_key", &s); ok || err != nil {
		t.Errorf("Get(absent) = %v, %v", ok, err)
	}

	g4, err := LoadConfig(filepath.Join(root, "gemma4_text"))
	if err != nil {
		t.Fatal(err)
	}
	var hd int
	if ok, err := g4.LayerGet(3, "head_dim", &hd); !ok || err != nil || hd != 32 {
		t.Errorf("LayerGet(3, head_dim) = %d, %v, %v", hd, ok, err)
	}
	if ok, _ := g4.LayerGet(0, "head_dim", &hd); ok {
		t.Errorf("LayerGet(0, head_dim) found an override")
	}

	for _, tt := range []struct {
		name     string
		perLayer int
		shared   int
		sources  []int
		headDims []int
	}{
		{"gemma3n_text", 16, 2, []int{0, 1, 2, 3, 2, 3}, repeat6(16)},
		{"gemma4_text", 16, 0, []int{0, 1, 2, 3, 4, 5}, []int{16, 16, 16, 32, 16, 32}},
		{"gemma4_text-kvshared", 16, 2, []int{0, 1, 2, 3, 2, 3}, []int{16, 16, 16, 32, 16, 32}},
	} {
		c, err := LoadConfig(filepath.Join(root, tt.name))
		if err != nil {
			t.Fatal(err)
		}
		var sources, headDims []int
		for i := range c.NumHiddenLayers {
			sources = append(sources, c.KVSource(i))
			headDims = append(headDims, c.HeadDimFor(i))
		}
		if c.HiddenSizePerLayerInput != tt.perLayer || c.VocabSizePerLayerInput != c.VocabSize || c.NumKVSharedLayers != tt.shared ||
			!slices.Equal(sources, tt.sources) || !slices.Equal(headDims, tt.headDims) {
			t.Errorf("%s: per-layer input %d × vocab %d, %d shared layers, KV sources %v, head dims %v; want %d, %d, %v, %v",
				tt.name, c.HiddenSizePerLayerInput, c.VocabSizePerLayerInput, c.NumKVSharedLayers, sources, headDims, tt.perLayer, tt.shared, tt.sources, tt.headDims)
		}
	}

	fh, err := LoadConfig(filepath.Join(root, "falcon_h1"))
	if err != nil {
		t.Fatal(err)
	}
	var limit []any
	if ok, err := fh.Get("time_step_limit", &limit); !ok || err != nil || len(limit) != 2 {
		t.Errorf("Get(time_step_limit) = %v, %v, %v", limit, ok, err)
	}
	if fh.EmbeddingMultiplier != 1 || fh.NormEps() != 1e-5 {
		t.Errorf("falcon_h1: embedding multiplier %g, eps %g", fh.EmbeddingMultiplier, fh.NormEps())
	}
}

// TestStateSpaceConfigs checks the SSM, short-convolution and Falcon-H1
// keys of the fixtures and of published-style configs.
func TestStateSpaceConfigs(t *testing.T) {
	inf := math.Inf(1)
	fixture := func(name string) func() (*Config, error) {
		return func() (*Config, error) { return LoadConfig(filepath.Join(fixtures.Dir(t, "archs"), name)) }
	}
	parse := func(js string) func() (*Config, error) {
		return func() (*Config, error) { return ParseConfig([]byte(js)) }
	}
	falconMults := `"attention_in_multiplier":0.5,"attention_out_multiplier":0.25,"ssm_in_multiplier":2,
		"ssm_out_multiplier":0.125,"key_multiplier":0.75,"lm_head_multiplier":0.0625,"embedding_multiplier":6,
		"mlp_multipliers":[0.5,2],"ssm_multipliers":[1,2,3,4,5]`
	tests := []struct {
		name       string
		load       func() (*Config, error)
		ssm        SSMParams
		conv, ff   int
		mults      [6]float64 // attention in, out; ssm in, out; key; lm head
		mlp        [2]float64
		ssmMults   [5]float64
		layerTypes []string
	}{
		{
			name: "mamba2 fixture", load: fixture("mamba2"),
			ssm:  SSMParams{Heads: 8, HeadDim: 16, StateSize: 16, Groups: 1, Inner: 128, ChunkSize: 8, TimeStepMax: inf, RMSNorm: true},
			conv: 4, mults: [6]float64{1, 1, 1, 1, 1, 1}, mlp: [2]float64{1, 1}, ssmMults: [5]float64{1, 1, 1, 1, 1},
		},
		{
			name: "falcon_h1 fixture", load: fixture("falcon_h1"),
			ssm:  SSMParams{Heads: 128, HeadDim: 8, StateSize: 256, Groups: 1, Inner: 1024, ChunkSize: 256, TimeStepMax: inf, NormBeforeGate: true},
			conv: 4, ff: 128, mults: [6]float64{1, 1, 1, 1, 1, 1}, mlp: [2]float64{1, 1}, ssmMults: [5]float64{1, 1, 1, 1, 1},
		},
		{
			name: "lfm2 fixture", load: fixture("lfm2"),
			ssm:  SSMParams{Groups: 1, TimeStepMax: inf, RMSNorm: true},
			conv: 3, ff: 256, mults: [6]float64{1, 1, 1, 1, 1, 1}, mlp: [2]float64{1, 1}, ssmMults: [5]float64{1, 1, 1, 1, 1},
		},
		{
			name: "falcon_h1 with multipliers, expand and a finite time step limit",
			load: parse(`{"model_type":"falcon_h1","vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,
				"mamba_n_heads":4,"mamba_d_head":4,"mamba_d_state":16,"mamba_n_groups":2,"mamba_d_ssm":null,"mamba_expand":2,
				"mamba_d_conv":4,"mamba_chunk_size":128,"mamba_rms_norm":true,"mamba_norm_before_gate":false,
				"time_step_limit":[0.001,{"__float__":"Infinity"}],` + falconMults + `}`),
			ssm:  SSMParams{Heads: 4, HeadDim: 4, StateSize: 16, Groups: 2, Inner: 16, ChunkSize: 128, TimeStepMin: 0.001, TimeStepMax: inf, RMSNorm: true},
			conv: 4, ff: 0, mults: [6]float64{0.5, 0.25, 2, 0.125, 0.75, 0.0625}, mlp: [2]float64{0.5, 2}, ssmMults: [5]float64{1, 2, 3, 4, 5},
		},
		{
			name: "lfm2 1.2b style: convolution layers and a rounded feed-forward size",
			load: parse(`{"model_type":"lfm2","vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2,
				"intermediate_size":12288,"block_auto_adjust_ff_dim":true,"block_ffn_dim_multiplier":1.0,"block_multiple_of":256,
				"conv_L_cache":3,"full_attn_idxs":[1,3]}`),
			ssm:  SSMParams{Groups: 1, TimeStepMax: inf, RMSNorm: true},
			conv: 3, ff: 8192, mults: [6]float64{1, 1, 1, 1, 1, 1}, mlp: [2]float64{1, 1}, ssmMults: [5]float64{1, 1, 1, 1, 1},
			layerTypes: []string{"conv", full, "conv", full},
		},
		{
			name: "mamba2 with ssm_state_size and a clamped time step",
			load: parse(`{"model_type":"mamba2","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_heads":2,"head_dim":8,
				"ssm_state_size":4,"expand":2,"conv_kernel":2,"time_step_limit":[0.0,0.1]}`),
			ssm:  SSMParams{Heads: 2, HeadDim: 8, StateSize: 4, Groups: 1, Inner: 16, TimeStepMax: 0.1, RMSNorm: true},
			conv: 2, mults: [6]float64{1, 1, 1, 1, 1, 1}, mlp: [2]float64{1, 1}, ssmMults: [5]float64{1, 1, 1, 1, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.load()
			if err != nil {
				t.Fatal(err)
			}
			if c.SSM != tt.ssm {
				t.Errorf("SSM = %+v\nwant %+v", c.SSM, tt.ssm)
			}
			if c.ConvKernel != tt.conv {
				t.Errorf("ConvKernel = %d, want %d", c.ConvKernel, tt.conv)
			}
			if tt.ff != 0 && c.FeedForwardSize() != tt.ff {
				t.Errorf("FeedForwardSize() = %d, want %d", c.FeedForwardSize(), tt.ff)
			}
			mults := [6]float64{c.AttentionInMultiplier, c.AttentionOutMultiplier, c.SSMInMultiplier, c.SSMOutMultiplier, c.KeyMultiplier, c.LMHeadMultiplier}
			if mults != tt.mults || c.MLPMultipliers != tt.mlp || c.SSMMultipliers != tt.ssmMults {
				t.Errorf("multipliers = %v %v %v, want %v %v %v", mults, c.MLPMultipliers, c.SSMMultipliers, tt.mults, tt.mlp, tt.ssmMults)
			}
			if tt.layerTypes != nil && !slices.Equal(c.LayerTypes, tt.layerTypes) {
				t.Errorf("LayerTypes = %q, want %q", c.LayerTypes, tt.layerTypes)
			}
		})
	}
}

func repeat6(n int) []int { return []int{n, n, n, n, n, n} }

// Configs in the older, pre-transformers-5 form, as published.
const llama31 = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}`

const qwen25Yarn = `{
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "intermediate_size": 18944,
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "use_sliding_window": false,
  "vocab_size": 152064
}`

const phi3Long = `{
  "architectures": ["Phi3ForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 32000,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "pad_token_id": 32000,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"long_factor": [1.08, 1.1, 1.14], "short_factor": [1.05, 1.05, 1.06], "type": "longrope"},
  "rope_theta": 10000.0,
  "sliding_window": 262144,
  "tie_word_embeddings": false,
  "vocab_size": 32064
}`

// gemma34b is the shape of Gemma 3 4B's config: the text model nested in
// text_config with most keys left to the class defaults.
const gemma34b = `{
  "architectures": ["Gemma3ForConditionalGeneration"],
  "boi_token_index": 255999,
  "eos_token_id": [1, 106],
  "model_type": "gemma3",
  "text_config": {
    "hidden_size": 2560,
    "intermediate_size": 10240,
    "model_type": "gemma3_text",
    "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024
  },
  "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model", "num_hidden_layers": 27}
}`

const gemma31b = `{
  "architectures": ["Gemma3ForCausalLM"],
  "attn_logit_softcapping": null,
  "bos_token_id": 2,
  "eos_token_id": [1, 106],
  "final_logit_softcapping": null,
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "intermediate_size": 6912,
  "max_position_embeddings": 32768,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_hidden_layers": 26,
  "num_key_value_heads": 1,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_local_base_freq": 10000,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": 512,
  "sliding_window_pattern": 6,
  "vocab_size": 262144
}`

func TestOldFormConfigs(t *testing.T) {
	gemma3Types := func(n int) []string {
		var ts []string
		for i := range n {
			if (i+1)%6 == 0 {
				ts = append(ts, full)
			} else {
				ts = append(ts, sliding)
			}
		}
		return ts
	}
	tests := []struct {
		name string
		json string
		want check
		more func(t *testing.T, c *Config)
	}{
		{
			name: "llama 3.1 with llama3 rope scaling and an eos list",
			json: llama31,
			want: check{
				modelType: "llama", vocab: 128256, hidden: 4096, intermediate: 14336, layers: 32,
				heads: 32, kvHeads: 8, headDim: 128, maxPos: 131072, rmsEps: 1e-5, act: "silu",
				layerTypes: repeat(full, 32), bos: ptr(128000), eos: []int{128001, 128008, 128009},
				ropes: map[string]RopeParams{"": {Type: "llama3", Theta: 500000, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192, PartialRotaryFactor: 1}},
			},
			more: func(t *testing.T, c *Config) {
				if c.DType != "bfloat16" {
					t.Errorf("DType = %q", c.DType)
				}
			},
		},
		{
			name: "qwen 2.5 with yarn and the window disabled",
			json: qwen25Yarn,
			want: check{
				modelType: "qwen2", vocab: 152064, hidden: 3584, intermediate: 18944, layers: 28,
				heads: 28, kvHeads: 4, headDim: 128, maxPos: 32768, rmsEps: 1e-6, act: "silu",
				layerTypes: repeat(full, 28), bos: ptr(151643), eos: []int{151645},
				ropes: map[string]RopeParams{"": {Type: "yarn", Theta: 1e6, Factor: 4, OriginalMaxPositionEmbeddings: 32768, BetaFast: 32, BetaSlow: 1, PartialRotaryFactor: 1}},
			},
		},
		{
			name: "phi3 longrope with short and long factors",
			json: phi3Long,
			want: check{
				modelType: "phi3", vocab: 32064, hidden: 3072, intermediate: 8192, layers: 32,
				heads: 32, kvHeads: 32, headDim: 96, maxPos: 131072, rmsEps: 1e-5, act: "silu", window: 262144,
				layerTypes: repeat(sliding, 32), bos: ptr(1), eos: []int{32000}, pad: ptr(32000),
				ropes: map[string]RopeParams{"": {Type: "longrope", Theta: 10000, Factor: 1, OriginalMaxPositionEmbeddings: 4096, PartialRotaryFactor: 1, ShortFactor: []float64{1.05, 1.05, 1.06}, LongFactor: []float64{1.08, 1.1, 1.14}}},
			},
		},
		{
			name: "gemma 3 4b: nested text_config with class defaults",
			json: gemma34b,
			want: check{
				modelType: "gemma3_text", vocab: 262208, hidden: 2560, intermediate: 10240, layers: 34,
				heads: 8, kvHeads: 4, headDim: 256, maxPos: 131072, rmsEps: 1e-6, act: "gelu_pytorch_tanh",
				tie: true, window: 1024, layerTypes: gemma3Types(34), bos: ptr(2), eos: []int{1, 106}, pad: ptr(0),
				ropes: map[string]RopeParams{
					full:    {Type: "linear", Theta: 1e6, Factor: 8, PartialRotaryFactor: 1},
					sliding: defaultRope(1e4),
				},
			},
			more: func(t *testing.T, c *Config) {
				if c.OuterModelType != "gemma3" || !slices.Equal(c.Architectures, []string{"Gemma3ForConditionalGeneration"}) {
					t.Errorf("outer = %q %q", c.OuterModelType, c.Architectures)
				}
				if c.QueryPreAttnScalar != 256 {
					t.Errorf("QueryPreAttnScalar = %g", c.QueryPreAttnScalar)
				}
				var idx int
				if ok, _ := c.Get("boi_token_index", &idx); !ok || idx != 255999 {
					t.Errorf("wrapper key boi_token_index not readable: %d", idx)
				}
				if _, ok := c.Raw["vision_config"]; ok {
					t.Errorf("vision_config merged into the text config")
				}
			},
		},
		{
			name: "gemma 3 1b: rope_local_base_freq and sliding_window_pattern",
			json: gemma31b,
			want: check{
				modelType: "gemma3_text", vocab: 262144, hidden: 1152, intermediate: 6912, layers: 26,
				heads: 4, kvHeads: 1, headDim: 256, maxPos: 32768, rmsEps: 1e-6, act: "gelu_pytorch_tanh",
				tie: true, window: 512, layerTypes: gemma3Types(26), bos: ptr(2), eos: []int{1, 106}, pad: ptr(0),
				ropes: map[string]RopeParams{full: defaultRope(1e6), sliding: defaultRope(1e4)},
			},
		},
		{
			name: "qwen2 with the window enabled above max_window_layers",
			json: `{"model_type":"qwen2","vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2,
				"use_sliding_window":true,"sliding_window":16,"max_window_layers":2,"eos_token_id":null,"pad_token_id":-1}`,
			want: check{
				modelType: "qwen2", vocab: 10, hidden: 8, layers: 4, heads: 2, kvHeads: 2, headDim: 4, window: 16,
				layerTypes: []string{full, full, sliding, sliding},
				ropes:      map[string]RopeParams{"": defaultRope(10000)},
			},
		},
		{
			name: "gemma2 without layer_types alternates",
			json: `{"model_type":"gemma2","vocab_size":10,"hidden_size":8,"num_hidden_layers":3,"num_attention_heads":2,"head_dim":4,
				"sliding_window":4096,"final_logit_softcapping":30.0,"attn_logit_softcapping":50.0,"hidden_act":"gelu_pytorch_tanh"}`,
			want: check{
				modelType: "gemma2", vocab: 10, hidden: 8, layers: 3, heads: 2, kvHeads: 2, headDim: 4, window: 4096,
				act: "gelu_pytorch_tanh", tie: true, layerTypes: []string{sliding, full, sliding},
				ropes: map[string]RopeParams{"": defaultRope(10000)},
			},
			more: func(t *testing.T, c *Config) {
				if c.FinalLogitSoftcapping != 30 || c.AttnLogitSoftcapping != 50 {
					t.Errorf("soft caps = %g, %g", c.FinalLogitSoftcapping, c.AttnLogitSoftcapping)
				}
			},
		},
		{
			name: "lfm2 full_attn_idxs",
			json: `{"model_type":"lfm2","vocab_size":10,"hidden_size":8,"num_hidden_layers":6,"num_attention_heads":2,"full_attn_idxs":[2,5],"norm_eps":1e-5}`,
			want: check{
				modelType: "lfm2", vocab: 10, hidden: 8, layers: 6, heads: 2, kvHeads: 2, headDim: 4, rmsEps: 1e-5,
				layerTypes: []string{"conv", "conv", full, "conv", "conv", full},
				ropes:      map[string]RopeParams{"": defaultRope(10000)},
			},
		},
		{
			name: "qwen3-next full_attention_interval and top-level partial rotary",
			json: `{"model_type":"qwen3_next","vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2,"head_dim":8,
				"full_attention_interval":2,"partial_rotary_factor":0.25,"rope_theta":10000000}`,
			want: check{
				modelType: "qwen3_next", vocab: 10, hidden: 8, layers: 4, heads: 2, kvHeads: 2, headDim: 8,
				layerTypes: []string{linear, full, linear, full},
				ropes:      map[string]RopeParams{"": {Type: "default", Theta: 1e7, Factor: 1, PartialRotaryFactor: 0.25}},
			},
		},
		{
			name: "qwen2-vl mrope",
			json: `{"model_type":"qwen2_vl","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
				"rope_scaling":{"type":"mrope","mrope_section":[16,24,24]}}`,
			want: check{
				modelType: "qwen2_vl", vocab: 10, hidden: 8, layers: 1, heads: 2, kvHeads: 2, headDim: 4,
				layerTypes: []string{full},
				ropes:      map[string]RopeParams{"": {Type: "default", Theta: 10000, Factor: 1, PartialRotaryFactor: 1, MRopeSection: []int{16, 24, 24}}},
			},
		},
		{
			name: "deepseek yarn with mscale and su renamed",
			json: `{"model_type":"deepseek_v3","vocab_size":10,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,"n_routed_experts":256,"num_experts_per_tok":8,"n_shared_experts":1,
				"rope_scaling":{"type":"yarn","factor":40,"beta_fast":32,"beta_slow":1,"mscale":1.0,"mscale_all_dim":1.0,"original_max_position_embeddings":4096}}`,
			want: check{
				modelType: "deepseek_v3", vocab: 10, hidden: 8, layers: 1, heads: 2, kvHeads: 2, headDim: 4,
				layerTypes: []string{full}, experts: 256, topK: 8,
				ropes: map[string]RopeParams{"": {Type: "yarn", Theta: 10000, Factor: 40, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1, OriginalMaxPositionEmbeddings: 4096, PartialRotaryFactor: 1}},
			},
			more: func(t *testing.T, c *Config) {
				if c.NumSharedExperts != 1 {
					t.Errorf("NumSharedExperts = %d", c.NumSharedExperts)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.verify(t, c)
			if tt.more != nil {
				tt.more(t, c)
			}
		})
	}
}

func TestFamilyExtras(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2`
	t.Run("smollm3 no_rope_layers", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"model_type":"smollm3",` + base + `,"no_rope_layers":[1,1,1,0]}`))
		if err != nil {
			t.Fatal(err)
		}
		got := []bool{c.UsesRope(0), c.UsesRope(1), c.UsesRope(2), c.UsesRope(3)}
		if !slices.Equal(got, []bool{true, true, true, false}) {
			t.Errorf("UsesRope = %v", got)
		}
	})
	t.Run("no_rope_layer_interval", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"model_type":"smollm3",` + base + `,"no_rope_layer_interval":2}`))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.NoRopeLayers, []int{1, 0, 1, 0}) {
			t.Errorf("NoRopeLayers = %v", c.NoRopeLayers)
		}
	})
	t.Run("rope everywhere by default", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{` + base + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if !c.UsesRope(0) || !c.UsesRope(3) {
			t.Error("UsesRope false without no_rope_layers")
		}
		if c.EmbeddingMultiplier != 1 || c.ResidualMultiplier != 1 || c.LogitsScaling != 1 || c.AttentionMultiplier != 0 {
			t.Errorf("multiplier defaults = %g %g %g %g", c.EmbeddingMultiplier, c.ResidualMultiplier, c.LogitsScaling, c.AttentionMultiplier)
		}
		if c.Quantization != nil {
			t.Errorf("Quantization = %+v", c.Quantization)
		}
		if c.EOSTokenIDs != nil || c.BOSTokenID != nil {
			t.Errorf("ids = %v %v", c.EOSTokenIDs, c.BOSTokenID)
		}
	})
	t.Run("granite multipliers", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"model_type":"granite",` + base + `,"embedding_multiplier":12.0,"residual_multiplier":0.22,"attention_multiplier":0.0078125,"logits_scaling":8.0}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.EmbeddingMultiplier != 12 || c.ResidualMultiplier != 0.22 || c.AttentionMultiplier != 0.0078125 || c.LogitsScaling != 8 {
			t.Errorf("multipliers = %g %g %g %g", c.EmbeddingMultiplier, c.ResidualMultiplier, c.AttentionMultiplier, c.LogitsScaling)
		}
	})
	t.Run("mlx quantization", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{` + base + `,"quantization":{"group_size":64,"bits":4,"mode":"affine",
			"model.embed_tokens":{"group_size":32,"bits":8},"lm_head":false}}`))
		if err != nil {
			t.Fatal(err)
		}
		q := c.Quantization
		if q == nil || q.GroupSize != 64 || q.Bits != 4 || q.Mode != "affine" {
			t.Fatalf("Quantization = %+v", q)
		}
		tests := []struct {
			module string
			want   QuantParams
			ok     bool
		}{
			{"model.layers.0.mlp.up_proj", QuantParams{64, 4, "affine"}, true},
			{"model.embed_tokens", QuantParams{32, 8, "affine"}, true},
			{"lm_head", QuantParams{}, false},
		}
		for _, tt := range tests {
			got, ok := q.For(tt.module)
			if got != tt.want || ok != tt.ok {
				t.Errorf("For(%q) = %+v, %v, want %+v, %v", tt.module, got, ok, tt.want, tt.ok)
			}
		}
	})
	t.Run("hf quantization_config", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{` + base + `,"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128],"is_dynamic":false}}`))
		if err != nil {
			t.Fatal(err)
		}
		if q := c.Quantization; q == nil || q.Method != "fp8" || q.Modules != nil {
			t.Fatalf("Quantization = %+v", q)
		}
	})
	t.Run("per_layer_config overrides", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{` + base + `,"num_key_value_heads":1,"intermediate_size":16,
			"per_layer_config":{"1":{"head_dim":32,"num_key_value_heads":2,"intermediate_size":64}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.HeadDimFor(0) != 4 || c.HeadDimFor(1) != 32 || c.KVHeadsFor(0) != 1 || c.KVHeadsFor(1) != 2 || c.IntermediateSizeFor(0) != 16 || c.IntermediateSizeFor(1) != 64 {
			t.Errorf("per-layer: head %d/%d kv %d/%d ff %d/%d", c.HeadDimFor(0), c.HeadDimFor(1), c.KVHeadsFor(0), c.KVHeadsFor(1), c.IntermediateSizeFor(0), c.IntermediateSizeFor(1))
		}
	})
	t.Run("global_head_dim and KV sharing", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"vocab_size":10,"hidden_size":8,"num_hidden_layers":7,"num_attention_heads":2,"head_dim":4,
			"global_head_dim":16,"num_kv_shared_layers":3,"hidden_size_per_layer_input":2,"vocab_size_per_layer_input":6,
			"layer_types":["sliding_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","sliding_attention"],
			"per_layer_config":{"3":{"head_dim":8}}}`))
		if err != nil {
			t.Fatal(err)
		}
		var heads, sources []int
		for i := range c.NumHiddenLayers {
			heads = append(heads, c.HeadDimFor(i))
			sources = append(sources, c.KVSource(i))
		}
		if want := []int{4, 4, 16, 8, 16, 4, 4}; !slices.Equal(heads, want) {
			t.Errorf("head dims %v, want %v", heads, want)
		}
		if want := []int{0, 1, 2, 3, 2, 3, 3}; !slices.Equal(sources, want) {
			t.Errorf("KV sources %v, want %v", sources, want)
		}
		if c.HiddenSizePerLayerInput != 2 || c.VocabSizePerLayerInput != 6 {
			t.Errorf("per-layer input %d × %d", c.HiddenSizePerLayerInput, c.VocabSizePerLayerInput)
		}
	})
	t.Run("integral floats and hidden_activation precedence", func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"vocab_size":1e1,"hidden_size":8.0,"num_hidden_layers":1,"hidden_act":"silu","hidden_activation":"gelu"}`))
		if err != nil {
			t.Fatal(err)
		}
		if c.VocabSize != 10 || c.HiddenSize != 8 || c.HiddenAct != "gelu" {
			t.Errorf("vocab %d hidden %d act %q", c.VocabSize, c.HiddenSize, c.HiddenAct)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2`
	tests := []struct {
		name string
		json string
		want string
	}{
		{"malformed JSON", `{"vocab_size":`, "unexpected end of JSON input"},
		{"not an object", `[1,2]`, "want a JSON object, got array"},
		{"null", `null`, "want a JSON object, got null"},
		{"missing vocab_size", `{"hidden_size":8,"num_hidden_layers":2}`, `missing required key "vocab_size"`},
		{"missing hidden_size", `{"vocab_size":8,"num_hidden_layers":2}`, `missing required key "hidden_size"`},
		{"missing num_hidden_layers", `{"vocab_size":8,"hidden_size":2}`, `missing required key "num_hidden_layers"`},
		{"zero vocab", `{"vocab_size":0,"hidden_size":8,"num_hidden_layers":2}`, `key "vocab_size": must be positive`},
		{"string size", `{` + base + `,"intermediate_size":"64"}`, `key "intermediate_size": want a non-negative integer, got "64"`},
		{"fractional size", `{"vocab_size":10.5,"hidden_size":8,"num_hidden_layers":2}`, `key "vocab_size": want a non-negative integer, got 10.5`},
		{"negative size", `{"vocab_size":-10,"hidden_size":8,"num_hidden_layers":2}`, `key "vocab_size": want a non-negative integer, got -10`},
		{"too many layers", `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":1000000000000}`, `key "num_hidden_layers": 1000000000000 layers`},
		{"bool as string", `{` + base + `,"tie_word_embeddings":"yes"}`, `key "tie_word_embeddings": want true or false, got "yes"`},
		{"eps as string", `{` + base + `,"rms_norm_eps":"1e-6"}`, `key "rms_norm_eps": want a number`},
		{"eos as string", `{` + base + `,"eos_token_id":"</s>"}`, `key "eos_token_id": want a token id or a list of them`},
		{"eos list of strings", `{` + base + `,"eos_token_id":[1,"x"]}`, `key "eos_token_id": want a token id or a list of them`},
		{"layer_types not strings", `{` + base + `,"layer_types":[1,2]}`, `key "layer_types": want a list of strings`},
		{"layer_types wrong length", `{` + base + `,"layer_types":["full_attention"]}`, `key "layer_types": 1 entries for 2 layers`},
		{"intermediate list wrong length", `{` + base + `,"intermediate_size":[1,2,3]}`, `key "intermediate_size": 3 entries for 2 layers`},
		{"heads not a multiple of kv heads", `{` + base + `,"num_key_value_heads":3}`, `key "num_key_value_heads"`},
		{"head_dim underivable", `{"vocab_size":10,"hidden_size":9,"num_hidden_layers":2,"num_attention_heads":2}`, `key "head_dim" absent`},
		{"rope_parameters factor", `{` + base + `,"rope_parameters":{"rope_type":"linear","factor":"x"}}`, `key "rope_parameters.factor": want a number`},
		{"rope_parameters per type", `{` + base + `,"rope_parameters":{"full_attention":{"rope_theta":"big"}}}`, `key "rope_parameters.full_attention.rope_theta"`},
		{"rope_parameters list", `{` + base + `,"rope_parameters":[1]}`, `key "rope_parameters": want a JSON object`},
		{"rope_scaling string", `{` + base + `,"rope_scaling":"linear"}`, `key "rope_scaling": want a JSON object`},
		{"rope_scaling short_factor", `{` + base + `,"rope_scaling":{"type":"longrope","short_factor":"x"}}`, `key "rope_scaling.short_factor": want a list of numbers`},
		{"negative rope theta", `{` + base + `,"rope_theta":-1}`, `key "rope_theta": rope_theta -1 is not a positive number`},
		{"zero rope factor", `{` + base + `,"rope_scaling":{"type":"linear","factor":0}}`, `key "rope_scaling.factor": 0 is not a positive number`},
		{"partial rotary too big", `{` + base + `,"partial_rotary_factor":2}`, `key "partial_rotary_factor": 2 is outside (0, 1]`},
		{"text_config not an object", `{"model_type":"gemma3","text_config":5}`, `key "text_config": want a JSON object, got number`},
		{"text_config wrong type", `{"model_type":"x","text_config":{"vocab_size":10,"hidden_size":"8","num_hidden_layers":2}}`, `key "text_config.hidden_size"`},
		{"text_config missing key", `{"model_type":"x","text_config":{"vocab_size":10,"num_hidden_layers":2}}`, `missing required key "text_config.hidden_size"`},
		{"model_type not a string", `{"model_type":5,` + base + `}`, `key "model_type": want a string`},
		{"per_layer_config bad index", `{` + base + `,"per_layer_config":{"7":{"head_dim":4}}}`, `"7" is not a layer index in [0, 2)`},
		{"per_layer_config bad value", `{` + base + `,"per_layer_config":{"1":{"head_dim":"x"}}}`, `key "per_layer_config.1.head_dim"`},
		{"all layers KV-shared", `{` + base + `,"num_kv_shared_layers":2}`, `key "num_kv_shared_layers": 2 shared layers leave none of the 2`},
		{"KV-shared layer without a source", `{` + base + `,"num_kv_shared_layers":1,"layer_types":["full_attention","sliding_attention"]}`,
			`key "num_kv_shared_layers": layer 1 (sliding_attention) has no earlier sliding_attention layer`},
		{"more experts per token than experts", `{` + base + `,"num_experts":4,"num_experts_per_tok":5}`, `key "num_experts_per_tok": 5 experts per token of 4 experts`},
		{"negative swiglu_limit", `{` + base + `,"swiglu_limit":-1}`, `key "swiglu_limit": -1 is not a non-negative number`},
		{"swiglu_limit as string", `{` + base + `,"swiglu_limit":"7"}`, `key "swiglu_limit": want a number`},
		{"mlp_only_layers out of range", `{` + base + `,"mlp_only_layers":[5]}`, `key "mlp_only_layers": layer 5 out of range`},
		{"no_rope_layers wrong length", `{` + base + `,"no_rope_layers":[1]}`, `key "no_rope_layers": 1 entries for 2 layers`},
		{"time_step_limit not a pair", `{` + base + `,"time_step_limit":[0.1]}`, `key "time_step_limit": want a [min, max] pair`},
		{"time_step_limit reversed", `{` + base + `,"time_step_limit":[1,0]}`, `key "time_step_limit": want a [min, max] pair`},
		{"time_step_limit bad float", `{` + base + `,"time_step_limit":[0,{"__float__":"lots"}]}`, `key "time_step_limit": want a list of numbers`},
		{"ssm_multipliers too short", `{` + base + `,"ssm_multipliers":[1,2]}`, `key "ssm_multipliers": want a list of 5 numbers`},
		{"mlp_multipliers not numbers", `{` + base + `,"mlp_multipliers":"x"}`, `key "mlp_multipliers": want a list of numbers`},
		{"mamba_d_state a string", `{` + base + `,"mamba_d_state":"16"}`, `key "mamba_d_state": want a non-negative integer`},
		{"quantization bits", `{` + base + `,"quantization":{"group_size":64,"bits":"4"}}`, `key "quantization.bits"`},
		{"quantization module", `{` + base + `,"quantization":{"bits":4,"lm_head":{"bits":"x"}}}`, `key "quantization.lm_head.bits"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.json))
			if err == nil {
				t.Fatalf("ParseConfig succeeded, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// TestConfigOutOfRange checks that values no model can have are refused
// at load, with the file and the key named.
func TestConfigOutOfRange(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2`
	tests := []struct {
		name, json, want string
	}{
		{"negative rms_norm_eps", `{` + base + `,"rms_norm_eps":-1e-06}`, `key "rms_norm_eps": must be positive, got -1e-06`},
		{"zero rms_norm_eps", `{` + base + `,"rms_norm_eps":0}`, `key "rms_norm_eps": must be positive, got 0`},
		{"negative norm_eps", `{` + base + `,"norm_eps":-1}`, `key "norm_eps": must be positive`},
		{"zero rms_norm_epsilon", `{` + base + `,"rms_norm_epsilon":0.0}`, `key "rms_norm_epsilon": must be positive`},
		{"negative layer_norm_eps", `{` + base + `,"layer_norm_eps":-0.5}`, `key "layer_norm_eps": must be positive, got -0.5`},
		{"zero layer_norm_epsilon", `{` + base + `,"layer_norm_epsilon":0}`, `key "layer_norm_epsilon": must be positive`},
		{"negative norm_epsilon", `{` + base + `,"norm_epsilon":-1e-5}`, `key "norm_epsilon": must be positive`},
		{"eps below float32", `{` + base + `,"rms_norm_eps":1e-60}`, `key "rms_norm_eps": 1e-60 is out of float32 range`},
		{"eps above float32", `{` + base + `,"rms_norm_eps":1e60}`, `key "rms_norm_eps": 1e+60 is out of float32 range`},
		{"unused eps spelling still checked", `{` + base + `,"rms_norm_eps":1e-6,"layer_norm_eps":-1}`, `key "layer_norm_eps"`},
		{"eos outside vocab", `{` + base + `,"eos_token_id":10}`, `key "eos_token_id": token id 10 is outside the vocabulary (vocab_size 10)`},
		{"eos list outside vocab", `{` + base + `,"eos_token_id":[1,2,151645]}`, `key "eos_token_id": token id 151645`},
		{"bos outside vocab", `{` + base + `,"bos_token_id":11}`, `key "bos_token_id": token id 11`},
		{"pad outside vocab", `{` + base + `,"pad_token_id":32000}`, `key "pad_token_id": token id 32000`},
		{"wrapped eos outside vocab", `{"model_type":"x","eos_token_id":[1,106],"text_config":{"model_type":"x_text","vocab_size":100,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2}}`, `eos_token_id": token id 106`},
		{"zero heads", `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":0}`, `key "num_attention_heads": must be positive, got 0`},
		{"zero kv heads", `{` + base + `,"num_key_value_heads":0}`, `key "num_key_value_heads": must be positive, got 0`},
		{"zero head_dim", `{` + base + `,"head_dim":0}`, `key "head_dim": must be positive, got 0`},
		{"kv heads without heads", `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_key_value_heads":2}`, `key "num_key_value_heads": 2 key/value heads for 0 attention heads`},
		{"more kv heads than heads", `{` + base + `,"num_key_value_heads":4}`, `key "num_key_value_heads"`},
		{"zero layers", `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":0}`, `key "num_hidden_layers": must be positive`},
		{"zero hidden", `{"vocab_size":10,"hidden_size":0,"num_hidden_layers":2}`, `key "hidden_size": must be positive`},
		{"negative heads", `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":-2}`, `key "num_attention_heads": want a non-negative integer, got -2`},
		{"text_config eps", `{"model_type":"x","text_config":{` + base + `,"rms_norm_eps":-1}}`, `key "text_config.rms_norm_eps": must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config.json")
			if err := os.WriteFile(path, []byte(tt.json), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir)
			if err == nil {
				t.Fatalf("LoadConfig succeeded, want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %s and contain %q", err, path, tt.want)
			}
		})
	}
	// The edges that stay allowed.
	for _, ok := range []string{
		`{` + base + `,"rms_norm_eps":1e-30,"eos_token_id":[9,-1],"bos_token_id":-1,"pad_token_id":null}`,
		`{` + base + `,"num_key_value_heads":null,"head_dim":null}`,
		`{"model_type":"mamba2","vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_heads":2,"head_dim":8,"state_size":4,"expand":2,"conv_kernel":4,"layer_norm_epsilon":1e-5}`,
	} {
		if _, err := ParseConfig([]byte(ok)); err != nil {
			t.Errorf("ParseConfig(%s): %v", ok, err)
		}
	}
}

func TestConfigMoE(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2`
	tests := []struct {
		name         string
		json         string
		experts, top int
		limit        float64
		sparse       []int // the layers SparseLayer reports
	}{
		{"dense", `{` + base + `}`, 0, 0, 0, nil},
		{"dense with a stray top k", `{` + base + `,"num_experts_per_tok":2}`, 0, 2, 0, nil},
		{"qwen3_moe every layer", `{"model_type":"qwen3_moe",` + base + `,"num_experts":8,"num_experts_per_tok":2,"decoder_sparse_step":1,"mlp_only_layers":[]}`, 8, 2, 0, []int{0, 1, 2, 3}},
		{"num_local_experts, no step", `{` + base + `,"num_local_experts":8,"num_experts_per_tok":2}`, 8, 2, 0, []int{0, 1, 2, 3}},
		{"sparse step 2", `{` + base + `,"num_experts":8,"num_experts_per_tok":2,"decoder_sparse_step":2}`, 8, 2, 0, []int{1, 3}},
		{"step 0 means every layer", `{` + base + `,"num_experts":8,"num_experts_per_tok":2,"decoder_sparse_step":0}`, 8, 2, 0, []int{0, 1, 2, 3}},
		{"mlp_only_layers", `{` + base + `,"num_experts":8,"num_experts_per_tok":2,"mlp_only_layers":[0,2]}`, 8, 2, 0, []int{1, 3}},
		{"gpt_oss default limit", `{"model_type":"gpt_oss",` + base + `,"num_local_experts":4,"num_experts_per_tok":2}`, 4, 2, 7, []int{0, 1, 2, 3}},
		{"gpt_oss given limit", `{"model_type":"gpt_oss",` + base + `,"num_local_experts":4,"num_experts_per_tok":2,"swiglu_limit":5.5}`, 4, 2, 5.5, []int{0, 1, 2, 3}},
		{"openai experts_per_token", `{` + base + `,"num_experts":32,"experts_per_token":4,"swiglu_limit":7.0}`, 32, 4, 7, []int{0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.NumExperts != tt.experts || c.NumExpertsPerTok != tt.top || c.SwiGLULimit != tt.limit {
				t.Errorf("experts, top k, swiglu limit = %d, %d, %g, want %d, %d, %g", c.NumExperts, c.NumExpertsPerTok, c.SwiGLULimit, tt.experts, tt.top, tt.limit)
			}
			var sparse []int
			for i := -1; i <= c.NumHiddenLayers; i++ {
				if c.SparseLayer(i) {
					sparse = append(sparse, i)
				}
			}
			if !slices.Equal(sparse, tt.sparse) {
				t.Errorf("sparse layers %v, want %v", sparse, tt.sparse)
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) {
		t.Errorf("LoadConfig(empty dir) = %v, want an error naming config.json", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"vocab_size":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")) || !strings.Contains(err.Error(), "vocab_size") {
		t.Errorf("LoadConfig(bad) = %v, want an error naming the file and the key", err)
	}
}

func TestGenerationConfig(t *testing.T) {
	tests := []struct {
		name string
		json string
		want GenerationConfig
	}{
		{
			name: "qwen3 style",
			json: `{"bos_token_id":151643,"do_sample":true,"eos_token_id":[151645,151643],"pad_token_id":151643,"temperature":0.6,"top_k":20,"top_p":0.95,"transformers_version":"4.51.0"}`,
			want: GenerationConfig{BOSTokenID: ptr(151643), EOSTokenIDs: []int{151645, 151643}, PadTokenID: ptr(151643), DoSample: ptr(true), Temperature: ptr(0.6), TopK: ptr(20), TopP: ptr(0.95)},
		},
		{
			name: "every sampling key",
			json: `{"eos_token_id":7,"do_sample":false,"temperature":0,"min_p":0.05,"repetition_penalty":1.1,"max_new_tokens":256,"max_length":4096}`,
			want: GenerationConfig{EOSTokenIDs: []int{7}, DoSample: ptr(false), Temperature: ptr(0.0), MinP: ptr(0.05), RepetitionPenalty: ptr(1.1), MaxNewTokens: ptr(256), MaxLength: ptr(4096)},
		},
		{
			name: "nulls and duplicates",
			json: `{"bos_token_id":null,"eos_token_id":[1,1,2],"temperature":null}`,
			want: GenerationConfig{EOSTokenIDs: []int{1, 2}},
		},
		{
			name: "empty",
			json: `{}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := ParseGenerationConfig([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			json.Unmarshal([]byte(tt.json), &raw)
			tt.want.Raw = raw
			if diff := cmp.Diff(&tt.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	errs := []struct{ json, want string }{
		{`{"temperature":"hot"}`, `key "temperature": want a number`},
		{`{"top_k":-1}`, `key "top_k": want a non-negative integer`},
		{`{"do_sample":1}`, `key "do_sample": want true or false`},
		{`{"eos_token_id":{}}`, `key "eos_token_id"`},
		{`[`, "generation config"},
	}
	for _, tt := range errs {
		if _, err := ParseGenerationConfig([]byte(tt.json)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseGenerationConfig(%s) = %v, want error containing %q", tt.json, err, tt.want)
		}
	}

	dir := t.TempDir()
	g, err := LoadGenerationConfig(dir)
	if err != nil || g == nil || !cmp.Equal(*g, GenerationConfig{}) {
		t.Errorf("LoadGenerationConfig(no file) = %+v, %v, want the zero value", g, err)
	}
	path := filepath.Join(dir, "generation_config.json")
	if err := os.WriteFile(path, []byte(`{"top_p":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadGenerationConfig(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadGenerationConfig(bad) = %v, want an error naming %s", err, path)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{llama31, qwen25Yarn, phi3Long, gemma34b, gemma31b,
		`{"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"per_layer_config":{"1":{"head_dim":4}},"quantization":{"bits":4,"lm_head":false}}`,
		`{"vocab_size":10,"hidden_size":8,"num_hidden_layers":3,"sliding_window":4,"sliding_window_pattern":2,"rope_parameters":{"full_attention":{"rope_theta":5}}}`,
		`{"text_config":{"vocab_size":1}}`, `[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	if root := fixtures.Root(); root != "" {
		paths, _ := filepath.Glob(filepath.Join(root, "archs", "*", "config.json"))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("%d layer types for %d layers", len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i := -1; i <= c.NumHiddenLayers && i < 1000; i++ {
			_ = c.Rope(c.LayerType(i))
			_ = c.HeadDimFor(i) + c.KVHeadsFor(i) + c.IntermediateSizeFor(i)
			_ = c.UsesRope(i)
		}
		_, _ = c.Quantization.For("lm_head")
		_ = c.String()
		_, _ = ParseGenerationConfig(data)
	})
}

// FuzzQuantization fuzzes the "quantization" block of an MLX config.json
// (and quantization_config): what ParseConfig accepts writes back as a
// block that parses to the same Quantization.
func FuzzQuantization(f *testing.F) {
	for _, s := range []string{
		`{"group_size":64,"bits":4}`,
		`{"group_size":64,"bits":4,"mode":"affine","model.embed_tokens":{"group_size":32,"bits":8},"lm_head":false,"model.layers.0.mlp.gate":{"bits":8}}`,
		`{"group_size":32,"bits":4,"mode":"mxfp4"}`,
		`{"quant_method":"fp8","weight_block_size":[128,128]}`,
		`{"bits":"4"}`, `{"group_size":-1}`, `{"x":{"bits":[]}}`, `[]`, `null`, `{"a":true,"b":1}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"quant_method":"gptq","bits":4,"group_size":128}`), true)
	f.Fuzz(func(t *testing.T, block []byte, hf bool) {
		if !json.Valid(block) {
			return
		}
		key := "quantization"
		if hf {
			key = "quantization_config"
		}
		base := `{"vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"` + key + `":`
		c, err := ParseConfig([]byte(base + string(block) + `}`))
		if err != nil || c.Quantization == nil {
			return
		}
		q := c.Quantization
		out := map[string]any{"group_size": q.GroupSize, "bits": q.Bits}
		if q.Mode != "" {
			out["mode"] = q.Mode
		}
		if q.Method != "" {
			out["quant_method"] = q.Method
		}
		for m, p := range q.Modules {
			if p == nil {
				out[m] = false
				continue
			}
			if _, ok := q.For(m); !ok {
				t.Fatalf("module %q has parameters but For says it is not quantized", m)
			}
			out[m] = map[string]any{"group_size": p.GroupSize, "bits": p.Bits, "mode": p.Mode}
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig([]byte(base + string(again) + `}`))
		if err != nil {
			t.Fatalf("%s written back as %s: %v", block, again, err)
		}
		if diff := cmp.Diff(q, c2.Quantization); diff != "" {
			t.Fatalf("%s written back as %s (-first +second):\n%s", block, again, diff)
		}
	})
}

// FuzzParseGenerationConfig fuzzes generation_config.json: what it
// accepts has non-negative sizes and ids, and keeps every key in Raw.
func FuzzParseGenerationConfig(f *testing.F) {
	for _, s := range []string{
		`{"bos_token_id":1,"eos_token_id":[2,3],"pad_token_id":0,"do_sample":true,"temperature":0.6,"top_k":20,"top_p":0.95,"min_p":0,"repetition_penalty":1.1,"max_new_tokens":10,"max_length":100}`,
		`{"eos_token_id":-1,"bos_token_id":null}`, `{"top_k":-1}`, `{"temperature":"hot"}`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	if root := fixtures.Root(); root != "" {
		paths, _ := filepath.Glob(filepath.Join(root, "*", "*", "generation_config.json"))
		more, _ := filepath.Glob(filepath.Join(root, "*", "generation_config.json"))
		for _, p := range append(paths, more...) {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGenerationConfig(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "generation config: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		for _, p := range []*int{g.BOSTokenID, g.PadTokenID, g.TopK, g.MaxNewTokens, g.MaxLength} {
			if p != nil && *p < 0 {
				t.Fatalf("accepted a negative value %d", *p)
			}
		}
		for _, id := range g.EOSTokenIDs {
			if id < 0 {
				t.Fatalf("accepted eos id %d", id)
			}
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(data, &raw); err != nil || len(raw) != len(g.Raw) {
			t.Fatalf("Raw has %d keys, the object %d (%v)", len(g.Raw), len(raw), err)
		}
	})
}
