package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

var _ compute.RowMover = (*Backend)(nil)

// rowBytes returns the bytes of one row of t as stored.
func rowBytes(t *compute.Tensor) int {
	rb, err := t.DType.RowBytes(t.Cols())
	if err != nil {
		panic(fmt.Sprintf("cuda: rows of %v: %v", t.DType, err))
	}
	return rb
}

// SaveRows implements compute.RowMover: a device-to-host copy in stream
// order, done by the time SavedRows returns.
func (b *Backend) SaveRows(dst []byte, t *compute.Tensor, lo, hi int) {
	rb := rowBytes(t)
	if len(dst) != (hi-lo)*rb || lo < 0 || hi > t.Rows() {
		panic(fmt.Sprintf("cuda: SaveRows of rows [%d, %d) of %v into %d bytes", lo, hi, t.Shape, len(dst)))
	}
	if len(dst) == 0 {
		return
	}
	if b.capturing {
		b.captureErr = fmt.Errorf("cuda: SaveRows during graph capture")
		return
	}
	p := dptr(t) + uintptr(lo*rb)
	b.enqueue(func(w *owner) error { return w.dtoh(dst, p) })
}

// SavedRows implements compute.RowMover.
func (b *Backend) SavedRows() error {
	if b.capturing {
		return fmt.Errorf("cuda: SavedRows during graph capture")
	}
	return b.submit(true)
}

// LoadRows implements compute.RowMover: a host-to-device copy in stream
// order (src is copied before it returns).
func (b *Backend) LoadRows(t *compute.Tensor, lo int, src []byte) {
	rb := rowBytes(t)
	if len(src)%rb != 0 || lo < 0 || lo*rb+len(src) > t.Rows()*rb {
		panic(fmt.Sprintf("cuda: LoadRows of %d bytes at row %d of %v", len(src), lo, t.Shape))
	}
	if len(src) == 0 {
		return
	}
	b.upload(dptr(t)+uintptr(lo*rb), src)
}
