package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// ssmCase is a random SSM layer and input sequence.
type ssmCase struct {
	p              compute.SSM
	a, d, bias     []float32
	x, dt, bm, cm  []float32
	n              int
	hp, gn, stateN int
}

func newSSMCase(n, heads, headDim, groups, stateSize int, dtMax float32) *ssmCase {
	r := rand.New(rand.NewPCG(3, 4))
	rnd := func(k int, lo, hi float32) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float32()
		}
		return v
	}
	c := &ssmCase{
		p:  compute.SSM{Heads: heads, HeadDim: headDim, Groups: groups, StateSize: stateSize, DTMin: 0, DTMax: dtMax},
		n:  n,
		hp: heads * headDim, gn: groups * stateSize, stateN: heads * headDim * stateSize,
	}
	c.a = rnd(heads, -4, -0.1)
	c.d = rnd(heads, -1, 1)
	c.bias = rnd(heads, -3, 1)
	c.x = rnd(n*c.hp, -1, 1)
	c.dt = rnd(n*heads, -2, 2)
	c.bm = rnd(n*c.gn, -1, 1)
	c.cm = rnd(n*c.gn, -1, 1)
	return c
}

// want computes the outputs by the recurrence, in float64.
func (c *ssmCase) want() []float64 {
	p := c.p
	hd, ns := p.HeadDim, p.StateSize
	st := make([]float64, c.stateN)
	y := make([]float64, c.n*c.hp)
	for t := range c.n {
		for h := range p.Heads {
			g := h / (p.Heads / p.Groups)
			raw := float64(c.dt[t*p.Heads+h] + c.bias[h])
			delta := math.Log1p(math.Exp(raw))
			delta = min(max(delta, float64(p.DTMin)), float64(p.DTMax))
			decay := math.Exp(delta * float64(c.a[h]))
			for i := range hd {
				xv := float64(c.x[t*c.hp+h*hd+i])
				var out float64
				for k := range ns {
					s := &st[(h*hd+i)*ns+k]
					*s = decay**s + delta*xv*float64(c.bm[t*c.gn+g*ns+k])
					out += *s * float64(c.cm[t*c.gn+g*ns+k])
				}
				y[t*c.hp+h*hd+i] = out + float64(c.d[h])*xv
			}
		}
	}
	return y
}

// run feeds the sequence to b in calls of the given row counts and returns
// the outputs.
func (c *ssmCase) run(b *Backend, calls []int) []float32 {
	up := func(v []float32, shape ...int) *compute.Tensor {
		t := b.Alloc(compute.F32, shape...)
		b.Upload(t, v)
		return t
	}
	p := c.p
	p.A, p.D, p.DTBias = up(c.a, p.Heads), up(c.d, p.Heads), up(c.bias, p.Heads)
	state := b.Alloc(compute.F32, p.Heads, p.HeadDim*p.StateSize)
	out := make([]float32, 0, c.n*c.hp)
	at := 0
	for _, m := range calls {
		x := up(c.x[at*c.hp:(at+m)*c.hp], m, c.hp)
		dt := up(c.dt[at*p.Heads:(at+m)*p.Heads], m, p.Heads)
		bm := up(c.bm[at*c.gn:(at+m)*c.gn], m, c.gn)
		cm := up(c.cm[at*c.gn:(at+m)*c.gn], m, c.gn)
		y := b.Alloc(compute.F32, m, c.hp)
		b.SSMScan(y, x, dt, bm, cm, state, &p)
		out = append(out, f32(y)...)
		at += m
	}
	return out
}

// TestSSMScan checks the chunked scan and the recurrent step against the
// recurrence computed in float64, fed whole, token by token and in pieces
// that cut blocks at every offset.
func TestSSMScan(t *testing.T) {
	ones := func(n int) []int {
		v := make([]int, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	for _, tc := range []struct {
		name                          string
		n, heads, hd, groups, ns, blk int
		dtMax                         float32
		calls                         []int
	}{
		{"one block", 7, 2, 4, 1, 8, 0, float32(math.Inf(1)), []int{7}},
		{"blocks of 5", 23, 4, 3, 2, 5, 5, float32(math.Inf(1)), []int{23}},
		{"token by token", 23, 4, 3, 2, 5, 5, float32(math.Inf(1)), ones(23)},
		{"pieces", 23, 4, 3, 2, 5, 5, float32(math.Inf(1)), []int{3, 1, 9, 1, 6, 3}},
		{"clamped time step", 19, 4, 8, 4, 16, 4, 0.05, []int{10, 1, 8}},
		{"parallel heads", 150, 24, 16, 2, 32, 0, float32(math.Inf(1)), []int{100, 1, 1, 48}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSSMCase(tc.n, tc.heads, tc.hd, tc.groups, tc.ns, tc.dtMax)
			want := c.want()
			b := New(3)
			b.ssmChunk = tc.blk
			got := c.run(b, tc.calls)
			var worst float64
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i])-want[i]))
			}
			if worst > 1e-4 || math.IsNaN(worst) {
				t.Errorf("max |Δy| = %.2e", worst)
			}
		})
	}
}

// ssmBenchShape is a Mamba2-2.7B-sized layer: 80 heads of 64 channels,
// state size 128, one group.
var ssmBenchShape = struct{ heads, hd, groups, ns int }{80, 64, 1, 128}

// BenchmarkSSMStep measures the decode step of one SSM layer; the figure
// counts the bytes of state read and written. It must not allocate.
func BenchmarkSSMStep(b *testing.B) {
	s := ssmBenchShape
	for _, th := range benchThreads {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) {
			c := newSSMCase(1, s.heads, s.hd, s.groups, s.ns, float32(math.Inf(1)))
			be := New(th)
			defer be.pool.Close()
			c.run(be, []int{1}) // allocate the job's scratch
			up := func(v []float32, shape ...int) *compute.Tensor {
				t := be.Alloc(compute.F32, shape...)
				be.Upload(t, v)
				return t
			}
			p := c.p
			p.A, p.D, p.DTBias = up(c.a, p.Heads), up(c.d, p.Heads), up(c.bias, p.Heads)
			x, dt := up(c.x, 1, c.hp), up(c.dt, 1, p.Heads)
			bm, cm := up(c.bm, 1, c.gn), up(c.cm, 1, c.gn)
			y := be.Alloc(compute.F32, 1, c.hp)
			state := be.Alloc(compute.F32, p.Heads, p.HeadDim*p.StateSize)
			b.SetBytes(int64(2 * 4 * c.stateN))
			b.ReportAllocs()
			for b.Loop() {
				be.SSMScan(y, x, dt, bm, cm, state, &p)
			}
		})
	}
}

// BenchmarkSSMPrefill measures a 256-token prefill of one SSM layer in the
// chunked form against the baseline of 256 recurrent steps.
func BenchmarkSSMPrefill(b *testing.B) {
	s := ssmBenchShape
	const n = 256
	c := newSSMCase(n, s.heads, s.hd, s.groups, s.ns, float32(math.Inf(1)))
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	for _, mode := range []struct {
		name  string
		calls []int
	}{{"chunked", []int{n}}, {"steps", ones}} {
		b.Run(mode.name, func(b *testing.B) {
			be := New(0)
			defer be.pool.Close()
			for b.Loop() {
				c.run(be, mode.calls)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
