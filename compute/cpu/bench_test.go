package cpu

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/mmap"
)

// benchBuf is 256 MiB of random, finite 16-bit floats (bf16 or f16 bit
// patterns both read as values of magnitude 1 to 2), written so that every
// page is really backed by memory. Matrices of the GEMV benchmarks are
// windows of it, used in turn so that no two consecutive calls read the
// same bytes and the 32 MiB last-level cache cannot hold what is read.
var benchBuf = sync.OnceValue(func() []byte {
	buf, err := mmap.Anon(256 << 20) // huge pages, as weights read with --no-mmap
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(buf); i += 8 {
		r := rng.Uint64()
		for j := 0; j < 8; j += 2 {
			// bf16: 0x3f80 | 7 random mantissa bits; as f16 that is about 1.9.
			h := uint16(0x3f80|r&0x7f) | uint16(r>>7&1)<<15
			buf[i+j], buf[i+j+1] = byte(h), byte(h>>8)
			r >>= 8
		}
	}
	return buf
})

var benchThreads = []int{1, 2}

// BenchmarkMemBandwidth is the baseline for the GEMV figures: the read
// bandwidth of the best vector loads over 256 MiB, with the same threads.
func BenchmarkMemBandwidth(b *testing.B) {
	buf := benchBuf()
	for _, th := range benchThreads {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) {
			pool := NewPool(th)
			defer pool.Close()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				StreamRead(buf, pool)
			}
		})
	}
}

// funcName returns the name of a kernel function, without the package.
func funcName(f func(*kargs)) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	return name[strings.LastIndexByte(name, '.')+1:]
}

// BenchmarkGEMV measures the decode matrix-vector product at the shapes of
// a 1B model (hidden 2048, MLP 8192) in GB/s of weights streamed.
func BenchmarkGEMV(b *testing.B) {
	buf := benchBuf()
	for _, sh := range []struct{ m, k int }{{2048, 8192}, {8192, 2048}} {
		for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
			for _, l := range levels() {
				if dt != compute.BF16 && l != detectLevel() {
					continue
				}
				for _, th := range benchThreads {
					name := fmt.Sprintf("%dx%d/%s/%s/threads=%d", sh.m, sh.k, dt, l, th)
					b.Run(name, func(b *testing.B) {
						size := sh.m * sh.k * dt.Size()
						var ws []Weights
						for off := 0; off+size <= len(buf); off += size {
							ws = append(ws, Weights{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf[off : off+size]})
						}
						x := randVec(rand.New(rand.NewPCG(1, 1)), sh.k)
						dst := make([]float32, sh.m)
						pool := NewPool(th)
						defer pool.Close()
						defer setLevel(setLevel(l))
						b.SetBytes(int64(size))
						i := 0
						for b.Loop() {
							MatMul(dst, x, 1, ws[i%len(ws)], pool)
							i++
						}
					})
				}
			}
		}
	}
}

// BenchmarkGEMVRowStable measures one-row products of float weights at the
// decode shapes of a 1B model (hidden 2048, MLP 8192, a 128256-token
// vocabulary), with the row-stable mode off and on, in GB/s of weights
// streamed.
func BenchmarkGEMVRowStable(b *testing.B) {
	for _, sh := range []struct{ m, k int }{{2048, 8192}, {8192, 2048}, {128256, 2048}} {
		for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
			size := sh.m * sh.k * dt.Size()
			var ws []Weights
			if buf := benchBuf(); size <= len(buf)/2 {
				for off := 0; off+size <= len(buf); off += size {
					ws = append(ws, Weights{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf[off : off+size]})
				}
			}
			for _, l := range levels()[1:] {
				if dt != compute.BF16 && l != detectLevel() {
					continue
				}
				for _, stable := range []bool{false, true} {
					name := fmt.Sprintf("%dx%d/%s/%s/rowstable=%t/threads=2", sh.m, sh.k, dt, l, stable)
					b.Run(name, func(b *testing.B) {
						if ws == nil {
							// Larger than the shared buffer: a matrix of its
							// own, which no cache holds either.
							buf, err := mmap.Anon(size)
							if err != nil {
								b.Fatal(err)
							}
							defer mmap.Free(buf)
							src := benchBuf()
							for off := 0; off < size; off += len(src) {
								copy(buf[off:], src)
							}
							ws = []Weights{{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf}}
							defer func() { ws = nil }()
						}
						x := randVec(rand.New(rand.NewPCG(1, 1)), sh.k)
						dst := make([]float32, sh.m)
						pool := NewPool(2)
						defer pool.Close()
						s := pool.lock()
						s.rowStable = stable
						s.mu.Unlock()
						defer setLevel(setLevel(l))
						b.SetBytes(int64(size))
						i := 0
						for b.Loop() {
							MatMul(dst, x, 1, ws[i%len(ws)], pool)
							i++
						}
					})
				}
			}
		}
	}
}

// BenchmarkGEMM measures prefill: a 512-token prompt through a
// 2048×2048 bf16 projection, in GFLOP/s.
func BenchmarkGEMM(b *testing.B) {
	const n, m, k = 512, 2048, 2048
	w := Weights{DType: compute.BF16, Rows: m, Cols: k, Data: benchBuf()[:m*k*2]}
	x := randVec(rand.New(rand.NewPCG(1, 1)), n*k)
	dst := make([]float32, n*m)
	for _, l := range levels() {
		for _, th := range benchThreads {
			b.Run(fmt.Sprintf("%s/threads=%d", l, th), func(b *testing.B) {
				pool := NewPool(th)
				defer pool.Close()
				defer setLevel(setLevel(l))
				for b.Loop() {
					MatMul(dst, x, n, w, pool)
				}
				b.ReportMetric(2*n*m*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGEMMKernels compares other micro-kernel shapes for bf16.
func BenchmarkGEMMKernels(b *testing.B) {
	const n, m, k = 512, 2048, 2048
	w := Weights{DType: compute.BF16, Rows: m, Cols: k, Data: benchBuf()[:m*k*2]}
	x := randVec(rand.New(rand.NewPCG(1, 1)), n*k)
	dst := make([]float32, n*m)
	cands := []kernelSet{}
	for _, l := range levels()[1:] {
		cands = append(cands, *kernels[l][compute.BF16])
	}
	for _, ks := range extraKernels {
		if ks.level <= detectLevel() && ks.dtype == compute.BF16 {
			cands = append(cands, ks)
		}
	}
	for _, ks := range cands {
		b.Run(fmt.Sprintf("%s/threads=1", funcName(ks.gemm)), func(b *testing.B) {
			pool := NewPool(1)
			defer pool.Close()
			defer setLevel(setLevel(ks.level))
			saved := kernels[ks.level][compute.BF16]
			defer func() { kernels[ks.level][compute.BF16] = saved }()
			ks := ks
			if ks.gemv == nil {
				ks.gemv, ks.gemvC, ks.gemvKC = saved.gemv, saved.gemvC, saved.gemvKC
			}
			kernels[ks.level][compute.BF16] = &ks
			for b.Loop() {
				MatMul(dst, x, n, w, pool)
			}
			b.ReportMetric(2*n*m*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGEMVKernels compares other one-row kernel shapes for bf16,
// each followed by the bandwidth baseline.
func BenchmarkGEMVKernels(b *testing.B) {
	buf := benchBuf()
	cands := []kernelSet{}
	for _, l := range levels()[1:] {
		ks := *kernels[l][compute.BF16]
		ks.gemm, ks.gemmR, ks.gemmC = ks.gemv, 1, ks.gemvC
		cands = append(cands, ks)
	}
	for _, ks := range extraKernels {
		if ks.level <= detectLevel() && ks.dtype == compute.BF16 && ks.gemmR == 1 {
			cands = append(cands, ks)
		}
	}
	const m, k = 2048, 8192
	size := m * k * 2
	var ws []Weights
	for off := 0; off+size <= len(buf); off += size {
		ws = append(ws, Weights{DType: compute.BF16, Rows: m, Cols: k, Data: buf[off : off+size]})
	}
	x := randVec(rand.New(rand.NewPCG(1, 1)), k)
	dst := make([]float32, m)
	for i, ks := range cands {
		b.Run(fmt.Sprintf("%d:%s/threads=2", i, funcName(ks.gemm)), func(b *testing.B) {
			pool := NewPool(2)
			defer pool.Close()
			defer setLevel(setLevel(ks.level))
			saved := kernels[ks.level][compute.BF16]
			defer func() { kernels[ks.level][compute.BF16] = saved }()
			ks := ks
			ks.gemv, ks.gemvC = ks.gemm, ks.gemmC
			kernels[ks.level][compute.BF16] = &ks
			b.SetBytes(int64(size))
			j := 0
			for b.Loop() {
				MatMul(dst, x, 1, ws[j%len(ws)], pool)
				j++
			}
		})
		b.Run(fmt.Sprintf("%d:membw/threads=2", i), func(b *testing.B) {
			pool := NewPool(2)
			defer pool.Close()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				StreamRead(buf, pool)
			}
		})
	}
}
