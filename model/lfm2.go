package model

import (
	"fmt"
	"slices"

	"github.com/lem-engine/lem/compute"
)

// LFM2: pre-norm blocks whose mixer is either grouped-query attention
// (per-head RMSNorm on queries and keys, rope) or a gated short
// convolution, each followed by a SwiGLU MLP; layer_types (or
// full_attn_idxs) says which layers attend.
//
//	h = x + Mixer(RMSNorm(x))
//	y = h + w2(silu(w1(RMSNorm(h))) ⊙ w3(RMSNorm(h)))
//
// The short convolution gates its input and its output:
//
//	B, C, x = in_proj(h)
//	out     = out_proj(C ⊙ conv(B ⊙ x))
//
// where conv is a depthwise causal convolution of conv_L_cache taps.
func init() {
	Register(Arch{ModelTypes: []string{"lfm2"}, Load: loadLFM2, GGUF: "lfm2",
		Tensors: &TensorLayout{act: "silu", layer: lfm2GGUFLayer, global: lfm2Global, rules: lfm2Rules},
		Keys:    []ConfigKey{{"conv_L_cache", "shortconv.l_cache"}},
		Meta: ggufMeta{kvZero: true, ffSize: (*Config).FeedForwardSize, otherLayers: []string{"conv"},
			read: ggufLFM2Config, write: lfm2ToGGUF}})
	registerParams(func(c *Config, f *fields) { c.LFM2Params.read(f) }, nil)
}

type lfm2 struct {
	batching
	cfg                 *Config
	b                   compute.Backend
	embed, norm, output *compute.Tensor
	layers              []lfm2Layer
	ff                  int
	eps                 float32
	rec                 [][]int // shapes of a sequence's recurrent tensors
}

type lfm2Layer struct {
	opNorm, ffnNorm *compute.Tensor
	attn            *attention // nil in convolution layers
	conv            *shortConv // nil in attention layers
	mlp             mlp
}

// shortConv is LFM2's gated short convolution.
type shortConv struct {
	inProj, inBias, outProj, outBias *compute.Tensor
	w, bias                          *compute.Tensor // F32 [hidden, K]
	convolver                        compute.Convolver
	rec                              int // index of its window among a sequence's recurrent tensors
}

// lfm2State holds a KV cache per attention layer and a convolution window
// [K-1, hidden] per convolution layer.
type lfm2State struct {
	*recurrentState
	conv []*compute.Tensor
}

func loadLFM2(cfg *Config, src Source, b compute.Backend) (Model, error) {
	hid, vocab := cfg.HiddenSize, cfg.VocabSize
	m := &lfm2{cfg: cfg, b: b, eps: float32(cfg.NormEps()), ff: cfg.FeedForwardSize()}
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	rope, err := fullRope(cfg)
	if err != nil {
		return nil, err
	}
	var conv compute.Convolver
	for i := range cfg.NumHiddenLayers {
		switch t := cfg.LayerType(i); t {
		case FullAttention:
		case "conv":
			if conv == nil {
				var ok bool
				if conv, ok = b.(compute.Convolver); !ok {
					return nil, fmt.Errorf("%s: backend %s cannot run causal convolutions (compute.Convolver)", cfg.ModelType, b.Name())
				}
			}
			if cfg.ConvKernel < 1 {
				return nil, fmt.Errorf("%s: conv_L_cache %d", cfg.ModelType, cfg.ConvKernel)
			}
		default:
			return nil, fmt.Errorf("%s: layer %d has unsupported type %q", cfg.ModelType, i, t)
		}
	}
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", vocab, hid)
	// The reference calls the final norm embedding_norm.
	m.norm = l.vector("model.embedding_norm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", m.embed, vocab, hid)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ly := lfm2Layer{
			opNorm:  l.vector(p+"operator_norm.weight", hid),
			ffnNorm: l.vector(p+"ffn_norm.weight", hid),
			mlp:     loadMLP(l, p+"feed_forward.", "w1", "w3", "w2", hid, m.ff, compute.SiLU),
		}
		if cfg.LayerType(i) == FullAttention {
			ly.attn = loadHybridAttention(l, cfg, i, p+"self_attn.", attnNames{o: "out_proj", qNorm: "q_layernorm", kNorm: "k_layernorm"}, rope)
		} else {
			c := p + "conv."
			ly.conv = &shortConv{
				inProj:    l.weight(c+"in_proj.weight", 3*hid, hid),
				inBias:    l.optionalVector(c+"in_proj.bias", 3*hid),
				outProj:   l.weight(c+"out_proj.weight", hid, hid),
				outBias:   l.optionalVector(c+"out_proj.bias", hid),
				w:         l.reshaped(c+"conv.weight", []int{hid, 1, cfg.ConvKernel}, hid, cfg.ConvKernel),
				bias:      l.optionalVector(c+"conv.bias", hid),
				convolver: conv,
				rec:       len(m.rec),
			}
			m.rec = append(m.rec, []int{cfg.ConvKernel - 1, hid})
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

func (m *lfm2) Config() *Config { return m.cfg }

// NewState implements Model.
func (m *lfm2) NewState(ctx int) State {
	st := &lfm2State{recurrentState: newRecurrentState(m.b, m.stack().attns, ctx)}
	st.allocate(m.rec)
	for _, l := range m.layers {
		var conv *compute.Tensor
		if l.conv != nil {
			conv = st.rec[l.conv.rec]
		}
		st.conv = append(st.conv, conv)
	}
	return st
}

// stack lists the attention blocks and the recurrent tensors.
func (m *lfm2) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i, l := range m.layers {
		attns[i] = l.attn
	}
	return stack{attns: attns, rec: m.rec}
}

// Forward implements Model.
func (m *lfm2) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*lfm2State)
	m.forward(onePass(m.b, st.kvState, st.rec, ids, pos, logits))
	st.advance(ids.Len())
}

// forward runs the stack over the rows of pass p.
func (m *lfm2) forward(p *pass) {
	b, ar := m.b, p.ar
	hid := m.cfg.HiddenSize
	x, h, o := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid)
	b.Embed(x, m.embed, p.ids)
	for i := range m.layers {
		l := &m.layers[i]
		b.RMSNorm(h, x, l.opNorm, m.eps, 0)
		if l.attn != nil {
			l.attn.forward(p, o, h, true)
		} else {
			l.conv.forward(p, o, h)
		}
		b.Add(x, x, o)
		b.RMSNorm(h, x, l.ffnNorm, m.eps, 0)
		l.mlp.forward(b, ar, o, h)
		b.Add(x, x, o)
	}
	outputLogits(p, x, h, m.norm, m.output, m.eps, 0)
}

// forward computes out_proj(C ⊙ conv(B ⊙ x)) for h, continuing from the
// layer's convolution window.
func (c *shortConv) forward(p *pass, out, h *compute.Tensor) {
	b, ar := p.b, p.ar
	hid := h.Cols()
	bcx := ar.get("conv.bcx", 3*hid)
	cb, cc, cx, cy := ar.get("conv.b", hid), ar.get("conv.c", hid), ar.get("conv.x", hid), ar.get("conv.y", hid)
	project(b, bcx, h, c.inProj, c.inBias)
	b.Columns(cb, bcx, 0)
	b.Columns(cc, bcx, hid)
	b.Columns(cx, bcx, 2*hid)
	b.Mul(cb, cb, cx)
	for _, s := range p.seqs {
		c.convolver.CausalConv(p.part(cy, s), p.part(cb, s), c.w, c.bias, s.rec[c.rec], false)
	}
	b.Mul(cy, cc, cy)
	project(b, out, cy, c.outProj, c.outBias)
}

// LFM2 (LFM2Model): layers are short convolutions or attention, told apart
// by attention.head_count_kv, one count per layer with 0 for the
// convolution layers. The convolution's in_proj, out_proj and depthwise
// kernel (squeezed from [hidden, 1, width] to [hidden, width]) are
// shortconv.in_proj, shortconv.out_proj and shortconv.conv, its width
// shortconv.l_cache; operator_norm is attn_norm, feed_forward.w1/w3/w2 are
// ffn_gate/up/down, q_layernorm and k_layernorm attn_q_norm and
// attn_k_norm; the final norm, model.embedding_norm, is token_embd_norm.
// feed_forward_length is the width after block_auto_adjust_ff_dim.

var (
	lfm2Global = map[string]string{
		"model.embed_tokens.weight":   "token_embd.weight",
		"model.embedding_norm.weight": "token_embd_norm.weight",
		"lm_head.weight":              "output.weight",
	}
	lfm2GGUFLayer = map[string]string{
		"operator_norm.weight":         "attn_norm.weight",
		"ffn_norm.weight":              "ffn_norm.weight",
		"feed_forward.w1.weight":       "ffn_gate.weight",
		"feed_forward.w3.weight":       "ffn_up.weight",
		"feed_forward.w2.weight":       "ffn_down.weight",
		"self_attn.out_proj.weight":    "attn_output.weight",
		"self_attn.q_layernorm.weight": "attn_q_norm.weight",
		"self_attn.k_layernorm.weight": "attn_k_norm.weight",
		"conv.conv.weight":             "shortconv.conv.weight",
		"conv.in_proj.weight":          "shortconv.in_proj.weight",
		"conv.out_proj.weight":         "shortconv.out_proj.weight",
	}
)

// lfm2Rules squeezes the convolution kernels.
func lfm2Rules(c *Config) map[string]ggufRule {
	conv := ssmRules(c, "conv.")["conv.conv1d.weight"]
	return map[string]ggufRule{"conv.conv.weight": conv}
}

// ggufLFM2Config marks the convolution layers (those without key/value
// heads) and reads their width.
func ggufLFM2Config(k *ggufKeys, c *Config, g *GGUF) error {
	for i, n := range g.kvPerLayer {
		if n == 0 {
			c.LayerTypes[i] = "conv"
		}
	}
	c.ConvKernel, _ = k.uint("conv_L_cache")
	if slices.Contains(c.LayerTypes, "conv") && c.ConvKernel == 0 {
		return fmt.Errorf("missing key %s.shortconv.l_cache", k.arch)
	}
	return k.err
}

// lfm2ToGGUF writes the width of the convolutions.
func lfm2ToGGUF(l *GGUFLayout, w *ggufWriter) error {
	w.u32("conv_L_cache", l.cfg.ConvKernel)
	return nil
}

// LFM2Params size LFM2's feed-forward layers from intermediate_size: with
// block_auto_adjust_ff_dim, two thirds of it, times
// block_ffn_dim_multiplier (0 when absent: no multiplier), rounded up to a
// multiple of block_multiple_of. Use Config.FeedForwardSize.
type LFM2Params struct {
	FFAutoAdjust    bool
	FFDimMultiplier float64
	FFMultipleOf    int
}

func (p *LFM2Params) read(f *fields) {
	f.boolean("block_auto_adjust_ff_dim", &p.FFAutoAdjust)
	f.float("block_ffn_dim_multiplier", &p.FFDimMultiplier)
	f.size("block_multiple_of", &p.FFMultipleOf)
}

// FeedForwardSize returns the width of LFM2's feed-forward layers (see
// LFM2Params); intermediate_size for other families.
func (c *Config) FeedForwardSize() int {
	ff := c.IntermediateSize
	if !c.FFAutoAdjust {
		return ff
	}
	ff = 2 * ff / 3
	if c.FFDimMultiplier != 0 {
		ff = int(c.FFDimMultiplier * float64(ff))
		if m := c.FFMultipleOf; m > 0 {
			ff = m * ((ff + m - 1) / m)
		}
	}
	return ff
}
