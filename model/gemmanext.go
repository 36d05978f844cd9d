package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// The pieces that Gemma 3n and Gemma 4 share: their attention block with
// KV-shared trailing layers, the per-sequence state those layers imply,
// per-layer input embeddings, and the output head.

// gemmaAttention is the attention block of Gemma 3n and Gemma 4. Queries
// and keys are RMS-normalised per head (with weights), values too (without),
// so the scores are not scaled further:
//
//	o = O · softmax(RoPE(norm(Q·h)) · RoPE(norm(K·h))ᵀ) · norm(V·h)
//
// A KV-shared layer (one of the trailing num_kv_shared_layers) has no K and
// V of its own: it attends over the keys and values of its source, the last
// earlier layer of the same type, and owns no cache.
type gemmaAttention struct {
	q, k, v, o   *compute.Tensor
	qNorm, kNorm *compute.Tensor
	vNorm        *compute.Tensor // ones: values are normalised without a weight
	attn         compute.Attention
	rope         *compute.Rope

	layer, source int  // source == layer when the layer computes its own keys and values
	shared        bool // a later layer attends over this layer's keys and values
	eps           float32
}

// ownsCache reports whether the layer computes and caches its own keys and
// values.
func (a *gemmaAttention) ownsCache() bool { return a.source == a.layer }

// loadGemmaAttention reads the attention weights of layer i (prefix p, e.g.
// "model.layers.3."). ropes and ones cache the rotary embeddings and the
// all-ones value-norm weights by head size.
func loadGemmaAttention(l *loader, cfg *Config, i int, p string, ropes map[string]*compute.Rope, ones func(int) *compute.Tensor) (gemmaAttention, error) {
	hid := cfg.HiddenSize
	hd, nh, nkv := cfg.HeadDimFor(i), cfg.NumAttentionHeads, cfg.KVHeadsFor(i)
	if hd <= 0 || nh <= 0 || nkv <= 0 || nh%nkv != 0 {
		return gemmaAttention{}, fmt.Errorf("layer %d: %d heads of size %d over %d key/value heads", i, nh, hd, nkv)
	}
	layerType := cfg.LayerType(i)
	a := gemmaAttention{
		attn:  compute.Attention{Heads: nh, KVHeads: nkv, HeadDim: hd, Scale: 1},
		layer: i, source: cfg.KVSource(i), eps: float32(cfg.RMSNormEps),
	}
	if layerType == SlidingAttention {
		a.attn.Window = cfg.SlidingWindow
	}
	if src := a.source; src != i && (cfg.HeadDimFor(src) != hd || cfg.KVHeadsFor(src) != nkv) {
		return gemmaAttention{}, fmt.Errorf("layer %d shares the keys and values of layer %d, whose heads differ (%d×%d, not %d×%d)",
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
			return gemmaAttention{}, fmt.Errorf("layer %d: %w", i, err)
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

// forward computes the block for the rows h at positions pos into out.
// withShared says whether the layers reading this one's keys and values run
// in this forward pass.
func (a *gemmaAttention) forward(b compute.Backend, st *kvState, s *scratch, h, pos, out *compute.Tensor, withShared bool) {
	hd := a.attn.HeadDim
	qd, kd := a.attn.Heads*hd, a.attn.KVHeads*hd
	q, att := s.get("q", qd), s.get("attn", qd)
	b.MatMul(q, h, a.q)
	b.RMSNorm(q, q, a.qNorm, a.eps, 0)
	b.RoPE(q, pos, a.attn.Heads, a.rope)
	// Keys and values that a later layer reads live in buffers of their own.
	k, v := s.get("k", kd), s.get("v", kd)
	if a.shared || !a.ownsCache() {
		k, v = s.layer("k", a.source, kd), s.layer("v", a.source, kd)
	}
	cache := st.caches[a.source]
	if a.ownsCache() {
		b.MatMul(k, h, a.k)
		b.MatMul(v, h, a.v)
		b.RMSNorm(k, k, a.kNorm, a.eps, 0)
		b.RoPE(k, pos, a.attn.KVHeads, a.rope)
		b.RMSNorm(v, v, a.vNorm, a.eps, 0)
		if a.shared && withShared && st.snaps[a.layer] != nil && h.Rows() > 1 {
			// A chunk overwrites ring slots that its own first rows still
			// see; the readers attend over the ring as it was before.
			snap := st.snaps[a.layer]
			b.Columns(snap.K, cache.K, 0)
			b.Columns(snap.V, cache.V, 0)
		}
	} else if snap := st.snaps[a.source]; snap != nil && h.Rows() > 1 {
		cache = snap
	}
	// A reader passes its source's new keys and values again: Attend stores
	// them in the same slots with the same values.
	b.Attend(att, q, k, v, cache, pos, &a.attn)
	b.MatMul(out, att, a.o)
}

// kvState is the per-sequence state of a stack with KV-shared layers: a
// cache for each layer that owns one.
type kvState struct {
	caches []*compute.KVCache // nil for KV-shared layers
	// snaps holds, for sliding-window layers whose ring a later layer
	// reads, a copy of the ring taken before a chunk writes into it.
	snaps   []*compute.KVCache
	ctx     int
	scratch map[int]*scratch
}

// newKVState allocates caches for the layers that own one: full-attention
// layers hold ctx positions, sliding-window layers a ring of their window.
func newKVState(b compute.Backend, attns []*gemmaAttention, ctx int) *kvState {
	st := &kvState{
		ctx: ctx, scratch: map[int]*scratch{},
		caches: make([]*compute.KVCache, len(attns)),
		snaps:  make([]*compute.KVCache, len(attns)),
	}
	for i, a := range attns {
		if !a.ownsCache() {
			continue
		}
		capacity, ring := ctx, false
		if a.attn.Window > 0 && a.attn.Window < ctx {
			capacity, ring = a.attn.Window, true
		}
		kvDim := a.attn.KVHeads * a.attn.HeadDim
		st.caches[i] = b.NewKVCache(capacity, kvDim, ring)
		if ring && a.shared {
			st.snaps[i] = b.NewKVCache(capacity, kvDim, ring)
		}
	}
	return st
}

func (s *kvState) Capacity() int { return s.ctx }

// Memory implements State.
func (s *kvState) Memory() StateMemory {
	return StateMemory{KV: cacheBytes(s.caches...) + cacheBytes(s.snaps...)}
}

// CanRewind implements State, as for the dense stack.
func (s *kvState) CanRewind(n, length int) bool {
	for _, c := range s.caches {
		if c != nil && c.Ring && length > c.Capacity && n < length-1 {
			return false
		}
	}
	return true
}

// scratchFor returns the activation buffers for chunks of n rows, keeping
// those of decode steps and of the most recent chunk length.
func (s *kvState) scratchFor(b compute.Backend, n int) *scratch {
	if sc, ok := s.scratch[n]; ok {
		return sc
	}
	for k := range s.scratch {
		if k != 1 {
			delete(s.scratch, k)
		}
	}
	sc := &scratch{b: b, n: n, bufs: map[scratchKey]*compute.Tensor{}}
	s.scratch[n] = sc
	return sc
}

// scratch hands out float32 activation buffers for chunks of n rows, one
// per name and width, allocated on first use and reused afterwards.
type scratch struct {
	b    compute.Backend
	n    int
	bufs map[scratchKey]*compute.Tensor
	moe  *moeScratch // routing of mixture-of-experts blocks, made on first use
	sets map[string][]*compute.Tensor
}

type scratchKey struct {
	name              string
	layer, rows, cols int
}

func (s *scratch) buf(k scratchKey) *compute.Tensor {
	t, ok := s.bufs[k]
	if !ok {
		t = s.b.Alloc(compute.F32, k.rows, k.cols)
		s.bufs[k] = t
	}
	return t
}

// get returns the buffer [n, cols] called name.
func (s *scratch) get(name string, cols int) *compute.Tensor {
	return s.buf(scratchKey{name: name, layer: -1, rows: s.n, cols: cols})
}

// layer returns layer i's own buffer [n, cols] called name.
func (s *scratch) layer(name string, i, cols int) *compute.Tensor {
	return s.buf(scratchKey{name: name, layer: i, rows: s.n, cols: cols})
}

// set returns k buffers [n, cols] called name.
func (s *scratch) set(name string, k, cols int) []*compute.Tensor {
	if ts, ok := s.sets[name]; ok {
		return ts
	}
	ts := make([]*compute.Tensor, k)
	for j := range ts {
		ts[j] = s.layer(name, j, cols)
	}
	if s.sets == nil {
		s.sets = map[string][]*compute.Tensor{}
	}
	s.sets[name] = ts
	return ts
}

// row returns the buffer [1, cols] called name.
func (s *scratch) row(name string, cols int) *compute.Tensor {
	return s.buf(scratchKey{name: name, layer: -1, rows: 1, cols: cols})
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
func gemmaHead(b compute.Backend, s *scratch, x, norm, output, logits *compute.Tensor, eps, softCap float32) {
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
