package cpu

import "github.com/lem-engine/lem/compute"

// gluChunk is the number of elements of a GLU call a thread takes at a
// time; calls of fewer than two chunks run on the calling goroutine.
const gluChunk = 4096

// gluJob is one GLU call split over the pool.
type gluJob struct {
	d, g, u []float32
	act     compute.Activation
}

// chunk computes elements [c·gluChunk, (c+1)·gluChunk) of the call.
func (j *gluJob) chunk(c int) {
	lo := c * gluChunk
	hi := min(lo+gluChunk, len(j.g))
	d, g, u := j.d[lo:hi], j.g[lo:hi], j.u[lo:hi]
	if j.act == compute.SiLU && siluMul(d, g, u) {
		return
	}
	for i := range g {
		d[i] = activate(g[i], j.act) * u[i]
	}
}
