package cpu

import "fmt"

// Blocking of the matrix-matrix product. A tile is gemmTileN activation
// rows × gemmTileM weight rows; within it the shared dimension is cut into
// blocks of gemmKC elements so that a tile's activations and weights stay
// in the L2 cache while every micro-kernel call re-reads them.
var (
	gemmKC    = 2048 // a multiple of 32
	gemmTileN = 64
	gemmTileM = 96
)

// gemvChunkRows is the number of weight rows a thread takes at a time in a
// matrix-vector product.
const gemvChunkRows = 64

// packChunk is the number of activation rows packed per task chunk.
const packChunk = 16

// MatMul computes dst = x · Wᵀ: x holds n rows of w.Cols float32 values and
// dst receives n rows of w.Rows values. Each weight row is widened from its
// stored type in registers and never written back. For n == 1 every weight
// row is streamed once (a memory-bound matrix-vector product); for n > 1
// weight tiles are reused across blocks of activation rows. Work is split
// over the pool's threads; pool may be nil for a shared default pool.
//
// Block-quantized weights are multiplied as described in qmatmul.go.
//
// MatMul panics if a slice is shorter than the shapes require or the
// weights are of a type it does not know.
func MatMul(dst, x []float32, n int, w Weights, pool *Pool) {
	w.check()
	m, k := w.Rows, w.Cols
	if n < 0 || len(x) < n*k || len(dst) < n*m {
		panic(fmt.Sprintf("cpu: MatMul of %d×%d by [%d %d]ᵀ: x has %d values, dst %d", n, k, m, k, len(x), len(dst)))
	}
	if n == 0 || m == 0 {
		return
	}
	if k == 0 {
		clear(dst[:n*m])
		return
	}
	s := pool.lock()
	defer s.mu.Unlock()
	if w.DType.Quantized() {
		matMulQuant(s, dst, x, n, w)
		return
	}

	ks := kernels[active][w.DType]
	kpad := (k + 31) &^ 31
	t := &s.mm
	*t = matmulTask{
		ks: ks, dst: dst, x: x, w: w.Data,
		n: n, m: m, k: k, kpad: kpad, ldd: m,
		xp: s.scratch(n * kpad),
	}
	t.kmain = k
	if !ks.masked {
		t.kmain = k / ks.blk * ks.blk
	}
	// One row takes the one-row kernels, which sum as the many-row ones:
	// no row-stable mode needed.
	if n == 1 {
		t.pack(0)
		rows := max(gemvChunkRows/ks.gemvC, 1) * ks.gemvC
		t.rowsPerChunk = rows
		s.run(taskGEMV, (m+rows-1)/rows)
	} else {
		s.run(taskPack, (n+packChunk-1)/packChunk)
		t.tileN = (gemmTileN + ks.gemmR - 1) / ks.gemmR * ks.gemmR
		t.tileM = (gemmTileM + ks.gemmC - 1) / ks.gemmC * ks.gemmC
		t.tilesM = (m + t.tileM - 1) / t.tileM
		tilesN := (n + t.tileN - 1) / t.tileN
		s.run(taskGEMM, tilesN*t.tilesM)
	}
	*t = matmulTask{} // drop references to the caller's memory
}

// matmulTask is one MatMul call, shared by the pool's workers.
type matmulTask struct {
	ks           *kernelSet
	dst, x       []float32
	w            []byte
	n, m, k      int
	ldd          int // dst row stride in elements (m, unless a slice of a wider product)
	kpad         int
	kmain        int       // leading elements of each row the kernels handle
	xp           []float32 // x packed for the kernels, n rows of kpad
	tileN        int
	tileM        int
	tilesM       int
	rowsPerChunk int
}

// pack packs chunk c of the activation rows.
func (t *matmulTask) pack(c int) {
	lo := c * packChunk
	hi := min(lo+packChunk, t.n)
	packX(t.xp[lo*t.kpad:], t.x[lo*t.k:], hi-lo, t.k, t.kpad, t.ks.blk, t.ks.evenOdd())
}

// gemv computes chunk c of the output rows of a one-row product. Each
// output sums as in gemm: the shared dimension in blocks of gemmKC
// elements, each block's sum stored or added to dst in turn, then the
// elements past kmain. With the one-row kernels summing each dot product
// as the many-row ones do, a row computed alone has the bits it has in a
// product of many rows.
func (t *matmulTask) gemv(a *kargs, c int) {
	ks := t.ks
	C := ks.gemvC
	j0 := c * t.rowsPerChunk
	j1 := min(j0+t.rowsPerChunk, t.m)
	es := ks.dtype.Size()
	rb := t.k * es
	*a = kargs{nt: 1, nr: C, dt: ks.dtype, kc: gemmKC}
	for j := j0; j < j1; j += C {
		nr := min(C, j1-j)
		d := t.dst[j : j+nr]
		if ks.gemvKC && t.kmain > 0 {
			// The kernel takes the blocks of gemmKC itself.
			a.k = t.kmain
			a.x[0] = &t.xp[0]
			for r := range C {
				a.w[r] = &t.w[(j+min(r, nr-1))*rb]
			}
			if nr == C {
				a.dst, a.acc = &d[0], 0
				ks.gemv(a)
			} else {
				a.dst = nil
				ks.gemv(a)
				copy(d, a.out[:nr])
			}
			if t.kmain%gemmKC == 0 && t.kmain < t.k {
				// gemm adds the empty block that ends at kmain: +0,
				// which turns a -0 sum into +0.
				for r := range d {
					d[r] += 0
				}
			}
			if t.kmain < t.k {
				for r := range d {
					d[r] += t.tail(0, j+r)
				}
			}
			continue
		}
		for kb := 0; kb < t.k; kb += gemmKC {
			a.k = min(gemmKC, t.kmain-kb)
			first := kb == 0
			a.x[0] = &t.xp[kb]
			for r := range C {
				a.w[r] = &t.w[(j+min(r, nr-1))*rb+kb*es]
			}
			if nr == C && a.k > 0 {
				// A full block: the kernel stores to dst itself.
				a.dst, a.acc = &d[0], 0
				if !first {
					a.acc = 1
				}
				ks.gemv(a)
				continue
			}
			a.dst = nil
			if a.k > 0 {
				ks.gemv(a)
			} else {
				clear(a.out[:nr])
			}
			o := a.out[:nr]
			if first {
				copy(d, o)
			} else {
				for r := range d {
					d[r] += o[r]
				}
			}
		}
		if t.kmain < t.k {
			for r := range d {
				d[r] += t.tail(0, j+r)
			}
		}
	}
}

// gemm computes tile c of a many-row product.
func (t *matmulTask) gemm(a *kargs, c int) {
	ks := t.ks
	R, C := ks.gemmR, ks.gemmC
	t0 := c / t.tilesM * t.tileN
	j0 := c % t.tilesM * t.tileM
	t1 := min(t0+t.tileN, t.n)
	j1 := min(j0+t.tileM, t.m)
	es := ks.dtype.Size()
	rb := t.k * es
	m, kpad := t.ldd, t.kpad
	*a = kargs{nt: R, nr: C, dt: ks.dtype, kc: gemmKC}
	for kb := 0; kb < t.k; kb += gemmKC {
		a.k = min(gemmKC, t.kmain-kb)
		first := kb == 0
		for j := j0; j < j1; j += C {
			nr := min(C, j1-j)
			for r := range C {
				a.w[r] = &t.w[(j+min(r, nr-1))*rb+kb*es]
			}
			for i := t0; i < t1; i += R {
				nt := min(R, t1-i)
				for q := range R {
					a.x[q] = &t.xp[(i+min(q, nt-1))*kpad+kb]
				}
				if nt == R && nr == C && a.k > 0 {
					// A full block: the kernel stores to dst itself.
					a.dst, a.ldd, a.acc = &t.dst[i*m+j], 4*m, 0
					if !first {
						a.acc = 1
					}
					ks.gemm(a)
					continue
				}
				a.dst = nil
				if a.k > 0 {
					ks.gemm(a)
				} else {
					clear(a.out[:])
				}
				for q := range nt {
					d := t.dst[(i+q)*m+j : (i+q)*m+j+nr]
					o := a.out[q*8 : q*8+nr]
					if first {
						copy(d, o)
					} else {
						for r := range d {
							d[r] += o[r]
						}
					}
				}
			}
		}
	}
	if t.kmain < t.k {
		for i := t0; i < t1; i++ {
			for j := j0; j < j1; j++ {
				t.dst[i*t.ldd+j] += t.tail(i, j)
			}
		}
	}
}

// tail returns the dot product of activation row i and weight row j over
// the elements past kmain, which kernels without masked loads leave out.
func (t *matmulTask) tail(i, j int) float32 {
	es := t.ks.dtype.Size()
	var wb [32]float32
	n := t.k - t.kmain
	widenGeneric(wb[:n], t.w[(j*t.k+t.kmain)*es:(j+1)*t.k*es], t.ks.dtype)
	return dotGeneric(t.x[i*t.k+t.kmain:(i+1)*t.k], wb[:n])
}
