package cpu

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// The vector kernels below work on one row at a time. With AVX2 available
// the assembly handles the largest multiple of 8 elements and Go the rest.

// vecAsm reports whether the AVX2 vector kernels may run on n elements,
// and returns how many of them they handle.
func vecAsm(n int) (int, bool) {
	if active < levelAVX2 || n < 8 {
		return 0, false
	}
	return n &^ 7, true
}

func checkLen(op string, n int, lens ...int) {
	for _, l := range lens {
		if l < n {
			panic(fmt.Sprintf("cpu: %s of %d values with a slice of %d", op, n, l))
		}
	}
}

// Dot returns a·b over len(a) elements; b must be at least as long.
func Dot(a, b []float32) float32 {
	n := len(a)
	checkLen("Dot", n, len(b))
	var s float32
	if m, ok := vecAsm(n); ok {
		s = dotAVX2(&a[0], &b[0], m)
		a, b = a[m:], b[m:n]
	}
	return s + dotGeneric(a, b)
}

// Axpy computes y += alpha·x over len(y) elements; x must be at least as
// long.
func Axpy(y []float32, alpha float32, x []float32) {
	n := len(y)
	checkLen("Axpy", n, len(x))
	if m, ok := vecAsm(n); ok {
		axpyAVX2(&y[0], alpha, &x[0], m)
		y, x = y[m:], x[m:]
	}
	axpyGeneric(y, alpha, x)
}

// dots sets out[i] = q·k[i·stride : i·stride+len(q)] for i < len(out):
// the scores of a query against keys that lie stride elements apart.
func dots(out, q, k []float32, stride int) {
	n, hd := len(out), len(q)
	if n == 0 {
		return
	}
	checkLen("dots", (n-1)*stride+hd, len(k))
	if active >= levelAVX2 && hd%8 == 0 && hd > 0 {
		dotsAVX2(&out[0], &q[0], &k[0], stride, n, hd)
		return
	}
	for i := range out {
		out[i] = Dot(q, k[i*stride:i*stride+hd])
	}
}

// axpys adds w[i]·v[i·stride : i·stride+len(o)] to o for each i in turn:
// the weighted sum of values that lie stride elements apart, as len(w)
// calls of Axpy would make it.
func axpys(o, w, v []float32, stride int) {
	n, hd := len(w), len(o)
	if n == 0 {
		return
	}
	checkLen("axpys", (n-1)*stride+hd, len(v))
	if active >= levelAVX2 && hd%8 == 0 && hd > 0 {
		axpysAVX2(&o[0], &w[0], &v[0], stride, n, hd)
		return
	}
	for i, wi := range w {
		Axpy(o, wi, v[i*stride:i*stride+hd])
	}
}

// groupedHeads reports whether dotsGroup and axpysGroup have kernels for
// heads of hd values (else they loop over dots and axpys).
func groupedHeads(hd int) bool { return active >= levelAVX2 && hd > 0 && hd%16 == 0 }

// dotsGroup is dots for the g query heads whose rows follow each other in
// q (hd = len(q)/g values each) against the same n keys: head h's scores go
// to out[h·ldo : h·ldo+n]. Each key row is read once for 4 or 2 heads (and
// a last single head has a kernel of its own with AVX-512); the scores
// are bitwise those of dots.
func dotsGroup(out []float32, ldo int, q []float32, g int, k []float32, stride, n int) {
	if n == 0 || g == 0 {
		return
	}
	hd := len(q) / g
	checkLen("dotsGroup", (g-1)*ldo+n, len(out))
	checkLen("dotsGroup", (n-1)*stride+hd, len(k))
	g4, g2 := dotsG4AVX2, dotsG2AVX2
	if active >= levelAVX512 {
		g4, g2 = dotsG4AVX512, dotsG2AVX512
	}
	for h := 0; h < g; {
		w, grouped := groupWidth(g-h, hd)
		switch {
		case !grouped:
			dots(out[h*ldo:h*ldo+n], q[h*hd:(h+1)*hd], k, stride)
		case w == 4:
			g4(&out[h*ldo], ldo, &q[h*hd], &k[0], stride, n, hd)
		case w == 2:
			g2(&out[h*ldo], ldo, &q[h*hd], &k[0], stride, n, hd)
		default:
			dotsG1AVX512(&out[h*ldo], ldo, &q[h*hd], &k[0], stride, n, hd)
		}
		h += w
	}
}

// axpysGroup is axpys for g heads at once: head h adds the weighted sum
// of the n value rows with weights w[h·ldw : h·ldw+n] to its output row,
// o[h·hd : (h+1)·hd] (hd = len(o)/g). Each value row is read once for all
// g; the sums are bitwise those of axpys.
func axpysGroup(o, w []float32, ldw, g int, v []float32, stride, n int) {
	if n == 0 || g == 0 {
		return
	}
	hd := len(o) / g
	checkLen("axpysGroup", (g-1)*ldw+n, len(w))
	checkLen("axpysGroup", (n-1)*stride+hd, len(v))
	g4, g2 := axpysG4AVX2, axpysG2AVX2
	if active >= levelAVX512 {
		g4, g2 = axpysG4AVX512, axpysG2AVX512
	}
	for h := 0; h < g; {
		width, grouped := groupWidth(g-h, hd)
		switch {
		case !grouped:
			axpys(o[h*hd:(h+1)*hd], w[h*ldw:h*ldw+n], v, stride)
		case width == 4:
			g4(&o[h*hd], &w[h*ldw], ldw, &v[0], stride, n, hd)
		case width == 2:
			g2(&o[h*hd], &w[h*ldw], ldw, &v[0], stride, n, hd)
		default:
			axpysG1AVX512(&o[h*hd], &w[h*ldw], ldw, &v[0], stride, n, hd)
		}
		h += width
	}
}

// groupWidth returns how many of the r remaining heads of hd values the
// next kernel call of dotsGroup or axpysGroup takes (4, 2 or 1), and
// whether a grouped kernel takes them rather than dots or axpys: a last
// single head has a grouped kernel of its own only with AVX-512.
func groupWidth(r, hd int) (int, bool) {
	switch {
	case !groupedHeads(hd) || r == 1 && active < levelAVX512:
		return 1, false
	case r >= 4:
		return 4, true
	case r >= 2:
		return 2, true
	}
	return 1, true
}

func axpyGeneric(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += alpha * x[i]
	}
}

// Add computes dst = a + b over len(dst) elements.
func Add(dst, a, b []float32) {
	n := len(dst)
	checkLen("Add", n, len(a), len(b))
	if m, ok := vecAsm(n); ok {
		addAVX2(&dst[0], &a[0], &b[0], m)
		dst, a, b = dst[m:], a[m:], b[m:]
	}
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// Mul computes dst = a ⊙ b over len(dst) elements.
func Mul(dst, a, b []float32) {
	n := len(dst)
	checkLen("Mul", n, len(a), len(b))
	if m, ok := vecAsm(n); ok {
		mulAVX2(&dst[0], &a[0], &b[0], m)
		dst, a, b = dst[m:], a[m:], b[m:]
	}
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

// Scale computes x *= s.
func Scale(x []float32, s float32) {
	if m, ok := vecAsm(len(x)); ok {
		scaleAVX2(&x[0], s, m)
		x = x[m:]
	}
	for i := range x {
		x[i] *= s
	}
}

// RMSNorm computes dst = x / sqrt(mean(x²) + eps) ⊙ w over len(x)
// elements; dst and w must be at least as long. dst may be x.
func RMSNorm(dst, x, w []float32, eps float32) {
	n := len(x)
	if n == 0 {
		return
	}
	checkLen("RMSNorm", n, len(dst), len(w))
	ss := Dot(x, x)
	s := float32(1 / math.Sqrt(float64(ss)/float64(n)+float64(eps)))
	if m, ok := vecAsm(n); ok {
		mulScaleAVX2(&dst[0], &x[0], &w[0], s, m)
		dst, x, w = dst[m:], x[m:], w[m:]
	}
	dst, w = dst[:len(x)], w[:len(x)]
	for i := range x {
		dst[i] = x[i] * s * w[i]
	}
}

// Softmax replaces x by exp(x - max x) / Σ exp(x - max x). Entries of -Inf
// become 0.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := Max(x)
	var sum float32
	y := x
	if m, ok := vecAsm(len(x)); ok {
		sum = expSubAVX2(&x[0], mx, m)
		y = x[m:]
	}
	for i, v := range y {
		e := float32(math.Exp(float64(v - mx)))
		y[i] = e
		sum += e
	}
	Scale(x, 1/sum)
}

// Max returns the largest element of x (-Inf for an empty x).
func Max(x []float32) float32 {
	mx := float32(math.Inf(-1))
	if m, ok := vecAsm(len(x)); ok {
		mx = maxAVX2(&x[0], m)
		x = x[m:]
	}
	for _, v := range x {
		mx = max(mx, v)
	}
	return mx
}

// anyAbove reports whether some element of x is greater than t (never,
// when t is NaN; NaN elements are greater than nothing).
func anyAbove(x []float32, t float32) bool {
	if m, ok := vecAsm(len(x)); ok {
		if anyAboveAVX2(&x[0], m, t) {
			return true
		}
		x = x[m:]
	}
	for _, v := range x {
		if v > t {
			return true
		}
	}
	return false
}

// SiLU computes dst = x·sigmoid(x) over len(dst) elements. dst may be x.
func SiLU(dst, x []float32) {
	n := len(dst)
	checkLen("SiLU", n, len(x))
	if m, ok := vecAsm(n); ok {
		siluAVX2(&dst[0], &x[0], m)
		dst, x = dst[m:], x[m:]
	}
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = v / (1 + float32(math.Exp(float64(-v))))
	}
}

// GELU computes the tanh approximation of GELU,
// dst = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), over len(dst) elements.
// dst may be x.
func GELU(dst, x []float32) {
	n := len(dst)
	checkLen("GELU", n, len(x))
	if m, ok := vecAsm(n); ok {
		geluAVX2(&dst[0], &x[0], m)
		dst, x = dst[m:], x[m:]
	}
	x = x[:len(dst)]
	for i, v := range x {
		dst[i] = geluGeneric(v)
	}
}

func geluGeneric(x float32) float32 {
	const c = 0.7978845608028654 // √(2/π)
	f := float64(x)
	return float32(0.5 * f * (1 + math.Tanh(c*(f+0.044715*f*f*f))))
}

// ToF32 widens len(dst) little-endian values of type dt (compute.F32, F16
// or BF16) from src into dst: an embedding lookup is ToF32 of a weight row.
func ToF32(dst []float32, src []byte, dt compute.DType) {
	n := len(dst)
	checkLen("ToF32", n*dt.Size(), len(src))
	if m, ok := vecAsm(n); ok {
		switch dt {
		case compute.BF16:
			bf16ToF32AVX2(&dst[0], &src[0], m)
		case compute.F16:
			f16ToF32AVX2(&dst[0], &src[0], m)
		default:
			m = 0
		}
		dst, src = dst[m:], src[m*dt.Size():]
	}
	switch dt {
	case compute.F32, compute.F16, compute.BF16:
		widenGeneric(dst, src, dt)
	default:
		panic(fmt.Sprintf("cpu: ToF32 from %s", dt))
	}
}
