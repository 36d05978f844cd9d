package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
)

// OLMo Hybrid (model_type olmo_hybrid): Gated DeltaNet linear-attention
// layers with a softmax attention layer where layer_types says
// "full_attention" (every fourth by default). Every norm is an RMSNorm
// scaling by w.
//
// The linear-attention layers are pre-norm:
//
//	h = x + DeltaNet(RMSNorm(x))            attention_layer_norm
//	y = h + MLP(RMSNorm(h))                 feedforward_layer_norm
//
// where DeltaNet is the block of deltanet.go with its projections apart
// (q_proj, k_proj, v_proj, whose outputs the short convolution mixes in
// that order; g_proj the output gate; a_proj, b_proj) and two changes:
// with linear_allow_neg_eigval (the default) the update strength is
// β = 2σ(b) (compute.DeltaRule.NegEigval), and the gated output norm
// (o_norm) has eps 1e-5 whatever rms_norm_eps says.
//
// The attention layers normalise after each block, as OLMo 2 does, with
// RMSNorm over the whole query and key projections before rope:
//
//	h = x + RMSNorm(Attn(x))                feedforward_layer_norm
//	y = h + RMSNorm(MLP(h))                 post_feedforward_layernorm
//
// The checkpoints apply no rope when rope_parameters is null (the
// published ones); the attention layers then see no positions but the
// causal mask.
func init() {
	Register(Arch{ModelTypes: []string{"olmo_hybrid"}, Load: loadOlmoHybrid, GGUF: "olmo-hybrid",
		Tensors: &TensorLayout{act: "silu", layer: olmoHybridLayer, rules: linearRules,
			compose: fuseOlmoHybridQKV},
		Keys: olmoHybridKeys,
		Meta: ggufMeta{ff: ffOptional, read: ggufOlmoHybridConfig, write: olmoHybridMetadata}})
}

// olmoGatedNormEps is the eps of the linear-attention layers' gated output
// norm (the fused kernel's default the checkpoints were trained with).
const olmoGatedNormEps = 1e-5

// olmoHybrid runs the stack. The layers and state are those of the
// Qwen3-Next hybrid (hybridLayer, hybridState): inNorm
// is attention_layer_norm (linear layers only), postNorm
// feedforward_layer_norm, and attention layers have no output gate.
type olmoHybrid struct {
	*hybrid
	postFFNorm []*compute.Tensor // post_feedforward_layernorm; nil on linear layers
}

// forward runs the stack over the rows of pass p.
func (m *olmoHybrid) forward(p *pass) {
	b, ar := m.b, p.ar
	hid := m.cfg.HiddenSize
	x, h, o := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid)
	b.Embed(x, m.embed, p.ids)
	for i := range m.layers {
		l := &m.layers[i]
		if l.linear != nil {
			b.RMSNorm(h, x, l.inNorm, m.eps, 0)
			l.linear.forward(p, o, h)
			b.Add(x, x, o)
			b.RMSNorm(h, x, l.postNorm, m.eps, 0)
			l.mlp.forward(b, ar, o, h)
			b.Add(x, x, o)
			continue
		}
		l.attn.forward(p, o, x, true)
		b.RMSNorm(h, o, l.postNorm, m.eps, 0)
		b.Add(x, x, h)
		l.mlp.forward(b, ar, o, x)
		b.RMSNorm(h, o, m.postFFNorm[i], m.eps, 0)
		b.Add(x, x, h)
	}
	outputLogits(p, x, h, m.norm, m.output, m.eps, 0)
}

// olmoHybridRope reports whether the config asks for rope: not when
// rope_parameters, or its rope_theta, is null.
func olmoHybridRope(cfg *Config) bool {
	raw, ok := cfg.Raw["rope_parameters"]
	if !ok {
		return true
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(raw, &p); err != nil || p == nil {
		return false
	}
	theta, ok := p["rope_theta"]
	return !ok || string(theta) != "null"
}

// loadOlmoHybrid loads an OLMo Hybrid checkpoint, or a GGUF file lem
// wrote (its fused in_proj_qkv and conv1d stand for the parts).
func loadOlmoHybrid(cfg *Config, src Source, b compute.Backend) (Model, error) {
	h, err := newHybrid(cfg, b)
	if err != nil {
		return nil, err
	}
	act := h.act
	negEig := true
	if _, err := cfg.Get("linear_allow_neg_eigval", &negEig); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	m := &olmoHybrid{hybrid: h}
	m.batching.forward = m.forward
	hid, vocab, hd := cfg.HiddenSize, cfg.VocabSize, cfg.HeadDim
	nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	l := &loader{src: src, b: b}
	m.embed = l.table("model.embed_tokens.weight", vocab, hid)
	m.norm = l.vector("model.norm.weight", hid)
	m.output = l.output(cfg.TieWordEmbeddings, "model.embed_tokens.weight", m.embed, vocab, hid)
	var rope *compute.Rope
	m.postFFNorm = make([]*compute.Tensor, cfg.NumHiddenLayers)
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		f := loadMLP(l, p+"mlp.", "gate_proj", "up_proj", "down_proj", hid, cfg.IntermediateSize, act)
		ly := hybridLayer{postNorm: l.vector(p+"feedforward_layer_norm.weight", hid), mlp: &f}
		switch t := cfg.LayerType(i); t {
		case "linear_attention":
			ly.inNorm = l.vector(p+"attention_layer_norm.weight", hid)
			ly.linear = loadOlmoDeltaNet(cfg, l, p+"linear_attn.", negEig)
		case FullAttention:
			if rope == nil && olmoHybridRope(cfg) {
				if rope, err = fullRope(cfg); err != nil {
					return nil, err
				}
			}
			// q and k normalised over the whole projection, then rotated
			// (unless the model has no rope).
			a := newAttention(i, nh, nkv, hd, m.eps, rope)
			a.load(l, p+"self_attn.", hid, attnNames{o: "o_proj"})
			a.qNorm = l.vector(p+"self_attn.q_norm.weight", nh*hd)
			a.kNorm = l.vector(p+"self_attn.k_norm.weight", nkv*hd)
			ly.attn = &a
			m.postFFNorm[i] = l.vector(p+"post_feedforward_layernorm.weight", hid)
		default:
			return nil, fmt.Errorf("%s: layer %d has layer type %q; want linear_attention or full_attention", cfg.ModelType, i, t)
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	m.addStates()
	return m, nil
}

// loadOlmoDeltaNet reads a linear-attention layer under p: the q, k and v
// projections and their convolutions become the deltaNet's fused qkv
// projection and convolution. Its gated norm has eps olmoGatedNormEps;
// negEig is linear_allow_neg_eigval.
func loadOlmoDeltaNet(cfg *Config, l *loader, p string, negEig bool) *deltaNet {
	vh, dv := cfg.LinearNumValueHeads, cfg.LinearValueHeadDim
	hid, k := cfg.HiddenSize, cfg.LinearConvKernelDim
	d := newDeltaNet(cfg, l.b, olmoGatedNormEps)
	d.rule.NegEigval = negEig
	c := d.convDim()
	if l.has(p + "in_proj_qkv.weight") {
		d.qkv = l.weight(p+"in_proj_qkv.weight", c, hid)
		d.conv = l.reshaped(p+"conv1d.weight", []int{c, 1, k}, c, k)
	} else {
		d.qkv = l.concatRows(hid, p+"q_proj.weight", p+"k_proj.weight", p+"v_proj.weight")
		d.conv = l.concatConv(c, k, p+"q_conv1d.weight", p+"k_conv1d.weight", p+"v_conv1d.weight")
		if d.qkv != nil && d.qkv.Rows() != c {
			l.err = fmt.Errorf("tensors %sq_proj, k_proj, v_proj have %d rows together, want %d", p, d.qkv.Rows(), c)
		}
	}
	d.z = l.weight(p+"g_proj.weight", vh*dv, hid)
	d.b = l.weight(p+"b_proj.weight", vh, hid)
	d.a = l.weight(p+"a_proj.weight", vh, hid)
	d.rule.ALog = l.vector(p+"A_log", vh)
	d.rule.DtBias = l.vector(p+"dt_bias", vh)
	d.norm = l.vector(p+"o_norm.weight", dv)
	d.out = l.weight(p+"o_proj.weight", hid, vh*dv)
	return d
}

// concatRows loads matrices of cols columns and one stored type as one,
// their rows in the order named.
func (l *loader) concatRows(cols int, names ...string) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	var data []byte
	var dt compute.DType
	rows := 0
	for i, n := range names {
		s, ok := l.src.Lookup(n)
		switch {
		case !ok:
			l.err = fmt.Errorf("tensor %s is missing", n)
		case len(s.Shape) != 2 || s.Shape[1] != cols:
			l.err = fmt.Errorf("tensor %s has shape %v, want [rows, %d]", n, s.Shape, cols)
		case i > 0 && s.DType != dt:
			l.err = fmt.Errorf("tensor %s is %s, %s is %s: fused projections need one type", n, s.DType, names[0], dt)
		}
		if l.err != nil {
			return nil
		}
		dt = s.DType
		rows += s.Shape[0]
		data = append(data, s.Data...)
	}
	return l.tensor(strings.Join(names, "+"), dt, []int{rows, cols}, data)
}

// concatConv loads depthwise convolution kernels [rows, 1, k] as one F32
// [channels, k], their rows in the order named. The parts may split the
// channels anywhere (transformers saves its fused kernel in three equal
// pieces), but must hold channels rows together.
func (l *loader) concatConv(channels, k int, names ...string) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	var vals []float32
	for _, n := range names {
		s, ok := l.src.Lookup(n)
		if !ok {
			l.err = fmt.Errorf("tensor %s is missing", n)
			return nil
		}
		if len(s.Shape) != 3 || s.Shape[1] != 1 || s.Shape[2] != k {
			l.err = fmt.Errorf("tensor %s has shape %v, want [rows, 1, %d]", n, s.Shape, k)
			return nil
		}
		v := l.floats(n, s)
		if l.err != nil {
			return nil
		}
		vals = append(vals, v...)
	}
	if len(vals) != channels*k {
		l.err = fmt.Errorf("tensors %s hold %d channels together, want %d", strings.Join(names, ", "), len(vals)/k, channels)
		return nil
	}
	t := l.b.Alloc(compute.F32, channels, k)
	l.b.Upload(t, vals)
	return t
}

// The GGUF layout of OLMo Hybrid, architecture olmo-hybrid. llama.cpp has
// no such architecture; lem's layout follows its qwen35 files where the
// tensors agree:
//
//   - attention_layer_norm is attn_norm, feedforward_layer_norm ffn_norm
//     (on attention layers the norm after attention),
//     post_feedforward_layernorm post_ffw_norm; norms are stored as w.
//   - Linear-attention layers: q_proj, k_proj and v_proj are fused into
//     attn_qkv (linear_attn.in_proj_qkv when read back), and their
//     convolutions into ssm_conv1d [channels, width] (linear_attn.conv1d);
//     g_proj is attn_gate, a_proj ssm_alpha, b_proj ssm_beta, dt_bias
//     ssm_dt.bias, A_log ssm_a = −exp(A_log), o_norm ssm_norm and o_proj
//     ssm_out.
//   - Keys: the linear-attention sizes as in qwen35 (ssm.conv_kernel,
//     ssm.state_size, ssm.group_count, ssm.time_step_rank, ssm.inner_size),
//     attention.recurrent_layers (one bool per layer), ssm.allow_neg_eigval
//     (linear_allow_neg_eigval) and, for checkpoints without rope,
//     rope.none.
var (
	olmoHybridLayer = map[string]string{
		"attention_layer_norm.weight":       "attn_norm.weight",
		"feedforward_layer_norm.weight":     "ffn_norm.weight",
		"post_feedforward_layernorm.weight": "post_ffw_norm.weight",
		"linear_attn.in_proj_qkv.weight":    "attn_qkv.weight",
		"linear_attn.conv1d.weight":         "ssm_conv1d.weight",
		"linear_attn.g_proj.weight":         "attn_gate.weight",
		"linear_attn.a_proj.weight":         "ssm_alpha.weight",
		"linear_attn.b_proj.weight":         "ssm_beta.weight",
		"linear_attn.dt_bias":               "ssm_dt.bias",
		"linear_attn.A_log":                 "ssm_a",
		"linear_attn.o_norm.weight":         "ssm_norm.weight",
		"linear_attn.o_proj.weight":         "ssm_out.weight",
	}
	olmoHybridKeys = []ConfigKey{
		{"linear_conv_kernel_dim", "ssm.conv_kernel"},
		{"linear_key_head_dim", "ssm.state_size"},
		{"linear_num_key_heads", "ssm.group_count"},
		{"linear_num_value_heads", "ssm.time_step_rank"},
		{"linear_allow_neg_eigval", "ssm.allow_neg_eigval"},
	}
)

// fuseOlmoHybridQKV joins each linear-attention layer's q, k and v
// projections, and their convolutions, into one tensor each.
func fuseOlmoHybridQKV(c *Config, src Source, names []string) ([]composite, error) {
	var out []composite
	for _, n := range names {
		p, ok := strings.CutSuffix(n, "linear_attn.q_proj.weight")
		if !ok {
			continue
		}
		for _, f := range []struct{ name, part string }{
			{"in_proj_qkv.weight", "proj.weight"},
			{"conv1d.weight", "conv1d.weight"},
		} {
			var parts []string
			for _, x := range []string{"q_", "k_", "v_"} {
				parts = append(parts, p+"linear_attn."+x+f.part)
			}
			cp, err := concatComposite(src, p+"linear_attn."+f.name, parts)
			if err != nil {
				return nil, err
			}
			out = append(out, cp)
		}
	}
	return out, nil
}

// concatComposite returns the composite name made of the parts' rows
// (outermost dimension) in order; the parts must agree in type and inner
// dimensions.
func concatComposite(src Source, name string, parts []string) (composite, error) {
	var first Stored
	rows := 0
	for i, p := range parts {
		s, ok := src.Lookup(p)
		if !ok {
			return composite{}, fmt.Errorf("tensor %s is missing", p)
		}
		if len(s.Shape) == 0 {
			return composite{}, fmt.Errorf("tensor %s is a scalar", p)
		}
		if i == 0 {
			first = s
		} else if s.DType != first.DType || !slices.Equal(s.Shape[1:], first.Shape[1:]) {
			return composite{}, fmt.Errorf("tensor %s is %s %v, %s is %s %v: they cannot be fused", p, s.DType, s.Shape, parts[0], first.DType, first.Shape)
		}
		rows += s.Shape[0]
	}
	shape := append([]int{rows}, first.Shape[1:]...)
	return composite{
		name: name, parts: parts, dtype: first.DType, shape: shape,
		build: func() []byte {
			var data []byte
			for _, p := range parts {
				s, _ := src.Lookup(p)
				data = append(data, s.Data...)
			}
			return data
		},
	}, nil
}

// ggufOlmoHybridConfig reads the linear-attention keys, which layers
// attend, the update-strength doubling and the absence of rope.
func ggufOlmoHybridConfig(k *ggufKeys, c *Config, _ *GGUF) error {
	if err := ggufLinearConfig(c, k); err != nil {
		return err
	}
	c.LinearTiledHeads = false
	for _, b := range []struct{ key, hf, null string }{
		{"ssm.allow_neg_eigval", "linear_allow_neg_eigval", ""},
		{"rope.none", "rope_parameters", "null"},
	} {
		full := k.arch + "." + b.key
		v, ok := k.f.Value(full)
		if !ok {
			continue
		}
		x, ok := v.Bool()
		if !ok {
			return fmt.Errorf("key %s: want a bool, got %s", full, v.Type())
		}
		switch {
		case b.null == "":
			c.Raw[b.hf] = json.RawMessage(fmt.Sprint(x))
		case x:
			c.Raw[b.hf] = json.RawMessage(b.null)
		}
	}
	return k.err
}

// olmoHybridMetadata writes the keys ggufOlmoHybridConfig reads.
func olmoHybridMetadata(l *GGUFLayout, w *ggufWriter) error {
	w.window = true // no sliding window
	c := l.cfg
	if err := checkLinear(c); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	recurrent, err := linearLayerKeys(c, w.u32)
	if err != nil {
		return err
	}
	a := l.Arch + "."
	negEig := true
	if _, err := c.Get("linear_allow_neg_eigval", &negEig); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	l.KV = append(l.KV,
		gguf.KV{Key: a + "attention.recurrent_layers", Value: gguf.Array(recurrent)},
		gguf.KV{Key: a + "ssm.allow_neg_eigval", Value: gguf.Bool(negEig)})
	if !olmoHybridRope(c) {
		l.KV = append(l.KV, gguf.KV{Key: a + "rope.none", Value: gguf.Bool(true)})
	}
	return nil
}
