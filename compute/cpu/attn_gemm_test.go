package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// attnCase is an attention geometry of the Attend tests.
type attnCase struct {
	heads, kv, hd, window int
	softcap               float32
	sinks, ring           bool
}

// compareAttendPaths runs Attend on chunks of the given sizes (positions
// counting on from 0) twice per chunk, each time with path(0) or path(1)
// called first and its own cache of capacity positions (window for a
// ring), and fails when same(got, want) is false for an output of the
// second run against the first.
func compareAttendPaths(t *testing.T, rng *rand.Rand, c attnCase, capacity int, sizes []int, path func(int), same func(got, want float32) bool) {
	t.Helper()
	a := &compute.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd,
		Scale: float32(1 / math.Sqrt(float64(c.hd))), SoftCap: c.softcap, Window: c.window}
	b := New(3)
	if c.sinks {
		s := b.Alloc(compute.F32, c.heads)
		b.Upload(s, randVec(rng, c.heads))
		a.Sinks = s
	}
	if c.ring {
		capacity = c.window
	}
	caches := [2]*compute.KVCache{b.NewKVCache(capacity, c.kv*c.hd, c.ring), b.NewKVCache(capacity, c.kv*c.hd, c.ring)}
	start := 0
	for _, n := range sizes {
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
		for p := range outs {
			path(p)
			dst := b.Alloc(compute.F32, n, c.heads*c.hd)
			b.Attend(dst, q, k, v, caches[p], pos, a)
			outs[p] = dst.Buf.([]float32)
		}
		for i, want := range outs[0] {
			if !same(outs[1][i], want) {
				t.Fatalf("start %d, %d queries: out[%d] = %g, against %g", start, n, i, outs[1][i], want)
			}
		}
		start += n
	}
}

// TestAttendGEMM checks attention of prompt chunks by matrix products
// against the per-query loop, over a fresh cache and one holding a previous
// chunk, with grouped heads, sliding windows (ring caches included), soft
// caps and sinks.
func TestAttendGEMM(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	defer func(m int) { attnGEMMMin = m }(attnGEMMMin)
	for _, c := range []attnCase{
		{4, 4, 16, 0, 0, false, false},
		{6, 2, 32, 0, 0, false, false},
		{6, 2, 32, 17, 0, false, false},
		{6, 3, 8, 9, 0, false, true},
		{4, 2, 16, 0, 30, true, false},
		{8, 1, 64, 0, 0, false, false},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			compareAttendPaths(t, rng, c, 100, []int{40, 23, 17},
				func(p int) { attnGEMMMin = []int{1 << 30, 1}[p] },
				func(got, want float32) bool {
					return math.Abs(float64(got-want)) <= 1e-5*(1+math.Abs(float64(want)))
				})
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
	for _, c := range []attnCase{
		{32, 8, 64, 0, 0, false, false},
		{14, 2, 64, 0, 0, false, false},
		{6, 2, 128, 13, 0, false, true},
		{16, 2, 80, 0, 20, true, false},
		{4, 4, 64, 0, 0, false, false},
		{9, 1, 48, 0, 0, false, false},
	} {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			compareAttendPaths(t, rng, c, 64, []int{5, 1, 1, 3, 1, 9, 1},
				func(p int) { attnGrouped = p == 1 },
				func(got, want float32) bool { return math.Float32bits(got) == math.Float32bits(want) })
		})
	}
}
