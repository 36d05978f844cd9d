package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
)

// Gemma 4 (text). Gemma 3's sandwich norms around attention and MLP, with
// plain RMSNorm weights (x · w), per-head norms of queries, keys and values
// and no score scaling (see loadGemmaAttention), then a per-layer input (PLE)
// added through a gate, and a learned scalar on the layer's output:
//
//	h = x + RMSNorm(Attn(RMSNorm(x)))
//	y = h + RMSNorm(MLP(RMSNorm(h))),        MLP(h) = down(gelu(gate·h) ⊙ up·h)
//	z = y + RMSNorm(proj(gelu(gate_ple·y) ⊙ ple[layer]))
//	out = z · layer_scalar
//
// With enable_moe_block the feed-forward part adds a mixture of experts
// beside the MLP, routed on the block's input h (RMSNorm without weight, then
// router.scale / √hidden), with top_k_experts of num_experts picked from the
// softmax, renormalised and scaled per expert (see moeBlock):
//
//	y = h + RMSNorm(RMSNorm₁(MLP(RMSNorm(h))) + RMSNorm₂(MoE(RMSNorm'(h))))
//
// Embeddings are scaled by √hidden; ple is the per-layer embedding (see
// perLayerEmbedding). Sliding-window layers use a default rope over heads of
// head_dim; global layers may have wider heads (per_layer_config or
// global_head_dim) and a proportional rope that turns only a fraction of
// each head. The trailing num_kv_shared_layers layers attend over the keys
// and values of the last earlier layer of their type and own no cache; with
// use_double_wide_mlp their MLP is twice as wide.
func init() {
	Register(Arch{ModelTypes: []string{"gemma4_text"}, Load: loadGemma4, GGUF: "gemma4",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", layer: gemma4GGUFLayer, global: gemma4Global},
		Keys:    perLayerInputKeys,
		Meta: ggufMeta{eps: 1e-6, ff: ffPerLayer, kvDiffer: true, ownRope: true, writeAll: true,
			read: func(k *ggufKeys, c *Config, g *GGUF) error {
				return ggufGemma4Config(c, k, g, g.ffPerLayer, g.kvPerLayer)
			},
			write: func(l *GGUFLayout, w *ggufWriter) error { return l.gemma4Metadata(w.u32, w.f32) }},
		Defaults: map[string]string{"tie_word_embeddings": "true"}})
	registerParams(func(c *Config, f *fields) { c.Gemma4Params.read(f) }, (*Config).checkGemma4)
}

// Gemma4Params are the parameters of Gemma 4; Gemma 3n has all but
// GlobalHeadDim.
type Gemma4Params struct {
	// GlobalHeadDim is the head size of full-attention layers when it
	// differs from HeadDim (global_head_dim); 0 when absent. Use
	// Config.HeadDimFor.
	GlobalHeadDim int
	// Per-layer input embeddings: a second token embedding of
	// NumHiddenLayers × HiddenSizePerLayerInput values, one slice fed to
	// each layer. 0 when the model has none.
	HiddenSizePerLayerInput int
	VocabSizePerLayerInput  int // defaults to VocabSize
	// NumKVSharedLayers is the number of trailing layers that compute no
	// keys and values of their own but attend over those of an earlier
	// layer. Use Config.KVSource.
	NumKVSharedLayers int
}

func (p *Gemma4Params) read(f *fields) {
	f.size("global_head_dim", &p.GlobalHeadDim)
	f.size("hidden_size_per_layer_input", &p.HiddenSizePerLayerInput)
	f.size("vocab_size_per_layer_input", &p.VocabSizePerLayerInput)
	f.size("num_kv_shared_layers", &p.NumKVSharedLayers)
}

// checkGemma4 defaults vocab_size_per_layer_input to vocab_size and
// checks that every KV-shared layer has an earlier layer of its type to
// read keys and values from.
func (c *Config) checkGemma4(prefix string) error {
	if c.VocabSizePerLayerInput == 0 {
		c.VocabSizePerLayerInput = c.VocabSize
	}
	n, shared := c.NumHiddenLayers, c.NumKVSharedLayers
	if shared == 0 {
		return nil
	}
	if shared >= n {
		return fmt.Errorf("key %q: %d shared layers leave none of the %d to compute keys and values", prefix+"num_kv_shared_layers", shared, n)
	}
	for i := n - shared; i < n; i++ {
		if c.KVSource(i) < 0 {
			return fmt.Errorf("key %q: layer %d (%s) has no earlier %s layer to share keys and values with", prefix+"num_kv_shared_layers", i, c.LayerType(i), c.LayerType(i))
		}
	}
	return nil
}

// KVSource returns the layer whose keys and values layer i attends over:
// i itself, or, for the trailing NumKVSharedLayers layers, the last layer
// of the same type before them (-1 when there is none, which ParseConfig
// rejects).
func (c *Config) KVSource(i int) int {
	first := c.NumHiddenLayers - c.NumKVSharedLayers
	if c.NumKVSharedLayers <= 0 || i < first {
		return i
	}
	for j := first - 1; j >= 0; j-- {
		if c.LayerType(j) == c.LayerType(i) {
			return j
		}
	}
	return -1
}

type gemma4 struct {
	batching
	cfg *Config
	b   compute.Backend

	embed, norm, output *compute.Tensor
	ple                 *perLayerEmbedding // nil: no per-layer inputs
	layers              []gemma4Layer
	// owners is the number of leading layers that own a KV cache; the
	// rest only feed the output of the chunk they process.
	owners int

	embedScale, softCap, eps float32
	act                      compute.Activation
}

type gemma4Layer struct {
	inNorm, postAttnNorm, preFFNorm, postFFNorm *compute.Tensor

	attn attention
	mlp  mlp
	ff   int

	pleGate, pleProj, plePostNorm *compute.Tensor

	scalar float32

	// The mixture of experts beside the MLP, nil without one.
	moe                                  *moeBlock
	routerScale                          *compute.Tensor // [hidden]
	postFF1Norm, preFF2Norm, postFF2Norm *compute.Tensor
}

func loadGemma4(cfg *Config, src Source, b compute.Backend) (Model, error) {
	fail := func(err error) (Model, error) { return nil, fmt.Errorf("%s: %w", cfg.ModelType, err) }
	var kEqV, moe, doubleWide bool
	for _, k := range []struct {
		key string
		dst *bool
	}{{"attention_k_eq_v", &kEqV}, {"enable_moe_block", &moe}, {"use_double_wide_mlp", &doubleWide}} {
		if _, err := cfg.Get(k.key, k.dst); err != nil {
			return fail(err)
		}
	}
	switch {
	case kEqV:
		return fail(fmt.Errorf("config key %q: global layers whose values are their keys are not supported", "attention_k_eq_v"))
	case cfg.HiddenSizePerLayerInput > 0 && cfg.VocabSizePerLayerInput < cfg.VocabSize:
		return fail(fmt.Errorf("config key %q: %d per-layer embeddings for a vocabulary of %d", "vocab_size_per_layer_input", cfg.VocabSizePerLayerInput, cfg.VocabSize))
	}
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return fail(err)
	}
	m := &gemma4{
		cfg: cfg, b: b, act: act, eps: float32(cfg.RMSNormEps),
		embedScale: sqrt32(cfg.HiddenSize),
		softCap:    float32(cfg.FinalLogitSoftcapping),
		owners:     cfg.NumHiddenLayers - cfg.NumKVSharedLayers,
	}
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	hid := cfg.HiddenSize
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", cfg.VocabSize, hid)
	m.norm, m.output = loadOutput(l, cfg, m.embed)
	d := cfg.HiddenSizePerLayerInput
	if d > 0 {
		m.ple = loadPerLayerEmbedding(l, cfg)
	}
	var experts *moeSpec
	if moe {
		experts = &moeSpec{
			router: "router.proj", experts: "experts", layout: moeFused,
			hidden: hid, numExperts: cfg.NumExperts, topK: cfg.NumExpertsPerTok,
			order: compute.SoftmaxTopK, normalize: true, inter: cfg.MoEIntermediateSize, act: act,
		}
	}
	ropes, ones := map[string]*compute.Rope{}, onesCache(b)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		attn, err := loadGemmaAttention(l, cfg, i, p, ropes, ones)
		if err != nil {
			return fail(err)
		}
		ly := gemma4Layer{attn: attn, ff: cfg.IntermediateSizeFor(i), scalar: 1}
		if doubleWide && !attn.ownsCache() {
			ly.ff *= 2
		}
		ly.inNorm = l.vector(p+"input_layernorm.weight", hid)
		ly.postAttnNorm = l.vector(p+"post_attention_layernorm.weight", hid)
		ly.preFFNorm = l.vector(p+"pre_feedforward_layernorm.weight", hid)
		ly.postFFNorm = l.vector(p+"post_feedforward_layernorm.weight", hid)
		ly.mlp = loadMLP(l, p+"mlp.", "gate_proj", "up_proj", "down_proj", hid, ly.ff, act)
		if d > 0 {
			ly.pleGate = l.weight(p+"per_layer_input_gate.weight", d, hid)
			ly.pleProj = l.weight(p+"per_layer_projection.weight", hid, d)
			ly.plePostNorm = l.vector(p+"post_per_layer_input_norm.weight", hid)
		}
		if experts != nil {
			ly.moe = l.moe(p, experts)
			if ly.moe != nil {
				ly.moe.routing.ExpertScale = l.vector(p+"router.per_expert_scale", cfg.NumExperts)
			}
			ly.routerScale = l.vector(p+"router.scale", hid)
			ly.postFF1Norm = l.vector(p+"post_feedforward_layernorm_1.weight", hid)
			ly.preFF2Norm = l.vector(p+"pre_feedforward_layernorm_2.weight", hid)
			ly.postFF2Norm = l.vector(p+"post_feedforward_layernorm_2.weight", hid)
		}
		if l.has(p + "layer_scalar") {
			if ly.scalar, err = l.scalar(p + "layer_scalar"); err != nil {
				return fail(err)
			}
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return fail(l.err)
	}
	return m, nil
}

func (m *gemma4) Config() *Config { return m.cfg }

// NewState implements Model.
func (m *gemma4) NewState(ctx int) State {
	return newKVState(m.b, m.stack().attns, ctx)
}

// stack lists the attention blocks.
func (m *gemma4) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i := range m.layers {
		attns[i] = &m.layers[i].attn
	}
	return stack{attns: attns}
}

// Forward implements Model. Without logits (a prefill chunk that is not the
// last) the KV-shared layers are skipped: they own no cache, so their only
// product would be this chunk's output, which nobody reads.
func (m *gemma4) Forward(state State, ids, pos, logits *compute.Tensor) {
	m.forward(onePass(m.b, state.(*kvState), nil, ids, pos, logits))
}

// forward runs the stack over the rows of pass p.
func (m *gemma4) forward(p *pass) {
	b, s := m.b, p.ar
	x := s.get("x", m.cfg.HiddenSize)
	b.Embed(x, m.embed, p.ids)
	b.Scale(x, x, m.embedScale)
	var ple *compute.Tensor
	if m.ple != nil {
		width := len(m.layers) * m.ple.d
		ple = s.get("ple", width)
		m.ple.compute(b, ple, s.get("ple tokens", width), x, p.ids)
	}
	run := len(m.layers)
	if !p.wants() {
		run = m.owners
	}
	for i := range run {
		m.layer(i, p, x, ple, run == len(m.layers))
	}
	if p.wants() {
		gemmaHead(p, x, m.norm, m.output, m.eps, m.softCap)
	}
}

// layer runs layer i on the rows x in place.
func (m *gemma4) layer(i int, p *pass, x, ple *compute.Tensor, full bool) {
	b, l, eps, s := m.b, &m.layers[i], m.eps, p.ar
	hid := x.Cols()
	h, o := s.get("h", hid), s.get("o", hid)

	b.RMSNorm(h, x, l.inNorm, eps, 0)
	l.attn.forward(p, o, h, full)
	b.RMSNorm(o, o, l.postAttnNorm, eps, 0)
	b.Add(x, x, o)

	b.RMSNorm(h, x, l.preFFNorm, eps, 0)
	l.mlp.forward(b, s, o, h)
	if l.moe != nil {
		b.RMSNorm(o, o, l.postFF1Norm, eps, 0)
		rx, e := s.get("router in", hid), s.get("experts", hid)
		b.RMSNorm(rx, x, l.routerScale, eps, 0)
		b.Scale(rx, rx, 1/sqrt32(hid))
		b.RMSNorm(h, x, l.preFF2Norm, eps, 0)
		l.moe.forward(e, h, rx, s.moeFor(l.moe))
		b.RMSNorm(e, e, l.postFF2Norm, eps, 0)
		b.Add(o, o, e)
	}
	b.RMSNorm(o, o, l.postFFNorm, eps, 0)
	b.Add(x, x, o)

	if ple != nil {
		d := m.ple.d
		in, pg := s.get("ple in", d), s.get("ple gate", d)
		b.Columns(in, ple, i*d)
		b.MatMul(pg, x, l.pleGate)
		b.GLU(pg, pg, in, m.act)
		b.MatMul(o, pg, l.pleProj)
		b.RMSNorm(o, o, l.plePostNorm, eps, 0)
		b.Add(x, x, o)
	}
	if l.scalar != 1 {
		b.Scale(x, x, l.scalar)
	}
}

// The parts of Gemma 4 that Gemma 3n shares: the attention block with
// KV-shared trailing layers, the per-layer input embedding and the output
// head.

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

// gemmaHead computes the logits of the rows of x that pass p asks for
// (see pass.out): the final RMSNorm, the output projection and the soft cap
// (cap 0: none).
func gemmaHead(p *pass, x, norm, output *compute.Tensor, eps, softCap float32) {
	b, s, logits := p.b, p.ar, p.logits
	p.writeHidden(x, norm, eps, 0)
	if logits == nil {
		return
	}
	h := s.get("head", x.Cols())
	if out := p.out(x); out != x {
		x = out
		h = s.rows("head", x.Rows(), x.Cols())
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

// GGUF layout of Gemma 4 (text), as llama.cpp's converter (Gemma4Model in
// conversion/gemma.py) writes it and src/models/gemma4.cpp reads it, as
// architecture gemma4.
//
//   - Norm weights are stored as they are (Gemma 4 scales by w, not 1+w).
//   - Per-layer inputs as Gemma 3n's: per_layer_token_embd,
//     per_layer_model_proj, per_layer_proj_norm, and per layer inp_gate,
//     proj and post_norm. layer_scalar is layer_output_scale.
//   - The mixture of experts: router.proj is ffn_gate_inp, router.scale
//     ffn_gate_inp.scale, router.per_expert_scale ffn_down_exps.scale, the
//     fused experts.gate_up_proj [experts, 2·ff, hidden] ffn_gate_up_exps
//     (gate rows first) and experts.down_proj ffn_down_exps, both in the
//     checkpoint's element order; the norms around it are
//     post_ffw_norm_1, pre_ffw_norm_2 and post_ffw_norm_2.
//   - Head sizes per layer type: attention.key_length and value_length are
//     the full-attention layers', key_length_swa and value_length_swa the
//     sliding layers'. feed_forward_length and attention.head_count_kv are
//     one value, or one per layer where layers differ (the double-wide MLP
//     of the KV-shared layers is written out as doubled widths).
//   - Rope: the full-attention layers' proportional rope is a rope over the
//     whole head (rope.dimension_count = key_length, base rope.freq_base)
//     whose pairs beyond the rotated fraction are frozen by a frequency
//     divisor of 1e30 in rope_freqs.weight (key_length/2 values, 1 for the
//     pairs that turn); the sliding layers use rope.freq_base_swa over
//     rope.dimension_count_swa dimensions.
//   - attention.sliding_window_pattern holds one bool per layer,
//     attention.shared_kv_layers the number of trailing KV-shared layers,
//     embedding_length_per_layer_input the per-layer input width (0: none),
//     expert_count, expert_used_count and expert_feed_forward_length the
//     mixture of experts.

var (
	gemma4Global = map[string]string{
		"model.embed_tokens.weight":               "token_embd.weight",
		"model.norm.weight":                       "output_norm.weight",
		"lm_head.weight":                          "output.weight",
		"model.embed_tokens_per_layer.weight":     "per_layer_token_embd.weight",
		"model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
		"model.per_layer_projection_norm.weight":  "per_layer_proj_norm.weight",
	}
	gemma4GGUFLayer = merge(gemmaLayer, map[string]string{
		"per_layer_input_gate.weight":         "inp_gate.weight",
		"per_layer_projection.weight":         "proj.weight",
		"post_per_layer_input_norm.weight":    "post_norm.weight",
		"layer_scalar":                        "layer_output_scale.weight",
		"router.proj.weight":                  "ffn_gate_inp.weight",
		"router.scale":                        "ffn_gate_inp.scale",
		"router.per_expert_scale":             "ffn_down_exps.scale",
		"experts.gate_up_proj":                "ffn_gate_up_exps.weight",
		"experts.down_proj":                   "ffn_down_exps.weight",
		"post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
		"pre_feedforward_layernorm_2.weight":  "pre_ffw_norm_2.weight",
		"post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
	})
)

// gemma4Frozen is the rope_freqs.weight divisor that stops a pair from
// turning; anything this large freezes a pair for every position a context
// can hold.
const gemma4Frozen = 1e30

// ggufGemma4Config reads the keys and shapes of a gemma4 file that the
// common keys do not cover: head sizes per layer type, per-layer widths
// and key/value heads (ff and kvHeads, nil when one value), per-layer
// inputs, KV-shared layers, the mixture of experts and the rope of each
// layer type.
func ggufGemma4Config(c *Config, k *ggufKeys, g *GGUF, ff, kvHeads []int) error {
	n := c.NumHiddenLayers
	full := c.HeadDim // attention.key_length
	swa, ok := k.uint("attention.key_length_swa")
	if !ok {
		swa = full
	}
	if v, ok := k.uint("attention.value_length_swa"); ok && v != swa {
		return fmt.Errorf("key %s.attention.value_length_swa %d differs from key_length_swa %d", k.arch, v, swa)
	}
	if swa == 0 {
		return fmt.Errorf("key %s.attention.key_length_swa is 0", k.arch)
	}
	c.HeadDim = swa
	c.Raw["head_dim"] = rawNumber(float64(swa))
	if full != swa {
		c.GlobalHeadDim = full
		c.Raw["global_head_dim"] = rawNumber(float64(full))
	}
	c.HiddenSizePerLayerInput, _ = k.uint("hidden_size_per_layer_input")
	c.NumKVSharedLayers, _ = k.uint("num_kv_shared_layers")
	if k.err != nil {
		return k.err
	}
	if c.NumKVSharedLayers >= n {
		return fmt.Errorf("key %s.attention.shared_kv_layers: %d of %d layers", k.arch, c.NumKVSharedLayers, n)
	}
	if d := c.HiddenSizePerLayerInput; d > 0 {
		t, ok := g.tensors["model.embed_tokens_per_layer.weight"]
		if !ok {
			return fmt.Errorf("key %s.embedding_length_per_layer_input is %d but tensor per_layer_token_embd.weight is missing", k.arch, d)
		}
		if len(t.Dims) != 2 || t.Dims[0] != int64(n*d) {
			return fmt.Errorf("tensor per_layer_token_embd.weight has dims %v, want [%d, vocab]", t.Dims, n*d)
		}
		c.VocabSizePerLayerInput = int(t.Dims[1])
	}

	c.perLayer = map[int]layerOverride{}
	for i := range n {
		var o layerOverride
		if ff != nil && ff[i] != c.IntermediateSize {
			o.intermediate = ff[i]
		}
		if kvHeads != nil && kvHeads[i] != c.NumKeyValueHeads {
			if kvHeads[i] == 0 || c.NumAttentionHeads%kvHeads[i] != 0 {
				return fmt.Errorf("key %s.attention.head_count_kv: layer %d has %d key/value heads for %d heads", k.arch, i, kvHeads[i], c.NumAttentionHeads)
			}
			o.kvHeads = kvHeads[i]
		}
		if o.intermediate > 0 || o.kvHeads > 0 {
			c.perLayer[i] = o
		}
	}

	moe := g.hasLayerTensor("router.proj.weight")
	if moe {
		c.NumExperts = k.need("num_experts")
		c.NumExpertsPerTok = k.need("num_experts_per_tok")
		c.MoEIntermediateSize = k.need("expert_feed_forward_length")
		if k.err != nil {
			return k.err
		}
		if c.NumExpertsPerTok > c.NumExperts {
			return fmt.Errorf("key %s.expert_used_count: %d of %d experts", k.arch, c.NumExpertsPerTok, c.NumExperts)
		}
	}
	raw, err := json.Marshal(moe)
	if err != nil {
		return err
	}
	c.Raw["enable_moe_block"] = raw

	return ggufGemma4Rope(c, k, g, full, swa)
}

// ggufGemma4Rope reads the rope of both layer types: the full-attention
// layers' rope_freqs.weight, ones then frozen pairs, is their proportional
// rope's rotated fraction.
func ggufGemma4Rope(c *Config, k *ggufKeys, g *GGUF, full, swa int) error {
	p := RopeParams{Type: "proportional", Theta: 1e6, Factor: 1, PartialRotaryFactor: 1}
	if v, ok := k.float("rope_theta"); ok {
		p.Theta = v
	}
	if d, ok := k.uint("rope.dimension_count"); ok && d != full {
		return fmt.Errorf("key %s.rope.dimension_count: %d, want the full-attention head size %d", k.arch, d, full)
	}
	freqs, err := g.f64Tensor(ggufRopeFreqs)
	if err != nil {
		return err
	}
	if freqs != nil {
		if len(freqs) != full/2 {
			return fmt.Errorf("tensor %s has %d values for heads of %d", ggufRopeFreqs, len(freqs), full)
		}
		turning := 0
		for turning < len(freqs) && freqs[turning] == 1 {
			turning++
		}
		for i, f := range freqs[turning:] {
			if f < gemma4Frozen/10 {
				return fmt.Errorf("tensor %s: value %g at pair %d: a Gemma 4 file has 1 for the pairs that turn, then %g", ggufRopeFreqs, f, turning+i, float64(gemma4Frozen))
			}
		}
		if turning == 0 {
			return fmt.Errorf("tensor %s turns no pair", ggufRopeFreqs)
		}
		p.PartialRotaryFactor = float64(2*turning) / float64(full)
	}
	local := RopeParams{Type: "default", Theta: 10000, Factor: 1, PartialRotaryFactor: 1}
	if v, ok := k.float("rope.freq_base_swa"); ok {
		local.Theta = v
	}
	if d, ok := k.uint("rope.dimension_count_swa"); ok && d != swa {
		if d == 0 || d > swa || d%2 != 0 {
			return fmt.Errorf("key %s.rope.dimension_count_swa: %d rotary dimensions for head size %d", k.arch, d, swa)
		}
		local.PartialRotaryFactor = float64(d) / float64(swa)
	}
	if k.err != nil {
		return k.err
	}
	for _, r := range []RopeParams{p, local} {
		if err := r.validate(k.arch + "."); err != nil {
			return err
		}
	}
	c.RopeParams = p
	c.PartialRotaryFactor = p.PartialRotaryFactor
	c.RopeByLayerType = map[string]RopeParams{FullAttention: p, SlidingAttention: local}
	return nil
}

// gemma4Metadata writes the keys of a gemma4 file and its rope_freqs.weight.
func (l *GGUFLayout) gemma4Metadata(u32 func(string, int), f32 func(string, float64)) error {
	c := l.cfg
	a := l.Arch + "."
	var kEqV, doubleWide bool
	for _, k := range []struct {
		key string
		dst *bool
	}{{"attention_k_eq_v", &kEqV}, {"use_double_wide_mlp", &doubleWide}} {
		if _, err := c.Get(k.key, k.dst); err != nil {
			return err
		}
	}
	if kEqV {
		return fmt.Errorf("%s: attention_k_eq_v: global layers whose values are their keys are not supported", c.ModelType)
	}
	n := c.NumHiddenLayers
	if c.NumKVSharedLayers >= n {
		return fmt.Errorf("%s: %d KV-shared layers of %d", c.ModelType, c.NumKVSharedLayers, n)
	}
	heads := map[string]int{}
	pattern := make([]bool, n)
	ff := make([]uint32, n)
	kv := make([]uint32, n)
	sameFF, sameKV := true, true
	for i := range n {
		t := c.LayerType(i)
		switch t {
		case SlidingAttention:
			pattern[i] = true
		case FullAttention:
		default:
			return fmt.Errorf("%s: layer %d is %q", c.ModelType, i, t)
		}
		hd := c.HeadDimFor(i)
		if h, ok := heads[t]; ok && h != hd {
			return fmt.Errorf("%s: layer %d has heads of %d, other %s layers %d: GGUF holds one head size per layer type", c.ModelType, i, hd, t, h)
		}
		heads[t] = hd
		ff[i] = uint32(c.IntermediateSizeFor(i))
		if doubleWide && i >= n-c.NumKVSharedLayers {
			ff[i] *= 2
		}
		kv[i] = uint32(c.KVHeadsFor(i))
		sameFF = sameFF && ff[i] == ff[0]
		sameKV = sameKV && kv[i] == kv[0]
	}
	full, swa := c.HeadDim, c.HeadDim
	if h, ok := heads[FullAttention]; ok {
		full = h
	}
	if h, ok := heads[SlidingAttention]; ok {
		swa = h
	}
	if full%2 != 0 {
		return fmt.Errorf("%s: full-attention heads of %d: rope needs an even size", c.ModelType, full)
	}

	if c.MaxPositionEmbeddings > 0 {
		u32("max_position_embeddings", c.MaxPositionEmbeddings)
	}
	u32("hidden_size", c.HiddenSize)
	u32("num_hidden_layers", n)
	if sameFF {
		u32("intermediate_size", int(ff[0]))
	} else {
		l.KV = append(l.KV, gguf.KV{Key: a + "feed_forward_length", Value: gguf.Array(ff)})
	}
	u32("num_attention_heads", c.NumAttentionHeads)
	if sameKV {
		u32("num_key_value_heads", int(kv[0]))
	} else {
		l.KV = append(l.KV, gguf.KV{Key: a + "attention.head_count_kv", Value: gguf.Array(kv)})
	}
	u32("attention.key_length", full)
	u32("attention.value_length", full)
	u32("attention.key_length_swa", swa)
	u32("attention.value_length_swa", swa)
	f32("rms_norm_eps", c.NormEps())
	u32("vocab_size", c.VocabSize)

	global, local := c.Rope(FullAttention), c.Rope(SlidingAttention)
	turning := full / 2
	switch global.Type {
	case "proportional":
		turning = int(math.Floor(global.PartialRotaryFactor * float64(full) / 2))
	case "", "default":
		if global.PartialRotaryFactor != 1 {
			return fmt.Errorf("%s: a default rope over %g of the full-attention heads has no gemma4 form (a proportional one has)", c.ModelType, global.PartialRotaryFactor)
		}
	default:
		return fmt.Errorf("%s: full-attention rope_type %q has no gemma4 form", c.ModelType, global.Type)
	}
	if global.Factor != 1 && global.Factor != 0 {
		return fmt.Errorf("%s: full-attention rope factor %g has no gemma4 form", c.ModelType, global.Factor)
	}
	if turning <= 0 {
		return fmt.Errorf("%s: the full-attention rope turns no pair", c.ModelType)
	}
	if local.Type != "" && local.Type != "default" {
		return fmt.Errorf("%s: sliding-attention rope_type %q has no gemma4 form", c.ModelType, local.Type)
	}
	partial := local.PartialRotaryFactor
	if partial == 0 {
		partial = 1
	}
	rot := int(float64(swa) * partial)
	rot -= rot % 2
	if rot <= 0 {
		return fmt.Errorf("%s: the sliding-attention rope turns no pair", c.ModelType)
	}
	u32("rope.dimension_count", full)
	u32("rope.dimension_count_swa", rot)
	f32("rope_theta", global.Theta)
	f32("rope.freq_base_swa", local.Theta)
	freqs := make([]float32, full/2)
	for i := range freqs {
		freqs[i] = gemma4Frozen
		if i < turning {
			freqs[i] = 1
		}
	}
	l.Extra = append(l.Extra, GGUFTensor{Name: ggufRopeFreqs, Dims: []int64{int64(len(freqs))}, Data: freqs})

	if c.SlidingWindow > 0 {
		u32("sliding_window", c.SlidingWindow)
	}
	l.KV = append(l.KV, gguf.KV{Key: a + "attention.sliding_window_pattern", Value: gguf.Array(pattern)})
	u32("num_kv_shared_layers", c.NumKVSharedLayers)
	u32("hidden_size_per_layer_input", max(c.HiddenSizePerLayerInput, 0))
	if c.FinalLogitSoftcapping > 0 {
		f32("final_logit_softcapping", c.FinalLogitSoftcapping)
	}
	var moe bool
	if _, err := c.Get("enable_moe_block", &moe); err != nil {
		return err
	}
	if moe {
		u32("num_experts", c.NumExperts)
		u32("num_experts_per_tok", c.NumExpertsPerTok)
		u32("expert_feed_forward_length", c.MoEIntermediateSize)
	}
	return nil
}

// perLayerInputKeys are the config keys of the per-layer inputs and
// KV-shared layers of Gemma 3n and Gemma 4.
var perLayerInputKeys = []ConfigKey{
	{"num_kv_shared_layers", "attention.shared_kv_layers"},
	{"hidden_size_per_layer_input", "embedding_length_per_layer_input"},
}
