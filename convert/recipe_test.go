package convert

import (
	"fmt"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// TestRecipeCounts checks the per-tensor types of the recipes on Llama 3
// 8B's geometry (32 layers, hidden 4096, 8 KV heads of 32, untied) against
// the counts llama.cpp's quantizer reports for it, e.g. for Q4_K_M "q4_K:
// 193 tensors, q6_K: 33 tensors, f32: 65 tensors".
func TestRecipeCounts(t *testing.T) {
	cfg := &model.Config{NumHiddenLayers: 32, HiddenSize: 4096, IntermediateSize: 14336, NumAttentionHeads: 32, NumKeyValueHeads: 8, VocabSize: 128256}
	type tensor struct {
		name string
		dims []int64
	}
	var tensors []tensor
	tensors = append(tensors, tensor{"token_embd.weight", []int64{4096, 128256}})
	for i := range 32 {
		p := fmt.Sprintf("blk.%d.", i)
		tensors = append(tensors,
			tensor{p + "attn_norm.weight", []int64{4096}},
			tensor{p + "attn_q.weight", []int64{4096, 4096}},
			tensor{p + "attn_k.weight", []int64{4096, 1024}},
			tensor{p + "attn_v.weight", []int64{4096, 1024}},
			tensor{p + "attn_output.weight", []int64{4096, 4096}},
			tensor{p + "ffn_norm.weight", []int64{4096}},
			tensor{p + "ffn_gate.weight", []int64{4096, 14336}},
			tensor{p + "ffn_up.weight", []int64{4096, 14336}},
			tensor{p + "ffn_down.weight", []int64{14336, 4096}},
		)
	}
	tensors = append(tensors, tensor{"rope_freqs.weight", []int64{64}}, tensor{"output_norm.weight", []int64{4096}}, tensor{"output.weight", []int64{4096, 128256}})
	names := make([]string, len(tensors))
	for i, t := range tensors {
		names[i] = t.name
	}
	tests := []struct {
		typ  string
		want map[compute.DType]int
	}{
		{"q4_k_m", map[compute.DType]int{compute.Q4_K: 193, compute.Q6_K: 33, compute.F32: 66}},
		{"q5_k_m", map[compute.DType]int{compute.Q5_K: 193, compute.Q6_K: 33, compute.F32: 66}},
		{"q6_k", map[compute.DType]int{compute.Q6_K: 226, compute.F32: 66}},
		{"q8_0", map[compute.DType]int{compute.Q8_0: 226, compute.F32: 66}},
		{"q4_0", map[compute.DType]int{compute.Q4_0: 225, compute.Q6_K: 1, compute.F32: 66}},
		{"q2_k", map[compute.DType]int{compute.Q2_K: 129, compute.Q3_K: 64, compute.Q4_K: 32, compute.Q6_K: 1, compute.F32: 66}},
		{"q3_k_m", map[compute.DType]int{compute.Q3_K: 129, compute.Q4_K: 92, compute.Q5_K: 4, compute.Q6_K: 1, compute.F32: 66}},
		{"f16", map[compute.DType]int{compute.F16: 226, compute.F32: 66}},
	}
	for _, tc := range tests {
		ft, err := lookupFileType(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		r := newRecipe(ft, "llama", cfg, names)
		got := map[compute.DType]int{}
		for _, tn := range tensors {
			got[r.pick(tn.name, tn.dims)]++
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.typ, got, tc.want)
		}
	}
}

func TestMoreBits(t *testing.T) {
	var got []int
	for i := range 32 {
		if moreBits(i, 32) {
			got = append(got, i)
		}
	}
	want := "[0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31]"
	if fmt.Sprint(got) != want {
		t.Errorf("moreBits(·, 32) = %v, want %s", got, want)
	}
}
