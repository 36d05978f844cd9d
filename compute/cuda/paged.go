package cuda

import (
	"fmt"

	"lem/compute"
)

var _ compute.Pager = (*Backend)(nil)

// pagedKernels are the handles of the paged attention kernels
// (kernels/attention.cu).
type pagedKernels struct {
	attend [4]uintptr // 2, 4, 8, 16 elements per lane
	store  uintptr
}

func (k *pagedKernels) add(t map[string]*uintptr) {
	for i, e := range []string{"2", "4", "8", "16"} {
		t["attend_paged"+e] = &k.attend[i]
	}
	t["kvstore_paged"] = &k.store
}

// pagedSpan is how many positions one split of attend_paged takes: split
// s of a row covers its positions [s·pagedSpan, (s+1)·pagedSpan), a rule
// that does not depend on the other rows of the call.
const pagedSpan = 256

// pagedPartMax bounds the partial results of a split attend_paged call in
// bytes; a call that would need more (long prefill chunks, where the
// (row, head) pairs alone fill the GPU) takes each row's keys in one block.
const pagedPartMax = 64 << 20

// AttendPaged implements compute.Pager: kvstore_paged stores each row's
// new key and value in its slot of the pool, then attend_paged runs one
// block per (row, head, split) over the row's sequence through the block
// table, merged by attend_combine. The table, the row→sequence map and the
// positions are read on the device, so a captured graph stays valid when
// they change between replays (with the same row count and table width).
//
// Decode-shaped calls (up to Backend.pagedPart bytes of partial results) split each
// row's keys at absolute multiples of pagedSpan, so that a row computes
// the same numbers in any batch; larger calls give each (row, head) one
// block.
func (b *Backend) AttendPaged(dst, q, k, v *compute.Tensor, pool *compute.KVCache, pg *compute.Pages, pos *compute.Tensor, a *compute.Attention) {
	n := q.Rows()
	if n == 0 {
		return
	}
	if err := checkPaged(q, k, v, dst, pool, pg, pos, a); err != nil {
		panic("cuda: AttendPaged: " + err.Error())
	}
	var fn uintptr
	switch hd := a.HeadDim; {
	case hd <= 64:
		fn = b.k.paged.attend[0]
	case hd <= 128:
		fn = b.k.paged.attend[1]
	case hd <= 256:
		fn = b.k.paged.attend[2]
	default:
		fn = b.k.paged.attend[3]
	}
	kc := a.KVHeads * a.HeadDim
	tb, seq := dptr(pg.Table), dptr(pg.Seq)
	b.launch(b.k.paged.store, "kvstore_paged", n, threads(kc, 256)).
		ptr(dptr(pool.K)).ptr(dptr(pool.V)).ptr(dptr(k)).ptr(dptr(v)).
		ptr(tb).ptr(seq).ptr(dptr(pos)).i(pg.BlockSize).i(pg.MaxBlocks).i(kc)
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	splits := (pg.MaxBlocks*pg.BlockSize + pagedSpan - 1) / pagedSpan
	if int64(n)*int64(a.Heads)*int64(splits)*int64(a.HeadDim+2)*4 > b.pagedPart {
		splits = 1
	}
	var part uintptr
	if splits > 1 {
		part = b.attnScratch(n * a.Heads * splits * (a.HeadDim + 2) * 4)
	}
	o := b.record(op{fn: fn, name: "attend_paged", grid: [3]uint32{uint32(n * a.Heads), uint32(splits), 1}, block: [3]uint32{128, 1, 1}})
	o.ptr(dptr(dst)).ptr(dptr(q)).ptr(dptr(pool.K)).ptr(dptr(pool.V)).
		ptr(tb).ptr(seq).ptr(dptr(pos)).i(pg.BlockSize).i(pg.MaxBlocks).
		i(a.Heads).i(a.KVHeads).i(a.HeadDim).f(a.Scale).f(a.SoftCap).i(a.Window).
		ptr(dptr(a.Sinks)).i(sdt).ptr(part).i(splits).i(pagedSpan)
	if splits > 1 {
		b.launch(b.k.attendCombine, "attend_combine", n*a.Heads, threads(a.HeadDim, 256)).
			ptr(dptr(dst)).ptr(part).i(a.Heads).i(a.HeadDim).i(splits).ptr(dptr(a.Sinks)).i(sdt)
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
	if pool.K.Cols() != kc || pool.V.Cols() != kc || pool.K.DType != compute.F32 {
		return fmt.Errorf("pool of %v %s for %d key columns", pool.K.Shape, pool.K.DType, kc)
	}
	return nil
}
