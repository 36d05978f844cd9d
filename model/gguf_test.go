package model

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
)

// TestPermuteRows checks the permutation against llama.cpp's converter
// written out as index arithmetic: rows reshaped to (heads, 2, n/2) with the
// last two axes swapped.
func TestPermuteRows(t *testing.T) {
	tests := []struct{ rows, heads, rowBytes int }{
		{8, 1, 1}, {16, 4, 3}, {32, 2, 34}, {12, 3, 2},
	}
	for _, tc := range tests {
		src := make([]byte, tc.rows*tc.rowBytes)
		for i := range src {
			src[i] = byte(i*7 + i/tc.rowBytes)
		}
		got, err := PermuteRows(src, tc.rows, tc.rowBytes, tc.heads, false)
		if err != nil {
			t.Fatal(err)
		}
		per := tc.rows / tc.heads
		for h := range tc.heads {
			for a := range 2 {
				for j := range per / 2 {
					// source index (h, a, j) of shape (heads, 2, per/2) lands at
					// (h, j, a) of shape (heads, per/2, 2).
					from := h*per + a*(per/2) + j
					to := h*per + j*2 + a
					if !bytes.Equal(got[to*tc.rowBytes:][:tc.rowBytes], src[from*tc.rowBytes:][:tc.rowBytes]) {
						t.Fatalf("%+v: row %d is not source row %d", tc, to, from)
					}
				}
			}
		}
		back, err := PermuteRows(got, tc.rows, tc.rowBytes, tc.heads, true)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("%+v: inverse does not restore the rows", tc)
		}
	}
	if _, err := PermuteRows(make([]byte, 6), 6, 1, 4, false); err == nil {
		t.Error("6 rows over 4 heads accepted")
	}
	if _, err := PermuteRows(make([]byte, 6), 6, 1, 2, false); err == nil {
		t.Error("odd rows per head accepted")
	}
}

func TestGGUFNames(t *testing.T) {
	tests := []struct{ arch, hf, want string }{
		{"llama", "model.embed_tokens.weight", "token_embd.weight"},
		{"llama", "lm_head.weight", "output.weight"},
		{"llama", "model.norm.weight", "output_norm.weight"},
		{"llama", "model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
		{"llama", "model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight"},
		{"qwen2", "model.layers.11.self_attn.k_proj.bias", "blk.11.attn_k.bias"},
		{"qwen3", "model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
		{"phi3", "model.layers.1.self_attn.qkv_proj.weight", "blk.1.attn_qkv.weight"},
		{"phi3", "model.layers.1.mlp.gate_up_proj.weight", "blk.1.ffn_up.weight"},
		{"gemma2", "model.layers.4.post_attention_layernorm.weight", "blk.4.post_attention_norm.weight"},
		{"gemma2", "model.layers.4.pre_feedforward_layernorm.weight", "blk.4.ffn_norm.weight"},
		{"gemma3", "model.layers.4.post_feedforward_layernorm.weight", "blk.4.post_ffw_norm.weight"},
		{"olmo2", "model.layers.0.post_attention_layernorm.weight", "blk.0.post_attention_norm.weight"},
		{"llama", "model.layers.x.self_attn.q_proj.weight", ""},
		{"llama", "vision_tower.blocks.0.weight", ""},
	}
	for _, tc := range tests {
		got, ok := ggufName(*archByGGUF[tc.arch].Tensors, tc.hf)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s %s → %q, %v; want %q", tc.arch, tc.hf, got, ok, tc.want)
		}
	}
}

// writeGGUF builds a GGUF file in memory from metadata and F32 tensors.
func writeGGUF(t *testing.T, kv []gguf.KV, tensors map[string][]int64, types map[string]gguf.Type) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, e := range kv {
		if err := w.SetKV(e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		typ := gguf.F32
		if tt, ok := types[n]; ok {
			typ = tt
		}
		size, err := typ.RowBytes(int(tensors[n][0]))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tensors[n][1:] {
			size *= int(d)
		}
		if err := w.AddTensor(n, typ, tensors[n], make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("test.gguf", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// tinyLlama returns the metadata and tensors of a two-layer llama GGUF.
func tinyLlama() ([]gguf.KV, map[string][]int64) {
	kv := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("llama")},
		{Key: "llama.block_count", Value: gguf.Uint32(2)},
		{Key: "llama.embedding_length", Value: gguf.Uint32(32)},
		{Key: "llama.feed_forward_length", Value: gguf.Uint32(64)},
		{Key: "llama.attention.head_count", Value: gguf.Uint32(4)},
		{Key: "llama.attention.head_count_kv", Value: gguf.Uint32(2)},
		{Key: "llama.context_length", Value: gguf.Uint32(128)},
		{Key: "llama.rope.freq_base", Value: gguf.Float32(500000)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.Float32(1e-5)},
	}
	tensors := map[string][]int64{
		"token_embd.weight":  {32, 50},
		"output_norm.weight": {32},
	}
	for i := range 2 {
		p := "blk." + string(rune('0'+i)) + "."
		tensors[p+"attn_norm.weight"] = []int64{32}
		tensors[p+"ffn_norm.weight"] = []int64{32}
		tensors[p+"attn_q.weight"] = []int64{32, 32}
		tensors[p+"attn_k.weight"] = []int64{32, 16}
		tensors[p+"attn_v.weight"] = []int64{32, 16}
		tensors[p+"attn_output.weight"] = []int64{32, 32}
		tensors[p+"ffn_gate.weight"] = []int64{32, 64}
		tensors[p+"ffn_up.weight"] = []int64{32, 64}
		tensors[p+"ffn_down.weight"] = []int64{64, 32}
	}
	return kv, tensors
}

// countingBackend fails the test on any allocation: GGUF problems must be
// found before a model is built.
type countingBackend struct {
	compute.Backend
	t *testing.T
}

func (c countingBackend) Weight(compute.DType, []int, []byte) (*compute.Tensor, error) {
	c.t.Error("Weight called")
	return nil, nil
}

func (c countingBackend) Alloc(compute.DType, ...int) *compute.Tensor {
	c.t.Error("Alloc called")
	return &compute.Tensor{}
}

func TestReadGGUF(t *testing.T) {
	kv, tensors := tinyLlama()
	g, err := ReadGGUF(writeGGUF(t, kv, tensors, nil), GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config
	if c.ModelType != "llama" || c.NumHiddenLayers != 2 || c.HiddenSize != 32 || c.NumAttentionHeads != 4 ||
		c.NumKeyValueHeads != 2 || c.HeadDim != 8 || c.VocabSize != 50 || !c.TieWordEmbeddings ||
		c.MaxPositionEmbeddings != 128 || c.RopeParams.Theta != 500000 || !c.RopeParams.Interleaved {
		t.Errorf("config: %+v", c)
	}
	s, ok := g.Lookup("model.layers.1.self_attn.k_proj.weight")
	if !ok || !slices.Equal(s.Shape, []int{16, 32}) || s.DType != compute.F32 {
		t.Errorf("k_proj: %v %v %v", ok, s.Shape, s.DType)
	}
	if _, ok := g.Lookup("lm_head.weight"); ok {
		t.Error("lm_head of a tied model found")
	}
}

// TestReadGGUFRejects checks that files lem cannot run are refused before
// anything is allocated, with errors naming the architecture, key or
// tensors at fault.
func TestReadGGUFRejects(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(kv []gguf.KV, tensors map[string][]int64, types map[string]gguf.Type) []gguf.KV
		wants []string
	}{
		{"unknown architecture", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			kv[0].Value = gguf.String("mamba")
			return kv
		}, []string{`"mamba"`, "llama"}},
		{"no architecture", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			return kv[1:]
		}, []string{"general.architecture"}},
		{"tensor type", func(kv []gguf.KV, tensors map[string][]int64, types map[string]gguf.Type) []gguf.KV {
			tensors["blk.0.attn_q.weight"] = []int64{256, 32}
			tensors["blk.1.ffn_up.weight"] = []int64{256, 64}
			types["blk.0.attn_q.weight"] = gguf.IQ2_XXS
			types["blk.1.ffn_up.weight"] = gguf.TQ1_0
			return kv
		}, []string{"blk.0.attn_q.weight (IQ2_XXS)", "blk.1.ffn_up.weight (TQ1_0)"}},
		{"unknown tensor", func(kv []gguf.KV, tensors map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			tensors["blk.0.ffn_gate_exps.weight"] = []int64{32, 64, 4}
			return kv
		}, []string{"blk.0.ffn_gate_exps.weight"}},
		{"missing key", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			return slices.DeleteFunc(kv, func(e gguf.KV) bool { return e.Key == "llama.attention.head_count" })
		}, []string{"llama.attention.head_count"}},
		{"bad heads", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			kv = append(kv, gguf.KV{Key: "llama.attention.key_length", Value: gguf.Uint32(8)})
			for i := range kv {
				if kv[i].Key == "llama.attention.head_count_kv" {
					kv[i].Value = gguf.Uint32(3)
				}
			}
			return kv
		}, []string{"head_count_kv"}},
		{"wrong key type", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			for i := range kv {
				if kv[i].Key == "llama.block_count" {
					kv[i].Value = gguf.String("two")
				}
			}
			return kv
		}, []string{"llama.block_count"}},
		{"no embeddings", func(kv []gguf.KV, tensors map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			delete(tensors, "token_embd.weight")
			return kv
		}, []string{"token_embd.weight"}},
		{"rope scaling", func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
			return append(kv, gguf.KV{Key: "llama.rope.scaling.type", Value: gguf.String("su-perb")})
		}, []string{"su-perb"}},
		{"negative eps", setKV("llama.attention.layer_norm_rms_epsilon", gguf.Float32(-1e-6)),
			[]string{"key llama.attention.layer_norm_rms_epsilon: must be positive, got -1e-06"}},
		{"zero eps", setKV("llama.attention.layer_norm_rms_epsilon", gguf.Float32(0)),
			[]string{"key llama.attention.layer_norm_rms_epsilon: must be positive, got 0"}},
		{"NaN eps", setKV("llama.attention.layer_norm_rms_epsilon", gguf.Float32(float32(math.NaN()))),
			[]string{"key llama.attention.layer_norm_rms_epsilon: want a finite number"}},
		{"eps below float32", setKV("llama.attention.layer_norm_rms_epsilon", gguf.Float64(1e-50)),
			[]string{"key llama.attention.layer_norm_rms_epsilon: 1e-50 is out of float32 range"}},
		{"eos outside vocab", setKV("tokenizer.ggml.eos_token_id", gguf.Uint32(50)),
			[]string{"key tokenizer.ggml.eos_token_id: token id 50 is outside the vocabulary (50 rows in token_embd.weight)"}},
		{"bos outside vocab", setKV("tokenizer.ggml.bos_token_id", gguf.Uint32(1<<31)),
			[]string{"key tokenizer.ggml.bos_token_id: token id 2147483648"}},
		{"eot outside vocab", setKV("tokenizer.ggml.eot_token_id", gguf.Int32(128009)),
			[]string{"key tokenizer.ggml.eot_token_id: token id 128009"}},
		{"padding outside vocab", setKV("tokenizer.ggml.padding_token_id", gguf.Uint32(60)),
			[]string{"key tokenizer.ggml.padding_token_id: token id 60"}},
		{"zero heads", setKV("llama.attention.head_count", gguf.Uint32(0)), []string{"llama.attention.head_count is 0"}},
		{"zero kv heads", setKV("llama.attention.head_count_kv", gguf.Uint32(0)), []string{"llama.attention.head_count_kv"}},
		{"more kv heads than heads", setKV("llama.attention.head_count_kv", gguf.Uint32(8)), []string{"llama.attention.head_count_kv"}},
		{"zero layers", setKV("llama.block_count", gguf.Uint32(0)), []string{"llama.block_count is 0"}},
		{"zero hidden", setKV("llama.embedding_length", gguf.Uint32(0)), []string{"llama.embedding_length is 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv, tensors := tinyLlama()
			types := map[string]gguf.Type{}
			kv = tc.edit(kv, tensors, types)
			f := writeGGUF(t, kv, tensors, types)
			_, err := ReadGGUF(f, GGUFOptions{})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			// The loading path refuses the file before touching the backend.
			if _, err := LoadGGUF(f, countingBackend{t: t}, GGUFOptions{}); err == nil {
				t.Error("LoadGGUF accepted")
			}
		})
	}
}

// setKV returns an edit for TestReadGGUFRejects that sets key to v.
func setKV(key string, v gguf.Value) func([]gguf.KV, map[string][]int64, map[string]gguf.Type) []gguf.KV {
	return func(kv []gguf.KV, _ map[string][]int64, _ map[string]gguf.Type) []gguf.KV {
		for i := range kv {
			if kv[i].Key == key {
				kv[i].Value = v
				return kv
			}
		}
		return append(kv, gguf.KV{Key: key, Value: v})
	}
}

// TestGGUFLayoutRoundTrip writes the metadata of every dense fixture's
// config and reads it back: the hyperparameters, sliding layers and rope
// frequencies the model is built from come out the same.
func TestGGUFLayoutRoundTrip(t *testing.T) {
	for _, name := range []string{"llama", "llama3-rope", "mistral", "qwen2", "qwen2-yarn", "qwen3", "phi3", "gemma2", "gemma3_text"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(fixtures.Dir(t, "archs", name))
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewGGUFLayout(cfg)
			if err != nil {
				t.Fatal(err)
			}
			kv := append([]gguf.KV{{Key: "general.architecture", Value: gguf.String(l.Arch)}}, l.KV...)
			tensors := map[string][]int64{"token_embd.weight": {int64(cfg.HiddenSize), int64(cfg.VocabSize)}}
			if !cfg.TieWordEmbeddings {
				tensors["output.weight"] = []int64{int64(cfg.HiddenSize), int64(cfg.VocabSize)}
			}
			w := gguf.NewWriter()
			for _, e := range kv {
				if err := w.SetKV(e.Key, e.Value); err != nil {
					t.Fatal(err)
				}
			}
			for n, d := range tensors {
				if err := w.AddTensor(n, gguf.F32, d, make([]byte, 4*d[0]*d[1])); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range l.Extra {
				if err := w.AddTensor(e.Name, gguf.F32, e.Dims, f32Bytes(e.Data)); err != nil {
					t.Fatal(err)
				}
			}
			var b bytes.Buffer
			if _, err := w.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Parse(name, b.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			g, err := ReadGGUF(f, GGUFOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := g.Config
			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"layers", got.NumHiddenLayers, cfg.NumHiddenLayers},
				{"hidden", got.HiddenSize, cfg.HiddenSize},
				{"ff", got.IntermediateSize, cfg.IntermediateSize},
				{"heads", got.NumAttentionHeads, cfg.NumAttentionHeads},
				{"kv heads", got.NumKeyValueHeads, cfg.NumKeyValueHeads},
				{"head dim", got.HeadDim, cfg.HeadDim},
				{"vocab", got.VocabSize, cfg.VocabSize},
				{"context", got.MaxPositionEmbeddings, cfg.MaxPositionEmbeddings},
				{"eps", float32(got.RMSNormEps), float32(cfg.RMSNormEps)},
				{"act", got.HiddenAct, cfg.HiddenAct},
				{"final cap", float32(got.FinalLogitSoftcapping), float32(cfg.FinalLogitSoftcapping)},
				{"attn cap", float32(got.AttnLogitSoftcapping), float32(cfg.AttnLogitSoftcapping)},
				{"layer types", got.LayerTypes, cfg.LayerTypes},
				{"tied", got.TieWordEmbeddings, cfg.TieWordEmbeddings},
			} {
				if !equalAny(c.got, c.want) {
					t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
				}
			}
			if cfg.QueryPreAttnScalar > 0 && math.Abs(got.QueryPreAttnScalar-cfg.QueryPreAttnScalar) > 1e-3*cfg.QueryPreAttnScalar {
				t.Errorf("query_pre_attn_scalar: got %g, want %g", got.QueryPreAttnScalar, cfg.QueryPreAttnScalar)
			}
			if slices.Contains(cfg.LayerTypes, SlidingAttention) && got.SlidingWindow != cfg.SlidingWindow {
				t.Errorf("window: got %d, want %d", got.SlidingWindow, cfg.SlidingWindow)
			}
			for _, lt := range []string{FullAttention, SlidingAttention} {
				want, err := NewRope(cfg.Rope(lt), cfg.HeadDim, cfg.MaxPositionEmbeddings)
				if err != nil {
					t.Fatal(err)
				}
				have, err := NewRope(got.Rope(lt), got.HeadDim, got.MaxPositionEmbeddings)
				if err != nil {
					t.Fatal(err)
				}
				if have.Dims != want.Dims || math.Abs(float64(have.Scale-want.Scale)) > 1e-6 {
					t.Errorf("%s rope: dims %d scale %g, want %d %g", lt, have.Dims, have.Scale, want.Dims, want.Scale)
				}
				for i := range want.InvFreq {
					if d := math.Abs(float64(have.InvFreq[i]-want.InvFreq[i])) / float64(want.InvFreq[i]); d > 1e-6 {
						t.Errorf("%s rope: frequency %d is %g, want %g", lt, i, have.InvFreq[i], want.InvFreq[i])
					}
				}
				if have.Interleaved != (l.Arch == "llama") {
					t.Errorf("%s rope: interleaved %v for %s", lt, have.Interleaved, l.Arch)
				}
			}
		})
	}
}

func equalAny(a, b any) bool {
	if as, ok := a.([]string); ok {
		return slices.Equal(as, b.([]string))
	}
	return a == b
}

// TestGGUFLayoutRejects checks configs GGUF cannot express.
func TestGGUFLayoutRejects(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"model type", `{"model_type":"jamba","vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1}`, "jamba"},
		{"time step limit", `{"model_type":"mamba2","vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_heads":2,"head_dim":8,"state_size":4,"expand":2,"conv_kernel":4,"time_step_limit":[0.001,0.1]}`, "time_step_limit"},
		{"dense qwen3moe layer", `{"model_type":"qwen3_moe","vocab_size":8,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":1,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":4,"mlp_only_layers":[1]}`, "layer 1"},
		{"swiglu limit", `{"model_type":"gpt_oss","vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"num_local_experts":4,"num_experts_per_tok":2,"swiglu_limit":5}`, "swiglu_limit"},
		{"rope", `{"model_type":"llama","vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"rope_scaling":{"rope_type":"proportional","factor":2}}`, "proportional"},
	} {
		cfg, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewGGUFLayout(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestGGUFLayoutWarnings checks that writing a config llama.cpp cannot
// represent warns, naming the config key, and that representable configs
// do not.
func TestGGUFLayoutWarnings(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		json    string // used when fixture is empty
		want    []string
	}{
		// llama.cpp ignores the window of llama (mistral), phi3 (since May
		// 2025) and qwen3moe, qwen3moe's expert_weights_norm, gemma's
		// attention.scale, and gemma3's freq_base_swa and pattern.
		{fixture: "phi3", want: []string{"sliding_window 8", "phi3.attention.sliding_window"}},
		{fixture: "mistral", want: []string{"sliding_window 8", "llama.attention.sliding_window"}},
		{fixture: "qwen3_moe", want: []string{"norm_topk_prob", "sliding_window"}},
		{fixture: "gemma3_text", want: []string{"query_pre_attn_scalar 256", "gemma3.attention.scale"}},
		{fixture: "gemma2", want: []string{"query_pre_attn_scalar 256", "gemma2.attention.scale"}},
		{json: `{"model_type":"gemma3_text","vocab_size":8,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"sliding_window":8,"rope_parameters":{"full_attention":{"rope_theta":1e6},"sliding_attention":{"rope_theta":2e4}}}`,
			want: []string{"rope_theta 20000", "gemma3.rope.freq_base_swa"}},
		{json: `{"model_type":"gemma3_text","vocab_size":8,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"sliding_window":8,"layer_types":["full_attention","sliding_attention"]}`,
			want: []string{"layer_types", "gemma3.attention.sliding_window_pattern"}},
		{fixture: "llama"},
		{fixture: "qwen2"},
		{fixture: "qwen3"},
		{fixture: "gpt_oss"},
		{json: `{"model_type":"phi3","vocab_size":8,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1}`},
		{json: `{"model_type":"gemma3_text","vocab_size":8,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"query_pre_attn_scalar":16,"sliding_window":8}`},
		// The 27B's 62 layers take hidden_size/heads in llama.cpp.
		{json: `{"model_type":"gemma3_text","vocab_size":8,"hidden_size":64,"num_hidden_layers":62,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,"query_pre_attn_scalar":32,"sliding_window":8}`},
	} {
		name := tc.fixture
		var cfg *Config
		var err error
		if name != "" {
			cfg, err = LoadConfig(fixtures.Dir(t, "archs", name))
		} else {
			name = tc.json
			cfg, err = ParseConfig([]byte(tc.json))
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l, err := NewGGUFLayout(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		all := strings.Join(l.Warnings, "\n")
		if len(tc.want) == 0 && len(l.Warnings) > 0 {
			t.Errorf("%s: unexpected warnings %q", name, l.Warnings)
		}
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: no warning names %q; warnings: %q", name, w, l.Warnings)
			}
		}
	}
}

// fuzzGGUF writes a GGUF file of the llama tensor layout from a fuzzed
// geometry: sizes are taken modulo small bounds so that the file stays a
// few KB, drop leaves out metadata keys (bits 0-9) and tensors (bits
// 10-15), typ picks the matrices' type, and key (under the architecture)
// carries val. It returns nil when the Writer refuses the combination.
func fuzzGGUF(arch string, layers, hidden, ff, heads, kvHeads, keyLen, vocab uint8, eps float32, bos, eos int32, drop uint16, typ uint8, key string, val float32) []byte {
	nl, h, nf, nv := int64(layers%4), int64(hidden%48), int64(ff%48), int64(vocab%48)
	nh, nkv, kl := int64(heads%9), int64(kvHeads%9), int64(keyLen%33)
	meta := []gguf.KV{
		{Key: arch + ".block_count", Value: gguf.Uint32(uint32(nl))},
		{Key: arch + ".embedding_length", Value: gguf.Uint32(uint32(h))},
		{Key: arch + ".feed_forward_length", Value: gguf.Uint32(uint32(nf))},
		{Key: arch + ".attention.head_count", Value: gguf.Uint32(uint32(nh))},
		{Key: arch + ".attention.head_count_kv", Value: gguf.Uint32(uint32(nkv))},
		{Key: arch + ".attention.key_length", Value: gguf.Uint32(uint32(kl))},
		{Key: arch + ".attention.layer_norm_rms_epsilon", Value: gguf.Float32(eps)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Int32(bos)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Int32(eos)},
		{Key: arch + ".context_length", Value: gguf.Uint32(64)},
	}
	w := gguf.NewWriter()
	if w.SetKV("general.architecture", gguf.String(arch)) != nil {
		return nil
	}
	for i, e := range meta {
		if drop&(1<<i) == 0 && w.SetKV(e.Key, e.Value) != nil {
			return nil
		}
	}
	if key != "" {
		v := gguf.Float32(val)
		if val >= 0 && val < 1<<20 && val == float32(int(val)) {
			v = gguf.Uint32(uint32(val))
		}
		if w.SetKV(arch+"."+key, v) != nil {
			return nil
		}
	}
	if kl == 0 && nh > 0 {
		kl = h / nh
	}
	mat := []gguf.Type{gguf.F16, gguf.F32, gguf.BF16, gguf.Q8_0, gguf.Q4_K}[typ%5]
	add := func(bit int, name string, t gguf.Type, dims ...int64) bool {
		if drop&(1<<bit) != 0 {
			return true
		}
		size, err := t.RowBytes(int(dims[0]))
		if err != nil {
			return false
		}
		for _, d := range dims[1:] {
			size *= int(d)
		}
		return w.AddTensor(name, t, dims, make([]byte, size)) == nil
	}
	ok := add(10, "token_embd.weight", gguf.F16, h, nv) && add(11, "output_norm.weight", gguf.F32, h)
	for l := range nl {
		p := fmt.Sprintf("blk.%d.", l)
		ok = ok && add(12, p+"attn_norm.weight", gguf.F32, h) && add(12, p+"ffn_norm.weight", gguf.F32, h) &&
			add(13, p+"attn_q.weight", mat, h, nh*kl) && add(13, p+"attn_k.weight", mat, h, nkv*kl) &&
			add(13, p+"attn_v.weight", mat, h, nkv*kl) && add(14, p+"attn_output.weight", mat, nh*kl, h) &&
			add(15, p+"ffn_gate.weight", mat, h, nf) && add(15, p+"ffn_up.weight", mat, h, nf) && add(15, p+"ffn_down.weight", mat, nf, h)
	}
	var b bytes.Buffer
	if !ok {
		return nil
	}
	if _, err := w.WriteTo(&b); err != nil {
		return nil
	}
	return b.Bytes()
}

// FuzzReadGGUF checks that whatever GGUF file ReadGGUF accepts has a
// configuration a model can be built from (positive sizes, heads that
// group, a positive epsilon, special ids inside the vocabulary) and
// tensors whose bytes match their shapes, and that what it refuses comes
// back as an error naming the file. It fuzzes the geometry and metadata
// of a file (fuzzGGUF) rather than its bytes: package gguf's FuzzParse
// covers the byte format, and a file of a few KB as one []byte input
// would spend CI's seconds in the fuzzer's quadratic minimization.
func FuzzReadGGUF(f *testing.F) {
	type seed struct {
		arch                                            string
		layers, hidden, ff, heads, kvHeads, keyLen, voc uint8
		eps                                             float32
		bos, eos                                        int32
		drop                                            uint16
		typ                                             uint8
		key                                             string
		val                                             float32
	}
	for _, s := range []seed{
		{"llama", 1, 8, 4, 2, 1, 0, 4, 1e-5, 1, 3, 0, 0, "", 0},
		{"llama", 2, 32, 32, 4, 2, 8, 8, 1e-6, -1, 7, 0, 3, "rope.freq_base", 500000},
		{"qwen2", 1, 8, 4, 2, 2, 0, 4, 1e-6, 1, 2, 0, 1, "rope.scaling.factor", 2},
		{"qwen3", 1, 16, 8, 2, 1, 8, 6, 1e-6, 0, 5, 0, 2, "attention.sliding_window", 4},
		{"gemma2", 2, 8, 4, 2, 1, 4, 4, 1e-6, 2, 1, 0, 0, "final_logit_softcapping", 30},
		{"gemma3", 1, 8, 4, 2, 1, 4, 4, 1e-6, 2, 1, 1 << 6, 0, "attention.sliding_window", 8},
		{"granite", 1, 8, 4, 2, 1, 0, 4, 1e-5, 0, 0, 0, 0, "residual_scale", 0.25},
		{"smollm3", 1, 8, 4, 2, 1, 0, 4, 1e-5, 0, 3, 0, 2, "", 0},
	} {
		data := fuzzGGUF(s.arch, s.layers, s.hidden, s.ff, s.heads, s.kvHeads, s.keyLen, s.voc, s.eps, s.bos, s.eos, s.drop, s.typ, s.key, s.val)
		if data == nil {
			f.Fatalf("seed %+v: not written", s)
		}
		// Every seed is a file the reader accepts, so that mutations
		// start from the paths past the checks.
		gf, err := gguf.Parse("seed.gguf", data)
		if err == nil {
			_, err = ReadGGUF(gf, GGUFOptions{})
		}
		if err != nil {
			f.Fatalf("seed %+v: %v", s, err)
		}
		f.Add(s.arch, s.layers, s.hidden, s.ff, s.heads, s.kvHeads, s.keyLen, s.voc, s.eps, s.bos, s.eos, s.drop, s.typ, s.key, s.val)
	}
	f.Fuzz(func(t *testing.T, arch string, layers, hidden, ff, heads, kvHeads, keyLen, vocab uint8, eps float32, bos, eos int32, drop uint16, typ uint8, key string, val float32) {
		data := fuzzGGUF(arch, layers, hidden, ff, heads, kvHeads, keyLen, vocab, eps, bos, eos, drop, typ, key, val)
		if data == nil {
			return
		}
		gf, err := gguf.Parse("fuzz.gguf", data)
		if err != nil {
			t.Fatalf("a written file does not parse: %v", err)
		}
		g, err := ReadGGUF(gf, GGUFOptions{DequantizeToF32: true})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.gguf: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		c := g.Config
		if c.NumHiddenLayers <= 0 || c.HiddenSize <= 0 || c.VocabSize <= 0 || len(c.LayerTypes) != c.NumHiddenLayers {
			t.Fatalf("accepted sizes: %d layers (%d types), hidden %d, vocab %d", c.NumHiddenLayers, len(c.LayerTypes), c.HiddenSize, c.VocabSize)
		}
		if c.NumAttentionHeads > 0 && (c.NumKeyValueHeads <= 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 || c.HeadDim <= 0) {
			t.Fatalf("accepted heads: %d of %d kv heads, head_dim %d", c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim)
		}
		if e := float32(c.NormEps()); !(e > 0) || math.IsInf(float64(e), 0) {
			t.Fatalf("accepted epsilon %g", c.NormEps())
		}
		ids := slices.Clone(c.EOSTokenIDs)
		for _, p := range []*int{c.BOSTokenID, c.PadTokenID} {
			if p != nil {
				ids = append(ids, *p)
			}
		}
		for _, id := range ids {
			if id < 0 || id >= c.VocabSize {
				t.Fatalf("accepted special id %d for a vocabulary of %d", id, c.VocabSize)
			}
		}
		for _, n := range g.Names() {
			s, ok := g.Lookup(n)
			if !ok {
				t.Fatalf("%s listed but not found", n)
			}
			if s.DType.Quantized() {
				continue
			}
			elems := 1
			for _, d := range s.Shape {
				elems *= d
			}
			if len(s.Data) != elems*s.DType.Size() {
				t.Fatalf("%s: %d bytes for %v of %s", n, len(s.Data), s.Shape, s.DType)
			}
		}
	})
}
