package cuda

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

// Decode of one token is a few hundred small dependent operations; each
// costs a launch and a ramp of the GPU, which at batch 1 adds up to more
// than the time the weights take to stream. The backend therefore fuses
// consecutive operations of one-row inputs as they are recorded, without
// the model's help: an operation whose input is the output of the
// operation recorded just before it, and which the earlier launch can take
// over, is folded into that launch's descriptor instead of being recorded.
//
//   - RMSNorm of one row followed by MatMuls of its output: the matrix-vector
//     product normalises its input itself (block 0 also writes the
//     normalised row, so every tensor ends as the separate operations leave
//     it).
//   - MatMuls sharing an input (q, k and v; gate and up): one launch over the
//     stacked rows, up to three matrices of one dtype.
//   - GLU of two such products: computed from the rows of both, paired.
//   - Add of a product and another row (a bias, the residual stream): the
//     product's epilogue adds it.
//   - RoPE of q then k, and the cache store of the new key and value: one
//     launch before the attention, which then reads every key from the cache
//     and merges its split parts itself (attend.go).
//
// Matrices may be float (fgemv) or block-quantized (fqgemv, fuse_quant.go).
// Every fused form computes the same float operations in the same order as
// the separate kernels, so results are bitwise those of the unfused path,
// except attention, whose sums over keys run in another order. Fusion
// checks that the tensors involved do not overlap where a launch would read
// what it writes. LEM_CUDA_FUSE=0 turns it off, for measuring and for
// bisecting numerical differences.

// fuseKind is what the last recorded op is, for fusion.
type fuseKind uint8

const (
	fuseNone fuseKind = iota
	fuseRMS           // a one-row rmsnorm
	fuseGemv          // an fgemv launch
	fuseRope          // a rope_prep launch
)

// fuseState describes the last recorded op while it can still absorb the
// next one.
type fuseState struct {
	kind fuseKind
	seq  uint64 // Backend.recorded after the op was recorded
	idx  int    // its index in Backend.pending

	// fuseRMS
	rmsSrc, rmsDst span
	rmsW           *compute.Tensor
	rmsEps, rmsOff float32
	rmsG           int

	// fuseGemv
	g   fgemvArgs
	gdt compute.DType // weight dtype
	xin span          // the launch's input (the normalised row in norm mode)
	// spans read (x, the norm weight) and written (h, d, add outputs,
	// gdst); hw is 1 when writes[0] is h, which the launch writes but
	// does not read back (it keeps the normalised row in shared memory).
	reads, writes []span
	hw            int

	// fuseRope
	rope ropePrep
	r    *compute.Rope
	qs   span
	ks   span
}

// span is a byte range of device memory.
type span struct{ lo, hi uintptr }

func spanOf(t *compute.Tensor) span {
	if t == nil || t.Buf == nil {
		return span{}
	}
	p := dptr(t)
	return span{p, p + uintptr(t.Len()*max(t.DType.Size(), 1))}
}

func (s span) overlaps(o span) bool { return s.lo < o.hi && o.lo < s.hi }

func overlapsAny(s span, l []span) bool {
	for _, o := range l {
		if s.overlaps(o) {
			return true
		}
	}
	return false
}

// fusionEnabled reads LEM_CUDA_FUSE.
func fusionEnabled() bool { return os.Getenv("LEM_CUDA_FUSE") != "0" }

// fgemvResident is how many fgemv blocks are launched per SM at most: the
// blocks stay resident and walk the rows (two per warp) with a stride.
// LEM_CUDA_FGEMV_BLOCKS overrides the total (0: one block per 16 rows,
// however many that is).
func fgemvGrid(sms int) int {
	if v, err := strconv.Atoi(os.Getenv("LEM_CUDA_FGEMV_BLOCKS")); err == nil {
		return v
	}
	return fgemvResident * sms
}

const fgemvResident = 2

// fgemvNames names fgemv launches by mode, matrices and addends, so that a
// profile tells them apart.
var fgemvNames = func() (t [2][4][4][2]string) {
	for q, base := range []string{"fgemv", "fqgemv"} {
		for mode := range 4 {
			for n := range 4 {
				for add := range 2 {
					t[q][mode][n][add] = fgemvName(base, mode, n, add)
				}
			}
		}
	}
	return t
}()

func fgemvName(name string, mode, n, add int) string {
	if mode&fgModeNorm != 0 {
		name += "+norm"
	}
	if n > 1 {
		name += fmt.Sprintf("×%d", n)
	}
	if mode&fgModeGLU != 0 {
		name += "+glu"
	}
	if add != 0 {
		name += "+add"
	}
	return name
}

// last returns the fusion state when the op it describes is still the last
// one recorded and not yet handed to the owner.
func (b *Backend) last(kind fuseKind) *fuseState {
	f := &b.fz
	if !b.fuse || f.kind != kind || f.seq != b.recorded || f.idx != len(b.pending)-1 {
		return nil
	}
	return f
}

// remember marks the op just recorded as fusable.
func (b *Backend) remember(kind fuseKind) *fuseState {
	b.fz.kind = kind
	b.fz.seq = b.recorded
	b.fz.idx = len(b.pending) - 1
	return &b.fz
}

// fgemvArgs mirrors struct FGemv in kernels/decode.cu (208 bytes).
type fgemvArgs struct {
	x, nw, h uint64
	w, d     [3]uint64
	add      [3]uint64
	m        [3]int32
	addf     [3]int32
	k, nmat  int32
	mode     int32
	nwdt     int32
	eps, off float32
	act, pad int32
	gdst     uint64
	sc, dd   [3]uint64 // quantized weights: the sc and d regions (w: the codes)
}

const (
	fgModeNorm  = 1
	fgModeGLU   = 2
	fgModeOne   = 4
	fgModeStage = 8
	fgSumToAdd  = 16
)

var _ [208 - unsafe.Sizeof(fgemvArgs{})]byte
var _ [unsafe.Sizeof(fgemvArgs{}) - 208]byte

// fgemvWarps is FG_WARPS: rows are computed two per warp.
const fgemvWarps = 8

// setOp writes the launch of an fgemv descriptor into o.
func (b *Backend) setFgemv(o *op, a *fgemvArgs, dt compute.DType) {
	norm := a.mode&fgModeNorm != 0
	fn := b.k.dec.fgemv[dtIndex(dt)]
	if norm {
		fn = b.k.dec.fgemvNorm[dtIndex(dt)]
	}
	quant := 0
	if qt, ok := fqType(dt); ok {
		fn, quant = b.k.dec.fqgemv[qt][a.mode&fgModeNorm], 1
	}
	var units int
	a.mode &^= fgModeOne | fgModeStage
	if a.mode&fgModeGLU != 0 {
		units = int(a.m[0])
	} else {
		rows := 0
		for j := range a.nmat {
			rows += int(a.m[j])
		}
		units = (rows + 1) / 2
		if b.fgemvBlocks > 0 && oneRowUnits(rows, fgemvWarps*b.fgemvBlocks) && (quant == 0 || fqTwoStreams(dt, int(a.k))) {
			a.mode |= fgModeOne
			units = rows
		}
	}
	grid := (units + fgemvWarps - 1) / fgemvWarps
	if b.fgemvBlocks > 0 {
		grid = min(grid, b.fgemvBlocks)
	}
	added := 0
	for j := range a.nmat {
		if a.add[j] != 0 {
			added = 1
		}
	}
	*o = op{fn: fn, name: fgemvNames[quant][a.mode&3][min(a.nmat, 3)][added],
		grid:  [3]uint32{uint32(grid), 1, 1},
		block: [3]uint32{fgemvWarps * 32, 1, 1}, nargs: 1, pdl: b.pdl}
	switch {
	case quant != 0:
		o.shared = uint32(fqShared(int(a.k)))
	case norm:
		o.shared = uint32(4 * a.k)
	case int(a.k) <= b.stageK:
		o.shared = uint32(4 * a.k)
		a.mode |= fgModeStage
	}
	*(*fgemvArgs)(unsafe.Pointer(&o.args[0])) = *a
}

// oneRowUnits reports whether rows are better computed one per warp
// (each in two half-row streams) than two per warp, with warps resident
// warps: with fewer rows than two per warp, one per warp keeps more warps
// loading; otherwise the mode whose last wave of units is fuller wins (a
// one-row unit takes half as long as a two-row one), so that, say, 6144
// rows on 2112 warps take three short waves instead of two long ones,
// the second three-quarters idle.
func oneRowUnits(rows, warps int) bool {
	if rows < 2*warps {
		return true
	}
	waves := func(units int) int { return (units + warps - 1) / warps }
	return waves(rows) < 2*waves((rows+1)/2)
}

func dtIndex(dt compute.DType) int {
	switch dt {
	case compute.F16:
		return 1
	case compute.BF16:
		return 2
	}
	return 0
}

// maxStageK bounds the input row fgemv stages in shared memory: 96 KiB.
// Rows are staged, normalised or as they are, only up to the length of
// which fgemvResident blocks fit an SM (fgemvStageK; 24,576 values on an
// H200, 12,480 on an SM of 100 KiB); a longer row without a norm is read
// from global memory. A norm is fused up to that length, or up to
// defaultStageK (48 KiB, what any block may have) where that is longer.
const (
	maxStageK     = 24576
	defaultStageK = 12288
)

// fgemvStageK returns the longest row fgemv stages in shared memory on a
// device with perSM bytes of shared memory an SM, of which a block may ask
// for perBlock: fgemvResident blocks must fit, each with the 1 KiB the
// runtime keeps per block and the kernel's 256 static bytes.
func fgemvStageK(perSM, perBlock int) int {
	bytes := min(perBlock, perSM/fgemvResident-1024) - 256
	return max(0, min(maxStageK, bytes/4/8*8))
}

// normK returns the longest row a fused norm takes.
func (b *Backend) normK() int { return max(b.stageK, defaultStageK) }

// openDecode lets the fgemv kernels have the shared memory of the rows
// they stage (owner thread); where the driver refuses, rows of up to
// defaultStageK values are staged.
func (b *Backend) openDecode() error {
	b.stageK = fgemvStageK(b.info.SharedPerSM, b.info.SharedPerBlock)
	if b.normK() <= defaultStageK {
		return nil
	}
	allowed := true
	err := b.do(func(w *owner) error {
		for _, fn := range append(b.k.dec.fgemv[:], b.k.dec.fgemvNorm[:]...) {
			allowed = allowed && call(w.d.cuFuncSetAttribute, fn, funcAttrMaxDynamicShared, uintptr(4*b.normK())) == 0
		}
		return nil
	})
	if !allowed {
		b.stageK = min(b.stageK, defaultStageK)
	}
	return err
}

// fusedMatMul records a one-row MatMul as an fgemv launch, folded into the
// previous one when it can be. It reports false when the shapes need the
// plain kernels.
func (b *Backend) fusedMatMul(dst, x, w *compute.Tensor) bool {
	k, m := x.Cols(), w.Rows()
	if !b.fuse || x.Rows() != 1 || m > math.MaxInt32/2 {
		return false
	}
	if w.DType.Quantized() {
		if !fqFits(w) {
			return false
		}
	} else {
		vec := 8
		if w.DType == compute.F32 {
			vec = 4
		}
		if w.DType > compute.BF16 || k%vec != 0 || dptr(x)%16 != 0 || dptr(w)%16 != 0 || uintptr(k*w.DType.Size())%16 != 0 {
			return false
		}
	}
	xs, ds := spanOf(x), spanOf(dst)
	if ds.overlaps(xs) {
		return false
	}
	// Another matrix on the same input.
	if f := b.last(fuseGemv); f != nil && f.xin == xs && f.gdt == w.DType && int(f.g.k) == k &&
		f.g.nmat < 3 && f.g.mode&fgModeGLU == 0 && !overlapsAny(ds, f.reads) && !overlapsAny(ds, f.writes) &&
		!overlapsAny(xs, f.writes[f.hw:]) {
		f.g.setMat(int(f.g.nmat), w, dst)
		f.g.nmat++
		f.writes = append(f.writes, ds)
		b.setFgemv(&b.pending[f.idx], &f.g, w.DType)
		return true
	}
	a := fgemvArgs{x: uint64(dptr(x)), k: int32(k), nmat: 1}
	a.setMat(0, w, dst)
	reads := []span{xs}
	// The norm that made x.
	if f := b.last(fuseRMS); f != nil && f.rmsDst == xs && f.rmsG == k && k <= b.normK() &&
		!f.rmsSrc.overlaps(f.rmsDst) && !ds.overlaps(f.rmsSrc) {
		a.x, a.h = uint64(f.rmsSrc.lo), uint64(xs.lo)
		a.mode = fgModeNorm
		a.eps, a.off = f.rmsEps, f.rmsOff
		if f.rmsW != nil {
			a.nw, a.nwdt = uint64(dptr(f.rmsW)), int32(f.rmsW.DType)
			reads = append(reads, spanOf(f.rmsW))
		}
		reads = append(reads, f.rmsSrc)
		o := &b.pending[f.idx]
		b.setFgemv(o, &a, w.DType)
		g := b.remember(fuseGemv)
		g.g, g.gdt, g.xin, g.reads, g.writes, g.hw = a, w.DType, xs, reads, append(g.writes[:0], xs, ds), 1
		return true
	}
	var o op
	b.setFgemv(&o, &a, w.DType)
	b.record(o)
	g := b.remember(fuseGemv)
	g.g, g.gdt, g.xin, g.reads, g.writes, g.hw = a, w.DType, xs, reads, append(g.writes[:0], ds), 0
	return true
}

// fusedRMSNorm records a one-row RMSNorm so that a following MatMul can
// take it over.
func (b *Backend) fusedRMSNorm(dst, x, w *compute.Tensor, eps, offset float32) bool {
	g := x.Cols()
	if w != nil {
		g = w.Len()
	}
	if !b.fuse || x.Len() != g || g == 0 {
		return false
	}
	wdt := 0
	if w != nil {
		wdt = int(w.DType)
	}
	// The same launch RMSNorm makes, with 256 threads as fgemv's norm uses.
	b.launch(b.k.rmsnorm, "rmsnorm", 1, 256).
		ptr(dptr(dst)).ptr(dptr(x)).ptr(dptr(w)).i(wdt).i(g).f(eps).f(offset)
	f := b.remember(fuseRMS)
	f.rmsSrc, f.rmsDst, f.rmsW, f.rmsEps, f.rmsOff, f.rmsG = spanOf(x), spanOf(dst), w, eps, offset, g
	return true
}

// fusedGLU folds a GLU of the two products of the last fgemv into it.
func (b *Backend) fusedGLU(dst, gate, up *compute.Tensor, act compute.Activation) bool {
	f := b.last(fuseGemv)
	if f == nil || f.g.nmat != 2 || f.g.mode&fgModeGLU != 0 || f.g.m[0] != f.g.m[1] ||
		f.g.add[0] != 0 || f.g.add[1] != 0 {
		return false
	}
	n := int(f.g.m[0])
	gs, us, ds := spanOf(gate), spanOf(up), spanOf(dst)
	if gate.Len() != n || up.Len() != n || dst.Len() != n {
		return false
	}
	d0, d1 := uint64(gs.lo), uint64(us.lo)
	switch {
	case f.g.d[0] == d0 && f.g.d[1] == d1:
	case f.g.d[1] == d0 && f.g.d[0] == d1:
		f.g.w[0], f.g.w[1] = f.g.w[1], f.g.w[0]
		f.g.d[0], f.g.d[1] = f.g.d[1], f.g.d[0]
		f.g.sc[0], f.g.sc[1] = f.g.sc[1], f.g.sc[0]
		f.g.dd[0], f.g.dd[1] = f.g.dd[1], f.g.dd[0]
	default:
		return false
	}
	if overlapsAny(ds, f.reads) || (ds.overlaps(gs) && ds != gs) || (ds.overlaps(us) && ds != us) {
		return false
	}
	f.g.mode |= fgModeGLU
	f.g.gdst, f.g.act = uint64(ds.lo), int32(act)
	f.writes = append(f.writes, ds)
	b.setFgemv(&b.pending[f.idx], &f.g, f.gdt)
	return true
}

// fusedAdd folds dst = a + b into the last fgemv when one operand is one of
// its products.
func (b *Backend) fusedAdd(dst, x, y *compute.Tensor) bool {
	f := b.last(fuseGemv)
	if f == nil || f.g.mode&fgModeGLU != 0 || x.DType != compute.F32 {
		return false
	}
	n := x.Len()
	if y.Len() != n || dst.Len() != n {
		return false
	}
	xs, ys, ds := spanOf(x), spanOf(y), spanOf(dst)
	for j := range int(f.g.nmat) {
		if int(f.g.m[j]) != n || f.g.add[j] != 0 {
			continue
		}
		var other *compute.Tensor
		switch uint64(xs.lo) {
		case f.g.d[j]:
			other = y
		default:
			if uint64(ys.lo) == f.g.d[j] && y.DType == compute.F32 {
				other = x
			}
		}
		if other == nil {
			continue
		}
		os, prod := spanOf(other), span{uintptr(f.g.d[j]), uintptr(f.g.d[j]) + uintptr(4*n)}
		if os.overlaps(prod) || overlapsAny(os, f.writes) {
			return false
		}
		switch {
		case ds == prod:
			f.g.add[j], f.g.addf[j] = uint64(os.lo), int32(other.DType)
		case ds == os && other.DType == compute.F32 && !overlapsAny(ds, f.reads):
			f.g.add[j], f.g.addf[j] = uint64(os.lo), int32(compute.F32)|fgSumToAdd
			f.writes = append(f.writes, ds)
		default:
			return false
		}
		f.reads = append(f.reads, os)
		b.setFgemv(&b.pending[f.idx], &f.g, f.gdt)
		return true
	}
	return false
}
