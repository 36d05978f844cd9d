package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Convolver = (*Backend)(nil)

// dtypeOf returns the storage type code of an optional tensor (0 for nil).
func dtypeOf(t *compute.Tensor) int {
	if t == nil {
		return 0
	}
	return int(t.DType)
}

// CausalConv implements compute.Convolver: one kernel computes every
// output from x and the carried window, a second shifts the window. Both
// run on the device, so a captured decode step updates the state in place.
func (b *Backend) CausalConv(dst, x, w, bias, state *compute.Tensor, silu bool) {
	n, c, k := x.Rows(), x.Cols(), w.Cols()
	if w.Rows() != c || dst.Len() < n*c || state.Len() != (k-1)*c || (bias != nil && bias.Len() != c) {
		panic(fmt.Sprintf("cuda: CausalConv: x %v, w %v, state %v, dst %v do not fit", x.Shape, w.Shape, state.Shape, dst.Shape))
	}
	if n == 0 || c == 0 {
		return
	}
	s := 0
	if silu {
		s = 1
	}
	b.launch(b.k.convOut, "conv_out", blocks(n*c), 256).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(int(w.DType)).ptr(dptr(bias)).i(dtypeOf(bias)).
		ptr(dptr(state)).i(n).i(c).i(k).i(s)
	if k > 1 {
		b.launch(b.k.convState, "conv_state", blocks(c), 256).
			ptr(dptr(state)).ptr(dptr(x)).i(n).i(c).i(k)
	}
}
