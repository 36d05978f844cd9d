package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
)

// pinAttention sets the attention mode and returns a function restoring it.
func (b *Backend) pinAttention(m attnMode) func() {
	old := b.flash.mode
	b.flash.mode = m
	return func() { b.flash.mode = old }
}

// TestFlashAttend compares flash_attend (bf16 operands) with the CPU
// backend over every attention option: GQA, windows over plain and ring
// caches, soft caps, sinks, head dims 64/128/256, chunks that are not
// multiples of the 64-query tile, and chunks after cached positions.
func TestFlashAttend(t *testing.T) {
	h := newHarness(t)
	defer h.g.pinAttention(attnFlash)()
	for _, tc := range []struct {
		name               string
		heads, kvHeads, hd int
		window, capacity   int
		ring               bool
		softCap            float32
		sinks              bool
		chunks             []int
	}{
		{"mha 64", 4, 4, 64, 0, 300, false, 0, false, []int{77, 1, 130}},
		{"gqa 128", 8, 2, 128, 0, 400, false, 0, false, []int{200, 65, 3}},
		{"one row", 2, 1, 128, 0, 40, false, 0, false, []int{1, 1, 5}},
		{"window 128", 4, 2, 128, 50, 600, false, 0, false, []int{150, 1, 100}},
		{"ring 64", 4, 2, 64, 48, 48, true, 0, false, []int{40, 1, 100, 64, 1}},
		{"softcap sinks 256", 4, 2, 256, 0, 300, false, 30, true, []int{130, 1, 70}},
		{"window softcap sinks ring 128", 8, 1, 128, 70, 70, true, 20, true, []int{33, 129, 1, 64}},
	} {
		variants := []int{0}
		if tc.hd == 128 {
			for i := range flashVariants {
				variants = append(variants, i+1)
			}
		}
		for _, variant := range variants {
			t.Run(fmt.Sprintf("%s/variant%d", tc.name, variant), func(t *testing.T) {
				h.t = t
				h.g.flash.variant = variant
				defer func() { h.g.flash.variant = 0 }()
				a := &compute.Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd,
					Scale: float32(1 / math.Sqrt(float64(tc.hd))), SoftCap: tc.softCap, Window: tc.window}
				var sinks pair
				if tc.sinks {
					sinks = h.vec(compute.F32, 2, tc.heads)
				}
				cc := h.c.NewKVCache(tc.capacity, tc.kvHeads*tc.hd, tc.ring)
				gc := h.g.NewKVCache(tc.capacity, tc.kvHeads*tc.hd, tc.ring)
				start := 0
				for step, n := range tc.chunks {
					q := h.act(2, n, tc.heads*tc.hd)
					k := h.act(2, n, tc.kvHeads*tc.hd)
					v := h.act(1, n, tc.kvHeads*tc.hd)
					ps := make([]int32, n)
					for i := range ps {
						ps[i] = int32(start + i)
					}
					pos := h.ints(ps)
					dst := h.zeros(n, tc.heads*tc.hd)
					a.Sinks = sinks.c
					h.c.Attend(dst.c, q.c, k.c, v.c, cc, pos.c, a)
					a.Sinks = sinks.g
					h.g.Attend(dst.g, q.g, k.g, v.g, gc, pos.g, a)
					got, want := h.readBoth(dst)
					e := relErr(got, want)
					t.Logf("step %d (%d rows at %d): ‖Δ‖/‖ref‖ = %.2e", step, n, start, e)
					if e > 1e-2 || math.IsNaN(e) {
						t.Errorf("step %d (%d rows at %d): ‖Δ‖/‖ref‖ = %.3g > 1e-2", step, n, start, e)
					}
					start += n
				}
				h.compare("cache K", pair{cc.K, gc.K}, 0)
				h.compare("cache V", pair{cc.V, gc.V}, 0)
			})
		}
	}
}

// BenchmarkAttendPrefill measures causal attention of a 4096-token prompt
// with llama-3.1-8b's heads (32 query, 8 key-value heads of 128), flash and
// exact kernels, in TFLOP/s of QKᵀ and PV over the causal half.
func BenchmarkAttendPrefill(b *testing.B) {
	g := openGPU(b)
	const n, heads, kvHeads, hd = 4096, 32, 8, 128
	r := rand.New(rand.NewPCG(5, 6))
	q := g.Alloc(compute.F32, n, heads*hd)
	g.Upload(q, randVals(r, n*heads*hd, 1))
	k := g.Alloc(compute.F32, n, kvHeads*hd)
	g.Upload(k, randVals(r, n*kvHeads*hd, 1))
	v := g.Alloc(compute.F32, n, kvHeads*hd)
	g.Upload(v, randVals(r, n*kvHeads*hd, 1))
	dst := g.Alloc(compute.F32, n, heads*hd)
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	pos := g.Alloc(compute.I32, n)
	g.UploadInts(pos, ps)
	cache := g.NewKVCache(n, kvHeads*hd, false)
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
	flops := 4 * float64(heads*hd) * n * (n + 1) / 2
	type run struct {
		name    string
		mode    attnMode
		variant int
	}
	runs := []run{{flashConfigs[1].name, attnFlash, 0}}
	for i, c := range flashVariants {
		runs = append(runs, run{c.name, attnFlash, i + 1})
	}
	runs = append(runs, run{"exact", attnExact, 0})
	for _, r := range runs {
		b.Run(fmt.Sprintf("%s/%d", r.name, n), func(b *testing.B) {
			defer g.pinAttention(r.mode)()
			g.flash.variant = r.variant
			defer func() { g.flash.variant = 0 }()
			g.Attend(dst, q, k, v, cache, pos, a)
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			t0 := time.Now()
			for range b.N {
				g.Attend(dst, q, k, v, cache, pos, a)
			}
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(flops*float64(b.N)/time.Since(t0).Seconds()/1e12, "TFLOP/s")
		})
	}
}
