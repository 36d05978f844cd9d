package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

// Kernel design. MatMul multiplies float32 activations by weights kept in
// their stored type. The innermost loop is a micro-kernel (generated
// assembly in matmul_amd64.s, or genericKernel) that computes an R×C block
// of dot products, R activation rows by C weight rows, keeping R·C vector
// accumulators in registers and widening each weight vector once for the R
// activation rows: AVX-512 uses R=4, C=6 (24 of the 32 zmm registers) for
// prefill and R=1, C=8 (with software prefetch) for decode; AVX2 uses R=3,
// C=4 and R=1, C=8. bf16 widens without shuffles (see gen_kernels.go), f16
// with VCVTPH2PS, and the sums accumulate with FMA. Both kernels of a
// level sum a dot product in the same order (one accumulator vector per
// activation row and weight row, the same reduction of its lanes), and
// MatMul cuts the shared dimension alike for one row and for many, so a
// row of a product has the same bits whatever the number of rows.
// Activations are first copied to a zero-padded scratch buffer (packX),
// in the element order the bf16 trick needs, so that the kernels can read
// whole vectors past the end of a row; weight rows are never copied, and
// their last partial vector is read with masked loads (AVX-512) or
// finished in Go (AVX2).

//go:generate go run gen_kernels.go

// Weights is a row-major matrix of Rows×Cols elements stored as
// little-endian DType values (compute.F32, compute.F16 or compute.BF16) or
// as blocks of a quantized type (Cols a whole number of blocks), typically
// a tensor sliced out of a memory-mapped safetensors or GGUF file with
// shape [out_features, in_features]. Data need not be aligned.
type Weights struct {
	DType      compute.DType
	Rows, Cols int
	Data       []byte

	// pack, when set, is the matrix in the packed layout of qpack.go,
	// which the products read instead of Data.
	pack []byte
}

// F32Weights returns Weights viewing a float32 matrix in place.
func F32Weights(rows, cols int, data []float32) Weights {
	var b []byte
	if len(data) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 4*len(data))
	}
	return Weights{DType: compute.F32, Rows: rows, Cols: cols, Data: b}
}

// Row returns the bytes of row i.
func (w Weights) Row(i int) []byte {
	rb, _ := w.DType.RowBytes(w.Cols)
	return w.Data[i*rb : (i+1)*rb]
}

// check panics unless w is a well-formed matrix of a supported type.
func (w Weights) check() {
	switch {
	case w.DType == compute.F32, w.DType == compute.F16, w.DType == compute.BF16:
	case w.DType.Quantized():
		if w.Cols%w.DType.BlockSize() != 0 {
			panic(fmt.Sprintf("cpu: %s weights of %d columns: not a whole number of %d-element blocks", w.DType, w.Cols, w.DType.BlockSize()))
		}
	default:
		panic(fmt.Sprintf("cpu: weights of dtype %s not supported", w.DType))
	}
	if w.Rows < 0 || w.Cols < 0 {
		panic(fmt.Sprintf("cpu: weights of shape [%d %d]", w.Rows, w.Cols))
	}
	rb, _ := w.DType.RowBytes(w.Cols)
	if need := w.Rows * rb; len(w.Data) < need {
		panic(fmt.Sprintf("cpu: %s weights [%d %d] need %d bytes, have %d", w.DType, w.Rows, w.Cols, need, len(w.Data)))
	}
}

// level is an instruction-set level of the kernels.
type level uint8

const (
	levelGeneric level = iota // pure Go
	levelAVX2                 // AVX2, FMA, F16C
	levelAVX512               // AVX-512 F, BW, VL
	numLevels
)

var levelNames = [numLevels]string{"generic", "avx2", "avx512"}

func (l level) String() string { return levelNames[l] }

// kargs carries the operands of one micro-kernel call. Its layout is fixed:
// the assembly reads it at the offsets in gen_kernels.go.
type kargs struct {
	x   [maxR]*float32 // activation rows (packed, at the block start)
	w   [maxC]*byte    // weight rows (at the block start)
	k   int            // elements to multiply
	out [maxR * 8]float32

	// With dst set, sums go to dst[t*ldd/4 + r] instead of out[t*8+r],
	// added to what is there when acc is 1.
	dst *float32
	ldd int // bytes
	acc int

	// kc is the block of a.k that gemv kernels with gemvKC sum on their
	// own before adding it to the blocks before (gemmKC).
	kc int

	// Read by the generic kernel only.
	nt, nr int           // activation and weight rows
	dt     compute.DType // weight type
}

const (
	maxR = 8 // activation rows per micro-kernel call, at most
	maxC = 8 // weight rows per micro-kernel call, at most
)

// kernelSet is the micro-kernels of one instruction-set level for one
// weight type.
type kernelSet struct {
	level  level
	dtype  compute.DType
	blk    int  // elements per kernel step; bf16 activations pack in blocks of blk
	masked bool // the kernels handle any k; otherwise only multiples of blk
	gemm   func(*kargs)
	gemmR  int // activation rows per gemm call
	gemmC  int // weight rows per gemm call
	gemv   func(*kargs)
	gemvC  int // weight rows per gemv call (one activation row)
	// gemvKC: the gemv kernel cuts a.k into blocks of a.kc elements and
	// adds up their sums as MatMul adds up the blocks of GEMM kernels.
	gemvKC bool
}

// evenOdd reports whether activations are packed as the even elements of
// each block followed by the odd ones (the bf16 widening trick).
func (ks *kernelSet) evenOdd() bool {
	return ks.dtype == compute.BF16 && ks.level != levelGeneric
}

// kernels[l][dt] is the kernel set for level l and weight type dt (nil when
// the level is not compiled in).
var kernels [numLevels][compute.BF16 + 1]*kernelSet

func init() {
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		kernels[levelGeneric][dt] = &kernelSet{
			level: levelGeneric, dtype: dt, blk: 32, masked: true,
			gemm: genericKernel, gemmR: 2, gemmC: 4,
			gemv: genericKernel, gemvC: 4,
		}
	}
	for i := range asmKernels {
		ks := &asmKernels[i]
		kernels[ks.level][ks.dtype] = ks
	}
}

// active is the level the kernels run at: the best the CPU supports, or a
// lower one set by tests and benchmarks.
var active = detectLevel()

// setLevel makes the kernels run at level l (clamped to what the CPU
// supports) and returns the previous level. Not safe to call while kernels
// run.
func setLevel(l level) level {
	prev := active
	active = min(l, detectLevel())
	return prev
}

// Level names the instruction set the kernels use: "avx512", "avx2" or
// "generic".
func Level() string { return active.String() }

// genericKernel is the pure-Go micro-kernel: a.out[t*8+r] = x_t · w_r over
// a.k elements, for a.nt activation rows and a.nr weight rows. It widens a
// chunk of each weight row into a small buffer and then takes dot products.
func genericKernel(a *kargs) {
	nt, nr, k, dt := a.nt, a.nr, a.k, a.dt
	es := dt.Size()
	var acc [maxR * 8]float32
	var wb [maxC][64]float32
	for k0 := 0; k0 < k; k0 += 64 {
		kl := min(64, k-k0)
		for r := range nr {
			row := unsafe.Slice(a.w[r], k*es)[k0*es : (k0+kl)*es]
			widenGeneric(wb[r][:kl], row, dt)
		}
		t := 0
		if nr == 4 {
			// Two activation rows by four weight rows: six loads per
			// eight multiply-adds.
			w0, w1, w2, w3 := wb[0][:kl], wb[1][:kl], wb[2][:kl], wb[3][:kl]
			for ; t+2 <= nt; t += 2 {
				x0 := unsafe.Slice(a.x[t], k)[k0 : k0+kl]
				x1 := unsafe.Slice(a.x[t+1], k)[k0 : k0+kl]
				var s00, s01, s02, s03, s10, s11, s12, s13 float32
				for i := range x0 {
					p, q := x0[i], x1[i]
					s00 += p * w0[i]
					s01 += p * w1[i]
					s02 += p * w2[i]
					s03 += p * w3[i]
					s10 += q * w0[i]
					s11 += q * w1[i]
					s12 += q * w2[i]
					s13 += q * w3[i]
				}
				acc[t*8], acc[t*8+1], acc[t*8+2], acc[t*8+3] = acc[t*8]+s00, acc[t*8+1]+s01, acc[t*8+2]+s02, acc[t*8+3]+s03
				u := (t + 1) * 8
				acc[u], acc[u+1], acc[u+2], acc[u+3] = acc[u]+s10, acc[u+1]+s11, acc[u+2]+s12, acc[u+3]+s13
			}
		}
		if nr == 4 && t < nt {
			// A last single row (the one-row product) sums as the rows
			// of a pair do, so that it has their bits.
			w0, w1, w2, w3 := wb[0][:kl], wb[1][:kl], wb[2][:kl], wb[3][:kl]
			x0 := unsafe.Slice(a.x[t], k)[k0 : k0+kl]
			var s0, s1, s2, s3 float32
			for i := range x0 {
				p := x0[i]
				s0 += p * w0[i]
				s1 += p * w1[i]
				s2 += p * w2[i]
				s3 += p * w3[i]
			}
			acc[t*8], acc[t*8+1], acc[t*8+2], acc[t*8+3] = acc[t*8]+s0, acc[t*8+1]+s1, acc[t*8+2]+s2, acc[t*8+3]+s3
			t++
		}
		for ; t < nt; t++ {
			xs := unsafe.Slice(a.x[t], k)[k0 : k0+kl]
			for r := range nr {
				acc[t*8+r] += dotGeneric(xs, wb[r][:kl])
			}
		}
	}
	if a.dst == nil {
		a.out = acc
		return
	}
	ld := a.ldd / 4
	d := unsafe.Slice(a.dst, (nt-1)*ld+nr)
	for t := range nt {
		for r := range nr {
			if a.acc != 0 {
				d[t*ld+r] += acc[t*8+r]
			} else {
				d[t*ld+r] = acc[t*8+r]
			}
		}
	}
}

// widenGeneric converts little-endian dt values in src to dst.
func widenGeneric(dst []float32, src []byte, dt compute.DType) {
	switch dt {
	case compute.BF16:
		src = src[:2*len(dst)]
		i := 0
		for ; i+4 <= len(dst); i += 4 {
			s := src[2*i : 2*i+8 : 2*i+8]
			d := dst[i : i+4 : i+4]
			d[0] = math.Float32frombits(uint32(s[0])<<16 | uint32(s[1])<<24)
			d[1] = math.Float32frombits(uint32(s[2])<<16 | uint32(s[3])<<24)
			d[2] = math.Float32frombits(uint32(s[4])<<16 | uint32(s[5])<<24)
			d[3] = math.Float32frombits(uint32(s[6])<<16 | uint32(s[7])<<24)
		}
		for ; i < len(dst); i++ {
			dst[i] = bf16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case compute.F16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = f16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case compute.F32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
}

// dotGeneric returns a·b with four partial sums.
func dotGeneric(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise into a float32 normal.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// packX copies the n rows of x (row length k) into dst (row length kpad,
// a multiple of 32), zero-padding each row. With evenOdd set, each block of
// blk elements is stored as its even elements followed by its odd ones.
func packX(dst, x []float32, n, k, kpad, blk int, evenOdd bool) {
	for t := range n {
		src := x[t*k : (t+1)*k]
		d := dst[t*kpad : (t+1)*kpad]
		if !evenOdd {
			copy(d, src)
			clear(d[k:])
			continue
		}
		h := blk / 2
		i := 0
		for ; i+blk <= k; i += blk {
			s := src[i : i+blk]
			e := d[i : i+h]
			o := d[i+h : i+blk]
			for j := range h {
				e[j] = s[2*j]
				o[j] = s[2*j+1]
			}
		}
		clear(d[i:])
		for j := i; j < k; j++ {
			q := j - i
			if q&1 == 0 {
				d[i+q/2] = src[j]
			} else {
				d[i+h+q/2] = src[j]
			}
		}
	}
}
