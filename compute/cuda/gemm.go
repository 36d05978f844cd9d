package cuda

import (
	"fmt"
	"os"

	"github.com/lem-engine/lem/compute"
)

// Prefill matrix products (n > 4 rows) on bf16 and f16 weights run on the
// tensor cores: the f32 activations are rounded to the weight's type by
// to_half, then cuBLAS (cublas.go) or the own kernel gemm_tc multiplies
// them with f32 accumulation into the f32 result.
//
// Rounding the activations to 8 significant bits (bf16) costs about 2⁻⁹
// relative error per product. The precise mode keeps f32-like accuracy: it
// also rounds the residual x - bf16(x) and adds a second product, so the
// activations carry ~16 bits and the result differs from an f32 product of
// the same weights by ~1e-5 relative, at twice the tensor-core work. It is
// used for small products (k <= preciseMaxK), where launch overhead and
// not arithmetic is the cost and where the tiny reference models are
// checked to 2e-3 logits, and everywhere with LEM_CUDA_MATMUL=precise;
// LEM_CUDA_MATMUL=fast turns it off everywhere.

// preciseMaxK is the largest inner dimension at which auto mode uses the
// precise two-pass mode.
const preciseMaxK = 1024

// tcKernels are the tensor-core prefill kernels.
type tcKernels struct {
	toHalf uintptr
	gemm   [3]uintptr // by dtype: -, f16, bf16
}

func (k *tcKernels) add(t map[string]*uintptr) {
	t["to_half"] = &k.toHalf
	t["gemm_tc_f16"] = &k.gemm[compute.F16]
	t["gemm_tc_bf16"] = &k.gemm[compute.BF16]
}

// matmulMode is how the tensor-core path rounds activations.
type matmulMode int

const (
	modeAuto    matmulMode = iota // precise up to preciseMaxK, else fast
	modeFast                      // one bf16/f16 pass
	modePrecise                   // two passes (value and residual)
)

func parseMatmulMode(s string) (matmulMode, error) {
	switch s {
	case "", "auto":
		return modeAuto, nil
	case "fast":
		return modeFast, nil
	case "precise":
		return modePrecise, nil
	}
	return 0, fmt.Errorf("cuda: LEM_CUDA_MATMUL=%q: want auto, fast or precise", s)
}

// gemmState is the backend's prefill matmul configuration.
type gemmState struct {
	blas    *blas // nil: own kernel
	blasOff *blas // cuBLAS set aside by UseCUBLAS(false)
	blasErr error // why cuBLAS is not used
	simt    bool  // tensor cores off: the f32 SIMT kernel (benchmark baseline)
	mode    matmulMode
	xhalf   *buffer // converted activations (hi then lo)

	// The last conversion, reused by the next product when nothing was
	// recorded in between (q, k and v projections of one input; gate and
	// up), since nothing can have changed x then.
	last    halfKey
	lastSeq uint64
}

// halfKey identifies a conversion of activations.
type halfKey struct {
	x, dst  uintptr
	elems   int
	dt      compute.DType
	precise bool
}

// openGEMM opens cuBLAS on the owner thread when available; its absence is
// not an error (the own kernel takes over), the reason is kept for Name.
func (b *Backend) openGEMM() error {
	mode, err := parseMatmulMode(os.Getenv("LEM_CUDA_MATMUL"))
	if err != nil {
		return err
	}
	b.gemm.mode = mode
	bl, err := openBLAS()
	if err != nil {
		b.gemm.blasErr = err
		return nil
	}
	err = b.do(func(w *owner) error { return bl.bind(w) })
	if err != nil {
		b.gemm.blasErr = err
		return nil
	}
	b.gemm.blas = bl
	return nil
}

// closeGEMM releases cuBLAS (owner thread).
func (g *gemmState) close(w *owner) {
	for _, bl := range []*blas{g.blas, g.blasOff} {
		if bl != nil {
			bl.release(w)
		}
	}
	g.blas, g.blasOff = nil, nil
}

// GEMM describes the prefill matmul engine, e.g. "cuBLAS 13.0.2
// (/usr/local/cuda/lib64/libcublas.so.13)" or "own tensor-core kernel
// (cuBLAS: not found)".
func (b *Backend) GEMM() string {
	if bl := b.gemm.blas; bl != nil {
		return fmt.Sprintf("cuBLAS %s (%s)", bl.versionString(), bl.path)
	}
	return fmt.Sprintf("own tensor-core kernel (%v)", b.gemm.blasErr)
}

// UseCUBLAS turns cuBLAS off (false) or back on for prefill matmuls, for
// tests and benchmarks that compare it with the own kernel. It reports
// whether cuBLAS is now in use.
func (b *Backend) UseCUBLAS(on bool) bool {
	if on && b.gemm.blas == nil && b.gemm.blasOff != nil {
		b.gemm.blas, b.gemm.blasOff = b.gemm.blasOff, nil
	} else if !on && b.gemm.blas != nil {
		b.gemm.blasOff, b.gemm.blas = b.gemm.blas, nil
	}
	return b.gemm.blas != nil
}

// matmulTC runs MatMul on the tensor cores when the shapes allow it and
// reports whether it did.
func (b *Backend) matmulTC(dst, x, w *compute.Tensor) bool {
	n, k, m := x.Rows(), x.Cols(), w.Rows()
	if (w.DType != compute.BF16 && w.DType != compute.F16) || b.gemm.simt {
		return false
	}
	if k%8 != 0 || dptr(w)%16 != 0 || dptr(x)%16 != 0 || dptr(dst)%8 != 0 {
		return false
	}
	precise := b.gemm.mode == modePrecise || (b.gemm.mode == modeAuto && k <= preciseMaxK)
	elems := n * k
	parts := 1
	if precise {
		parts = 2
	}
	xh := b.scratch(&b.gemm.xhalf, parts*elems*2)
	var lo uintptr
	if precise {
		lo = xh + uintptr(elems*2)
	}
	key := halfKey{x: dptr(x), dst: xh, elems: elems, dt: w.DType, precise: precise}
	if key != b.gemm.last || b.recorded != b.gemm.lastSeq {
		b.launch(b.k.tc.toHalf, "to_half", blocks(elems/4), 256).
			ptr(xh).ptr(lo).ptr(dptr(x)).i64(elems).i(int(w.DType))
	}
	defer func() { b.gemm.last, b.gemm.lastSeq = key, b.recorded }()
	dt := cudaR16BF
	if w.DType == compute.F16 {
		dt = cudaR16F
	}
	out, wp := dptr(dst), dptr(w)
	for p := range parts {
		src := xh + uintptr(p*elems*2)
		if bl := b.gemm.blas; bl != nil {
			beta := float32(p)
			b.record(op{name: "cublasGemmEx", work: true, call: func(o *owner) error { return bl.gemm(o, out, src, wp, dt, n, m, k, beta) }})
			continue
		}
		b.record(op{fn: b.k.tc.gemm[w.DType], name: "gemm_tc",
			grid:  [3]uint32{uint32((m + 127) / 128), uint32((n + 127) / 128), 1},
			block: [3]uint32{256, 1, 1}}).
			ptr(out).ptr(src).ptr(wp).i(n).i(m).i(k).i(p)
	}
	return true
}
