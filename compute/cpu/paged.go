package cpu

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// pagedJob is one AttendPaged call, split over the pool by units of (row,
// kv head, width of its query heads) as attnJob's.
type pagedJob struct {
	attnJob
	table, seq, pos []int32
	bs, maxBlocks   int
	// An f16 pool's keys and values (cks and cvs are nil then), and per
	// chunk slot the rows of a block widened to f32.
	hks, hvs []byte
	wide     [][]float32
	// The positions of the sequences with several rows in the call (a
	// prompt chunk), widened once for all their rows: sequence s's
	// position p at flatOff[s] + p·kc of flatK and flatV (flatOff −1 for
	// the others), widened block by block as pieces say.
	flatK, flatV   []float32
	flatOff        []int
	pieces         []widenPiece
	seqRows        []int    // prewiden's rows and last position per sequence
	L              int      // largest position of the call, plus one
	spans          [][]span // per chunk slot
	kvPer, kvUnits int      // kv heads per unit; units per row and pass
}

// widenPiece is block jb of sequence s, positions up to last.
type widenPiece struct{ s, jb, last int }

// prewiden widens, once for all their rows, the positions that the
// sequences with several rows in the call read from an f16 pool.
func (j *pagedJob) prewiden(b *Backend) {
	nseq := len(j.table) / j.maxBlocks
	kc := j.a.KVHeads * j.a.HeadDim
	j.flatOff = slices.Grow(j.flatOff[:0], nseq)[:nseq]
	j.seqRows = slices.Grow(j.seqRows[:0], 2*nseq)[:2*nseq]
	clear(j.seqRows)
	rows, last := j.seqRows[:nseq], j.seqRows[nseq:]
	for i := range j.n {
		s := int(j.seq[i])
		rows[s]++
		last[s] = max(last[s], int(j.pos[i]))
	}
	total := 0
	j.pieces = j.pieces[:0]
	for s := range nseq {
		j.flatOff[s] = -1
		if rows[s] < 2 {
			continue
		}
		j.flatOff[s] = total
		total += (last[s] + 1) * kc
		for jb := range last[s]/j.bs + 1 {
			j.pieces = append(j.pieces, widenPiece{s, jb, last[s]})
		}
	}
	if len(j.pieces) == 0 {
		return
	}
	if len(j.flatK) < total {
		j.flatK, j.flatV = make([]float32, total), make([]float32, total)
	}
	b.pool.Run(len(j.pieces), b.widenFunc)
}

// widen widens piece c of prewiden's (blocks a window has freed stay as
// they are: no row reads them).
func (j *pagedJob) widen(c int) {
	pc := j.pieces[c]
	blk := int(j.table[pc.s*j.maxBlocks+pc.jb])
	if blk < 0 {
		return
	}
	kc := j.a.KVHeads * j.a.HeadDim
	p0, p1 := pc.jb*j.bs, min((pc.jb+1)*j.bs, pc.last+1)
	r0, off := blk*j.bs, j.flatOff[pc.s]
	ToF32(j.flatK[off+p0*kc:off+p1*kc], j.hks[2*r0*kc:2*(r0+p1-p0)*kc], compute.F16)
	ToF32(j.flatV[off+p0*kc:off+p1*kc], j.hvs[2*r0*kc:2*(r0+p1-p0)*kc], compute.F16)
}

// pagedUnitsPerThread is how many units an AttendPaged call gives each
// thread at least, where it has rows enough: a unit takes kvPer kv heads
// of a row, block by block, so that it reads each block's rows as one run
// of memory (the hardware prefetchers lose a stream where a block ends).
var pagedUnitsPerThread = 4

// pagedOneHead is the context from which a unit of a call of a few rows
// takes one kv head.
var pagedOneHead = 1024

// AttendPaged implements compute.Pager: the new keys and values go into
// the pool first, then every row attends over its sequence's blocks, in
// runs that end where blocks end. Neither depends on the other rows of the
// call.
func (b *Backend) AttendPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	b.note("AttendPaged", dst, q, k)
	checkPaged(dst, q, k, v, pool, pg, pos, a)
	if b.stopped() {
		return
	}
	j := &b.paged
	*j = pagedJob{
		attnJob: attnJob{
			q: f32(q), k: f32(k), v: f32(v), out: f32(dst),
			cache: pool, a: a,
			n: q.Rows(), scores: j.scores,
		},
		table: pg.Table.Buf.([]int32), seq: pg.Seq.Buf.([]int32), pos: pos.Buf.([]int32),
		bs: pg.BlockSize, maxBlocks: pg.MaxBlocks, spans: j.spans, wide: j.wide,
		flatK: j.flatK, flatV: j.flatV, flatOff: j.flatOff, pieces: j.pieces, seqRows: j.seqRows,
	}
	if pool.K.DType == compute.F16 {
		j.hks, j.hvs = pool.K.Buf.([]byte), pool.V.Buf.([]byte)
	} else {
		j.cks, j.cvs = f32(pool.K), f32(pool.V)
	}
	if a.Sinks != nil {
		j.sinks = f32(b.asF32(a.Sinks))
	}
	kc := a.KVHeads * a.HeadDim
	for i := range j.n {
		slot := j.slot(int(j.seq[i]), int(j.pos[i]))
		if j.hks != nil {
			narrowF16(j.hks[2*slot*kc:2*(slot+1)*kc], j.k[i*kc:(i+1)*kc])
			narrowF16(j.hvs[2*slot*kc:2*(slot+1)*kc], j.v[i*kc:(i+1)*kc])
		} else {
			copy(j.cks[slot*kc:(slot+1)*kc], j.k[i*kc:(i+1)*kc])
			copy(j.cvs[slot*kc:(slot+1)*kc], j.v[i*kc:(i+1)*kc])
		}
		j.L = max(j.L, int(j.pos[i])+1)
	}
	if j.hks != nil {
		j.prewiden(b)
	}
	group := a.Heads / a.KVHeads
	j.width = 1
	if attnGrouped && groupedHeads(a.HeadDim) {
		j.width = min(group, attnGroup)
	}
	j.passes = (group + j.width - 1) / j.width
	// As many kv heads per unit as leave every thread units enough; one
	// in decode steps over long contexts (few rows), where more, shorter
	// units balance the threads better than longer runs of memory help
	// (the next block's rows are prefetched).
	j.kvPer = max(1, min(a.KVHeads, j.n*a.KVHeads*j.passes/(pagedUnitsPerThread*b.threads)))
	if j.L >= pagedOneHead && j.n <= 32 {
		j.kvPer = 1
	}
	j.kvUnits = (a.KVHeads + j.kvPer - 1) / j.kvPer
	units, need := j.n*j.kvUnits*j.passes, j.kvPer*j.width*j.L
	if len(j.scores) < attnChunks {
		j.scores = make([][]float32, attnChunks)
		j.spans = make([][]span, attnChunks)
	}
	j.chunks = min(attnChunks, units)
	for c := range j.scores[:j.chunks] {
		if cap(j.scores[c]) < need {
			j.scores[c] = make([]float32, need, 2*need)
		}
	}
	if j.hks != nil {
		if len(j.wide) < attnChunks {
			j.wide = make([][]float32, attnChunks)
		}
		for c := range j.wide[:j.chunks] {
			if len(j.wide[c]) < j.bs*kc {
				j.wide[c] = make([]float32, j.bs*kc)
			}
		}
	}
	b.pool.Run(j.chunks, b.pagedFunc)
	*j = pagedJob{attnJob: attnJob{scores: j.scores}, spans: j.spans, wide: j.wide,
		flatK: j.flatK, flatV: j.flatV, flatOff: j.flatOff, pieces: j.pieces, seqRows: j.seqRows}
}

// checkPaged panics, on the calling goroutine, unless the operands of an
// AttendPaged call fit together and every block a row stores to or reads
// lies in the pool: a table that points elsewhere would otherwise read
// and write another sequence's rows, or memory past the pool.
func checkPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("cpu: AttendPaged: "+format, args...))
	}
	n := q.Rows()
	qc, kc := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	switch {
	case a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0:
		fail("%d heads over %d kv heads of %d", a.Heads, a.KVHeads, a.HeadDim)
	case q.Cols() != qc || dst.Cols() != qc || dst.Rows() != n:
		fail("q %v and dst %v for %d heads of %d", q.Shape, dst.Shape, a.Heads, a.HeadDim)
	case k.Cols() != kc || v.Cols() != kc || k.Rows() != n || v.Rows() != n:
		fail("k %v and v %v for %d rows of %d kv heads of %d", k.Shape, v.Shape, n, a.KVHeads, a.HeadDim)
	case pool.K.Cols() != kc || pool.V.Cols() != kc || pool.V.Rows() != pool.K.Rows():
		fail("pool k %v and v %v for %d kv heads of %d", pool.K.Shape, pool.V.Shape, a.KVHeads, a.HeadDim)
	case pg.BlockSize <= 0 || pg.MaxBlocks <= 0 || pg.Table.Len()%pg.MaxBlocks != 0:
		fail("block table of %d entries, %d per sequence, blocks of %d", pg.Table.Len(), pg.MaxBlocks, pg.BlockSize)
	case pg.Seq.Len() < n || pos.Len() < n:
		fail("%d rows with %d sequence ids and %d positions", n, pg.Seq.Len(), pos.Len())
	}
	table, seq, ps := pg.Table.Buf.([]int32), pg.Seq.Buf.([]int32), pos.Buf.([]int32)
	seqs, blocks, bs := len(table)/pg.MaxBlocks, pool.K.Rows()/pg.BlockSize, pg.BlockSize
	for i := range n {
		s, p := int(seq[i]), int(ps[i])
		switch {
		case s < 0 || s >= seqs:
			fail("row %d: sequence %d of %d", i, s, seqs)
		case p < 0 || p/bs >= pg.MaxBlocks:
			fail("row %d: position %d outside the %d blocks of %d of sequence %d", i, p, pg.MaxBlocks, bs, s)
		}
		first := 0
		if a.Window > 0 {
			first = max(0, p-a.Window+1)
		}
		for j := first / bs; j <= p/bs; j++ {
			if blk := table[s*pg.MaxBlocks+j]; blk < 0 || int(blk) >= blocks {
				fail("row %d: position %d of sequence %d: block %d (table entry %d) is not one of the pool's %d", i, p, s, blk, j, blocks)
			}
		}
	}
}

// slot returns the pool row of sequence s's position p (checkPaged has
// checked its block).
func (j *pagedJob) slot(s, p int) int {
	return int(j.table[s*j.maxBlocks+p/j.bs])*j.bs + p%j.bs
}

// blockSpans returns the runs of sequence s's positions first..last, one
// per block.
func (j *pagedJob) blockSpans(out []span, s, first, last int) []span {
	kc := j.a.KVHeads * j.a.HeadDim
	out = out[:0]
	for p := first; p <= last; {
		n := min(last+1, (p/j.bs+1)*j.bs) - p
		r := j.slot(s, p)
		sp := span{p0: p, n: n, r: r}
		switch {
		case j.cks != nil:
			sp.k, sp.v = j.cks[r*kc:(r+n)*kc], j.cvs[r*kc:(r+n)*kc]
		case j.flatOff[s] >= 0:
			o := j.flatOff[s] + p*kc
			sp.k, sp.v = j.flatK[o:o+n*kc], j.flatV[o:o+n*kc]
		}
		out = append(out, sp)
		p += n
	}
	return out
}

// chunk computes the units of piece c, as attnJob.chunk does over a
// contiguous cache, for kv heads kv0…kv1−1 of a row at once: block by
// block, each head's products (and so its numbers) as a unit of one head
// computes them.
func (j *pagedJob) chunk(c int) {
	a := j.a
	group := a.Heads / a.KVHeads
	total := j.n * j.kvUnits * j.passes
	lo, hi := c*total/j.chunks, (c+1)*total/j.chunks
	hd := a.HeadDim
	qc, kc := a.Heads*hd, a.KVHeads*hd
	L := j.L
	for t := lo; t < hi; t++ {
		i, u := t/(j.kvUnits*j.passes), t%(j.kvUnits*j.passes)
		kb, pass := u/j.passes, u%j.passes
		kv0 := kb * j.kvPer
		kv1 := min(kv0+j.kvPer, a.KVHeads)
		g := min(j.width, group-pass*j.width)
		p := int(j.pos[i])
		first := 0
		if a.Window > 0 {
			first = max(0, p-a.Window+1)
		}
		sp := j.blockSpans(j.spans[c], int(j.seq[i]), first, p)
		j.spans[c] = sp
		// Kv head kv's scores at (kv−kv0)·width·L of the slot.
		sc := j.scores[c][:j.kvPer*j.width*L]
		for si, s := range sp {
			j.prefetchSpan(sp, si+1, false, kv0, kv1)
			keys := j.rows(c, s, s.k, j.hks, kv0, kv1)
			for kv := kv0; kv < kv1; kv++ {
				h0 := kv*group + pass*j.width
				q := j.q[i*qc+h0*hd : i*qc+(h0+g)*hd]
				dotsGroup(sc[(kv-kv0)*j.width*L+s.p0:], L, q, g, keys[kv*hd:], kc, s.n)
			}
		}
		for kv := kv0; kv < kv1; kv++ {
			h0 := kv*group + pass*j.width
			scores := sc[(kv-kv0)*j.width*L:]
			for h := range g {
				j.weights(scores[h*L+first:h*L+p+1], h0+h)
			}
			clear(j.out[i*qc+h0*hd : i*qc+(h0+g)*hd])
		}
		for si, s := range sp {
			j.prefetchSpan(sp, si+1, true, kv0, kv1)
			values := j.rows(c, s, s.v, j.hvs, kv0, kv1)
			for kv := kv0; kv < kv1; kv++ {
				h0 := kv*group + pass*j.width
				o := j.out[i*qc+h0*hd : i*qc+(h0+g)*hd]
				axpysGroup(o, sc[(kv-kv0)*j.width*L+s.p0:], L, g, values[kv*hd:], kc, s.n)
			}
		}
	}
}

// rows returns the keys (or values) of span s: rows where the span has
// them as f32, or else kv heads kv0…kv1−1 of the span's f16 rows (half)
// widened into chunk slot c's buffer, laid out as the pool's rows
// (exactly: f16 values widen to f32 without rounding).
func (j *pagedJob) rows(c int, s span, rows []float32, half []byte, kv0, kv1 int) []float32 {
	if rows != nil {
		return rows
	}
	hd, kc := j.a.HeadDim, j.a.KVHeads*j.a.HeadDim
	w := j.wide[c][:s.n*kc]
	for r := range s.n {
		at := (s.r+r)*kc + kv0*hd
		ToF32(w[r*kc+kv0*hd:r*kc+kv1*hd], half[2*at:2*(at+(kv1-kv0)*hd)], compute.F16)
	}
	return w
}

// prefetchSpan prefetches kv heads kv0…kv1−1 of the keys (or values) of
// the rows of span sp[i], if there is one, while the span before it is
// computed: the blocks lie anywhere in the pool, and the hardware
// prefetchers lose the stream where a block ends.
func (j *pagedJob) prefetchSpan(sp []span, i int, values bool, kv0, kv1 int) {
	if !pagedPrefetch || i >= len(sp) {
		return
	}
	hd, kc := j.a.HeadDim, j.a.KVHeads*j.a.HeadDim
	if sp[i].k == nil {
		half := j.hks
		if values {
			half = j.hvs
		}
		at := sp[i].r*kc + kv0*hd
		prefetchRows((*float32)(unsafe.Pointer(&half[2*at])), 2*kc, sp[i].n, 2*(kv1-kv0)*hd, pagedPrefetchStep)
		return
	}
	rows := sp[i].k
	if values {
		rows = sp[i].v
	}
	prefetchRows(&rows[kv0*hd], 4*kc, sp[i].n, 4*(kv1-kv0)*hd, pagedPrefetchStep)
}

// pagedPrefetch turns prefetchSpan on; it prefetches a line every
// pagedPrefetchStep bytes.
var (
	pagedPrefetch     = true
	pagedPrefetchStep = 64
)

// SetRowStable implements compute.RowStable. The products of float
// weights give each row the same bits whatever the number of rows, with
// it on or off: the one-row kernels sum as the many-row ones. The
// one-row products of the quantized types that are not packed (see
// packable) and of those dequantized to float32 take the many-row kernels
// with it on, a few percent slower. Packed types are unaffected at one
// row; at 32 rows and more their products stay on the VNNI kernels
// instead of AMX (amx.go), whose bf16 operands would give those rows
// other numbers than fewer rows get. The experts of one token
// (ApplyExperts of one row) sum their outputs in the order of many rows'
// (by expert), so that routed layers are row-stable too.
func (b *Backend) SetRowStable(on bool) {
	s := b.pool.lock()
	s.rowStable = on
	s.mu.Unlock()
}

// narrowF16 rounds src to f16 values (to nearest, ties to even) into dst,
// 2·len(src) bytes.
func narrowF16(dst []byte, src []float32) {
	_ = dst[2*len(src)-1]
	for i, x := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], half.F32ToF16(x))
	}
}

var _ compute.KVPooler = (*Backend)(nil)

// KVPoolType implements compute.KVPooler: the element type of paged pools,
// f32 unless SetKVPoolType chose f16.
func (b *Backend) KVPoolType() compute.DType { return b.poolType }

// SetKVPoolType implements compute.KVPooler: compute.F16 (half the
// memory and the bytes decode attention reads; 11 significant bits) or
// compute.F32.
func (b *Backend) SetKVPoolType(dt compute.DType) error {
	if err := compute.CheckKVPoolType(dt); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	b.poolType = dt
	return nil
}

// NewKVPool implements compute.KVPooler: a pool of blocks of blockSize
// positions of kvDim keys and values, of type KVPoolType.
func (b *Backend) NewKVPool(blocks, blockSize, kvDim int) *compute.KVCache {
	n := blocks * blockSize
	return &compute.KVCache{K: b.Alloc(b.poolType, n, kvDim), V: b.Alloc(b.poolType, n, kvDim), Capacity: n}
}
