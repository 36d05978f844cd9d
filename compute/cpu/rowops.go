package cpu

import (
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.RowOps = (*Backend)(nil)

// AxpyRows implements compute.RowOps.
func (b *Backend) AxpyRows(dst, x, s *compute.Tensor, col int) {
	b.note("AxpyRows", dst, x, s)
	d, xs, ss := f32(dst), f32(x), f32(s)
	c, k := x.Cols(), s.Cols()
	for r := range x.Rows() {
		Axpy(d[r*c:(r+1)*c], ss[r*k+col], xs[r*c:(r+1)*c])
	}
}

// MatchRMS implements compute.RowOps.
func (b *Backend) MatchRMS(dst, x, ref *compute.Tensor, floor float32) {
	b.note("MatchRMS", dst, x, ref)
	d, xs, rs := f32(dst), f32(x), f32(ref)
	c, rc := x.Cols(), ref.Cols()
	for r := range x.Rows() {
		v := xs[r*c : (r+1)*c]
		target := math.Sqrt(meanSquare(rs[r*rc : (r+1)*rc]))
		have := math.Sqrt(max(meanSquare(v), float64(floor)))
		f := float32(target / have)
		o := d[r*c : (r+1)*c]
		for i, e := range v {
			o[i] = e * f
		}
	}
}

func meanSquare(v []float32) float64 {
	var ss float64
	for _, e := range v {
		ss += float64(e) * float64(e)
	}
	return ss / float64(len(v))
}

// GaussianTopK implements compute.RowOps.
func (b *Backend) GaussianTopK(dst, x *compute.Tensor, k float32) {
	b.note("GaussianTopK", dst, x, nil)
	d, xs := f32(dst), f32(x)
	c := x.Cols()
	for r := range x.Rows() {
		v := xs[r*c : (r+1)*c]
		var mean, vr float64
		for _, e := range v {
			mean += float64(e)
		}
		mean /= float64(c)
		for _, e := range v {
			vr += (float64(e) - mean) * (float64(e) - mean)
		}
		cut := float32(mean + math.Sqrt(vr/float64(c))*float64(k))
		o := d[r*c : (r+1)*c]
		for i, e := range v {
			o[i] = max(e-cut, 0)
		}
	}
}
