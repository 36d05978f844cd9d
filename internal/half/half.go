// Package half converts between float32 and the narrow floating-point
// formats that model weights are stored in: bfloat16, IEEE 754 binary16
// (float16), the two OCP 8-bit formats E4M3 (the "FN" variant, without
// infinities) and E5M2, and the E8M0 power-of-two scale format.
//
// Conversions to float32 are exact. Conversions from float32 round to
// nearest, ties to even, and keep NaN a NaN.
package half

import (
	"encoding/binary"
	"math"
)

// BF16ToF32 returns the float32 value of the bfloat16 bit pattern h.
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 returns the bfloat16 bit pattern nearest to f, rounding ties to
// even. Values beyond the bfloat16 range become infinities; a NaN stays a
// (quiet) NaN with its sign.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload, force quiet.
		return uint16(b>>16) | 0x0040
	}
	// Add just under half an ulp, plus one more when the kept part is odd,
	// so that exact halves round to even. A carry may ripple into the
	// exponent, which is what rounding up to the next binade (or to
	// infinity) needs.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 returns the float32 value of the IEEE binary16 bit pattern h.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant × 2^-24, exact in float32.
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 returns the IEEE binary16 bit pattern nearest to f, rounding ties
// to even. Values beyond the binary16 range become infinities, values too
// small for its subnormals become signed zeros, and a NaN stays a (quiet)
// NaN with its sign.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff

	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased binary16 exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is subnormal (or zero). Below half the smallest
		// subnormal (2^-25) everything rounds to zero; exactly 2^-25 is a
		// tie that rounds to the even value, zero, too.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000 // restore the implicit bit
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rem > halfway || (rem == halfway && r&1 == 1) {
			r++ // may become 0x400, the smallest normal: still correct
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct, up to infinity
	}
	return sign | uint16(r)
}

// f8e4m3 holds the float32 values of all 256 E4M3 (FN) bit patterns.
var f8e4m3 = func() (t [256]float32) {
	for i := range t {
		sign := float32(1)
		if i&0x80 != 0 {
			sign = -1
		}
		exp := (i >> 3) & 0xf
		mant := i & 0x7
		switch {
		case exp == 0xf && mant == 0x7:
			t[i] = float32(math.NaN())
			if sign < 0 {
				t[i] = math.Float32frombits(math.Float32bits(t[i]) | 0x80000000)
			}
		case exp == 0:
			t[i] = sign * float32(mant) / 8 / 64 // mant/8 × 2^-6
		default:
			t[i] = sign * float32(math.Ldexp(1+float64(mant)/8, exp-7))
		}
	}
	return t
}()

// F8E4M3ToF32 returns the float32 value of the 8-bit E4M3 bit pattern b,
// in the "FN" variant that safetensors calls F8_E4M3: exponent bias 7,
// subnormals, no infinities, and NaN only at 0x7f and 0xff. The largest
// finite value is 448.
func F8E4M3ToF32(b uint8) float32 {
	return f8e4m3[b]
}

// F8E5M2ToF32 returns the float32 value of the 8-bit E5M2 bit pattern b:
// exponent bias 15, subnormals, infinities and NaNs, exactly the top byte of
// an IEEE binary16.
func F8E5M2ToF32(b uint8) float32 {
	return F16ToF32(uint16(b) << 8)
}

// F8E8M0ToF32 returns the float32 value of the 8-bit E8M0 scale b, the
// unsigned power of two 2^(b-127); 0xff is NaN. 2^-127 is a float32
// subnormal and is returned exactly.
func F8E8M0ToF32(b uint8) float32 {
	switch b {
	case 0xff:
		return float32(math.NaN())
	case 0:
		return math.Float32frombits(0x00400000) // 2^-127
	}
	return math.Float32frombits(uint32(b) << 23)
}

// BF16sToF32s converts little-endian bfloat16 values from src into dst and
// returns how many it converted: the smaller of len(dst) and len(src)/2,
// as copy does.
func BF16sToF32s(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	src = src[:2*n]
	dst = dst[:n]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
	return n
}

// F16sToF32s converts little-endian binary16 values from src into dst and
// returns how many it converted: the smaller of len(dst) and len(src)/2,
// as copy does.
func F16sToF32s(dst []float32, src []byte) int {
	n := min(len(dst), len(src)/2)
	src = src[:2*n]
	dst = dst[:n]
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
	return n
}
