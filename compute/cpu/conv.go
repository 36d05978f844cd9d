package cpu

import (
	"math"

	"lem/compute"
)

var _ compute.Convolver = (*Backend)(nil)

// CausalConv implements compute.Convolver. Channels are split across the
// pool; each worker walks its channels over all rows.
func (b *Backend) CausalConv(dst, x, w, bias, state *compute.Tensor, silu bool) {
	out, in, ws, st := f32(dst), f32(x), f32(w), f32(state)
	n, c, k := x.Rows(), x.Cols(), w.Cols()
	var bs []float32
	if bias != nil {
		bs = f32(bias)
	}
	run := func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			wc := ws[ch*k : (ch+1)*k]
			for t := range n {
				var s float32
				if bs != nil {
					s = bs[ch]
				}
				for j, wj := range wc {
					src := t - k + 1 + j // row of x; negative rows come from state
					var v float32
					if src >= 0 {
						v = in[src*c+ch]
					} else {
						v = st[(k-1+src)*c+ch]
					}
					s += wj * v
				}
				if silu {
					s /= 1 + float32(math.Exp(float64(-s)))
				}
				out[t*c+ch] = s
			}
			// Shift the state: the last K-1 inputs, oldest first.
			for r := range k - 1 {
				src := n - (k - 1) + r
				if src >= 0 {
					st[r*c+ch] = in[src*c+ch]
				} else {
					st[r*c+ch] = st[(r+n)*c+ch]
				}
			}
		}
	}
	if n*c*k < 1<<16 {
		run(0, c) // a decode step: not worth waking workers
		return
	}
	b.parallel(c, run)
}
