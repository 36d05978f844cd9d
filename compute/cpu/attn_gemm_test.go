package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lem/compute"
)

// TestAttendGEMM checks attention of prompt chunks by matrix products
// against the per-query loop, over a fresh cache and one holding a previous
// chunk, with grouped heads, sliding windows (ring caches included), soft
// caps and sinks.
func TestAttendGEMM(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	defer func(m int) { attnGEMMMin = m }(attnGEMMMin)
	for _, c := range []struct {
		heads, kv, hd, window int
		softcap               float32
		sinks, ring           bool
	}{
		{4, 4, 16, 0, 0, false, false},
		{6, 2, 32, 0, 0, false, false},
		{6, 2, 32, 17, 0, false, false},
		{6, 3, 8, 9, 0, false, true},
		{4, 2, 16, 0, 30, true, false},
		{8, 1, 64, 0, 0, false, false},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			a := &compute.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd,
				Scale: float32(1 / math.Sqrt(float64(c.hd))), SoftCap: c.softcap, Window: c.window}
			b := New(3)
			if c.sinks {
				s := b.Alloc(compute.F32, c.heads)
				b.Upload(s, randVec(rng, c.heads))
				a.Sinks = s
			}
			capacity := 100
			if c.ring {
				capacity = c.window
			}
			caches := [2]*compute.KVCache{b.NewKVCache(capacity, c.kv*c.hd, c.ring), b.NewKVCache(capacity, c.kv*c.hd, c.ring)}
			start := 0
			for _, n := range []int{40, 23, 17} {
				q, k, v := b.Alloc(compute.F32, n, c.heads*c.hd), b.Alloc(compute.F32, n, c.kv*c.hd), b.Alloc(compute.F32, n, c.kv*c.hd)
				b.Upload(q, randVec(rng, n*c.heads*c.hd))
				b.Upload(k, randVec(rng, n*c.kv*c.hd))
				b.Upload(v, randVec(rng, n*c.kv*c.hd))
				pos := b.Alloc(compute.I32, n)
				ps := make([]int32, n)
				for i := range ps {
					ps[i] = int32(start + i)
				}
				b.UploadInts(pos, ps)
				var outs [2][]float32
				for path, min := range []int{1 << 30, 1} {
					attnGEMMMin = min
					dst := b.Alloc(compute.F32, n, c.heads*c.hd)
					b.Attend(dst, q, k, v, caches[path], pos, a)
					outs[path] = dst.Buf.([]float32)
				}
				for i, want := range outs[0] {
					if d := math.Abs(float64(outs[1][i] - want)); d > 1e-5*(1+math.Abs(float64(want))) {
						t.Fatalf("start %d, %d queries: out[%d] = %g, per-query loop %g", start, n, i, outs[1][i], want)
					}
				}
				start += n
			}
		})
	}
}

// BenchmarkAttendDecode measures the attention of one decode step at the
// geometries of llama-3.2-1b (32 query heads over 8 KV heads of 64) and
// phi-3-mini (32 heads of 96, one query head per kv head) after ctx cached
// positions, two threads, with the kernels of each level, a head at a time
// and grouped.
func BenchmarkAttendDecode(b *testing.B) {
	defer func(g bool) { attnGrouped = g }(attnGrouped)
	for _, l := range levels() {
		for _, grouped := range []bool{false, true} {
			attnGrouped = grouped
			name := levelNames[l]
			if grouped {
				name += "/grouped"
			}
			atLevel(b, l, func() { benchAttendDecode(b, name) })
		}
	}
}

func benchAttendDecode(b *testing.B, name string) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, geo := range []struct{ heads, kv, hd int }{{32, 8, 64}, {32, 32, 96}} {
		for _, ctx := range []int{128, 1024, 4096} {
			benchAttendDecodeAt(b, fmt.Sprintf("%s/%dx%dx%d/ctx=%d", name, geo.heads, geo.kv, geo.hd, ctx), rng, geo.heads, geo.kv, geo.hd, ctx)
		}
	}
}

func benchAttendDecodeAt(b *testing.B, name string, rng *rand.Rand, heads, kv, hd, ctx int) {
	b.Run(name, func(b *testing.B) {
		be := New(2)
		a := &compute.Attention{Heads: heads, KVHeads: kv, HeadDim: hd, Scale: 0.125}
		cache := be.NewKVCache(ctx+1, kv*hd, false)
		be.Upload(cache.K, randVec(rng, (ctx+1)*kv*hd))
		be.Upload(cache.V, randVec(rng, (ctx+1)*kv*hd))
		q, k, v := be.Alloc(compute.F32, 1, heads*hd), be.Alloc(compute.F32, 1, kv*hd), be.Alloc(compute.F32, 1, kv*hd)
		be.Upload(q, randVec(rng, heads*hd))
		be.Upload(k, randVec(rng, kv*hd))
		be.Upload(v, randVec(rng, kv*hd))
		pos := be.Alloc(compute.I32, 1)
		be.UploadInts(pos, []int32{int32(ctx)})
		dst := be.Alloc(compute.F32, 1, heads*hd)
		for b.Loop() {
			be.Attend(dst, q, k, v, cache, pos, a)
		}
	})
}

// TestAttendGrouped checks that attention computed a kv head's query heads
// at a time (groupChunk) is bitwise what the per-head loop computes: decode
// steps and short chunks, over grouped heads of several sizes, windows
// (ring caches included), soft caps and sinks.
func TestAttendGrouped(t *testing.T) {
	for _, l := range levels()[1:] {
		t.Run(levelNames[l], func(t *testing.T) { atLevel(t, l, func() { testAttendGrouped(t) }) })
	}
}

func testAttendGrouped(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	defer func(g bool) { attnGrouped = g }(attnGrouped)
	for _, c := range []struct {
		heads, kv, hd, window int
		softcap               float32
		sinks, ring           bool
	}{
		{32, 8, 64, 0, 0, false, false},
		{14, 2, 64, 0, 0, false, false},
		{6, 2, 128, 13, 0, false, true},
		{16, 2, 80, 0, 20, true, false},
		{4, 4, 64, 0, 0, false, false},
		{9, 1, 48, 0, 0, false, false},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			a := &compute.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd,
				Scale: float32(1 / math.Sqrt(float64(c.hd))), SoftCap: c.softcap, Window: c.window}
			b := New(2)
			if c.sinks {
				s := b.Alloc(compute.F32, c.heads)
				b.Upload(s, randVec(rng, c.heads))
				a.Sinks = s
			}
			capacity := 64
			if c.ring {
				capacity = c.window
			}
			caches := [2]*compute.KVCache{b.NewKVCache(capacity, c.kv*c.hd, c.ring), b.NewKVCache(capacity, c.kv*c.hd, c.ring)}
			start := 0
			for _, n := range []int{5, 1, 1, 3, 1, 9, 1} {
				q, k, v := b.Alloc(compute.F32, n, c.heads*c.hd), b.Alloc(compute.F32, n, c.kv*c.hd), b.Alloc(compute.F32, n, c.kv*c.hd)
				b.Upload(q, randVec(rng, n*c.heads*c.hd))
				b.Upload(k, randVec(rng, n*c.kv*c.hd))
				b.Upload(v, randVec(rng, n*c.kv*c.hd))
				pos := b.Alloc(compute.I32, n)
				ps := make([]int32, n)
				for i := range ps {
					ps[i] = int32(start + i)
				}
				b.UploadInts(pos, ps)
				var outs [2][]float32
				for path, grouped := range []bool{false, true} {
					attnGrouped = grouped
					dst := b.Alloc(compute.F32, n, c.heads*c.hd)
					b.Attend(dst, q, k, v, caches[path], pos, a)
					outs[path] = dst.Buf.([]float32)
				}
				for i, want := range outs[0] {
					if math.Float32bits(outs[1][i]) != math.Float32bits(want) {
						t.Fatalf("start %d, %d queries: out[%d] = %g grouped, %g per head", start, n, i, outs[1][i], want)
					}
				}
				start += n
			}
		})
	}
}
