package model

import (
	"fmt"

	"lem/compute"
)

// Gemma 4 (text). Gemma 3's sandwich norms around attention and MLP, with
// plain RMSNorm weights (x · w), per-head norms of queries, keys and values
// and no score scaling (see gemmaAttention), then a per-layer input (PLE)
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
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", layer: gemma4GGUFLayer, global: gemma4Global}})
}

type gemma4 struct {
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

	attn gemmaAttention

	gate, up, down *compute.Tensor
	ff             int

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
		ly.gate = l.weight(p+"mlp.gate_proj.weight", ly.ff, hid)
		ly.up = l.weight(p+"mlp.up_proj.weight", ly.ff, hid)
		ly.down = l.weight(p+"mlp.down_proj.weight", hid, ly.ff)
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
	attns := make([]*gemmaAttention, len(m.layers))
	for i := range m.layers {
		attns[i] = &m.layers[i].attn
	}
	return newKVState(m.b, attns, ctx)
}

// Forward implements Model. Without logits (a prefill chunk that is not the
// last) the KV-shared layers are skipped: they own no cache, so their only
// product would be this chunk's output, which nobody reads.
func (m *gemma4) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*kvState)
	b := m.b
	s := st.scratchFor(b, ids.Len())
	x := s.get("x", m.cfg.HiddenSize)
	b.Embed(x, m.embed, ids)
	b.Scale(x, x, m.embedScale)
	var ple *compute.Tensor
	if m.ple != nil {
		width := len(m.layers) * m.ple.d
		ple = s.get("ple", width)
		m.ple.compute(b, ple, s.get("ple tokens", width), x, ids)
	}
	run := len(m.layers)
	if logits == nil {
		run = m.owners
	}
	for i := range run {
		m.layer(i, st, s, x, ple, pos, run == len(m.layers))
	}
	if logits != nil {
		gemmaHead(b, s, x, m.norm, m.output, logits, m.eps, m.softCap)
	}
}

// layer runs layer i on the rows x in place.
func (m *gemma4) layer(i int, st *kvState, s *scratch, x, ple, pos *compute.Tensor, full bool) {
	b, l, eps := m.b, &m.layers[i], m.eps
	hid := x.Cols()
	h, o := s.get("h", hid), s.get("o", hid)

	b.RMSNorm(h, x, l.inNorm, eps, 0)
	l.attn.forward(b, st, s, h, pos, o, full)
	b.RMSNorm(o, o, l.postAttnNorm, eps, 0)
	b.Add(x, x, o)

	b.RMSNorm(h, x, l.preFFNorm, eps, 0)
	g, u := s.get("gate", l.ff), s.get("up", l.ff)
	b.MatMul(g, h, l.gate)
	b.MatMul(u, h, l.up)
	b.GLU(g, g, u, m.act)
	b.MatMul(o, g, l.down)
	if l.moe != nil {
		b.RMSNorm(o, o, l.postFF1Norm, eps, 0)
		rx, e := s.get("router in", hid), s.get("experts", hid)
		b.RMSNorm(rx, x, l.routerScale, eps, 0)
		b.Scale(rx, rx, 1/sqrt32(hid))
		b.RMSNorm(h, x, l.preFF2Norm, eps, 0)
		if s.moe == nil {
			s.moe = newMoEScratch(b, s.n, l.moe)
		}
		l.moe.forward(e, h, rx, s.moe)
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
