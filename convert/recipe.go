package convert

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// A file type as lem quant --gguf names it: the type most weights get,
// llama.cpp's general.file_type id, and whether the per-tensor mixture of
// llama.cpp's recipes applies.
type fileType struct {
	name  string
	base  compute.DType
	id    uint32 // general.file_type (llama.cpp's LLAMA_FTYPE_*)
	float bool   // a float type: every matrix gets it, no mixture
}

// fileTypes are the types ToGGUF writes.
var fileTypes = []fileType{
	{name: "f32", base: compute.F32, id: 0, float: true},
	{name: "f16", base: compute.F16, id: 1, float: true},
	{name: "bf16", base: compute.BF16, id: 32, float: true},
	{name: "q4_0", base: compute.Q4_0, id: 2},
	{name: "q4_1", base: compute.Q4_1, id: 3},
	{name: "q8_0", base: compute.Q8_0, id: 7},
	{name: "q5_0", base: compute.Q5_0, id: 8},
	{name: "q5_1", base: compute.Q5_1, id: 9},
	{name: "q2_k", base: compute.Q2_K, id: 10},
	{name: "q3_k_m", base: compute.Q3_K, id: 12},
	{name: "q4_k_m", base: compute.Q4_K, id: 15},
	{name: "q5_k_m", base: compute.Q5_K, id: 17},
	{name: "q6_k", base: compute.Q6_K, id: 18},
}

// FileTypes returns the names of the file types ToGGUF writes.
func FileTypes() []string {
	var names []string
	for _, f := range fileTypes {
		names = append(names, f.name)
	}
	return names
}

func lookupFileType(name string) (fileType, error) {
	for _, f := range fileTypes {
		if strings.EqualFold(f.name, name) {
			return f, nil
		}
	}
	return fileType{}, fmt.Errorf("unknown GGUF type %q (supported: %s)", name, strings.Join(FileTypes(), ", "))
}

// recipe picks the type of each tensor the way llama.cpp's quantizer does
// for the file types above: output (and a tied token embedding) in Q6_K;
// for the _M mixtures and Q2_K, more bits for attn_v (attn_qkv), ffn_down
// and attn_output in the layers its rule picks; and a fallback to a
// 32-element type (or F16) for rows that are not whole 256-element blocks.
type recipe struct {
	ft      fileType
	arch    string
	nLayer  int
	gqa     int  // attention heads per key/value head
	tied    bool // no output.weight: token_embd is the output projection
	is70B   bool // llama.cpp gives 70B llamas' attn_v one more step
	nAttnV  int  // attn_v-like tensors in the file
	seenAtV int
}

func newRecipe(ft fileType, arch string, cfg *model.Config, gguNames []string) *recipe {
	r := &recipe{
		ft: ft, arch: arch, nLayer: cfg.NumHiddenLayers,
		gqa:  cfg.NumAttentionHeads / max(cfg.NumKeyValueHeads, 1),
		tied: !slices.Contains(gguNames, "output.weight"),
	}
	r.is70B = arch == "llama" && cfg.NumHiddenLayers == 80
	for _, n := range gguNames {
		if isAttnV(n) {
			r.nAttnV++
		}
	}
	return r
}

func isAttnV(name string) bool {
	return strings.Contains(name, "attn_v.weight") || strings.Contains(name, "attn_qkv.weight")
}

// layerOf returns N of a blk.N. name, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	idx, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(idx)
	if err != nil {
		return -1
	}
	return n
}

// moreBits is llama.cpp's choice of layers that get more bits in the _M
// mixtures: the first and last eighth, and every third layer between.
func moreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// pick returns the type of a tensor with GGUF name name and dims
// (innermost first). Tensors must be passed in file order: attn_v layers
// are counted as they come, as llama.cpp does.
func (r *recipe) pick(name string, dims []int64) compute.DType {
	if len(dims) < 2 || !strings.HasSuffix(name, "weight") || strings.HasSuffix(name, "_norm.weight") || keepF32(name) {
		return compute.F32
	}
	if r.ft.float {
		return r.ft.base
	}
	cols := int(dims[0])
	t := r.ft.base
	base := r.ft.name
	switch {
	case name == "output.weight" || (r.tied && name == "token_embd.weight"):
		if cols%t.BlockSize() != 0 {
			t = compute.Q8_0
		} else if t != compute.Q8_0 {
			t = compute.Q6_K
		}
	case name == "token_embd.weight":
	case isAttnV(name):
		i := r.seenAtV
		r.seenAtV++
		switch base {
		case "q2_k":
			t = compute.Q3_K
			if r.gqa >= 4 {
				t = compute.Q4_K
			}
		case "q3_k_m":
			t = compute.Q4_K
			if i < 2 {
				t = compute.Q5_K
			}
		case "q4_k_m", "q5_k_m":
			if moreBits(i, r.nAttnV) {
				t = compute.Q6_K
			}
		}
		if r.is70B && (t == compute.Q3_K || t == compute.Q4_K) {
			t = compute.Q5_K
		}
	case strings.Contains(name, "ffn_down"):
		i := max(layerOf(name), 0)
		switch base {
		case "q2_k":
			t = compute.Q3_K
		case "q3_k_m":
			t = compute.Q4_K
			if i < r.nLayer/16 {
				t = compute.Q5_K
			}
		case "q4_k_m", "q5_k_m":
			if moreBits(i, r.nLayer) {
				t = compute.Q6_K
			}
		}
	case strings.Contains(name, "attn_output.weight"):
		switch base {
		case "q2_k":
			t = compute.Q3_K
		case "q3_k_m":
			t = compute.Q4_K
		}
	}
	return fallback(t, cols)
}

// f32Tensors are the small matrices that llama.cpp's converter and
// quantizer always keep in F32: MoE routers, the short convolutions of the
// SSM and LFM2 layers, the per-head A and D of the SSM scan (stored as
// [heads, 1]), and Gemma 3n's AltUp coefficients.
var f32Tensors = []string{".ffn_gate_inp.weight", ".ffn_gate_inp_shexp.weight", ".ssm_conv1d.weight", ".shortconv.conv.weight", ".ssm_a", ".ssm_d",
	".altup_correct_coef.weight", ".altup_predict_coef.weight",
	"token_types.weight"} // BERT: llama.cpp adds its first row to F32 activations

// keepF32 reports whether a tensor is one of f32Tensors.
func keepF32(name string) bool {
	for _, s := range f32Tensors {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// fallback replaces a type whose blocks do not divide the rows by the
// 32-element type llama.cpp uses instead, or F16 when even that does not
// fit.
func fallback(t compute.DType, cols int) compute.DType {
	if cols%t.BlockSize() == 0 {
		return t
	}
	switch t {
	case compute.Q2_K, compute.Q3_K:
		t = compute.Q4_0
	case compute.Q4_K:
		t = compute.Q5_0
	case compute.Q5_K:
		t = compute.Q5_1
	case compute.Q6_K:
		t = compute.Q8_0
	}
	if cols%t.BlockSize() != 0 {
		t = compute.F16
	}
	return t
}
