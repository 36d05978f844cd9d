package cpu

import (
	"math/rand/v2"
	"testing"

	"lem/compute"
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
				if want := activate(gs[i], act) * us[i]; v != want {
					t.Fatalf("n=%d act=%v: dst[%d] = %g, want %g", n, act, i, v, want)
				}
			}
		}
	}
}
