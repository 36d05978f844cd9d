package cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// benchWeightBytes returns m×k weights of type dt filled fast enough for
// matrices of hundreds of megabytes: random code bytes, and float16
// scales (or bf16 values) of moderate size.
func benchWeightBytes(rng *rand.Rand, dt compute.DType, m, k int) []byte {
	rb, _ := dt.RowBytes(k)
	data := make([]byte, m*rb)
	for i := 0; i+8 <= len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
	}
	if dt == compute.BF16 {
		for i := 0; i < len(data); i += 2 {
			v := binary.LittleEndian.Uint16(data[i:])
			binary.LittleEndian.PutUint16(data[i:], v&0x807f|0x3c00+uint16(v>>7&3)<<7)
		}
		return data
	}
	bb := dt.BlockBytes()
	scale := half.F32ToF16(0.01)
	for b := 0; b < len(data); b += bb {
		for _, f := range scaleFields[dt] {
			binary.LittleEndian.PutUint16(data[b+f:], scale)
		}
	}
	return data
}

// BenchmarkBatchedDecode measures MatMul with n = 1, 2, 4, 8 and 16
// activation rows, the products of a decode step of n sequences, at the
// shapes of llama-3.2-1b (the FFN's up and down projections and the
// output head), two threads, with row-stable products on (as a batched
// server runs them) and, for n = 1, off (one sequence). The figure to
// read is each n's time per call against n = 1's: the weights are read
// once per call, so a batch of decode rows should cost little more than
// one row. For n = 8, "shorttiles" is the tiling of packed weights that
// prefill uses (two groups of 16 rows per tile), the tiling of every
// many-row product before decode rows took long runs of groups, and
// "noprefetch" the many-row kernels of packed weights without software
// prefetch (the kernels of every many-row product before they had it).
func BenchmarkBatchedDecode(b *testing.B) {
	rng := rand.New(rand.NewPCG(81, 82))
	for _, sh := range []struct {
		name string
		m, k int
	}{{"ffn_up", 8192, 2048}, {"ffn_down", 2048, 8192}, {"output", 128256, 2048}} {
		for _, dt := range []compute.DType{compute.Q4_0, compute.Q4_K, compute.Q6_K, compute.Q8_0, compute.BF16} {
			be := New(2)
			w, err := be.Weight(dt, []int{sh.m, sh.k}, benchWeightBytes(rng, dt, sh.m, sh.k))
			if err != nil {
				b.Fatal(err)
			}
			x := tensorOf(be, randVec(rng, 16*sh.k), 16, sh.k)
			wb := float64(len(benchWeightBytes(rng, dt, 1, sh.k)) * sh.m)
			for _, v := range []struct {
				n      int
				stable bool
				short  bool
				plain  bool
			}{{1, false, false, false}, {1, true, false, false}, {2, true, false, false}, {4, true, false, false}, {8, true, true, false}, {8, true, false, true}, {8, true, false, false}, {16, true, false, false}} {
				n := v.n
				name := fmt.Sprintf("%s/%s/n=%d", dt, sh.name, n)
				if v.stable {
					name += "/stable"
				}
				if v.short {
					name += "/shorttiles" // packed weights: tiles of 2 groups
				}
				if v.plain {
					name += "/noprefetch"
				}
				be.SetRowStable(v.stable)
				dst := be.Alloc(compute.F32, n, sh.m)
				xv := be.View(x, 0, n)
				b.Run(name, func(b *testing.B) {
					defer func(l bool) { packLongTiles = l }(packLongTiles)
					packLongTiles = !v.short
					if ks := qpackKernels[dt]; ks != nil && v.plain {
						defer func(g [qpmaxR + 1]func(*qpargs)) { ks.gemm = g }(ks.gemm)
						ks.gemm = ks.gemmCached
					}
					for b.Loop() {
						be.MatMul(dst, xv, w)
					}
					b.ReportMetric(wb*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					b.ReportMetric(float64(n*sh.m*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
			w = nil
			runtime.GC()
		}
	}
}
