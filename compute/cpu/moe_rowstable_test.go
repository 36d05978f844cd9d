package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestExpertsRowStable checks that with SetRowStable each row of
// ApplyExperts gets the same bits alone as among other rows.
func TestExpertsRowStable(t *testing.T) {
	const hid, inter, ne, rows = 64, 96, 6, 5
	for _, dt := range []compute.DType{compute.F32, compute.BF16, compute.Q8_0} {
		for _, fused := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fused=%t", dt, fused), func(t *testing.T) {
				b := New(2)
				b.SetRowStable(true)
				rng := rand.New(rand.NewPCG(3, 4))
				f := &compute.ExpertFFN{Experts: testExperts(t, b, rng, dt, ne, hid, inter, fused, fused), Act: compute.SiLU}
				r := &compute.Routing{Experts: ne, TopK: 2}
				x := randVec(rng, rows*hid)
				lt := tensorOf(b, randVec(rng, rows*ne), rows, ne)
				ids, wt := b.Alloc(compute.I32, rows, r.Slots()), b.Alloc(compute.F32, rows, r.Slots())
				b.Route(ids, wt, lt, nil, r)
				all := b.Alloc(compute.F32, rows, hid)
				b.ApplyExperts(all, tensorOf(b, x, rows, hid), ids, wt, f)
				one := b.Alloc(compute.F32, 1, hid)
				for i := range rows {
					b.ApplyExperts(one, tensorOf(b, x[i*hid:(i+1)*hid], 1, hid), b.View(ids, i, i+1), b.View(wt, i, i+1), f)
					if got, want := f32(one), f32(all)[i*hid:(i+1)*hid]; !slices.Equal(got, want) {
						t.Fatalf("row %d alone differs from row %d of %d", i, i, rows)
					}
				}
			})
		}
	}
}
