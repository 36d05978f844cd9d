// Package quant encodes and decodes the block-quantized tensor formats of
// ggml (the storage types of GGUF files): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the
// k-quants Q2_K … Q6_K, IQ4_NL and MXFP4, plus the plain F32, F16 and BF16
// rows, and the MLX affine blocks (see mlx.go).
//
// A quantized row is a sequence of blocks. Each block covers BlockSize
// consecutive elements (32, or 256 for the k-quants) and takes BlockBytes
// bytes: one or two float16 scales (an E8M0 exponent for MXFP4) followed by
// packed integer codes, and for the k-quants a table of per-sub-block scales
// quantized against the block's scales. Dequantize follows the block
// definitions of ggml bit for bit: every product and sum is rounded to
// float32 in the order the definitions give, with no fused multiply-add.
//
// Quantize produces blocks that any ggml reader decodes. For the 32-element
// formats it applies the rounding rules of ggml's reference quantizer (scale
// from the block's extreme, the same rounding of codes), so it writes the
// bytes ggml's reference quantizer writes; for the k-quants it fits each
// sub-block by a weighted least-squares search over candidate scales, which
// gives an error comparable to ggml's, but not necessarily its bytes.
package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// Dequantize decodes len(dst) elements stored as typ in src. len(dst) must
// be a whole number of blocks and src exactly their size.
func Dequantize(dst []float32, src []byte, typ compute.DType) error {
	n := len(dst)
	size, err := typ.RowBytes(n)
	if err != nil {
		return fmt.Errorf("quant: dequantize %s: %w", typ, err)
	}
	if len(src) != size {
		return fmt.Errorf("quant: dequantize %d elements of %s: have %d bytes, want %d", n, typ, len(src), size)
	}
	switch typ {
	case compute.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case compute.F16:
		half.F16sToF32s(dst, src)
	case compute.BF16:
		half.BF16sToF32s(dst, src)
	case compute.Q8_0:
		decodeQ8_0(dst, src)
	case compute.Q4_0:
		decodeQ4_0(dst, src)
	case compute.Q4_1:
		decodeQ4_1(dst, src)
	case compute.Q5_0:
		decodeQ5_0(dst, src)
	case compute.Q5_1:
		decodeQ5_1(dst, src)
	case compute.Q2_K:
		decodeQ2_K(dst, src)
	case compute.Q3_K:
		decodeQ3_K(dst, src)
	case compute.Q4_K:
		decodeQ4_K(dst, src)
	case compute.Q5_K:
		decodeQ5_K(dst, src)
	case compute.Q6_K:
		decodeQ6_K(dst, src)
	case compute.IQ4_NL:
		decodeIQ4_NL(dst, src)
	case compute.MXFP4:
		decodeMXFP4(dst, src)
	default:
		if bits, group, scale, ok := typ.MLX(); ok {
			decodeMLX(dst, src, bits, group, scale)
			return nil
		}
		return fmt.Errorf("quant: dequantize: %s is not a float or block-quantized type", typ)
	}
	return nil
}

// CanQuantize reports whether Quantize can encode typ.
func CanQuantize(typ compute.DType) bool {
	switch typ {
	case compute.F32, compute.F16, compute.BF16,
		compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_0, compute.Q5_1,
		compute.Q2_K, compute.Q3_K, compute.Q4_K, compute.Q5_K, compute.Q6_K:
		return true
	}
	return false
}

// Quantize encodes src as typ into dst. len(src) must be a whole number of
// blocks and dst exactly their size. Values must be finite.
func Quantize(dst []byte, src []float32, typ compute.DType) error {
	n := len(src)
	size, err := typ.RowBytes(n)
	if err != nil {
		return fmt.Errorf("quant: quantize %s: %w", typ, err)
	}
	if len(dst) != size {
		return fmt.Errorf("quant: quantize %d elements as %s: have %d bytes, want %d", n, typ, len(dst), size)
	}
	switch typ {
	case compute.F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case compute.F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], half.F32ToF16(v))
		}
	case compute.BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], half.F32ToBF16(v))
		}
	case compute.Q8_0:
		encodeQ8_0(dst, src)
	case compute.Q4_0:
		encodeQ4_0(dst, src)
	case compute.Q4_1:
		encodeQ4_1(dst, src)
	case compute.Q5_0:
		encodeQ5_0(dst, src)
	case compute.Q5_1:
		encodeQ5_1(dst, src)
	case compute.Q2_K:
		encodeQ2_K(dst, src)
	case compute.Q3_K:
		encodeQ3_K(dst, src)
	case compute.Q4_K:
		encodeQ4_K(dst, src)
	case compute.Q5_K:
		encodeQ5_K(dst, src)
	case compute.Q6_K:
		encodeQ6_K(dst, src)
	default:
		return fmt.Errorf("quant: quantize: writing %s is not supported", typ)
	}
	return nil
}

// f16 reads the little-endian float16 at b[0:2].
func f16(b []byte) float32 {
	return half.F16ToF32(uint16(b[0]) | uint16(b[1])<<8)
}

// putF16 stores v as a little-endian float16 at b[0:2] and returns the
// value stored, as a reader will see it.
func putF16(b []byte, v float32) float32 {
	h := half.F32ToF16(v)
	b[0], b[1] = byte(h), byte(h>>8)
	return half.F16ToF32(h)
}
