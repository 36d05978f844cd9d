package cuda

import (
	"fmt"

	"lem/compute"
)

var _ compute.SSMScanner = (*Backend)(nil)

// maxStateSize is the largest SSM state per channel the scan kernel keeps
// in registers (SSM_MAXS values per lane).
const maxStateSize = 256

// SSMScan implements compute.SSMScanner with one warp per (head, channel)
// that keeps the channel's state in registers and walks the rows in order:
// a decode step is one iteration, a prefill the recurrence over every row
// (not the chunked form; the state is read and written once per call).
func (b *Backend) SSMScan(y, x, dt, bm, cm, state *compute.Tensor, p *compute.SSM) {
	hp, gn := p.Heads*p.HeadDim, p.Groups*p.StateSize
	n := x.Rows()
	if x.Cols() != hp || y.Cols() != hp || dt.Cols() != p.Heads || bm.Cols() != gn || cm.Cols() != gn ||
		state.Len() != hp*p.StateSize || p.Groups <= 0 || p.Heads%p.Groups != 0 {
		panic(fmt.Sprintf("cuda: SSMScan: shapes x %v y %v dt %v b %v c %v state %v do not fit %d heads × %d, %d groups × %d",
			x.Shape, y.Shape, dt.Shape, bm.Shape, cm.Shape, state.Shape, p.Heads, p.HeadDim, p.Groups, p.StateSize))
	}
	if p.StateSize > maxStateSize {
		panic(fmt.Sprintf("cuda: SSMScan: state size %d > %d", p.StateSize, maxStateSize))
	}
	if n == 0 || hp == 0 {
		return
	}
	b.launch(b.k.ssmScan, "ssm_scan", (hp+3)/4, 128).
		ptr(dptr(y)).ptr(dptr(x)).ptr(dptr(dt)).ptr(dptr(bm)).ptr(dptr(cm)).ptr(dptr(state)).
		ptr(dptr(p.A)).i(int(p.A.DType)).ptr(dptr(p.D)).i(int(p.D.DType)).ptr(dptr(p.DTBias)).i(int(p.DTBias.DType)).
		i(n).i(p.Heads).i(p.HeadDim).i(p.Groups).i(p.StateSize).f(p.DTMin).f(p.DTMax)
}
