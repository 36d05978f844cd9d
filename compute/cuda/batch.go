package cuda

import "github.com/lem-engine/lem/compute"

// Batched decode products. A step of a batched server multiplies the rows
// of every running sequence (a few to a few dozen) by each weight.
// Measured on the H200 on llama-3.1-8b shapes (BenchmarkMatMulBatch):
//
// Float weights: f16 and bf16 products of 2 rows and more run on the
// tensor cores (the f32 activations rounded to the weight's type): 1.19-
// 1.29× the time of one row at 2-8 rows, 1.34-1.45× at 64, where the gemv
// kernels, which read the activations through L1 beside the weights, took
// 1.6× at 2 rows and 2.5-3.6× at 4 (and 5× at 8 in an 8-row form, which
// was dropped). f32 weights, which the tensor cores do not take, keep the
// gemv kernels up to 4 rows.
//
// Quantized weights: the activations are quantized to int8 once per call
// (quantize_q8). Up to 4 rows the per-row-count kernels (qgemv_T_n) take
// them; up to qgemvBatch rows the batched kernels (qgemv_T_8) read each
// weight row once for 8 rows: Q4_K at 8 rows 3.6-4.5× the time of one
// row, against 6.5-8× for widening the weight to f16 for the tensor cores,
// which more rows take (the same time from 16 rows to 64). A form that
// staged the 8 rows in shared memory in resident blocks measured slower
// (4.0-5.5×) and was dropped; the batched kernels are bound by their
// registers and issue, not by the activations' loads.

// gemvRows is the most rows of an f16 or bf16 product on the gemv
// kernels rather than the tensor cores.
const gemvRows = 1

// qgemvRows is the most rows of a quantized product on the per-row-count
// kernels.
const qgemvRows = 4

// qgemvBatch is the most rows of a quantized product on the batched
// kernels rather than the widened weight on the tensor cores.
const qgemvBatch = 8

// qgemv8 launches the product of n rows of quantized activations at qx
// with a quantized weight on the batched kernels.
func (b *Backend) qgemv8(dst *compute.Tensor, qx uintptr, w *compute.Tensor, n int) {
	m, k := w.Rows(), w.Cols()
	q := buf(w).q
	groups := (n + 7) / 8
	b.launch(b.k.q.gemv8[q.qt], "qgemv8_"+qtNames[q.qt], (m+3)/4*groups, 128).
		ptr(dptr(dst)).ptr(qx).ptr(q.codes).ptr(q.sc).ptr(q.d).i(m).i(k).i(q.group).i(q.sdt).i(n)
}
