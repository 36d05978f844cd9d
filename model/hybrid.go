package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// The blocks that hybrid families (LFM2, Falcon-H1) put beside their
// recurrent layers: grouped-query attention over a full KV cache, and a
// gated MLP.

// hybridAttention is one attention block.
type hybridAttention struct {
	q, k, v, o   *compute.Tensor
	qNorm, kNorm *compute.Tensor // per-head RMSNorm of queries and keys; nil when absent
	keyScale     float32         // multiplies the keys (Falcon-H1's key_multiplier)
	attn         compute.Attention
	rope         *compute.Rope
	eps          float32
}

type attnScratch struct{ q, k, v, a *compute.Tensor }

// attnNames are a family's tensor names within an attention block.
type attnNames struct{ o, qNorm, kNorm string }

// loadHybridAttention reads the attention block under prefix.
func loadHybridAttention(l *loader, cfg *Config, prefix string, names attnNames, rope *compute.Rope) *hybridAttention {
	hid, hd := cfg.HiddenSize, cfg.HeadDim
	nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	a := &hybridAttention{
		keyScale: 1, rope: rope, eps: float32(cfg.NormEps()),
		attn: compute.Attention{Heads: nh, KVHeads: nkv, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))},
	}
	a.q = l.weight(prefix+"q_proj.weight", nh*hd, hid)
	a.k = l.weight(prefix+"k_proj.weight", nkv*hd, hid)
	a.v = l.weight(prefix+"v_proj.weight", nkv*hd, hid)
	a.o = l.weight(prefix+names.o+".weight", hid, nh*hd)
	if names.qNorm != "" {
		a.qNorm = l.vector(prefix+names.qNorm+".weight", hd)
		a.kNorm = l.vector(prefix+names.kNorm+".weight", hd)
	}
	return a
}

func (a *hybridAttention) newScratch(b compute.Backend, n int) *attnScratch {
	q, kv := a.attn.Heads*a.attn.HeadDim, a.attn.KVHeads*a.attn.HeadDim
	return &attnScratch{
		q: b.Alloc(compute.F32, n, q), a: b.Alloc(compute.F32, n, q),
		k: b.Alloc(compute.F32, n, kv), v: b.Alloc(compute.F32, n, kv),
	}
}

// forward computes o(softmax(q·kᵀ)·v) for h at positions pos into out.
func (a *hybridAttention) forward(b compute.Backend, s *attnScratch, out, h, pos *compute.Tensor, cache *compute.KVCache) {
	b.MatMul(s.q, h, a.q)
	b.MatMul(s.k, h, a.k)
	b.MatMul(s.v, h, a.v)
	if a.keyScale != 1 {
		b.Scale(s.k, s.k, a.keyScale)
	}
	if a.qNorm != nil {
		b.RMSNorm(s.q, s.q, a.qNorm, a.eps, 0)
		b.RMSNorm(s.k, s.k, a.kNorm, a.eps, 0)
	}
	b.RoPE(s.q, pos, a.attn.Heads, a.rope)
	b.RoPE(s.k, pos, a.attn.KVHeads, a.rope)
	b.Attend(s.a, s.q, s.k, s.v, cache, pos, &a.attn)
	b.MatMul(out, s.a, a.o)
}

// gatedMLP computes down(silu(gate(h)·gateScale) ⊙ up(h))·downScale.
type gatedMLP struct {
	gate, up, down       *compute.Tensor
	gateScale, downScale float32
}

func loadGatedMLP(l *loader, prefix, gate, up, down string, hid, ff int) gatedMLP {
	return gatedMLP{
		gate:      l.weight(prefix+gate+".weight", ff, hid),
		up:        l.weight(prefix+up+".weight", ff, hid),
		down:      l.weight(prefix+down+".weight", hid, ff),
		gateScale: 1, downScale: 1,
	}
}

// forward writes the MLP of h to out; g and u are scratch [n, ff].
func (f *gatedMLP) forward(b compute.Backend, out, h, g, u *compute.Tensor) {
	b.MatMul(g, h, f.gate)
	b.MatMul(u, h, f.up)
	if f.gateScale != 1 {
		b.Scale(g, g, f.gateScale)
	}
	b.GLU(g, g, u, compute.SiLU)
	b.MatMul(out, g, f.down)
	if f.downScale != 1 {
		b.Scale(out, out, f.downScale)
	}
}

// fullRope builds the rotary embedding of a hybrid family's attention
// layers.
func fullRope(cfg *Config) (*compute.Rope, error) {
	r, err := NewRope(cfg.Rope(FullAttention), cfg.HeadDim, cfg.MaxPositionEmbeddings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	return r, nil
}
