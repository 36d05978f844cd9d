package cpu

import (
	"fmt"
	"slices"

	"github.com/lem-engine/lem/compute"
)

var _ compute.TokenPicker = (*Backend)(nil)

// topCand is a candidate of TopK: a value and its index.
type topCand struct {
	v float32
	i int
}

// better orders candidates by value, then lower index.
func (a topCand) better(c topCand) bool { return a.v > c.v || a.v == c.v && a.i < c.i }

// topKBlock is how many values TopK tests at once against the k-th best.
const topKBlock = 256

// TopK implements compute.TokenPicker with a bounded selection per row.
func (b *Backend) TopK(dst, x *compute.Tensor, k int) {
	b.note("TopK", dst, x, nil)
	rows, n := x.Rows(), x.Cols()
	if k < 1 || k > compute.MaxTopK || k > n || dst.Len() < rows*2*k || x.DType != compute.F32 {
		panic(fmt.Sprintf("cpu: TopK %d of %v into %v", k, x.Shape, dst.Shape))
	}
	xs, out := f32(x), f32(dst)
	top := make([]topCand, 0, k+1)
	for r := range rows {
		row := xs[r*n : (r+1)*n]
		top = top[:0]
		for lo := 0; lo < n; lo += topKBlock {
			blk := row[lo:min(lo+topKBlock, n)]
			// Once k candidates are held, a block with no value above
			// the k-th best changes nothing: its later indices lose ties.
			if len(top) == k && !anyAbove(blk, top[k-1].v) {
				continue
			}
			top = insertTop(top, blk, lo, k)
		}
		o := out[r*2*k : (r+1)*2*k]
		for j, c := range slices.Clip(top) {
			o[j] = c.v
			o[k+j] = float32(c.i)
		}
	}
}

// insertTop inserts the values of blk, at indices from lo, into top, the
// best candidates so far in order, keeping at most k.
func insertTop(top []topCand, blk []float32, lo, k int) []topCand {
	for i, v := range blk {
		c := topCand{v, lo + i}
		if len(top) == k && !c.better(top[k-1]) {
			continue
		}
		// Insert in order; k is small.
		j := len(top)
		if j == k {
			j--
		} else {
			top = append(top, topCand{})
		}
		for j > 0 && c.better(top[j-1]) {
			top[j] = top[j-1]
			j--
		}
		top[j] = c
	}
	return top
}

var _ compute.TokenFeeder = (*Backend)(nil)

// Feed implements compute.TokenFeeder. The CPU runs every call before it
// returns, so the picked token is already there.
func (b *Backend) Feed(ids, pos, picked *compute.Tensor) {
	b.FeedRows(ids, picked, 1)
	pos.Buf.([]int32)[0]++
}

// FeedRows implements compute.TokenFeeder.
func (b *Backend) FeedRows(ids, picked *compute.Tensor, n int) {
	if ids.DType != compute.I32 || picked.DType != compute.F32 || n < 0 || ids.Len() < n || picked.Len() < 2*n {
		panic(fmt.Sprintf("cpu: FeedRows of %d rows into %v %v from %v %v", n, ids.DType, ids.Shape, picked.DType, picked.Shape))
	}
	dst, src := ids.Buf.([]int32), f32(picked)
	for r := range n {
		dst[r] = int32(src[2*r+1])
	}
}

// ReadAsync implements compute.TokenFeeder: the copy is done when it
// returns.
func (b *Backend) ReadAsync(dst []float32, src *compute.Tensor) (wait func() error) {
	b.Read(dst, src)
	return func() error { return nil }
}
