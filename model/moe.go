package model

import (
	"fmt"
	"slices"

	"github.com/lem-engine/lem/compute"
)

// Mixture-of-experts feed-forward blocks, shared by every family that has
// them. For each token a router scores the experts; the block's output is
// the weighted sum of the picked experts' gated MLPs, plus shared experts
// that every token runs:
//
//	logits = W_r·x (+ b_r)
//	(e_j, w_j) = top-k routing of logits            (see compute.Routing)
//	y = Σ_j w_j · FFN_e_j(x) + Σ_s σ(g_s·x) · FFN_s(x)
//	FFN(x) = down(act(gate·x) ⊙ up·x)                (gpt-oss: clamped SwiGLU, biases)
//
// How a family uses it:
//
//   - Describe the block once in a moeSpec: tensor names relative to the
//     layer prefix, the expert layout of the checkpoint, the routing order,
//     the expert width, shared experts, the activation.
//   - A dense-style family sets denseNames.moe = &spec: loadDense then
//     builds a block instead of the dense MLP on every layer for which
//     Config.SparseLayer is true, and runs it in place of the MLP.
//   - A family with its own layer loop builds each block with
//     (*loader).moe(layerPrefix, &spec) (the error, like every loader
//     error, is in loader.err), takes its routing scratch from the
//     state's arena, arena.moeFor(block) (every block of a model routes
//     alike: see sameRouting), and calls
//     block.forward(dst, x, x, scratch) for dst[n, hidden] = MoE(x[n,
//     hidden]); the third argument is the router's input when it differs
//     from the experts' (Gemma 4). forward allocates nothing.
//
// For example, Qwen3-Next's block (routed experts plus a shared expert
// behind a sigmoid gate, stored per expert):
//
//	spec := moeSpec{
//		router: "mlp.gate", experts: "mlp.experts", layout: moePerExpert,
//		shared: "mlp.shared_expert", sharedGate: "mlp.shared_expert_gate",
//		hidden: cfg.HiddenSize, numExperts: cfg.NumExperts, topK: cfg.NumExpertsPerTok,
//		order: compute.SoftmaxTopK, normalize: cfg.NormTopKProb,
//		inter: cfg.MoEIntermediateSize, sharedInter: cfg.SharedExpertIntermediateSize,
//		act: compute.SiLU,
//	}
//
// Gemma 4's experts are in the moeFused layout; its per-expert scale is
// compute.Routing.ExpertScale, which a family sets on the loaded block
// (blk.routing.ExpertScale) as an F32 tensor.
//
// The backend must implement compute.Experts; loading fails with an error
// naming it otherwise (see expertsOf).

// moeLayout is how a checkpoint stores the experts' weights.
type moeLayout uint8

const (
	// moePerExpert: one tensor per expert and projection, as Mixtral and
	// Qwen MoE checkpoints have them: EXPERTS.e.gate_proj.weight [inter,
	// hidden], EXPERTS.e.up_proj.weight, EXPERTS.e.down_proj.weight
	// [hidden, inter].
	moePerExpert moeLayout = iota
	// moeFused: transformers 5's stacked form, EXPERTS.gate_up_proj
	// [experts, 2·inter, hidden] (each expert's gate rows, then its up
	// rows) and EXPERTS.down_proj [experts, hidden, inter], with optional
	// biases EXPERTS.gate_up_proj_bias [experts, 2·inter] and
	// EXPERTS.down_proj_bias [experts, hidden].
	moeFused
	// moeFusedInterleaved: gpt-oss's stacked form, stored input-major:
	// EXPERTS.gate_up_proj [experts, hidden, 2·inter] whose columns
	// alternate gate, up, gate, up…, EXPERTS.down_proj [experts, inter,
	// hidden], and biases as in moeFused with the gate_up bias
	// interleaved the same way. The loader transposes the weights into
	// the [out, in] form kernels read (a copy, in the stored dtype).
	moeFusedInterleaved
	// moeStacked: one tensor per projection stacked over the experts, as
	// GGUF files hold them (ffn_gate_exps, ffn_up_exps, ffn_down_exps):
	// EXPERTS.gate_proj.weight and EXPERTS.up_proj.weight [experts, inter,
	// hidden], EXPERTS.down_proj.weight [experts, hidden, inter], with
	// optional biases EXPERTS.gate_proj.bias and EXPERTS.up_proj.bias
	// [experts, inter] and EXPERTS.down_proj.bias [experts, hidden]. Each
	// expert's weights are views of the stacked tensors, in their stored
	// type. A source that holds EXPERTS.gate_proj.weight is read this way
	// whatever the family's own layout.
	moeStacked
)

// moeSpec describes a family's mixture-of-experts block. Names are relative
// to the layer prefix ("model.layers.N.").
type moeSpec struct {
	// router names the router's weight (router + ".weight", [experts,
	// hidden]) and its optional bias (router + ".bias", [experts]).
	router string
	// experts is the prefix of the experts' tensors, stored as layout says.
	experts string
	layout  moeLayout
	// shared names a shared expert's MLP (shared + ".gate_proj.weight" …),
	// "" for none; sharedGate its sigmoid gate (sharedGate + ".weight",
	// [1, hidden]), "" for a shared expert of weight 1.
	shared, sharedGate string

	hidden           int
	numExperts, topK int
	order            compute.RouteOrder
	normalize        bool // renormalise the top-k probabilities
	inter            int  // the routed experts' width
	sharedInter      int  // the shared expert's width

	act          compute.Activation
	limit, alpha float32 // gpt-oss's clamped SwiGLU when limit > 0
}

// moeBlock is one layer's mixture-of-experts block, loaded onto a backend.
type moeBlock struct {
	b  compute.Backend
	ex compute.Experts

	router, routerBias *compute.Tensor // [experts, hidden], [experts] F32 or nil
	sharedGate         *compute.Tensor // [shared, hidden] or nil
	routing            compute.Routing
	ffn                compute.ExpertFFN
}

// expertsOf returns b's mixture-of-experts operations, or an error naming
// the missing capability.
func expertsOf(b compute.Backend) (compute.Experts, error) {
	ex, ok := b.(compute.Experts)
	if !ok {
		return nil, fmt.Errorf("mixture-of-experts layers need a backend that implements compute.Experts (routing and expert matmuls); %s does not", b.Name())
	}
	return ex, nil
}

// moe loads the block of the layer whose tensors start with p.
func (l *loader) moe(p string, spec *moeSpec) *moeBlock {
	if l.err != nil {
		return nil
	}
	ex, err := expertsOf(l.b)
	if err != nil {
		l.err = err
		return nil
	}
	hid, ne, inter := spec.hidden, spec.numExperts, spec.inter
	if ne <= 0 || spec.topK <= 0 || spec.topK > ne || inter <= 0 {
		l.err = fmt.Errorf("%s: %d experts, top %d, expert width %d: not a mixture of experts", p+spec.experts, ne, spec.topK, inter)
		return nil
	}
	m := &moeBlock{
		b: l.b, ex: ex,
		router:     l.weight(p+spec.router+".weight", ne, hid),
		routerBias: l.optionalVector(p+spec.router+".bias", ne),
		routing: compute.Routing{
			Experts: ne, TopK: spec.topK, Order: spec.order, Normalize: spec.normalize,
		},
		ffn: compute.ExpertFFN{Act: spec.act, Limit: spec.limit, Alpha: spec.alpha},
	}
	e := p + spec.experts
	from := l.logMark()
	layout := spec.layout
	if l.has(e + ".gate_proj.weight") {
		// GGUF files store every family's experts stacked per projection.
		layout = moeStacked
	}
	switch layout {
	case moeStacked:
		m.ffn.Experts = l.stackedSplit(e, ne, hid, inter)
	case moePerExpert:
		for i := range ne {
			m.ffn.Experts = append(m.ffn.Experts, l.mlp(fmt.Sprintf("%s.%d", e, i), hid, inter))
		}
	case moeFused, moeFusedInterleaved:
		m.ffn.Experts = l.stackedExperts(e, spec.layout, ne, hid, inter)
	default:
		l.err = fmt.Errorf("%s: unknown expert layout %d", e, spec.layout)
	}
	l.route(from, spec.topK, ne)
	if spec.shared != "" {
		m.ffn.Experts = append(m.ffn.Experts, l.mlp(p+spec.shared, hid, spec.sharedInter))
		m.routing.Shared = 1
		if spec.sharedGate != "" {
			m.sharedGate = l.weight(p+spec.sharedGate+".weight", 1, hid)
		}
	}
	if l.err != nil {
		return nil
	}
	if c, ok := l.b.(compute.ExpertChecker); ok {
		if err := c.CheckExperts(&m.ffn, hid); err != nil {
			l.err = fmt.Errorf("%s: %w", e, err)
			return nil
		}
	}
	return m
}

// mlp loads one gated MLP: p.gate_proj, p.up_proj, p.down_proj.
func (l *loader) mlp(p string, hid, inter int) compute.Expert {
	return compute.Expert{
		Gate: l.weight(p+".gate_proj.weight", inter, hid),
		Up:   l.weight(p+".up_proj.weight", inter, hid),
		Down: l.weight(p+".down_proj.weight", hid, inter),
	}
}

// stackedExperts loads experts stored as one tensor per projection (p +
// ".gate_up_proj", p + ".down_proj", and their optional "_bias" tensors),
// viewing each expert's slice in place, or transposing it for the
// input-major interleaved layout.
func (l *loader) stackedExperts(p string, layout moeLayout, ne, hid, inter int) []compute.Expert {
	if l.err != nil {
		return nil
	}
	guShape, downShape := []int{ne, 2 * inter, hid}, []int{ne, hid, inter}
	if layout == moeFusedInterleaved {
		guShape, downShape = []int{ne, hid, 2 * inter}, []int{ne, inter, hid}
	}
	gu := l.stored(p+".gate_up_proj", guShape)
	down := l.stored(p+".down_proj", downShape)
	var guBias, downBias []float32
	if l.has(p + ".gate_up_proj_bias") {
		guBias = l.floats(p+".gate_up_proj_bias", l.stored(p+".gate_up_proj_bias", []int{ne, 2 * inter}))
	}
	if l.has(p + ".down_proj_bias") {
		downBias = l.floats(p+".down_proj_bias", l.stored(p+".down_proj_bias", []int{ne, hid}))
	}
	if l.err != nil {
		return nil
	}
	es := gu.DType.Size()
	if layout == moeFusedInterleaved && (es == 0 || down.DType.Size() == 0) {
		l.err = fmt.Errorf("tensor %s: cannot transpose %s experts (only element types)", p+".gate_up_proj", gu.DType)
		return nil
	}
	experts := make([]compute.Expert, ne)
	for e := range experts {
		ex := &experts[e]
		guData, downData := slab(gu, e, ne), slab(down, e, ne)
		if layout == moeFusedInterleaved {
			guData = deinterleaveT(guData, hid, inter, es)
			downData = transpose(downData, inter, hid, down.DType.Size())
		}
		ex.GateUp = l.tensor(p+".gate_up_proj", gu.DType, []int{2 * inter, hid}, guData)
		ex.Down = l.tensor(p+".down_proj", down.DType, []int{hid, inter}, downData)
		if guBias != nil {
			bias := guBias[e*2*inter : (e+1)*2*inter]
			if layout == moeFusedInterleaved {
				bias = deinterleave(bias)
			}
			ex.GateUpBias = l.upload(bias)
		}
		if downBias != nil {
			ex.DownBias = l.upload(downBias[e*hid : (e+1)*hid])
		}
	}
	if l.err != nil {
		return nil
	}
	return experts
}

// stackedSplit loads experts stored as separate stacked projections (the
// moeStacked layout), viewing each expert's slice in place.
func (l *loader) stackedSplit(p string, ne, hid, inter int) []compute.Expert {
	if l.err != nil {
		return nil
	}
	gate := l.stored(p+".gate_proj.weight", []int{ne, inter, hid})
	up := l.stored(p+".up_proj.weight", []int{ne, inter, hid})
	down := l.stored(p+".down_proj.weight", []int{ne, hid, inter})
	var gateBias, upBias, downBias []float32
	hasGB, hasUB := l.has(p+".gate_proj.bias"), l.has(p+".up_proj.bias")
	if hasGB != hasUB {
		l.err = fmt.Errorf("%s: one of gate_proj.bias and up_proj.bias without the other", p)
		return nil
	}
	if hasGB {
		gateBias = l.floats(p+".gate_proj.bias", l.stored(p+".gate_proj.bias", []int{ne, inter}))
		upBias = l.floats(p+".up_proj.bias", l.stored(p+".up_proj.bias", []int{ne, inter}))
	}
	if l.has(p + ".down_proj.bias") {
		downBias = l.floats(p+".down_proj.bias", l.stored(p+".down_proj.bias", []int{ne, hid}))
	}
	if l.err != nil {
		return nil
	}
	experts := make([]compute.Expert, ne)
	for e := range experts {
		ex := &experts[e]
		ex.Gate = l.tensor(p+".gate_proj.weight", gate.DType, []int{inter, hid}, slab(gate, e, ne))
		ex.Up = l.tensor(p+".up_proj.weight", up.DType, []int{inter, hid}, slab(up, e, ne))
		ex.Down = l.tensor(p+".down_proj.weight", down.DType, []int{hid, inter}, slab(down, e, ne))
		if gateBias != nil {
			bias := append(slices.Clone(gateBias[e*inter:(e+1)*inter]), upBias[e*inter:(e+1)*inter]...)
			ex.GateUpBias = l.upload(bias)
		}
		if downBias != nil {
			ex.DownBias = l.upload(downBias[e*hid : (e+1)*hid])
		}
	}
	if l.err != nil {
		return nil
	}
	return experts
}

// stored looks up a tensor and checks its shape and size.
func (l *loader) stored(name string, shape []int) Stored {
	if l.err != nil {
		return Stored{}
	}
	s, ok := l.src.Lookup(name)
	switch {
	case !ok:
		l.err = fmt.Errorf("tensor %s is missing", name)
	case !slices.Equal(s.Shape, shape):
		l.err = fmt.Errorf("tensor %s has shape %v, want %v", name, s.Shape, shape)
	default:
		if rb, err := s.DType.RowBytes(shape[len(shape)-1]); err != nil || len(s.Data) != rb*rowsOf(shape) {
			l.err = fmt.Errorf("tensor %s: %d bytes of %s do not hold shape %v", name, len(s.Data), s.DType, shape)
		}
	}
	return s
}

// floats decodes a stored tensor into float32 values.
func (l *loader) floats(name string, s Stored) []float32 {
	if l.err != nil {
		return nil
	}
	v, err := toF32(s)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return v
}

// tensor makes a weight of data on the backend.
func (l *loader) tensor(name string, dt compute.DType, shape []int, data []byte) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	t, err := l.b.Weight(dt, shape, data)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return t
}

// upload makes an F32 tensor of vals on the backend.
func (l *loader) upload(vals []float32) *compute.Tensor {
	t := l.b.Alloc(compute.F32, len(vals))
	l.b.Upload(t, vals)
	return t
}

// slab returns the bytes of expert e of a tensor stacked over ne experts.
func slab(s Stored, e, ne int) []byte {
	n := len(s.Data) / ne
	return s.Data[e*n : (e+1)*n]
}

// deinterleaveT turns an input-major [hid, 2·inter] matrix of es-byte
// elements whose columns alternate gate and up into the output-major
// [2·inter, hid] matrix of the gate's rows then the up's.
func deinterleaveT(src []byte, hid, inter, es int) []byte {
	dst := make([]byte, len(src))
	for r := range 2 * inter {
		c := 2*r + 1 - 2*inter // up rows: odd columns
		if r < inter {
			c = 2 * r // gate rows: even columns
		}
		for h := range hid {
			copy(dst[(r*hid+h)*es:(r*hid+h+1)*es], src[(h*2*inter+c)*es:(h*2*inter+c+1)*es])
		}
	}
	return dst
}

// transpose turns a [rows, cols] matrix of es-byte elements into [cols, rows].
func transpose(src []byte, rows, cols, es int) []byte {
	dst := make([]byte, len(src))
	for r := range rows {
		for c := range cols {
			copy(dst[(c*rows+r)*es:(c*rows+r+1)*es], src[(r*cols+c)*es:(r*cols+c+1)*es])
		}
	}
	return dst
}

// deinterleave returns v's even elements followed by its odd ones.
func deinterleave(v []float32) []float32 {
	out := make([]float32, len(v))
	h := len(v) / 2
	for i := range h {
		out[i], out[h+i] = v[2*i], v[2*i+1]
	}
	return out
}

func rowsOf(shape []int) int {
	n := 1
	for _, d := range shape[:len(shape)-1] {
		n *= d
	}
	return n
}

// moeScratch holds one forward pass's routing tensors for n rows. Every
// block of a model shares one routing geometry, so one scratch serves all
// its layers.
type moeScratch struct {
	logits, shared, ids, weights *compute.Tensor
}

// newMoEScratch allocates routing scratch for n rows, shaped like blk's
// routing (any block of the model).
func newMoEScratch(b compute.Backend, n int, blk *moeBlock) *moeScratch {
	r := &blk.routing
	s := &moeScratch{
		logits:  b.Alloc(compute.F32, n, r.Experts),
		ids:     b.Alloc(compute.I32, n, r.Slots()),
		weights: b.Alloc(compute.F32, n, r.Slots()),
	}
	if blk.sharedGate != nil {
		s.shared = b.Alloc(compute.F32, n, r.Shared)
	}
	return s
}

// forward computes dst[n, hidden] = MoE(x[n, hidden]), routing on rx (x
// itself, or the router's own input where a family feeds it one).
func (m *moeBlock) forward(dst, x, rx *compute.Tensor, s *moeScratch) {
	b := m.b
	b.MatMul(s.logits, rx, m.router)
	if m.routerBias != nil {
		b.Add(s.logits, s.logits, m.routerBias)
	}
	var shared *compute.Tensor
	if m.sharedGate != nil {
		b.MatMul(s.shared, rx, m.sharedGate)
		shared = s.shared
	}
	m.ex.Route(s.ids, s.weights, s.logits, shared, &m.routing)
	m.ex.ApplyExperts(dst, x, s.ids, s.weights, &m.ffn)
}

// sameRouting reports whether two blocks can share a moeScratch.
func sameRouting(a, b *moeBlock) bool {
	return a.routing.Experts == b.routing.Experts && a.routing.Slots() == b.routing.Slots() &&
		(a.sharedGate == nil) == (b.sharedGate == nil)
}
