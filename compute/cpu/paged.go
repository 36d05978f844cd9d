package cpu

import "lem/compute"

// pagedJob is one AttendPaged call, split over the pool by units of (row,
// kv head, width of its query heads) as attnJob's.
type pagedJob struct {
	attnJob
	table, seq, pos []int32
	bs, maxBlocks   int
	L               int      // largest position of the call, plus one
	spans           [][]span // per chunk slot
}

// AttendPaged implements compute.Pager: the new keys and values go into
// the pool first, then every row attends over its sequence's blocks, in
// runs that end where blocks end. Neither depends on the other rows of the
// call.
func (b *Backend) AttendPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	b.note("AttendPaged", dst, q, k)
	if b.stopped() {
		return
	}
	j := &b.paged
	*j = pagedJob{
		attnJob: attnJob{
			q: f32(q), k: f32(k), v: f32(v), out: f32(dst),
			cks: f32(pool.K), cvs: f32(pool.V), cache: pool, a: a,
			n: q.Rows(), scores: j.scores,
		},
		table: pg.Table.Buf.([]int32), seq: pg.Seq.Buf.([]int32), pos: pos.Buf.([]int32),
		bs: pg.BlockSize, maxBlocks: pg.MaxBlocks, spans: j.spans,
	}
	if a.Sinks != nil {
		j.sinks = f32(b.asF32(a.Sinks))
	}
	kc := a.KVHeads * a.HeadDim
	for i := range j.n {
		slot := j.slot(int(j.seq[i]), int(j.pos[i]))
		copy(j.cks[slot*kc:(slot+1)*kc], j.k[i*kc:(i+1)*kc])
		copy(j.cvs[slot*kc:(slot+1)*kc], j.v[i*kc:(i+1)*kc])
		j.L = max(j.L, int(j.pos[i])+1)
	}
	group := a.Heads / a.KVHeads
	j.width = 1
	if attnGrouped && groupedHeads(a.HeadDim) {
		j.width = min(group, attnGroup)
	}
	j.passes = (group + j.width - 1) / j.width
	units, need := j.n*a.KVHeads*j.passes, j.width*j.L
	if len(j.scores) < attnChunks {
		j.scores = make([][]float32, attnChunks)
		j.spans = make([][]span, attnChunks)
	}
	for c := range j.scores {
		if cap(j.scores[c]) < need {
			j.scores[c] = make([]float32, need, 2*need)
		}
	}
	j.chunks = min(attnChunks, units)
	b.pool.Run(j.chunks, b.pagedFunc)
	*j = pagedJob{attnJob: attnJob{scores: j.scores}, spans: j.spans}
}

// slot returns the pool row of sequence s's position p.
func (j *pagedJob) slot(s, p int) int {
	blk := j.table[s*j.maxBlocks+p/j.bs]
	if blk < 0 {
		panic("cpu: AttendPaged: a row's position lies in no block of its sequence")
	}
	return int(blk)*j.bs + p%j.bs
}

// blockSpans returns the runs of sequence s's positions first..last, one
// per block.
func (j *pagedJob) blockSpans(out []span, s, first, last int) []span {
	kc := j.a.KVHeads * j.a.HeadDim
	out = out[:0]
	for p := first; p <= last; {
		n := min(last+1, (p/j.bs+1)*j.bs) - p
		r := j.slot(s, p)
		out = append(out, span{p, n, j.cks[r*kc : (r+n)*kc], j.cvs[r*kc : (r+n)*kc]})
		p += n
	}
	return out
}

// chunk computes the units of piece c, as attnJob.chunk does over a
// contiguous cache.
func (j *pagedJob) chunk(c int) {
	a := j.a
	group := a.Heads / a.KVHeads
	total := j.n * a.KVHeads * j.passes
	lo, hi := c*total/j.chunks, (c+1)*total/j.chunks
	hd := a.HeadDim
	qc, kc := a.Heads*hd, a.KVHeads*hd
	L := j.L
	for t := lo; t < hi; t++ {
		i, u := t/(a.KVHeads*j.passes), t%(a.KVHeads*j.passes)
		kv, pass := u/j.passes, u%j.passes
		h0 := kv*group + pass*j.width
		g := min(j.width, group-pass*j.width)
		p := int(j.pos[i])
		first := 0
		if a.Window > 0 {
			first = max(0, p-a.Window+1)
		}
		scores := j.scores[c][:g*L]
		q := j.q[i*qc+h0*hd : i*qc+(h0+g)*hd]
		ko := kv * hd
		sp := j.blockSpans(j.spans[c], int(j.seq[i]), first, p)
		j.spans[c] = sp
		for _, s := range sp {
			dotsGroup(scores[s.p0:], L, q, g, s.k[ko:], kc, s.n)
		}
		for h := range g {
			j.weights(scores[h*L+first:h*L+p+1], h0+h)
		}
		o := j.out[i*qc+h0*hd : i*qc+(h0+g)*hd]
		clear(o)
		for _, s := range sp {
			axpysGroup(o, scores[s.p0:], L, g, s.v[ko:], kc, s.n)
		}
	}
}

// SetRowStable implements compute.RowStable. The many-row products of
// every weight type compute each row alike whatever the number of rows;
// the one-row products of float weights and of the quantized types that
// are not packed (see packable) sum in another order, so with it on they
// take the many-row kernels: 15–35% slower for float weights, a few
// percent for the others. Packed types are unaffected.
func (b *Backend) SetRowStable(on bool) {
	s := b.pool.lock()
	s.rowStable = on
	s.mu.Unlock()
}

// rowStable reports whether SetRowStable turned row-stable products on.
func (b *Backend) rowStable() bool {
	s := b.pool.lock()
	defer s.mu.Unlock()
	return s.rowStable
}
