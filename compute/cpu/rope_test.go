package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestRoPEReuse checks that RoPE's reuse of the last position's rotation
// gives what a fresh backend computes, across calls that change the Rope,
// the position, or rotate several positions.
func TestRoPEReuse(t *testing.T) {
	mk := func(base float64, dims int, interleaved bool) *compute.Rope {
		r := &compute.Rope{Dims: dims, Scale: 1, Interleaved: interleaved}
		for j := range dims / 2 {
			r.InvFreq = append(r.InvFreq, float32(math.Pow(base, -float64(2*j)/float64(dims))))
		}
		return r
	}
	r1, r2, r3 := mk(10000, 16, false), mk(500000, 16, true), mk(10000, 32, false)
	const heads, hd = 2, 32
	reused := New(1)
	rng := rand.New(rand.NewPCG(3, 4))
	for i, c := range []struct {
		r   *compute.Rope
		pos []int32
	}{{r1, []int32{5}}, {r1, []int32{5}}, {r2, []int32{5}}, {r1, []int32{6}}, {r3, []int32{6}}, {r1, []int32{6}}, {r1, []int32{6, 7}}, {r1, []int32{7}}, {r1, []int32{9, 9}}} {
		xs := randVec(rng, len(c.pos)*heads*hd)
		run := func(b *Backend) []float32 {
			x := b.Alloc(compute.F32, len(c.pos), heads*hd)
			b.Upload(x, xs)
			p := b.Alloc(compute.I32, len(c.pos))
			b.UploadInts(p, c.pos)
			b.RoPE(x, p, heads, c.r)
			return x.Buf.([]float32)
		}
		if got, want := run(reused), run(New(1)); !slices.Equal(got, want) {
			t.Errorf("call %d (positions %v): %v, want %v", i, c.pos, got, want)
		}
	}
}
