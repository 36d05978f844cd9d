package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
)

// randMLXWeights returns m×k random weights of the MLX affine type dt:
// random code bytes and, per group, a scale and a bias of moderate
// magnitude and random sign. It also returns, per element, the scale
// times the code as the kernels shift it (code − mlxOff) and the bias
// they pair with it (bias + mlxOff·scale), for error bounds, and the
// decoded values.
func randMLXWeights(t testing.TB, rng *rand.Rand, dt compute.DType, m, k int) (w Weights, vals, sq, bias []float64) {
	t.Helper()
	bits, group, scale, ok := dt.MLX()
	if !ok {
		t.Fatalf("%s is not an MLX type", dt)
	}
	rb, err := dt.RowBytes(k)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, m*rb)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	es := scale.Size()
	bb := dt.BlockBytes()
	put := func(b []byte, v float32) {
		switch scale {
		case compute.BF16:
			binary.LittleEndian.PutUint16(b, half.F32ToBF16(v))
		case compute.F16:
			binary.LittleEndian.PutUint16(b, half.F32ToF16(v))
		default:
			binary.LittleEndian.PutUint32(b, math.Float32bits(v))
		}
	}
	for b := 0; b < len(data); b += bb {
		put(data[b:], float32(math.Exp(rng.Float64()*4-8))*float32(1-2*rng.IntN(2)))
		put(data[b+es:], float32(rng.NormFloat64()*0.05))
	}
	vals = make([]float64, m*k)
	row := make([]float32, k)
	for j := range m {
		if err := quant.Dequantize(row, data[j*rb:(j+1)*rb], dt); err != nil {
			t.Fatal(err)
		}
		for i, v := range row {
			vals[j*k+i] = float64(v)
		}
	}
	off := float64(mlxOff(bits))
	sq, bias = make([]float64, m*k), make([]float64, m*k)
	for e := range vals {
		blk := data[e/group*bb:]
		s, z := float64(mlxScaleValue(blk, scale)), float64(mlxScaleValue(blk[es:], scale))
		q := (vals[e] - z) / s // exact enough for a bound
		sq[e] = s * (q - off)
		bias[e] = z + off*s
	}
	return Weights{DType: dt, Rows: m, Cols: k, Data: data}, vals, sq, bias
}

// checkMLXMatMul compares dst with x·Wᵀ computed in float64 from the
// decoded weights. Quantizing an activation block moves each value by at
// most half its step max|x|/127, which the kernels multiply by
// scale·(code − off) only (the bias meets the exact float Σx): the error
// is at most Σ step/2·|scale·(code − off)|, plus float32 rounding of up
// to 1e-5 of the terms' magnitudes.
func checkMLXMatMul(t *testing.T, dst, x []float32, vals, sq, bias []float64, n, m, k int) {
	t.Helper()
	bad := 0
	for i := range n {
		xr := x[i*k : (i+1)*k]
		steps := make([]float64, k/32)
		for b := range steps {
			for _, v := range xr[b*32 : (b+1)*32] {
				steps[b] = math.Max(steps[b], math.Abs(float64(v))/127)
			}
		}
		for j := range m {
			var s, qe, sa float64
			for q := range k {
				e := j*k + q
				s += float64(xr[q]) * vals[e]
				qe += steps[q/32] / 2 * math.Abs(sq[e])
				sa += math.Abs(float64(xr[q])) * (math.Abs(sq[e]) + math.Abs(bias[e]))
			}
			got := float64(dst[i*m+j])
			if math.Abs(got-s) > 1.01*qe+1e-5*sa+1e-30 || math.IsNaN(got) {
				if bad < 5 {
					t.Errorf("dst[%d,%d] = %g, want %g ± %g", i, j, got, s, 1.01*qe+1e-5*sa)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d values wrong", bad, n*m)
	}
}

// mlxTestTypes are the MLX affine types the tests multiply: every width
// and group with bf16 scales, and the other scale types at 4 and 8 bits.
func mlxTestTypes(t testing.TB) []compute.DType {
	var dts []compute.DType
	add := func(bits, group int, scale compute.DType) {
		dt, err := compute.MLXAffine(bits, group, scale)
		if err != nil {
			t.Fatal(err)
		}
		dts = append(dts, dt)
	}
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			add(bits, group, compute.BF16)
		}
	}
	for _, bits := range []int{4, 8} {
		add(bits, 64, compute.F16)
		add(bits, 32, compute.F32)
	}
	return dts
}

func TestMLXMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	pool := NewPool(2)
	defer pool.Close()
	shapes := []struct{ n, m, k int }{{1, 1, 128}, {1, 7, 384}, {1, 19, 256}, {3, 9, 256}, {2, 13, 640}, {17, 37, 512}, {1, 130, 1024}}
	for _, dt := range mlxTestTypes(t) {
		for _, sh := range shapes {
			if sh.k%dt.BlockSize() != 0 {
				continue
			}
			w, vals, sq, bias := randMLXWeights(t, rng, dt, sh.m, sh.k)
			x := randVec(rng, sh.n*sh.k)
			for _, l := range levels() {
				t.Run(fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d", l, dt, sh.n, sh.m, sh.k), func(t *testing.T) {
					dst := make([]float32, sh.n*sh.m)
					atLevel(t, l, func() { MatMul(dst, x, sh.n, w, pool) })
					bits, _, _, _ := dt.MLX()
					if bits%2 == 1 || bits == 6 {
						// Dequantized: no activation quantization error.
						sq = make([]float64, len(sq))
					}
					checkMLXMatMul(t, dst, x, vals, sq, bias, sh.n, sh.m, sh.k)
				})
			}
		}
	}
}

// TestMLXMatMulMatchesGeneric checks the assembly against the pure-Go
// kernels, which compute the same integer sums: only float rounding
// differs.
func TestMLXMatMulMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 75, 2560
	for _, dt := range mlxTestTypes(t) {
		if qkernels[levelGeneric][dt] == nil {
			continue
		}
		w, _, sq, bias := randMLXWeights(t, rng, dt, m, k)
		for _, n := range []int{1, 11} {
			x := randVec(rng, n*k)
			want := make([]float32, n*m)
			atLevel(t, levelGeneric, func() { MatMul(want, x, n, w, pool) })
			for _, l := range levels()[1:] {
				if qkernels[l][dt] == nil {
					t.Errorf("%s %s: no kernels", l, dt)
					continue
				}
				got := make([]float32, n*m)
				atLevel(t, l, func() { MatMul(got, x, n, w, pool) })
				for i := range got {
					var sa float64
					for q := range k {
						e := i%m*k + q
						sa += math.Abs(float64(x[i/m*k+q])) * (math.Abs(sq[e]) + math.Abs(bias[e]))
					}
					if d := math.Abs(float64(got[i] - want[i])); d > 2e-6*sa {
						t.Fatalf("%s %s n=%d: dst[%d] = %g, generic %g (Σ|x|·|terms| %g)", l, dt, n, i, got[i], want[i], sa)
					}
				}
			}
		}
	}
}

// TestMLXQuantizeX checks the activation layouts of the MLX kernels
// against quantBlock: codes in mlxOrder, scales, and the float sum.
func TestMLXQuantizeX(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	x := randVec(rng, 64)
	for _, f := range []xfmt{xfM2, xfM4, xfM8} {
		off := mlxOff(f.mlxBits())
		dst := make([]byte, f.rowBytes(64))
		quantizeX(dst, x, f, off)
		for b := range 2 {
			var q [32]byte
			d, qsum := quantBlock(q[:], x[32*b:32*b+32])
			g := dst[128*b : 128*b+128]
			var sum float32
			for e := range 32 {
				if g[mlxOrder(f.mlxBits(), e)] != q[e] {
					t.Fatalf("%d-bit layout: element %d misplaced", f.mlxBits(), 32*b+e)
				}
				sum += x[32*b+e]
			}
			for i := range 8 {
				if getF32(g[32+4*i:]) != d {
					t.Fatalf("%d-bit layout: dx lane %d = %g, want %g", f.mlxBits(), i, getF32(g[32+4*i:]), d)
				}
				if want := map[bool]float32{true: sum, false: 0}[i == 0]; getF32(g[64+4*i:]) != want {
					t.Fatalf("%d-bit layout: Σx lane %d = %g, want %g", f.mlxBits(), i, getF32(g[64+4*i:]), want)
				}
				if want := map[bool]int32{true: -off * qsum, false: 0}[i == 0]; int32(binary.LittleEndian.Uint32(g[96+4*i:])) != want {
					t.Fatalf("%d-bit layout: offset lane %d = %d, want %d", f.mlxBits(), i, int32(binary.LittleEndian.Uint32(g[96+4*i:])), want)
				}
			}
		}
	}
	// 4 bits: byte j holds elements 2j, 2j+1; the low nibbles pair with
	// positions 0-15, the high ones with 16-31.
	for e, want := range map[int]int{0: 0, 1: 16, 2: 1, 31: 31, 30: 15} {
		if got := mlxOrder(4, e); got != want {
			t.Errorf("mlxOrder(4, %d) = %d, want %d", e, got, want)
		}
	}
	for e, want := range map[int]int{0: 0, 1: 8, 2: 16, 3: 24, 4: 1, 31: 31} {
		if got := mlxOrder(2, e); got != want {
			t.Errorf("mlxOrder(2, %d) = %d, want %d", e, got, want)
		}
	}
}

// BenchmarkMLXGEMV measures the decode matrix-vector product with MLX
// affine weights of 4 and 8 bits (groups of 64, bf16 scales) at the
// shapes of a 1B model, in GB/s of weights streamed, beside the baselines
// of the same run: the read bandwidth (membw, as BenchmarkMemBandwidth),
// bf16 weights (as BenchmarkGEMV) and Q4_0. The weights are windows of
// benchBuf used in turn; its random bytes make valid blocks (every 16-bit
// pattern in it is a finite bf16).
func BenchmarkMLXGEMV(b *testing.B) {
	buf := benchBuf()
	for _, th := range benchThreads {
		b.Run(fmt.Sprintf("membw/threads=%d", th), func(b *testing.B) {
			pool := NewPool(th)
			defer pool.Close()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				StreamRead(buf, pool)
			}
		})
	}
	mlx4, _ := compute.MLXAffine(4, 64, compute.BF16)
	mlx8, _ := compute.MLXAffine(8, 64, compute.BF16)
	for _, sh := range []struct{ m, k int }{{2048, 8192}, {8192, 2048}} {
		for _, dt := range []compute.DType{compute.BF16, mlx4, mlx8, compute.Q4_0} {
			for _, th := range benchThreads {
				b.Run(fmt.Sprintf("%dx%d/%s/threads=%d", sh.m, sh.k, dt, th), func(b *testing.B) {
					rb, _ := dt.RowBytes(sh.k)
					size := sh.m * rb
					var ws []Weights
					for off := 0; off+size <= len(buf); off += size {
						ws = append(ws, Weights{DType: dt, Rows: sh.m, Cols: sh.k, Data: buf[off : off+size]})
					}
					x := randVec(rand.New(rand.NewPCG(1, 1)), sh.k)
					dst := make([]float32, sh.m)
					pool := NewPool(th)
					defer pool.Close()
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
