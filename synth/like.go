package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lem-engine/lem/safetensors"
)

// Geometry is the shape of a model to synthesise: the hyperparameters of a
// real checkpoint that decide its tensors, plus the config.json keys that
// only steer the forward pass (rope, windows, soft caps).
type Geometry struct {
	Name         string // the --like name, e.g. "llama-3.2-1b"
	ModelType    string // config.json model_type
	Architecture string // config.json architectures[0]

	VocabSize        int
	HiddenSize       int
	IntermediateSize int
	Layers           int
	Heads            int
	KVHeads          int
	HeadDim          int
	MaxPositions     int
	RMSNormEps       float64
	HiddenAct        string

	Tied          bool // lm_head shares the embedding table
	AttentionBias bool // q/k/v projections have biases (Qwen 2)
	QKNorm        bool // per-head RMSNorm of queries and keys (Qwen 3, Gemma 3)
	Gemma         bool // sandwich norms stored as w - 1 (so 0 means identity)

	// Gemma 4 (model type gemma4_text): PerLayerInput values of per-layer
	// input embedding for each layer (0: none), heads of GlobalHeadDim on
	// full-attention layers (0: HeadDim), and KVSharedLayers trailing
	// layers that attend over the keys and values of earlier ones, with
	// MLPs twice as wide when DoubleWideMLP. Its norms are plain weights.
	PerLayerInput  int
	GlobalHeadDim  int
	KVSharedLayers int
	DoubleWideMLP  bool

	// Linear, when set, makes the model a Qwen3.5-style hybrid: the layers
	// that layer_types (in Extra) marks "linear_attention" are Gated
	// DeltaNet layers of this shape, the others gated attention (the query
	// projection doubled for the output gate), and every RMSNorm scales by
	// 1 + w (so its weights are stored as zeros).
	Linear *LinearAttention

	// MoE, when set, replaces every layer's MLP by a mixture of experts
	// of this shape; OutputBias adds a bias to the attention output
	// projection and Sinks a learned sink logit per head (gpt-oss).
	MoE        *MoE
	OutputBias bool
	Sinks      bool

	// BOS, EOS and Pad are the special token ids of config.json; -1 or nil
	// when the model has none.
	BOS, Pad int
	EOS      []int

	// Extra holds the remaining config.json keys, as written.
	Extra map[string]any
	// Generation holds generation_config.json's keys other than the token
	// ids.
	Generation map[string]any
}

// LinearAttention is the shape of Gated DeltaNet layers.
type LinearAttention struct {
	KeyHeads, ValueHeads int
	KeyDim, ValueDim     int
	ConvKernel           int
}

// MoE is the shape of mixture-of-experts layers: Experts experts of width
// Inter, TopK of which each token runs.
type MoE struct {
	Experts, TopK, Inter int
	// Stacked selects gpt-oss's layout: a router mlp.router with a bias,
	// and each projection of all experts in one tensor, stored
	// input-major with gate and up columns interleaved, with biases.
	// Otherwise Qwen 3 MoE's: a router mlp.gate and one tensor per expert
	// and projection (mlp.experts.E.gate_proj.weight …).
	Stacked bool
}

// likes builds the geometries by name. Each returns a fresh value, so
// callers may modify what Like returns.
var likes = map[string]func() *Geometry{
	"tiny":           tiny,
	"small":          small,
	"llama-3.2-1b":   llama32_1b,
	"llama-3.1-8b":   llama31_8b,
	"qwen2.5-0.5b":   qwen25_05b,
	"qwen3-8b":       qwen3_8b,
	"gemma-3-1b":     gemma3_1b,
	"gemma-4-e2b":    gemma4_e2b,
	"qwen3.5-0.8b":   qwen35_08b,
	"qwen3-30b-a3b":  qwen3_30b_a3b,
	"gpt-oss-20b":    gptOss20b,
	"olmo-hybrid-7b": olmoHybrid7b,
}

// Likes returns the names Like accepts, sorted.
func Likes() []string { return slices.Sorted(maps.Keys(likes)) }

// Like returns the geometry of the named model (see Likes). Names are
// case-insensitive.
func Like(name string) (*Geometry, error) {
	f, ok := likes[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("unknown model %q to synthesise (known: %s)", name, strings.Join(Likes(), ", "))
	}
	return f(), nil
}

// llama3Rope is the rope of the Llama 3.1 and 3.2 families.
func llama3Rope(factor float64) map[string]any {
	return map[string]any{
		"rope_type":                        "llama3",
		"rope_theta":                       500000.0,
		"factor":                           factor,
		"low_freq_factor":                  1.0,
		"high_freq_factor":                 4.0,
		"original_max_position_embeddings": 8192,
	}
}

func defaultRope(theta float64) map[string]any {
	return map[string]any{"rope_type": "default", "rope_theta": theta}
}

func llama32_1b() *Geometry {
	return &Geometry{
		Name: "llama-3.2-1b", ModelType: "llama", Architecture: "LlamaForCausalLM",
		VocabSize: 128256, HiddenSize: 2048, IntermediateSize: 8192, Layers: 16,
		Heads: 32, KVHeads: 8, HeadDim: 64, MaxPositions: 131072,
		RMSNormEps: 1e-5, HiddenAct: "silu", Tied: true,
		BOS: 128000, EOS: []int{128001, 128008, 128009}, Pad: -1,
		Extra: map[string]any{
			"attention_bias": false, "mlp_bias": false, "pretraining_tp": 1,
			"rope_parameters": llama3Rope(32),
		},
		Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_p": 0.9},
	}
}

func llama31_8b() *Geometry {
	return &Geometry{
		Name: "llama-3.1-8b", ModelType: "llama", Architecture: "LlamaForCausalLM",
		VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336, Layers: 32,
		Heads: 32, KVHeads: 8, HeadDim: 128, MaxPositions: 131072,
		RMSNormEps: 1e-5, HiddenAct: "silu", Tied: false,
		BOS: 128000, EOS: []int{128001, 128008, 128009}, Pad: -1,
		Extra: map[string]any{
			"attention_bias": false, "mlp_bias": false, "pretraining_tp": 1,
			"rope_parameters": llama3Rope(8),
		},
		Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_p": 0.9},
	}
}

// fullLayers returns n "full_attention" layer types.
// fullEvery returns n layer types: full attention every k-th layer,
// other in between.
func fullEvery(n, k int, other string) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = other
		if (i+1)%k == 0 {
			t[i] = "full_attention"
		}
	}
	return t
}

func fullLayers(n int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = "full_attention"
	}
	return t
}

func qwen25_05b() *Geometry {
	return &Geometry{
		Name: "qwen2.5-0.5b", ModelType: "qwen2", Architecture: "Qwen2ForCausalLM",
		VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, Layers: 24,
		Heads: 14, KVHeads: 2, HeadDim: 64, MaxPositions: 32768,
		RMSNormEps: 1e-6, HiddenAct: "silu", Tied: true, AttentionBias: true,
		BOS: 151643, EOS: []int{151643}, Pad: -1,
		Extra: map[string]any{
			"use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 24,
			"layer_types":     fullLayers(24),
			"rope_parameters": defaultRope(1e6),
		},
		Generation: map[string]any{"do_sample": false, "max_new_tokens": 2048},
	}
}

func qwen3_8b() *Geometry {
	return &Geometry{
		Name: "qwen3-8b", ModelType: "qwen3", Architecture: "Qwen3ForCausalLM",
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 12288, Layers: 36,
		Heads: 32, KVHeads: 8, HeadDim: 128, MaxPositions: 40960,
		RMSNormEps: 1e-6, HiddenAct: "silu", Tied: false, QKNorm: true,
		BOS: 151643, EOS: []int{151645}, Pad: -1,
		Extra: map[string]any{
			"attention_bias": false, "use_sliding_window": false, "sliding_window": nil,
			"max_window_layers": 36, "layer_types": fullLayers(36),
			"rope_parameters": defaultRope(1e6),
		},
		Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95},
	}
}

func gemma3_1b() *Geometry {
	const layers = 26
	types := fullEvery(layers, 6, "sliding_attention")
	return &Geometry{
		Name: "gemma-3-1b", ModelType: "gemma3_text", Architecture: "Gemma3ForCausalLM",
		VocabSize: 262144, HiddenSize: 1152, IntermediateSize: 6912, Layers: layers,
		Heads: 4, KVHeads: 1, HeadDim: 256, MaxPositions: 32768,
		RMSNormEps: 1e-6, HiddenAct: "gelu_pytorch_tanh", Tied: true, QKNorm: true, Gemma: true,
		BOS: 2, EOS: []int{1, 106}, Pad: 0,
		Extra: map[string]any{
			"attention_bias": false, "query_pre_attn_scalar": 256, "sliding_window": 512,
			"_sliding_window_pattern": 6, "layer_types": types,
			"final_logit_softcapping": nil, "attn_logit_softcapping": nil,
			"use_bidirectional_attention": false,
			"rope_parameters": map[string]any{
				"full_attention":    defaultRope(1e6),
				"sliding_attention": defaultRope(1e4),
			},
		},
		Generation: map[string]any{"do_sample": true, "top_k": 64, "top_p": 0.95},
	}
}

// gemma4_e2b is the text decoder of Gemma 4 E2B: 35 layers in groups of
// four sliding-window layers and one global layer with heads twice as wide
// and a proportional rope; the last 20 layers share the keys and values of
// layers 13 and 14 and have MLPs twice as wide; every layer gets 256 values
// of per-layer embedding (a table of 2.3B parameters, next to 2.3B
// "effective" ones).
func gemma4_e2b() *Geometry {
	const layers = 35
	types := fullEvery(layers, 5, "sliding_attention")
	return &Geometry{
		Name: "gemma-4-e2b", ModelType: "gemma4_text", Architecture: "Gemma4ForCausalLM",
		VocabSize: 262144, HiddenSize: 1536, IntermediateSize: 6144, Layers: layers,
		Heads: 8, KVHeads: 1, HeadDim: 256, MaxPositions: 131072,
		RMSNormEps: 1e-6, HiddenAct: "gelu_pytorch_tanh", Tied: true, QKNorm: true,
		PerLayerInput: 256, GlobalHeadDim: 512, KVSharedLayers: 20, DoubleWideMLP: true,
		BOS: 2, EOS: []int{1, 106}, Pad: 0,
		Extra: map[string]any{
			"attention_bias": false, "attention_k_eq_v": false, "num_global_key_value_heads": nil,
			"enable_moe_block": false, "num_experts": nil, "top_k_experts": nil, "moe_intermediate_size": nil,
			"sliding_window": 512, "layer_types": types, "final_logit_softcapping": 30.0,
			"use_bidirectional_attention": nil,
			"rope_parameters": map[string]any{
				"full_attention":    map[string]any{"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
				"sliding_attention": defaultRope(1e4),
			},
		},
		Generation: map[string]any{"do_sample": true, "temperature": 1.0, "top_k": 64, "top_p": 0.95},
	}
}

// qwen35_08b is the text model of Qwen3.5-0.8B: three Gated DeltaNet
// layers to every gated attention layer.
func qwen35_08b() *Geometry {
	const layers = 24
	types := fullEvery(layers, 4, "linear_attention")
	return &Geometry{
		Name: "qwen3.5-0.8b", ModelType: "qwen3_5_text", Architecture: "Qwen3_5ForCausalLM",
		VocabSize: 248320, HiddenSize: 1024, IntermediateSize: 3584, Layers: layers,
		Heads: 8, KVHeads: 2, HeadDim: 256, MaxPositions: 262144,
		RMSNormEps: 1e-6, HiddenAct: "silu", Tied: true, QKNorm: true,
		Linear: &LinearAttention{KeyHeads: 16, ValueHeads: 16, KeyDim: 128, ValueDim: 128, ConvKernel: 4},
		BOS:    -1, EOS: []int{248044}, Pad: -1,
		Extra: map[string]any{
			"attention_bias": false, "attn_output_gate": true, "full_attention_interval": 4,
			"layer_types": types,
			"rope_parameters": map[string]any{
				"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
				"mrope_section": []int{11, 11, 10}, "mrope_interleaved": true,
			},
		},
		Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95},
	}
}

// olmoHybrid7b is OLMo Hybrid 7B (allenai/Olmo-Hybrid-7B): the defaults
// of transformers' OlmoHybridConfig, which documents that checkpoint.
// Three Gated DeltaNet layers (30 key and value heads of 96 and 192) to
// every attention layer (30 heads of 128, no rope, as the published
// checkpoints have rope_parameters null), untied embeddings.
func olmoHybrid7b() *Geometry {
	const layers = 32
	types := fullEvery(layers, 4, "linear_attention")
	return &Geometry{
		Name: "olmo-hybrid-7b", ModelType: "olmo_hybrid", Architecture: "OlmoHybridForCausalLM",
		VocabSize: 100352, HiddenSize: 3840, IntermediateSize: 11008, Layers: layers,
		Heads: 30, KVHeads: 30, HeadDim: 128, MaxPositions: 65536,
		RMSNormEps: 1e-6, HiddenAct: "silu",
		Linear: &LinearAttention{KeyHeads: 30, ValueHeads: 30, KeyDim: 96, ValueDim: 192, ConvKernel: 4},
		BOS:    -1, EOS: []int{100257}, Pad: 100277,
		Extra: map[string]any{
			"attention_bias": false, "layer_types": types, "rope_parameters": nil,
			"linear_allow_neg_eigval": true,
		},
	}
}

// qwen3_30b_a3b is Qwen3-30B-A3B: Qwen 3's attention, and on every layer
// 128 experts of width 768, of which a token runs 8.
func qwen3_30b_a3b() *Geometry {
	const layers = 48
	return &Geometry{
		Name: "qwen3-30b-a3b", ModelType: "qwen3_moe", Architecture: "Qwen3MoeForCausalLM",
		VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 6144, Layers: layers,
		Heads: 32, KVHeads: 4, HeadDim: 128, MaxPositions: 40960,
		RMSNormEps: 1e-6, HiddenAct: "silu", Tied: false, QKNorm: true,
		MoE: &MoE{Experts: 128, TopK: 8, Inter: 768},
		BOS: 151643, EOS: []int{151645}, Pad: -1,
		Extra: map[string]any{
			"attention_bias": false, "decoder_sparse_step": 1, "mlp_only_layers": []int{},
			"norm_topk_prob": true, "output_router_logits": false, "router_aux_loss_coef": 0.001,
			"use_sliding_window": false, "sliding_window": nil, "max_window_layers": layers,
			"rope_parameters": defaultRope(1e6),
		},
		Generation: map[string]any{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95},
	}
}

// gptOss20b is gpt-oss-20b with its experts in bf16 (the published
// checkpoint stores them in MXFP4): layers alternating between a window of
// 128 and full attention, attention sinks, and 32 experts of which a token
// runs 4.
func gptOss20b() *Geometry {
	const layers = 24
	types := make([]string, layers)
	for i := range types {
		types[i] = "sliding_attention"
		if i%2 == 1 {
			types[i] = "full_attention"
		}
	}
	return &Geometry{
		Name: "gpt-oss-20b", ModelType: "gpt_oss", Architecture: "GptOssForCausalLM",
		VocabSize: 201088, HiddenSize: 2880, IntermediateSize: 2880, Layers: layers,
		Heads: 64, KVHeads: 8, HeadDim: 64, MaxPositions: 131072,
		RMSNormEps: 1e-5, HiddenAct: "silu", Tied: false,
		AttentionBias: true, OutputBias: true, Sinks: true,
		MoE: &MoE{Experts: 32, TopK: 4, Inter: 2880, Stacked: true},
		BOS: 199998, EOS: []int{200002, 199999, 200012}, Pad: 199999,
		Extra: map[string]any{
			"attention_bias": true, "layer_types": types, "sliding_window": 128,
			"swiglu_limit": 7.0, "initial_context_length": 4096,
			"output_router_logits": false, "router_aux_loss_coef": 0.9,
			"rope_parameters": map[string]any{
				"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
				"beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": false,
			},
		},
		Generation: map[string]any{"do_sample": true},
	}
}

// tiny is a few-megabyte Qwen 3-style model over the built-in tokenizer,
// for end-to-end tests of serving, templates and benchmarking.
func tiny() *Geometry {
	return &Geometry{
		Name: "tiny", ModelType: "qwen3", Architecture: "Qwen3ForCausalLM",
		VocabSize: 512, HiddenSize: 256, IntermediateSize: 768, Layers: 4,
		Heads: 4, KVHeads: 2, HeadDim: 64, MaxPositions: 4096,
		RMSNormEps: 1e-6, HiddenAct: "silu", Tied: true, QKNorm: true,
		BOS: -1, Pad: -1, // set from the tokenizer
		Extra: map[string]any{
			"attention_bias": false, "use_sliding_window": false, "sliding_window": nil,
			"max_window_layers": 4, "layer_types": fullLayers(4),
			"rope_parameters": defaultRope(1e6),
		},
		Generation: map[string]any{"do_sample": false},
	}
}

// small is tiny widened to 8 layers of 512 (about 31M parameters): a
// model whose prefill takes a second or so on two CPU cores, for tests
// that must act in the middle of one.
func small() *Geometry {
	g := tiny()
	g.Name = "small"
	g.HiddenSize, g.IntermediateSize, g.Heads, g.KVHeads, g.Layers = 512, 2048, 8, 2, 8
	g.Extra["max_window_layers"], g.Extra["layer_types"] = 8, fullLayers(8)
	return g
}

// Init says how a tensor's values are drawn.
type Init uint8

const (
	Normal Init = iota // normal, standard deviation WeightStd
	Ones               // RMSNorm weights of most families
	Zeros              // Gemma's RMSNorm weights, stored as w - 1
)

// WeightStd is the standard deviation of the random weights, the usual
// initializer_range.
const WeightStd = 0.02

// TensorSpec is one tensor of a synthesised model.
type TensorSpec struct {
	Name  string
	Shape []int
	Init  Init
}

// Elements returns the number of values in the tensor.
func (t TensorSpec) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Tensors lists the model's tensors, named as the Hugging Face checkpoints
// of its family name them (and as lem's loaders look them up).
func (g *Geometry) Tensors() []TensorSpec {
	norm := Ones
	if g.Gemma || g.Linear != nil {
		norm = Zeros
	}
	hid, ff, hd := g.HiddenSize, g.IntermediateSize, g.HeadDim
	q, kv := g.Heads*hd, g.KVHeads*hd
	switch g.ModelType {
	case "gemma4_text":
		return g.gemma4Tensors()
	case "olmo_hybrid":
		return g.olmoHybridTensors()
	}
	qRows := q
	if g.Linear != nil {
		qRows = 2 * q // queries and the output gate
	}
	ts := []TensorSpec{{"model.embed_tokens.weight", []int{g.VocabSize, hid}, Normal}}
	for i := range g.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, init Init, shape ...int) {
			ts = append(ts, TensorSpec{p + name, shape, init})
		}
		add("input_layernorm.weight", norm, hid)
		if g.layerType(i) == "linear_attention" {
			g.Linear.tensors(add, hid)
			add("post_attention_layernorm.weight", norm, hid)
			add("mlp.gate_proj.weight", Normal, ff, hid)
			add("mlp.up_proj.weight", Normal, ff, hid)
			add("mlp.down_proj.weight", Normal, hid, ff)
			continue
		}
		add("self_attn.q_proj.weight", Normal, qRows, hid)
		add("self_attn.k_proj.weight", Normal, kv, hid)
		add("self_attn.v_proj.weight", Normal, kv, hid)
		if g.AttentionBias {
			add("self_attn.q_proj.bias", Normal, q)
			add("self_attn.k_proj.bias", Normal, kv)
			add("self_attn.v_proj.bias", Normal, kv)
		}
		if g.QKNorm {
			add("self_attn.q_norm.weight", norm, hd)
			add("self_attn.k_norm.weight", norm, hd)
		}
		add("self_attn.o_proj.weight", Normal, hid, q)
		if g.OutputBias {
			add("self_attn.o_proj.bias", Normal, hid)
		}
		if g.Sinks {
			add("self_attn.sinks", Normal, g.Heads)
		}
		add("post_attention_layernorm.weight", norm, hid)
		if g.Gemma {
			add("pre_feedforward_layernorm.weight", norm, hid)
			add("post_feedforward_layernorm.weight", norm, hid)
		}
		if g.MoE != nil {
			g.MoE.tensors(add, hid)
			continue
		}
		add("mlp.gate_proj.weight", Normal, ff, hid)
		add("mlp.up_proj.weight", Normal, ff, hid)
		add("mlp.down_proj.weight", Normal, hid, ff)
	}
	ts = append(ts, TensorSpec{"model.norm.weight", []int{hid}, norm})
	if !g.Tied {
		ts = append(ts, TensorSpec{"lm_head.weight", []int{g.VocabSize, hid}, Normal})
	}
	return ts
}

// gemma4Tensors lists the tensors of a Gemma 4 text decoder.
func (g *Geometry) gemma4Tensors() []TensorSpec {
	hid, p, n := g.HiddenSize, g.PerLayerInput, g.Layers
	types, _ := g.Extra["layer_types"].([]string)
	ts := []TensorSpec{{"model.embed_tokens.weight", []int{g.VocabSize, hid}, Normal}}
	if p > 0 {
		ts = append(ts,
			TensorSpec{"model.embed_tokens_per_layer.weight", []int{g.VocabSize, n * p}, Normal},
			TensorSpec{"model.per_layer_model_projection.weight", []int{n * p, hid}, Normal},
			TensorSpec{"model.per_layer_projection_norm.weight", []int{p}, Ones})
	}
	for i := range n {
		pre := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, init Init, shape ...int) {
			ts = append(ts, TensorSpec{pre + name, shape, init})
		}
		hd := g.HeadDim
		if g.GlobalHeadDim > 0 && i < len(types) && types[i] == "full_attention" {
			hd = g.GlobalHeadDim
		}
		shared := i >= n-g.KVSharedLayers
		ff := g.IntermediateSize
		if shared && g.DoubleWideMLP {
			ff *= 2
		}
		add("input_layernorm.weight", Ones, hid)
		add("self_attn.q_proj.weight", Normal, g.Heads*hd, hid)
		add("self_attn.q_norm.weight", Ones, hd)
		if !shared {
			add("self_attn.k_proj.weight", Normal, g.KVHeads*hd, hid)
			add("self_attn.v_proj.weight", Normal, g.KVHeads*hd, hid)
			add("self_attn.k_norm.weight", Ones, hd)
		}
		add("self_attn.o_proj.weight", Normal, hid, g.Heads*hd)
		add("post_attention_layernorm.weight", Ones, hid)
		add("pre_feedforward_layernorm.weight", Ones, hid)
		add("post_feedforward_layernorm.weight", Ones, hid)
		add("mlp.gate_proj.weight", Normal, ff, hid)
		add("mlp.up_proj.weight", Normal, ff, hid)
		add("mlp.down_proj.weight", Normal, hid, ff)
		if p > 0 {
			add("per_layer_input_gate.weight", Normal, p, hid)
			add("per_layer_projection.weight", Normal, hid, p)
			add("post_per_layer_input_norm.weight", Ones, hid)
		}
		add("layer_scalar", Ones, 1)
	}
	ts = append(ts, TensorSpec{"model.norm.weight", []int{hid}, Ones})
	if !g.Tied {
		ts = append(ts, TensorSpec{"lm_head.weight", []int{g.VocabSize, hid}, Normal})
	}
	return ts
}

// olmoHybridTensors lists the tensors of an OLMo Hybrid model: its Gated
// DeltaNet layers with q, k and v projected and convolved apart and an
// output gate g_proj, its attention layers normalised after attention and
// MLP, with q/k norms over the whole projection. Its norms are plain
// weights.
func (g *Geometry) olmoHybridTensors() []TensorSpec {
	hid, ff, l := g.HiddenSize, g.IntermediateSize, g.Linear
	q, kv := g.Heads*g.HeadDim, g.KVHeads*g.HeadDim
	ts := []TensorSpec{{"model.embed_tokens.weight", []int{g.VocabSize, hid}, Normal}}
	for i := range g.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, init Init, shape ...int) {
			ts = append(ts, TensorSpec{p + name, shape, init})
		}
		if g.layerType(i) == "linear_attention" {
			k, v := l.KeyHeads*l.KeyDim, l.ValueHeads*l.ValueDim
			add("attention_layer_norm.weight", Ones, hid)
			add("linear_attn.q_proj.weight", Normal, k, hid)
			add("linear_attn.k_proj.weight", Normal, k, hid)
			add("linear_attn.v_proj.weight", Normal, v, hid)
			add("linear_attn.q_conv1d.weight", Normal, k, 1, l.ConvKernel)
			add("linear_attn.k_conv1d.weight", Normal, k, 1, l.ConvKernel)
			add("linear_attn.v_conv1d.weight", Normal, v, 1, l.ConvKernel)
			add("linear_attn.g_proj.weight", Normal, v, hid)
			add("linear_attn.a_proj.weight", Normal, l.ValueHeads, hid)
			add("linear_attn.b_proj.weight", Normal, l.ValueHeads, hid)
			add("linear_attn.A_log", Normal, l.ValueHeads)
			add("linear_attn.dt_bias", Ones, l.ValueHeads)
			add("linear_attn.o_norm.weight", Ones, l.ValueDim)
			add("linear_attn.o_proj.weight", Normal, hid, v)
		} else {
			add("self_attn.q_proj.weight", Normal, q, hid)
			add("self_attn.k_proj.weight", Normal, kv, hid)
			add("self_attn.v_proj.weight", Normal, kv, hid)
			add("self_attn.q_norm.weight", Ones, q)
			add("self_attn.k_norm.weight", Ones, kv)
			add("self_attn.o_proj.weight", Normal, hid, q)
			add("post_feedforward_layernorm.weight", Ones, hid)
		}
		add("feedforward_layer_norm.weight", Ones, hid)
		add("mlp.gate_proj.weight", Normal, ff, hid)
		add("mlp.up_proj.weight", Normal, ff, hid)
		add("mlp.down_proj.weight", Normal, hid, ff)
	}
	ts = append(ts, TensorSpec{"model.norm.weight", []int{hid}, Ones})
	if !g.Tied {
		ts = append(ts, TensorSpec{"lm_head.weight", []int{g.VocabSize, hid}, Normal})
	}
	return ts
}

// layerType returns layer i's entry of layer_types in Extra, or
// "full_attention".
func (g *Geometry) layerType(i int) string {
	if types, ok := g.Extra["layer_types"].([]string); ok && i < len(types) {
		return types[i]
	}
	return "full_attention"
}

// tensors adds the tensors of a Gated DeltaNet layer, as Qwen3.5 names
// them.
func (l *LinearAttention) tensors(add func(name string, init Init, shape ...int), hid int) {
	conv := 2*l.KeyHeads*l.KeyDim + l.ValueHeads*l.ValueDim
	v := l.ValueHeads * l.ValueDim
	add("linear_attn.in_proj_qkv.weight", Normal, conv, hid)
	add("linear_attn.in_proj_z.weight", Normal, v, hid)
	add("linear_attn.in_proj_b.weight", Normal, l.ValueHeads, hid)
	add("linear_attn.in_proj_a.weight", Normal, l.ValueHeads, hid)
	add("linear_attn.conv1d.weight", Normal, conv, 1, l.ConvKernel)
	add("linear_attn.A_log", Normal, l.ValueHeads)
	add("linear_attn.dt_bias", Ones, l.ValueHeads)
	add("linear_attn.norm.weight", Ones, l.ValueDim)
	add("linear_attn.out_proj.weight", Normal, hid, v)
}

// tensors adds the tensors of a mixture-of-experts layer.
func (m *MoE) tensors(add func(name string, init Init, shape ...int), hid int) {
	e, ff := m.Experts, m.Inter
	if m.Stacked {
		add("mlp.router.weight", Normal, e, hid)
		add("mlp.router.bias", Normal, e)
		add("mlp.experts.gate_up_proj", Normal, e, hid, 2*ff)
		add("mlp.experts.gate_up_proj_bias", Normal, e, 2*ff)
		add("mlp.experts.down_proj", Normal, e, ff, hid)
		add("mlp.experts.down_proj_bias", Normal, e, hid)
		return
	}
	add("mlp.gate.weight", Normal, e, hid)
	for i := range e {
		p := fmt.Sprintf("mlp.experts.%d.", i)
		add(p+"gate_proj.weight", Normal, ff, hid)
		add(p+"up_proj.weight", Normal, ff, hid)
		add(p+"down_proj.weight", Normal, hid, ff)
	}
}

// params returns the parameters of one layer's routed experts.
func (m *MoE) params(hid int) int64 {
	n := 3 * int64(m.Inter) * int64(hid)
	if m.Stacked {
		n += 2*int64(m.Inter) + int64(hid) // the biases
	}
	return int64(m.Experts) * n
}

// ActiveParams returns the parameters one decoded token reads: all of
// them, except that of the token embedding (and Gemma's per-layer
// embeddings) only the token's row counts, and of each layer's experts
// only the TopK a token is routed to. A tied output projection counts the
// embedding table in full.
func (g *Geometry) ActiveParams() int64 {
	n := g.Params() - int64(g.VocabSize-1)*int64(g.HiddenSize)
	if g.Tied {
		n += int64(g.VocabSize) * int64(g.HiddenSize)
	}
	if g.PerLayerInput > 0 {
		n -= int64(g.VocabSize-1) * int64(g.Layers*g.PerLayerInput)
	}
	if m := g.MoE; m != nil {
		n -= int64(g.Layers) * m.params(g.HiddenSize) / int64(m.Experts) * int64(m.Experts-m.TopK)
	}
	return n
}

// DecodeBytes returns the bytes of weights that one decode step reads
// (ActiveParams) with the weights stored as d.
func (g *Geometry) DecodeBytes(d DType) int64 { return g.ActiveParams() * int64(d.Size()) }

// CutLayers keeps the first n layers of the geometry (the rest of its shape
// unchanged), for benchmarks of models too large to write whole. Layers
// that share the keys and values of earlier ones cannot be cut.
func (g *Geometry) CutLayers(n int) error {
	switch {
	case n <= 0 || n > g.Layers:
		return fmt.Errorf("cannot cut %s to %d layers: it has %d", g.Name, n, g.Layers)
	case n == g.Layers:
		return nil
	case g.KVSharedLayers > 0:
		return fmt.Errorf("cannot cut %s to fewer layers: its last %d layers share the KV caches of earlier ones", g.Name, g.KVSharedLayers)
	}
	g.Layers = n
	if types, ok := g.Extra["layer_types"].([]string); ok {
		g.Extra["layer_types"] = types[:n]
	}
	if w, ok := g.Extra["max_window_layers"].(int); ok {
		g.Extra["max_window_layers"] = min(w, n)
	}
	return nil
}

// Params returns the number of parameters (a tied output projection counted
// once).
func (g *Geometry) Params() int64 {
	var n int64
	for _, t := range g.Tensors() {
		n += t.Elements()
	}
	return n
}

// DType is the storage type of the synthesised weights.
type DType struct {
	Name   string            // "bf16", "f16" or "f32"
	ST     safetensors.DType // as the safetensors header spells it
	Config string            // as config.json spells it
}

// Size returns the bytes of one value.
func (d DType) Size() int { return d.ST.Size() }

var dtypes = []DType{
	{"bf16", safetensors.BF16, "bfloat16"},
	{"f16", safetensors.F16, "float16"},
	{"f32", safetensors.F32, "float32"},
}

// ParseDType accepts bf16, f16 and f32 (and bfloat16, float16, float32),
// case-insensitively.
func ParseDType(s string) (DType, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, d := range dtypes {
		if s == d.Name || s == d.Config {
			return d, nil
		}
	}
	return DType{}, fmt.Errorf("unknown dtype %q (want bf16, f16 or f32)", s)
}

// Bytes returns the size of the weights stored as dtype.
func (g *Geometry) Bytes(d DType) int64 { return g.Params() * int64(d.Size()) }

// Config returns config.json's contents in the transformers 5 layout
// (rope_parameters, layer_types), keys sorted as save_pretrained sorts them.
func (g *Geometry) Config(d DType) ([]byte, error) {
	c := map[string]any{
		"architectures":           []string{g.Architecture},
		"model_type":              g.ModelType,
		"dtype":                   d.Config,
		"vocab_size":              g.VocabSize,
		"hidden_size":             g.HiddenSize,
		"intermediate_size":       g.IntermediateSize,
		"num_hidden_layers":       g.Layers,
		"num_attention_heads":     g.Heads,
		"num_key_value_heads":     g.KVHeads,
		"head_dim":                g.HeadDim,
		"max_position_embeddings": g.MaxPositions,
		"rms_norm_eps":            g.RMSNormEps,
		"tie_word_embeddings":     g.Tied,
		"initializer_range":       WeightStd,
		"attention_dropout":       0.0,
		"use_cache":               true,
	}
	if strings.HasPrefix(g.ModelType, "gemma") {
		c["hidden_activation"] = g.HiddenAct
	} else {
		c["hidden_act"] = g.HiddenAct
	}
	if g.ModelType == "gemma4_text" {
		c["hidden_size_per_layer_input"] = g.PerLayerInput
		c["vocab_size_per_layer_input"] = g.VocabSize
		c["global_head_dim"] = g.GlobalHeadDim
		c["num_kv_shared_layers"] = g.KVSharedLayers
		c["use_double_wide_mlp"] = g.DoubleWideMLP
	}
	if m := g.MoE; m != nil {
		if m.Stacked && m.Inter != g.IntermediateSize {
			return nil, fmt.Errorf("%s: stacked experts of width %d, but intermediate_size %d gives their width", g.Name, m.Inter, g.IntermediateSize)
		}
		c["num_experts_per_tok"] = m.TopK
		if m.Stacked {
			c["num_local_experts"] = m.Experts
		} else {
			c["num_experts"] = m.Experts
			c["moe_intermediate_size"] = m.Inter
		}
	}
	if l := g.Linear; l != nil {
		c["linear_num_key_heads"] = l.KeyHeads
		c["linear_num_value_heads"] = l.ValueHeads
		c["linear_key_head_dim"] = l.KeyDim
		c["linear_value_head_dim"] = l.ValueDim
		c["linear_conv_kernel_dim"] = l.ConvKernel
	}
	maps.Copy(c, g.Extra)
	ids(c, g.BOS, g.EOS, g.Pad)
	return marshal(c)
}

// GenerationConfig returns generation_config.json's contents.
func (g *Geometry) GenerationConfig() ([]byte, error) {
	c := map[string]any{}
	maps.Copy(c, g.Generation)
	ids(c, g.BOS, g.EOS, g.Pad)
	return marshal(c)
}

// ids sets the special token keys that the geometry has.
func ids(c map[string]any, bos int, eos []int, pad int) {
	if bos >= 0 {
		c["bos_token_id"] = bos
	}
	switch len(eos) {
	case 0:
	case 1:
		c["eos_token_id"] = eos[0]
	default:
		c["eos_token_id"] = eos
	}
	if pad >= 0 {
		c["pad_token_id"] = pad
	}
}

// marshal encodes v as indented JSON without escaping <, > and &, which
// special tokens and chat templates are full of.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return b.Bytes(), nil
}

// jsonString returns s as a JSON string, without HTML escaping.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // cannot fail for a string
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
