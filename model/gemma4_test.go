package model

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/gguf"
)

// tinyGemma4 returns the keys and F32 tensors (name → dims, values; nil
// values are zeros) of a two-layer gemma4 file: layer 0 slides with heads
// of 4, layer 1 attends fully with heads of 8.
func tinyGemma4() ([]gguf.KV, map[string][]int64, map[string][]float32) {
	kv := []gguf.KV{
		{Key: "general.architecture", Value: gguf.String("gemma4")},
		{Key: "gemma4.block_count", Value: gguf.Uint32(2)},
		{Key: "gemma4.embedding_length", Value: gguf.Uint32(8)},
		{Key: "gemma4.feed_forward_length", Value: gguf.Uint32(16)},
		{Key: "gemma4.attention.head_count", Value: gguf.Uint32(2)},
		{Key: "gemma4.attention.head_count_kv", Value: gguf.Uint32(1)},
		{Key: "gemma4.attention.key_length", Value: gguf.Uint32(8)},
		{Key: "gemma4.attention.value_length", Value: gguf.Uint32(8)},
		{Key: "gemma4.attention.key_length_swa", Value: gguf.Uint32(4)},
		{Key: "gemma4.attention.value_length_swa", Value: gguf.Uint32(4)},
		{Key: "gemma4.attention.sliding_window", Value: gguf.Uint32(4)},
		{Key: "gemma4.attention.sliding_window_pattern", Value: gguf.Array([]bool{true, false})},
		{Key: "gemma4.attention.shared_kv_layers", Value: gguf.Uint32(0)},
		{Key: "gemma4.embedding_length_per_layer_input", Value: gguf.Uint32(0)},
		{Key: "gemma4.rope.dimension_count", Value: gguf.Uint32(8)},
		{Key: "gemma4.rope.dimension_count_swa", Value: gguf.Uint32(4)},
		{Key: "gemma4.rope.freq_base", Value: gguf.Float32(1e6)},
		{Key: "gemma4.rope.freq_base_swa", Value: gguf.Float32(1e4)},
	}
	dims := map[string][]int64{
		"token_embd.weight":  {8, 16},
		"output_norm.weight": {8},
		"rope_freqs.weight":  {4},
	}
	vals := map[string][]float32{"rope_freqs.weight": {1, 1, 1e30, 1e30}}
	return kv, dims, vals
}

func writeGemma4(t *testing.T, kv []gguf.KV, dims map[string][]int64, vals map[string][]float32) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, e := range kv {
		if err := w.SetKV(e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(dims))
	for n := range dims {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		size := 1
		for _, d := range dims[n] {
			size *= int(d)
		}
		data := make([]byte, 4*size)
		for i, v := range vals[n][:min(len(vals[n]), size)] {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		if err := w.AddTensor(n, gguf.F32, dims[n], data); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("gemma4.gguf", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReadGGUFGemma4 checks what a gemma4 file's keys become: head sizes
// and key/value heads per layer, and the proportional rope read from
// rope_freqs.weight.
func TestReadGGUFGemma4(t *testing.T) {
	kv, dims, vals := tinyGemma4()
	for i := range kv {
		if kv[i].Key == "gemma4.attention.head_count_kv" {
			kv[i].Value = gguf.Array([]uint32{1, 2})
		}
	}
	g, err := ReadGGUF(writeGemma4(t, kv, dims, vals), GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config
	if c.ModelType != "gemma4_text" || c.HeadDimFor(0) != 4 || c.HeadDimFor(1) != 8 || c.KVHeadsFor(0) != 1 || c.KVHeadsFor(1) != 2 {
		t.Errorf("model %s, heads of %d and %d, key/value heads %d and %d; want gemma4_text, 4 and 8, 1 and 2",
			c.ModelType, c.HeadDimFor(0), c.HeadDimFor(1), c.KVHeadsFor(0), c.KVHeadsFor(1))
	}
	full, local := c.Rope(FullAttention), c.Rope(SlidingAttention)
	if full.Type != "proportional" || full.PartialRotaryFactor != 0.5 || full.Theta != 1e6 {
		t.Errorf("full-attention rope %+v, want proportional over 0.5 of the head, base 1e6", full)
	}
	if local.Type != "default" || local.PartialRotaryFactor != 1 || local.Theta != 1e4 {
		t.Errorf("sliding rope %+v, want default over the whole head, base 1e4", local)
	}
	if c.LayerType(0) != SlidingAttention || c.LayerType(1) != FullAttention || c.SlidingWindow != 4 {
		t.Errorf("layers %s, %s with window %d; want sliding, full with window 4", c.LayerType(0), c.LayerType(1), c.SlidingWindow)
	}
}

// TestReadGGUFGemma4Rejects checks that malformed gemma4 files fail with
// errors naming the key or tensor.
func TestReadGGUFGemma4Rejects(t *testing.T) {
	set := func(key string, v gguf.Value) func([]gguf.KV, map[string][]int64, map[string][]float32) []gguf.KV {
		return func(kv []gguf.KV, _ map[string][]int64, _ map[string][]float32) []gguf.KV {
			for i := range kv {
				if kv[i].Key == key {
					kv[i].Value = v
					return kv
				}
			}
			return append(kv, gguf.KV{Key: key, Value: v})
		}
	}
	tests := []struct {
		name string
		edit func([]gguf.KV, map[string][]int64, map[string][]float32) []gguf.KV
		want string
	}{
		{"rope_freqs values", func(kv []gguf.KV, _ map[string][]int64, vals map[string][]float32) []gguf.KV {
			vals["rope_freqs.weight"] = []float32{1, 2, 1e30, 1e30}
			return kv
		}, "rope_freqs.weight: value 2"},
		{"rope_freqs turning none", func(kv []gguf.KV, _ map[string][]int64, vals map[string][]float32) []gguf.KV {
			vals["rope_freqs.weight"] = []float32{1e30, 1e30, 1e30, 1e30}
			return kv
		}, "turns no pair"},
		{"rope_freqs size", func(kv []gguf.KV, dims map[string][]int64, _ map[string][]float32) []gguf.KV {
			dims["rope_freqs.weight"] = []int64{3}
			return kv
		}, "3 values for heads of 8"},
		{"rope dimensions", set("gemma4.rope.dimension_count", gguf.Uint32(4)), "rope.dimension_count"},
		{"value length", set("gemma4.attention.value_length_swa", gguf.Uint32(6)), "value_length_swa"},
		{"shared layers", set("gemma4.attention.shared_kv_layers", gguf.Uint32(2)), "shared_kv_layers"},
		{"per-layer inputs", set("gemma4.embedding_length_per_layer_input", gguf.Uint32(4)), "per_layer_token_embd.weight"},
		{"experts", func(kv []gguf.KV, dims map[string][]int64, _ map[string][]float32) []gguf.KV {
			dims["blk.0.ffn_gate_inp.weight"] = []int64{8, 4}
			return kv
		}, "gemma4.expert_count"},
		{"kv heads", set("gemma4.attention.head_count_kv", gguf.Array([]uint32{1, 3})), "layer 1 has 3 key/value heads"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv, dims, vals := tinyGemma4()
			kv = tc.edit(kv, dims, vals)
			_, err := ReadGGUF(writeGemma4(t, kv, dims, vals), GGUFOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
