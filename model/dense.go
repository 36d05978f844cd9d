package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// dense is the decoder-only transformer that the dense families share:
// token embedding, a stack of attention + gated MLP blocks with residual
// connections, a final norm and the output projection. Family files decide
// which norms exist, how tensors are named, and the scalar knobs.
type dense struct {
	cfg *Config
	b   compute.Backend

	embed, norm, output *compute.Tensor
	layers              []denseLayer

	embedScale    float32 // multiplies the token embeddings
	residualScale float32 // multiplies each block's output before the residual add
	normOffset    float32 // RMSNorm weight offset: 1 for Gemma's (1 + w)
	logitScale    float32 // multiplies the logits
	finalSoftCap  float32
	act           compute.Activation
	eps           float32
}

// denseLayer holds one block. Nil tensors are absent in that family.
type denseLayer struct {
	inNorm, postAttnNorm, preFFNorm, postFFNorm *compute.Tensor

	q, k, v, o     *compute.Tensor
	qb, kb, vb, ob *compute.Tensor // biases
	qkv            *compute.Tensor // fused [q; k; v] projection (phi3)
	qNorm, kNorm   *compute.Tensor // per-head or whole-projection norms

	gate, up, down *compute.Tensor
	gateUp         *compute.Tensor // fused [gate; up] projection (phi3)
	moe            *moeBlock       // set instead of the MLP on sparse layers

	attn compute.Attention
	rope *compute.Rope // nil: no rotary embedding in this layer
}

// denseState is the per-sequence state: one KV cache per layer, plus
// scratch buffers sized for the chunk lengths seen so far.
type denseState struct {
	caches  []*compute.KVCache
	ctx     int
	scratch map[int]*denseScratch
}

func (s *denseState) Capacity() int { return s.ctx }

// Memory implements State.
func (s *denseState) Memory() StateMemory { return StateMemory{KV: cacheBytes(s.caches...)} }

// CanRewind implements State. A ring of capacity c holds positions
// [length-c, length); continuing at n needs positions (n-window, n), which
// survive unless the ring wrapped past them.
func (s *denseState) CanRewind(n, length int) bool {
	for _, c := range s.caches {
		if c.Ring && length > c.Capacity && n < length-1 {
			return false
		}
	}
	return true
}

type denseScratch struct {
	x, h, q, k, v, a, o, g, u, last *compute.Tensor
	qkv, gu                         *compute.Tensor
	moe                             *moeScratch // nil without sparse layers
}

func (m *dense) Config() *Config { return m.cfg }

// NewState allocates KV caches: full-attention layers hold ctx positions,
// sliding-window layers a ring of exactly their window.
func (m *dense) NewState(ctx int) State {
	st := &denseState{ctx: ctx, scratch: map[int]*denseScratch{}}
	for _, l := range m.layers {
		capacity, ring := ctx, false
		if l.attn.Window > 0 && l.attn.Window < ctx {
			capacity, ring = l.attn.Window, true
		}
		st.caches = append(st.caches, m.b.NewKVCache(capacity, l.attn.KVHeads*l.attn.HeadDim, ring))
	}
	return st
}

func (m *dense) scratchFor(st *denseState, n int) *denseScratch {
	if s, ok := st.scratch[n]; ok {
		return s
	}
	c := m.cfg
	qDim, kvDim := 0, 0
	for _, l := range m.layers {
		qDim = max(qDim, l.attn.Heads*l.attn.HeadDim)
		kvDim = max(kvDim, l.attn.KVHeads*l.attn.HeadDim)
	}
	f := func(cols int) *compute.Tensor { return m.b.Alloc(compute.F32, n, cols) }
	s := &denseScratch{
		x: f(c.HiddenSize), h: f(c.HiddenSize), o: f(c.HiddenSize),
		last: m.b.Alloc(compute.F32, 1, c.HiddenSize),
		q:    f(qDim), a: f(qDim), k: f(kvDim), v: f(kvDim),
		g: f(c.IntermediateSize), u: f(c.IntermediateSize),
	}
	if m.layers[0].qkv != nil {
		s.qkv = f(qDim + 2*kvDim)
	}
	if m.layers[0].gateUp != nil {
		s.gu = f(2 * c.IntermediateSize)
	}
	for _, l := range m.layers {
		if l.moe != nil {
			s.moe = newMoEScratch(m.b, n, l.moe)
			break
		}
	}
	// Keep the decode buffers and the most recent chunk size only.
	for k := range st.scratch {
		if k != 1 {
			delete(st.scratch, k)
		}
	}
	st.scratch[n] = s
	return s
}

// Forward implements Model.
func (m *dense) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*denseState)
	b := m.b
	n := ids.Len()
	s := m.scratchFor(st, n)
	x := s.x
	b.Embed(x, m.embed, ids)
	if m.embedScale != 1 {
		b.Scale(x, x, m.embedScale)
	}
	for i := range m.layers {
		l := &m.layers[i]
		// Attention block.
		h := x
		if l.inNorm != nil {
			h = s.h
			b.RMSNorm(h, x, l.inNorm, m.eps, m.normOffset)
		}
		m.attention(l, st.caches[i], s, h, pos)
		m.residual(x, s.o, l.postAttnNorm)
		// MLP block.
		h = x
		if l.preFFNorm != nil {
			h = s.h
			b.RMSNorm(h, x, l.preFFNorm, m.eps, m.normOffset)
		}
		if l.moe != nil {
			l.moe.forward(s.o, h, h, s.moe)
		} else {
			m.mlp(l, s, h)
		}
		m.residual(x, s.o, l.postFFNorm)
	}
	if logits == nil {
		return
	}
	out := x
	if logits.Rows() == 1 && n > 1 {
		out = b.View(x, n-1, n)
	}
	h := s.last
	if out.Rows() == n {
		h = s.h
	}
	b.RMSNorm(h, out, m.norm, m.eps, m.normOffset)
	b.MatMul(logits, h, m.output)
	if m.logitScale != 1 {
		b.Scale(logits, logits, m.logitScale)
	}
	if m.finalSoftCap > 0 {
		b.SoftCap(logits, logits, m.finalSoftCap)
	}
}

// residual adds a block's output y (normalised first when the family has a
// post-norm) to x.
func (m *dense) residual(x, y, postNorm *compute.Tensor) {
	if postNorm != nil {
		m.b.RMSNorm(y, y, postNorm, m.eps, m.normOffset)
	}
	if m.residualScale != 1 {
		m.b.Scale(y, y, m.residualScale)
	}
	m.b.Add(x, x, y)
}

// attention computes softmax(q·kᵀ)·v over the cache and writes the
// projected result to s.o.
func (m *dense) attention(l *denseLayer, cache *compute.KVCache, s *denseScratch, h, pos *compute.Tensor) {
	b := m.b
	q, k, v := s.q, s.k, s.v
	if l.qkv != nil {
		b.MatMul(s.qkv, h, l.qkv)
		b.Columns(q, s.qkv, 0)
		b.Columns(k, s.qkv, q.Cols())
		b.Columns(v, s.qkv, q.Cols()+k.Cols())
	} else {
		project(b, q, h, l.q, l.qb)
		project(b, k, h, l.k, l.kb)
		project(b, v, h, l.v, l.vb)
	}
	if l.qNorm != nil {
		b.RMSNorm(q, q, l.qNorm, m.eps, m.normOffset)
		b.RMSNorm(k, k, l.kNorm, m.eps, m.normOffset)
	}
	if l.rope != nil {
		b.RoPE(q, pos, l.attn.Heads, l.rope)
		b.RoPE(k, pos, l.attn.KVHeads, l.rope)
	}
	b.Attend(s.a, q, k, v, cache, pos, &l.attn)
	project(b, s.o, s.a, l.o, l.ob)
}

// mlp computes down(act(gate(h)) ⊙ up(h)) into s.o.
func (m *dense) mlp(l *denseLayer, s *denseScratch, h *compute.Tensor) {
	b := m.b
	if l.gateUp != nil {
		b.MatMul(s.gu, h, l.gateUp)
		b.Columns(s.g, s.gu, 0)
		b.Columns(s.u, s.gu, s.g.Cols())
	} else {
		b.MatMul(s.g, h, l.gate)
		b.MatMul(s.u, h, l.up)
	}
	b.GLU(s.g, s.g, s.u, m.act)
	b.MatMul(s.o, s.g, l.down)
}

// project computes dst = x·wᵀ (+ bias).
func project(b compute.Backend, dst, x, w, bias *compute.Tensor) {
	b.MatMul(dst, x, w)
	if bias != nil {
		b.Add(dst, dst, bias)
	}
}

// denseNames maps a family's tensor names for layer i.
type denseNames struct {
	inNorm, postAttnNorm, preFFNorm, postFFNorm string
	qNorm, kNorm                                string
	// moe, when set, describes the mixture-of-experts block that replaces
	// the MLP on the layers Config.SparseLayer marks.
	moe *moeSpec
}

// llamaNames are the tensor names of the llama family and its many
// descendants.
var llamaNames = denseNames{inNorm: "input_layernorm", preFFNorm: "post_attention_layernorm"}

// loadDense reads the weights common to the dense families. Family loaders
// adjust the knobs afterwards.
func loadDense(cfg *Config, src Source, b compute.Backend, names denseNames) (*dense, error) {
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	m := &dense{
		cfg: cfg, b: b, act: act, eps: float32(cfg.RMSNormEps),
		embedScale: 1, residualScale: 1, logitScale: 1,
	}
	hid, vocab, ff := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", vocab, hid)
	m.norm = l.vector("model.norm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", m.embed, vocab, hid)
	ropes := map[string]*compute.Rope{}
	var first *moeBlock // the first sparse layer's block
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		hd := cfg.HeadDimFor(i)
		nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
		ly := denseLayer{
			attn: compute.Attention{
				Heads: nh, KVHeads: nkv, HeadDim: hd,
				Scale: float32(1 / math.Sqrt(float64(hd))),
			},
		}
		layerType := cfg.LayerType(i)
		if layerType == "sliding_attention" {
			ly.attn.Window = cfg.SlidingWindow
		}
		key := fmt.Sprintf("%s/%d", layerType, hd)
		if ropes[key] == nil {
			r, err := NewRope(cfg.Rope(layerType), hd, cfg.MaxPositionEmbeddings)
			if err != nil {
				return nil, fmt.Errorf("%s layer %d: %w", cfg.ModelType, i, err)
			}
			ropes[key] = r
		}
		ly.rope = ropes[key]
		vec := func(name string, n int) *compute.Tensor {
			if name == "" {
				return nil
			}
			return l.vector(p+name+".weight", n)
		}
		ly.inNorm = vec(names.inNorm, hid)
		ly.postAttnNorm = vec(names.postAttnNorm, hid)
		ly.preFFNorm = vec(names.preFFNorm, hid)
		ly.postFFNorm = vec(names.postFFNorm, hid)
		if names.qNorm != "" {
			n := hd
			if s, ok := src.Lookup(p + names.qNorm + ".weight"); ok && len(s.Shape) == 1 {
				n = s.Shape[0] // whole-projection norm (olmo2) or per head
			}
			ly.qNorm = vec(names.qNorm, n)
			kn := hd
			if n != hd {
				kn = nkv * hd
			}
			ly.kNorm = vec(names.kNorm, kn)
		}
		a := p + "self_attn."
		if l.has(a + "qkv_proj.weight") {
			ly.qkv = l.weight(a+"qkv_proj.weight", (nh+2*nkv)*hd, hid)
		} else {
			ly.q = l.weight(a+"q_proj.weight", nh*hd, hid)
			ly.k = l.weight(a+"k_proj.weight", nkv*hd, hid)
			ly.v = l.weight(a+"v_proj.weight", nkv*hd, hid)
			ly.qb = l.optionalVector(a+"q_proj.bias", nh*hd)
			ly.kb = l.optionalVector(a+"k_proj.bias", nkv*hd)
			ly.vb = l.optionalVector(a+"v_proj.bias", nkv*hd)
		}
		ly.o = l.weight(a+"o_proj.weight", hid, nh*hd)
		ly.ob = l.optionalVector(a+"o_proj.bias", hid)
		f := p + "mlp."
		if names.moe != nil && cfg.SparseLayer(i) {
			ly.moe = l.moe(p, names.moe)
			if ly.moe != nil && first != nil && !sameRouting(first, ly.moe) {
				l.err = fmt.Errorf("layer %d: routing differs from an earlier sparse layer's", i)
			}
			if first == nil {
				first = ly.moe
			}
		} else if l.has(f + "gate_up_proj.weight") {
			ly.gateUp = l.weight(f+"gate_up_proj.weight", 2*ff, hid)
			ly.down = l.weight(f+"down_proj.weight", hid, ff)
		} else {
			ly.gate = l.weight(f+"gate_proj.weight", ff, hid)
			ly.up = l.weight(f+"up_proj.weight", ff, hid)
			ly.down = l.weight(f+"down_proj.weight", hid, ff)
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}
