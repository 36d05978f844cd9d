package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestGLUParallel checks GLU calls large enough to be split over the pool
// against the element-wise definition, on every length remainder.
func TestGLUParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	b := New(3)
	for _, n := range []int{2*gluChunk - 1, 2 * gluChunk, 3*gluChunk + 17} {
		for _, act := range []compute.Activation{compute.SiLU, compute.GELUTanh} {
			g, u, d := b.Alloc(compute.F32, n), b.Alloc(compute.F32, n), b.Alloc(compute.F32, n)
			gs, us := randVec(rng, n), randVec(rng, n)
			b.Upload(g, gs)
			b.Upload(u, us)
			b.GLU(d, g, u, act)
			for i, v := range d.Buf.([]float32) {
				want := float64(activate(gs[i], act) * us[i])
				if act == compute.SiLU {
					// The vector kernel's exponential, within float32 rounding.
					x := float64(gs[i])
					want = x / (1 + math.Exp(-x)) * float64(us[i])
				}
				if !nearF32(v, want, 3e-7) {
					t.Fatalf("n=%d act=%v: dst[%d] = %g, want %g", n, act, i, v, want)
				}
			}
		}
	}
}
