package cpu

import (
	"fmt"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

var _ compute.RowMover = (*Backend)(nil)

// rowBytes returns the bytes of t as stored and the bytes of one row.
func rowBytes(t *compute.Tensor) ([]byte, int) {
	var all []byte
	switch buf := t.Buf.(type) {
	case []float32:
		all = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), 4*len(buf))
	case []int32:
		all = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), 4*len(buf))
	case []byte:
		all = buf
	default:
		panic(fmt.Sprintf("cpu: rows of a %T tensor", t.Buf))
	}
	return all, len(all) / t.Rows()
}

// SaveRows implements compute.RowMover.
func (b *Backend) SaveRows(dst []byte, t *compute.Tensor, lo, hi int) {
	all, rb := rowBytes(t)
	if len(dst) != (hi-lo)*rb {
		panic(fmt.Sprintf("cpu: SaveRows of rows [%d, %d) of %v into %d bytes", lo, hi, t.Shape, len(dst)))
	}
	copy(dst, all[lo*rb:hi*rb])
}

// SavedRows implements compute.RowMover: SaveRows copies before it
// returns.
func (b *Backend) SavedRows() error { return nil }

// LoadRows implements compute.RowMover.
func (b *Backend) LoadRows(t *compute.Tensor, lo int, src []byte) {
	all, rb := rowBytes(t)
	if len(src)%rb != 0 || lo*rb+len(src) > len(all) {
		panic(fmt.Sprintf("cpu: LoadRows of %d bytes at row %d of %v", len(src), lo, t.Shape))
	}
	copy(all[lo*rb:], src)
}
