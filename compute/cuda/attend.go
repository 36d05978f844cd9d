package cuda

import (
	"os"
	"strconv"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

// ropePrep mirrors struct RopePrep in kernels/decode.cu.
type ropePrep struct {
	q, k, v, pos, invf, ck, cv uint64
	qheads, kheads, hd, dims   int32
	scale                      float32
	inter                      int32
	kc, cap, ring, store       int32
}

var _ [96 - unsafe.Sizeof(ropePrep{})]byte
var _ [unsafe.Sizeof(ropePrep{}) - 96]byte

// attDec mirrors struct AttDec in kernels/decode.cu.
type attDec struct {
	out, q, ck, cv, pos, sinks, part, count        uint64
	heads, kvheads, hd, cap, ring, window, sdt, sp int32
	scale, softcap                                 float32
	k, v, invf                                     uint64
	fresh, rot, inter                              int32
	rscale                                         float32
	minchunk                                       int32
}

var _ [152 - unsafe.Sizeof(attDec{})]byte
var _ [unsafe.Sizeof(attDec{}) - 152]byte

// attendChunk is how many keys one split of attend_dec takes at least:
// the capacity of the cache is divided into splits of that many keys (at
// most 32 splits), and the kernel runs only as many of them as the
// position needs. LEM_CUDA_ATTEND_CHUNK overrides it (0: splits of 64 keys
// of the capacity, all of them run whatever the position).
func attendChunk() int32 {
	if v, err := strconv.Atoi(os.Getenv("LEM_CUDA_ATTEND_CHUNK")); err == nil && v >= 0 {
		return int32(v)
	}
	return 8
}

func (b *Backend) recordRopePrep(a *ropePrep, o *op) {
	work := max(int(a.qheads+a.kheads)*int(a.dims/2), int(a.kc))
	*o = op{fn: b.k.dec.ropePrep, name: "rope_prep", grid: [3]uint32{1, 1, 1}, block: [3]uint32{uint32(threads(work, 1024)), 1, 1}, nargs: 1, pdl: b.pdl}
	*(*ropePrep)(unsafe.Pointer(&o.args[0])) = *a
}

// fusedRoPE records the rotation of a one-row x as a rope_prep launch, or
// adds it to the previous one (q, then k).
func (b *Backend) fusedRoPE(x, pos *compute.Tensor, heads int, r *compute.Rope) bool {
	if !b.fuse || x.Rows() != 1 || heads <= 0 || x.Cols()%heads != 0 || r.Dims/2 == 0 {
		return false
	}
	hd := x.Cols() / heads
	xs := spanOf(x)
	inter := int32(0)
	if r.Interleaved {
		inter = 1
	}
	if f := b.last(fuseRope); f != nil && f.r == r && f.rope.pos == uint64(dptr(pos)) &&
		f.rope.kheads == 0 && int(f.rope.hd) == hd && !xs.overlaps(f.qs) {
		f.rope.k, f.rope.kheads = uint64(xs.lo), int32(heads)
		f.ks = xs
		b.recordRopePrep(&f.rope, &b.pending[f.idx])
		return true
	}
	a := ropePrep{q: uint64(xs.lo), pos: uint64(dptr(pos)), invf: uint64(dptr(b.invFreq(r))),
		qheads: int32(heads), hd: int32(hd), dims: int32(r.Dims), scale: r.Scale, inter: inter}
	var o op
	b.recordRopePrep(&a, &o)
	b.record(o)
	f := b.remember(fuseRope)
	f.rope, f.r, f.qs, f.ks = a, r, xs, span{}
	return true
}

// attendDecode implements Attend for one query row when the fused path
// applies: one attend_dec launch takes the new key and value from k and v,
// the older ones from the cache, merges its split parts itself and stores
// the new key and value in the cache once every split is done. When the
// rotation of q and k is the op just recorded (and covers whole heads), it
// is folded in as well: attend_dec rotates in registers and writes the
// rotated q and k back.
func (b *Backend) attendDecode(dst, q, k, v *compute.Tensor, cache *compute.KVCache, pos *compute.Tensor, a *compute.Attention) bool {
	if !b.fuse || q.Rows() != 1 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 {
		return false
	}
	g, hd := a.Heads/a.KVHeads, a.HeadDim
	var fn uintptr
	var e int // head values per lane
	switch {
	case g <= 4 && hd <= 64:
		fn, e = b.k.dec.attend[0], 2
	case g <= 4 && hd <= 128:
		fn, e = b.k.dec.attend[1], 4
	case g <= 4 && hd <= 256:
		fn, e = b.k.dec.attend[2], 8
	case g <= 8 && hd <= 64:
		fn, e = b.k.dec.attend[3], 2
	case g <= 8 && hd <= 128:
		fn, e = b.k.dec.attend[4], 4
	default:
		return false
	}
	if cache.Ring && (a.Window <= 0 || cache.Capacity < a.Window) {
		return false
	}
	kc := a.KVHeads * hd
	if k.Cols() != kc || v.Cols() != kc || q.Cols() != a.Heads*hd {
		return false
	}
	ds, qs, ks, vs := spanOf(dst), spanOf(q), spanOf(k), spanOf(v)
	if overlapsAny(ds, []span{qs, ks, vs}) || qs.overlaps(ks) {
		return false
	}
	ring := int32(0)
	if cache.Ring {
		ring = 1
	}
	keys := cache.Capacity + 1
	if a.Window > 0 {
		keys = min(keys, a.Window)
	}
	per := 64 // keys per split the cache's capacity is divided into
	if b.attendChunk > 0 {
		per = int(b.attendChunk)
	}
	splits := min(32, max(1, (keys+per-1)/per), max(1, 4*b.info.SMs/a.KVHeads))
	// Scratch first: allocating hands the recorded ops to the owner.
	part := b.attnScratch(a.Heads * splits * (hd + 2) * 4)
	count := b.attnCounters(a.KVHeads)
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	ad := attDec{out: uint64(dptr(dst)), q: uint64(dptr(q)), ck: uint64(dptr(cache.K)), cv: uint64(dptr(cache.V)),
		pos: uint64(dptr(pos)), sinks: uint64(dptr(a.Sinks)), part: uint64(part), count: uint64(count),
		heads: int32(a.Heads), kvheads: int32(a.KVHeads), hd: int32(hd), cap: int32(cache.Capacity), ring: ring,
		window: int32(a.Window), sdt: int32(sdt), sp: int32(splits), scale: a.Scale, softcap: a.SoftCap,
		k: uint64(ks.lo), v: uint64(vs.lo), fresh: 1, minchunk: b.attendChunk}
	o := op{fn: fn, name: "attend_dec", grid: [3]uint32{uint32(a.KVHeads), uint32(splits), 1}, block: [3]uint32{128, 1, 1}, nargs: 1, pdl: b.pdl}
	// The rotation of q and k just recorded, whole heads: fold it in.
	if f := b.last(fuseRope); f != nil && f.rope.q == uint64(qs.lo) && f.rope.qheads == int32(a.Heads) &&
		f.rope.k == uint64(ks.lo) && f.rope.kheads == int32(a.KVHeads) && f.rope.pos == uint64(dptr(pos)) &&
		int(f.rope.hd) == hd && int(f.rope.dims) == hd && hd == 32*e {
		ad.rot, ad.invf, ad.inter, ad.rscale = 1, f.rope.invf, f.rope.inter, f.rope.scale
		o.name = "attend_dec+rope"
		*(*attDec)(unsafe.Pointer(&o.args[0])) = ad
		b.pending[f.idx] = o
		b.fz.kind = fuseNone
		return true
	}
	*(*attDec)(unsafe.Pointer(&o.args[0])) = ad
	b.record(o)
	return true
}

// attnCounters returns n zeroed ints of device memory for attend_dec's
// split counters (each launch leaves them zero again).
func (b *Backend) attnCounters(n int) uintptr { return b.counters(&b.attnCount, n) }

// counters returns n ints of device memory held in *slot, zeroed when
// first allocated, for kernels whose last block counts the others in and
// leaves the count zero again.
func (b *Backend) counters(slot **buffer, n int) uintptr {
	if *slot == nil || (*slot).size < int64(4*n) {
		p := b.scratch(slot, 4*n)
		size := (*slot).size
		b.enqueue(func(w *owner) error {
			return w.check("cuMemsetD8Async", call(w.d.cuMemsetD8Async, p, 0, uintptr(size), w.stream))
		})
	}
	return (*slot).ptr
}
