package cpu

import (
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
)

func TestSaveLoadRows(t *testing.T) {
	b := New(1)
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.I32} {
		src := b.Alloc(dt, 5, 6)
		all, rb := rowBytes(src)
		for i := range all {
			all[i] = byte(i * 7)
		}
		saved := make([]byte, 2*rb)
		b.SaveRows(saved, src, 1, 3)
		if !slices.Equal(saved, all[rb:3*rb]) {
			t.Errorf("%s: SaveRows saved other bytes", dt)
		}
		dst := b.Alloc(dt, 5, 6)
		b.LoadRows(dst, 3, saved)
		got, _ := rowBytes(dst)
		want := make([]byte, len(got))
		copy(want[3*rb:], saved)
		if !slices.Equal(got, want) {
			t.Errorf("%s: LoadRows wrote %v, want %v", dt, got, want)
		}
	}
}
