package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestVectorExp checks the vector SiLU·u and e^(x−m) kernels against the
// float64 definitions over every tail length and special values.
func TestVectorExp(t *testing.T) {
	if active < levelAVX512 {
		t.Skip("no vector exponential at this level")
	}
	rng := rand.New(rand.NewPCG(45, 46))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 88, 89, 95, -87, -103, -110, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for n := range 70 {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 8)
			u[i] = float32(rng.NormFloat64())
			if rng.IntN(4) == 0 {
				g[i] = special[rng.IntN(len(special))]
			}
		}
		d := make([]float32, n+1)
		d[n] = 7
		if !siluMul(d[:n], g, u) && n > 0 {
			t.Fatal("siluMul declined")
		}
		if d[n] != 7 {
			t.Fatalf("n=%d: siluMul wrote past the end", n)
		}
		for i := range g {
			x := float64(g[i])
			want := x / (1 + math.Exp(-x)) * float64(u[i])
			if !nearF32(d[i], want, 3e-7) {
				t.Errorf("silu(%g)·%g = %g, want %g", g[i], u[i], d[i], want)
			}
		}
		x := append([]float32(nil), g...)
		m := float32(rng.NormFloat64() * 4)
		sum, _ := expSubSum(x, m)
		var ws float64
		for i, v := range g {
			want := math.Exp(float64(v - m)) // the difference rounded as the callers round it
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) && math.IsInf(float64(m), 0) {
				want = math.NaN()
			}
			ws += want
			if !nearF32(x[i], want, 3e-7) {
				t.Errorf("e^(%g − %g) = %g, want %g", v, m, x[i], want)
			}
		}
		if !nearF32(sum, ws, 1e-6) {
			t.Errorf("n=%d: sum %g, want %g", n, sum, ws)
		}
	}
}

// nearF32 reports whether got is want rounded to float32 within rel,
// counting NaNs equal and values below float32's normal range as 0.
func nearF32(got float32, want, rel float64) bool {
	g := float64(got)
	switch {
	case math.IsNaN(want) || math.IsNaN(g):
		return math.IsNaN(want) && math.IsNaN(g)
	case math.IsInf(want, 0) || math.Abs(want) > math.MaxFloat32:
		return math.IsInf(g, 0) && math.Signbit(g) == math.Signbit(want) || math.Abs(g) > 3e38
	case math.Abs(want) < 1e-37:
		return math.Abs(g) < 1e-37
	}
	return math.Abs(g-want) <= rel*math.Abs(want)
}
