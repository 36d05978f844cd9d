package quant

import (
	"encoding/binary"
	"math"
)

// The 32-element formats. In every 4-bit and 5-bit format byte j of the
// code bytes holds element j in its low nibble and element j+16 in its high
// nibble; the fifth bits of Q5_0 and Q5_1 are bit j of a little-endian
// uint32 for element j.

const qk = 32 // elements per block of the 32-element formats

// iq4nlValues are the 16 levels of IQ4_NL, scaled by the block's float16 d.
var iq4nlValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// mxfp4Values are the 16 E2M1 (FP4) values doubled, so that they are
// integers; the block scale supplies the halving.
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half returns 2^(e-128): an E8M0 exponent e as a power of two, halved
// to compensate for the doubled mxfp4Values. e = 0 and 1 give subnormals;
// e = 255 gives 2^127, as ggml decodes it.
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// Q8_0: d (f16), 32 int8 codes; x = q·d.
func decodeQ8_0(dst []float32, src []byte) {
	const bb = 2 + qk
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d := f16(b)
		q := b[2:][:qk]
		y := dst[i:][:qk]
		for j, c := range q {
			y[j] = float32(int8(c)) * d
		}
	}
}

// Q4_0: d (f16), 16 bytes of nibbles; x = (q-8)·d.
func decodeQ4_0(dst []float32, src []byte) {
	const bb = 2 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d := f16(b)
		q := b[2:][:qk/2]
		lo, hi := dst[i:][:qk/2], dst[i+qk/2:][:qk/2]
		for j, c := range q {
			lo[j] = float32(int(c&0xF)-8) * d
			hi[j] = float32(int(c>>4)-8) * d
		}
	}
}

// Q4_1: d, m (f16), 16 bytes of nibbles; x = q·d + m.
func decodeQ4_1(dst []float32, src []byte) {
	const bb = 4 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d, m := f16(b), f16(b[2:])
		y := dst[i:][:qk]
		for j := range qk / 2 {
			c := b[4+j]
			y[j] = float32(float32(c&0xF)*d) + m
			y[j+qk/2] = float32(float32(c>>4)*d) + m
		}
	}
}

// Q5_0: d (f16), high bits (u32), 16 bytes of nibbles; x = (q-16)·d.
func decodeQ5_0(dst []float32, src []byte) {
	const bb = 2 + 4 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d := f16(b)
		qh := binary.LittleEndian.Uint32(b[2:])
		y := dst[i:][:qk]
		for j := range qk / 2 {
			c := b[6+j]
			lo := int(c&0xF) | int(qh>>j&1)<<4
			hi := int(c>>4) | int(qh>>(j+16)&1)<<4
			y[j] = float32(lo-16) * d
			y[j+qk/2] = float32(hi-16) * d
		}
	}
}

// Q5_1: d, m (f16), high bits (u32), 16 bytes of nibbles; x = q·d + m.
func decodeQ5_1(dst []float32, src []byte) {
	const bb = 4 + 4 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d, m := f16(b), f16(b[2:])
		qh := binary.LittleEndian.Uint32(b[4:])
		y := dst[i:][:qk]
		for j := range qk / 2 {
			c := b[8+j]
			lo := uint32(c&0xF) | (qh>>j&1)<<4
			hi := uint32(c>>4) | (qh>>(j+16)&1)<<4
			y[j] = float32(float32(lo)*d) + m
			y[j+qk/2] = float32(float32(hi)*d) + m
		}
	}
}

// IQ4_NL: d (f16), 16 bytes of nibbles indexing iq4nlValues; x = d·v[q].
func decodeIQ4_NL(dst []float32, src []byte) {
	const bb = 2 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d := f16(b)
		y := dst[i:][:qk]
		for j := range qk / 2 {
			c := b[2+j]
			y[j] = d * float32(iq4nlValues[c&0xF])
			y[j+qk/2] = d * float32(iq4nlValues[c>>4])
		}
	}
}

// MXFP4: e (E8M0), 16 bytes of nibbles indexing mxfp4Values; x = v[q]·2^(e-128).
func decodeMXFP4(dst []float32, src []byte) {
	const bb = 1 + qk/2
	for i := 0; i < len(dst); i += qk {
		b := src[i/qk*bb:][:bb]
		d := e8m0Half(b[0])
		y := dst[i:][:qk]
		for j := range qk / 2 {
			c := b[1+j]
			y[j] = float32(mxfp4Values[c&0xF]) * d
			y[j+qk/2] = float32(mxfp4Values[c>>4]) * d
		}
	}
}

// roundAway rounds half away from zero, as C's roundf.
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

// inverse returns 1/d, or 0 for d = 0.
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// signedMax returns the element of largest magnitude (the first, on a tie)
// and that magnitude.
func signedMax(x []float32) (v, a float32) {
	for _, e := range x {
		if ae := float32(math.Abs(float64(e))); ae > a {
			a, v = ae, e
		}
	}
	return v, a
}

// minMax returns the smallest and largest element.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = float32(math.MaxFloat32), -float32(math.MaxFloat32)
	for _, e := range x {
		lo, hi = min(lo, e), max(hi, e)
	}
	return lo, hi
}

// truncCode converts a non-negative offset code to an integer toward zero
// and caps it at limit, as the reference quantizer's integer cast and MIN do.
func truncCode(v float32, limit int) uint32 {
	switch {
	case !(v > 0): // also NaN
		return 0
	case v >= float32(limit):
		return uint32(limit)
	}
	return uint32(v)
}

func encodeQ8_0(dst []byte, src []float32) {
	const bb = 2 + qk
	for i := 0; i < len(src); i += qk {
		x := src[i:][:qk]
		b := dst[i/qk*bb:][:bb]
		_, amax := signedMax(x)
		d := amax / 127
		id := inverse(d)
		putF16(b, d)
		for j, v := range x {
			b[2+j] = byte(int8(roundAway(v * id)))
		}
	}
}

func encodeQ4_0(dst []byte, src []float32) {
	const bb = 2 + qk/2
	for i := 0; i < len(src); i += qk {
		x := src[i:][:qk]
		b := dst[i/qk*bb:][:bb]
		m, _ := signedMax(x)
		d := m / -8
		id := inverse(d)
		putF16(b, d)
		for j := range qk / 2 {
			lo := truncCode(x[j]*id+8.5, 15)
			hi := truncCode(x[j+qk/2]*id+8.5, 15)
			b[2+j] = byte(lo | hi<<4)
		}
	}
}

func encodeQ4_1(dst []byte, src []float32) {
	const bb = 4 + qk/2
	for i := 0; i < len(src); i += qk {
		x := src[i:][:qk]
		b := dst[i/qk*bb:][:bb]
		lo, hi := minMax(x)
		d := (hi - lo) / 15
		id := inverse(d)
		putF16(b, d)
		putF16(b[2:], lo)
		for j := range qk / 2 {
			c0 := truncCode((x[j]-lo)*id+0.5, 15)
			c1 := truncCode((x[j+qk/2]-lo)*id+0.5, 15)
			b[4+j] = byte(c0 | c1<<4)
		}
	}
}

func encodeQ5_0(dst []byte, src []float32) {
	const bb = 2 + 4 + qk/2
	for i := 0; i < len(src); i += qk {
		x := src[i:][:qk]
		b := dst[i/qk*bb:][:bb]
		m, _ := signedMax(x)
		d := m / -16
		id := inverse(d)
		putF16(b, d)
		var qh uint32
		for j := range qk / 2 {
			c0 := truncCode(x[j]*id+16.5, 31)
			c1 := truncCode(x[j+qk/2]*id+16.5, 31)
			b[6+j] = byte(c0&0xF | (c1&0xF)<<4)
			qh |= (c0 >> 4) << j
			qh |= (c1 >> 4) << (j + qk/2)
		}
		binary.LittleEndian.PutUint32(b[2:], qh)
	}
}

func encodeQ5_1(dst []byte, src []float32) {
	const bb = 4 + 4 + qk/2
	for i := 0; i < len(src); i += qk {
		x := src[i:][:qk]
		b := dst[i/qk*bb:][:bb]
		lo, hi := minMax(x)
		d := (hi - lo) / 31
		id := inverse(d)
		putF16(b, d)
		putF16(b[2:], lo)
		var qh uint32
		for j := range qk / 2 {
			c0 := truncCode((x[j]-lo)*id+0.5, 31)
			c1 := truncCode((x[j+qk/2]-lo)*id+0.5, 31)
			b[8+j] = byte(c0&0xF | (c1&0xF)<<4)
			qh |= (c0 >> 4) << j
			qh |= (c1 >> 4) << (j + qk/2)
		}
		binary.LittleEndian.PutUint32(b[4:], qh)
	}
}
