package cuda

// Prefill forms of the modern families' operations: the chunked gated delta
// rule (kernels/deltarule_chunk.cu), the chunked selective scan
// (kernels/ssm_chunk.cu) and mixture-of-experts blocks with the rows
// grouped by expert (kernels/moe_group.cu). A single row (decode) keeps the
// recurrent step and the per-row expert kernels.

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// chunkedKernels holds the handles of the prefill kernels.
type chunkedKernels struct {
	drPrep, drChunk, drCarry                   uintptr
	ssmCB, ssmChunk, ssmCarry                  uintptr
	moeGroup, moeGGateUp, moeGDown, moeCombine uintptr
	moeMGateUp, moeMGDown                      uintptr
}

// add lists the kernels in t with where their handles go.
func (k *chunkedKernels) add(t map[string]*uintptr) {
	t["dr_prep"], t["dr_chunk"], t["dr_carry"] = &k.drPrep, &k.drChunk, &k.drCarry
	t["ssm_cb"], t["ssm_chunk"], t["ssm_carry"] = &k.ssmCB, &k.ssmChunk, &k.ssmCarry
	t["moe_group"], t["moe_ggateup"], t["moe_gdown"], t["moe_combine"] = &k.moeGroup, &k.moeGGateUp, &k.moeGDown, &k.moeCombine
	t["moe_mgateup"], t["moe_mgdown"] = &k.moeMGateUp, &k.moeMGDown
}

// prefillState is the backend's scratch for the prefill kernels.
type prefillState struct {
	// sequential sends every call through the per-row kernels, as before
	// the chunked forms existed: benchmarks compare the two in one run.
	sequential bool
	// staged carries the chunked recurrences with dr_carry and ssm_carry,
	// which stage each chunk's matrices in shared memory, rather than
	// dr_chunk and ssm_chunk, which read them from global memory. Off by
	// default until measured on a device.
	staged bool
	// tensorCores runs grouped experts with bf16 weights on the tensor
	// cores (moe_mgateup, moe_mgdown) rather than the SIMT kernels. Off by
	// default until measured on a device.
	tensorCores bool
	// shared is the dynamic shared memory each kernel has been allowed.
	shared map[uintptr]int

	delta *buffer // dr_prep's per-(head, chunk) matrices
	cb    *buffer // ssm_cb's C·Bᵀ blocks

	group  *buffer // moe_group's sort: counts, order, tiles
	act, y *buffer // grouped experts' activations and outputs, by sorted pair
}

// Chunk lengths of the chunked kernels (DRC and SSQ in the sources).
const (
	deltaChunk = 32
	ssmChunk   = 32
)

// deltaBlock returns the floats of dr_prep's scratch per (head, chunk):
// W, e^G⊙Q, e^(G_last−G)⊙K [deltaChunk, dk] each, U [deltaChunk, dv], the
// masked QKᵀ [deltaChunk, deltaChunk] and e^(G_last), rounded up to a
// multiple of four.
func deltaBlock(dk, dv int) int {
	n := 3*deltaChunk*dk + deltaChunk*dv + deltaChunk*deltaChunk + 1
	return (n + 3) &^ 3
}

// Grouped experts (kernels/moe_group.cu).
const (
	groupTile  = 32   // (row, slot) pairs per tile (MGM)
	maxGrouped = 2048 // most experts moe_group sorts (MG_MAXEXP)
)

// groupTiles returns the most tiles moe_group can list for pairs (row,
// slot) pairs over ne experts.
func groupTiles(pairs, ne int) int { return pairs/groupTile + min(ne, pairs) + 1 }

// groupable reports whether moe_group handles pairs pairs over ne experts:
// it sorts at most maxGrouped experts, and the tiles index a grid's second
// dimension (at most 65535).
func groupable(pairs, ne int) bool { return ne <= maxGrouped && groupTiles(pairs, ne) <= 65535 }

// groupedExperts is ApplyExperts for several rows: moe_group sorts the
// (row, slot) pairs by expert and lists tiles of up to groupTile pairs of
// one expert; moe_ggateup and moe_gdown run each tile as a matrix product
// against its expert's weights, so that an expert's weights are read once
// per tile rather than once per pair; moe_combine sums each row's slots
// with their routing weights. The counts stay on the device: the grids
// cover the most tiles any routing can give.
func (b *Backend) groupedExperts(dst, x, ids, weights *compute.Tensor, f *compute.ExpertFFN, t *expertTable, stride int) {
	n, hid, slots := x.Rows(), x.Cols(), ids.Cols()
	ne, pairs := len(f.Experts), n*slots
	tiles := groupTiles(pairs, ne)
	st := &b.prefill
	g := b.scratch(&st.group, 4*(2+ne+2*pairs+2*tiles))
	act := b.scratch(&st.act, 4*pairs*stride)
	y := b.scratch(&st.y, 4*pairs*hid)
	b.launch(b.k.chunked.moeGroup, "moe_group", 1, 1024).ptr(g).ptr(dptr(ids)).i(pairs).i(ne)
	gateUp, down := b.k.chunked.moeGGateUp, b.k.chunked.moeGDown
	if st.tensorCores && tensorCoreExperts(t.host, hid) {
		gateUp, down = b.k.chunked.moeMGateUp, b.k.chunked.moeMGDown
	}
	b.record(op{fn: gateUp, name: "moe_ggateup",
		grid: [3]uint32{uint32((t.maxInter + 63) / 64), uint32(tiles), 1}, block: [3]uint32{128, 1, 1}}).
		ptr(act).ptr(dptr(x)).ptr(g).ptr(t.dev.ptr).i(ne).i(pairs).i(slots).
		i(hid).i(stride).i(int(f.Act)).f(f.Limit).f(f.Alpha)
	b.record(op{fn: down, name: "moe_gdown",
		grid: [3]uint32{uint32((hid + 63) / 64), uint32(tiles), 1}, block: [3]uint32{128, 1, 1}}).
		ptr(y).ptr(act).ptr(g).ptr(t.dev.ptr).i(ne).i(pairs).i(hid).i(stride)
	b.launch(b.k.chunked.moeCombine, "moe_combine", blocks(n*hid), 256).
		ptr(dptr(dst)).ptr(y).ptr(g).ptr(dptr(weights)).i(n).i(slots).i(hid).i(ne).i(pairs)
}

// funcAttrMaxDynamicShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const funcAttrMaxDynamicShared = 8

// allowShared lets kernel fn use up to bytes of dynamic shared memory
// (beyond the default 48 KiB), once per kernel. It reports false, with the
// error kept for the next synchronisation, when the driver refuses.
func (b *Backend) allowShared(fn uintptr, bytes int) bool {
	st := &b.prefill
	if st.shared[fn] >= bytes {
		return true
	}
	if b.capturing {
		b.captureErr = fmt.Errorf("cuda: shared memory of a prefill kernel first set during graph capture")
		return false
	}
	err := b.do(func(w *owner) error {
		return w.check("cuFuncSetAttribute", call(w.d.cuFuncSetAttribute, fn, funcAttrMaxDynamicShared, uintptr(bytes)))
	})
	if err != nil {
		if b.err == nil {
			b.err = fmt.Errorf("cuda: %d bytes of shared memory for a prefill kernel: %w", bytes, err)
		}
		return false
	}
	if st.shared == nil {
		st.shared = map[uintptr]int{}
	}
	st.shared[fn] = bytes
	return true
}

// tensorCoreExperts reports whether the experts of a table (moeDesc words
// each) suit moe_mgateup and moe_mgdown: every weight bf16 with 16-byte
// aligned rows of a multiple of 8 values (hid and each intermediate size).
func tensorCoreExperts(desc []uint64, hid int) bool {
	if hid%8 != 0 || len(desc) == 0 {
		return false
	}
	for e := 0; e+moeDesc <= len(desc); e += moeDesc {
		d := desc[e : e+moeDesc]
		w, dw := compute.DType(d[7]&255), compute.DType(d[7]>>8&255)
		if w != compute.BF16 || dw != compute.BF16 || d[6]%8 != 0 || (d[0]|d[1]|d[2])%16 != 0 {
			return false
		}
	}
	return true
}
