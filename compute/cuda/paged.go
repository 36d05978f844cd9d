package cuda

import (
	"fmt"
	"strconv"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Pager = (*Backend)(nil)

// pagedKernels are the handles of the paged attention kernels
// (kernels/attention.cu), by pool type (f32, f16).
type pagedKernels struct {
	attend [2][4]uintptr    // general kernel: 2, 4, 8, 16 elements per lane
	gqa    [2][3][2]uintptr // grouped kernel: head dim 64, 128, 256; up to 4, 8 query heads per block
	store  [2]uintptr
	half   [2]uintptr // kv_half_paged: a sequence's keys and values gathered for flash_attend
	tc     [2]uintptr // attend_ptc (f16 pools, tensor cores): head dim 64, 128
}

// pagedTCDims are the head dims of attend_ptc.
var pagedTCDims = [2]int{64, 128}

// pagedTCRows is the fewest rows of a call that attend_ptc takes by
// default: below it the grouped kernel's exact f32 arithmetic costs little.
const pagedTCRows = 32

// parsePagedTC reads LEM_CUDA_PAGED_TC: unset, calls of pagedTCRows rows
// or more attend f16 pools on the tensor cores; 0 never; a number n, calls
// of n rows or more.
func parsePagedTC(s string) (int, error) {
	if s == "" {
		return pagedTCRows, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cuda: LEM_CUDA_PAGED_TC=%q: want a number of rows, 0 for never", s)
	}
	return n, nil
}

// ptcShared is attend_ptc's dynamic shared memory for head dim hd: a tile
// of 16 query rows, and per warp two stages of a key and a value tile of
// 16 positions, all f16 (kernels/mma_paged.cu).
func ptcShared(hd int) int { return 16*hd*2 + ptcWarps*2*2*16*hd*2 }

// ptcWarps is attend_ptc's warps per block (PT_WARPS).
const ptcWarps = 4

// openPagedTC lets attend_ptc use its shared memory (owner thread).
func (b *Backend) openPagedTC() error {
	return b.do(func(w *owner) error {
		for i, hd := range pagedTCDims {
			n := ptcShared(hd)
			if err := w.check(fmt.Sprintf("cuFuncSetAttribute(attend_ptc%d, %d bytes)", hd, n),
				call(w.d.cuFuncSetAttribute, b.k.paged.tc[i], funcAttrMaxDynamicShared, uintptr(n))); err != nil {
				return err
			}
		}
		return nil
	})
}

// tcKernel returns attend_ptc's index in pagedTCDims for a call of n rows
// over pool, or -1 where the call takes the SIMT kernels: f32 pools, other
// head dims, fewer rows than b.pagedTC, the general kernel asked for, or
// exact attention (LEM_CUDA_ATTENTION=exact).
func (b *Backend) tcKernel(pool *compute.KVCache, a *compute.Attention, n int) int {
	if b.pagedTC == 0 || n < b.pagedTC || pool.K.DType != compute.F16 || b.pagedGeneric || b.flash.mode == attnExact {
		return -1
	}
	for i, d := range pagedTCDims {
		if d == a.HeadDim {
			return i
		}
	}
	return -1
}

// pagedGQADims are the head dims of the grouped kernel attend_pgqa.
var pagedGQADims = [3]int{64, 128, 256}

func (k *pagedKernels) add(t map[string]*uintptr) {
	for i, e := range []string{"2", "4", "8", "16"} {
		t["attend_paged"+e] = &k.attend[0][i]
		t["attend_paged_f16_"+e] = &k.attend[1][i]
	}
	for i, hd := range pagedTCDims {
		t["attend_ptc"+strconv.Itoa(hd)] = &k.tc[i]
	}
	for d, dt := range []string{"f32", "f16"} {
		for h, hd := range []string{"64", "128", "256"} {
			for g, gm := range []string{"4", "8"} {
				t["attend_pgqa"+hd+"_"+dt+"_g"+gm] = &k.gqa[d][h][g]
			}
		}
	}
	t["kvstore_paged"] = &k.store[0]
	t["kvstore_paged_f16"] = &k.store[1]
	t["kv_half_paged"] = &k.half[0]
	t["kv_half_paged_f16"] = &k.half[1]
}

// pagedSpan is the most positions one split of a paged attention kernel
// takes: split s of a row covers its positions [s·span, (s+1)·span).
// kernels/attention.cu's PG_SPAN is the same.
const pagedSpan = 256

// spanFor returns the span of a paged attention launch whose every split
// runs ctas blocks (rows × heads or kv-head groups): the power of two in
// 32…pagedSpan nearest above ctas, so that a call of few rows still
// spreads over many blocks (one row of an 8B model: 8 blocks a split, 18
// splits at 545 positions), while a call of many rows keeps its splits,
// and the partial results attend_combine reads, few. A row's bits depend
// on the span alone, not on what the other rows are.
func spanFor(ctas int) int {
	s := 32
	for s < pagedSpan && s < ctas {
		s *= 2
	}
	return s
}

// parsePagedSpan reads LEM_CUDA_PAGED_SPAN, which fixes the positions per
// split of the paged attention kernels: 32, 64, 128 or 256; unset (0),
// spanFor chooses per launch. A fixed span gives every row the same bits
// whatever its batch.
func parsePagedSpan(s string) (int, error) {
	switch s {
	case "":
		return 0, nil
	case "32", "64", "128", "256":
		n, _ := strconv.Atoi(s)
		return n, nil
	}
	return 0, fmt.Errorf("cuda: LEM_CUDA_PAGED_SPAN=%q: want 32, 64, 128 or 256", s)
}

// pagedPartMax bounds the partial results of one launch of a paged
// attention kernel in bytes; a call whose rows need more (long prefill
// chunks over long contexts) runs in several launches of fewer rows.
const pagedPartMax = 64 << 20

var _ compute.KVPooler = (*Backend)(nil)

// KVPoolType implements compute.KVPooler: paged pools hold f16 keys and
// values (half the bytes that decode attention reads), unless
// LEM_CUDA_KV_POOL=f32 asks for f32 ones. f16 keeps 11 significant bits
// (bf16: 8) over the range of keys and values (|x| < 65504).
func (b *Backend) KVPoolType() compute.DType { return b.poolType }

// SetKVPoolType implements compute.KVPooler.
func (b *Backend) SetKVPoolType(dt compute.DType) error {
	if err := compute.CheckKVPoolType(dt); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	b.poolType = dt
	return nil
}

// NewKVPool implements compute.KVPooler: a paged pool of blocks of
// blockSize positions of kvDim keys and values, of type KVPoolType.
func (b *Backend) NewKVPool(blocks, blockSize, kvDim int) *compute.KVCache {
	n := blocks * blockSize
	return &compute.KVCache{K: b.Alloc(b.poolType, n, kvDim), V: b.Alloc(b.poolType, n, kvDim), Capacity: n}
}

// parsePoolType reads LEM_CUDA_KV_POOL.
func parsePoolType(s string) (compute.DType, error) {
	if s == "" {
		return compute.F16, nil
	}
	dt, err := compute.ParseKVPoolType(s)
	if err != nil {
		return 0, fmt.Errorf("cuda: LEM_CUDA_KV_POOL: %w", err)
	}
	return dt, nil
}

// AttendPaged implements compute.Pager: kvstore_paged stores each row's
// new key and value in its slot of the pool (f32 or f16), then a paged
// attention kernel computes, per (row, split of span positions), the
// part of the row's attention over its sequence's keys in the split,
// through the block table, and attend_combine merges the parts in split
// order. The table, the row→sequence map and the positions are read on
// the device, so a captured graph stays valid when they change between
// replays (with the same row count and table width).
//
// Head dims 64, 128 and 256 take attend_pgqa, which reads each key and
// value once for up to 8 query heads of its kv head (GQA); other head dims
// take attend_paged, one block per (row, query head). Calls of pagedTCRows
// rows or more over f16 pools of head dims 64 and 128 take attend_ptc
// instead (kernels/mma_paged.cu: the same parts, computed on the tensor
// cores from f16 queries and weights), unless LEM_CUDA_PAGED_TC or exact
// attention says otherwise. The span follows the call's row count
// (spanFor) unless LEM_CUDA_PAGED_SPAN fixes it; for a given span and
// kernel, every row is computed the same whatever the other rows of the
// call: its splits start at absolute positions, empty splits add nothing,
// and calls whose parts would pass Backend.pagedPart bytes run in launches
// of fewer rows.
//
// When pg.Spans says where the sequences' rows lie, a prompt chunk of
// flashMinRows rows or more whose head dim flash_attend has is attended on
// the tensor cores (unless LEM_CUDA_ATTENTION=exact): kv_half_paged
// gathers its keys and values (cached and new, from the pool) into
// contiguous bf16 rows and flash_attend runs over them for the chunk's
// rows alone, so a chunk row depends only on its own sequence's chunk and
// cache. The other rows take the paged kernels, in launches of the runs of
// rows between chunks.
func (b *Backend) AttendPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	n := q.Rows()
	if n == 0 {
		return
	}
	if err := checkPaged(q, k, v, dst, pool, pg, pos, a); err != nil {
		panic("cuda: AttendPaged: " + err.Error())
	}
	pt := 0
	if pool.K.DType == compute.F16 {
		pt = 1
	}
	kc := a.KVHeads * a.HeadDim
	tb, seq, ps := dptr(pg.Table), dptr(pg.Seq), dptr(pos)
	b.launchEarly(b.k.paged.store[pt], "kvstore_paged", n, threads(kc, 256)).
		ptr(dptr(pool.K)).ptr(dptr(pool.V)).ptr(dptr(k)).ptr(dptr(v)).
		ptr(tb).ptr(seq).ptr(ps).i(pg.BlockSize).i(pg.MaxBlocks).i(kc)
	r0 := 0
	for _, sp := range b.pagedFlash(dst, q, pool, pg, pos, a) {
		b.attendPagedRows(dst, q, pool, pg, pos, a, r0, sp.Row)
		r0 = sp.Row + sp.Rows
	}
	b.attendPagedRows(dst, q, pool, pg, pos, a, r0, n)
}

// pagedFlash attends the chunks of pg.Spans that suit flash_attend and
// returns their spans, in row order.
func (b *Backend) pagedFlash(dst, q *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) []compute.PageSpan {
	if len(pg.Spans) == 0 || b.flash.mode == attnExact || dptr(q)%16 != 0 || dptr(dst)%8 != 0 {
		return nil
	}
	cfg, fn, ok := b.flashKernel(a.HeadDim)
	if !ok {
		return nil
	}
	least := flashMinRows
	// Rows of keys each chunk sees: from its first visible position to
	// its last row's.
	seen := func(sp compute.PageSpan) int {
		base := 0
		if a.Window > 0 {
			base = max(0, sp.Start-a.Window+1)
		}
		return sp.Start + sp.Rows - base
	}
	var chunks []compute.PageSpan
	most := 0
	for _, sp := range pg.Spans {
		if sp.Rows >= least {
			chunks = append(chunks, sp)
			most = max(most, seen(sp))
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	kc := a.KVHeads * a.HeadDim
	qc := a.Heads * a.HeadDim
	half := most * kc * 2
	kh := b.scratch(&b.flash.kv, 2*half)
	vh := kh + uintptr(half)
	pt := 0
	if pool.K.DType == compute.F16 {
		pt = 1
	}
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	// The chunks share the scratch: the stream runs them one after the
	// other.
	for _, sp := range chunks {
		rows := seen(sp)
		sr, pr := dptr(pg.Seq)+uintptr(sp.Row*4), dptr(pos)+uintptr(sp.Row*4)
		b.launch(b.k.paged.half[pt], "kv_half_paged", rows, threads(kc, 256)).
			ptr(kh).ptr(vh).ptr(dptr(pool.K)).ptr(dptr(pool.V)).ptr(dptr(pg.Table)).ptr(sr).ptr(pr).
			i(sp.Rows).i(pg.BlockSize).i(pg.MaxBlocks).i(kc).i(a.Window)
		o := b.record(op{fn: fn, name: "flash_attend",
			grid: [3]uint32{uint32((sp.Rows + cfg.bq - 1) / cfg.bq), uint32(a.Heads), 1}, block: [3]uint32{128, 1, 1},
			shared: uint32(cfg.shared())})
		o.ptr(dptr(dst) + uintptr(sp.Row*qc*4)).ptr(dptr(q) + uintptr(sp.Row*qc*4)).ptr(kh).ptr(vh).ptr(pr).
			i(sp.Rows).i(rows).i(a.Heads).i(a.KVHeads).
			f(a.Scale).f(a.SoftCap).i(a.Window).ptr(dptr(a.Sinks)).i(sdt).i(0)
	}
	return chunks
}

// pagedKernel returns how a paged attention call of n rows runs: the
// grouped kernel's index in pagedGQADims (-1: attend_paged), its query
// heads per block (gm 0: up to 4 of a kv head; gm 1: up to 8, when the kv
// head has more than 4), its blocks per (row, kv head), and the span of
// its splits. The span follows the call's rows, not a launch's, so that
// the launches of the runs between flash chunks take the span a call
// without flash would.
func (b *Backend) pagedKernel(a *compute.Attention, n int) (gqa, gm, hch, span int) {
	gqa = -1
	for i, d := range pagedGQADims {
		if d == a.HeadDim && !b.pagedGeneric {
			gqa = i
		}
	}
	ctas := n * a.Heads
	if gqa >= 0 {
		g := a.Heads / a.KVHeads
		if g > 4 {
			gm = 1
		}
		hch = (g + 4*(gm+1) - 1) / (4 * (gm + 1))
		ctas = n * a.KVHeads * hch
	}
	span = b.pagedSpan
	if span == 0 {
		span = spanFor(ctas)
	}
	return gqa, gm, hch, span
}

// attendPagedRows attends rows [r0, r1) of an AttendPaged call with the
// paged kernels (their keys and values already stored).
func (b *Backend) attendPagedRows(dst, q *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention, r0, r1 int) {
	if r1 <= r0 {
		return
	}
	pt := 0
	if pool.K.DType == compute.F16 {
		pt = 1
	}
	tb, seq, ps := dptr(pg.Table), dptr(pg.Seq), dptr(pos)
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	hd, qc := a.HeadDim, a.Heads*a.HeadDim
	gqa, gm, hch, span := b.pagedKernel(a, q.Rows())
	tc := b.tcKernel(pool, a, q.Rows())
	splits := max(2, (pg.MaxBlocks*pg.BlockSize+span-1)/span)
	if gqa >= 0 || tc >= 0 {
		splits = max(1, (pg.MaxBlocks*pg.BlockSize+span-1)/span)
	}
	perRow := int64(a.Heads) * int64(splits) * int64(hd+2) * 4
	step := int(max(1, min(int64(r1-r0), b.pagedPart/perRow)))
	part := b.attnScratch(int(int64(step) * perRow))
	for ; r0 < r1; r0 += step {
		m := min(step, r1-r0)
		qr, sr, pr := dptr(q)+uintptr(r0*qc*4), seq+uintptr(r0*4), ps+uintptr(r0*4)
		switch {
		case tc >= 0:
			hc := (a.Heads/a.KVHeads + 15) / 16
			o := b.record(op{fn: b.k.paged.tc[tc], name: "attend_ptc",
				grid: [3]uint32{uint32(m * a.KVHeads * hc), uint32(splits), 1}, block: [3]uint32{32 * ptcWarps, 1, 1},
				shared: uint32(ptcShared(hd)), pdl: b.pdl})
			o.ptr(qr).ptr(dptr(pool.K)).ptr(dptr(pool.V)).ptr(tb).ptr(sr).ptr(pr).i(pg.BlockSize).i(pg.MaxBlocks).
				i(a.Heads).i(a.KVHeads).f(a.Scale).f(a.SoftCap).i(a.Window).ptr(part).i(splits).i(span)
		case gqa >= 0:
			o := b.record(op{fn: b.k.paged.gqa[pt][gqa][gm], name: "attend_pgqa",
				grid: [3]uint32{uint32(m * a.KVHeads * hch), uint32(splits), 1}, block: [3]uint32{128, 1, 1}, pdl: b.pdl})
			o.ptr(qr).ptr(dptr(pool.K)).ptr(dptr(pool.V)).ptr(tb).ptr(sr).ptr(pr).i(pg.BlockSize).i(pg.MaxBlocks).
				i(a.Heads).i(a.KVHeads).f(a.Scale).f(a.SoftCap).i(a.Window).ptr(part).i(splits).i(span)
		default:
			var e int
			switch {
			case hd <= 64:
				e = 0
			case hd <= 128:
				e = 1
			case hd <= 256:
				e = 2
			default:
				e = 3
			}
			o := b.record(op{fn: b.k.paged.attend[pt][e], name: "attend_paged",
				grid: [3]uint32{uint32(m * a.Heads), uint32(splits), 1}, block: [3]uint32{128, 1, 1}, pdl: b.pdl})
			o.ptr(dptr(dst) + uintptr(r0*qc*4)).ptr(qr).ptr(dptr(pool.K)).ptr(dptr(pool.V)).
				ptr(tb).ptr(sr).ptr(pr).i(pg.BlockSize).i(pg.MaxBlocks).
				i(a.Heads).i(a.KVHeads).i(hd).f(a.Scale).f(a.SoftCap).i(a.Window).
				ptr(dptr(a.Sinks)).i(sdt).ptr(part).i(splits).i(span)
		}
		b.launchEarly(b.k.attendCombine, "attend_combine", m*a.Heads, threads(hd, 256)).
			ptr(dptr(dst) + uintptr(r0*qc*4)).ptr(part).i(a.Heads).i(hd).i(splits).ptr(dptr(a.Sinks)).i(sdt).
			ptr(pr).i(span).i(pg.MaxBlocks*pg.BlockSize - 1)
	}
}

// checkPaged reports what is wrong with the shapes of an AttendPaged call.
func checkPaged(q, k, v, dst *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) error {
	n := q.Rows()
	switch {
	case a.KVHeads <= 0 || a.Heads%a.KVHeads != 0:
		return fmt.Errorf("%d query heads over %d kv heads", a.Heads, a.KVHeads)
	case a.HeadDim <= 0 || a.HeadDim > 512:
		return fmt.Errorf("head dim %d not in 1…512", a.HeadDim)
	case pg == nil || pg.Table == nil || pg.Seq == nil || pos == nil:
		return fmt.Errorf("no block table, sequence map or positions")
	case pg.BlockSize <= 0 || pg.MaxBlocks <= 0:
		return fmt.Errorf("block size %d, table width %d", pg.BlockSize, pg.MaxBlocks)
	case pg.Table.DType != compute.I32 || pg.Seq.DType != compute.I32 || pos.DType != compute.I32:
		return fmt.Errorf("table %s, sequence map %s, positions %s: want i32", pg.Table.DType, pg.Seq.DType, pos.DType)
	case pg.Seq.Len() < n || pos.Len() < n:
		return fmt.Errorf("%d rows, %d sequence entries, %d positions", n, pg.Seq.Len(), pos.Len())
	case pg.Table.Len()%pg.MaxBlocks != 0:
		return fmt.Errorf("table of %d entries is not rows of %d", pg.Table.Len(), pg.MaxBlocks)
	}
	kc := a.KVHeads * a.HeadDim
	if q.Cols() != a.Heads*a.HeadDim || dst.Cols() != q.Cols() || dst.Rows() < n ||
		k.Cols() != kc || v.Cols() != kc || k.Rows() < n || v.Rows() < n {
		return fmt.Errorf("q %v, k %v, v %v, dst %v for %d×%d heads of %d", q.Shape, k.Shape, v.Shape, dst.Shape, a.Heads, a.KVHeads, a.HeadDim)
	}
	if pool.K.Cols() != kc || pool.V.Cols() != kc || pool.V.DType != pool.K.DType ||
		(pool.K.DType != compute.F32 && pool.K.DType != compute.F16) {
		return fmt.Errorf("pool of %v %s keys and %v %s values for %d key columns: want f32 or f16", pool.K.Shape, pool.K.DType, pool.V.Shape, pool.V.DType, kc)
	}
	end := 0
	for i, sp := range pg.Spans {
		if sp.Row < end || sp.Rows < 1 || sp.Row+sp.Rows > n || sp.Start < 0 {
			return fmt.Errorf("span %d (rows %d+%d from position %d) of %d rows: want spans of rows in order, within the call", i, sp.Row, sp.Rows, sp.Start, n)
		}
		end = sp.Row + sp.Rows
	}
	return nil
}
