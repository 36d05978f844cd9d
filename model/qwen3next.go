package model

import (
	"fmt"
	"math"

	"lem/compute"
)

// Qwen3-Next and Qwen3.5: a hybrid stack in which most layers mix tokens
// with Gated DeltaNet linear attention (deltanet.go) and every few layers
// (layer_types "full_attention") with gated softmax attention:
//
//	h = x + Mixer(RMSNorm(x))
//	y = h + FFN(RMSNorm(h))
//
// Every RMSNorm of the stack scales by (1 + w), the final one included.
// The attention layers double the query projection into queries and an
// output gate, normalise each query and key head (1 + w), rotate a
// partial slice of each head, and gate their output:
//
//	[q g] = h·W_qᵀ,  k = h·W_kᵀ,  v = h·W_vᵀ
//	a = Attention(RoPE(RMSNorm(q)), RoPE(RMSNorm(k)), v) ⊙ σ(g)
//	out = a·W_oᵀ
//
// The FFN is the SwiGLU MLP (Qwen3.5) or a mixture of experts with a
// gated shared expert (Qwen3-Next, Qwen3.5-MoE).
func init() {
	// Every norm weight but the linear-attention layers' gated norm is
	// stored as w+1.
	linear := func(layer map[string]string, compose func(*Config, Source, []string) ([]composite, error)) *TensorLayout {
		return &TensorLayout{act: "silu", normShift: 1, unshifted: []string{"linear_attn.norm.weight"},
			layer: layer, rules: linearRules, compose: compose}
	}
	Register(Arch{ModelTypes: []string{"qwen3_5_text"}, Load: loadQwen35, GGUF: "qwen35",
		Tensors: linear(linearGGUFLayer, tileValueHeads)})
	Register(Arch{ModelTypes: []string{"qwen3_next"}, Load: loadQwen3Next, GGUF: "qwen3next",
		Tensors: linear(linearMoELayer, composeAll(stackExperts, splitQKVZ))})
	Register(Arch{ModelTypes: []string{"qwen3_5_moe_text"}, Load: loadQwen35MoE, GGUF: "qwen35moe",
		Tensors: linear(linearMoELayer, composeAll(stackExperts, tileValueHeads))})
}

// hybrid is the stack shared by the three families.
type hybrid struct {
	cfg   *Config
	b     compute.Backend
	conv  compute.Convolver
	delta compute.DeltaRuler

	embed, norm, output *compute.Tensor
	layers              []hybridLayer
	eps                 float32
	act                 compute.Activation
}

// hybridLayer holds one block; exactly one of linear and attn is set, and
// exactly one of mlp and moe.
type hybridLayer struct {
	inNorm, postNorm *compute.Tensor // F32 [hidden]
	linear           *deltaNet
	attn             *gatedAttention
	mlp              *mlp
	moe              *moeBlock
}

// gatedAttention is a softmax attention layer with an output gate.
type gatedAttention struct {
	q, gate, k, v, o *compute.Tensor
	qNorm, kNorm     *compute.Tensor // F32 [head_dim]
	attn             compute.Attention
	rope             *compute.Rope
}

// mlp is the gated feed-forward block down(act(gate(h)) ⊙ up(h)).
type mlp struct {
	gate, up, down *compute.Tensor
}

func (f *mlp) inter() int { return f.down.Cols() }

// hybridScratch holds the activations of one chunk length.
type hybridScratch struct {
	x, h, o, last          *compute.Tensor // [n, hidden]; last [1, hidden]
	qkv, mixed, z, core    *compute.Tensor // linear attention
	alpha, beta            *compute.Tensor // [n, value heads]
	q, gate, k, v, a, g, u *compute.Tensor // attention, MLP
	moe                    *moeScratch
}

func (m *hybrid) Config() *Config { return m.cfg }

// newScratch allocates the activation buffers for chunks of n rows.
func (m *hybrid) newScratch(n int) *hybridScratch {
	c := m.cfg
	f := func(cols int) *compute.Tensor { return m.b.Alloc(compute.F32, n, max(cols, 1)) }
	var conv, vdim, vh, qdim, kvdim, ff int
	var moe *moeBlock
	for _, l := range m.layers {
		if d := l.linear; d != nil {
			conv = max(conv, d.convDim())
			vdim = max(vdim, d.rule.ValueHeads*d.rule.ValueDim)
			vh = max(vh, d.rule.ValueHeads)
		}
		if a := l.attn; a != nil {
			qdim = max(qdim, a.attn.Heads*a.attn.HeadDim)
			kvdim = max(kvdim, a.attn.KVHeads*a.attn.HeadDim)
		}
		if l.mlp != nil {
			ff = max(ff, l.mlp.inter())
		}
		if l.moe != nil {
			moe = l.moe
		}
	}
	s := &hybridScratch{
		x: f(c.HiddenSize), h: f(c.HiddenSize), o: f(c.HiddenSize),
		last: m.b.Alloc(compute.F32, 1, c.HiddenSize),
		qkv:  f(conv), mixed: f(conv), z: f(vdim), core: f(vdim),
		alpha: f(vh), beta: f(vh),
		q: f(qdim), gate: f(qdim), a: f(qdim), k: f(kvdim), v: f(kvdim),
		g: f(ff), u: f(ff),
	}
	if moe != nil {
		s.moe = newMoEScratch(m.b, n, moe)
	}
	return s
}

// Forward implements Model.
func (m *hybrid) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*hybridState)
	b := m.b
	n := ids.Len()
	s := st.scratchFor(n)
	if s == nil {
		s = st.keepScratch(n, m.newScratch(n))
	}
	x := s.x
	b.Embed(x, m.embed, ids)
	for i := range m.layers {
		l := &m.layers[i]
		b.RMSNorm(s.h, x, l.inNorm, m.eps, 1)
		if l.linear != nil {
			l.linear.forward(m, s, s.h, st.conv[i], st.delta[i])
		} else {
			m.attention(l.attn, st.caches[i], s, s.h, pos)
		}
		b.Add(x, x, s.o)
		b.RMSNorm(s.h, x, l.postNorm, m.eps, 1)
		if l.moe != nil {
			l.moe.forward(s.o, s.h, s.h, s.moe)
		} else {
			m.feedForward(l.mlp, s, s.h)
		}
		b.Add(x, x, s.o)
	}
	st.advance(n)
	outputLogits(b, logits, x, s.h, s.last, m.norm, m.output, m.eps, 1)
}

// attention runs a gated attention layer on h into s.o.
func (m *hybrid) attention(l *gatedAttention, cache *compute.KVCache, s *hybridScratch, h, pos *compute.Tensor) {
	b := m.b
	b.MatMul(s.q, h, l.q)
	b.MatMul(s.gate, h, l.gate)
	b.MatMul(s.k, h, l.k)
	b.MatMul(s.v, h, l.v)
	b.RMSNorm(s.q, s.q, l.qNorm, m.eps, 1)
	b.RMSNorm(s.k, s.k, l.kNorm, m.eps, 1)
	b.RoPE(s.q, pos, l.attn.Heads, l.rope)
	b.RoPE(s.k, pos, l.attn.KVHeads, l.rope)
	b.Attend(s.a, s.q, s.k, s.v, cache, pos, &l.attn)
	b.GLU(s.a, s.gate, s.a, compute.Sigmoid)
	b.MatMul(s.o, s.a, l.o)
}

// feedForward runs the MLP on h into s.o.
func (m *hybrid) feedForward(f *mlp, s *hybridScratch, h *compute.Tensor) {
	b := m.b
	g, u := s.g, s.u
	b.MatMul(g, h, f.gate)
	b.MatMul(u, h, f.up)
	b.GLU(g, g, u, m.act)
	b.MatMul(s.o, g, f.down)
}

// loadQwen35 loads Qwen3.5's text model: every layer has the SwiGLU MLP.
func loadQwen35(cfg *Config, src Source, b compute.Backend) (Model, error) {
	return loadHybrid(cfg, src, b, nil, nil)
}

// loadQwen3Next loads Qwen3-Next: a mixture of experts on the sparse
// layers (decoder_sparse_step, mlp_only_layers), each with a shared expert
// under a sigmoid gate; the top-k probabilities are renormalised when
// norm_topk_prob says so.
func loadQwen3Next(cfg *Config, src Source, b compute.Backend) (Model, error) {
	spec, err := qwenHybridMoE(cfg, cfg.NormTopKProb)
	if err != nil {
		return nil, err
	}
	return loadHybrid(cfg, src, b, spec, cfg.SparseLayer)
}

// loadQwen35MoE loads Qwen3.5-MoE's text model: the Qwen3-Next block on
// every layer, always renormalising the top-k probabilities.
func loadQwen35MoE(cfg *Config, src Source, b compute.Backend) (Model, error) {
	spec, err := qwenHybridMoE(cfg, true)
	if err != nil {
		return nil, err
	}
	return loadHybrid(cfg, src, b, spec, func(int) bool { return true })
}

// qwenHybridMoE describes the mixture-of-experts block of Qwen3-Next and
// Qwen3.5-MoE: softmax over the experts, the top k kept, and one shared
// expert whose output is scaled by σ(w_g·h).
func qwenHybridMoE(cfg *Config, normalize bool) (*moeSpec, error) {
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	return &moeSpec{
		router: "mlp.gate", experts: "mlp.experts", layout: moePerExpert,
		shared: "mlp.shared_expert", sharedGate: "mlp.shared_expert_gate",
		hidden: cfg.HiddenSize, numExperts: cfg.NumExperts, topK: cfg.NumExpertsPerTok,
		order: compute.SoftmaxTopK, normalize: normalize,
		inter: cfg.MoEIntermediateSize, sharedInter: cfg.SharedExpertIntermediateSize,
		act: act,
	}, nil
}

func loadMLP(l *loader, p string, hid, ff int) *mlp {
	return &mlp{
		gate: l.weight(p+"gate_proj.weight", ff, hid),
		up:   l.weight(p+"up_proj.weight", ff, hid),
		down: l.weight(p+"down_proj.weight", hid, ff),
	}
}

// loadHybrid reads the stack. Layers i for which sparse(i) holds get the
// mixture of experts that moe describes; the others (all, when moe is nil)
// a SwiGLU MLP of intermediate_size.
func loadHybrid(cfg *Config, src Source, b compute.Backend, moe *moeSpec, sparse func(int) bool) (*hybrid, error) {
	conv, ok := b.(compute.Convolver)
	if !ok {
		return nil, fmt.Errorf("%s: backend %s lacks the short causal convolution (compute.Convolver) that linear-attention layers need", cfg.ModelType, b.Name())
	}
	delta, ok := b.(compute.DeltaRuler)
	if !ok {
		return nil, fmt.Errorf("%s: backend %s lacks the gated delta rule (compute.DeltaRuler) that linear-attention layers need", cfg.ModelType, b.Name())
	}
	if err := checkLinear(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	m := &hybrid{cfg: cfg, b: b, conv: conv, delta: delta, act: act, eps: float32(cfg.RMSNormEps)}
	hid, vocab := cfg.HiddenSize, cfg.VocabSize
	l := &loader{src: src, b: b}
	// The multimodal checkpoints keep the text model under language_model.
	root := "model."
	if l.has("model.language_model.embed_tokens.weight") {
		root = "model.language_model."
	}
	m.embed = l.table(root+"embed_tokens.weight", vocab, hid)
	m.norm = l.vector(root+"norm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, root+"embed_tokens.weight", m.embed, vocab, hid)
	var rope *compute.Rope
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("%slayers.%d.", root, i)
		ly := hybridLayer{
			inNorm:   l.vector(p+"input_layernorm.weight", hid),
			postNorm: l.vector(p+"post_attention_layernorm.weight", hid),
		}
		switch t := cfg.LayerType(i); t {
		case "linear_attention":
			ly.linear = loadDeltaNet(cfg, l, p+"linear_attn.")
		case FullAttention:
			if rope == nil {
				if rope, err = NewRope(cfg.Rope(FullAttention), cfg.HeadDim, cfg.MaxPositionEmbeddings); err != nil {
					return nil, fmt.Errorf("%s layer %d: %w", cfg.ModelType, i, err)
				}
			}
			ly.attn = loadGatedAttention(cfg, l, p+"self_attn.", rope)
		default:
			return nil, fmt.Errorf("%s: layer %d has layer type %q; want linear_attention or full_attention", cfg.ModelType, i, t)
		}
		if moe != nil && sparse(i) {
			spec := *moe
			if l.has(p + spec.experts + ".gate_up_proj") {
				spec.layout = moeFused // transformers 5's stacked experts
			}
			ly.moe = l.moe(p, &spec)
		} else {
			ly.mlp = loadMLP(l, p+"mlp.", hid, cfg.IntermediateSize)
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

// loadGatedAttention reads an attention layer. q_proj holds, per head,
// the head's query rows and then its gate rows; they are split apart.
func loadGatedAttention(cfg *Config, l *loader, p string, rope *compute.Rope) *gatedAttention {
	hid, hd := cfg.HiddenSize, cfg.HeadDim
	nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	var q, g []int
	for h := range nh {
		q = appendRange(q, 2*h*hd, 2*h*hd+hd)
		g = appendRange(g, 2*h*hd+hd, 2*(h+1)*hd)
	}
	name := p + "q_proj.weight"
	return &gatedAttention{
		q:     l.rows(name, []int{2 * nh * hd, hid}, q),
		gate:  l.rows(name, []int{2 * nh * hd, hid}, g),
		k:     l.weight(p+"k_proj.weight", nkv*hd, hid),
		v:     l.weight(p+"v_proj.weight", nkv*hd, hid),
		o:     l.weight(p+"o_proj.weight", hid, nh*hd),
		qNorm: l.vector(p+"q_norm.weight", hd),
		kNorm: l.vector(p+"k_norm.weight", hd),
		attn: compute.Attention{
			Heads: nh, KVHeads: nkv, HeadDim: hd,
			Scale: float32(1 / math.Sqrt(float64(hd))),
		},
		rope: rope,
	}
}
