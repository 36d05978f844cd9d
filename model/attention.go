package model

import (
	"math"

	"github.com/lem-engine/lem/compute"
)

// attention is the softmax attention block of every family that has one.
// Its options are nil tensors or neutral scalars when a family lacks them:
//
//	q = h·W_qᵀ + b_q,  k = (h·W_kᵀ + b_k)·keyScale,  v = h·W_vᵀ + b_v
//	                   (or [q k v] = h·W_qkvᵀ, one fused product)
//	q, k, v = norm_q(q), norm_k(k), norm_v(v)     (per head or whole rows)
//	a = softmax(cap(RoPE(q)·RoPE(k)ᵀ·scale) [window] [sinks]) · v
//	a = a ⊙ σ(h·W_gᵀ)                              (output gate)
//	out = a·W_oᵀ + b_o
//
// The window, sinks, soft cap and score scale are those of attn. A
// KV-shared layer (Gemma 3n and 4's trailing layers) computes no keys and
// values: it attends over those of layer source, which keeps them in
// buffers of its own for it.
//
// The block issues its operations in one order that every family shares,
// which the CUDA backend's decode fusion relies on: the q, k and v products
// adjacent (after the norm that made h), then the norms, then the rotation
// of q and of k immediately before Attend.
type attention struct {
	q, k, v, o     *compute.Tensor
	qkv            *compute.Tensor // fused [q; k; v] projection (phi3)
	gate           *compute.Tensor // output gate projection (Qwen3-Next)
	qb, kb, vb, ob *compute.Tensor // biases
	qNorm, kNorm   *compute.Tensor // [head_dim] per head, or whole projection
	vNorm          *compute.Tensor // Gemma 4 normalises values (all-ones weight)
	normOffset     float32         // 1 where norms scale by (1 + w)
	eps            float32
	keyScale       float32 // multiplies the keys (Falcon-H1's key_multiplier); 1: none
	attn           compute.Attention
	rope           *compute.Rope // nil: no rotary embedding

	layer, source int  // source == layer when the layer computes its own keys and values
	shared        bool // a later layer attends over this layer's keys and values
}

// newAttention returns layer i's block with nh query heads of hd values
// over nkv key/value heads, scores scaled by hd^-½.
func newAttention(i, nh, nkv, hd int, eps float32, rope *compute.Rope) attention {
	return attention{
		attn:     compute.Attention{Heads: nh, KVHeads: nkv, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))},
		eps:      eps,
		keyScale: 1,
		rope:     rope,
		layer:    i, source: i,
	}
}

// attnNames are a family's tensor names within an attention block (under
// its prefix, e.g. "model.layers.3.self_attn."); empty norms are absent.
type attnNames struct {
	o, qNorm, kNorm string
	biases          bool // optional q, k, v and o biases
	fused           bool // a fused qkv_proj where the checkpoint has one
}

// load reads the projections (and norms, per head) under prefix p.
func (a *attention) load(l *loader, p string, hid int, names attnNames) {
	nh, nkv, hd := a.attn.Heads, a.attn.KVHeads, a.attn.HeadDim
	if names.fused && l.has(p+"qkv_proj.weight") {
		a.qkv = l.weight(p+"qkv_proj.weight", (nh+2*nkv)*hd, hid)
	} else {
		a.q = l.weight(p+"q_proj.weight", nh*hd, hid)
		a.k = l.weight(p+"k_proj.weight", nkv*hd, hid)
		a.v = l.weight(p+"v_proj.weight", nkv*hd, hid)
		if names.biases {
			a.qb = l.optionalVector(p+"q_proj.bias", nh*hd)
			a.kb = l.optionalVector(p+"k_proj.bias", nkv*hd)
			a.vb = l.optionalVector(p+"v_proj.bias", nkv*hd)
		}
	}
	a.o = l.weight(p+names.o+".weight", hid, nh*hd)
	if names.biases {
		a.ob = l.optionalVector(p+names.o+".bias", hid)
	}
	if names.qNorm != "" {
		a.qNorm = l.vector(p+names.qNorm+".weight", hd)
		a.kNorm = l.vector(p+names.kNorm+".weight", hd)
	}
}

// loadHybridAttention reads layer i's attention block under prefix, as the
// hybrid families (LFM2, Falcon-H1) put it beside their recurrent layers:
// heads of head_dim over a full KV cache, per-head q/k norms where names
// has them.
func loadHybridAttention(l *loader, cfg *Config, i int, prefix string, names attnNames, rope *compute.Rope) *attention {
	a := newAttention(i, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim, float32(cfg.NormEps()), rope)
	a.load(l, prefix, cfg.HiddenSize, names)
	return &a
}

// ownsCache reports whether the layer computes and caches its own keys and
// values.
func (a *attention) ownsCache() bool { return a.source == a.layer }

// forward computes the block for the rows h of pass p into out, over the
// layer's keys and values (one sequence's cache, or a batch's paged pool).
// withShared says whether the layers reading this one's keys and values
// run in this forward pass.
func (a *attention) forward(p *pass, out, h *compute.Tensor, withShared bool) {
	b, ar, pos := p.b, p.ar, p.pos
	hd := a.attn.HeadDim
	qd, kd := a.attn.Heads*hd, a.attn.KVHeads*hd
	q, att := ar.get("attn.q", qd), ar.get("attn.a", qd)
	// Keys and values that a later layer reads live in buffers of their own.
	k, v := ar.get("attn.k", kd), ar.get("attn.v", kd)
	if a.shared || !a.ownsCache() {
		k, v = ar.layer("attn.k", a.source, kd), ar.layer("attn.v", a.source, kd)
	}
	own := a.ownsCache()
	// The products, adjacent.
	switch {
	case a.qkv != nil:
		qkv := ar.get("attn.qkv", qd+2*kd)
		b.MatMul(qkv, h, a.qkv)
		b.Columns(q, qkv, 0)
		b.Columns(k, qkv, qd)
		b.Columns(v, qkv, qd+kd)
	case own:
		project(b, q, h, a.q, a.qb)
		project(b, k, h, a.k, a.kb)
		project(b, v, h, a.v, a.vb)
	default:
		project(b, q, h, a.q, a.qb)
	}
	var gate *compute.Tensor
	if a.gate != nil {
		gate = ar.get("attn.gate", qd)
		b.MatMul(gate, h, a.gate)
	}
	if own && a.keyScale != 1 {
		b.Scale(k, k, a.keyScale)
	}
	// The norms.
	if a.qNorm != nil {
		b.RMSNorm(q, q, a.qNorm, a.eps, a.normOffset)
	}
	if own && a.kNorm != nil {
		b.RMSNorm(k, k, a.kNorm, a.eps, a.normOffset)
	}
	if own && a.vNorm != nil {
		b.RMSNorm(v, v, a.vNorm, a.eps, 0)
	}
	// One sequence's cache: a ring that a chunk overwrites needs a
	// snapshot for its readers. A batch's pools are never overwritten.
	var cache *compute.KVCache
	if st := p.kv; st != nil {
		cache = st.caches[a.source]
		if own {
			if snap := st.snaps[a.layer]; a.shared && withShared && snap != nil && h.Rows() > 1 {
				// A chunk overwrites ring slots that its own first rows
				// still see; the readers attend over the ring as it was
				// before.
				b.Columns(snap.K, cache.K, 0)
				b.Columns(snap.V, cache.V, 0)
			}
		} else if snap := st.snaps[a.source]; snap != nil && h.Rows() > 1 {
			cache = snap
		}
	}
	// The rotation of q and k, right before the attention. A reader passes
	// its source's new keys and values again: Attend stores them in the
	// same slots with the same values.
	if a.rope != nil {
		b.RoPE(q, pos, a.attn.Heads, a.rope)
		if own {
			b.RoPE(k, pos, a.attn.KVHeads, a.rope)
		}
	}
	p.attend(a, att, q, k, v, cache)
	if gate != nil {
		b.GLU(att, gate, att, compute.Sigmoid)
	}
	project(b, out, att, a.o, a.ob)
}

// mlp is the gated feed-forward block
//
//	out = (down(act(gate(h)·gateScale) ⊙ up(h)))·downScale
//
// with gate and up as one fused product where the checkpoint has one, and
// Gemma 3n's activation sparsity (the gate's values below a Gaussian
// cut-off set to zero) where sparsity is set.
type mlp struct {
	gate, up, down       *compute.Tensor
	gateUp               *compute.Tensor // fused [gate; up] (phi3)
	act                  compute.Activation
	gateScale, downScale float32
	sparsity             float32        // standard score of the gate's cut-off; 0: dense
	rows                 compute.RowOps // with sparsity
}

// loadMLP reads the block under prefix p (e.g. "model.layers.3.mlp.") with
// the given projection names, of width ff.
func loadMLP(l *loader, p, gate, up, down string, hid, ff int, act compute.Activation) mlp {
	return mlp{
		gate:      l.weight(p+gate+".weight", ff, hid),
		up:        l.weight(p+up+".weight", ff, hid),
		down:      l.weight(p+down+".weight", hid, ff),
		act:       act,
		gateScale: 1, downScale: 1,
	}
}

// inter returns the block's intermediate width.
func (f *mlp) inter() int { return f.down.Cols() }

// forward writes the block's output for h into out.
func (f *mlp) forward(b compute.Backend, ar *arena, out, h *compute.Tensor) {
	ff := f.inter()
	g, u := ar.get("mlp.gate", ff), ar.get("mlp.up", ff)
	if f.gateUp != nil {
		gu := ar.get("mlp.gate_up", 2*ff)
		b.MatMul(gu, h, f.gateUp)
		b.Columns(g, gu, 0)
		b.Columns(u, gu, ff)
	} else {
		b.MatMul(g, h, f.gate)
		b.MatMul(u, h, f.up)
	}
	if f.sparsity != 0 {
		f.rows.GaussianTopK(g, g, f.sparsity)
	}
	if f.gateScale != 1 {
		b.Scale(g, g, f.gateScale)
	}
	b.GLU(g, g, u, f.act)
	b.MatMul(out, g, f.down)
	if f.downScale != 1 {
		b.Scale(out, out, f.downScale)
	}
}

// project computes dst = x·wᵀ (+ bias).
func project(b compute.Backend, dst, x, w, bias *compute.Tensor) {
	b.MatMul(dst, x, w)
	if bias != nil {
		b.Add(dst, dst, bias)
	}
}
