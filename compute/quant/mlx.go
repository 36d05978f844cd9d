package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// MLX affine blocks (compute.MLXAffine): per group, the scale and the bias
// in the pack's float type, then the group's codes as a little-endian bit
// stream, each code in bits bits, least significant first. An element is
// scale·code + bias, one float32 product and one sum, as MLX computes it.

// mlxScale reads a scale or bias of type scale at b.
func mlxScale(b []byte, scale compute.DType) float32 {
	switch scale {
	case compute.F16:
		return half.F16ToF32(binary.LittleEndian.Uint16(b))
	case compute.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b))
	}
	return half.BF16ToF32(binary.LittleEndian.Uint16(b))
}

// decodeMLX decodes whole MLX affine blocks.
func decodeMLX(dst []float32, src []byte, bits, group int, scale compute.DType) {
	es := scale.Size()
	bb := 2*es + group*bits/8
	mask := uint64(1)<<bits - 1
	for b := 0; b < len(dst)/group; b++ {
		blk := src[b*bb : (b+1)*bb]
		s, z := mlxScale(blk, scale), mlxScale(blk[es:], scale)
		codes := blk[2*es:]
		out := dst[b*group : (b+1)*group]
		// Refill a 64-bit window a byte at a time: a code never spans
		// more than two bytes.
		var acc uint64
		have, next := 0, 0
		for i := range out {
			for have < bits {
				acc |= uint64(codes[next]) << have
				next++
				have += 8
			}
			out[i] = float32(s*float32(acc&mask)) + z
			acc >>= bits
			have -= bits
		}
	}
}

// MLXBlocks repacks rows of an MLX affine pack into dst as blocks of the
// MLX affine type dt (see compute.MLXAffine): codes holds the rows' packed
// codes (the U32 words of each row, little-endian), scales and biases the
// rows' per-group values, little-endian in dt's scale type. dst must hold
// rows·RowBytes(cols) bytes.
func MLXBlocks(dst []byte, dt compute.DType, rows, cols int, codes, scales, biases []byte) error {
	bits, group, scale, ok := dt.MLX()
	if !ok {
		return fmt.Errorf("quant: %s is not an MLX affine type", dt)
	}
	rb, err := dt.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("quant: %s: %w", dt, err)
	}
	groups := cols / group
	es := scale.Size()
	cb := group * bits / 8 // code bytes per group
	switch {
	case len(codes) != rows*groups*cb:
		return fmt.Errorf("quant: %d bytes of codes for %d×%d %d-bit values, want %d", len(codes), rows, cols, bits, rows*groups*cb)
	case len(scales) != rows*groups*es || len(biases) != rows*groups*es:
		return fmt.Errorf("quant: %d bytes of scales and %d of biases for %d×%d groups of %s, want %d", len(scales), len(biases), rows, groups, scale, rows*groups*es)
	case len(dst) != rows*rb:
		return fmt.Errorf("quant: %d bytes for %d rows of %d %s values, want %d", len(dst), rows, cols, dt, rows*rb)
	}
	for g := range rows * groups {
		blk := dst[g*(2*es+cb) : (g+1)*(2*es+cb)]
		copy(blk, scales[g*es:(g+1)*es])
		copy(blk[es:], biases[g*es:(g+1)*es])
		copy(blk[2*es:], codes[g*cb:(g+1)*cb])
	}
	return nil
}
