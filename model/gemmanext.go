package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// The pieces that Gemma 3n and Gemma 4 share: their attention block with
// KV-shared trailing layers, the per-sequence state those layers imply,
// per-layer input embeddings, and the output head.

// Gemma 3n and Gemma 4's attention block normalises queries and keys per
// head (with weights), values too (without), so the scores are not scaled
// further:
//
//	o = O · softmax(RoPE(norm(Q·h)) · RoPE(norm(K·h))ᵀ) · norm(V·h)
//
// A KV-shared layer (one of the trailing num_kv_shared_layers) has no K and
// V of its own: it attends over the keys and values of its source, the last
// earlier layer of the same type, and owns no cache.

// loadGemmaAttention reads the attention weights of layer i (prefix p, e.g.
// "model.layers.3."). ropes and ones cache the rotary embeddings and the
// all-ones value-norm weights by head size.
func loadGemmaAttention(l *loader, cfg *Config, i int, p string, ropes map[string]*compute.Rope, ones func(int) *compute.Tensor) (attention, error) {
	hid := cfg.HiddenSize
	hd, nh, nkv := cfg.HeadDimFor(i), cfg.NumAttentionHeads, cfg.KVHeadsFor(i)
	if hd <= 0 || nh <= 0 || nkv <= 0 || nh%nkv != 0 {
		return attention{}, fmt.Errorf("layer %d: %d heads of size %d over %d key/value heads", i, nh, hd, nkv)
	}
	layerType := cfg.LayerType(i)
	a := newAttention(i, nh, nkv, hd, float32(cfg.RMSNormEps), nil)
	a.attn.Scale = 1
	a.source = cfg.KVSource(i)
	if layerType == SlidingAttention {
		a.attn.Window = cfg.SlidingWindow
	}
	if src := a.source; src != i && (cfg.HeadDimFor(src) != hd || cfg.KVHeadsFor(src) != nkv) {
		return attention{}, fmt.Errorf("layer %d shares the keys and values of layer %d, whose heads differ (%d×%d, not %d×%d)",
			i, src, cfg.KVHeadsFor(src), cfg.HeadDimFor(src), nkv, hd)
	}
	for j := i + 1; j < cfg.NumHiddenLayers; j++ {
		if j != i && cfg.KVSource(j) == i {
			a.shared = true
		}
	}
	key := fmt.Sprintf("%s/%d", layerType, hd)
	if ropes[key] == nil {
		r, err := NewRope(cfg.Rope(layerType), hd, cfg.MaxPositionEmbeddings)
		if err != nil {
			return attention{}, fmt.Errorf("layer %d: %w", i, err)
		}
		ropes[key] = r
	}
	a.rope = ropes[key]

	s := p + "self_attn."
	a.q = l.weight(s+"q_proj.weight", nh*hd, hid)
	a.o = l.weight(s+"o_proj.weight", hid, nh*hd)
	a.qNorm = l.vector(s+"q_norm.weight", hd)
	if a.ownsCache() {
		a.k = l.weight(s+"k_proj.weight", nkv*hd, hid)
		a.v = l.weight(s+"v_proj.weight", nkv*hd, hid)
		a.kNorm = l.vector(s+"k_norm.weight", hd)
		a.vNorm = ones(hd)
	}
	return a, nil
}

// perLayerEmbedding is the per-layer input of Gemma 3n and Gemma 4: for
// every token and layer a small vector of d values, mixing a token
// embedding of its own with a projection of the main embedding e:
//
//	ple = (RMSNorm(P·e / √hidden) + E_ple[token] · √d) / √2
//
// computed for all layers at once ([n, layers·d]), each layer reading its
// slice.
type perLayerEmbedding struct {
	table, proj, norm *compute.Tensor
	d                 int
	tableScale        float32
	projScale         float32
	eps               float32
}

func loadPerLayerEmbedding(l *loader, cfg *Config) *perLayerEmbedding {
	d, n := cfg.HiddenSizePerLayerInput, cfg.NumHiddenLayers
	return &perLayerEmbedding{
		table:      l.table("model.embed_tokens_per_layer.weight", cfg.VocabSizePerLayerInput, n*d),
		proj:       l.weight("model.per_layer_model_projection.weight", n*d, cfg.HiddenSize),
		norm:       l.vector("model.per_layer_projection_norm.weight", d),
		d:          d,
		tableScale: sqrt32(d),
		projScale:  1 / sqrt32(cfg.HiddenSize),
		eps:        float32(cfg.RMSNormEps),
	}
}

// compute writes the per-layer inputs of the tokens ids, whose scaled main
// embeddings are e, into dst [n, layers·d]; tok is scratch of that shape.
// Token ids beyond the per-layer vocabulary must not occur (the loader
// checks that it covers the main one).
func (p *perLayerEmbedding) compute(b compute.Backend, dst, tok, e, ids *compute.Tensor) {
	b.MatMul(dst, e, p.proj)
	b.Scale(dst, dst, p.projScale)
	b.RMSNorm(dst, dst, p.norm, p.eps, 0)
	b.Embed(tok, p.table, ids)
	b.Scale(tok, tok, p.tableScale)
	b.Add(dst, dst, tok)
	b.Scale(dst, dst, sqrt1_2)
}

// sqrt1_2 is 1/√2 rounded to float32.
const sqrt1_2 = float32(0.70710678118654752440)

// gemmaHead computes the logits of the rows x: the final RMSNorm, the output
// projection and the soft cap (cap 0: none). With logits of one row and x
// of several, only the last row is computed.
func gemmaHead(b compute.Backend, s *arena, x, norm, output, logits *compute.Tensor, eps, softCap float32) {
	n := x.Rows()
	h := s.get("head", x.Cols())
	if logits.Rows() == 1 && n > 1 {
		x = b.View(x, n-1, n)
		h = s.row("head", x.Cols())
	}
	b.RMSNorm(h, x, norm, eps, 0)
	b.MatMul(logits, h, output)
	if softCap > 0 {
		b.SoftCap(logits, logits, softCap)
	}
}

// loadOutput reads the final norm and the output projection (the token
// embedding when tied).
func loadOutput(l *loader, cfg *Config, embed *compute.Tensor) (norm, output *compute.Tensor) {
	norm = l.vector("model.norm.weight", cfg.HiddenSize)
	return norm, l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", embed, cfg.VocabSize, cfg.HiddenSize)
}

// onesCache returns a function giving an all-ones F32 vector of each length,
// allocated once.
func onesCache(b compute.Backend) func(int) *compute.Tensor {
	m := map[int]*compute.Tensor{}
	return func(n int) *compute.Tensor {
		if m[n] == nil {
			t := b.Alloc(compute.F32, n)
			vals := make([]float32, n)
			for i := range vals {
				vals[i] = 1
			}
			b.Upload(t, vals)
			m[n] = t
		}
		return m[n]
	}
}

func sqrt32(n int) float32 { return float32(math.Sqrt(float64(n))) }
