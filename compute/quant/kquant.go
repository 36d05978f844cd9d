package quant

// The k-quants: super-blocks of 256 elements split into sub-blocks of 16 or
// 32, each with its own scale (and min) quantized to 4, 6 or 8 bits
// against the super-block's float16 scales.

const qkK = 256 // elements per k-quant super-block

// Byte layouts of the super-blocks.
const (
	// Q2_K: scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin.
	q2kScales, q2kQS, q2kD, q2kBytes = 0, 16, 80, 84
	// Q3_K: hmask[32], qs[64], scales[12] (6-bit, packed), d.
	q3kHMask, q3kQS, q3kScales, q3kD, q3kBytes = 0, 32, 96, 108, 110
	// Q4_K: d, dmin, scales[12] (6-bit scales and mins, packed), qs[128].
	q4kD, q4kScales, q4kQS, q4kBytes = 0, 4, 16, 144
	// Q5_K: d, dmin, scales[12], qh[32], qs[128].
	q5kD, q5kScales, q5kQH, q5kQS, q5kBytes = 0, 4, 16, 48, 176
	// Q6_K: ql[128], qh[64], scales[16] (int8), d.
	q6kQL, q6kQH, q6kScales, q6kD, q6kBytes = 0, 128, 192, 208, 210
)

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j (0…7) of a
// Q4_K or Q5_K super-block: sub-blocks 0-3 keep theirs in the low six bits
// of bytes j and j+4; sub-blocks 4-7 split theirs between the nibbles of
// byte j+4 and the top two bits of bytes j-4 and j.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xF | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// q3kScale unpacks the signed 6-bit scale of sub-block j (0…15) of a Q3_K
// super-block: the low nibble from byte j (j < 8, low half) or j-8 (high
// half), the top two bits from byte 8+j%4 at bit 2·(j/4).
func q3kScale(j int, s []byte) int {
	var lo byte
	if j < 8 {
		lo = s[j] & 0xF
	} else {
		lo = s[j-8] >> 4
	}
	hi := (s[8+j%4] >> (2 * (j / 4))) & 3
	return int(lo|hi<<4) - 32
}

// Q2_K: element 128h + 32j + l (h < 2, j < 4, l < 32) has the 2-bit code at
// bit 2j of qs[32h + l] and sub-block 8h + 2j + l/16; x = d·sc·q − dmin·m.
func decodeQ2_K(dst []float32, src []byte) {
	for i := 0; i < len(dst); i += qkK {
		b := src[i/qkK*q2kBytes:][:q2kBytes]
		d, dmin := f16(b[q2kD:]), f16(b[q2kD+2:])
		y := dst[i:][:qkK]
		for h := range 2 {
			q := b[q2kQS+32*h:][:32]
			for j := range 4 {
				shift := 2 * j
				for p := range 2 {
					sc := b[q2kScales+8*h+2*j+p]
					dl := d * float32(sc&0xF)
					ml := dmin * float32(sc>>4)
					out := y[128*h+32*j+16*p:][:16]
					for l := range out {
						out[l] = float32(dl*float32((q[16*p+l]>>shift)&3)) - ml
					}
				}
			}
		}
	}
}

// Q3_K: as Q2_K for the low two bits; the third bit of element e is bit
// e/32 of hmask[e%32], and a clear bit subtracts 4; x = d·sc·q.
func decodeQ3_K(dst []float32, src []byte) {
	for i := 0; i < len(dst); i += qkK {
		b := src[i/qkK*q3kBytes:][:q3kBytes]
		d := f16(b[q3kD:])
		hm := b[q3kHMask:][:32]
		sc := b[q3kScales:][:12]
		y := dst[i:][:qkK]
		for h := range 2 {
			q := b[q3kQS+32*h:][:32]
			for j := range 4 {
				shift := 2 * j
				bit := byte(1) << (4*h + j)
				for p := range 2 {
					dl := d * float32(q3kScale(8*h+2*j+p, sc))
					out := y[128*h+32*j+16*p:][:16]
					for l := range out {
						v := int((q[16*p+l] >> shift) & 3)
						if hm[16*p+l]&bit == 0 {
							v -= 4
						}
						out[l] = dl * float32(v)
					}
				}
			}
		}
	}
}

// Q4_K: chunk c (0…3) of 64 elements reads qs[32c : 32c+32]: low nibbles
// are sub-block 2c, high nibbles sub-block 2c+1; x = d·sc·q − dmin·m.
func decodeQ4_K(dst []float32, src []byte) {
	for i := 0; i < len(dst); i += qkK {
		b := src[i/qkK*q4kBytes:][:q4kBytes]
		d, dmin := f16(b[q4kD:]), f16(b[q4kD+2:])
		s := b[q4kScales:][:12]
		y := dst[i:][:qkK]
		for c := range 4 {
			q := b[q4kQS+32*c:][:32]
			sc, m := scaleMinK4(2*c, s)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*c+1, s)
			d2, m2 := d*float32(sc), dmin*float32(m)
			lo, hi := y[64*c:][:32], y[64*c+32:][:32]
			for l := range 32 {
				lo[l] = float32(d1*float32(q[l]&0xF)) - m1
				hi[l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// Q5_K: as Q4_K, with the fifth bit of chunk c's low and high halves at
// bits 2c and 2c+1 of qh[l].
func decodeQ5_K(dst []float32, src []byte) {
	for i := 0; i < len(dst); i += qkK {
		b := src[i/qkK*q5kBytes:][:q5kBytes]
		d, dmin := f16(b[q5kD:]), f16(b[q5kD+2:])
		s := b[q5kScales:][:12]
		qh := b[q5kQH:][:32]
		y := dst[i:][:qkK]
		for c := range 4 {
			q := b[q5kQS+32*c:][:32]
			sc, m := scaleMinK4(2*c, s)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*c+1, s)
			d2, m2 := d*float32(sc), dmin*float32(m)
			lo, hi := y[64*c:][:32], y[64*c+32:][:32]
			for l := range 32 {
				v1 := q[l]&0xF | ((qh[l]>>(2*c))&1)<<4
				v2 := q[l]>>4 | ((qh[l]>>(2*c+1))&1)<<4
				lo[l] = float32(d1*float32(v1)) - m1
				hi[l] = float32(d2*float32(v2)) - m2
			}
		}
	}
}

// Q6_K: half h (0, 1) of 128 elements reads ql[64h:], qh[32h:] and
// scales[8h:]. For l < 32, element 128h + 32k + l (k < 4) takes its low
// nibble from ql[64h + l + 32·(k%2)] (low nibble for k < 2, high for k ≥ 2),
// its top two bits from bits 2k of qh[32h + l], and scale 8h + l/16 + 2k;
// x = d·sc·(q − 32).
func decodeQ6_K(dst []float32, src []byte) {
	for i := 0; i < len(dst); i += qkK {
		b := src[i/qkK*q6kBytes:][:q6kBytes]
		d := f16(b[q6kD:])
		y := dst[i:][:qkK]
		for h := range 2 {
			ql := b[q6kQL+64*h:][:64]
			qh := b[q6kQH+32*h:][:32]
			sc := b[q6kScales+8*h:][:8]
			out := y[128*h:][:128]
			for l := range 32 {
				is := l / 16
				q1 := int(ql[l]&0xF|(qh[l]&3)<<4) - 32
				q2 := int(ql[l+32]&0xF|((qh[l]>>2)&3)<<4) - 32
				q3 := int(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				q4 := int(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
				out[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
				out[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				out[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				out[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
	}
}
