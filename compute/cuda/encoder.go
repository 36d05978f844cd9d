package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Bidirectional = (*Backend)(nil)

// encoderKernels are the kernels of the bidirectional attention of encoder
// models: attend_all (kernels/attention.cu) by elements per lane.
type encoderKernels struct {
	attendAll [4]uintptr // 2, 4, 8, 16 elements per lane
}

func (k *encoderKernels) add(t map[string]*uintptr) {
	for i, e := range []string{"2", "4", "8", "16"} {
		t["attend_all"+e] = &k.attendAll[i]
	}
}

// AttendAll implements compute.Bidirectional. Inputs of at least
// flashMinRows rows (any length in LEM_CUDA_ATTENTION=flash mode) whose
// head dim flash_attend has run on the tensor cores with bf16 operands, as
// prefill does; the others, and every input in exact mode, on the f32
// kernel attend_all.
func (b *Backend) AttendAll(dst, q, k, v *compute.Tensor, a *compute.Attention) {
	n := q.Rows()
	if n == 0 || b.attendAllFlash(dst, q, k, v, a) {
		return
	}
	var fn uintptr
	switch hd := a.HeadDim; {
	case hd <= 64:
		fn = b.k.enc.attendAll[0]
	case hd <= 128:
		fn = b.k.enc.attendAll[1]
	case hd <= 256:
		fn = b.k.enc.attendAll[2]
	case hd <= 512:
		fn = b.k.enc.attendAll[3]
	default:
		panic(fmt.Sprintf("attend all: head dim %d > 512 not supported on CUDA", hd))
	}
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	o := b.record(op{fn: fn, name: "attend_all", grid: [3]uint32{uint32(n * a.Heads), 1, 1}, block: [3]uint32{128, 1, 1}})
	o.ptr(dptr(dst)).ptr(dptr(q)).ptr(dptr(k)).ptr(dptr(v)).i(n).
		i(a.Heads).i(a.KVHeads).i(a.HeadDim).
		f(a.Scale).f(a.SoftCap).i(a.Window).ptr(dptr(a.Sinks)).i(sdt)
}

// attendAllFlash runs AttendAll with flash_attend (its all flag set) when
// the call suits it and reports whether it did.
func (b *Backend) attendAllFlash(dst, q, k, v *compute.Tensor, a *compute.Attention) bool {
	n := q.Rows()
	cfg, fn, ok := b.flashKernel(a.HeadDim)
	if !ok {
		return false
	}
	switch {
	case b.flash.mode == attnExact,
		b.flash.mode == attnAuto && n < flashMinRows,
		a.KVHeads <= 0 || a.Heads%a.KVHeads != 0,
		dptr(q)%16 != 0 || dptr(dst)%8 != 0:
		return false
	}
	kc := a.KVHeads * a.HeadDim
	half := n * kc * 2
	kh := b.scratch(&b.flash.kv, 2*half)
	vh := kh + uintptr(half)
	// Without positions kv_half converts rows 0 … n-1 of k and v.
	b.launch(b.k.flash.kvHalf, "kv_half", n, threads(kc, 256)).
		ptr(kh).ptr(vh).ptr(dptr(k)).ptr(dptr(v)).ptr(0).ptr(0).ptr(0).
		i(n).i(kc).i(0).i(0).i(0)
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	o := b.record(op{fn: fn, name: "flash_attend",
		grid: [3]uint32{uint32((n + cfg.bq - 1) / cfg.bq), uint32(a.Heads), 1}, block: [3]uint32{128, 1, 1},
		shared: uint32(cfg.shared())})
	o.ptr(dptr(dst)).ptr(dptr(q)).ptr(kh).ptr(vh).ptr(0).i(n).i(n).i(a.Heads).i(a.KVHeads).
		f(a.Scale).f(a.SoftCap).i(a.Window).ptr(dptr(a.Sinks)).i(sdt).i(1)
	return true
}
