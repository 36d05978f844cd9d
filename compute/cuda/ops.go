package cuda

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// threads returns a block size for n units of work: a multiple of 32, at
// most limit.
func threads(n, limit int) int {
	return min(limit, max(32, (n+31)/32*32))
}

// blocks returns a grid size for a grid-stride loop over n elements.
func blocks(n int) int {
	return max(1, min((n+255)/256, 132*32))
}

// Embed implements compute.Backend.
func (b *Backend) Embed(dst, table, ids *compute.Tensor) {
	n, cols := ids.Len(), table.Cols()
	if n == 0 {
		return
	}
	if table.DType.Quantized() {
		b.qEmbed(dst, table, ids)
		return
	}
	b.launch(b.k.embed, "embed", n, threads(cols, 256)).
		ptr(dptr(dst)).ptr(dptr(table)).i(int(table.DType)).ptr(dptr(ids)).i(cols)
}

// MatMul implements compute.Backend.
func (b *Backend) MatMul(dst, x, w *compute.Tensor) {
	n, k, m := x.Rows(), x.Cols(), w.Rows()
	if w.Cols() != k {
		panic(fmt.Sprintf("matmul: x has %d columns, w has %d", k, w.Cols()))
	}
	if n == 0 || m == 0 {
		return
	}
	if n == 1 && b.fusedMatMul(dst, x, w) {
		return
	}
	if w.DType.Quantized() {
		b.qMatMul(dst, x, w)
		return
	}
	dt := int(w.DType)
	if dt > int(compute.BF16) {
		panic(fmt.Sprintf("matmul: weight dtype %s", w.DType))
	}
	vec := 8
	if w.DType == compute.F32 {
		vec = 4
	}
	// f16 and bf16 batches of more than gemvRows rows: the tensor cores
	// (batch.go).
	if n > b.gemvRows && b.matmulTC(dst, x, w) {
		return
	}
	if n <= 4 && k%vec == 0 && dptr(x)%16 == 0 && dptr(w)%16 == 0 {
		b.launch(b.k.gemv[dt][n-1], "gemv", (m+3)/4, 128).
			ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(m).i(k)
		return
	}
	if b.matmulTC(dst, x, w) {
		return
	}
	o := b.record(op{fn: b.k.gemm[dt], name: "gemm",
		grid: [3]uint32{uint32((m + 63) / 64), uint32((n + 63) / 64), 1}, block: [3]uint32{256, 1, 1}})
	o.ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(n).i(m).i(k)
}

func (b *Backend) binary(dst, x, y *compute.Tensor, opcode int) {
	n := x.Len()
	if n == 0 {
		return
	}
	b.launch(b.k.binary, "binary", blocks(n), 256).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(y)).i(int(y.DType)).i64(n).i64(y.Len()).i(opcode)
}

// Add implements compute.Backend.
func (b *Backend) Add(dst, x, y *compute.Tensor) {
	if !b.fusedAdd(dst, x, y) {
		b.binary(dst, x, y, 0)
	}
}

// Mul implements compute.Backend.
func (b *Backend) Mul(dst, x, y *compute.Tensor) { b.binary(dst, x, y, 1) }

// Scale implements compute.Backend.
func (b *Backend) Scale(dst, x *compute.Tensor, s float32) {
	n := x.Len()
	if n == 0 {
		return
	}
	b.launch(b.k.scale, "scale", blocks(n), 256).ptr(dptr(dst)).ptr(dptr(x)).i64(n).f(s)
}

// SoftCap implements compute.Backend.
func (b *Backend) SoftCap(dst, x *compute.Tensor, c float32) {
	n := x.Len()
	if n == 0 {
		return
	}
	b.launch(b.k.softcap, "softcap", blocks(n), 256).ptr(dptr(dst)).ptr(dptr(x)).i64(n).f(c)
}

// Activate implements compute.Backend.
func (b *Backend) Activate(dst, x *compute.Tensor, act compute.Activation) {
	n := x.Len()
	if n == 0 {
		return
	}
	b.launch(b.k.activation, "activation", blocks(n), 256).ptr(dptr(dst)).ptr(dptr(x)).i64(n).i(int(act))
}

// GLU implements compute.Backend.
func (b *Backend) GLU(dst, gate, up *compute.Tensor, act compute.Activation) {
	n := gate.Len()
	if n == 0 || b.fusedGLU(dst, gate, up, act) {
		return
	}
	b.launch(b.k.glu, "glu", blocks(n), 256).ptr(dptr(dst)).ptr(dptr(gate)).ptr(dptr(up)).i64(n).i(int(act))
}

// Columns implements compute.Backend.
func (b *Backend) Columns(dst, x *compute.Tensor, from int) {
	rows, dc := x.Rows(), dst.Cols()
	if rows*dc == 0 {
		return
	}
	b.launch(b.k.columns, "columns", blocks(rows*dc), 256).
		ptr(dptr(dst)).ptr(dptr(x)).i64(rows).i(dc).i(x.Cols()).i(from)
}

// RMSNorm implements compute.Backend.
func (b *Backend) RMSNorm(dst, x, w *compute.Tensor, eps, offset float32) {
	g := x.Cols()
	wdt := 0
	if w != nil {
		g, wdt = w.Len(), int(w.DType)
	}
	groups := x.Len() / g
	if groups == 0 || groups == 1 && b.fusedRMSNorm(dst, x, w, eps, offset) {
		return
	}
	b.launch(b.k.rmsnorm, "rmsnorm", groups, threads(g, 256)).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(wdt).i(g).f(eps).f(offset)
}

// LayerNorm implements compute.Backend.
func (b *Backend) LayerNorm(dst, x, w, bias *compute.Tensor, eps float32) {
	g := x.Cols()
	rows := x.Rows()
	if rows == 0 {
		return
	}
	bdt := 0
	if bias != nil {
		bdt = int(bias.DType)
	}
	b.launch(b.k.layernorm, "layernorm", rows, threads(g, 256)).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(int(w.DType)).ptr(dptr(bias)).i(bdt).i(g).f(eps)
}

// invFreq returns the rope's inverse frequencies on the device, uploaded on
// first use.
func (b *Backend) invFreq(r *compute.Rope) *compute.Tensor {
	t, ok := b.ropes[r]
	if !ok {
		t = b.Alloc(compute.F32, len(r.InvFreq))
		b.Upload(t, r.InvFreq)
		b.ropes[r] = t
	}
	return t
}

// RoPE implements compute.Backend.
func (b *Backend) RoPE(x, pos *compute.Tensor, heads int, r *compute.Rope) {
	rows, cols := x.Rows(), x.Cols()
	half := r.Dims / 2
	if rows == 0 || half == 0 {
		return
	}
	inter := 0
	if r.Interleaved {
		inter = 1
	}
	if rows == 1 && b.fusedRoPE(x, pos, heads, r) {
		return
	}
	f := b.invFreq(r)
	b.launchEarly(b.k.rope, "rope", rows, threads(heads*half, 256)).
		ptr(dptr(x)).ptr(dptr(pos)).ptr(dptr(f)).i(heads).i(cols).i(r.Dims).f(r.Scale).i(inter)
}

// Attend implements compute.Backend with one block per (query, head) and an
// online softmax; a second kernel then stores the new keys and values. Both
// read the start position from pos on the device.
func (b *Backend) Attend(dst, q, k, v *compute.Tensor, cache *compute.KVCache, pos *compute.Tensor, a *compute.Attention) {
	n := q.Rows()
	if n == 0 || n == 1 && b.attendDecode(dst, q, k, v, cache, pos, a) || b.attendFlash(dst, q, k, v, cache, pos, a) {
		return
	}
	var fn uintptr
	switch hd := a.HeadDim; {
	case hd <= 64:
		fn = b.k.attend[0]
	case hd <= 128:
		fn = b.k.attend[1]
	case hd <= 256:
		fn = b.k.attend[2]
	case hd <= 512:
		fn = b.k.attend[3]
	default:
		panic(fmt.Sprintf("attend: head dim %d > 512 not supported on CUDA", hd))
	}
	ring := 0
	if cache.Ring {
		ring = 1
	}
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	// Few (query, head) pairs, as in decode: split the keys over more
	// blocks and merge. The split count depends only on the cache size, so
	// a captured graph stays valid at every position.
	splits := 1
	if n*a.Heads < 2*b.info.SMs {
		keys := cache.Capacity + n
		if a.Window > 0 {
			keys = min(keys, a.Window)
		}
		splits = min(32, max(1, keys/256), max(1, 4*b.info.SMs/(n*a.Heads)))
	}
	var part uintptr
	if splits > 1 {
		part = b.attnScratch(n * a.Heads * splits * (a.HeadDim + 2) * 4)
	}
	o := b.record(op{fn: fn, name: "attend", grid: [3]uint32{uint32(n * a.Heads), uint32(splits), 1}, block: [3]uint32{128, 1, 1}})
	o.ptr(dptr(dst)).ptr(dptr(q)).ptr(dptr(k)).ptr(dptr(v)).
		ptr(dptr(cache.K)).ptr(dptr(cache.V)).ptr(dptr(pos)).
		i(a.Heads).i(a.KVHeads).i(a.HeadDim).i(cache.Capacity).i(ring).
		f(a.Scale).f(a.SoftCap).i(a.Window).ptr(dptr(a.Sinks)).i(sdt).ptr(part).i(splits)
	if splits > 1 {
		b.launch(b.k.attendCombine, "attend_combine", n*a.Heads, threads(a.HeadDim, 256)).
			ptr(dptr(dst)).ptr(part).i(a.Heads).i(a.HeadDim).i(splits).ptr(dptr(a.Sinks)).i(sdt).ptr(0).i(1).i(0)
	}
	kc := a.KVHeads * a.HeadDim
	b.launch(b.k.kvstore, "kvstore", n, threads(kc, 256)).
		ptr(dptr(cache.K)).ptr(dptr(cache.V)).ptr(dptr(k)).ptr(dptr(v)).ptr(dptr(pos)).
		i(n).i(kc).i(cache.Capacity).i(ring)
}

// attnScratch returns device memory of at least size bytes for partial
// attention results.
func (b *Backend) attnScratch(size int) uintptr { return b.scratch(&b.attnPart, size) }

// scratch returns device memory of at least size bytes held in *slot for
// one kind of intermediate result. It is never returned to the pool:
// captured graphs refer to it. A larger request replaces it (the old block
// stays allocated until Close, since graphs may still use it).
func (b *Backend) scratch(slot **buffer, size int) uintptr {
	if *slot == nil || (*slot).size < int64(size) {
		bf, err := b.rawAlloc(max(int64(size), 1<<20), false)
		if err != nil {
			panic(fmt.Sprintf("cuda: scratch of %d bytes: %v", size, err))
		}
		*slot = bf
	}
	return (*slot).ptr
}
