package cpu

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestSetInterrupt checks that the expensive operations do nothing while
// the interrupt flag is set, leaving their outputs and the KV cache as
// they were, and compute again once it is cleared or removed.
func TestSetInterrupt(t *testing.T) {
	b := New(2)
	const n, k, m = 4, 64, 32
	fill := func(t *compute.Tensor, seed int) *compute.Tensor {
		for i := range f32(t) {
			f32(t)[i] = float32((i*seed)%17-8) / 8
		}
		return t
	}
	x := fill(b.Alloc(compute.F32, n, k), 3)
	w := fill(b.Alloc(compute.F32, m, k), 5)
	pos := b.Alloc(compute.I32, n)
	b.UploadInts(pos, []int32{0, 1, 2, 3})
	cache := b.NewKVCache(8, k, false)
	a := &compute.Attention{Heads: 2, KVHeads: 1, HeadDim: 32, Scale: 0.2}
	kv := fill(b.Alloc(compute.F32, n, 32), 7)
	ops := []struct {
		name string
		run  func(dst *compute.Tensor)
		cols int
	}{
		{"MatMul", func(dst *compute.Tensor) { b.MatMul(dst, x, w) }, m},
		{"GLU", func(dst *compute.Tensor) { b.GLU(dst, x, x, compute.SiLU) }, k},
		{"Attend", func(dst *compute.Tensor) { b.Attend(dst, x, kv, kv, cache, pos, a) }, k},
	}
	stop := new(atomic.Bool)
	b.SetInterrupt(stop)
	for _, set := range []bool{true, false} {
		stop.Store(set)
		for _, op := range ops {
			dst := b.Alloc(compute.F32, n, op.cols)
			for i := range f32(dst) {
				f32(dst)[i] = 42
			}
			keys := slices.Clone(f32(cache.K))
			op.run(dst)
			untouched := !slices.ContainsFunc(f32(dst), func(v float32) bool { return v != 42 })
			if untouched != set {
				t.Errorf("%s with the flag %v: output untouched %v", op.name, set, untouched)
			}
			if op.name == "Attend" && slices.Equal(keys, f32(cache.K)) != set {
				t.Errorf("Attend with the flag %v: cache unchanged %v", set, !set)
			}
		}
	}
	stop.Store(true)
	b.SetInterrupt(nil)
	dst := b.Alloc(compute.F32, n, m)
	b.MatMul(dst, x, w)
	if !slices.ContainsFunc(f32(dst), func(v float32) bool { return v != 0 }) {
		t.Error("MatMul did nothing after SetInterrupt(nil)")
	}
}
