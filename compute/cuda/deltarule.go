package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.DeltaRuler = (*Backend)(nil)

// maxKeyDim is the largest key head the delta-rule kernels handle
// (DR_MAXK values per lane in the recurrent step, DRMAXK in the chunked
// form).
const maxKeyDim = 256

// DeltaRule implements compute.DeltaRuler. A single row (decode) takes the
// recurrent step: one warp per (value head, value column) keeps its row of
// the state in registers. Longer inputs take the chunked (WY) form: dr_prep
// computes the state-independent matrices of every (chunk, head) at once,
// then dr_carry carries the state through the chunks, one block per (head,
// 16 value columns) holding its rows of the state in shared memory.
func (b *Backend) DeltaRule(dst, qkv, a, bt, state *compute.Tensor, r *compute.DeltaRule) {
	n := qkv.Rows()
	vh, dk, dv := r.ValueHeads, r.KeyDim, r.ValueDim
	if r.KeyHeads <= 0 || vh%r.KeyHeads != 0 || qkv.Cols() != r.Width() || a.Cols() != vh || bt.Cols() != vh ||
		state.Len() != vh*dv*dk || dst.Len() < n*vh*dv {
		panic(fmt.Sprintf("cuda: DeltaRule: qkv %v, a %v, b %v, state %v, dst %v do not fit %d key heads × %d, %d value heads × %d",
			qkv.Shape, a.Shape, bt.Shape, state.Shape, dst.Shape, r.KeyHeads, dk, vh, dv))
	}
	if dk > maxKeyDim {
		panic(fmt.Sprintf("cuda: DeltaRule: key dim %d > %d", dk, maxKeyDim))
	}
	if n == 0 || vh*dv == 0 {
		return
	}
	tiled := 0
	if r.Tiled {
		tiled = 1
	}
	if n > 1 && !b.prefill.sequential {
		scr := b.deltaPrep(qkv, a, bt, r)
		b.deltaCarry(dst, state, scr, n, r)
		return
	}
	b.launch(b.k.deltaRule, "delta_rule", (vh*dv+3)/4, 128).
		ptr(dptr(dst)).ptr(dptr(qkv)).ptr(dptr(a)).ptr(dptr(bt)).ptr(dptr(state)).
		ptr(dptr(r.ALog)).i(int(r.ALog.DType)).ptr(dptr(r.DtBias)).i(int(r.DtBias.DType)).
		i(n).i(r.KeyHeads).i(vh).i(dk).i(dv).f(r.Scale).f(r.NormEps).i(tiled).f(r.BetaScale())
}

// deltaPrep records dr_prep over the rows of qkv and returns its scratch.
func (b *Backend) deltaPrep(qkv, a, bt *compute.Tensor, r *compute.DeltaRule) uintptr {
	n, vh := qkv.Rows(), r.ValueHeads
	chunks := (n + deltaChunk - 1) / deltaChunk
	per := deltaBlock(r.KeyDim, r.ValueDim)
	scr := b.scratch(&b.prefill.delta, 4*vh*chunks*per)
	tiled := 0
	if r.Tiled {
		tiled = 1
	}
	b.record(op{fn: b.k.chunked.drPrep, name: "dr_prep",
		grid: [3]uint32{uint32(chunks), uint32(vh), 1}, block: [3]uint32{256, 1, 1}}).
		ptr(scr).ptr(dptr(qkv)).ptr(dptr(a)).ptr(dptr(bt)).
		ptr(dptr(r.ALog)).i(int(r.ALog.DType)).ptr(dptr(r.DtBias)).i(int(r.DtBias.DType)).
		i(n).i(r.KeyHeads).i(vh).i(r.KeyDim).i(r.ValueDim).f(r.Scale).f(r.NormEps).i(tiled).f(r.BetaScale()).i(chunks).i64(per)
	return scr
}

// deltaCarry records the pass of the state through the chunks that
// deltaPrep prepared in scr, writing dst.
func (b *Backend) deltaCarry(dst, state *compute.Tensor, scr uintptr, n int, r *compute.DeltaRule) {
	vh, dk, dv := r.ValueHeads, r.KeyDim, r.ValueDim
	chunks := (n + deltaChunk - 1) / deltaChunk
	per := deltaBlock(dk, dv)
	o := op{fn: b.k.chunked.drCarry, name: "dr_carry",
		grid: [3]uint32{uint32((dv + 15) / 16), uint32(vh), 1}, block: [3]uint32{256, 1, 1}, shared: uint32(drCarryShared(dk))}
	if !b.prefill.staged {
		o.fn, o.name, o.shared = b.k.chunked.drChunk, "dr_chunk", 0
	} else if !b.allowShared(o.fn, drCarryShared(maxKeyDim)) {
		return
	}
	b.record(o).ptr(dptr(dst)).ptr(dptr(state)).ptr(scr).i(n).i(vh).i(dk).i(dv).i(chunks).i64(per)
}

// drCarryShared returns the dynamic shared memory of dr_carry for key dim
// dk: W, e^G⊙Q, e^(G_last−G)⊙K and 16 rows of the state, rows of dk4+4
// floats, then the masked QKᵀ, Û and P.
func drCarryShared(dk int) int {
	sd := (dk+3)&^3 + 4
	return 4 * ((3*deltaChunk+16)*sd + deltaChunk*deltaChunk + 2*deltaChunk*16)
}
