package cpu

// Attention of a prompt chunk through matrix products. For many queries
// the per-(query, head) loop of attnJob.chunk spends its time in short dot
// products and calls; instead, per KV head, the keys and the transposed
// values it covers are gathered once, the scores of all the group's query
// heads against all the keys are one product, the masked softmax runs
// over the pool row by row, and the outputs are a second product.

// attnGEMMMin is the fewest queries of an Attend call that take the
// matrix-product route.
var attnGEMMMin = 16

// attnGEMMJob is the scratch and the softmax pass of the route.
type attnGEMMJob struct {
	kg, vt, qg, s, og []float32
	j                 *attnJob
	h0, kmin, nk      int // first query head of the group, first key position, keys
}

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// attendGEMM computes j by matrix products and reports whether it did; it
// declines calls of few queries.
func (b *Backend) attendGEMM(j *attnJob) bool {
	a := j.a
	if j.n < attnGEMMMin {
		return false
	}
	hd, n := a.HeadDim, j.n
	qc := a.Heads * hd
	group := a.Heads / a.KVHeads
	g := &b.agemm
	g.j = j
	// Keys from the first one the first query sees.
	g.kmin = 0
	if a.Window > 0 {
		g.kmin = max(0, j.start-a.Window+1)
	}
	g.nk = j.start + n - g.kmin
	nk := g.nk
	g.kg = growF32(g.kg, nk*hd)
	g.vt = growF32(g.vt, hd*nk)
	g.qg = growF32(g.qg, group*n*hd)
	g.s = growF32(g.s, group*n*nk)
	g.og = growF32(g.og, group*n*hd)
	for kv := range a.KVHeads {
		ko := kv * hd
		for p := g.kmin; p < j.start+n; p++ {
			kr, vr := j.keyRow(p)
			r := p - g.kmin
			copy(g.kg[r*hd:(r+1)*hd], kr[ko:ko+hd])
			for d := range hd {
				g.vt[d*nk+r] = vr[ko+d]
			}
		}
		g.h0 = kv * group
		for hh := range group {
			h := g.h0 + hh
			for i := range n {
				copy(g.qg[(hh*n+i)*hd:(hh*n+i+1)*hd], j.q[i*qc+h*hd:i*qc+(h+1)*hd])
			}
		}
		MatMul(g.s, g.qg, group*n, F32Weights(nk, hd, g.kg), b.pool)
		b.pool.Run(group*n, b.agemmFunc)
		MatMul(g.og, g.s, group*n, F32Weights(hd, nk, g.vt), b.pool)
		for hh := range group {
			h := g.h0 + hh
			for i := range n {
				copy(j.out[i*qc+h*hd:i*qc+(h+1)*hd], g.og[(hh*n+i)*hd:(hh*n+i+1)*hd])
			}
		}
	}
	g.j = nil
	return true
}

// softmax turns row r of the scores (query head h0 + r/n, query r%n) into
// attention weights: scaled, soft-capped, masked to the keys the query
// sees, normalised with the head's sink in the denominator.
func (g *attnGEMMJob) softmax(r int) {
	j := g.j
	a := j.a
	n := j.n
	h, i := g.h0+r/n, r%n
	p := j.start + i
	first := 0
	if a.Window > 0 {
		first = max(0, p-a.Window+1)
	}
	row := g.s[r*g.nk : (r+1)*g.nk]
	lo, hi := first-g.kmin, p-g.kmin+1
	clear(row[:lo])
	clear(row[hi:])
	j.weights(row[lo:hi], h)
}
