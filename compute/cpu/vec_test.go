package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

var vecSizes = []int{0, 1, 7, 8, 9, 31, 32, 33, 100, 1000, 4099}

// close32 reports whether got is within rel·scale of want.
func close32(got float32, want, scale, rel float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(float64(got))
	}
	return math.Abs(float64(got)-want) <= rel*scale+1e-37
}

// forLevels runs f as a subtest per kernel level and size.
func forLevels(t *testing.T, f func(t *testing.T, rng *rand.Rand, n int)) {
	for _, l := range levels() {
		for _, n := range vecSizes {
			t.Run(fmt.Sprintf("%s/n=%d", l, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(l)))
				atLevel(t, l, func() { f(t, rng, n) })
			})
		}
	}
}

func TestDot(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		a, b := randVec(rng, n), randVec(rng, n+3)
		var want, scale float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			scale += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if got := Dot(a, b); !close32(got, want, scale, 1e-6) {
			t.Errorf("Dot = %g, want %g", got, want)
		}
	})
}

func TestAxpyAddMulScale(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x, y, z := randVec(rng, n), randVec(rng, n), randVec(rng, n)
		const alpha = 0.37
		got := append([]float32(nil), y...)
		Axpy(got, alpha, x)
		for i := range got {
			// An FMA rounds once, a multiply and an add twice.
			want := float64(y[i]) + alpha*float64(x[i])
			if !close32(got[i], want, math.Abs(float64(y[i]))+math.Abs(alpha*float64(x[i])), 1.2e-7) {
				t.Fatalf("Axpy[%d] = %g, want %g", i, got[i], want)
			}
		}
		sum, prod := make([]float32, n), make([]float32, n)
		Add(sum, x, z)
		Mul(prod, x, z)
		for i := range sum {
			if sum[i] != x[i]+z[i] || prod[i] != x[i]*z[i] {
				t.Fatalf("Add/Mul[%d] = %g, %g; want %g, %g", i, sum[i], prod[i], x[i]+z[i], x[i]*z[i])
			}
		}
		sc := append([]float32(nil), x...)
		Scale(sc, 3.5)
		for i := range sc {
			if sc[i] != x[i]*3.5 {
				t.Fatalf("Scale[%d] = %g, want %g", i, sc[i], x[i]*3.5)
			}
		}
	})
}

func TestRMSNorm(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x, w := randVec(rng, n), randVec(rng, n)
		const eps = 1e-5
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		s := 1 / math.Sqrt(ss/float64(n)+eps)
		dst := make([]float32, n)
		RMSNorm(dst, x, w, eps)
		for i := range dst {
			want := float64(x[i]) * s * float64(w[i])
			if !close32(dst[i], want, math.Abs(want), 1e-6) {
				t.Fatalf("RMSNorm[%d] = %g, want %g", i, dst[i], want)
			}
		}
		RMSNorm(x, x, w, eps) // in place
		for i := range x {
			if x[i] != dst[i] {
				t.Fatalf("in-place RMSNorm[%d] = %g, want %g", i, x[i], dst[i])
			}
		}
	})
}

func TestSoftmax(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x := randVec(rng, n)
		for i := range x {
			x[i] *= 10
			if i%5 == 3 {
				x[i] = float32(math.Inf(-1)) // masked
			}
		}
		mx := math.Inf(-1)
		for _, v := range x {
			mx = max(mx, float64(v))
		}
		want := make([]float64, n)
		var sum float64
		for i, v := range x {
			want[i] = math.Exp(float64(v - float32(mx))) // x - max rounds in float32
			sum += want[i]
		}
		Softmax(x)
		for i := range x {
			if !close32(x[i], want[i]/sum, want[i]/sum, 2e-6) {
				t.Fatalf("Softmax[%d] = %g, want %g", i, x[i], want[i]/sum)
			}
		}
	})
}

func TestActivations(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x := randVec(rng, n)
		for i := range x {
			x[i] *= 6
		}
		if n > 8 { // extremes
			x[0], x[1], x[2], x[3] = -100, 100, -87.5, 89
		}
		silu, gelu := make([]float32, n), make([]float32, n)
		SiLU(silu, x)
		GELU(gelu, x)
		for i, v := range x {
			f := float64(v)
			ws := f / (1 + math.Exp(-f))
			wg := 0.5 * f * (1 + math.Tanh(0.7978845608028654*(f+0.044715*f*f*f)))
			if !close32(silu[i], ws, math.Abs(ws)+1e-30, 3e-6) {
				t.Errorf("SiLU(%g) = %g, want %g", v, silu[i], ws)
			}
			// Near x = -5 GELU cancels: allow 3e-6 of |x| absolute.
			if !close32(gelu[i], wg, math.Abs(wg)+math.Abs(f)*1e-1, 3e-6) {
				t.Errorf("GELU(%g) = %g, want %g", v, gelu[i], wg)
			}
		}
	})
}

func TestMax(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		x := randVec(rng, n)
		want := float32(math.Inf(-1))
		for _, v := range x {
			want = max(want, v)
		}
		if got := Max(x); got != want {
			t.Errorf("Max = %g, want %g", got, want)
		}
	})
}

func TestToF32(t *testing.T) {
	forLevels(t, func(t *testing.T, rng *rand.Rand, n int) {
		for _, dt := range []compute.DType{compute.BF16, compute.F16, compute.F32} {
			es := dt.Size()
			src := make([]byte, 2+n*es)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			row := src[2:] // misaligned
			dst := make([]float32, n)
			ToF32(dst, row, dt)
			for i := range dst {
				var want float32
				switch dt {
				case compute.BF16:
					want = half.BF16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
				case compute.F16:
					want = half.F16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
				case compute.F32:
					want = math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
				}
				// Compare bits, except that a NaN's payload may be quietened.
				if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
					t.Fatalf("%s: ToF32[%d] = %#x, want %#x", dt, i, math.Float32bits(dst[i]), math.Float32bits(want))
				}
			}
		}
	})
}

func TestStreamRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	pool := NewPool(3)
	defer pool.Close()
	buf := make([]byte, 3*streamChunk+777)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var want uint64
	for _, l := range levels() {
		var got uint64
		atLevel(t, l, func() { got = StreamRead(buf, pool) })
		if l == levelGeneric {
			want = got
		} else if got != want {
			t.Errorf("%s: StreamRead = %#x, generic %#x", l, got, want)
		}
	}
}

// TestGroupedHeads checks that dotsGroup and axpysGroup give, bitwise, what
// dots and axpys give head by head, for groups of 1 to 9 heads (the 4- and
// 2-head kernels and the single head after them) and head sizes with and
// without a 64-value tail, over keys that lie a row of kv heads apart.
func TestGroupedHeads(t *testing.T) {
	for _, l := range levels() {
		t.Run(levelNames[l], func(t *testing.T) { atLevel(t, l, func() { testGroupedHeads(t) }) })
	}
}

func testGroupedHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, hd := range []int{16, 48, 64, 80, 96, 128, 256} {
		for _, g := range []int{1, 2, 3, 4, 5, 7, 8, 9} {
			for _, n := range []int{1, 2, 7, 33} {
				const kvh = 3
				stride, ld := kvh*hd, n+5
				q := randVec(rng, g*hd)
				k, v := randVec(rng, (n-1)*stride+hd), randVec(rng, (n-1)*stride+hd)
				w := randVec(rng, (g-1)*ld+n)
				got, want := make([]float32, (g-1)*ld+n), make([]float32, (g-1)*ld+n)
				dotsGroup(got, ld, q, g, k, stride, n)
				for h := range g {
					dots(want[h*ld:h*ld+n], q[h*hd:(h+1)*hd], k, stride)
				}
				og, ow := randVec(rng, g*hd), make([]float32, g*hd)
				copy(ow, og)
				axpysGroup(og, w, ld, g, v, stride, n)
				for h := range g {
					axpys(ow[h*hd:(h+1)*hd], w[h*ld:h*ld+n], v, stride)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("hd %d, %d heads, %d keys: score %d = %g, dots %g", hd, g, n, i, got[i], want[i])
					}
				}
				for i := range ow {
					if math.Float32bits(og[i]) != math.Float32bits(ow[i]) {
						t.Fatalf("hd %d, %d heads, %d values: out %d = %g, axpys %g", hd, g, n, i, og[i], ow[i])
					}
				}
			}
		}
	}
}
