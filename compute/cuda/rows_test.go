package cuda

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestRowMover copies rows of f32 and f16 pools to the host and back into
// other rows: the rows come back as stored, and no other row changes.
func TestRowMover(t *testing.T) {
	h := newHarness(t)
	for _, dt := range poolTypes {
		p := newPool(h.g, dt, 8, 4, 6)
		rb := rowBytes(p.K)
		all := make([]byte, p.K.Rows()*rb)
		for i := range all {
			all[i] = byte(h.r.IntN(256))
		}
		h.g.upload(dptr(p.K), all)
		saved := make([]byte, 4*rb)
		h.g.SaveRows(saved, p.K, 4, 8)
		if err := h.g.SavedRows(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(saved, all[4*rb:8*rb]) {
			t.Fatalf("%v: SaveRows gave other bytes than the rows hold", dt)
		}
		h.g.LoadRows(p.K, 20, saved)
		copy(all[20*rb:], saved)
		got := make([]float32, len(all)/4)
		h.g.Read(got, p.K)
		if err := h.g.Err(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), len(all)), all) {
			t.Errorf("%v: after LoadRows the pool differs from the rows copied", dt)
		}
	}
}
