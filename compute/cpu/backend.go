package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
)

// Backend is the CPU implementation of compute.Backend. Float32 tensors are
// []float32, stored weights are []byte in their dtype, I32 tensors are []int32.
type Backend struct {
	threads int
	pool    *Pool

	trace func(op string, dst, x, y *compute.Tensor) // SetTrace; nil: none

	// RoPE scratch: the rotation of position ropePos under ropeOf (nil:
	// none yet). The layers of a decode step share a position and mostly
	// a Rope, so they reuse it.
	cos, sin []float32
	ropeOf   *compute.Rope
	ropePos  int32

	attn      attnJob
	attnFunc  func(int) // b.attn.chunk, bound once
	paged     pagedJob
	pagedFunc func(int)     // b.paged.chunk, bound once
	widenFunc func(int)     // b.paged.widen, bound once
	poolType  compute.DType // element type of NewKVPool's pools (SetKVPoolType)

	moe moeWork // Route and ApplyExperts scratch

	ssm      ssmJob
	ssmFunc  func(int) // b.ssm.piece, bound once
	ssmChunk int       // block length of the chunked scan; 0: defaultSSMChunk

	conv     convJob
	convFunc func(int) // b.conv.piece, bound once

	delta     deltaJob
	deltaFunc func(int) // b.delta.part, bound once

	glu     gluJob
	gluFunc func(int) // b.glu.chunk, bound once

	agemm     attnGEMMJob
	agemmFunc func(int) // b.agemm.softmax, bound once

	arena packArena // memory of the packed weights

	// stop, when set, abandons the expensive operations (SetInterrupt).
	stop *atomic.Bool
}

// New returns a CPU backend using the given number of threads (0: all cores).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	b := &Backend{threads: threads, pool: NewPool(threads), poolType: compute.F32}
	b.attnFunc = b.attn.chunk
	b.pagedFunc = b.paged.chunk
	b.widenFunc = b.paged.widen
	b.ssmFunc = b.ssm.piece
	b.convFunc = b.conv.piece
	b.deltaFunc = b.delta.part
	b.gluFunc = b.glu.chunk
	b.agemmFunc = b.agemm.softmax
	return b
}

var (
	_ compute.Backend        = (*Backend)(nil)
	_ compute.Interruptible  = (*Backend)(nil)
	_ compute.Threader       = (*Backend)(nil)
	_ compute.BandwidthMeter = (*Backend)(nil)
)

// SetInterrupt implements compute.Interruptible. The matrix products,
// attention, gated activations, experts, recurrences and convolutions
// check stop when they start; the other operations are cheap and run.
func (b *Backend) SetInterrupt(stop *atomic.Bool) { b.stop = stop }

// stopped reports whether the operation starting now is to be skipped.
func (b *Backend) stopped() bool { return b.stop != nil && b.stop.Load() }

// Name implements compute.Backend.
func (b *Backend) Name() string { return fmt.Sprintf("cpu (%d threads, %s)", b.threads, Level()) }

// Threads implements compute.Threader: the number of worker threads.
func (b *Backend) Threads() int { return b.threads }

func f32(t *compute.Tensor) []float32 { return t.Buf.([]float32) }

// Weight implements compute.Backend. The data is used in place.
func (b *Backend) Weight(dtype compute.DType, shape []int, data []byte) (*compute.Tensor, error) {
	t := &compute.Tensor{DType: dtype, Shape: append([]int(nil), shape...)}
	if !dtype.Known() || dtype == compute.I32 {
		return nil, fmt.Errorf("weight dtype %s not supported on the CPU", dtype)
	}
	rb, err := dtype.RowBytes(t.Cols())
	if err != nil {
		return nil, fmt.Errorf("weight of shape %v: %w", shape, err)
	}
	if want := t.Rows() * rb; len(data) != want {
		return nil, fmt.Errorf("weight of shape %v %s: have %d bytes, want %d", shape, dtype, len(data), want)
	}
	t.Buf = data
	if len(shape) == 2 && packable(dtype, t.Rows(), t.Cols()) {
		if p := newPackedWeight(&b.arena, dtype, t.Rows(), t.Cols(), data, b.threads); p != nil {
			t.Buf = p
		}
	}
	return t, nil
}

// Alloc implements compute.Backend.
func (b *Backend) Alloc(dtype compute.DType, shape ...int) *compute.Tensor {
	t := &compute.Tensor{DType: dtype, Shape: append([]int(nil), shape...)}
	switch dtype {
	case compute.F32:
		t.Buf = make([]float32, t.Len())
	case compute.I32:
		t.Buf = make([]int32, t.Len())
	default:
		t.Buf = make([]byte, t.Len()*dtype.Size())
	}
	return t
}

// Free implements compute.Backend; the garbage collector reclaims CPU memory.
func (b *Backend) Free(t *compute.Tensor) { t.Buf = nil }

// Upload implements compute.Backend.
func (b *Backend) Upload(dst *compute.Tensor, src []float32) { copy(f32(dst), src) }

// UploadInts implements compute.Backend.
func (b *Backend) UploadInts(dst *compute.Tensor, src []int32) { copy(dst.Buf.([]int32), src) }

// Read implements compute.Backend.
func (b *Backend) Read(dst []float32, src *compute.Tensor) { copy(dst, f32(src)) }

// View implements compute.Backend.
func (b *Backend) View(t *compute.Tensor, from, to int) *compute.Tensor {
	cols := t.Cols()
	shape := append([]int{to - from}, t.Shape[1:]...)
	v := &compute.Tensor{DType: t.DType, Shape: shape}
	switch buf := t.Buf.(type) {
	case []float32:
		v.Buf = buf[from*cols : to*cols]
	case []int32:
		v.Buf = buf[from*cols : to*cols]
	case []byte:
		rb, _ := t.DType.RowBytes(cols)
		v.Buf = buf[from*rb : to*rb]
	case *packedWeight:
		v.Buf = buf.rowsBytes(from, to)
	}
	return v
}

// row decodes row r of a weight or activation tensor into dst.
func row(dst []float32, t *compute.Tensor, r int) {
	n := t.Cols()
	switch buf := t.Buf.(type) {
	case []float32:
		copy(dst, buf[r*n:(r+1)*n])
	case []byte:
		if t.DType.Quantized() {
			rb, _ := t.DType.RowBytes(n)
			quant.Dequantize(dst[:n], buf[r*rb:(r+1)*rb], t.DType)
			return
		}
		es := t.DType.Size()
		ToF32(dst[:n], buf[r*n*es:(r+1)*n*es], t.DType)
	case *packedWeight:
		buf.dequantRow(dst[:n], r)
	}
}

// Embed implements compute.Backend.
func (b *Backend) Embed(dst, table, ids *compute.Tensor) {
	b.note("Embed", dst, ids, nil)
	d := f32(dst)
	cols := table.Cols()
	for i, id := range ids.Buf.([]int32) {
		row(d[i*cols:(i+1)*cols], table, int(id))
	}
}

// MatMul implements compute.Backend.
func (b *Backend) MatMul(dst, x, w *compute.Tensor) {
	b.note("MatMul", dst, x, w)
	if b.stopped() {
		return
	}
	n, k := x.Rows(), x.Cols()
	if w.Cols() != k {
		panic(fmt.Sprintf("matmul: x has %d columns, w has %d", k, w.Cols()))
	}
	ws := Weights{DType: w.DType, Rows: w.Rows(), Cols: k}
	switch buf := w.Buf.(type) {
	case []byte:
		ws.Data = buf
	case []float32:
		ws = F32Weights(ws.Rows, k, buf)
	case *packedWeight:
		ws = buf.weights()
	}
	MatMul(f32(dst), f32(x), n, ws, b.pool)
}

// broadcast applies the vector operation op to a and b, repeating b's
// single row when it has one.
func broadcast(dst, a, bt *compute.Tensor, op func(dst, a, b []float32)) {
	d, as, bs := f32(dst), f32(a), f32(bt)
	if len(bs) == len(as) {
		op(d, as, bs)
		return
	}
	c := len(bs)
	for i := 0; i < len(as); i += c {
		e := min(i+c, len(as))
		op(d[i:e], as[i:e], bs[:e-i])
	}
}

// Add implements compute.Backend.
func (b *Backend) Add(dst, x, y *compute.Tensor) {
	b.note("Add", dst, x, y)
	broadcast(dst, x, b.asF32(y), Add)
}

// Mul implements compute.Backend.
func (b *Backend) Mul(dst, x, y *compute.Tensor) {
	b.note("Mul", dst, x, y)
	broadcast(dst, x, b.asF32(y), Mul)
}

// asF32 returns t as an F32 tensor, widening stored weights (small vectors
// such as biases and norm weights).
func (b *Backend) asF32(t *compute.Tensor) *compute.Tensor {
	if t.DType == compute.F32 {
		return t
	}
	out := &compute.Tensor{DType: compute.F32, Shape: t.Shape, Buf: make([]float32, t.Len())}
	buf := out.Buf.([]float32)
	for r := range t.Rows() {
		row(buf[r*t.Cols():(r+1)*t.Cols()], t, r)
	}
	return out
}

// Scale implements compute.Backend.
func (b *Backend) Scale(dst, x *compute.Tensor, s float32) {
	b.note("Scale", dst, x, nil)
	d, xs := f32(dst), f32(x)
	d = d[:len(xs)]
	if len(d) > 0 && &d[0] != &xs[0] {
		copy(d, xs)
	}
	Scale(d, s)
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(dst, x, w *compute.Tensor, eps, offset float32) {
	b.note("RMSNorm", dst, x, w)
	d, xs := f32(dst), f32(x)
	g := x.Cols()
	var ws []float32
	if w != nil {
		ws = f32(b.asF32(w))
		g = len(ws)
	}
	for lo := 0; lo < len(xs); lo += g {
		v := xs[lo : lo+g]
		var ss float64
		for _, e := range v {
			ss += float64(e) * float64(e)
		}
		inv := float32(1 / math.Sqrt(ss/float64(g)+float64(eps)))
		o := d[lo : lo+g]
		for i, e := range v {
			if ws != nil {
				o[i] = e * inv * (ws[i] + offset)
			} else {
				o[i] = e * inv
			}
		}
	}
}

// LayerNorm implements compute.Backend.
func (b *Backend) LayerNorm(dst, x, w, bias *compute.Tensor, eps float32) {
	b.note("LayerNorm", dst, x, w)
	d, xs := f32(dst), f32(x)
	ws := f32(b.asF32(w))
	var bs []float32
	if bias != nil {
		bs = f32(b.asF32(bias))
	}
	g := x.Cols()
	for lo := 0; lo < len(xs); lo += g {
		v := xs[lo : lo+g]
		var mean, vr float64
		for _, e := range v {
			mean += float64(e)
		}
		mean /= float64(g)
		for _, e := range v {
			vr += (float64(e) - mean) * (float64(e) - mean)
		}
		inv := 1 / math.Sqrt(vr/float64(g)+float64(eps))
		for i, e := range v {
			o := float32((float64(e)-mean)*inv) * ws[i]
			if bs != nil {
				o += bs[i]
			}
			d[lo+i] = o
		}
	}
}

func activate(x float32, act compute.Activation) float32 {
	switch act {
	case compute.SiLU:
		return x / (1 + float32(math.Exp(float64(-x))))
	case compute.GELUTanh:
		const c = 0.7978845608028654 // sqrt(2/pi)
		xf := float64(x)
		return float32(0.5 * xf * (1 + math.Tanh(c*(xf+0.044715*xf*xf*xf))))
	case compute.GELU:
		return float32(0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2)))
	case compute.ReLU:
		return max(x, 0)
	case compute.Sigmoid:
		return 1 / (1 + float32(math.Exp(float64(-x))))
	}
	panic("unknown activation")
}

// Activate implements compute.Backend.
func (b *Backend) Activate(dst, x *compute.Tensor, act compute.Activation) {
	b.note("Activate", dst, x, nil)
	d, xs := f32(dst), f32(x)
	for i, e := range xs {
		d[i] = activate(e, act)
	}
}

// GLU implements compute.Backend.
func (b *Backend) GLU(dst, gate, up *compute.Tensor, act compute.Activation) {
	b.note("GLU", dst, gate, up)
	if b.stopped() {
		return
	}
	d, g, u := f32(dst), f32(gate), f32(up)
	if len(g) >= 2*gluChunk && b.threads > 1 {
		b.glu = gluJob{d: d, g: g, u: u, act: act}
		b.pool.Run((len(g)+gluChunk-1)/gluChunk, b.gluFunc)
		b.glu = gluJob{}
		return
	}
	if act == compute.SiLU && siluMul(d, g, u) {
		return
	}
	for i := range g {
		d[i] = activate(g[i], act) * u[i]
	}
}

// SoftCap implements compute.Backend.
func (b *Backend) SoftCap(dst, x *compute.Tensor, c float32) {
	b.note("SoftCap", dst, x, nil)
	d, xs := f32(dst), f32(x)
	for i, e := range xs {
		d[i] = c * float32(math.Tanh(float64(e/c)))
	}
}

// Columns implements compute.Backend.
func (b *Backend) Columns(dst, x *compute.Tensor, from int) {
	b.note("Columns", dst, x, nil)
	d, xs := f32(dst), f32(x)
	dc, xc := dst.Cols(), x.Cols()
	for r := range x.Rows() {
		copy(d[r*dc:(r+1)*dc], xs[r*xc+from:r*xc+from+dc])
	}
}

// RoPE implements compute.Backend.
func (b *Backend) RoPE(x, pos *compute.Tensor, heads int, r *compute.Rope) {
	b.note("RoPE", x, x, nil)
	xs := f32(x)
	ps := pos.Buf.([]int32)
	cols := x.Cols()
	hd := cols / heads
	half := r.Dims / 2
	if cap(b.cos) < half {
		b.cos, b.sin = make([]float32, half), make([]float32, half)
		b.ropeOf = nil
	}
	cos, sin := b.cos[:half], b.sin[:half]
	for i, p := range ps {
		if b.ropeOf != r || b.ropePos != p {
			for j, f := range r.InvFreq {
				a := float32(p) * f
				cos[j] = float32(math.Cos(float64(a))) * r.Scale
				sin[j] = float32(math.Sin(float64(a))) * r.Scale
			}
			b.ropeOf, b.ropePos = r, p
		}
		for h := range heads {
			v := xs[i*cols+h*hd : i*cols+h*hd+r.Dims]
			for j := range half {
				var a, c *float32
				if r.Interleaved {
					a, c = &v[2*j], &v[2*j+1]
				} else {
					a, c = &v[j], &v[j+half]
				}
				x0, x1 := *a, *c
				*a = x0*cos[j] - x1*sin[j]
				*c = x1*cos[j] + x0*sin[j]
			}
		}
	}
}

// NewKVCache implements compute.Backend.
func (b *Backend) NewKVCache(capacity, kvDim int, ring bool) *compute.KVCache {
	return &compute.KVCache{
		K:        b.Alloc(compute.F32, capacity, kvDim),
		V:        b.Alloc(compute.F32, capacity, kvDim),
		Capacity: capacity,
		Ring:     ring,
	}
}

// attnJob is one Attend call, split over the pool by units of (row, kv
// head, width of its query heads).
type attnJob struct {
	q, k, v, out, cks, cvs []float32
	cache                  *compute.KVCache
	a                      *compute.Attention
	sinks                  []float32
	start, n, chunks       int
	width, passes          int         // query heads a unit takes at most; units per kv head
	scores                 [][]float32 // per chunk slot: grows to the longest context
}

// attnGroup is how many query heads of a kv head a unit takes where the
// grouped kernels run (groupedHeads); elsewhere a unit is one head.
const attnGroup = 4

// attnGrouped turns the grouped units on (tests compare both forms).
var attnGrouped = true

// attnChunks is the number of pieces an Attend call is cut into.
const attnChunks = 64

// keyRow returns the key and value rows of position j.
func (j *attnJob) keyRow(p int) (kr, vr []float32) {
	kc := j.a.KVHeads * j.a.HeadDim
	if p >= j.start {
		o := (p - j.start) * kc
		return j.k[o : o+kc], j.v[o : o+kc]
	}
	slot := p
	if j.cache.Ring {
		slot = p % j.cache.Capacity
	}
	return j.cks[slot*kc : (slot+1)*kc], j.cvs[slot*kc : (slot+1)*kc]
}

// span is a run of positions p0..p0+n−1 whose key and value rows lie kc
// elements apart, from the first row's start.
type span struct {
	p0, n int
	k, v  []float32
	r     int // paged pools: the block of the span
}

// spans returns the runs of positions first..last: the cached ones (split
// where a ring wraps) and this call's new rows.
func (j *attnJob) spans(buf *[3]span, first, last int) []span {
	kc := j.a.KVHeads * j.a.HeadDim
	out := buf[:0]
	for p := first; p <= last; {
		if p >= j.start {
			o := (p - j.start) * kc
			n := last - p + 1
			out = append(out, span{p0: p, n: n, k: j.k[o : o+n*kc], v: j.v[o : o+n*kc]})
			break
		}
		slot, n := p, min(last+1, j.start)-p
		if j.cache.Ring {
			slot = p % j.cache.Capacity
			n = min(n, j.cache.Capacity-slot)
		}
		out = append(out, span{p0: p, n: n, k: j.cks[slot*kc : (slot+n)*kc], v: j.cvs[slot*kc : (slot+n)*kc]})
		p += n
	}
	return out
}

// chunk computes the units of piece c: the query heads h0…h0+g−1 of kv
// head kv at row i, their scores L = start+n apart in the chunk's slot,
// each key and value row read once for all g.
func (j *attnJob) chunk(c int) {
	a := j.a
	group := a.Heads / a.KVHeads
	total := j.n * a.KVHeads * j.passes
	lo, hi := c*total/j.chunks, (c+1)*total/j.chunks
	hd := a.HeadDim
	qc, kc := a.Heads*hd, a.KVHeads*hd
	L := j.start + j.n
	var buf [3]span
	for t := lo; t < hi; t++ {
		i, u := t/(a.KVHeads*j.passes), t%(a.KVHeads*j.passes)
		kv, pass := u/j.passes, u%j.passes
		h0 := kv*group + pass*j.width
		g := min(j.width, group-pass*j.width)
		p := j.start + i
		first := 0
		if a.Window > 0 {
			first = max(0, p-a.Window+1)
		}
		scores := j.scores[c][:g*L]
		q := j.q[i*qc+h0*hd : i*qc+(h0+g)*hd]
		ko := kv * hd
		sp := j.spans(&buf, first, p)
		for _, s := range sp {
			dotsGroup(scores[s.p0:], L, q, g, s.k[ko:], kc, s.n)
		}
		for h := range g {
			j.weights(scores[h*L+first:h*L+p+1], h0+h)
		}
		o := j.out[i*qc+h0*hd : i*qc+(h0+g)*hd]
		clear(o)
		for _, s := range sp {
			axpysGroup(o, scores[s.p0:], L, g, s.v[ko:], kc, s.n)
		}
	}
}

// weights turns the dot products of query head h with the keys it sees
// into attention weights: scaled, soft-capped, normalised with the head's
// sink in the denominator.
func (j *attnJob) weights(valid []float32, h int) {
	a := j.a
	var mx float32
	if a.SoftCap > 0 {
		mx = float32(math.Inf(-1))
		for k, s := range valid {
			s = a.SoftCap * float32(math.Tanh(float64(s*a.Scale/a.SoftCap)))
			valid[k] = s
			mx = max(mx, s)
		}
	} else {
		Scale(valid, a.Scale)
		mx = Max(valid)
	}
	if j.sinks != nil {
		mx = max(mx, j.sinks[h])
	}
	sum, ok := expSubSum(valid, mx)
	if !ok {
		for k, s := range valid {
			e := float32(math.Exp(float64(s - mx)))
			valid[k] = e
			sum += e
		}
	}
	if j.sinks != nil {
		sum += float32(math.Exp(float64(j.sinks[h] - mx)))
	}
	Scale(valid, 1/sum)
}

// Attend implements compute.Backend.
func (b *Backend) Attend(dst, q, k, v *compute.Tensor, cache *compute.KVCache, pos *compute.Tensor, a *compute.Attention) {
	b.note("Attend", dst, q, k)
	if b.stopped() {
		return
	}
	ps := pos.Buf.([]int32)
	j := &b.attn
	*j = attnJob{
		q: f32(q), k: f32(k), v: f32(v), out: f32(dst),
		cks: f32(cache.K), cvs: f32(cache.V), cache: cache, a: a,
		start: int(ps[0]), n: len(ps), scores: j.scores,
	}
	if a.Sinks != nil {
		j.sinks = f32(b.asF32(a.Sinks))
	}
	group := a.Heads / a.KVHeads
	j.width = 1
	if attnGrouped && groupedHeads(a.HeadDim) {
		j.width = min(group, attnGroup)
	}
	j.passes = (group + j.width - 1) / j.width
	units, need := j.n*a.KVHeads*j.passes, j.width*(j.start+j.n)
	if len(j.scores) < attnChunks {
		j.scores = make([][]float32, attnChunks)
	}
	for c := range j.scores {
		if cap(j.scores[c]) < need {
			j.scores[c] = make([]float32, need, 2*need)
		}
	}
	j.chunks = min(attnChunks, units)
	if !b.attendGEMM(j) {
		b.pool.Run(j.chunks, b.attnFunc)
	}
	// Store the new keys and values.
	kc := a.KVHeads * a.HeadDim
	for i := range j.n {
		p := j.start + i
		slot := p
		if cache.Ring {
			if p < j.start+j.n-cache.Capacity {
				continue
			}
			slot = p % cache.Capacity
		}
		copy(j.cks[slot*kc:(slot+1)*kc], j.k[i*kc:(i+1)*kc])
		copy(j.cvs[slot*kc:(slot+1)*kc], j.v[i*kc:(i+1)*kc])
	}
}

// SetTrace has f called before every operation the backend runs, in the
// order they are issued, with the operation's method name, its destination
// and its first two tensor operands (nil where it has fewer; RoPE, which
// rotates in place, passes its rows as both dst and x). It is an op log for
// tests and debugging: the CUDA backend fuses operations by the order in
// which a model issues them, and tests check that order on the CPU. nil
// turns it off.
func (b *Backend) SetTrace(f func(op string, dst, x, y *compute.Tensor)) { b.trace = f }

// note reports an operation to the trace.
func (b *Backend) note(op string, dst, x, y *compute.Tensor) {
	if b.trace != nil {
		b.trace(op, dst, x, y)
	}
}
