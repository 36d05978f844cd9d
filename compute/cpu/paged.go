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
// kv head, width of its query heads) as attnJob's. A pool's block holds
// its rows head by head (pagedAt): the keys of one kv head over a block
// are one run of memory, which a unit reads as one stream.
type pagedJob struct {
	attnJob
	table, seq, pos []int32
	bs, maxBlocks   int
	// An f16 pool's keys and values (cks and cvs are nil then), and per
	// chunk slot the rows of a block widened to f32, laid out as a block.
	hks, hvs []byte
	wide     [][]float32
	// The blocks of the sequences with several rows in the call (a prompt
	// chunk), widened once for all their rows: sequence s's block jb (of
	// its table) at flatOff[s] + jb·bs·kc of flatK and flatV, laid out as
	// in the pool (flatOff −1 for the others), widened block by block as
	// pieces say.
	flatK, flatV   []float32
	flatOff        []int
	pieces         []widenPiece
	seqRows        []int    // prewiden's rows and last position per sequence
	L              int      // largest position of the call, plus one
	spans          [][]span // per chunk slot
	kvPer, kvUnits int      // kv heads per unit; units per row and pass
}

// widenPiece is block jb of sequence s.
type widenPiece struct{ s, jb int }

// prewiden widens, once for all their rows, the blocks that the
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
		total += (last[s]/j.bs + 1) * j.bs * kc
		for jb := range last[s]/j.bs + 1 {
			j.pieces = append(j.pieces, widenPiece{s, jb})
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

// widen widens piece c of prewiden's, the whole block (blocks a window
// has freed stay as they are: no row reads them).
func (j *pagedJob) widen(c int) {
	pc := j.pieces[c]
	blk := int(j.table[pc.s*j.maxBlocks+pc.jb])
	if blk < 0 {
		return
	}
	n := j.bs * j.a.KVHeads * j.a.HeadDim
	at, off := pagedAt(j.a, j.bs, blk, 0, 0), j.flatOff[pc.s]+pc.jb*n
	ToF32(j.flatK[off:off+n], j.hks[2*at:2*(at+n)], compute.F16)
	ToF32(j.flatV[off:off+n], j.hvs[2*at:2*(at+n)], compute.F16)
}

// pagedUnitsPerThread is how many units of the work of an AttendPaged
// call its threads get each at least, where it has rows enough: a unit
// takes kvPer kv heads of a row, block by block, and reads the heads of a
// block as one run of memory (the hardware prefetchers lose a stream
// where a run ends).
var pagedUnitsPerThread = 2

// AttendPaged implements compute.Pager: the new keys and values go into
// the pool first, then every row attends over its sequence's blocks, in
// runs that end where blocks end. Neither depends on the other rows of the
// call. Block b of the pool is rows b·bs…(b+1)·bs−1 of pool.K and pool.V
// (as compute.RowMover copies them), holding its positions head by head:
// kv head h of the block's row r at element pagedAt(a, bs, b, r, h).
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
	hd, kc := a.HeadDim, a.KVHeads*a.HeadDim
	for i := range j.n {
		p := int(j.pos[i])
		blk := j.block(int(j.seq[i]), p)
		for h := range a.KVHeads {
			at, src := pagedAt(a, j.bs, blk, p%j.bs, h), i*kc+h*hd
			if j.hks != nil {
				narrowF16(j.hks[2*at:2*(at+hd)], j.k[src:src+hd])
				narrowF16(j.hvs[2*at:2*(at+hd)], j.v[src:src+hd])
			} else {
				copy(j.cks[at:at+hd], j.k[src:src+hd])
				copy(j.cvs[at:at+hd], j.v[src:src+hd])
			}
		}
		j.L = max(j.L, p+1)
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
	// As many kv heads per unit as keep the units of the row that reads
	// the most positions within a pagedUnitsPerThread·threads-th of the
	// call's work, so that the threads share it evenly (rows of one
	// length: units enough for every thread), and no more.
	work, longest := 0, 1
	for i := range j.n {
		n := int(j.pos[i]) + 1
		if a.Window > 0 {
			n = min(n, a.Window)
		}
		work += n
		longest = max(longest, n)
	}
	j.kvPer = max(1, min(a.KVHeads, j.passes*a.KVHeads*work/(pagedUnitsPerThread*b.threads*longest)))
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

// pagedAt returns the offset, in elements of a paged pool's keys (or
// values), of kv head h of row r of block blk, for blocks of bs rows: a
// block holds its rows head by head, each head's bs rows one run of
// memory.
func pagedAt(a *compute.Attention, bs, blk, r, h int) int {
	return ((blk*a.KVHeads+h)*bs + r) * a.HeadDim
}

// block returns the pool block of sequence s's position p (checkPaged has
// checked it).
func (j *pagedJob) block(s, p int) int {
	return int(j.table[s*j.maxBlocks+p/j.bs])
}

// blockSpans returns the runs of sequence s's positions first..last, one
// per block: the span's block (r), and its keys and values as f32 where
// the pool or flatK and flatV have them, the whole block laid out as in
// the pool.
func (j *pagedJob) blockSpans(out []span, s, first, last int) []span {
	size := j.bs * j.a.KVHeads * j.a.HeadDim
	out = out[:0]
	for p := first; p <= last; {
		n := min(last+1, (p/j.bs+1)*j.bs) - p
		blk := j.block(s, p)
		sp := span{p0: p, n: n, r: blk}
		switch {
		case j.cks != nil:
			o := pagedAt(j.a, j.bs, blk, 0, 0)
			sp.k, sp.v = j.cks[o:o+size], j.cvs[o:o+size]
		case j.flatOff[s] >= 0:
			o := j.flatOff[s] + p/j.bs*size
			sp.k, sp.v = j.flatK[o:o+size], j.flatV[o:o+size]
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
	hd, qc := a.HeadDim, a.Heads*a.HeadDim
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
				dotsGroup(sc[(kv-kv0)*j.width*L+s.p0:], L, q, g, keys[pagedAt(a, j.bs, 0, s.p0%j.bs, kv):], hd, s.n)
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
				axpysGroup(o, sc[(kv-kv0)*j.width*L+s.p0:], L, g, values[pagedAt(a, j.bs, 0, s.p0%j.bs, kv):], hd, s.n)
			}
		}
	}
}

// rows returns the keys (or values) of span s: its block where the span
// has it as f32, or else kv heads kv0…kv1−1 of the span's f16 rows (half)
// widened into chunk slot c's buffer, laid out as the pool's block
// (exactly: f16 values widen to f32 without rounding).
func (j *pagedJob) rows(c int, s span, rows []float32, half []byte, kv0, kv1 int) []float32 {
	if rows != nil {
		return rows
	}
	n := s.n * j.a.HeadDim
	w := j.wide[c]
	for kv := kv0; kv < kv1; kv++ {
		o := pagedAt(j.a, j.bs, 0, s.p0%j.bs, kv)
		at := pagedAt(j.a, j.bs, s.r, 0, 0) + o
		ToF32(w[o:o+n], half[2*at:2*(at+n)], compute.F16)
	}
	return w
}

// prefetchSpan prefetches kv heads kv0…kv1−1 of the keys (or values) of
// the rows of span sp[i], if there is one, while the span before it is
// computed: the blocks lie anywhere in the pool, and the hardware
// prefetchers lose the stream where a block ends. Each head's rows are a
// run of memory, bs·hd elements from the next head's.
func (j *pagedJob) prefetchSpan(sp []span, i int, values bool, kv0, kv1 int) {
	if !pagedPrefetch || i >= len(sp) {
		return
	}
	s, hd := sp[i], j.a.HeadDim
	o := pagedAt(j.a, j.bs, 0, s.p0%j.bs, kv0)
	if s.k == nil {
		half := j.hks
		if values {
			half = j.hvs
		}
		at := pagedAt(j.a, j.bs, s.r, 0, 0) + o
		prefetchRows((*float32)(unsafe.Pointer(&half[2*at])), 2*j.bs*hd, kv1-kv0, 2*s.n*hd, pagedPrefetchStep)
		return
	}
	rows := s.k
	if values {
		rows = s.v
	}
	prefetchRows(&rows[o], 4*j.bs*hd, kv1-kv0, 4*s.n*hd, pagedPrefetchStep)
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
