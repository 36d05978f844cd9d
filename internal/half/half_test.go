package half

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func isNaN32(f float32) bool { return f != f }

func TestF16RoundTripAll(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		got := F32ToF16(f)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if !isNaN32(f) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, f)
			}
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != h&0x8000 {
				t.Fatalf("F32ToF16(NaN from %#04x) = %#04x, want NaN with same sign", h, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)=%v) = %#04x", h, f, got)
		}
	}
}

func TestBF16RoundTripAll(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := BF16ToF32(h)
		got := F32ToBF16(f)
		if h&0x7f80 == 0x7f80 && h&0x7f != 0 {
			if !isNaN32(f) || got&0x7f80 != 0x7f80 || got&0x7f == 0 || got&0x8000 != h&0x8000 {
				t.Fatalf("bf16 NaN %#04x: f32 %v, back %#04x", h, f, got)
			}
			continue
		}
		if got != h {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)=%v) = %#04x", h, f, got)
		}
	}
}

func TestF16Values(t *testing.T) {
	tests := []struct {
		h uint16
		f float32
	}{
		{0x0000, 0},
		{0x3c00, 1},
		{0xc000, -2},
		{0x3555, 0.333251953125},
		{0x7bff, 65504},
		{0x0400, 6.103515625e-05},
		{0x0001, 5.960464477539063e-08},
		{0x03ff, 6.097555160522461e-05},
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
	}
	for _, tt := range tests {
		if got := F16ToF32(tt.h); got != tt.f {
			t.Errorf("F16ToF32(%#04x) = %v, want %v", tt.h, got, tt.f)
		}
		if got := F32ToF16(tt.f); got != tt.h {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tt.f, got, tt.h)
		}
	}
	if got := F16ToF32(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("F16ToF32(0x8000) = %v, want -0", got)
	}
}

func TestF32ToF16Special(t *testing.T) {
	tests := []struct {
		name string
		f    float32
		want uint16
	}{
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"overflow", 1e10, 0x7c00},
		{"negative overflow", -1e10, 0xfc00},
		{"just below rounding to inf", 65519.996, 0x7bff},
		{"tie to inf", 65520, 0x7c00},
		{"tiny to zero", 1e-10, 0x0000},
		{"half smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"above half smallest subnormal", 0x1.000002p-25, 0x0001},
		{"1.5 subnormal ulp ties to even 2", 0x1.8p-24, 0x0002},
		{"2.5 subnormal ulp ties to even 2", 0x1.4p-23, 0x0002},
		{"largest subnormal rounds up to smallest normal", 0x1.ffcp-15 + 0x1p-26, 0x0400},
		{"float32 subnormal", math.Float32frombits(1), 0x0000},
		{"1 + half ulp ties to even", 1 + 0x1p-11, 0x3c00},
		{"1 + 3 half ulp ties to even", 1 + 3*0x1p-11, 0x3c02},
	}
	for _, tt := range tests {
		if got := F32ToF16(tt.f); got != tt.want {
			t.Errorf("%s: F32ToF16(%g) = %#04x, want %#04x", tt.name, tt.f, got, tt.want)
		}
	}
	if got := F32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, want NaN", got)
	}
	// A NaN whose payload lies only in the low bits must not become infinity.
	if got := F32ToF16(math.Float32frombits(0x7f800001)); got&0x3ff == 0 {
		t.Errorf("F32ToF16(signalling NaN) = %#04x, want NaN", got)
	}
}

// refF32ToF16 finds the nearest binary16 by binary search over the ordered
// positive values: an implementation independent of the bit tricks above.
func refF32ToF16(f float32) uint16 {
	sign := uint16(0)
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	x := math.Abs(float64(f))
	val := func(h int) float64 {
		if h == 0x7c00 {
			return 65536 // the next value after 65504 if the exponent went on
		}
		return float64(F16ToF32(uint16(h)))
	}
	if x >= 65520 {
		return sign | 0x7c00
	}
	// Largest h in [0, 0x7bff] with val(h) <= x.
	h := sort.Search(0x7c00, func(i int) bool { return val(i) > x }) - 1
	lo, hi := val(h), val(h+1)
	switch {
	case x-lo < hi-x:
		return sign | uint16(h)
	case x-lo > hi-x:
		return sign | uint16(h+1)
	case h&1 == 0:
		return sign | uint16(h)
	}
	return sign | uint16(h+1)
}

func TestF32ToF16AgainstReference(t *testing.T) {
	check := func(f float32) {
		t.Helper()
		if isNaN32(f) {
			return
		}
		if got, want := F32ToF16(f), refF32ToF16(f); got != want {
			t.Fatalf("F32ToF16(%g, bits %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
	// Every midpoint between neighbouring binary16 values, and the float32
	// values just either side of it.
	for h := 0; h < 0x7c00; h++ {
		lo := float64(F16ToF32(uint16(h)))
		hi := 65536.0
		if h+1 < 0x7c00 {
			hi = float64(F16ToF32(uint16(h + 1)))
		}
		mid := float32((lo + hi) / 2)
		for _, f := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1)))} {
			check(f)
			check(-f)
		}
	}
	// A spread of float32 bit patterns across the whole range.
	for b := uint64(0); b < 1<<32; b += 65521 {
		check(math.Float32frombits(uint32(b)))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		check(math.Float32frombits(r.Uint32()))
	}
}

func TestF32ToBF16Rounding(t *testing.T) {
	tests := []struct {
		name string
		f    float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"tie to even down", math.Float32frombits(0x3f808000), 0x3f80},
		{"tie to even up", math.Float32frombits(0x3f818000), 0x3f82},
		{"above tie", math.Float32frombits(0x3f808001), 0x3f81},
		{"below tie", math.Float32frombits(0x3f807fff), 0x3f80},
		{"overflow to inf", math.MaxFloat32, 0x7f80},
		{"negative", -2, 0xc000},
		{"inf", float32(math.Inf(-1)), 0xff80},
	}
	for _, tt := range tests {
		if got := F32ToBF16(tt.f); got != tt.want {
			t.Errorf("%s: F32ToBF16(%g) = %#04x, want %#04x", tt.name, tt.f, got, tt.want)
		}
	}
	for _, bits := range []uint32{0x7f800001, 0xff800001, 0x7fc00000, 0x7f8000ff} {
		got := F32ToBF16(math.Float32frombits(bits))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 || uint32(got&0x8000)<<16 != bits&0x80000000 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, want NaN of the same sign", bits, got)
		}
	}
}

func TestF32ToBF16AgainstReference(t *testing.T) {
	ref := func(f float32) uint16 {
		// Nearest by comparing distances in float64 to the two neighbours.
		b := math.Float32bits(f)
		lo := b &^ 0xffff
		x := float64(f)
		l := float64(math.Float32frombits(lo))
		hb := lo + 0x10000
		var h float64
		if hb&0x7f800000 == 0x7f800000 { // the neighbour above is infinity
			h = math.Copysign(math.Ldexp(1, 128), x)
		} else {
			h = float64(math.Float32frombits(hb))
		}
		dl, dh := math.Abs(x-l), math.Abs(h-x)
		if dl < dh || (dl == dh && (lo>>16)&1 == 0) {
			return uint16(lo >> 16)
		}
		return uint16(hb >> 16)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 500000 {
		f := math.Float32frombits(r.Uint32())
		if isNaN32(f) || math.IsInf(float64(f), 0) {
			continue
		}
		if got, want := F32ToBF16(f), ref(f); got != want {
			t.Fatalf("F32ToBF16(%g, %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestF8E4M3(t *testing.T) {
	tests := []struct {
		b uint8
		f float32
	}{
		{0x00, 0},
		{0x38, 1},
		{0xb8, -1},
		{0x7e, 448},
		{0xfe, -448},
		{0x08, 0x1p-6},
		{0x01, 0x1p-9},
		{0x07, 7 * 0x1p-9},
		{0x40, 2},
		{0x3c, 1.5},
	}
	for _, tt := range tests {
		if got := F8E4M3ToF32(tt.b); got != tt.f {
			t.Errorf("F8E4M3ToF32(%#02x) = %v, want %v", tt.b, got, tt.f)
		}
	}
	nans := 0
	prev := float32(-1)
	for i := 0; i < 256; i++ {
		f := F8E4M3ToF32(uint8(i))
		if isNaN32(f) {
			nans++
			continue
		}
		if math.IsInf(float64(f), 0) {
			t.Errorf("F8E4M3ToF32(%#02x) = inf; the FN format has none", i)
		}
		// Positive patterns are strictly increasing.
		if i < 0x80 {
			if i > 0 && f <= prev {
				t.Errorf("F8E4M3ToF32 not increasing at %#02x: %v after %v", i, f, prev)
			}
			prev = f
			if g := F8E4M3ToF32(uint8(i) | 0x80); g != -f {
				t.Errorf("F8E4M3ToF32(%#02x) = %v, want %v", i|0x80, g, -f)
			}
		}
	}
	if nans != 2 || !isNaN32(F8E4M3ToF32(0x7f)) || !isNaN32(F8E4M3ToF32(0xff)) {
		t.Errorf("E4M3 NaNs: %d, want exactly 0x7f and 0xff", nans)
	}
}

func TestF8E5M2(t *testing.T) {
	tests := []struct {
		b uint8
		f float32
	}{
		{0x00, 0},
		{0x3c, 1},
		{0xbc, -1},
		{0x7b, 57344},
		{0x01, 0x1p-16},
		{0x04, 0x1p-14},
		{0x7c, float32(math.Inf(1))},
		{0xfc, float32(math.Inf(-1))},
	}
	for _, tt := range tests {
		if got := F8E5M2ToF32(tt.b); got != tt.f {
			t.Errorf("F8E5M2ToF32(%#02x) = %v, want %v", tt.b, got, tt.f)
		}
	}
	for _, b := range []uint8{0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff} {
		if f := F8E5M2ToF32(b); !isNaN32(f) {
			t.Errorf("F8E5M2ToF32(%#02x) = %v, want NaN", b, f)
		}
	}
}

func TestF8E8M0(t *testing.T) {
	for i := 0; i < 255; i++ {
		want := float32(math.Ldexp(1, i-127))
		if got := F8E8M0ToF32(uint8(i)); got != want {
			t.Errorf("F8E8M0ToF32(%d) = %g, want %g", i, got, want)
		}
	}
	if !isNaN32(F8E8M0ToF32(0xff)) {
		t.Errorf("F8E8M0ToF32(0xff) is not NaN")
	}
}

func TestSliceConversions(t *testing.T) {
	vals := []float32{0, 1, -2, 0.5, 65504, -0.25}
	f16 := make([]byte, 2*len(vals))
	bf16 := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(f16[2*i:], F32ToF16(v))
		binary.LittleEndian.PutUint16(bf16[2*i:], F32ToBF16(v))
	}
	tests := []struct {
		name string
		conv func([]float32, []byte) int
		src  []byte
		dst  int
		want []float32
	}{
		{"f16 all", F16sToF32s, f16, len(vals), vals},
		{"bf16 all", BF16sToF32s, bf16, len(vals), []float32{0, 1, -2, 0.5, 65536, -0.25}},
		{"f16 short dst", F16sToF32s, f16, 3, vals[:3]},
		{"bf16 short src", BF16sToF32s, bf16[:5], 6, []float32{0, 1}},
		{"empty", F16sToF32s, nil, 4, nil},
	}
	for _, tt := range tests {
		dst := make([]float32, tt.dst)
		n := tt.conv(dst, tt.src)
		if n != len(tt.want) {
			t.Errorf("%s: converted %d, want %d", tt.name, n, len(tt.want))
			continue
		}
		for i, w := range tt.want {
			if dst[i] != w {
				t.Errorf("%s: [%d] = %v, want %v", tt.name, i, dst[i], w)
			}
		}
	}
}

func BenchmarkBF16sToF32s(b *testing.B) {
	src := make([]byte, 2<<20)
	dst := make([]float32, 1<<20)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		BF16sToF32s(dst, src)
	}
}

func BenchmarkF16sToF32s(b *testing.B) {
	src := make([]byte, 2<<20)
	dst := make([]float32, 1<<20)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		F16sToF32s(dst, src)
	}
}
