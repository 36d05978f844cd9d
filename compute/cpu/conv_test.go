package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestCausalConv checks the convolution against its definition, and that
// feeding a sequence in pieces through the carried state gives the same
// output as feeding it at once.
func TestCausalConv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, c, k int
		chunks  []int
		bias    bool
		silu    bool
	}{
		{"whole", 9, 5, 4, []int{9}, false, false},
		{"one at a time", 9, 5, 4, []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, true, true},
		{"pieces shorter than the state", 9, 3, 4, []int{2, 1, 2, 4}, true, false},
		{"width 2", 7, 6, 2, []int{3, 4}, false, true},
		{"large", 64, 1100, 4, []int{40, 24}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			rnd := func(n int) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = r.Float32()*2 - 1
				}
				return v
			}
			x, w, bias := rnd(tc.n*tc.c), rnd(tc.c*tc.k), rnd(tc.c)
			if !tc.bias {
				bias = nil
			}
			want := make([]float32, tc.n*tc.c)
			for i := range tc.n {
				for ch := range tc.c {
					var s float32
					if bias != nil {
						s = bias[ch]
					}
					for j := range tc.k {
						if src := i - tc.k + 1 + j; src >= 0 {
							s += w[ch*tc.k+j] * x[src*tc.c+ch]
						}
					}
					if tc.silu {
						s = s / (1 + float32(math.Exp(float64(-s))))
					}
					want[i*tc.c+ch] = s
				}
			}

			b := New(2)
			wt := b.Alloc(compute.F32, tc.c, tc.k)
			b.Upload(wt, w)
			var bt *compute.Tensor
			if bias != nil {
				bt = b.Alloc(compute.F32, tc.c)
				b.Upload(bt, bias)
			}
			state := b.Alloc(compute.F32, tc.k-1, tc.c)
			at := 0
			for _, m := range tc.chunks {
				xt := b.Alloc(compute.F32, m, tc.c)
				b.Upload(xt, x[at*tc.c:(at+m)*tc.c])
				dst := b.Alloc(compute.F32, m, tc.c)
				b.CausalConv(dst, xt, wt, bt, state, tc.silu)
				got := f32(dst)
				for i, g := range got {
					if d := math.Abs(float64(g - want[at*tc.c+i])); d > 1e-5 {
						t.Fatalf("row %d channel %d: got %g, want %g", at+i/tc.c, i%tc.c, g, want[at*tc.c+i])
					}
				}
				at += m
			}
		})
	}
}
