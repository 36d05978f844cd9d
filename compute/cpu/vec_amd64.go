//go:build amd64 && !purego

package cpu

// Assembly in vec_amd64.s. Each handles n elements, n a multiple of 8.

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func axpyAVX2(y *float32, alpha float32, x *float32, n int)

//go:noescape
func addAVX2(dst, a, b *float32, n int)

//go:noescape
func mulAVX2(dst, a, b *float32, n int)

//go:noescape
func scaleAVX2(x *float32, s float32, n int)

//go:noescape
func mulScaleAVX2(dst, x, w *float32, s float32, n int)

//go:noescape
func maxAVX2(x *float32, n int) float32

//go:noescape
func anyAboveAVX2(x *float32, n int, t float32) bool

//go:noescape
func expSubAVX2(x *float32, m float32, n int) float32

//go:noescape
func siluAVX2(dst, x *float32, n int)

//go:noescape
func geluAVX2(dst, x *float32, n int)

//go:noescape
func bf16ToF32AVX2(dst *float32, src *byte, n int)

//go:noescape
func f16ToF32AVX2(dst *float32, src *byte, n int)

// readSumAVX2 adds up n bytes (a multiple of 256) as uint64 words.
//
//go:noescape
func readSumAVX2(p *byte, n int) uint64

// readSumAVX512 adds up n bytes (a multiple of 512) as uint64 words.
//
//go:noescape
func readSumAVX512(p *byte, n int) uint64

//go:noescape
func dotsAVX2(out, q, k *float32, stride, n, hd int)

//go:noescape
func axpysAVX2(o, w, v *float32, stride, n, hd int)

// The grouped attention kernels (vec_amd64.s), in AVX-512 and AVX2 forms:
// what dotsAVX2 and axpysAVX2 compute for each of 4 or 2 query heads,
// bitwise, reading each key and value row once. hd is a multiple of 16
// and n ≥ 1; q, o are the heads' rows hd apart, out and w theirs ldo and
// ldw apart.

//go:noescape
func dotsG4AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)

//go:noescape
func dotsG2AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)

//go:noescape
func axpysG4AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)

//go:noescape
func axpysG2AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)

//go:noescape
func dotsG4AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)

//go:noescape
func dotsG2AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)

//go:noescape
func axpysG4AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)

//go:noescape
func axpysG2AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)

//go:noescape
func dotsG1AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)

//go:noescape
func axpysG1AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)

// prefetchRows prefetches (PREFETCHT0) the bytes p..p+width of each of n
// rows stride bytes apart, one line every step bytes.
//
//go:noescape
func prefetchRows(p *float32, stride, n, width, step int)
