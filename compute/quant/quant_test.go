package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/half"
)

// f16bits returns the float16 encoding of v, which must be exact.
func f16bits(t *testing.T, v float32) []byte {
	t.Helper()
	h := half.F32ToF16(v)
	if half.F16ToF32(h) != v {
		t.Fatalf("%g is not exact in float16", v)
	}
	return []byte{byte(h), byte(h >> 8)}
}

func decode(t *testing.T, typ compute.DType, n int, block []byte) []float32 {
	t.Helper()
	got := make([]float32, n)
	if err := Dequantize(got, block, typ); err != nil {
		t.Fatal(err)
	}
	return got
}

func checkValues(t *testing.T, typ compute.DType, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s element %d = %g, want %g", typ, i, got[i], want[i])
		}
	}
}

// TestDequantizeSimple decodes hand-built blocks of the 32-element formats
// whose values are worked out by hand.
func TestDequantizeSimple(t *testing.T) {
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	nibbles := func(lo, hi func(j int) int) []byte {
		b := make([]byte, 16)
		for j := range b {
			b[j] = byte(lo(j) | hi(j)<<4)
		}
		return b
	}
	iota := func(j int) int { return j }
	rev := func(j int) int { return 15 - j }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

	tests := []struct {
		typ   compute.DType
		block func(t *testing.T) []byte
		want  func(i int) float32
	}{
		{compute.Q8_0, func(t *testing.T) []byte {
			q := make([]byte, 32)
			for j := range q {
				q[j] = byte(int8(j*9 - 128)) // -128, -119, ... 151 wraps
			}
			return cat(f16bits(t, 0.5), q)
		}, func(i int) float32 { return float32(int8(i*9-128)) * 0.5 }},
		{compute.Q4_0, func(t *testing.T) []byte {
			return cat(f16bits(t, 2), nibbles(iota, rev))
		}, func(i int) float32 {
			if i < 16 {
				return float32(i-8) * 2 // -16 … 14
			}
			return float32(15-(i-16)-8) * 2 // 14 … -16
		}},
		{compute.Q4_1, func(t *testing.T) []byte {
			return cat(f16bits(t, 0.25), f16bits(t, -1), nibbles(iota, rev))
		}, func(i int) float32 {
			if i < 16 {
				return float32(i)*0.25 - 1
			}
			return float32(15-(i-16))*0.25 - 1
		}},
		{compute.Q5_0, func(t *testing.T) []byte {
			// High bits set for elements 0, 3 and 16+5.
			return cat(f16bits(t, 1), u32(1<<0|1<<3|1<<(16+5)), nibbles(iota, rev))
		}, func(i int) float32 {
			q := 0
			if i < 16 {
				q = i
			} else {
				q = 15 - (i - 16)
			}
			if i == 0 || i == 3 || i == 21 {
				q += 16
			}
			return float32(q - 16)
		}},
		{compute.Q5_1, func(t *testing.T) []byte {
			return cat(f16bits(t, 0.5), f16bits(t, 1), u32(0xFFFF0000), nibbles(iota, iota))
		}, func(i int) float32 {
			q := i % 16
			if i >= 16 {
				q += 16
			}
			return float32(q)*0.5 + 1
		}},
		{compute.IQ4_NL, func(t *testing.T) []byte {
			return cat(f16bits(t, 0.5), nibbles(iota, rev))
		}, func(i int) float32 {
			levels := []float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
			if i < 16 {
				return levels[i] * 0.5
			}
			return levels[15-(i-16)] * 0.5
		}},
		{compute.MXFP4, func(t *testing.T) []byte {
			// e = 127 is a scale of 1: the values are plain E2M1.
			return cat([]byte{127}, nibbles(iota, rev))
		}, func(i int) float32 {
			fp4 := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
			if i < 16 {
				return fp4[i]
			}
			return fp4[15-(i-16)]
		}},
	}
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			block := tc.block(t)
			if len(block) != tc.typ.BlockBytes() {
				t.Fatalf("block of %d bytes, want %d", len(block), tc.typ.BlockBytes())
			}
			got := decode(t, tc.typ, 32, block)
			want := make([]float32, 32)
			for i := range want {
				want[i] = tc.want(i)
			}
			checkValues(t, tc.typ, got, want)
		})
	}
}

func TestE8M0(t *testing.T) {
	tests := []struct {
		e    uint8
		want float64
	}{
		{0, math.Ldexp(1, -128)}, {1, math.Ldexp(1, -127)}, {2, math.Ldexp(1, -126)},
		{127, 0.5}, {128, 1}, {200, math.Ldexp(1, 72)}, {255, math.Ldexp(1, 127)},
	}
	for _, tc := range tests {
		if got := e8m0Half(tc.e); float64(got) != tc.want {
			t.Errorf("e8m0Half(%d) = %g, want %g", tc.e, got, tc.want)
		}
	}
}

// kBlock describes a hand-built k-quant super-block by its parts.
type kBlock struct {
	d, dmin float32
	scales  [16]int // sub-block scales (signed for Q3_K, Q6_K)
	mins    [16]int
	codes   [256]int // unsigned codes as stored
}

func newKBlock(rng *rand.Rand, nsub, scaleMax, minMax, codeMax int, signedScales bool) kBlock {
	var k kBlock
	k.d, k.dmin = 0.125, 0.0625
	for j := range nsub {
		if signedScales {
			k.scales[j] = rng.IntN(2*scaleMax) - scaleMax
		} else {
			k.scales[j] = rng.IntN(scaleMax + 1)
		}
		k.mins[j] = rng.IntN(minMax + 1)
	}
	// Pin the extremes so every bit of the packing is exercised.
	k.scales[0] = scaleMax - 1
	k.scales[nsub-1] = -scaleMax
	if !signedScales {
		k.scales[nsub-1] = scaleMax
	}
	k.mins[1] = minMax
	for e := range k.codes {
		k.codes[e] = rng.IntN(codeMax + 1)
	}
	k.codes[0], k.codes[255] = codeMax, 0
	return k
}

// TestDequantizeK builds k-quant super-blocks bit by bit from the layout
// description (independently of the package's packing code) and checks
// every decoded value against d·scale·code − dmin·min worked out from the
// parts.
func TestDequantizeK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	put16 := func(b []byte, v float32) { copy(b, f16bits(t, v)) }
	tests := []struct {
		typ   compute.DType
		build func(k *kBlock) []byte
		value func(k *kBlock, e int) float32
		gen   func() kBlock
	}{
		{
			typ: compute.Q2_K,
			gen: func() kBlock { return newKBlock(rng, 16, 15, 15, 3, false) },
			build: func(k *kBlock) []byte {
				b := make([]byte, 84)
				for j := range 16 {
					b[j] = byte(k.scales[j] | k.mins[j]<<4)
				}
				for e, c := range k.codes {
					// element 128h + 32j + l: bits 2j of qs[32h + l]
					h, j, l := e/128, e%128/32, e%32
					b[16+32*h+l] |= byte(c << (2 * j))
				}
				put16(b[80:], k.d)
				put16(b[82:], k.dmin)
				return b
			},
			value: func(k *kBlock, e int) float32 {
				sub := e / 16
				dl := k.d * float32(k.scales[sub])
				ml := k.dmin * float32(k.mins[sub])
				return float32(dl*float32(k.codes[e])) - ml
			},
		},
		{
			typ: compute.Q3_K,
			gen: func() kBlock { return newKBlock(rng, 16, 32, 0, 7, true) },
			build: func(k *kBlock) []byte {
				b := make([]byte, 110)
				for e, c := range k.codes {
					h, j, l := e/128, e%128/32, e%32
					b[32+32*h+l] |= byte((c & 3) << (2 * j))
					if c&4 != 0 {
						b[e%32] |= 1 << (e / 32)
					}
				}
				for j := range 16 {
					u := k.scales[j] + 32 // 6 bits
					if j < 8 {
						b[96+j] |= byte(u & 0xF)
					} else {
						b[96+j-8] |= byte(u&0xF) << 4
					}
					b[96+8+j%4] |= byte(u>>4) << (2 * (j / 4))
				}
				put16(b[108:], k.d)
				return b
			},
			value: func(k *kBlock, e int) float32 {
				dl := k.d * float32(k.scales[e/16])
				return dl * float32(k.codes[e]-4)
			},
		},
		{
			typ: compute.Q4_K,
			gen: func() kBlock { return newKBlock(rng, 8, 63, 63, 15, false) },
			build: func(k *kBlock) []byte {
				b := make([]byte, 144)
				put16(b, k.d)
				put16(b[2:], k.dmin)
				packK4Scales(b[4:16], k)
				for e, c := range k.codes {
					ch, hi, l := e/64, e%64/32, e%32
					b[16+32*ch+l] |= byte(c << (4 * hi))
				}
				return b
			},
			value: func(k *kBlock, e int) float32 {
				sub := e / 32
				return float32(k.d*float32(k.scales[sub])*float32(k.codes[e])) - k.dmin*float32(k.mins[sub])
			},
		},
		{
			typ: compute.Q5_K,
			gen: func() kBlock { return newKBlock(rng, 8, 63, 63, 31, false) },
			build: func(k *kBlock) []byte {
				b := make([]byte, 176)
				put16(b, k.d)
				put16(b[2:], k.dmin)
				packK4Scales(b[4:16], k)
				for e, c := range k.codes {
					ch, hi, l := e/64, e%64/32, e%32
					b[48+32*ch+l] |= byte((c & 0xF) << (4 * hi))
					if c&16 != 0 {
						b[16+l] |= 1 << (2*ch + hi)
					}
				}
				return b
			},
			value: func(k *kBlock, e int) float32 {
				sub := e / 32
				return float32(k.d*float32(k.scales[sub])*float32(k.codes[e])) - k.dmin*float32(k.mins[sub])
			},
		},
		{
			typ: compute.Q6_K,
			gen: func() kBlock { return newKBlock(rng, 16, 128, 0, 63, true) },
			build: func(k *kBlock) []byte {
				b := make([]byte, 210)
				for e, c := range k.codes {
					// element 128h + 32q + l (q < 4, l < 32)
					h, q, l := e/128, e%128/32, e%32
					b[64*h+l+32*(q%2)] |= byte((c & 0xF) << (4 * (q / 2)))
					b[128+32*h+l] |= byte(c>>4) << (2 * q)
				}
				for j := range 16 {
					b[192+j] = byte(int8(k.scales[j]))
				}
				put16(b[208:], k.d)
				return b
			},
			value: func(k *kBlock, e int) float32 {
				return float32(k.d*float32(k.scales[e/16])) * float32(k.codes[e]-32)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			for range 20 {
				k := tc.gen()
				got := decode(t, tc.typ, 256, tc.build(&k))
				want := make([]float32, 256)
				for e := range want {
					want[e] = tc.value(&k, e)
				}
				checkValues(t, tc.typ, got, want)
			}
		})
	}
}

// packK4Scales writes the 12 scale bytes of Q4_K and Q5_K as the layout
// describes them: bytes 0-3 and 4-7 hold the scales and mins of sub-blocks
// 0-3 in their low six bits; bytes 8-11 hold the low nibbles of the scales
// (low) and mins (high) of sub-blocks 4-7, whose top two bits go into the
// top bits of bytes 0-3 (scales) and 4-7 (mins).
func packK4Scales(b []byte, k *kBlock) {
	for j := range 4 {
		b[j] = byte(k.scales[j])
		b[4+j] = byte(k.mins[j])
	}
	for j := range 4 {
		s, m := k.scales[4+j], k.mins[4+j]
		b[8+j] = byte(s&0xF | (m&0xF)<<4)
		b[j] |= byte(s>>4) << 6
		b[4+j] |= byte(m>>4) << 6
	}
}

// TestDequantizeKKnown checks a few literal values of k-quant blocks.
func TestDequantizeKKnown(t *testing.T) {
	// Q4_K: d = 0.5, dmin = 0.25, sub-block 0 scale 3 min 2, code 7 →
	// 0.5·3·7 − 0.25·2 = 10.
	b := make([]byte, 144)
	copy(b, f16bits(t, 0.5))
	copy(b[2:], f16bits(t, 0.25))
	b[4], b[8] = 3, 2
	b[16] = 7
	got := decode(t, compute.Q4_K, 256, b)
	if got[0] != 10 || got[1] != -0.5 {
		t.Errorf("Q4_K: got %g, %g; want 10, -0.5", got[0], got[1])
	}
	// Q6_K: d = 0.5, scale[0] = -2, code 63 → 0.5·(−2)·31 = −31.
	b = make([]byte, 210)
	b[0] = 0xF
	b[128] = 3
	b[192] = byte(0xFE)
	copy(b[208:], f16bits(t, 0.5))
	got = decode(t, compute.Q6_K, 256, b)
	if got[0] != -31 || got[1] != 32 {
		t.Errorf("Q6_K: got %g, %g; want -31, 32", got[0], got[1])
	}
}

func TestDequantizeFloat(t *testing.T) {
	vals := []float32{0, 1, -2.5, 65504, 1.0 / 1024}
	for _, typ := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		buf := make([]byte, len(vals)*typ.Size())
		if err := Quantize(buf, vals, typ); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(vals))
		if err := Dequantize(got, buf, typ); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want := v
			if typ == compute.BF16 {
				want = half.BF16ToF32(half.F32ToBF16(v))
			}
			if got[i] != want {
				t.Errorf("%s: element %d = %g, want %g", typ, i, got[i], want)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"partial block", Dequantize(make([]float32, 31), make([]byte, 34), compute.Q8_0)},
		{"short data", Dequantize(make([]float32, 32), make([]byte, 33), compute.Q8_0)},
		{"long data", Dequantize(make([]float32, 256), make([]byte, 145), compute.Q4_K)},
		{"int type", Dequantize(make([]float32, 4), make([]byte, 16), compute.I32)},
		{"unknown type", Dequantize(make([]float32, 4), make([]byte, 16), compute.DType(200))},
		{"quantize partial", Quantize(make([]byte, 144), make([]float32, 255), compute.Q4_K)},
		{"quantize size", Quantize(make([]byte, 34), make([]float32, 64), compute.Q8_0)},
		{"quantize unsupported", Quantize(make([]byte, 18), make([]float32, 32), compute.IQ4_NL)},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// testData returns n values drawn from a normal distribution with a few
// outliers, as trained weights look.
func testData(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.02)
		if rng.IntN(500) == 0 {
			x[i] *= 8
		}
	}
	return x
}

// TestRoundTripBound quantizes and dequantizes every writable type and
// checks the error: per element for the formats with one uniform step per
// block (half a step, or a whole step where the code range is clamped at
// the extreme, plus the float16 rounding of the stored scales), and as an
// RMS error relative to the data's RMS for all formats.
func TestRoundTripBound(t *testing.T) {
	tests := []struct {
		typ compute.DType
		rel float64 // bound on RMS(error)/RMS(x)
	}{
		{compute.F32, 0},
		{compute.F16, 1e-3},
		{compute.BF16, 4e-3},
		{compute.Q8_0, 0.008},
		{compute.Q6_K, 0.022},
		{compute.Q5_1, 0.045},
		{compute.Q5_0, 0.055},
		{compute.Q5_K, 0.04},
		{compute.Q4_1, 0.09},
		{compute.Q4_0, 0.11},
		{compute.Q4_K, 0.08},
		{compute.Q3_K, 0.18},
		{compute.Q2_K, 0.38},
	}
	const n = 256 * 64
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			x := testData(uint64(tc.typ), n)
			size, _ := tc.typ.RowBytes(n)
			q := make([]byte, size)
			if err := Quantize(q, x, tc.typ); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, n)
			if err := Dequantize(y, q, tc.typ); err != nil {
				t.Fatal(err)
			}
			var se, sx float64
			for i := range x {
				d := float64(y[i] - x[i])
				se += d * d
				sx += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / sx)
			t.Logf("%s: RMS error %.4f of RMS (%.3f bits/weight)", tc.typ, rel, 8*float64(size)/n)
			if rel > tc.rel {
				t.Errorf("%s: RMS error %.4f of RMS, want ≤ %.4f", tc.typ, rel, tc.rel)
			}
			checkElementBound(t, tc.typ, x, y, q)
		})
	}
}

// checkElementBound checks |x − y| per element for the 32-element formats.
func checkElementBound(t *testing.T, typ compute.DType, x, y []float32, q []byte) {
	t.Helper()
	var steps, nmax float64 // error in steps of d; largest code magnitude
	off := 0                // offset of d in the block
	minOff := -1
	switch typ {
	case compute.Q8_0:
		steps, nmax = 0.5, 128
	case compute.Q4_0:
		steps, nmax = 1, 8 // the side opposite the extreme clamps at +7
	case compute.Q5_0:
		steps, nmax = 1, 16
	case compute.Q4_1:
		steps, nmax, minOff = 0.5, 15, 2
	case compute.Q5_1:
		steps, nmax, minOff = 0.5, 31, 2
	default:
		return
	}
	bb := typ.BlockBytes()
	for i := range x {
		b := q[i/32*bb:]
		d := math.Abs(float64(f16(b[off:])))
		bound := steps*d + nmax*d/1024 + 1e-7
		if minOff >= 0 {
			bound += math.Abs(float64(f16(b[minOff:]))) / 1024
		}
		if e := math.Abs(float64(x[i] - y[i])); e > bound {
			t.Fatalf("%s element %d: |%g − %g| = %g > bound %g (d = %g)", typ, i, x[i], y[i], e, bound, d)
		}
	}
}

// TestQuantizeReference checks the simple formats against values the
// reference rules give: Q8_0 scales by amax/127 and rounds half away from
// zero; Q4_0 maps the element of largest magnitude to code 0 (−8).
func TestQuantizeReference(t *testing.T) {
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(i-16) / 16 // −1 … 0.9375
	}
	q := make([]byte, 34)
	if err := Quantize(q, x, compute.Q8_0); err != nil {
		t.Fatal(err)
	}
	d := float32(1.0 / 127)
	if got, want := f16(q), half.F16ToF32(half.F32ToF16(d)); got != want {
		t.Errorf("Q8_0 d = %g, want %g", got, want)
	}
	for i, v := range x {
		want := int8(math.Round(float64(v * (1 / d))))
		if int8(q[2+i]) != want {
			t.Errorf("Q8_0 code %d = %d, want %d", i, int8(q[2+i]), want)
		}
	}
	q = make([]byte, 18)
	if err := Quantize(q, x, compute.Q4_0); err != nil {
		t.Fatal(err)
	}
	if got := f16(q); got != 0.125 { // −1 / −8
		t.Errorf("Q4_0 d = %g, want 0.125", got)
	}
	if q[2]&0xF != 0 {
		t.Errorf("Q4_0: element 0 (−1) has code %d, want 0", q[2]&0xF)
	}
}

// TestQuantizeZeros checks that all-zero and constant blocks survive.
func TestQuantizeZeros(t *testing.T) {
	for _, typ := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_0, compute.Q5_1, compute.Q2_K, compute.Q3_K, compute.Q4_K, compute.Q5_K, compute.Q6_K} {
		for _, c := range []float32{0, 0.5, -0.25} {
			x := make([]float32, 256)
			for i := range x {
				x[i] = c
			}
			size, _ := typ.RowBytes(256)
			q := make([]byte, size)
			if err := Quantize(q, x, typ); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, 256)
			if err := Dequantize(y, q, typ); err != nil {
				t.Fatal(err)
			}
			for i := range y {
				if math.Abs(float64(y[i]-c)) > 0.02*math.Abs(float64(c))+1e-6 {
					t.Fatalf("%s constant %g: element %d decodes to %g", typ, c, i, y[i])
				}
			}
		}
	}
}

func FuzzDequantize(f *testing.F) {
	f.Add(uint8(compute.Q4_K), make([]byte, 144))
	f.Add(uint8(compute.Q8_0), make([]byte, 68))
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		dt := compute.DType(typ)
		bs, bb := dt.BlockSize(), dt.BlockBytes()
		if bs == 0 || dt == compute.I32 {
			return
		}
		n := len(data) / bb * bs
		_ = Dequantize(make([]float32, n), data[:n/bs*bb], dt)
		_ = Dequantize(make([]float32, n+1), data, dt)
	})
}

func BenchmarkDequantize(b *testing.B) {
	const n = 4096 * 256
	x := testData(1, n)
	for _, typ := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q5_K, compute.Q6_K, compute.F16} {
		size, _ := typ.RowBytes(n)
		q := make([]byte, size)
		if err := Quantize(q, x, typ); err != nil {
			b.Fatal(err)
		}
		y := make([]float32, n)
		b.Run(fmt.Sprint(typ), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			for b.Loop() {
				_ = Dequantize(y, q, typ)
			}
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	const n = 256 * 256
	x := testData(1, n)
	for _, typ := range []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K} {
		size, _ := typ.RowBytes(n)
		q := make([]byte, size)
		b.Run(fmt.Sprint(typ), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			for b.Loop() {
				_ = Quantize(q, x, typ)
			}
		})
	}
}

// TestGGUFTypes checks that every dtype GGUF maps to has the block layout
// the GGUF package gives its type.
func TestGGUFTypes(t *testing.T) {
	for _, p := range ggufTypes {
		if p.d.BlockSize() != p.g.BlockSize() || p.d.BlockBytes() != p.g.BytesPerBlock() {
			t.Errorf("%s: dtype block %d/%d bytes, GGUF type %s %d/%d", p.d, p.d.BlockSize(), p.d.BlockBytes(), p.g, p.g.BlockSize(), p.g.BytesPerBlock())
		}
		if d, ok := FromGGUF(p.g); !ok || d != p.d {
			t.Errorf("FromGGUF(%s) = %s, %v", p.g, d, ok)
		}
		if g, ok := ToGGUF(p.d); !ok || g != p.g {
			t.Errorf("ToGGUF(%s) = %s, %v", p.d, g, ok)
		}
	}
	if _, ok := FromGGUF(gguf.IQ2_XXS); ok {
		t.Error("FromGGUF accepts IQ2_XXS")
	}
}
