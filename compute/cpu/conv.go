package cpu

import (
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Convolver = (*Backend)(nil)

// convJob is one CausalConv call, split over the pool by channels.
type convJob struct {
	out, in, w, bias, state []float32
	n, c, k, pieces         int
	silu                    bool
}

// CausalConv implements compute.Convolver. Channels are split across the
// pool; each piece walks its channels over all rows.
func (b *Backend) CausalConv(dst, x, w, bias, state *compute.Tensor, silu bool) {
	b.note("CausalConv", dst, x, w)
	if b.stopped() {
		return
	}
	j := &b.conv
	*j = convJob{
		out: f32(dst), in: f32(x), w: f32(w), state: f32(state),
		n: x.Rows(), c: x.Cols(), k: w.Cols(), silu: silu,
	}
	if bias != nil {
		j.bias = f32(bias)
	}
	j.pieces = min(j.c, attnChunks)
	if j.n*j.c*j.k < 1<<16 {
		j.pieces = 1 // a decode step: not worth waking workers
	}
	b.pool.Run(j.pieces, b.convFunc)
}

// piece convolves the channels of piece i.
func (j *convJob) piece(i int) {
	n, c, k := j.n, j.c, j.k
	in, st := j.in, j.state
	for ch := i * c / j.pieces; ch < (i+1)*c/j.pieces; ch++ {
		wc := j.w[ch*k : (ch+1)*k]
		for t := range n {
			var s float32
			if j.bias != nil {
				s = j.bias[ch]
			}
			for q, wq := range wc {
				src := t - k + 1 + q // row of x; negative rows come from state
				var v float32
				if src >= 0 {
					v = in[src*c+ch]
				} else {
					v = st[(k-1+src)*c+ch]
				}
				s += wq * v
			}
			if j.silu {
				s /= 1 + float32(math.Exp(float64(-s)))
			}
			j.out[t*c+ch] = s
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
