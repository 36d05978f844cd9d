//go:build amd64 && !purego

package cpu

//go:noescape
func siluMulAVX512(dst, gate, u *float32, n int)

//go:noescape
func expSubSumAVX512(x *float32, n int, m float32) float32

// siluMul sets d[i] = g[i]/(1+e^−g[i])·u[i] (len(g) elements) with the
// AVX-512 exponential, and reports whether it did.
func siluMul(d, g, u []float32) bool {
	if active < levelAVX512 || len(g) == 0 {
		return false
	}
	_, _ = d[len(g)-1], u[len(g)-1]
	siluMulAVX512(&d[0], &g[0], &u[0], len(g))
	return true
}

// expSubSum sets x[i] = e^(x[i]−m) with the AVX-512 exponential and
// returns their sum; ok is false where it cannot.
func expSubSum(x []float32, m float32) (sum float32, ok bool) {
	if active < levelAVX512 {
		return 0, false
	}
	if len(x) == 0 {
		return 0, true
	}
	return expSubSumAVX512(&x[0], len(x), m), true
}
