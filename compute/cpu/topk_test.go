package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestAnyAbove checks anyAbove against a plain loop, with the threshold and
// one planted value at each position, NaN and infinities included.
func TestAnyAbove(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x := randVec(rng, n) // in [-1, 1)
		want := func(th float32) bool {
			for _, v := range x {
				if v > th {
					return true
				}
			}
			return false
		}
		check := func(what string, th float32) {
			t.Helper()
			if got := anyAbove(x, th); got != want(th) {
				t.Fatalf("%s: anyAbove(%g) = %v, want %v", what, th, got, !got)
			}
		}
		for _, th := range []float32{-2, 0, 2, nan, inf, -inf} {
			check("random", th)
		}
		for i := range x {
			old := x[i]
			for _, v := range []float32{3, nan, inf} {
				x[i] = v
				check("planted", 2)
				check("planted", nan)
			}
			x[i] = old
		}
	})
}

// TestTopK compares the CPU TopK with a full sort (value descending, then
// index ascending) on rows with many ties, and with one pass of insertTop,
// the selection without the block test, on rows holding NaN and infinities.
func TestTopK(t *testing.T) {
	b := New(1)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, l := range levels() {
		atLevel(t, l, func() {
			rng := rand.New(rand.NewPCG(7, uint64(l)))
			for _, n := range []int{1, 5, 255, 256, 257, 1000, 151936} {
				for _, k := range []int{1, 2, 8, 40} {
					if k > n || k > compute.MaxTopK {
						continue
					}
					const rows = 2
					xs := make([]float32, rows*n)
					for i := range xs {
						xs[i] = float32(rng.IntN(200)) / 8 // ties
					}
					if n > 600 {
						xs[n+500] = nan
						xs[n+300] = inf
						xs[n+n-1] = -inf
					}
					x := b.Alloc(compute.F32, rows, n)
					b.Upload(x, xs)
					dst := b.Alloc(compute.F32, rows, 2*k)
					b.TopK(dst, x, k)
					got := dst.Buf.([]float32)
					for r := range rows {
						row := xs[r*n : (r+1)*n]
						var want []topCand
						if slices.ContainsFunc(row, func(v float32) bool { return v != v }) {
							want = insertTop(nil, row, 0, k)
						} else {
							idx := make([]int, n)
							for i := range idx {
								idx[i] = i
							}
							slices.SortStableFunc(idx, func(a, c int) int {
								switch {
								case row[a] > row[c]:
									return -1
								case row[a] < row[c]:
									return 1
								}
								return 0
							})
							for _, i := range idx[:k] {
								want = append(want, topCand{row[i], i})
							}
						}
						o := got[r*2*k : (r+1)*2*k]
						for j, c := range want {
							if gv, gi := o[j], int(o[k+j]); gi != c.i || gv != c.v && !(gv != gv && c.v != c.v) {
								t.Fatalf("%s n=%d k=%d row %d: candidate %d is %g at %d, want %g at %d", l, n, k, r, j, gv, gi, c.v, c.i)
							}
						}
					}
				}
			}
		})
	}
}

// BenchmarkTopK picks the best of a vocabulary's logits, as greedy decoding
// does each step; "scan" is the selection without the block test.
func BenchmarkTopK(b *testing.B) {
	const n = 151936
	be := New(1)
	x := be.Alloc(compute.F32, 1, n)
	be.Upload(x, randVec(rand.New(rand.NewPCG(1, 1)), n))
	for _, k := range []int{1, 40} {
		dst := be.Alloc(compute.F32, 1, 2*k)
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			for b.Loop() {
				be.TopK(dst, x, k)
			}
		})
		b.Run(fmt.Sprintf("k=%d/scan", k), func(b *testing.B) {
			top := make([]topCand, 0, k+1)
			for b.Loop() {
				top = insertTop(top[:0], x.Buf.([]float32), 0, k)
			}
		})
	}
}
