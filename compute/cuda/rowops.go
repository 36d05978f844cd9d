package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.RowOps = (*Backend)(nil)

// AxpyRows implements compute.RowOps.
func (b *Backend) AxpyRows(dst, x, s *compute.Tensor, col int) {
	rows, c, k := x.Rows(), x.Cols(), s.Cols()
	if s.Rows() < rows || col < 0 || col >= k || dst.Len() < rows*c {
		panic(fmt.Sprintf("cuda: AxpyRows: dst %v, x %v, s %v, column %d", dst.Shape, x.Shape, s.Shape, col))
	}
	if rows*c == 0 {
		return
	}
	b.launch(b.k.axpyRows, "axpy_rows", blocks(rows*c), 256).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(s)).i64(rows).i(c).i(k).i(col)
}

// MatchRMS implements compute.RowOps with one block per row.
func (b *Backend) MatchRMS(dst, x, ref *compute.Tensor, floor float32) {
	rows, c, rc := x.Rows(), x.Cols(), ref.Cols()
	if ref.Rows() < rows || dst.Len() < rows*c {
		panic(fmt.Sprintf("cuda: MatchRMS: dst %v, x %v, ref %v", dst.Shape, x.Shape, ref.Shape))
	}
	if rows == 0 || c == 0 {
		return
	}
	b.launch(b.k.matchRMS, "match_rms", rows, threads(max(c, rc), 256)).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(ref)).i(c).i(rc).f(floor)
}

// GaussianTopK implements compute.RowOps with one block per row.
func (b *Backend) GaussianTopK(dst, x *compute.Tensor, k float32) {
	rows, c := x.Rows(), x.Cols()
	if dst.Len() < rows*c {
		panic(fmt.Sprintf("cuda: GaussianTopK: dst %v, x %v", dst.Shape, x.Shape))
	}
	if rows == 0 || c == 0 {
		return
	}
	b.launch(b.k.gaussianTopK, "gaussian_topk", rows, threads(c, 256)).
		ptr(dptr(dst)).ptr(dptr(x)).i(c).f(k)
}
