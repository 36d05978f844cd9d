package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
)

// toF32 decodes a stored float tensor into float32 values.
func toF32(s Stored) ([]float32, error) {
	n := 1
	for _, d := range s.Shape {
		n *= d
	}
	out := make([]float32, n)
	switch s.DType {
	case compute.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(s.Data[4*i:]))
		}
	case compute.BF16:
		half.BF16sToF32s(out, s.Data)
	case compute.F16:
		half.F16sToF32s(out, s.Data)
	default:
		if !s.DType.Quantized() {
			return nil, fmt.Errorf("cannot read %s values as float32", s.DType)
		}
		if err := quant.Dequantize(out, s.Data, s.DType); err != nil {
			return nil, err
		}
	}
	return out, nil
}
