package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// putScale stores v, which must be exact, as a little-endian value of type
// scale.
func putScale(t *testing.T, b []byte, v float32, scale compute.DType) {
	t.Helper()
	var back float32
	switch scale {
	case compute.BF16:
		h := half.F32ToBF16(v)
		binary.LittleEndian.PutUint16(b, h)
		back = half.BF16ToF32(h)
	case compute.F16:
		h := half.F32ToF16(v)
		binary.LittleEndian.PutUint16(b, h)
		back = half.F16ToF32(h)
	default:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
		back = v
	}
	if back != v {
		t.Fatalf("%g is not exact in %s", v, scale)
	}
}

// TestDequantizeMLXByHand decodes single groups whose bit streams are
// written out byte by byte.
func TestDequantizeMLXByHand(t *testing.T) {
	tests := []struct {
		name  string
		bits  int
		codes []byte // the group's first bytes; the rest are zero
		want  []int  // the first codes
	}{
		// 2 bits: 0b11_10_01_00 holds 0, 1, 2, 3 from the low end.
		{"2-bit", 2, []byte{0xE4, 0x1B}, []int{0, 1, 2, 3, 3, 2, 1, 0}},
		// 3 bits: 0..7 is the octal number 76543210 = 0xFAC688, low byte
		// first; the third and sixth codes span two bytes.
		{"3-bit", 3, []byte{0x88, 0xC6, 0xFA}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		// 4 bits: the low nibble comes first.
		{"4-bit", 4, []byte{0x21, 0xF0, 0x9A}, []int{1, 2, 0, 15, 10, 9}},
		// 5 bits: 31, 0, 17, 3 = 0b00011_10001_00000_11111 = 0x1C41F.
		{"5-bit", 5, []byte{0x1F, 0xC4, 0x01}, []int{31, 0, 17, 3}},
		// 6 bits: 1, 63, 32, 5 = 0b000101_100000_111111_000001 = 0x160FC1.
		{"6-bit", 6, []byte{0xC1, 0x0F, 0x16}, []int{1, 63, 32, 5}},
		{"8-bit", 8, []byte{0, 255, 128, 7}, []int{0, 255, 128, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dt, err := compute.MLXAffine(tt.bits, 32, compute.BF16)
			if err != nil {
				t.Fatal(err)
			}
			// scale −0.75, bias 2.5 (bf16 0xBF40, 0x4020).
			block := make([]byte, dt.BlockBytes())
			copy(block, []byte{0x40, 0xBF, 0x20, 0x40})
			copy(block[4:], tt.codes)
			got := decode(t, dt, 32, block)
			for i, c := range tt.want {
				if want := -0.75*float32(c) + 2.5; got[i] != want {
					t.Fatalf("element %d = %g, want %g (code %d)", i, got[i], want, c)
				}
			}
			for i := len(tt.want); i < 32; i++ {
				if i*tt.bits >= 8*len(tt.codes) && got[i] != 2.5 {
					t.Fatalf("element %d = %g, want the bias 2.5", i, got[i])
				}
			}
		})
	}
}

// TestDequantizeMLX repacks rows of every bits, group and scale type from
// MLX's three tensors (built by writing each code's bits into U32 words
// one bit at a time) and checks every decoded value exactly: codes, scales
// and biases are chosen so that scale·code + bias is exact in float32.
func TestDequantizeMLX(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, scale := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
				t.Run(fmt.Sprintf("%d-bit/g%d/%s", bits, group, scale), func(t *testing.T) {
					dt, err := compute.MLXAffine(bits, group, scale)
					if err != nil {
						t.Fatal(err)
					}
					if b, g, s, ok := dt.MLX(); !ok || b != bits || g != group || s != scale {
						t.Fatalf("%s.MLX() = %d, %d, %s, %v", dt, b, g, s, ok)
					}
					if dt.BlockSize() != group || dt.BlockBytes() != 2*scale.Size()+group*bits/8 || !dt.Quantized() {
						t.Fatalf("%s: block of %d elements in %d bytes", dt, dt.BlockSize(), dt.BlockBytes())
					}
					const rows = 3
					cols := 2 * group
					groups := cols / group
					es := scale.Size()
					words := make([]uint32, rows*cols*bits/32)
					sc := make([]byte, rows*groups*es)
					bi := make([]byte, rows*groups*es)
					want := make([]float32, rows*cols)
					for r := range rows {
						for g := range groups {
							// Powers of two times small integers: exact.
							s := float32(int(1)<<(r+g)) / 64 * float32(1-2*(g%2))
							z := float32(r-g) * 0.375
							putScale(t, sc[(r*groups+g)*es:], s, scale)
							putScale(t, bi[(r*groups+g)*es:], z, scale)
							for j := range group {
								c := (j*7 + r*3 + g) % (1 << bits)
								if j == 0 {
									c = 1<<bits - 1
								}
								e := r*cols + g*group + j
								for k := range bits {
									bit := e*bits + k
									words[bit/32] |= uint32(c>>k&1) << (bit % 32)
								}
								want[e] = s*float32(c) + z
							}
						}
					}
					codes := make([]byte, 4*len(words))
					for i, w := range words {
						binary.LittleEndian.PutUint32(codes[4*i:], w)
					}
					rb, _ := dt.RowBytes(cols)
					data := make([]byte, rows*rb)
					if err := MLXBlocks(data, dt, rows, cols, codes, sc, bi); err != nil {
						t.Fatal(err)
					}
					checkValues(t, dt, decode(t, dt, rows*cols, data), want)
				})
			}
		}
	}
}

func TestMLXAffineErrors(t *testing.T) {
	for _, tt := range []struct {
		bits, group int
		scale       compute.DType
		want        string
	}{
		{7, 64, compute.BF16, "7 bits"},
		{4, 48, compute.BF16, "group size 48"},
		{4, 64, compute.Q8_0, "scales of type q8_0"},
	} {
		if _, err := compute.MLXAffine(tt.bits, tt.group, tt.scale); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("MLXAffine(%d, %d, %s) = %v, want an error about %q", tt.bits, tt.group, tt.scale, err, tt.want)
		}
	}
	if _, _, _, ok := compute.Q4_0.MLX(); ok {
		t.Error("Q4_0 reports itself as an MLX type")
	}
	dt, _ := compute.MLXAffine(4, 64, compute.BF16)
	if dt.String() != "mlx4g64" {
		t.Errorf("name %q", dt)
	}
	if dt, _ := compute.MLXAffine(8, 32, compute.F16); dt.String() != "mlx8g32f16" {
		t.Errorf("name %q", dt)
	}
	// 2 rows of 128: 64 code bytes and 4 scales and biases of 2 bytes.
	ok := func() (dst, codes, sc, bi []byte) {
		return make([]byte, 2*2*36), make([]byte, 128), make([]byte, 8), make([]byte, 8)
	}
	dst, codes, sc, bi := ok()
	if err := MLXBlocks(dst, dt, 2, 128, codes, sc, bi); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(dst, codes, sc, bi *[]byte)
		want string
	}{
		{"short codes", func(_, c, _, _ *[]byte) { *c = (*c)[:120] }, "bytes of codes"},
		{"short scales", func(_, _, s, _ *[]byte) { *s = (*s)[:6] }, "bytes of scales"},
		{"long biases", func(_, _, _, b *[]byte) { *b = append(*b, 0, 0) }, "bytes of scales"},
		{"short dst", func(d, _, _, _ *[]byte) { *d = (*d)[:100] }, "want 144"},
	} {
		dst, codes, sc, bi := ok()
		tt.edit(&dst, &codes, &sc, &bi)
		if err := MLXBlocks(dst, dt, 2, 128, codes, sc, bi); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error about %q", tt.name, err, tt.want)
		}
	}
	if err := MLXBlocks(make([]byte, 144), dt, 2, 96, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("96 columns in groups of 64: %v", err)
	}
}
