package cpu

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.SSMScanner = (*Backend)(nil)

// defaultSSMChunk is the number of time steps the chunked scan handles as
// one block. Within a block the work grows with its square; across blocks
// only the state is carried.
const defaultSSMChunk = 64

// ssmJob is one SSMScan call, split over the pool by heads.
type ssmJob struct {
	y, x, dt, b, c, st []float32
	a, d, bias         []float32
	p                  *compute.SSM
	n, q, pieces       int
	scratch            [][]float32 // per piece: time steps, decays and Δ·x of one block
}

// SSMScan implements compute.SSMScanner.
func (b *Backend) SSMScan(y, x, dt, bm, cm, state *compute.Tensor, p *compute.SSM) {
	b.note("SSMScan", y, x, state)
	if b.stopped() {
		return
	}
	hp, gn := p.Heads*p.HeadDim, p.Groups*p.StateSize
	n := x.Rows()
	if x.Cols() != hp || y.Cols() != hp || dt.Cols() != p.Heads || bm.Cols() != gn || cm.Cols() != gn ||
		state.Len() != hp*p.StateSize || p.Groups <= 0 || p.Heads%p.Groups != 0 {
		panic(fmt.Sprintf("ssm scan: shapes x %v y %v dt %v b %v c %v state %v do not fit %d heads × %d, %d groups × %d",
			x.Shape, y.Shape, dt.Shape, bm.Shape, cm.Shape, state.Shape, p.Heads, p.HeadDim, p.Groups, p.StateSize))
	}
	j := &b.ssm
	q := b.ssmChunk
	if q <= 0 {
		q = defaultSSMChunk
	}
	*j = ssmJob{
		y: f32(y), x: f32(x), dt: f32(dt), b: f32(bm), c: f32(cm), st: f32(state),
		a: f32(b.asF32(p.A)), d: f32(b.asF32(p.D)), bias: f32(b.asF32(p.DTBias)),
		p: p, n: n, q: min(q, n), scratch: j.scratch,
	}
	// A decode step of a small layer is not worth waking the workers.
	j.pieces = min(p.Heads, attnChunks)
	if n*hp*p.StateSize < 1<<15 {
		j.pieces = 1
	}
	need := 2*j.q + j.q*p.HeadDim
	if len(j.scratch) < j.pieces {
		j.scratch = append(j.scratch, make([][]float32, j.pieces-len(j.scratch))...)
	}
	for i := range j.pieces {
		if cap(j.scratch[i]) < need {
			j.scratch[i] = make([]float32, need)
		}
	}
	b.pool.Run(j.pieces, b.ssmFunc)
}

// piece scans the heads of piece i.
func (j *ssmJob) piece(i int) {
	lo, hi := i*j.p.Heads/j.pieces, (i+1)*j.p.Heads/j.pieces
	for h := lo; h < hi; h++ {
		if j.n == 1 {
			j.step(h)
			continue
		}
		for t0 := 0; t0 < j.n; t0 += j.q {
			j.block(h, t0, min(t0+j.q, j.n), j.scratch[i])
		}
	}
}

// softplus is log(1 + eˣ), returning x itself above 20 as PyTorch does.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// timeStep returns Δ for head h at row t.
func (j *ssmJob) timeStep(h, t int) float32 {
	d := softplus(j.dt[t*j.p.Heads+h] + j.bias[h])
	return min(max(d, j.p.DTMin), j.p.DTMax)
}

// step is the recurrence for one row:
// h = exp(Δ·A)·h + Δ·x ⊗ B, y = h·C + D·x.
func (j *ssmJob) step(h int) {
	p := j.p
	hd, ns := p.HeadDim, p.StateSize
	g := h / (p.Heads / p.Groups)
	delta := j.timeStep(h, 0)
	decay := float32(math.Exp(float64(delta * j.a[h])))
	bv, cv := j.b[g*ns:(g+1)*ns], j.c[g*ns:(g+1)*ns]
	xs, ys := j.x[h*hd:(h+1)*hd], j.y[h*hd:(h+1)*hd]
	st := j.st[h*hd*ns : (h+1)*hd*ns]
	for i, xv := range xs {
		row := st[i*ns : (i+1)*ns]
		Scale(row, decay)
		Axpy(row, delta*xv, bv)
		ys[i] = Dot(row, cv) + j.d[h]*xv
	}
}

// block runs rows [t0, t1) of head h in the chunked (SSD) form. With
// S_t = Σ_{s≤t} Δ_s·A the decay accumulated within the block:
//
//	y_t = exp(S_t)·(h₀·C_t) + Σ_{s≤t} exp(S_t − S_s)·(C_t·B_s)·Δ_s·x_s + D·x_t
//	h₁  = exp(S_last)·h₀ + Σ_s exp(S_last − S_s)·Δ_s·x_s ⊗ B_s
//
// where h₀ is the state the block starts from.
func (j *ssmJob) block(h, t0, t1 int, scratch []float32) {
	p := j.p
	hd, ns, hp, gn := p.HeadDim, p.StateSize, p.Heads*p.HeadDim, p.Groups*p.StateSize
	g := h / (p.Heads / p.Groups)
	l := t1 - t0
	cum, w, xdt := scratch[:l], scratch[j.q:j.q+l], scratch[2*j.q:2*j.q+l*hd]
	var s float32
	for k := range l {
		delta := j.timeStep(h, t0+k)
		s += delta * j.a[h]
		cum[k] = s
		xk := j.x[(t0+k)*hp+h*hd : (t0+k)*hp+(h+1)*hd]
		xd := xdt[k*hd : (k+1)*hd]
		for i, v := range xk {
			xd[i] = v * delta
		}
	}
	st := j.st[h*hd*ns : (h+1)*hd*ns]
	for k := range l {
		t := t0 + k
		ct := j.c[t*gn+g*ns : t*gn+(g+1)*ns]
		xt := j.x[t*hp+h*hd : t*hp+(h+1)*hd]
		yt := j.y[t*hp+h*hd : t*hp+(h+1)*hd]
		// The state carried into the block, decayed to t, and the skip.
		out := float32(math.Exp(float64(cum[k])))
		for i := range yt {
			yt[i] = out*Dot(st[i*ns:(i+1)*ns], ct) + j.d[h]*xt[i]
		}
		// The block's own inputs, weighted like causal attention.
		for r := 0; r <= k; r++ {
			bs := j.b[(t0+r)*gn+g*ns : (t0+r)*gn+(g+1)*ns]
			w[r] = float32(math.Exp(float64(cum[k]-cum[r]))) * Dot(ct, bs)
		}
		for r := 0; r <= k; r++ {
			Axpy(yt, w[r], xdt[r*hd:(r+1)*hd])
		}
	}
	// Carry the state to the end of the block.
	last := cum[l-1]
	for r := range l {
		w[r] = float32(math.Exp(float64(last - cum[r])))
	}
	decay := float32(math.Exp(float64(last)))
	for i := range hd {
		row := st[i*ns : (i+1)*ns]
		Scale(row, decay)
		for r := range l {
			bs := j.b[(t0+r)*gn+g*ns : (t0+r)*gn+(g+1)*ns]
			Axpy(row, w[r]*xdt[r*hd+i], bs)
		}
	}
}
