package model

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// Mamba2: a stack of selective state-space mixers with pre-norm residual
// connections, no attention and no MLP.
//
//	y = x + Mixer(RMSNorm(x))
//
// The mixer (shared with Falcon-H1) projects its input into a gate z, the
// convolution input xBC and a time step dt per head; xBC goes through a
// short causal convolution and SiLU and splits into the scan input x and
// its input and output projections B and C; the scan folds every position
// into a per-head state of head_dim × state_size values:
//
//	z, xBC, dt = in_proj(h)
//	x, B, C    = split(silu(conv1d(xBC)))
//	Δ_t        = clamp(softplus(dt_t + dt_bias), time_step_limit)
//	s_t        = exp(Δ_t·A)·s_{t-1} + Δ_t·x_t ⊗ B_t,   A = -exp(A_log)
//	y_t        = s_t·C_t + D·x_t
//	out        = out_proj(RMSNorm(y ⊙ silu(z)))
//
// Falcon-H1 may normalise before the gate, or not at all.
func init() {
	Register(Arch{ModelTypes: []string{"mamba2"}, Load: loadMamba2, GGUF: "mamba2",
		Tensors: &TensorLayout{act: "silu", layer: mamba2GGUFLayer, global: mamba2Global, prefix: "backbone.layers.",
			rules: func(c *Config) map[string]ggufRule { return ssmRules(c, "mixer.") }},
		Keys: []ConfigKey{
			{mamba2SSMKeys.conv, "ssm.conv_kernel"},
			{mamba2SSMKeys.state, "ssm.state_size"},
			{mamba2SSMKeys.heads, "ssm.time_step_rank"},
			{mamba2SSMKeys.groups, "ssm.group_count"},
		},
		Meta: ggufMeta{readAll: true, writeAll: true, read: ggufMamba2Config, write: mamba2Metadata}})
	registerParams(func(c *Config, f *fields) { c.SSM.read(f, c.HiddenSize) }, nil)
}

// ssmMixer is one Mamba2 mixer.
type ssmMixer struct {
	inProj, inBias   *compute.Tensor
	outProj, outBias *compute.Tensor
	// inScale multiplies the input projection column by column (Falcon-H1's
	// µP vector times ssm_in_multiplier); nil when it is all ones.
	inScale        *compute.Tensor
	conv, convBias *compute.Tensor // F32 [convDim, K]
	// norm is the gated RMSNorm's weight (nil: the output is only gated);
	// normGroup the number of channels normalised together, with ones of
	// that length when it is less than the whole width.
	norm, ones     *compute.Tensor
	normGroup      int
	normBeforeGate bool
	eps            float32

	ssm            compute.SSM
	inner, convDim int
	convolver      compute.Convolver
	scanner        compute.SSMScanner
	// rec is the index of the mixer's recurrent tensors in a sequence's
	// list: the convolution window, then the SSM state.
	rec int
}

// addState appends the shapes of the mixer's recurrent tensors, a window
// of the convolution's kernel-1 inputs and the SSM state, to shapes, and
// records where they are.
func (m *ssmMixer) addState(shapes [][]int, kernel int) [][]int {
	m.rec = len(shapes)
	return append(shapes, []int{kernel - 1, m.convDim}, []int{m.ssm.Heads, m.ssm.HeadDim * m.ssm.StateSize})
}

// ssmSpec is what a family's config says about its mixers.
type ssmSpec struct {
	prefix         string // tensor name prefix up to the mixer, e.g. "backbone.layers.0.mixer."
	hidden         int
	p              SSMParams
	convKernel     int
	eps            float64
	norm           bool // gated RMSNorm on the output
	normBeforeGate bool
	normGroups     int       // groups of the gated RMSNorm
	inScale        []float32 // nil: no scaling of the input projection
}

// ssmCapabilities returns the optional backend interfaces a mixer
// needs, or an error naming the one b lacks.
func ssmCapabilities(b compute.Backend, modelType string) (compute.Convolver, compute.SSMScanner, error) {
	conv, ok := b.(compute.Convolver)
	if !ok {
		return nil, nil, fmt.Errorf("%s: backend %s cannot run causal convolutions (compute.Convolver)", modelType, b.Name())
	}
	scan, ok := b.(compute.SSMScanner)
	if !ok {
		return nil, nil, fmt.Errorf("%s: backend %s cannot run selective state-space scans (compute.SSMScanner)", modelType, b.Name())
	}
	return conv, scan, nil
}

// checkSSM validates the geometry of a family's SSM layers.
func checkSSM(cfg *Config) error {
	p := cfg.SSM
	switch {
	case p.Heads <= 0 || p.HeadDim <= 0 || p.StateSize <= 0:
		return fmt.Errorf("%s: SSM heads %d × %d with state size %d: want positive sizes", cfg.ModelType, p.Heads, p.HeadDim, p.StateSize)
	case p.Heads*p.HeadDim != p.Inner:
		return fmt.Errorf("%s: SSM heads %d × head dim %d ≠ %d inner channels", cfg.ModelType, p.Heads, p.HeadDim, p.Inner)
	case p.Heads%p.Groups != 0:
		return fmt.Errorf("%s: %d SSM heads are not a multiple of %d groups", cfg.ModelType, p.Heads, p.Groups)
	case cfg.ConvKernel < 1:
		return fmt.Errorf("%s: convolution width %d", cfg.ModelType, cfg.ConvKernel)
	}
	return nil
}

// loadSSMMixer reads one mixer's tensors.
func loadSSMMixer(l *loader, s ssmSpec) ssmMixer {
	p := s.p
	gn := p.Groups * p.StateSize
	convDim := p.Inner + 2*gn
	proj := p.Inner + convDim + p.Heads
	m := ssmMixer{
		inner: p.Inner, convDim: convDim, eps: float32(s.eps),
		normBeforeGate: s.normBeforeGate,
		ssm: compute.SSM{
			Heads: p.Heads, HeadDim: p.HeadDim, Groups: p.Groups, StateSize: p.StateSize,
			DTMin: float32(p.TimeStepMin), DTMax: float32(p.TimeStepMax),
		},
	}
	m.inProj = l.weight(s.prefix+"in_proj.weight", proj, s.hidden)
	m.inBias = l.optionalVector(s.prefix+"in_proj.bias", proj)
	m.outProj = l.weight(s.prefix+"out_proj.weight", s.hidden, p.Inner)
	m.outBias = l.optionalVector(s.prefix+"out_proj.bias", s.hidden)
	m.conv = l.reshaped(s.prefix+"conv1d.weight", []int{convDim, 1, s.convKernel}, convDim, s.convKernel)
	m.convBias = l.optionalVector(s.prefix+"conv1d.bias", convDim)
	m.ssm.DTBias = l.vector(s.prefix+"dt_bias", p.Heads)
	m.ssm.D = l.vector(s.prefix+"D", p.Heads)
	if aLog := l.vector(s.prefix+"A_log", p.Heads); aLog != nil {
		// A = -exp(A_log), computed once.
		v := make([]float32, p.Heads)
		l.b.Read(v, aLog)
		for i, a := range v {
			v[i] = -float32(math.Exp(float64(a)))
		}
		l.b.Upload(aLog, v)
		m.ssm.A = aLog
	}
	if s.norm {
		m.norm = l.vector(s.prefix+"norm.weight", p.Inner)
		m.normGroup = p.Inner / s.normGroups
		if m.normGroup != p.Inner {
			m.ones = l.b.Alloc(compute.F32, m.normGroup)
			ones := make([]float32, m.normGroup)
			for i := range ones {
				ones[i] = 1
			}
			l.b.Upload(m.ones, ones)
		}
	}
	if s.inScale != nil {
		m.inScale = l.b.Alloc(compute.F32, proj)
		l.b.Upload(m.inScale, s.inScale)
	}
	return m
}

// forward runs the mixer on h [n, hidden], continuing from the layer's
// convolution window and SSM state, and writes its output to out.
func (m *ssmMixer) forward(p *pass, out, h *compute.Tensor) {
	b, ar := p.b, p.ar
	gn := m.ssm.Groups * m.ssm.StateSize
	proj := ar.get("ssm.proj", m.inner+m.convDim+m.ssm.Heads)
	z, xbc, conv := ar.get("ssm.z", m.inner), ar.get("ssm.xbc", m.convDim), ar.get("ssm.conv", m.convDim)
	x, bb, c := ar.get("ssm.x", m.inner), ar.get("ssm.b", gn), ar.get("ssm.c", gn)
	dt, y := ar.get("ssm.dt", m.ssm.Heads), ar.get("ssm.y", m.inner)
	project(b, proj, h, m.inProj, m.inBias)
	if m.inScale != nil {
		b.Mul(proj, proj, m.inScale)
	}
	b.Columns(z, proj, 0)
	b.Columns(xbc, proj, m.inner)
	b.Columns(dt, proj, m.inner+m.convDim)

	for _, s := range p.seqs {
		m.convolver.CausalConv(p.part(conv, s), p.part(xbc, s), m.conv, m.convBias, s.rec[m.rec], true)
	}
	b.Columns(x, conv, 0)
	b.Columns(bb, conv, m.inner)
	b.Columns(c, conv, m.inner+gn)

	for _, s := range p.seqs {
		m.scanner.SSMScan(p.part(y, s), p.part(x, s), p.part(dt, s), p.part(bb, s), p.part(c, s), s.rec[m.rec+1], &m.ssm)
	}

	switch {
	case m.norm == nil:
		b.GLU(y, z, y, compute.SiLU)
	case m.normBeforeGate:
		m.gatedNorm(b, y)
		b.GLU(y, z, y, compute.SiLU)
	default:
		b.GLU(y, z, y, compute.SiLU)
		m.gatedNorm(b, y)
	}
	project(b, out, y, m.outProj, m.outBias)
}

// gatedNorm is the RMSNorm of the gated output, over groups of normGroup
// channels.
func (m *ssmMixer) gatedNorm(b compute.Backend, y *compute.Tensor) {
	if m.ones == nil {
		b.RMSNorm(y, y, m.norm, m.eps, 0)
		return
	}
	b.RMSNorm(y, y, m.ones, m.eps, 0)
	b.Mul(y, y, m.norm)
}

// mamba2 is a Mamba2 language model.
type mamba2 struct {
	batching
	cfg                 *Config
	b                   compute.Backend
	embed, norm, output *compute.Tensor
	layers              []mamba2Layer
	eps                 float32
	rec                 [][]int // shapes of a sequence's recurrent tensors
}

type mamba2Layer struct {
	norm  *compute.Tensor
	mixer ssmMixer
}

// mamba2State holds, per layer, the convolution window [K-1, convDim] and
// the SSM state [heads, head_dim × state_size].
type mamba2State struct {
	*recurrentState
	conv, ssm []*compute.Tensor
}

func loadMamba2(cfg *Config, src Source, b compute.Backend) (Model, error) {
	if err := checkSSM(cfg); err != nil {
		return nil, err
	}
	if cfg.HiddenAct != "silu" && cfg.HiddenAct != "swish" {
		return nil, fmt.Errorf("mamba2: hidden_act %q: only silu is supported", cfg.HiddenAct)
	}
	conv, scan, err := ssmCapabilities(b, cfg.ModelType)
	if err != nil {
		return nil, err
	}
	eps := cfg.NormEps()
	m := &mamba2{cfg: cfg, b: b, eps: float32(eps)}
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	hid, vocab := cfg.HiddenSize, cfg.VocabSize
	l := &loader{src: src, b: b}
	m.embed = l.table("backbone.embeddings.weight", vocab, hid)
	m.norm = l.vector("backbone.norm_f.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "backbone.embeddings.weight", m.embed, vocab, hid)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("backbone.layers.%d.", i)
		ly := mamba2Layer{norm: l.vector(p+"norm.weight", hid)}
		// The reference gates before normalising, over the whole width.
		ly.mixer = loadSSMMixer(l, ssmSpec{
			prefix: p + "mixer.", hidden: hid, p: cfg.SSM, convKernel: cfg.ConvKernel,
			eps: eps, norm: true, normGroups: 1,
		})
		ly.mixer.convolver, ly.mixer.scanner = conv, scan
		m.rec = ly.mixer.addState(m.rec, cfg.ConvKernel)
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

func (m *mamba2) Config() *Config { return m.cfg }

// stack lists the recurrent tensors: mamba2 has no attention.
func (m *mamba2) stack() stack { return stack{rec: m.rec} }

// NewState implements Model.
func (m *mamba2) NewState(ctx int) State {
	st := &mamba2State{recurrentState: newRecurrentState(m.b, nil, ctx)}
	st.allocate(m.rec)
	for _, l := range m.layers {
		st.conv = append(st.conv, st.rec[l.mixer.rec])
		st.ssm = append(st.ssm, st.rec[l.mixer.rec+1])
	}
	return st
}

// Forward implements Model.
func (m *mamba2) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*mamba2State)
	m.forward(onePass(m.b, st.kvState, st.rec, ids, pos, logits))
	st.advance(ids.Len())
}

// forward runs the stack over the rows of pass p.
func (m *mamba2) forward(p *pass) {
	b, ar := m.b, p.ar
	hid := m.cfg.HiddenSize
	x, h, o := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid)
	b.Embed(x, m.embed, p.ids)
	for i := range m.layers {
		l := &m.layers[i]
		b.RMSNorm(h, x, l.norm, m.eps, 0)
		l.mixer.forward(p, o, h)
		b.Add(x, x, o)
	}
	outputLogits(p, x, h, m.norm, m.output, m.eps, 0)
}

// outputLogits applies the final norm and the output projection to the
// rows of x whose logits pass p writes (see pass.out). h is scratch of x's
// shape.
func outputLogits(p *pass, x, h, norm, output *compute.Tensor, eps, normOffset float32) {
	p.writeHidden(x, norm, eps, normOffset)
	if p.logits == nil {
		return // a prefill chunk before the last, or hidden states only
	}
	b := p.b
	if out := p.out(x); out != x {
		x, h = out, p.ar.rows("last", out.Rows(), x.Cols())
	}
	b.RMSNorm(h, x, norm, eps, normOffset)
	b.MatMul(p.logits, h, output)
}

// GGUF layouts of the state-space families, as llama.cpp's
// convert_hf_to_gguf.py (Mamba2Model, FalconH1Model) writes them and
// src/models/{mamba2,falcon-h1}.cpp read them.
//
// The SSM mixer's tensors are blk.N.ssm_in (in_proj), ssm_conv1d (the
// depthwise convolution, squeezed from [channels, 1, width] to [channels,
// width], and its bias), ssm_dt.bias (dt_bias), ssm_a, ssm_d, ssm_norm and
// ssm_out (out_proj). The converter stores A rather than A_log: ssm_a =
// −exp(A_log), as a [heads, 1] matrix ({1, heads} in GGUF order) and
// without a ".weight" suffix, like ssm_d (D as [heads, 1]); the gated norm's
// weight is reshaped to [groups, inner/groups]. Keys: <arch>.ssm.conv_kernel,
// .ssm.inner_size, .ssm.state_size, .ssm.time_step_rank (the number of SSM
// heads), .ssm.group_count. The files carry no time-step limit: they are
// read with the reference default [0, ∞).
//
// mamba2 names its tensors from the backbone.* checkpoint (embeddings →
// token_embd, norm_f → output_norm, layers.N.norm → attn_norm) and writes
// feed_forward_length and attention.head_count as 0.

var (
	mamba2Global = map[string]string{
		"backbone.embeddings.weight": "token_embd.weight",
		"backbone.norm_f.weight":     "output_norm.weight",
		"lm_head.weight":             "output.weight",
	}
	mamba2GGUFLayer = map[string]string{
		"norm.weight":           "attn_norm.weight",
		"mixer.in_proj.weight":  "ssm_in.weight",
		"mixer.conv1d.weight":   "ssm_conv1d.weight",
		"mixer.conv1d.bias":     "ssm_conv1d.bias",
		"mixer.dt_bias":         "ssm_dt.bias",
		"mixer.A_log":           "ssm_a",
		"mixer.D":               "ssm_d",
		"mixer.norm.weight":     "ssm_norm.weight",
		"mixer.out_proj.weight": "ssm_out.weight",
	}
)

// mamba2SSMKeys are Mamba2's names of the SSM keys; its config has no
// key for the inner size (expand × hidden_size), which is stored as it is.
var mamba2SSMKeys = ssmKeys{conv: "conv_kernel", inner: "ssm.inner_size", state: "state_size", heads: "num_heads", groups: "n_groups"}

// ggufMamba2Config reads the keys of a mamba2 file, which has no
// attention.
func ggufMamba2Config(k *ggufKeys, c *Config, _ *GGUF) error {
	c.NumHiddenLayers = k.need("num_hidden_layers")
	c.HiddenSize = k.need("hidden_size")
	c.MaxPositionEmbeddings, _ = k.uint("max_position_embeddings")
	c.RMSNormEps = 1e-5
	k.eps("rms_norm_eps", &c.RMSNormEps)
	if err := ggufSSMConfig(c, k, mamba2SSMKeys); err != nil {
		return err
	}
	if k.err != nil {
		return k.err
	}
	if c.NumHiddenLayers > MaxLayers {
		return fmt.Errorf("key %s.block_count: %d layers is more than the %d supported", k.arch, c.NumHiddenLayers, MaxLayers)
	}
	return nil
}

// mamba2Metadata writes the keys of a mamba2 file.
func mamba2Metadata(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	if !c.SSM.RMSNorm || c.SSM.NormBeforeGate {
		return fmt.Errorf("%s: llama.cpp's mamba2 normalises the gated output (mamba_rms_norm true, norm_before_gate false)", c.ModelType)
	}
	// The converter's context length: mamba2 has no position limit.
	w.u32("max_position_embeddings", 1<<20)
	w.u32("hidden_size", c.HiddenSize)
	w.u32("intermediate_size", 0)
	w.u32("num_attention_heads", 0)
	w.u32("num_hidden_layers", c.NumHiddenLayers)
	w.f32("rms_norm_eps", c.NormEps())
	w.u32("vocab_size", c.VocabSize)
	return l.ssmMetadata(w, mamba2SSMKeys)
}

// SSMParams describe the selective state-space (Mamba2) layers of a
// model. Falcon-H1 spells their keys with a mamba_ prefix (mamba_n_heads,
// mamba_d_head, mamba_d_state, mamba_n_groups, mamba_d_ssm, mamba_expand,
// mamba_chunk_size); a Mamba2 config, which has none of those, uses the
// plain keys (num_heads, head_dim, state_size or ssm_state_size, n_groups,
// expand, chunk_size).
type SSMParams struct {
	Heads, HeadDim, StateSize int
	Groups                    int // groups sharing B and C; 1 when absent
	// Inner is the number of channels the scan runs on: mamba_d_ssm, or
	// else expand × hidden_size.
	Inner     int
	ChunkSize int // block length of the reference's chunked scan
	// TimeStepMin and TimeStepMax clamp the time step after its softplus
	// (time_step_limit, whose bounds may be written {"__float__":
	// "Infinity"}); 0 and +Inf when absent.
	TimeStepMin, TimeStepMax float64
	// RMSNorm applies the gated RMSNorm to the scan's output
	// (mamba_rms_norm; true when absent, except for Falcon-H1, whose
	// default is false); NormBeforeGate normalises before multiplying by
	// silu(z) rather than after (mamba_norm_before_gate; false when
	// absent, except for Falcon-H1).
	RMSNorm, NormBeforeGate bool
}

// read reads the state-space keys, in Falcon-H1's spelling or Mamba2's.
func (s *SSMParams) read(f *fields, hidden int) {
	// Falcon-H1's keys carry a mamba_ prefix; plain Mamba2's do not.
	if f.has("mamba_d_state") || f.has("mamba_n_heads") {
		f.size("mamba_n_heads", &s.Heads)
		f.size("mamba_d_head", &s.HeadDim)
		f.size("mamba_d_state", &s.StateSize)
		f.size("mamba_n_groups", &s.Groups)
		f.size("mamba_chunk_size", &s.ChunkSize)
		if !f.size("mamba_d_ssm", &s.Inner) {
			var expand float64
			if f.float("mamba_expand", &expand) {
				s.Inner = int(expand * float64(hidden))
			}
		}
	} else if f.has("state_size") || f.has("ssm_state_size") {
		f.size("num_heads", &s.Heads)
		f.size("head_dim", &s.HeadDim)
		_ = f.size("state_size", &s.StateSize) || f.size("ssm_state_size", &s.StateSize)
		f.size("n_groups", &s.Groups)
		f.size("chunk_size", &s.ChunkSize)
		var expand float64
		if f.float("expand", &expand) {
			s.Inner = int(expand * float64(hidden))
		}
	}
	if s.Groups == 0 {
		s.Groups = 1
	}
	s.TimeStepMin, s.TimeStepMax = 0, math.Inf(1)
	if lim, ok := f.extFloats("time_step_limit"); ok {
		if len(lim) != 2 || !(lim[0] <= lim[1]) {
			f.fail("time_step_limit", "a [min, max] pair", f.raw["time_step_limit"])
		} else {
			s.TimeStepMin, s.TimeStepMax = lim[0], lim[1]
		}
	}
	s.RMSNorm = true
	f.boolean("mamba_rms_norm", &s.RMSNorm)
	f.boolean("mamba_norm_before_gate", &s.NormBeforeGate)
}
