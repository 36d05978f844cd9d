package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// Falcon-H1: every layer runs attention and a Mamba2 mixer side by side on
// the same normalised input and adds both to the residual stream, then a
// SwiGLU MLP. µP multipliers scale the embeddings, each branch's input and
// output, the keys, the MLP's gate and output, the parts of the mixer's
// input projection, and the logits:
//
//	h = RMSNorm(x)
//	x = x + Mixer(h·ssm_in)·ssm_out + Attn(h·attn_in)·attn_out
//	y = x + down(silu(gate(RMSNorm(x))·m_gate) ⊙ up(RMSNorm(x)))·m_down
//
// with embeddings ·embedding_multiplier, keys ·key_multiplier, the mixer's
// in_proj output ⊙ the µP vector (ssm_multipliers over its z, x, B, C and
// dt parts), and logits ·lm_head_multiplier.
func init() {
	Register(Arch{ModelTypes: []string{"falcon_h1"}, Load: loadFalconH1, GGUF: "falcon-h1",
		Tensors: &TensorLayout{act: "silu", layer: falconH1GGUFLayer, global: falconH1Global, rules: falconH1Rules},
		Keys: []ConfigKey{
			{falconH1SSMKeys.conv, "ssm.conv_kernel"},
			{falconH1SSMKeys.inner, "ssm.inner_size"},
			{falconH1SSMKeys.state, "ssm.state_size"},
			{falconH1SSMKeys.heads, "ssm.time_step_rank"},
			{falconH1SSMKeys.groups, "ssm.group_count"},
		},
		Meta:     ggufMeta{read: falconH1FromGGUF, write: falconH1Metadata},
		Defaults: map[string]string{"mamba_rms_norm": "false", "mamba_norm_before_gate": "true"}})
	registerParams(func(c *Config, f *fields) { c.FalconH1Params.read(f) }, nil)
}

type falconH1 struct {
	batching
	cfg                 *Config
	b                   compute.Backend
	embed, norm, output *compute.Tensor
	layers              []falconH1Layer
	embedScale          float32
	logitScale          float32
	attnIn, attnOut     float32
	ssmOut              float32
	eps                 float32
	rec                 [][]int // shapes of a sequence's recurrent tensors
}

type falconH1Layer struct {
	inNorm, ffNorm *compute.Tensor
	attn           *attention
	mixer          ssmMixer
	mlp            mlp
}

// falconH1State holds per layer a KV cache, a convolution window and an
// SSM state.
type falconH1State struct {
	*recurrentState
	conv, ssm []*compute.Tensor
}

// mupVector returns the per-column scale of the mixer's input projection:
// ssm_multipliers over its z, x, B, C and dt parts, times
// ssm_in_multiplier (which scales the projection's input), or nil when
// every entry is 1.
func mupVector(cfg *Config) []float32 {
	p := cfg.SSM
	gn := p.Groups * p.StateSize
	parts := [5]int{p.Inner, p.Inner, gn, gn, p.Heads}
	var v []float32
	ones := true
	for i, n := range parts {
		s := float32(cfg.SSMMultipliers[i] * cfg.SSMInMultiplier)
		ones = ones && s == 1
		for range n {
			v = append(v, s)
		}
	}
	if ones {
		return nil
	}
	return v
}

func loadFalconH1(cfg *Config, src Source, b compute.Backend) (Model, error) {
	if err := checkSSM(cfg); err != nil {
		return nil, err
	}
	if cfg.HiddenAct != "silu" && cfg.HiddenAct != "swish" {
		return nil, fmt.Errorf("falcon_h1: hidden_act %q: only silu is supported", cfg.HiddenAct)
	}
	conv, scan, err := ssmCapabilities(b, cfg.ModelType)
	if err != nil {
		return nil, err
	}
	rope, err := fullRope(cfg)
	if err != nil {
		return nil, err
	}
	hid, vocab, ff := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	eps := cfg.NormEps()
	m := &falconH1{
		cfg: cfg, b: b, eps: float32(eps),
		embedScale: float32(cfg.EmbeddingMultiplier), logitScale: float32(cfg.LMHeadMultiplier),
		attnIn: float32(cfg.AttentionInMultiplier), attnOut: float32(cfg.AttentionOutMultiplier),
		ssmOut: float32(cfg.SSMOutMultiplier),
	}
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", vocab, hid)
	m.norm = l.vector("model.final_layernorm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", m.embed, vocab, hid)
	mup := mupVector(cfg)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		ly := falconH1Layer{
			inNorm: l.vector(p+"input_layernorm.weight", hid),
			ffNorm: l.vector(p+"pre_ff_layernorm.weight", hid),
			attn:   loadHybridAttention(l, cfg, i, p+"self_attn.", attnNames{o: "o_proj"}, rope),
			mlp:    loadMLP(l, p+"feed_forward.", "gate_proj", "up_proj", "down_proj", hid, ff, compute.SiLU),
			mixer: loadSSMMixer(l, ssmSpec{
				prefix: p + "mamba.", hidden: hid, p: cfg.SSM, convKernel: cfg.ConvKernel,
				eps: eps, norm: cfg.SSM.RMSNorm, normBeforeGate: cfg.SSM.NormBeforeGate,
				normGroups: cfg.SSM.Groups, inScale: mup,
			}),
		}
		ly.attn.keyScale = float32(cfg.KeyMultiplier)
		ly.mlp.gateScale = float32(cfg.MLPMultipliers[0])
		ly.mlp.downScale = float32(cfg.MLPMultipliers[1])
		ly.mixer.convolver, ly.mixer.scanner = conv, scan
		m.rec = ly.mixer.addState(m.rec, cfg.ConvKernel)
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

func (m *falconH1) Config() *Config { return m.cfg }

// NewState implements Model.
func (m *falconH1) NewState(ctx int) State {
	st := &falconH1State{recurrentState: newRecurrentState(m.b, m.stack().attns, ctx)}
	st.allocate(m.rec)
	for _, l := range m.layers {
		st.conv = append(st.conv, st.rec[l.mixer.rec])
		st.ssm = append(st.ssm, st.rec[l.mixer.rec+1])
	}
	return st
}

// stack lists the attention blocks and the recurrent tensors.
func (m *falconH1) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i, l := range m.layers {
		attns[i] = l.attn
	}
	return stack{attns: attns, rec: m.rec}
}

// Forward implements Model.
func (m *falconH1) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*falconH1State)
	m.forward(onePass(m.b, st.kvState, st.rec, ids, pos, logits))
	st.advance(ids.Len())
}

// forward runs the stack over the rows of pass p.
func (m *falconH1) forward(p *pass) {
	b, ar := m.b, p.ar
	hid := m.cfg.HiddenSize
	x, h, o, mo := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid), ar.get("m", hid)
	b.Embed(x, m.embed, p.ids)
	if m.embedScale != 1 {
		b.Scale(x, x, m.embedScale)
	}
	for i := range m.layers {
		l := &m.layers[i]
		b.RMSNorm(h, x, l.inNorm, m.eps, 0)
		// The SSM branch (ssm_in_multiplier is part of the mixer's µP vector).
		l.mixer.forward(p, mo, h)
		scaledAdd(b, x, mo, m.ssmOut)
		// The attention branch.
		ha := h
		if m.attnIn != 1 {
			ha = ar.get("ha", hid)
			b.Scale(ha, h, m.attnIn)
		}
		l.attn.forward(p, o, ha, true)
		scaledAdd(b, x, o, m.attnOut)
		// The MLP.
		b.RMSNorm(h, x, l.ffNorm, m.eps, 0)
		l.mlp.forward(b, ar, o, h)
		b.Add(x, x, o)
	}
	outputLogits(p, x, h, m.norm, m.output, m.eps, 0)
	if p.logits != nil && m.logitScale != 1 {
		b.Scale(p.logits, p.logits, m.logitScale)
	}
}

// scaledAdd computes x += y·s.
func scaledAdd(b compute.Backend, x, y *compute.Tensor, s float32) {
	if s != 1 {
		b.Scale(y, y, s)
	}
	b.Add(x, x, y)
}

// Falcon-H1 (FalconH1Model, a Mamba2Model with attention): every layer runs
// attention and the SSM mixer side by side on attn_norm (input_layernorm),
// then the MLP on ffn_norm (pre_ff_layernorm). The converter folds the µP
// multipliers into the weights — embedding_multiplier into token_embd,
// lm_head_multiplier into output, attention_in_multiplier into attn_q, attn_k
// and attn_v (key_multiplier too into attn_k), attention_out_multiplier
// into attn_output, mlp_multipliers into ffn_gate and ffn_down,
// ssm_out_multiplier into ssm_out, and ssm_in_multiplier times the
// ssm_multipliers of the z, x, B, C and dt rows into ssm_in — and
// llama.cpp's graph applies none, so a file is read with every multiplier 1.
// Keys: the mamba2 ones, with feed_forward_length, attention.head_count(_kv),
// key_length and value_length of the attention half.

var (
	falconH1Global = map[string]string{
		"model.embed_tokens.weight":    "token_embd.weight",
		"model.final_layernorm.weight": "output_norm.weight",
		"lm_head.weight":               "output.weight",
	}
	falconH1GGUFLayer = map[string]string{
		"input_layernorm.weight":        "attn_norm.weight",
		"pre_ff_layernorm.weight":       "ffn_norm.weight",
		"feed_forward.gate_proj.weight": "ffn_gate.weight",
		"feed_forward.up_proj.weight":   "ffn_up.weight",
		"feed_forward.down_proj.weight": "ffn_down.weight",
		"mamba.in_proj.weight":          "ssm_in.weight",
		"mamba.conv1d.weight":           "ssm_conv1d.weight",
		"mamba.conv1d.bias":             "ssm_conv1d.bias",
		"mamba.dt_bias":                 "ssm_dt.bias",
		"mamba.A_log":                   "ssm_a",
		"mamba.D":                       "ssm_d",
		"mamba.norm.weight":             "ssm_norm.weight",
		"mamba.out_proj.weight":         "ssm_out.weight",
	}
)

// falconH1Rules are the SSM rules plus the folded multipliers.
func falconH1Rules(c *Config) map[string]ggufRule {
	rules := ssmRules(c, "mamba.")
	scale := func(name string, f float64) {
		if f == 1 || f == 0 {
			return
		}
		r := rules[name]
		s := float32(f)
		r.encode = func(row []float32, _ int) {
			for i := range row {
				row[i] *= s
			}
		}
		rules[name] = r
	}
	scale("model.embed_tokens.weight", c.EmbeddingMultiplier)
	scale("lm_head.weight", c.LMHeadMultiplier)
	scale("self_attn.q_proj.weight", c.AttentionInMultiplier)
	scale("self_attn.k_proj.weight", c.AttentionInMultiplier*c.KeyMultiplier)
	scale("self_attn.v_proj.weight", c.AttentionInMultiplier)
	scale("self_attn.o_proj.weight", c.AttentionOutMultiplier)
	scale("feed_forward.gate_proj.weight", c.MLPMultipliers[0])
	scale("feed_forward.down_proj.weight", c.MLPMultipliers[1])
	scale("mamba.out_proj.weight", c.SSMOutMultiplier)
	if mup := mupVector(c); mup != nil {
		r := rules["mamba.in_proj.weight"]
		r.encode = func(row []float32, i int) {
			s := mup[min(i, len(mup)-1)]
			for j := range row {
				row[j] *= s
			}
		}
		rules["mamba.in_proj.weight"] = r
	}
	return rules
}

// falconH1SSMKeys are Falcon-H1's names of the SSM keys.
var falconH1SSMKeys = ssmKeys{conv: "mamba_d_conv", inner: "mamba_d_ssm", state: "mamba_d_state", heads: "mamba_n_heads", groups: "mamba_n_groups"}

// falconH1FromGGUF reads the SSM keys of a falcon-h1 file.
func falconH1FromGGUF(k *ggufKeys, c *Config, g *GGUF) error {
	if err := ggufSSMConfig(c, k, falconH1SSMKeys); err != nil {
		return err
	}
	// The converter folds every µP multiplier into the weights.
	c.AttentionInMultiplier, c.AttentionOutMultiplier = 1, 1
	c.SSMInMultiplier, c.SSMOutMultiplier = 1, 1
	c.KeyMultiplier, c.LMHeadMultiplier = 1, 1
	c.MLPMultipliers = [2]float64{1, 1}
	c.SSMMultipliers = [5]float64{1, 1, 1, 1, 1}
	c.SSM.RMSNorm = g.hasLayerTensor("mamba.norm.weight")
	return k.err
}

// falconH1Metadata writes the SSM keys of a falcon-h1 file after checking
// that the weights can carry the multipliers.
func falconH1Metadata(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	if c.SSM.RMSNorm && c.SSM.NormBeforeGate {
		return fmt.Errorf("%s: mamba_norm_before_gate: llama.cpp normalises the SSM output after the gate", c.ModelType)
	}
	if c.AttentionBias || c.MLPBias {
		return fmt.Errorf("%s: biases cannot carry the µP multipliers that llama.cpp folds into the weights", c.ModelType)
	}
	if c.TieWordEmbeddings && c.EmbeddingMultiplier != c.LMHeadMultiplier {
		return fmt.Errorf("%s: tied embeddings with embedding_multiplier %g ≠ lm_head_multiplier %g cannot carry both folded", c.ModelType, c.EmbeddingMultiplier, c.LMHeadMultiplier)
	}
	return l.ssmMetadata(w, falconH1SSMKeys)
}

// FalconH1Params are Falcon-H1's µP multipliers, each 1 when absent: on
// the attention input and output, the SSM input and output, the keys and
// the logits; MLPMultipliers on the gate projection and the MLP output;
// SSMMultipliers on the z, x, B, C and dt parts of the SSM input
// projection (mlp_multipliers, ssm_multipliers).
type FalconH1Params struct {
	AttentionInMultiplier, AttentionOutMultiplier float64
	SSMInMultiplier, SSMOutMultiplier             float64
	KeyMultiplier, LMHeadMultiplier               float64
	MLPMultipliers                                [2]float64
	SSMMultipliers                                [5]float64
}

func (p *FalconH1Params) read(f *fields) {
	for _, m := range []struct {
		key string
		dst *float64
	}{
		{"attention_in_multiplier", &p.AttentionInMultiplier},
		{"attention_out_multiplier", &p.AttentionOutMultiplier},
		{"ssm_in_multiplier", &p.SSMInMultiplier},
		{"ssm_out_multiplier", &p.SSMOutMultiplier},
		{"key_multiplier", &p.KeyMultiplier},
		{"lm_head_multiplier", &p.LMHeadMultiplier},
	} {
		*m.dst = 1
		f.float(m.key, m.dst)
	}
	p.MLPMultipliers = [2]float64{1, 1}
	p.SSMMultipliers = [5]float64{1, 1, 1, 1, 1}
	for _, m := range []struct {
		key string
		dst []float64
	}{
		{"mlp_multipliers", p.MLPMultipliers[:]},
		{"ssm_multipliers", p.SSMMultipliers[:]},
	} {
		var v []float64
		if f.floats(m.key, &v) {
			if len(v) != len(m.dst) {
				f.fail(m.key, fmt.Sprintf("a list of %d numbers", len(m.dst)), f.raw[m.key])
				continue
			}
			copy(m.dst, v)
		}
	}
}
