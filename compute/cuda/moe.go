package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

var _ compute.Experts = (*Backend)(nil)

// moeDesc is the number of 64-bit words that describe one expert in the
// device table the expert kernels read (MOE_DESC in kernels/moe.cu): the
// addresses of the gate, up and down weights, of the gate, up and down
// biases (0 when absent), the intermediate size and the storage types.
const moeDesc = 8

// maxRouted is the most routed experts moe_route handles (32 per lane).
const maxRouted = 1024

// expertTable is the device copy of an ExpertFFN's descriptors.
type expertTable struct {
	host     []uint64
	dev      *buffer
	maxInter int
}

// describeExperts fills dst (moeDesc words per expert) with the
// descriptors of f's experts for inputs of hid values and returns it with
// the largest intermediate size. Every expert must read hid values and
// write hid values, with gate and up of one storage type.
func describeExperts(dst []uint64, f *compute.ExpertFFN, hid int) ([]uint64, int, error) {
	dst = dst[:0]
	maxInter := 0
	for e := range f.Experts {
		ex := &f.Experts[e]
		if ex.Down == nil || ex.Down.Rows() != hid {
			return nil, 0, fmt.Errorf("expert %d: down projection of hidden size %d expected", e, hid)
		}
		inter := ex.Inter()
		var gate, up uintptr
		var wt compute.DType
		if ex.GateUp != nil {
			wt = ex.GateUp.DType
			if ex.GateUp.Rows() != 2*inter || ex.GateUp.Cols() != hid {
				return nil, 0, fmt.Errorf("expert %d: fused gate/up %v, want [%d %d]", e, ex.GateUp.Shape, 2*inter, hid)
			}
			gate = dptr(ex.GateUp)
			up = gate + uintptr(inter*hid*wt.Size())
		} else {
			if ex.Gate == nil || ex.Up == nil {
				return nil, 0, fmt.Errorf("expert %d: no gate and up projections", e)
			}
			wt = ex.Gate.DType
			if ex.Up.DType != wt {
				return nil, 0, fmt.Errorf("expert %d: gate %s and up %s of different types", e, wt, ex.Up.DType)
			}
			for _, w := range []*compute.Tensor{ex.Gate, ex.Up} {
				if w.Rows() != inter || w.Cols() != hid {
					return nil, 0, fmt.Errorf("expert %d: gate/up projection %v, want [%d %d]", e, w.Shape, inter, hid)
				}
			}
			gate, up = dptr(ex.Gate), dptr(ex.Up)
		}
		for _, dt := range []compute.DType{wt, ex.Down.DType} {
			if dt != compute.F32 && dt != compute.F16 && dt != compute.BF16 {
				return nil, 0, fmt.Errorf("expert %d: weights of type %s", e, dt)
			}
		}
		var gb, ub, db uintptr
		var gbt, dbt compute.DType
		if t := ex.GateUpBias; t != nil {
			if t.Len() != 2*inter {
				return nil, 0, fmt.Errorf("expert %d: gate/up bias of %d values, want %d", e, t.Len(), 2*inter)
			}
			gbt = t.DType
			gb = dptr(t)
			ub = gb + uintptr(inter*gbt.Size())
		}
		if t := ex.DownBias; t != nil {
			if t.Len() != hid {
				return nil, 0, fmt.Errorf("expert %d: down bias of %d values, want %d", e, t.Len(), hid)
			}
			dbt = t.DType
			db = dptr(t)
		}
		dts := uint64(wt) | uint64(ex.Down.DType)<<8 | uint64(gbt)<<16 | uint64(dbt)<<24
		dst = append(dst, uint64(gate), uint64(up), uint64(dptr(ex.Down)), uint64(gb), uint64(ub), uint64(db), uint64(inter), dts)
		maxInter = max(maxInter, inter)
	}
	return dst, maxInter, nil
}

// CheckExperts implements compute.ExpertChecker: the expert kernels read
// f32, f16 and bf16 weights only.
func (b *Backend) CheckExperts(f *compute.ExpertFFN, hidden int) error {
	_, _, err := describeExperts(nil, f, hidden)
	if err != nil {
		return fmt.Errorf("cuda: %w (run models with quantized experts on the CPU)", err)
	}
	return nil
}

// expertTable returns the device table of f's descriptors, uploading it
// when f is new or has changed. It must not be first needed while a graph
// is captured (the decode step that precedes a capture uploads it).
func (b *Backend) expertTable(f *compute.ExpertFFN, hid int) *expertTable {
	desc, maxInter, err := describeExperts(b.moeDesc, f, hid)
	if err != nil {
		panic("cuda: ApplyExperts: " + err.Error())
	}
	b.moeDesc = desc
	if t := b.experts[f]; t != nil && slices.Equal(t.host, desc) {
		return t
	}
	if b.capturing {
		b.captureErr = fmt.Errorf("cuda: ApplyExperts: expert table first used during graph capture")
		return nil
	}
	dev, err := b.rawAlloc(int64(8*max(len(desc), 1)), false)
	if err != nil {
		panic(fmt.Sprintf("cuda: expert table of %d experts: %v", len(f.Experts), err))
	}
	if len(desc) > 0 {
		b.upload(dev.ptr, unsafe.Slice((*byte)(unsafe.Pointer(&desc[0])), 8*len(desc)))
	}
	if b.experts == nil {
		b.experts = map[*compute.ExpertFFN]*expertTable{}
	}
	t := &expertTable{host: slices.Clone(desc), dev: dev, maxInter: maxInter}
	b.experts[f] = t
	return t
}

// Route implements compute.Experts with one warp per row; the ids and
// weights stay on the device.
func (b *Backend) Route(ids, weights, logits, shared *compute.Tensor, r *compute.Routing) {
	n, ne, k, slots := logits.Rows(), r.Experts, r.TopK, r.Slots()
	switch {
	case logits.Cols() != ne:
		panic(fmt.Sprintf("cuda: Route: logits have %d columns for %d experts", logits.Cols(), ne))
	case k <= 0 || k > ne:
		panic(fmt.Sprintf("cuda: Route: top %d of %d experts", k, ne))
	case ne > maxRouted:
		panic(fmt.Sprintf("cuda: Route: %d experts > %d", ne, maxRouted))
	case ids.Len() < n*slots || weights.Len() < n*slots:
		panic(fmt.Sprintf("cuda: Route: %d rows of %d slots do not fit ids %v and weights %v", n, slots, ids.Shape, weights.Shape))
	case r.Shared > 0 && shared != nil && shared.Len() < n*r.Shared:
		panic(fmt.Sprintf("cuda: Route: shared gate logits %v for %d rows of %d shared experts", shared.Shape, n, r.Shared))
	case r.Order != compute.SoftmaxTopK && r.Order != compute.TopKSoftmax:
		panic(fmt.Sprintf("cuda: Route: unknown routing order %d", r.Order))
	}
	if n == 0 {
		return
	}
	norm := 0
	if r.Normalize {
		norm = 1
	}
	if r.Shared == 0 {
		shared = nil
	}
	o := b.launch(b.k.moeRoute, "moe_route", n, 32)
	o.shared = uint32(4 * ne)
	o.ptr(dptr(ids)).ptr(dptr(weights)).ptr(dptr(logits)).ptr(dptr(shared)).
		i(ne).i(k).i(r.Shared).i(int(r.Order)).i(norm).ptr(dptr(r.ExpertScale)).i(dtypeOf(r.ExpertScale))
}

// ApplyExperts implements compute.Experts. For a single row (decode) a
// first kernel computes the gated activations of every slot, one warp per
// intermediate unit, reading the slot's expert id from the device; a second
// applies the down projections and sums the slots with their weights. Only
// the picked experts' weights are read. Several rows (prefill) are grouped
// by expert on the device first (see groupedExperts), so that each expert
// runs as one matrix product over all its rows.
func (b *Backend) ApplyExperts(dst, x, ids, weights *compute.Tensor, f *compute.ExpertFFN) {
	n, hid, slots := x.Rows(), x.Cols(), ids.Cols()
	if dst.Rows() != n || dst.Cols() != hid || ids.Rows() != n || weights.Len() != ids.Len() {
		panic(fmt.Sprintf("cuda: ApplyExperts: dst %v, x %v, ids %v, weights %v", dst.Shape, x.Shape, ids.Shape, weights.Shape))
	}
	if n == 0 || hid == 0 {
		return
	}
	t := b.expertTable(f, hid)
	if t == nil || slots == 0 || t.maxInter == 0 {
		return
	}
	stride := (t.maxInter + 3) &^ 3
	if n > 1 && !b.prefill.sequential && groupable(n*slots, len(f.Experts)) {
		b.groupedExperts(dst, x, ids, weights, f, t, stride)
		return
	}
	act := b.scratch(&b.moeAct, n*slots*stride*4)
	lim := f.Limit
	b.record(op{fn: b.k.moeGateUp, name: "moe_gateup",
		grid: [3]uint32{uint32(n * slots), uint32((t.maxInter + 3) / 4), 1}, block: [3]uint32{128, 1, 1}}).
		ptr(act).ptr(dptr(x)).ptr(dptr(ids)).ptr(t.dev.ptr).i(len(f.Experts)).i(slots).
		i(hid).i(stride).i(int(f.Act)).f(lim).f(f.Alpha)
	b.record(op{fn: b.k.moeDown, name: "moe_down",
		grid: [3]uint32{uint32(n), uint32((hid + 3) / 4), 1}, block: [3]uint32{128, 1, 1}}).
		ptr(dptr(dst)).ptr(act).ptr(dptr(ids)).ptr(dptr(weights)).ptr(t.dev.ptr).i(len(f.Experts)).
		i(slots).i(hid).i(stride)
}
