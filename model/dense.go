package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// dense is the decoder-only transformer that the dense families share:
// token embedding, a stack of attention + gated MLP blocks with residual
// connections, a final norm and the output projection. Family files decide
// which norms exist, how tensors are named, and the scalar knobs.
type dense struct {
	batching
	cfg *Config
	b   compute.Backend

	embed, final, output *compute.Tensor
	layers               []denseLayer

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

	attention
	mlp mlp
	moe *moeBlock // set instead of the MLP on sparse layers
}

func (m *dense) Config() *Config { return m.cfg }

// NewState allocates KV caches: full-attention layers hold ctx positions,
// sliding-window layers a ring of exactly their window.
func (m *dense) NewState(ctx int) State {
	return newKVState(m.b, m.stack().attns, ctx)
}

// stack lists the attention blocks.
func (m *dense) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i := range m.layers {
		attns[i] = &m.layers[i].attention
	}
	return stack{attns: attns}
}

// Forward implements Model.
func (m *dense) Forward(state State, ids, pos, logits *compute.Tensor) {
	m.forward(onePass(m.b, state.(*kvState), nil, ids, pos, logits))
}

// forward runs the stack over the rows of pass p.
func (m *dense) forward(p *pass) {
	b, ar := m.b, p.ar
	n := p.rows()
	hid := m.cfg.HiddenSize
	x, h, o := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid)
	b.Embed(x, m.embed, p.ids)
	if m.embedScale != 1 {
		b.Scale(x, x, m.embedScale)
	}
	for i := range m.layers {
		l := &m.layers[i]
		// x += PostNorm(Attn(InNorm(x)))
		m.norm(h, x, l.inNorm)
		l.attention.forward(p, o, m.in(h, x, l.inNorm), true)
		m.residual(x, o, l.postAttnNorm)
		// x += PostNorm(MLP(PreNorm(x)))
		m.norm(h, x, l.preFFNorm)
		in := m.in(h, x, l.preFFNorm)
		if l.moe != nil {
			l.moe.forward(o, in, in, ar.moeFor(l.moe))
		} else {
			l.mlp.forward(b, ar, o, in)
		}
		m.residual(x, o, l.postFFNorm)
	}
	p.writeHidden(x, m.final, m.eps, m.normOffset)
	logits := p.logits
	if logits == nil {
		return
	}
	out := p.out(x)
	if out.Rows() != n {
		h = ar.rows("last", out.Rows(), hid)
	}
	b.RMSNorm(h, out, m.final, m.eps, m.normOffset)
	b.MatMul(logits, h, m.output)
	if m.logitScale != 1 {
		b.Scale(logits, logits, m.logitScale)
	}
	if m.finalSoftCap > 0 {
		b.SoftCap(logits, logits, m.finalSoftCap)
	}
}

// norm computes h = RMSNorm(x) when the family has the norm w.
func (m *dense) norm(h, x, w *compute.Tensor) {
	if w != nil {
		m.b.RMSNorm(h, x, w, m.eps, m.normOffset)
	}
}

// in returns a block's input: the normalised rows h, or x itself in
// families without the norm w.
func (m *dense) in(h, x, w *compute.Tensor) *compute.Tensor {
	if w != nil {
		return h
	}
	return x
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
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	hid, vocab, ff := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", vocab, hid)
	m.final = l.vector("model.norm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", m.embed, vocab, hid)
	ropes := map[string]*compute.Rope{}
	var first *moeBlock // the first sparse layer's block
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		hd := cfg.HeadDimFor(i)
		nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
		layerType := cfg.LayerType(i)
		key := fmt.Sprintf("%s/%d", layerType, hd)
		if ropes[key] == nil {
			r, err := NewRope(cfg.Rope(layerType), hd, cfg.MaxPositionEmbeddings)
			if err != nil {
				return nil, fmt.Errorf("%s layer %d: %w", cfg.ModelType, i, err)
			}
			ropes[key] = r
		}
		ly := denseLayer{attention: newAttention(i, nh, nkv, hd, m.eps, ropes[key])}
		if layerType == "sliding_attention" {
			ly.attn.Window = cfg.SlidingWindow
		}
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
		ly.attention.load(l, p+"self_attn.", hid, attnNames{o: "o_proj", biases: true, fused: true})
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
			ly.mlp = mlp{
				gateUp: l.weight(f+"gate_up_proj.weight", 2*ff, hid),
				down:   l.weight(f+"down_proj.weight", hid, ff),
				act:    act, gateScale: 1, downScale: 1,
			}
		} else {
			ly.mlp = loadMLP(l, f, "gate_proj", "up_proj", "down_proj", hid, ff, act)
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}
