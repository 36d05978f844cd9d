//go:build !amd64 || purego

package cpu

// Stand-ins for the assembly of vec_amd64.s; never called, since the
// kernel level is always generic in this build.

func dotAVX2(a, b *float32, n int) float32                  { panic("unreachable") }
func axpyAVX2(y *float32, alpha float32, x *float32, n int) { panic("unreachable") }
func addAVX2(dst, a, b *float32, n int)                     { panic("unreachable") }
func mulAVX2(dst, a, b *float32, n int)                     { panic("unreachable") }
func scaleAVX2(x *float32, s float32, n int)                { panic("unreachable") }
func mulScaleAVX2(dst, x, w *float32, s float32, n int)     { panic("unreachable") }
func maxAVX2(x *float32, n int) float32                     { panic("unreachable") }
func anyAboveAVX2(x *float32, n int, t float32) bool        { panic("unreachable") }
func expSubAVX2(x *float32, m float32, n int) float32       { panic("unreachable") }
func siluAVX2(dst, x *float32, n int)                       { panic("unreachable") }
func geluAVX2(dst, x *float32, n int)                       { panic("unreachable") }
func bf16ToF32AVX2(dst *float32, src *byte, n int)          { panic("unreachable") }
func f16ToF32AVX2(dst *float32, src *byte, n int)           { panic("unreachable") }
func readSumAVX2(p *byte, n int) uint64                     { panic("unreachable") }
func readSumAVX512(p *byte, n int) uint64                   { panic("unreachable") }

func dotsAVX2(out, q, k *float32, stride, n, hd int) { panic("unreachable") }
func axpysAVX2(o, w, v *float32, stride, n, hd int)  { panic("unreachable") }

func dotsG4AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int) { panic("unreachable") }
func dotsG2AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int) { panic("unreachable") }
func axpysG4AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)  { panic("unreachable") }
func axpysG2AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)  { panic("unreachable") }
func dotsG4AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)   { panic("unreachable") }
func dotsG2AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)   { panic("unreachable") }
func axpysG4AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)    { panic("unreachable") }
func axpysG2AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)    { panic("unreachable") }
func dotsG1AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int) { panic("unreachable") }
func axpysG1AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)  { panic("unreachable") }

func prefetchRows(p *float32, stride, n, width, step int) {}
