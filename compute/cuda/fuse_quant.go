package cuda

import "github.com/lem-engine/lem/compute"

// Fusion of one-row products with block-quantized weights: the fgemv
// launches of fuse.go (norm folded in, stacked matrices, GLU pairs,
// addends) run on kernels/quant_fgemv.cu, which quantizes the input row
// into shared memory per block as quantize_q8 does and computes every
// product as qgemv does, each lane summing its units in qgemv's order.
// Matrices stack only with others of the same dtype.

// fqTypes are the kernel types with fused products: those whose units
// need no group size or scale type (not the MLX packs and Q4_1).
var fqTypes = []int{qtQ8_0, qtQ4_0, qtQ5_0, qtQ4_K, qtQ5_K, qtQ6_K}

// fqType returns the kernel type of a dtype with fused products.
func fqType(dt compute.DType) (int, bool) {
	switch dt {
	case compute.Q8_0:
		return qtQ8_0, true
	case compute.Q4_0:
		return qtQ4_0, true
	case compute.Q5_0:
		return qtQ5_0, true
	case compute.Q4_K:
		return qtQ4_K, true
	case compute.Q5_K:
		return qtQ5_K, true
	case compute.Q6_K:
		return qtQ6_K, true
	}
	return 0, false
}

// maxQuantK bounds the input row of a fused quantized product, whose
// quantized copy (fqShared) each block keeps in shared memory, within the
// 48 KiB a launch gets without opting in.
const maxQuantK = 32768

// fqShared is the shared memory of a fused quantized product over rows of
// k: k codes and 8 bytes of metadata per 32.
func fqShared(k int) int { return k + k/32*8 }

// fqFits reports whether w, a quantized weight, can be the matrix of a
// fused product.
func fqFits(w *compute.Tensor) bool {
	if _, ok := fqType(w.DType); !ok || w.Cols() > maxQuantK || w.Cols()%256 != 0 && w.DType.BlockSize() > 32 {
		return false
	}
	q := buf(w).q
	return q != nil && q.codes == dptr(w)
}

// setMat makes w (writing dst) matrix j of the launch.
func (a *fgemvArgs) setMat(j int, w, dst *compute.Tensor) {
	a.w[j], a.d[j], a.m[j] = uint64(dptr(w)), uint64(dptr(dst)), int32(w.Rows())
	a.sc[j], a.dd[j] = 0, 0
	if q := buf(w).q; q != nil {
		a.sc[j], a.dd[j] = uint64(q.sc), uint64(q.d)
	}
}

// fqUnroll is FQU in kernels/quant_fgemv.cu: the units a stream of a
// fused quantized product loads per step.
func fqUnroll(qt int) int {
	switch qt {
	case qtQ4_0:
		return 4
	case qtQ6_K, qtQ5_K:
		return 1
	}
	return 2
}

// fqAnyOneRow lets fqTwoStreams allow one-row units for rows of any length
// (benchmarks).
var fqAnyOneRow = false

// fqTwoStreams reports whether rows of k values of dt are long enough for
// one-row units (fgModeOne) to keep two streams of loads going: each lane
// reads at least two steps of fqUnroll units of a row. Shorter rows are
// computed two per warp, which keeps twice the loads in flight per unit.
func fqTwoStreams(dt compute.DType, k int) bool {
	if fqAnyOneRow {
		return true
	}
	qt, _ := fqType(dt)
	el := 32
	if dt.BlockSize() > 32 {
		el = 64
	}
	return k/el >= 64*fqUnroll(qt)
}
