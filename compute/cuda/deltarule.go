package cuda

import (
	"fmt"

	"lem/compute"
)

var _ compute.DeltaRuler = (*Backend)(nil)

// maxKeyDim is the largest key head the delta-rule kernel keeps in
// registers (DR_MAXK values per lane).
const maxKeyDim = 256

// DeltaRule implements compute.DeltaRuler with one warp per (value head,
// value column) that keeps its row of the state in registers and walks the
// rows in order: a decode step is one iteration, a prefill the recurrence
// over every row (not the chunked WY form; the state is read and written
// once per call).
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
	b.launch(b.k.deltaRule, "delta_rule", (vh*dv+3)/4, 128).
		ptr(dptr(dst)).ptr(dptr(qkv)).ptr(dptr(a)).ptr(dptr(bt)).ptr(dptr(state)).
		ptr(dptr(r.ALog)).i(int(r.ALog.DType)).ptr(dptr(r.DtBias)).i(int(r.DtBias.DType)).
		i(n).i(r.KeyHeads).i(vh).i(dk).i(dv).f(r.Scale).f(r.NormEps).i(tiled)
}
