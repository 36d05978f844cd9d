package cuda

import "lem/compute"

// Batched decode products. A step of a batched server multiplies the rows
// of every running sequence (a few to a few dozen) by each weight.
//
// Float weights: up to gemvRows rows the gemv kernels read each weight
// row once for all of them; more rows go to the tensor cores (the f32
// activations rounded to the weight's type), which at 8-64 rows read the
// weight at 57-67% of the H200's bandwidth. gemv-style kernels for 8 rows
// that read the activations through L1 beside the weights measured 4×
// slower than the tensor cores (BenchmarkMatMulBatch) and were dropped.
//
// Quantized weights: the activations are quantized to int8 once per call
// (quantize_q8). Up to qgemvRows rows the per-row-count kernels
// (qgemv_T_n) take them; up to qgemvBatch rows the batched kernels
// (qgemv_T_8) take them in groups of up to 8, each block staging its
// group's activations in shared memory and each weight row read once per
// group. Beyond, the weight is widened to f16 in chunks for the tensor
// cores, which costs about three weight reads in f16 bytes.

// gemvRows is the most rows of a float product on the gemv kernels.
const gemvRows = 4

// qgemvRows is the most rows of a quantized product on the per-row-count
// kernels.
const qgemvRows = 4

// qgemvBatch is the most rows of a quantized product on the batched
// kernels rather than the widened weight on the tensor cores.
const qgemvBatch = 16

// qgemvWarps is the block size of the batched kernels in warps.
const qgemvWarps = 8

// openBatch lets the batched kernels have the shared memory of 8 rows of
// the longest products (owner thread); where the driver refuses, they keep
// the 48 KiB any block may have.
func (b *Backend) openBatch() error {
	b.quant.stage = 48 << 10
	want := b.info.SharedPerBlock
	if want <= b.quant.stage {
		return nil
	}
	return b.do(func(w *owner) error {
		for _, fn := range b.k.q.gemv8 {
			if r := call(w.d.cuFuncSetAttribute, fn, funcAttrMaxDynamicShared, uintptr(want)); r != 0 {
				return nil
			}
		}
		b.quant.stage = want
		return nil
	})
}

// qbatchRows returns how many activation rows of length k a block of the
// batched kernels stages (at most 8; 0 when not even one fits).
func (b *Backend) qbatchRows(k int) int {
	return min(8, b.quant.stage/qstageBytes(1, k))
}

// qstageBytes is the shared memory of rows quantized activation rows of
// length k: the codes and one QMeta per 32.
func qstageBytes(rows, k int) int { return rows * (k + k/32*8) }

// qgemv8 launches the product of n rows of quantized activations at qx
// with a quantized weight on the batched kernels, per rows a group.
func (b *Backend) qgemv8(dst *compute.Tensor, qx uintptr, w *compute.Tensor, n, per int) {
	m, k := w.Rows(), w.Cols()
	q := buf(w).q
	groups := (n + per - 1) / per
	shared := qstageBytes(min(per, n), k)
	// Resident blocks: as many as the SM's shared memory and threads hold,
	// no more than the weight rows need.
	perSM := max(1, min(2048/(32*qgemvWarps), b.info.SharedPerSM/(shared+1024)))
	grid := min(b.info.SMs*perSM, (m+qgemvWarps-1)/qgemvWarps)
	o := b.record(op{fn: b.k.q.gemv8[q.qt], name: "qgemv8_" + qtNames[q.qt],
		grid: [3]uint32{uint32(grid), uint32(groups), 1}, block: [3]uint32{32 * qgemvWarps, 1, 1}, shared: uint32(shared)})
	o.ptr(dptr(dst)).ptr(qx).ptr(q.codes).ptr(q.sc).ptr(q.d).i(m).i(k).i(q.group).i(q.sdt).i(n).i(per)
}
