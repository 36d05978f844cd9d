package quant

import (
	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
)

// ggufTypes pairs the GGUF tensor types with the dtypes they load as.
var ggufTypes = []struct {
	g gguf.Type
	d compute.DType
}{
	{gguf.F32, compute.F32}, {gguf.F16, compute.F16}, {gguf.BF16, compute.BF16},
	{gguf.Q8_0, compute.Q8_0}, {gguf.Q4_0, compute.Q4_0}, {gguf.Q4_1, compute.Q4_1},
	{gguf.Q5_0, compute.Q5_0}, {gguf.Q5_1, compute.Q5_1},
	{gguf.Q2_K, compute.Q2_K}, {gguf.Q3_K, compute.Q3_K}, {gguf.Q4_K, compute.Q4_K},
	{gguf.Q5_K, compute.Q5_K}, {gguf.Q6_K, compute.Q6_K},
	{gguf.IQ4_NL, compute.IQ4_NL}, {gguf.MXFP4, compute.MXFP4},
}

// FromGGUF returns the dtype a GGUF tensor type loads as, and false for
// types lem cannot compute with.
func FromGGUF(t gguf.Type) (compute.DType, bool) {
	for _, p := range ggufTypes {
		if p.g == t {
			return p.d, true
		}
	}
	return 0, false
}

// ToGGUF returns the GGUF tensor type of a dtype.
func ToGGUF(d compute.DType) (gguf.Type, bool) {
	for _, p := range ggufTypes {
		if p.d == d {
			return p.g, true
		}
	}
	return 0, false
}
