package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.SSMScanner = (*Backend)(nil)

// maxStateSize is the largest SSM state per channel the scan kernels
// handle (SSM_MAXS values per lane in the recurrent step, SSMAXN in the
// chunked form).
const maxStateSize = 256

// SSMScan implements compute.SSMScanner. A single row (decode) takes the
// recurrent step: one warp per (head, channel) keeps the channel's state in
// registers. Longer inputs take the chunked (SSD) form: ssm_cb computes
// C_t·B_s within every (chunk, group) at once, then ssm_carry carries the
// state through the chunks, one block per (head, 16 channels) holding
// their state in shared memory.
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
	if n > 1 && !b.prefill.sequential {
		cb := b.ssmCB(bm, cm, p)
		b.ssmCarry(y, x, dt, bm, cm, state, cb, p)
		return
	}
	b.launch(b.k.ssmScan, "ssm_scan", (hp+3)/4, 128).
		ptr(dptr(y)).ptr(dptr(x)).ptr(dptr(dt)).ptr(dptr(bm)).ptr(dptr(cm)).ptr(dptr(state)).
		ptr(dptr(p.A)).i(int(p.A.DType)).ptr(dptr(p.D)).i(int(p.D.DType)).ptr(dptr(p.DTBias)).i(int(p.DTBias.DType)).
		i(n).i(p.Heads).i(p.HeadDim).i(p.Groups).i(p.StateSize).f(p.DTMin).f(p.DTMax)
}

// ssmCB records ssm_cb over the rows of bm and cm and returns its output.
func (b *Backend) ssmCB(bm, cm *compute.Tensor, p *compute.SSM) uintptr {
	n := bm.Rows()
	chunks := (n + ssmChunk - 1) / ssmChunk
	cb := b.scratch(&b.prefill.cb, 4*p.Groups*chunks*ssmChunk*ssmChunk)
	b.record(op{fn: b.k.chunked.ssmCB, name: "ssm_cb",
		grid: [3]uint32{uint32(chunks), uint32(p.Groups), 1}, block: [3]uint32{256, 1, 1}}).
		ptr(cb).ptr(dptr(bm)).ptr(dptr(cm)).i(n).i(p.Groups).i(p.StateSize).i(chunks)
	return cb
}

// ssmCarry records the pass of the state through the chunks, with cb from
// ssmCB.
func (b *Backend) ssmCarry(y, x, dt, bm, cm, state *compute.Tensor, cb uintptr, p *compute.SSM) {
	o := op{fn: b.k.chunked.ssmCarry, name: "ssm_carry",
		grid: [3]uint32{uint32((p.HeadDim + 15) / 16), uint32(p.Heads), 1}, block: [3]uint32{256, 1, 1},
		shared: uint32(ssmCarryShared(p.StateSize))}
	if !b.prefill.staged {
		o.fn, o.name, o.shared = b.k.chunked.ssmChunk, "ssm_chunk", 0
	} else if !b.allowShared(o.fn, ssmCarryShared(maxStateSize)) {
		return
	}
	b.record(o).ptr(dptr(y)).ptr(dptr(x)).ptr(dptr(dt)).ptr(dptr(bm)).ptr(dptr(cm)).ptr(dptr(state)).ptr(cb).
		ptr(dptr(p.A)).i(int(p.A.DType)).ptr(dptr(p.D)).i(int(p.D.DType)).ptr(dptr(p.DTBias)).i(int(p.DTBias.DType)).
		i(x.Rows()).i(p.Heads).i(p.HeadDim).i(p.Groups).i(p.StateSize).f(p.DTMin).f(p.DTMax)
}

// ssmCarryShared returns the dynamic shared memory of ssm_carry for state
// size ns: 16 channels of state, then B and C of a chunk, rows of ns4+4
// floats.
func ssmCarryShared(ns int) int { return 4 * (16 + 2*ssmChunk) * ((ns+3)&^3 + 4) }
