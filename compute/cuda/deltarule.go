package cuda

import (
	"fmt"

	"lem/compute"
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
// then dr_chunk carries the state through the chunks, one block per (head,
// 16 value columns).
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
		chunks := (n + deltaChunk - 1) / deltaChunk
		per := deltaBlock(dk, dv)
		scr := b.scratch(&b.prefill.delta, 4*vh*chunks*per)
		b.record(op{fn: b.k.chunked.drPrep, name: "dr_prep",
			grid: [3]uint32{uint32(chunks), uint32(vh), 1}, block: [3]uint32{256, 1, 1}}).
			ptr(scr).ptr(dptr(qkv)).ptr(dptr(a)).ptr(dptr(bt)).
			ptr(dptr(r.ALog)).i(int(r.ALog.DType)).ptr(dptr(r.DtBias)).i(int(r.DtBias.DType)).
			i(n).i(r.KeyHeads).i(vh).i(dk).i(dv).f(r.Scale).f(r.NormEps).i(tiled).i(chunks).i64(per)
		b.record(op{fn: b.k.chunked.drChunk, name: "dr_chunk",
			grid: [3]uint32{uint32((dv + 15) / 16), uint32(vh), 1}, block: [3]uint32{256, 1, 1}}).
			ptr(dptr(dst)).ptr(dptr(state)).ptr(scr).i(n).i(vh).i(dk).i(dv).i(chunks).i64(per)
		return
	}
	b.launch(b.k.deltaRule, "delta_rule", (vh*dv+3)/4, 128).
		ptr(dptr(dst)).ptr(dptr(qkv)).ptr(dptr(a)).ptr(dptr(bt)).ptr(dptr(state)).
		ptr(dptr(r.ALog)).i(int(r.ALog.DType)).ptr(dptr(r.DtBias)).i(int(r.DtBias.DType)).
		i(n).i(r.KeyHeads).i(vh).i(dk).i(dv).f(r.Scale).f(r.NormEps).i(tiled)
}
