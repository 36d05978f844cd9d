package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// Gemma 3n (text). The hidden state is k streams (AltUp, altup_num_inputs);
// each layer computes on one of them (the active stream, altup_active_idx)
// and carries the result over to all:
//
//	p     = predict(x)                     each stream plus a per-token mix of all streams
//	a     = RMSNorm(p[act])
//	l     = a + RMSNorm(right·left·a)      LAuReL, a low-rank residual
//	h     = (p[act] + RMSNorm(Attn(a)) + l) / √2
//	y     = h + RMSNorm(MLP(RMSNorm(h)))   MLP(h) = down(gelu(topk(gate·h)) ⊙ up·h)
//	c     = correct(p, y)                  each stream plus a per-token multiple of y - p[act]
//	c[1:] += RMSNorm(proj(gelu(gate_ple·(c[act] ⊙ s)) ⊙ ple[layer]))
//
// The mixing coefficients come from a router on each token: predict uses
// tanh(R·RMSNorm(x[act])/hidden) through a k×k map per token, correct the
// same router on y through a k-vector (plus 1). topk is the activation
// sparsity of the layer: values below the mean plus the normal quantile of
// activation_sparsity_pattern[layer] standard deviations become zero.
//
// The streams start as the scaled embedding and k-1 projections of it
// matched to its magnitude; at the end the k-1 streams are projected back,
// matched to stream 0's magnitude, and all k averaged before the final norm,
// the output projection and the soft cap. Attention, KV-shared layers and
// the per-layer inputs are Gemma 4's (gemmaAttention, perLayerEmbedding).
func init() {
	Register(Arch{ModelTypes: []string{"gemma3n_text"}, Load: loadGemma3n, GGUF: "gemma3n",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", layer: gemma3nGGUFLayer, global: gemma3nGlobal,
			swaPeriod: 5, rules: gemma3nRules, compose: composeGemma3n}})
}

type gemma3n struct {
	cfg  *Config
	b    compute.Backend
	rows compute.RowOps

	embed, norm, output *compute.Tensor
	ple                 *perLayerEmbedding
	// project and unproject map stream 0 to streams 1…k-1 and back.
	project, unproject []*compute.Tensor
	layers             []gemma3nLayer
	owners             int             // leading layers that own a KV cache
	k, act             int             // streams, active stream
	correctScale       bool            // altup_correct_scale
	plusOne            *compute.Tensor // [1, k] of ones

	embedScale, softCap, eps float32
	activation               compute.Activation
}

type gemma3nLayer struct {
	inNorm, postAttnNorm, preFFNorm, postFFNorm *compute.Tensor

	attn gemmaAttention

	gate, up, down *compute.Tensor
	ff             int
	sparsity       float32 // standard score of the gate's cut-off; 0: dense

	laurelLeft, laurelRight, laurelNorm *compute.Tensor
	rank                                int

	router, routerNorm        *compute.Tensor
	predict, correct          *compute.Tensor // [k·k, k], [k, k]
	correctScale              *compute.Tensor // [hidden]
	pleGate, pleProj, pleNorm *compute.Tensor
}

// magnitudeFloor bounds the mean square an AltUp stream is divided by.
const magnitudeFloor = 1e-5

func loadGemma3n(cfg *Config, src Source, b compute.Backend) (Model, error) {
	fail := func(err error) (Model, error) { return nil, fmt.Errorf("%s: %w", cfg.ModelType, err) }
	rows, ok := b.(compute.RowOps)
	if !ok {
		return fail(fmt.Errorf("backend %s lacks compute.RowOps (per-row operations for AltUp and activation sparsity)", b.Name()))
	}
	m := &gemma3n{
		cfg: cfg, b: b, rows: rows, k: 4, correctScale: true,
		eps:        float32(cfg.RMSNormEps),
		embedScale: sqrt32(cfg.HiddenSize),
		softCap:    float32(cfg.FinalLogitSoftcapping),
		owners:     cfg.NumHiddenLayers - cfg.NumKVSharedLayers,
	}
	var rank int
	var coefClip float64
	var sparsity []float64
	for _, k := range []struct {
		key string
		dst any
	}{
		{"altup_num_inputs", &m.k}, {"altup_active_idx", &m.act}, {"altup_correct_scale", &m.correctScale},
		{"altup_coef_clip", &coefClip}, {"laurel_rank", &rank}, {"activation_sparsity_pattern", &sparsity},
	} {
		if _, err := cfg.Get(k.key, k.dst); err != nil {
			return fail(err)
		}
	}
	n, hid := cfg.NumHiddenLayers, cfg.HiddenSize
	switch {
	case m.k < 1 || m.act < 0 || m.act >= m.k:
		return fail(fmt.Errorf("config keys %q, %q: active stream %d of %d", "altup_active_idx", "altup_num_inputs", m.act, m.k))
	case rank <= 0:
		return fail(fmt.Errorf("config key %q: %d, want a positive rank", "laurel_rank", rank))
	case sparsity != nil && len(sparsity) != n:
		return fail(fmt.Errorf("config key %q: %d entries for %d layers", "activation_sparsity_pattern", len(sparsity), n))
	case cfg.HiddenSizePerLayerInput <= 0:
		return fail(fmt.Errorf("config key %q: Gemma 3n needs per-layer inputs", "hidden_size_per_layer_input"))
	case cfg.VocabSizePerLayerInput < cfg.VocabSize:
		return fail(fmt.Errorf("config key %q: %d per-layer embeddings for a vocabulary of %d", "vocab_size_per_layer_input", cfg.VocabSizePerLayerInput, cfg.VocabSize))
	}
	var err error
	if m.activation, err = compute.ParseActivation(cfg.HiddenAct); err != nil {
		return fail(err)
	}
	ones := make([]float32, m.k)
	for i := range ones {
		ones[i] = 1
	}
	m.plusOne = b.Alloc(compute.F32, 1, m.k)
	b.Upload(m.plusOne, ones)

	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", cfg.VocabSize, hid)
	m.norm, m.output = loadOutput(l, cfg, m.embed)
	m.ple = loadPerLayerEmbedding(l, cfg)
	m.project = loadAltUpProjections(l, "model.altup_projections", m.k-1, hid)
	m.unproject = loadAltUpProjections(l, "model.altup_unembed_projections", m.k-1, hid)
	d := cfg.HiddenSizePerLayerInput
	ropes, onesOf := map[string]*compute.Rope{}, onesCache(b)
	for i := range n {
		p := fmt.Sprintf("model.layers.%d.", i)
		attn, err := loadGemmaAttention(l, cfg, i, p, ropes, onesOf)
		if err != nil {
			return fail(err)
		}
		ly := gemma3nLayer{attn: attn, ff: cfg.IntermediateSizeFor(i), rank: rank}
		if sparsity != nil && sparsity[i] > 0 {
			if !(sparsity[i] < 1) {
				return fail(fmt.Errorf("config key %q: layer %d: sparsity %g is not below 1", "activation_sparsity_pattern", i, sparsity[i]))
			}
			// The standard normal quantile of the target sparsity.
			ly.sparsity = float32(math.Sqrt2 * math.Erfinv(2*sparsity[i]-1))
		}
		ly.inNorm = l.vector(p+"input_layernorm.weight", hid)
		ly.postAttnNorm = l.vector(p+"post_attention_layernorm.weight", hid)
		ly.preFFNorm = l.vector(p+"pre_feedforward_layernorm.weight", hid)
		ly.postFFNorm = l.vector(p+"post_feedforward_layernorm.weight", hid)
		ly.gate = l.weight(p+"mlp.gate_proj.weight", ly.ff, hid)
		ly.up = l.weight(p+"mlp.up_proj.weight", ly.ff, hid)
		ly.down = l.weight(p+"mlp.down_proj.weight", hid, ly.ff)
		ly.laurelLeft = l.weight(p+"laurel.linear_left.weight", rank, hid)
		ly.laurelRight = l.weight(p+"laurel.linear_right.weight", hid, rank)
		ly.laurelNorm = l.vector(p+"laurel.post_laurel_norm.weight", hid)
		a := p + "altup."
		ly.router = l.weight(a+"modality_router.weight", m.k, hid)
		ly.routerNorm = l.vector(a+"router_norm.weight", hid)
		ly.predict = l.weight(a+"prediction_coefs.weight", m.k*m.k, m.k)
		ly.correct = l.clipped(a+"correction_coefs.weight", float32(coefClip), m.k, m.k)
		ly.correctScale = l.vector(a+"correct_output_scale", hid)
		ly.pleGate = l.weight(p+"per_layer_input_gate.weight", d, hid)
		ly.pleProj = l.weight(p+"per_layer_projection.weight", hid, d)
		ly.pleNorm = l.vector(p+"post_per_layer_input_norm.weight", hid)
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return fail(l.err)
	}
	return m, nil
}

func (m *gemma3n) Config() *Config { return m.cfg }

// NewState implements Model.
func (m *gemma3n) NewState(ctx int) State {
	attns := make([]*gemmaAttention, len(m.layers))
	for i := range m.layers {
		attns[i] = &m.layers[i].attn
	}
	return newKVState(m.b, attns, ctx)
}

// Forward implements Model. Without logits (a prefill chunk that is not the
// last) the KV-shared layers are skipped, as in Gemma 4.
func (m *gemma3n) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*kvState)
	b := m.b
	hid := m.cfg.HiddenSize
	s := st.scratchFor(b, ids.Len())
	// xs are the streams; ps receive each layer's predictions, corrected
	// in place, and become the next layer's streams.
	xs, ps := s.set("streams", m.k, hid), s.set("predictions", m.k, hid)
	x0 := xs[0]
	b.Embed(x0, m.embed, ids)
	b.Scale(x0, x0, m.embedScale)
	width := len(m.layers) * m.ple.d
	ple := s.get("ple", width)
	m.ple.compute(b, ple, s.get("ple tokens", width), x0, ids)
	t := s.get("t", hid)
	for j := 1; j < m.k; j++ {
		b.MatMul(t, x0, m.project[j-1])
		m.rows.MatchRMS(xs[j], t, x0, magnitudeFloor)
	}
	run := len(m.layers)
	if logits == nil {
		run = m.owners
	}
	for i := range run {
		m.layer(i, st, s, xs, ps, ple, pos, run == len(m.layers))
		xs, ps = ps, xs
	}
	if logits == nil {
		return
	}
	// Back to one stream: the mean of stream 0 and the others projected
	// back and matched to its magnitude.
	out := s.get("out", hid)
	b.Scale(out, xs[0], 1)
	for j := 1; j < m.k; j++ {
		b.MatMul(t, xs[j], m.unproject[j-1])
		m.rows.MatchRMS(t, t, xs[0], magnitudeFloor)
		b.Add(out, out, t)
	}
	b.Scale(out, out, 1/float32(m.k))
	gemmaHead(b, s, out, m.norm, m.output, logits, m.eps, m.softCap)
}

// route computes the router's per-token coefficients tanh(R·RMSNorm(x)/hidden)
// into mod [n, k].
func (m *gemma3n) route(l *gemma3nLayer, s *scratch, mod, x *compute.Tensor) {
	b := m.b
	h := s.get("router in", x.Cols())
	b.RMSNorm(h, x, l.routerNorm, m.eps, 0)
	b.Scale(h, h, 1/float32(x.Cols()))
	b.MatMul(mod, h, l.router)
	b.SoftCap(mod, mod, 1) // tanh
}

// layer runs layer i from the streams xs into ps.
func (m *gemma3n) layer(i int, st *kvState, s *scratch, xs, ps []*compute.Tensor, ple, pos *compute.Tensor, full bool) {
	b, l, eps, k := m.b, &m.layers[i], m.eps, m.k
	hid := xs[0].Cols()
	mod := s.get("modalities", k)

	// Predict: p[y] = x[y] + Σ_j c[y·k+j] x[j], c per token.
	coefs := s.get("prediction coefs", k*k)
	m.route(l, s, mod, xs[m.act])
	b.MatMul(coefs, mod, l.predict)
	for y := range k {
		b.Scale(ps[y], xs[y], 1)
		for j := range k {
			m.rows.AxpyRows(ps[y], xs[j], coefs, y*k+j)
		}
	}
	active := ps[m.act]

	a, o, lr := s.get("a", hid), s.get("o", hid), s.get("laurel", hid)
	b.RMSNorm(a, active, l.inNorm, eps, 0)
	// LAuReL.
	low := s.get("laurel low", l.rank)
	b.MatMul(low, a, l.laurelLeft)
	b.MatMul(lr, low, l.laurelRight)
	b.RMSNorm(lr, lr, l.laurelNorm, eps, 0)
	b.Add(lr, lr, a)
	// Attention, joined with the LAuReL branch.
	l.attn.forward(b, st, s, a, pos, o, full)
	b.RMSNorm(o, o, l.postAttnNorm, eps, 0)
	b.Add(o, o, active)
	b.Add(o, o, lr)
	b.Scale(o, o, 1/math.Sqrt2)
	// MLP with activation sparsity.
	g, u, f := s.get("gate", l.ff), s.get("up", l.ff), s.get("mlp", hid)
	b.RMSNorm(a, o, l.preFFNorm, eps, 0)
	b.MatMul(g, a, l.gate)
	if l.sparsity != 0 {
		m.rows.GaussianTopK(g, g, l.sparsity)
	}
	b.MatMul(u, a, l.up)
	b.GLU(g, g, u, m.activation)
	b.MatMul(f, g, l.down)
	b.RMSNorm(f, f, l.postFFNorm, eps, 0)
	b.Add(o, o, f)

	// Correct: p[y] += (c[y] + 1) (y - p[act]), c per token.
	corr, innov := s.get("correction coefs", k), s.get("innovation", hid)
	m.route(l, s, mod, o)
	b.MatMul(corr, mod, l.correct)
	b.Add(corr, corr, m.plusOne)
	b.Scale(innov, active, -1)
	b.Add(innov, innov, o)
	for y := range k {
		m.rows.AxpyRows(ps[y], innov, corr, y)
	}

	// The per-layer input, gated by the corrected active stream, joins the
	// other streams.
	d := m.ple.d
	in, pg := s.get("ple in", d), s.get("ple gate", d)
	first := ps[m.act]
	if m.correctScale {
		first = s.get("first", hid)
		b.Mul(first, ps[m.act], l.correctScale)
	}
	b.Columns(in, ple, i*d)
	b.MatMul(pg, first, l.pleGate)
	b.GLU(pg, pg, in, m.activation)
	b.MatMul(f, pg, l.pleProj)
	b.RMSNorm(f, f, l.pleNorm, eps, 0)
	for y := 1; y < k; y++ {
		b.Add(ps[y], ps[y], f)
	}
}

// loadAltUpProjections reads the n hidden×hidden AltUp projections under
// prefix p: p.J.weight in a checkpoint, or one stacked p.weight [n, hidden,
// hidden] (GGUF files), viewed per projection in its stored type.
func loadAltUpProjections(l *loader, p string, n, hid int) []*compute.Tensor {
	var out []*compute.Tensor
	if l.has(p + ".weight") {
		s := l.stored(p+".weight", []int{n, hid, hid})
		for j := range n {
			if l.err != nil {
				return nil
			}
			out = append(out, l.tensor(p+".weight", s.DType, []int{hid, hid}, slab(s, j, n)))
		}
		return out
	}
	for j := range n {
		out = append(out, l.weight(fmt.Sprintf("%s.%d.weight", p, j), hid, hid))
	}
	return out
}
