package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
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
// the per-layer inputs are Gemma 4's (loadGemmaAttention, perLayerEmbedding).
func init() {
	Register(Arch{ModelTypes: []string{"gemma3n_text"}, Load: loadGemma3n, GGUF: "gemma3n",
		Tensors: &TensorLayout{act: "gelu_pytorch_tanh", layer: gemma3nGGUFLayer, global: gemma3nGlobal,
			swaPeriod: 5, rules: gemma3nRules, compose: composeGemma3n},
		Keys:     perLayerInputKeys,
		Meta:     ggufMeta{eps: 1e-6, ff: ffPerLayer, windowed: true, read: gemma3nFromGGUF, write: gemma3nToGGUF},
		Defaults: map[string]string{"tie_word_embeddings": "true"}})
}

type gemma3n struct {
	batching
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

	attn attention
	mlp  mlp // with activation sparsity
	ff   int

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
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
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
			ly.mlp.sparsity = float32(math.Sqrt2 * math.Erfinv(2*sparsity[i]-1))
		}
		ly.inNorm = l.vector(p+"input_layernorm.weight", hid)
		ly.postAttnNorm = l.vector(p+"post_attention_layernorm.weight", hid)
		ly.preFFNorm = l.vector(p+"pre_feedforward_layernorm.weight", hid)
		ly.postFFNorm = l.vector(p+"post_feedforward_layernorm.weight", hid)
		sp := ly.mlp.sparsity
		ly.mlp = loadMLP(l, p+"mlp.", "gate_proj", "up_proj", "down_proj", hid, ly.ff, m.activation)
		ly.mlp.sparsity, ly.mlp.rows = sp, rows
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
	return newKVState(m.b, m.stack().attns, ctx)
}

// stack lists the attention blocks.
func (m *gemma3n) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i := range m.layers {
		attns[i] = &m.layers[i].attn
	}
	return stack{attns: attns}
}

// Forward implements Model. Without logits (a prefill chunk that is not the
// last) the KV-shared layers are skipped, as in Gemma 4.
func (m *gemma3n) Forward(state State, ids, pos, logits *compute.Tensor) {
	m.forward(onePass(m.b, state.(*kvState), nil, ids, pos, logits))
}

// forward runs the stack over the rows of pass p.
func (m *gemma3n) forward(p *pass) {
	b, s := m.b, p.ar
	hid := m.cfg.HiddenSize
	// xs are the streams; ps receive each layer's predictions, corrected
	// in place, and become the next layer's streams.
	xs, ps := s.set("streams", m.k, hid), s.set("predictions", m.k, hid)
	x0 := xs[0]
	b.Embed(x0, m.embed, p.ids)
	b.Scale(x0, x0, m.embedScale)
	width := len(m.layers) * m.ple.d
	ple := s.get("ple", width)
	m.ple.compute(b, ple, s.get("ple tokens", width), x0, p.ids)
	t := s.get("t", hid)
	for j := 1; j < m.k; j++ {
		b.MatMul(t, x0, m.project[j-1])
		m.rows.MatchRMS(xs[j], t, x0, magnitudeFloor)
	}
	run := len(m.layers)
	if !p.wants() {
		run = m.owners
	}
	for i := range run {
		m.layer(i, p, xs, ps, ple, run == len(m.layers))
		xs, ps = ps, xs
	}
	if !p.wants() {
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
	gemmaHead(p, out, m.norm, m.output, m.eps, m.softCap)
}

// route computes the router's per-token coefficients tanh(R·RMSNorm(x)/hidden)
// into mod [n, k].
func (m *gemma3n) route(l *gemma3nLayer, s *arena, mod, x *compute.Tensor) {
	b := m.b
	h := s.get("router in", x.Cols())
	b.RMSNorm(h, x, l.routerNorm, m.eps, 0)
	b.Scale(h, h, 1/float32(x.Cols()))
	b.MatMul(mod, h, l.router)
	b.SoftCap(mod, mod, 1) // tanh
}

// layer runs layer i from the streams xs into ps.
func (m *gemma3n) layer(i int, p *pass, xs, ps []*compute.Tensor, ple *compute.Tensor, full bool) {
	b, l, eps, k, s := m.b, &m.layers[i], m.eps, m.k, p.ar
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
	l.attn.forward(p, o, a, full)
	b.RMSNorm(o, o, l.postAttnNorm, eps, 0)
	b.Add(o, o, active)
	b.Add(o, o, lr)
	b.Scale(o, o, 1/math.Sqrt2)
	// MLP with activation sparsity.
	f := s.get("mlp", hid)
	b.RMSNorm(a, o, l.preFFNorm, eps, 0)
	l.mlp.forward(b, s, f, a)
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

// GGUF layout of Gemma 3n (text), as llama.cpp's converter (Gemma3NModel in
// conversion/gemma.py) writes it and src/models/gemma3n.cpp reads it, as
// architecture gemma3n.
//
//   - Norm weights are stored as they are (Gemma 3n scales by w, not 1+w).
//   - The per-layer inputs: embed_tokens_per_layer is per_layer_token_embd
//     (padded with zero rows to vocab_size), per_layer_model_projection
//     per_layer_model_proj, per_layer_projection_norm per_layer_proj_norm;
//     per layer, per_layer_input_gate is inp_gate, per_layer_projection
//     proj and post_per_layer_input_norm post_norm.
//   - AltUp: the k−1 altup_projections and altup_unembed_projections are
//     stacked into altup_proj and altup_unembd_proj [k−1, hidden, hidden];
//     per layer, altup.correction_coefs is altup_correct_coef,
//     correct_output_scale altup_correct_scale, prediction_coefs
//     altup_predict_coef, modality_router altup_router and router_norm
//     altup_router_norm. LAuReL: laurel.linear_left, linear_right and
//     post_laurel_norm are laurel_l, laurel_r and laurel_post_norm.
//   - Keys: altup.active_idx, altup.num_inputs,
//     embedding_length_per_layer_input, attention.shared_kv_layers,
//     attention.sliding_window_pattern (one bool per layer),
//     activation_sparsity_scale (per layer, the standard normal quantile of
//     activation_sparsity_pattern: −∞ for a dense layer), and
//     feed_forward_length as one value per layer when intermediate_size is
//     a list. rope.freq_base is the full-attention layers' base;
//     rope.freq_base_swa, which llama.cpp reads, the sliding layers'.
//
// What llama.cpp's gemma3n graph fixes rather than reads, and lem reads
// from the file: the LAuReL rank (from laurel_l's shape), where the
// KV-shared layers start (llama.cpp: layer 20, the published geometries),
// and which layers are sparse (llama.cpp: the first 10); ToGGUF warns when a
// checkpoint differs. altup_coef_clip has no key: the converter leaves the
// coefficients as they are and llama.cpp does not clip, so ToGGUF stores
// the correction coefficients clipped (as lem's reading of the checkpoint
// uses them), which changes nothing for weights within the clip.

var (
	// Gemma 4's tensors outside the layers, and the altup projections.
	gemma3nGlobal = merge(gemma4Global, map[string]string{
		"model.altup_projections.weight":         "altup_proj.weight",
		"model.altup_unembed_projections.weight": "altup_unembd_proj.weight",
	})
	gemma3nGGUFLayer = merge(gemmaLayer, map[string]string{
		"per_layer_input_gate.weight":      "inp_gate.weight",
		"per_layer_projection.weight":      "proj.weight",
		"post_per_layer_input_norm.weight": "post_norm.weight",
		"altup.correction_coefs.weight":    "altup_correct_coef.weight",
		"altup.correct_output_scale":       "altup_correct_scale.weight",
		"altup.prediction_coefs.weight":    "altup_predict_coef.weight",
		"altup.modality_router.weight":     "altup_router.weight",
		"altup.router_norm.weight":         "altup_router_norm.weight",
		"laurel.linear_left.weight":        "laurel_l.weight",
		"laurel.linear_right.weight":       "laurel_r.weight",
		"laurel.post_laurel_norm.weight":   "laurel_post_norm.weight",
	})
)

// gemma3nRules clips the AltUp correction coefficients as lem's reading of
// a checkpoint does (altup_coef_clip), the clip having no key.
func gemma3nRules(c *Config) map[string]ggufRule {
	var clip float64
	if _, err := c.Get("altup_coef_clip", &clip); err != nil || clip <= 0 {
		return nil
	}
	lim := float32(clip)
	return map[string]ggufRule{"altup.correction_coefs.weight": {
		encode: func(row []float32, _ int) {
			for i, v := range row {
				row[i] = min(max(v, -lim), lim)
			}
		},
	}}
}

// composeGemma3n stacks the AltUp projections and pads the per-layer
// embedding table to the vocabulary, as the converter does.
func composeGemma3n(c *Config, src Source, names []string) ([]composite, error) {
	var out []composite
	for _, p := range []string{"model.altup_projections.", "model.altup_unembed_projections."} {
		var parts []string
		for j := 0; ; j++ {
			n := p + strconv.Itoa(j) + ".weight"
			if _, ok := src.Lookup(n); !ok {
				break
			}
			parts = append(parts, n)
		}
		if len(parts) == 0 {
			continue
		}
		var first Stored
		for j, n := range parts {
			s, _ := src.Lookup(n)
			if j == 0 {
				first = s
			}
			if len(s.Shape) != 2 || s.DType != first.DType || len(s.Data) != len(first.Data) {
				return nil, fmt.Errorf("tensor %s is %s %v, %s is %s %v: the projections must agree to be stacked", n, s.DType, s.Shape, parts[0], first.DType, first.Shape)
			}
		}
		out = append(out, composite{
			name: p + "weight", parts: parts, dtype: first.DType,
			shape: []int{len(parts), first.Shape[0], first.Shape[1]},
			build: func() []byte {
				var data []byte
				for _, n := range parts {
					s, _ := src.Lookup(n)
					data = append(data, s.Data...)
				}
				return data
			},
		})
	}
	const table = "model.embed_tokens_per_layer.weight"
	if s, ok := src.Lookup(table); ok && len(s.Shape) == 2 && s.Shape[0] < c.VocabSize {
		if s.DType.Quantized() {
			return nil, fmt.Errorf("tensor %s is %s: padding it to the vocabulary needs a float type", table, s.DType)
		}
		rb := len(s.Data) / s.Shape[0]
		out = append(out, composite{
			name: table, parts: []string{table}, dtype: s.DType, shape: []int{c.VocabSize, s.Shape[1]},
			build: func() []byte {
				s, _ := src.Lookup(table)
				data := make([]byte, c.VocabSize*rb) // zero rows for the ids beyond the table
				copy(data, s.Data)
				return data
			},
		})
	}
	return out, nil
}

// gemma3nRaw are the config keys of Gemma 3n that only its loader reads
// (through Config.Get).
type gemma3nRaw struct {
	AltUpNumInputs    int       `json:"altup_num_inputs"`
	AltUpActiveIdx    int       `json:"altup_active_idx"`
	AltUpCorrectScale bool      `json:"altup_correct_scale"`
	LaurelRank        int       `json:"laurel_rank"`
	Sparsity          []float64 `json:"activation_sparsity_pattern"`
}

// gemma3nFromGGUF reads the keys and shapes of a gemma3n file and the
// sliding layers' rope.
func gemma3nFromGGUF(k *ggufKeys, c *Config, g *GGUF) error {
	if err := ggufGemma3nConfig(c, k, g, g.ffPerLayer); err != nil {
		return err
	}
	ggufSlidingRope(c, k)
	return k.err
}

// gemma3nToGGUF writes the keys of a gemma3n file, its sliding window
// included.
func gemma3nToGGUF(l *GGUFLayout, w *ggufWriter) error {
	w.window = true
	return l.gemma3nMetadata(w.u32, w.f32)
}

// ggufGemma3nConfig reads the keys and shapes of a gemma3n file.
func ggufGemma3nConfig(c *Config, k *ggufKeys, g *GGUF, ff []int) error {
	n := c.NumHiddenLayers
	r := gemma3nRaw{AltUpNumInputs: 4, AltUpCorrectScale: true}
	if v, ok := k.uint("altup.num_inputs"); ok {
		r.AltUpNumInputs = v
	}
	r.AltUpActiveIdx, _ = k.uint("altup.active_idx")
	c.HiddenSizePerLayerInput = k.need("hidden_size_per_layer_input")
	c.NumKVSharedLayers, _ = k.uint("num_kv_shared_layers")
	if k.err != nil {
		return k.err
	}
	if c.NumKVSharedLayers >= n {
		return fmt.Errorf("key %s.attention.shared_kv_layers: %d of %d layers", k.arch, c.NumKVSharedLayers, n)
	}
	if t, ok := g.tensors["model.embed_tokens_per_layer.weight"]; ok && len(t.Dims) == 2 {
		c.VocabSizePerLayerInput = int(t.Dims[1])
	}
	if t, ok := g.tensors["model.layers.0.laurel.linear_left.weight"]; ok && len(t.Dims) == 2 {
		r.LaurelRank = int(t.Dims[1])
	}
	key := k.arch + ".activation_sparsity_scale"
	if v, ok := k.f.Value(key); ok {
		scales, ok := gguf.ArrayOf[float32](v)
		if !ok || len(scales) != n {
			return fmt.Errorf("key %s: want %d float32s, got %s", key, n, v.Type())
		}
		r.Sparsity = make([]float64, n)
		for i, s := range scales {
			// The fraction of a standard normal below s: 0 for −∞.
			r.Sparsity[i] = 0.5 * math.Erfc(-float64(s)/math.Sqrt2)
		}
	}
	if ff != nil {
		c.perLayer = map[int]layerOverride{}
		for i, v := range ff {
			if v != c.IntermediateSize {
				c.perLayer[i] = layerOverride{intermediate: v}
			}
		}
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for key, v := range raw {
		c.Raw[key] = v
	}
	return nil
}

// gemma3nMetadata writes the keys of a gemma3n file.
func (l *GGUFLayout) gemma3nMetadata(u32 func(string, int), f32 func(string, float64)) error {
	c := l.cfg
	a := l.Arch + "."
	r := gemma3nRaw{AltUpNumInputs: 4, AltUpCorrectScale: true}
	for _, k := range []struct {
		key string
		dst any
	}{
		{"altup_num_inputs", &r.AltUpNumInputs}, {"altup_active_idx", &r.AltUpActiveIdx},
		{"altup_correct_scale", &r.AltUpCorrectScale}, {"activation_sparsity_pattern", &r.Sparsity},
	} {
		if _, err := c.Get(k.key, k.dst); err != nil {
			return err
		}
	}
	if !r.AltUpCorrectScale {
		return fmt.Errorf("%s: altup_correct_scale false: llama.cpp's gemma3n always scales the correction", c.ModelType)
	}
	if c.HiddenSizePerLayerInput <= 0 {
		return fmt.Errorf("%s: llama.cpp's gemma3n needs per-layer inputs (hidden_size_per_layer_input)", c.ModelType)
	}
	u32("altup.active_idx", r.AltUpActiveIdx)
	u32("altup.num_inputs", r.AltUpNumInputs)
	u32("hidden_size_per_layer_input", c.HiddenSizePerLayerInput)
	u32("num_kv_shared_layers", c.NumKVSharedLayers)
	if first := c.NumHiddenLayers - c.NumKVSharedLayers; c.NumKVSharedLayers > 0 && first != 20 {
		l.Warnings = append(l.Warnings, fmt.Sprintf("KV-shared layers start at layer %d: llama.cpp's gemma3n starts them at layer 20 whatever attention.shared_kv_layers says", first))
	}
	if r.Sparsity != nil {
		if len(r.Sparsity) != c.NumHiddenLayers {
			return fmt.Errorf("%s: activation_sparsity_pattern has %d entries for %d layers", c.ModelType, len(r.Sparsity), c.NumHiddenLayers)
		}
		scales := make([]float32, len(r.Sparsity))
		llama := true
		for i, p := range r.Sparsity {
			if p < 0 || p >= 1 {
				return fmt.Errorf("%s: activation_sparsity_pattern[%d] = %g, want [0, 1)", c.ModelType, i, p)
			}
			scales[i] = float32(math.Sqrt2 * math.Erfinv(2*p-1))
			if (p > 0) != (i < 10) {
				llama = false
			}
		}
		l.KV = append(l.KV, gguf.KV{Key: a + "activation_sparsity_scale", Value: gguf.Array(scales)})
		if !llama {
			l.Warnings = append(l.Warnings, "activation_sparsity_pattern: llama.cpp's gemma3n makes exactly the first 10 layers sparse")
		}
	}
	var ffList []int
	if _, err := c.Get("intermediate_size", &ffList); err == nil && len(ffList) > 0 {
		if len(ffList) != c.NumHiddenLayers {
			return fmt.Errorf("%s: intermediate_size has %d entries for %d layers", c.ModelType, len(ffList), c.NumHiddenLayers)
		}
		ff := make([]uint32, len(ffList))
		for i, v := range ffList {
			ff[i] = uint32(v)
		}
		for i, kv := range l.KV {
			if kv.Key == a+"feed_forward_length" {
				l.KV[i].Value = gguf.Array(ff)
			}
		}
	}
	pattern := make([]bool, c.NumHiddenLayers)
	for i := range pattern {
		switch t := c.LayerType(i); t {
		case SlidingAttention:
			pattern[i] = true
		case FullAttention:
		default:
			return fmt.Errorf("%s: layer %d is %q", c.ModelType, i, t)
		}
	}
	if c.SlidingWindow > 0 {
		u32("sliding_window", c.SlidingWindow)
	}
	l.KV = append(l.KV, gguf.KV{Key: a + "attention.sliding_window_pattern", Value: gguf.Array(pattern)})
	if local, ok := c.RopeByLayerType[SlidingAttention]; ok {
		f32("rope.freq_base_swa", local.Theta)
	}
	return nil
}
