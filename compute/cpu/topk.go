package cpu

import (
	"fmt"
	"slices"

	"lem/compute"
)

var _ compute.TokenPicker = (*Backend)(nil)

// TopK implements compute.TokenPicker with a bounded selection per row.
func (b *Backend) TopK(dst, x *compute.Tensor, k int) {
	rows, n := x.Rows(), x.Cols()
	if k < 1 || k > compute.MaxTopK || k > n || dst.Len() < rows*2*k || x.DType != compute.F32 {
		panic(fmt.Sprintf("cpu: TopK %d of %v into %v", k, x.Shape, dst.Shape))
	}
	xs, out := f32(x), f32(dst)
	type cand struct {
		v float32
		i int
	}
	// better orders by value, then lower index.
	better := func(a, c cand) bool { return a.v > c.v || a.v == c.v && a.i < c.i }
	top := make([]cand, 0, k+1)
	for r := range rows {
		row := xs[r*n : (r+1)*n]
		top = top[:0]
		for i, v := range row {
			c := cand{v, i}
			if len(top) == k && !better(c, top[k-1]) {
				continue
			}
			// Insert in order; k is small.
			j := len(top)
			if j == k {
				j--
			} else {
				top = append(top, cand{})
			}
			for j > 0 && better(c, top[j-1]) {
				top[j] = top[j-1]
				j--
			}
			top[j] = c
		}
		o := out[r*2*k : (r+1)*2*k]
		for j, c := range slices.Clip(top) {
			o[j] = c.v
			o[k+j] = float32(c.i)
		}
	}
}
