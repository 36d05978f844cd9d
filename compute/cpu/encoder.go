package cpu

import (
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Bidirectional = (*Backend)(nil)

// AttendAll implements compute.Bidirectional: each head of each row runs
// as one unit of work on the pool.
func (b *Backend) AttendAll(dst, q, k, v *compute.Tensor, a *compute.Attention) {
	b.note("AttendAll", dst, q, k)
	if b.stopped() {
		return
	}
	n := q.Rows()
	if n == 0 {
		return
	}
	qs, ks, vs, out := f32(q), f32(k), f32(v), f32(dst)
	var sinks []float32
	if a.Sinks != nil {
		sinks = f32(b.asF32(a.Sinks))
	}
	hd, group := a.HeadDim, a.Heads/a.KVHeads
	qc, kc := a.Heads*hd, a.KVHeads*hd
	scores := make([][]float32, a.Heads)
	b.pool.Run(a.Heads, func(h int) {
		if scores[h] == nil {
			scores[h] = make([]float32, n)
		}
		s := scores[h]
		kh := h / group
		for i := range n {
			lo, hi := 0, n
			if a.Window > 0 {
				lo, hi = max(0, i-a.Window+1), min(n, i+a.Window)
			}
			qi := qs[i*qc+h*hd : i*qc+(h+1)*hd]
			valid := s[:hi-lo]
			for j := lo; j < hi; j++ {
				sc := Dot(qi, ks[j*kc+kh*hd:j*kc+(kh+1)*hd]) * a.Scale
				if a.SoftCap > 0 {
					sc = a.SoftCap * float32(math.Tanh(float64(sc/a.SoftCap)))
				}
				valid[j-lo] = sc
			}
			mx := Max(valid)
			if sinks != nil {
				mx = max(mx, sinks[h])
			}
			var sum float32
			for t, sc := range valid {
				e := float32(math.Exp(float64(sc - mx)))
				valid[t] = e
				sum += e
			}
			if sinks != nil {
				sum += float32(math.Exp(float64(sinks[h] - mx)))
			}
			o := out[i*qc+h*hd : i*qc+(h+1)*hd]
			clear(o)
			for j := lo; j < hi; j++ {
				Axpy(o, valid[j-lo]/sum, vs[j*kc+kh*hd:j*kc+(kh+1)*hd])
			}
		}
	})
}
