package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// deltaCase is a delta-rule geometry with random inputs.
type deltaCase struct {
	kh, vh, dk, dv, n int
	tiled             bool // value head h reads key head h mod kh
	negEig            bool // β = 2σ(b)
	qkv, a, b         []float32
	aLog, dtBias      []float32
}

func newDeltaCase(kh, vh, dk, dv, n int, aLogLo, aLogHi float32, seed uint64) *deltaCase {
	r := rand.New(rand.NewPCG(seed, 7))
	rnd := func(n int, lo, hi float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float32()
		}
		return v
	}
	c := &deltaCase{kh: kh, vh: vh, dk: dk, dv: dv, n: n}
	c.qkv = rnd(n*(2*kh*dk+vh*dv), -1, 1)
	c.a = rnd(n*vh, -3, 3)
	c.b = rnd(n*vh, -3, 3)
	c.aLog = rnd(vh, aLogLo, aLogHi)
	c.dtBias = rnd(vh, -1, 1)
	return c
}

// reference runs the recurrence as the definition states it, in float64,
// and returns the outputs [n, vh·dv] and the final state Sᵀ [vh, dv, dk].
func (c *deltaCase) reference() (out, state []float64) {
	w := 2*c.kh*c.dk + c.vh*c.dv
	out = make([]float64, c.n*c.vh*c.dv)
	state = make([]float64, c.vh*c.dk*c.dv)
	scale := 1 / math.Sqrt(float64(c.dk))
	unit := func(x []float32, s float64) []float64 {
		var ss float64
		for _, e := range x {
			ss += float64(e) * float64(e)
		}
		inv := s / math.Sqrt(ss+1e-6)
		y := make([]float64, len(x))
		for i, e := range x {
			y[i] = float64(e) * inv
		}
		return y
	}
	for t := range c.n {
		row := c.qkv[t*w : (t+1)*w]
		for h := range c.vh {
			kh := h / (c.vh / c.kh)
			if c.tiled {
				kh = h % c.kh
			}
			q := unit(row[kh*c.dk:(kh+1)*c.dk], scale)
			k := unit(row[(c.kh+kh)*c.dk:(c.kh+kh+1)*c.dk], 1)
			v := row[2*c.kh*c.dk+h*c.dv : 2*c.kh*c.dk+(h+1)*c.dv]
			x := float64(c.a[t*c.vh+h] + c.dtBias[h])
			g := -math.Exp(float64(c.aLog[h])) * math.Log1p(math.Exp(x))
			beta := 1 / (1 + math.Exp(-float64(c.b[t*c.vh+h])))
			if c.negEig {
				beta *= 2
			}
			s := state[h*c.dk*c.dv : (h+1)*c.dk*c.dv] // s[y*dk+x] = S[x][y]
			for i := range s {
				s[i] *= math.Exp(g)
			}
			for y := range c.dv {
				var sk float64
				for x := range c.dk {
					sk += s[y*c.dk+x] * k[x]
				}
				d := beta * (float64(v[y]) - sk)
				for x := range c.dk {
					s[y*c.dk+x] += k[x] * d
				}
				var o float64
				for x := range c.dk {
					o += s[y*c.dk+x] * q[x]
				}
				out[(t*c.vh+h)*c.dv+y] = o
			}
		}
	}
	return out, state
}

// run feeds the rows to the backend in pieces of the given sizes and
// returns the outputs and the final state.
func (c *deltaCase) run(b *Backend, pieces []int) (out, state []float32) {
	w := 2*c.kh*c.dk + c.vh*c.dv
	vec := func(v []float32) *compute.Tensor {
		t := b.Alloc(compute.F32, len(v))
		b.Upload(t, v)
		return t
	}
	r := &compute.DeltaRule{
		KeyHeads: c.kh, ValueHeads: c.vh, KeyDim: c.dk, ValueDim: c.dv,
		ALog: vec(c.aLog), DtBias: vec(c.dtBias),
		Scale: float32(1 / math.Sqrt(float64(c.dk))), NormEps: 1e-6, Tiled: c.tiled, NegEigval: c.negEig,
	}
	st := b.Alloc(compute.F32, c.vh, c.dv, c.dk)
	out = make([]float32, c.n*c.vh*c.dv)
	at := 0
	for _, m := range pieces {
		qkv := b.Alloc(compute.F32, m, w)
		b.Upload(qkv, c.qkv[at*w:(at+m)*w])
		a := b.Alloc(compute.F32, m, c.vh)
		b.Upload(a, c.a[at*c.vh:(at+m)*c.vh])
		bt := b.Alloc(compute.F32, m, c.vh)
		b.Upload(bt, c.b[at*c.vh:(at+m)*c.vh])
		dst := b.Alloc(compute.F32, m, c.vh*c.dv)
		b.DeltaRule(dst, qkv, a, bt, st, r)
		b.Read(out[at*c.vh*c.dv:], dst)
		at += m
	}
	return out, f32(st)
}

func ones(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1
	}
	return p
}

func maxDiff[T float32 | float64](got []float32, want []T) float64 {
	var d float64
	for i := range got {
		e := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(e) {
			return math.Inf(1)
		}
		d = max(d, e)
	}
	return d
}

// TestDeltaRule checks the recurrent step and the chunked form against the
// recurrence computed in float64, and against each other: a prompt run in
// chunks must leave the state that token-at-a-time decoding leaves.
func TestDeltaRule(t *testing.T) {
	for _, tc := range []struct {
		name              string
		kh, vh, dk, dv, n int
		aLogLo, aLogHi    float32
		pieces            []int
		threads           int
		tiled, negEig     bool
	}{
		{"one head", 1, 1, 8, 8, 20, -1, 2, []int{20}, 1, false, false},
		{"grouped heads", 2, 4, 16, 16, 40, -1, 2, []int{40}, 2, false, false},
		{"tiled heads", 2, 6, 16, 16, 40, -1, 2, []int{33, 1, 6}, 2, true, false},
		{"several chunks", 2, 4, 16, 8, 150, -1, 2, []int{150}, 2, false, false},
		{"pieces across chunk ends", 2, 4, 16, 8, 150, -1, 2, []int{5, 70, 1, 1, 60, 13}, 2, false, false},
		{"slow decay", 1, 2, 32, 32, 130, -6, -4, []int{130}, 2, false, false},
		{"fast decay", 1, 2, 16, 16, 70, 2, 3, []int{70}, 2, false, false},
		{"pool", 4, 8, 64, 64, 80, -1, 2, []int{66, 1, 13}, 3, false, false},
		{"negative eigenvalues", 2, 4, 16, 16, 150, -1, 2, []int{70, 1, 66, 13}, 2, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDeltaCase(tc.kh, tc.vh, tc.dk, tc.dv, tc.n, tc.aLogLo, tc.aLogHi, 1)
			c.tiled, c.negEig = tc.tiled, tc.negEig
			wantOut, wantState := c.reference()
			b := New(tc.threads)
			chunkOut, chunkState := c.run(b, tc.pieces)
			stepOut, stepState := c.run(b, ones(tc.n))
			const tol = 2e-4
			for _, r := range []struct {
				name string
				d    float64
			}{
				{"chunked output vs reference", maxDiff(chunkOut, wantOut)},
				{"chunked state vs reference", maxDiff(chunkState, wantState)},
				{"step output vs reference", maxDiff(stepOut, wantOut)},
				{"step state vs reference", maxDiff(stepState, wantState)},
				{"chunked vs step state", maxDiff(chunkState, stepState)},
				{"chunked vs step output", maxDiff(chunkOut, stepOut)},
			} {
				if r.d > tol {
					t.Errorf("%s: max |Δ| = %.2e > %.0e", r.name, r.d, tol)
				}
			}
		})
	}
}

// BenchmarkDeltaRuleStep measures one decode step of a linear-attention
// layer of Qwen3-Next / Qwen3.5-9B geometry (16 key heads, 32 value heads
// of 128×128 states), and of a small one.
func BenchmarkDeltaRuleStep(b *testing.B) {
	for _, g := range []struct{ kh, vh, dk, dv int }{{16, 32, 128, 128}, {16, 16, 128, 128}} {
		b.Run(fmt.Sprintf("%dx%dx%dx%d", g.kh, g.vh, g.dk, g.dv), func(b *testing.B) {
			be := New(0)
			c := newDeltaCase(g.kh, g.vh, g.dk, g.dv, 1, -1, 2, 1)
			benchDelta(b, be, c, 1)
			b.SetBytes(int64(4 * g.vh * g.dk * g.dv))
		})
	}
}

// BenchmarkDeltaRulePrefill compares a 256-row prompt through the chunked
// form with the same rows fed one at a time.
func BenchmarkDeltaRulePrefill(b *testing.B) {
	const n = 256
	for _, mode := range []string{"chunked", "rows"} {
		b.Run(mode, func(b *testing.B) {
			be := New(0)
			c := newDeltaCase(16, 32, 128, 128, n, -1, 2, 1)
			rows := n
			if mode == "rows" {
				rows = 1
			}
			benchDelta(b, be, c, rows)
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// benchDelta runs c's first n rows per iteration, rows at a time.
func benchDelta(b *testing.B, be *Backend, c *deltaCase, rows int) {
	w := 2*c.kh*c.dk + c.vh*c.dv
	vec := func(v []float32) *compute.Tensor {
		t := be.Alloc(compute.F32, len(v))
		be.Upload(t, v)
		return t
	}
	r := &compute.DeltaRule{
		KeyHeads: c.kh, ValueHeads: c.vh, KeyDim: c.dk, ValueDim: c.dv,
		ALog: vec(c.aLog), DtBias: vec(c.dtBias),
		Scale: float32(1 / math.Sqrt(float64(c.dk))), NormEps: 1e-6,
	}
	st := be.Alloc(compute.F32, c.vh, c.dv, c.dk)
	var qkv, a, bt, dst []*compute.Tensor
	for at := 0; at < c.n; at += rows {
		q := be.Alloc(compute.F32, rows, w)
		be.Upload(q, c.qkv[at*w:(at+rows)*w])
		x := be.Alloc(compute.F32, rows, c.vh)
		be.Upload(x, c.a[at*c.vh:(at+rows)*c.vh])
		y := be.Alloc(compute.F32, rows, c.vh)
		be.Upload(y, c.b[at*c.vh:(at+rows)*c.vh])
		qkv, a, bt = append(qkv, q), append(a, x), append(bt, y)
		dst = append(dst, be.Alloc(compute.F32, rows, c.vh*c.dv))
	}
	be.DeltaRule(dst[0], qkv[0], a[0], bt[0], st, r) // grow the scratch
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range qkv {
			be.DeltaRule(dst[i], qkv[i], a[i], bt[i], st, r)
		}
	}
}
