package cpu

import (
	"math"

	"github.com/lem-engine/lem/compute"
)

var _ compute.DeltaRuler = (*Backend)(nil)

// deltaChunk is the number of rows the chunked form of the delta rule
// folds into the state at once (the reference implementation's chunk).
const deltaChunk = 64

// deltaJob is one DeltaRule call, split over the pool by value heads.
type deltaJob struct {
	dst, qkv, a, b, state []float32
	aLog, dtBias          []float32
	r                     *compute.DeltaRule
	n, parts              int
	scratch               []deltaScratch // one per part
}

// deltaScratch holds one worker's buffers for a chunk of c rows; matrices
// are row-major with c, not deltaChunk, as their row length.
type deltaScratch struct {
	pool     *Pool     // single-threaded, for the chunk's matrix products
	q, k     []float32 // [c, KeyDim]: normalised queries and keys
	g, beta  []float32 // [c]: cumulative log decay, update strength
	kk, qk   []float32 // [c, c]: k_i·k_j, q_i·k_j
	dm, t    []float32 // [c, c]: e^(G_i−G_j); (I + L)⁻¹
	bv, kd   []float32 // [ValueDim, c], [KeyDim, c]: (β⊙V)ᵀ, (β⊙e^G⊙K)ᵀ
	u, w, ws []float32 // [c, ValueDim], [c, KeyDim], [c, ValueDim]
	xo, so   []float32 // [c, KeyDim+c], [ValueDim, KeyDim+c]
	o        []float32 // [c, ValueDim]
	ut, kt   []float32 // [ValueDim, c], [KeyDim, c]: Uᵀ, (e^(G_last−G)⊙K)ᵀ
	ns       []float32 // [ValueDim, KeyDim]
}

func (s *deltaScratch) grow(dk, dv int) {
	const c = deltaChunk
	if len(s.q) >= c*dk && len(s.u) >= c*dv {
		return
	}
	f := func(n int) []float32 { return make([]float32, n) }
	if s.pool == nil {
		s.pool = NewPool(1)
	}
	s.q, s.k, s.g, s.beta = f(c*dk), f(c*dk), f(c), f(c)
	s.kk, s.qk, s.dm, s.t = f(c*c), f(c*c), f(c*c), f(c*c)
	s.bv, s.kd = f(dv*c), f(dk*c)
	s.u, s.w, s.ws = f(c*dv), f(c*dk), f(c*dv)
	s.xo, s.so, s.o = f(c*(dk+c)), f(dv*(dk+c)), f(c*dv)
	s.ut, s.kt, s.ns = f(dv*c), f(dk*c), f(dv*dk)
}

// DeltaRule implements compute.DeltaRuler. Value heads are split across
// the pool. A single row takes the recurrent step; longer inputs go through
// the chunked (WY) form, deltaChunk rows at a time.
func (b *Backend) DeltaRule(dst, qkv, a, bt, state *compute.Tensor, r *compute.DeltaRule) {
	b.note("DeltaRule", dst, qkv, state)
	if b.stopped() {
		return
	}
	j := &b.delta
	*j = deltaJob{
		dst: f32(dst), qkv: f32(qkv), a: f32(a), b: f32(bt), state: f32(state),
		aLog: f32(r.ALog), dtBias: f32(r.DtBias), r: r,
		n: qkv.Rows(), scratch: j.scratch,
	}
	j.parts = min(r.ValueHeads, b.threads)
	if len(j.scratch) < j.parts {
		j.scratch = make([]deltaScratch, j.parts)
	}
	for i := range j.parts {
		j.scratch[i].grow(r.KeyDim, r.ValueDim)
	}
	if j.n*r.ValueHeads*r.KeyDim*r.ValueDim < 1<<14 {
		for p := range j.parts {
			j.part(p) // too little work to wake the workers
		}
		return
	}
	b.pool.Run(j.parts, b.deltaFunc)
}

// part runs the value heads of part p.
func (j *deltaJob) part(p int) {
	s := &j.scratch[p]
	vh := j.r.ValueHeads
	for h := p * vh / j.parts; h < (p+1)*vh/j.parts; h++ {
		for t0 := 0; t0 < j.n; t0 += deltaChunk {
			c := min(deltaChunk, j.n-t0)
			j.load(s, h, t0, c)
			if c == 1 {
				j.step(s, h, t0)
			} else {
				j.chunk(s, h, t0, c)
			}
		}
	}
}

// load fills s with the normalised queries and keys, the cumulative log
// decays and the update strengths of value head h for rows t0 … t0+c-1.
func (j *deltaJob) load(s *deltaScratch, h, t0, c int) {
	r := j.r
	dk, w := r.KeyDim, r.Width()
	kh := r.KeyHead(h)
	rate := -float32(math.Exp(float64(j.aLog[h])))
	var sum float32
	bscale := r.BetaScale()
	for i := range c {
		row := j.qkv[(t0+i)*w:]
		q, k := s.q[i*dk:(i+1)*dk], s.k[i*dk:(i+1)*dk]
		copy(q, row[kh*dk:])
		copy(k, row[(r.KeyHeads+kh)*dk:])
		l2norm(q, r.NormEps, r.Scale)
		l2norm(k, r.NormEps, 1)
		at := (t0+i)*r.ValueHeads + h
		sum += rate * softplus(j.a[at]+j.dtBias[h])
		s.g[i] = sum
		s.beta[i] = bscale * sigmoid(j.b[at])
	}
}

// value returns the value of head h in row t.
func (j *deltaJob) value(h, t int) []float32 {
	r := j.r
	o := t*r.Width() + 2*r.KeyHeads*r.KeyDim + h*r.ValueDim
	return j.qkv[o : o+r.ValueDim]
}

// out returns the output of head h in row t.
func (j *deltaJob) out(h, t int) []float32 {
	dv := j.r.ValueDim
	o := (t*j.r.ValueHeads + h) * dv
	return j.dst[o : o+dv]
}

// step folds one row into the state of head h: the recurrence as written,
// with the decay applied while the state is read. Each row y of Sᵀ is
// independent of the others, so the state is read and written once.
//
//	u = β·(v − e^g·Sᵀk),  out = e^g·Sᵀq + (q·k)·u,  S ← e^g·S + k ⊗ u
func (j *deltaJob) step(s *deltaScratch, h, t int) {
	dk, dv := j.r.KeyDim, j.r.ValueDim
	st := j.state[h*dk*dv : (h+1)*dk*dv]
	q, k := s.q[:dk], s.k[:dk]
	decay := float32(math.Exp(float64(s.g[0])))
	beta, qk := s.beta[0], Dot(q, k)
	v, o := j.value(h, t), j.out(h, t)
	for y := range dv {
		row := st[y*dk : (y+1)*dk]
		u := beta * (v[y] - decay*Dot(row, k))
		o[y] = decay*Dot(row, q) + qk*u
		Scale(row, decay)
		Axpy(row, u, k)
	}
}

// chunk folds c rows into the state of head h at once. With G the
// cumulative log decay within the chunk and L the strictly lower
// triangular matrix L[i][j] = β_i·(k_i·k_j)·e^(G_i−G_j), the rows' value
// corrections solve a triangular system, T = (I + L)⁻¹:
//
//	U = T·(β⊙V) − T·(β⊙e^G⊙K)·S        (the corrected values)
//	out_i = e^(G_i)·Sᵀq_i + Σ_{j≤i} (q_i·k_j)·e^(G_i−G_j)·U_j
//	S ← e^(G_last)·S + Σ_j e^(G_last−G_j)·k_j ⊗ U_j
//
// which equals c recurrent steps, in matrix products.
func (j *deltaJob) chunk(s *deltaScratch, h, t0, c int) {
	dk, dv := j.r.KeyDim, j.r.ValueDim
	st := j.state[h*dk*dv : (h+1)*dk*dv] // Sᵀ: [dv, dk]
	q, k := s.q[:c*dk], s.k[:c*dk]
	mm := func(dst, x []float32, n, rows, cols int, w []float32) {
		MatMul(dst, x, n, F32Weights(rows, cols, w), s.pool)
	}
	kk, qk, dm, t := s.kk[:c*c], s.qk[:c*c], s.dm[:c*c], s.t[:c*c]
	mm(kk, k, c, c, dk, k)
	mm(qk, q, c, c, dk, k)
	for i := range c {
		for m := range c {
			dm[i*c+m] = 0
			if m <= i {
				dm[i*c+m] = float32(math.Exp(float64(s.g[i] - s.g[m])))
			}
		}
	}
	// T, row by row by forward substitution: T_i = −L_i − Σ_{m<i} L_im·T_m.
	for i := range c {
		ti := t[i*c : (i+1)*c]
		for m := range i {
			ti[m] = -s.beta[i] * kk[i*c+m] * dm[i*c+m]
		}
		// Ascending m: entry m still holds −L_im when row m is added.
		for m := 1; m < i; m++ {
			Axpy(ti[:m], ti[m], t[m*c:m*c+m])
		}
		ti[i] = 1
		clear(ti[i+1:])
	}
	// U = T·(β⊙V) − (T·(β⊙e^G⊙K))·S
	bv, kd := s.bv[:dv*c], s.kd[:dk*c]
	for m := range c {
		v, km := j.value(h, t0+m), k[m*dk:(m+1)*dk]
		for y, vy := range v {
			bv[y*c+m] = s.beta[m] * vy
		}
		f := s.beta[m] * float32(math.Exp(float64(s.g[m])))
		for x, kx := range km {
			kd[x*c+m] = f * kx
		}
	}
	u, w, ws := s.u[:c*dv], s.w[:c*dk], s.ws[:c*dv]
	mm(u, t, c, dv, c, bv)
	mm(w, t, c, dk, c, kd)
	mm(ws, w, c, dv, dk, st)
	Axpy(u, -1, ws)
	// Outputs, from the state before the chunk: [e^G⊙Q | QKᵀ⊙D]·[S; U].
	xw := dk + c
	xo, so := s.xo[:c*xw], s.so[:dv*xw]
	ut := s.ut[:dv*c]
	for i := range c {
		row := xo[i*xw : (i+1)*xw]
		copy(row, q[i*dk:(i+1)*dk])
		Scale(row[:dk], float32(math.Exp(float64(s.g[i]))))
		Mul(row[dk:], qk[i*c:(i+1)*c], dm[i*c:(i+1)*c])
		for y, uy := range u[i*dv : (i+1)*dv] {
			ut[y*c+i] = uy
		}
	}
	for y := range dv {
		copy(so[y*xw:], st[y*dk:(y+1)*dk])
		copy(so[y*xw+dk:(y+1)*xw], ut[y*c:(y+1)*c])
	}
	o := s.o[:c*dv]
	mm(o, xo, c, dv, xw, so)
	for i := range c {
		copy(j.out(h, t0+i), o[i*dv:(i+1)*dv])
	}
	// The state after the chunk: Sᵀ ← e^(G_last)·Sᵀ + Uᵀ·(e^(G_last−G)⊙K).
	last := s.g[c-1]
	kt := s.kt[:dk*c]
	for m := range c {
		f := float32(math.Exp(float64(last - s.g[m])))
		for x, kx := range k[m*dk : (m+1)*dk] {
			kt[x*c+m] = f * kx
		}
	}
	ns := s.ns[:dv*dk]
	mm(ns, ut, dv, dk, c, kt)
	Scale(st, float32(math.Exp(float64(last))))
	Axpy(st, 1, ns)
}

// l2norm scales x to unit length (with eps added to the squared length),
// times scale.
func l2norm(x []float32, eps, scale float32) {
	inv := float32(1/math.Sqrt(float64(Dot(x, x))+float64(eps))) * scale
	Scale(x, inv)
}
