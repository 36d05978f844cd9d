package model

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
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
		Tensors: linear(linearGGUFLayer, tileValueHeads), Keys: linearKeys,
		Meta: ggufMeta{ff: ffOptional, read: linearFromGGUF(false), write: linearToGGUF(false)}})
	Register(Arch{ModelTypes: []string{"qwen3_next"}, Load: loadQwen3Next, GGUF: "qwen3next",
		Tensors: linear(linearMoELayer, composeAll(stackExperts, splitQKVZ)), Keys: linearKeys,
		Meta: ggufMeta{ff: ffOptional, read: linearFromGGUF(true), write: linearToGGUF(true)}})
	Register(Arch{ModelTypes: []string{"qwen3_5_moe_text"}, Load: loadQwen35MoE, GGUF: "qwen35moe",
		Tensors: linear(linearMoELayer, composeAll(stackExperts, tileValueHeads)), Keys: linearKeys,
		Meta: ggufMeta{ff: ffOptional, read: linearFromGGUF(true), write: linearToGGUF(true)}})
	registerParams(func(c *Config, f *fields) { c.LinearParams.read(f) },
		func(c *Config, prefix string) error { return c.LinearParams.check(prefix) })
}

// hybrid is the stack shared by the three families.
type hybrid struct {
	batching
	cfg *Config
	b   compute.Backend

	embed, norm, output *compute.Tensor
	layers              []hybridLayer
	eps                 float32
	act                 compute.Activation
	rec                 [][]int // shapes of a sequence's recurrent tensors
}

// hybridLayer holds one block; exactly one of linear and attn is set, and
// exactly one of mlp and moe.
type hybridLayer struct {
	inNorm, postNorm *compute.Tensor // F32 [hidden]
	linear           *deltaNet
	attn             *attention
	mlp              *mlp
	moe              *moeBlock
}

// hybridState is the per-sequence memory of a hybrid stack: a KV cache per
// attention layer, and per linear-attention layer the convolution's last
// inputs and the delta-rule state, checkpointed by recurrentState.
type hybridState struct {
	*recurrentState
	conv  []*compute.Tensor // per layer: [K-1, convDim]; nil on attention layers
	delta []*compute.Tensor // per layer: [value heads, value dim, key dim]; nil on attention layers
}

func (m *hybrid) Config() *Config { return m.cfg }

// NewState implements Model.
func (m *hybrid) NewState(ctx int) State {
	st := &hybridState{
		recurrentState: newRecurrentState(m.b, m.stack().attns, ctx),
		conv:           make([]*compute.Tensor, len(m.layers)),
		delta:          make([]*compute.Tensor, len(m.layers)),
	}
	st.allocate(m.rec)
	for i, l := range m.layers {
		if l.linear != nil {
			st.conv[i], st.delta[i] = st.rec[l.linear.rec], st.rec[l.linear.rec+1]
		}
	}
	return st
}

// addStates places the linear-attention layers' recurrent tensors.
func (m *hybrid) addStates() {
	for _, l := range m.layers {
		if l.linear != nil {
			m.rec = l.linear.addState(m.rec)
		}
	}
}

// stack lists the attention blocks and the recurrent tensors.
func (m *hybrid) stack() stack {
	attns := make([]*attention, len(m.layers))
	for i, l := range m.layers {
		attns[i] = l.attn
	}
	return stack{attns: attns, rec: m.rec}
}

// Forward implements Model.
func (m *hybrid) Forward(state State, ids, pos, logits *compute.Tensor) {
	st := state.(*hybridState)
	// Through batching.forward: a family built on the hybrid stack (Olmo
	// hybrid) runs its own pass over the same state.
	m.batching.forward(onePass(m.b, st.kvState, st.rec, ids, pos, logits))
	st.advance(ids.Len())
}

// forward runs the stack over the rows of pass p.
func (m *hybrid) forward(p *pass) {
	b, ar := m.b, p.ar
	hid := m.cfg.HiddenSize
	x, h, o := ar.get("x", hid), ar.get("h", hid), ar.get("o", hid)
	b.Embed(x, m.embed, p.ids)
	for i := range m.layers {
		l := &m.layers[i]
		b.RMSNorm(h, x, l.inNorm, m.eps, 1)
		if l.linear != nil {
			l.linear.forward(p, o, h)
		} else {
			l.attn.forward(p, o, h, true)
		}
		b.Add(x, x, o)
		b.RMSNorm(h, x, l.postNorm, m.eps, 1)
		if l.moe != nil {
			l.moe.forward(o, h, h, ar.moeFor(l.moe))
		} else {
			l.mlp.forward(b, ar, o, h)
		}
		b.Add(x, x, o)
	}
	outputLogits(p, x, h, m.norm, m.output, m.eps, 1)
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

// newHybrid returns an empty stack of a delta-rule hybrid family, after
// checking that the backend has the operations its linear-attention
// layers need and that the config's linear-attention geometry holds.
func newHybrid(cfg *Config, b compute.Backend) (*hybrid, error) {
	if err := checkDeltaNet(cfg, b); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	m := &hybrid{cfg: cfg, b: b, act: act, eps: float32(cfg.RMSNormEps)}
	m.batching = batching{b: b, name: cfg.ModelType, stack: m.stack, forward: m.forward}
	return m, nil
}

// loadHybrid reads the stack. Layers i for which sparse(i) holds get the
// mixture of experts that moe describes; the others (all, when moe is nil)
// a SwiGLU MLP of intermediate_size.
func loadHybrid(cfg *Config, src Source, b compute.Backend, moe *moeSpec, sparse func(int) bool) (*hybrid, error) {
	m, err := newHybrid(cfg, b)
	if err != nil {
		return nil, err
	}
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
			ly.attn = loadGatedAttention(cfg, l, i, p+"self_attn.", rope, float32(cfg.RMSNormEps))
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
			f := loadMLP(l, p+"mlp.", "gate_proj", "up_proj", "down_proj", hid, cfg.IntermediateSize, m.act)
			ly.mlp = &f
		}
		m.layers = append(m.layers, ly)
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	m.addStates()
	return m, nil
}

// loadGatedAttention reads an attention layer. q_proj holds, per head,
// the head's query rows and then its gate rows; they are split apart.
func loadGatedAttention(cfg *Config, l *loader, i int, p string, rope *compute.Rope, eps float32) *attention {
	hid, hd := cfg.HiddenSize, cfg.HeadDim
	nh, nkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	var q, g []int
	for h := range nh {
		q = appendRange(q, 2*h*hd, 2*h*hd+hd)
		g = appendRange(g, 2*h*hd+hd, 2*(h+1)*hd)
	}
	name := p + "q_proj.weight"
	a := newAttention(i, nh, nkv, hd, eps, rope)
	a.q = l.rows(name, []int{2 * nh * hd, hid}, q)
	a.gate = l.rows(name, []int{2 * nh * hd, hid}, g)
	a.k = l.weight(p+"k_proj.weight", nkv*hd, hid)
	a.v = l.weight(p+"v_proj.weight", nkv*hd, hid)
	a.o = l.weight(p+"o_proj.weight", hid, nh*hd)
	a.qNorm = l.vector(p+"q_norm.weight", hd)
	a.kNorm = l.vector(p+"k_norm.weight", hd)
	a.normOffset = 1
	return &a
}

// GGUF layouts of the gated delta-rule hybrids, as llama.cpp's converter
// (Qwen3NextModel, and Qwen3_5TextModel and Qwen3_5MoeTextModel in
// conversion/qwen.py) writes them and src/models/{qwen3next,qwen35,
// qwen35moe}.cpp read them. The architectures are qwen3next, qwen35 and
// qwen35moe.
//
//   - Every RMSNorm weight is stored as w+1 (the checkpoints store w and
//     scale by 1+w), except the gated norm of the linear-attention layers,
//     linear_attn.norm (ssm_norm), which scales by w.
//   - Linear-attention layers: in_proj_qkv is attn_qkv and in_proj_z
//     attn_gate; Qwen3-Next's fused in_proj_qkvz, grouped per key head as
//     [q k v z], is regrouped into the two (all queries, then all keys,
//     then all values; the z rows apart). in_proj_ba (Qwen3-Next, grouped
//     [b a] per key head, kept so) is ssm_ba; in_proj_b and in_proj_a
//     (Qwen3.5) are ssm_beta and ssm_alpha. conv1d is ssm_conv1d, squeezed
//     from [channels, 1, width] to [channels, width]; dt_bias is
//     ssm_dt.bias; A_log is stored as ssm_a = −exp(A_log), a vector with no
//     ".weight" suffix; norm is ssm_norm and out_proj ssm_out.
//   - Qwen3.5 files hold the value heads in tiled order when there are
//     more value heads than key heads: value head j = v·kh + g is the
//     checkpoint's head g·r + v (r value heads per key head g), in the rows
//     of attn_qkv's values, attn_gate, ssm_beta, ssm_alpha, the value
//     channels of ssm_conv1d, ssm_a, ssm_dt and the columns of ssm_out, so
//     that value head j reads key head j mod kh. lem reads them in that
//     order (Config.LinearTiledHeads, compute.DeltaRule.Tiled); Qwen3-Next
//     files keep the grouped order.
//   - Keys: ssm.conv_kernel (linear_conv_kernel_dim), ssm.state_size
//     (linear_key_head_dim), ssm.group_count (linear_num_key_heads),
//     ssm.time_step_rank (linear_num_value_heads), ssm.inner_size
//     (linear_value_head_dim × linear_num_value_heads), and
//     full_attention_interval: every n-th layer attends (4 when absent).
//     llama.cpp also reads attention.recurrent_layers, one bool per layer,
//     which lem writes when layer_types follows no interval.
//     rope.dimension_count is head_dim × partial_rotary_factor; Qwen3.5's
//     rope is llama.cpp's interleaved multi-section rope, whose
//     rope.dimension_sections (mrope_section, [11, 11, 10, 0] when absent)
//     change nothing for text, every section seeing the token's position.
//   - The attention layers keep q_proj's per-head [query gate] rows as
//     attn_q; post_attention_layernorm is post_attention_norm.
//   - The mixture of experts (qwen3next, qwen35moe): experts stacked as for
//     qwen3moe; shared_expert.{gate,up,down}_proj are ffn_{gate,up,down}_shexp
//     and shared_expert_gate ([1, hidden]) ffn_gate_inp_shexp. Keys
//     expert_feed_forward_length and expert_shared_feed_forward_length.
//     llama.cpp's graph renormalises the top-k weights and puts a MoE block
//     on every layer.

var (
	linearGGUFLayer = map[string]string{
		"post_attention_layernorm.weight": "post_attention_norm.weight",
		"linear_attn.in_proj_qkv.weight":  "attn_qkv.weight",
		"linear_attn.in_proj_z.weight":    "attn_gate.weight",
		"linear_attn.in_proj_ba.weight":   "ssm_ba.weight",
		"linear_attn.in_proj_b.weight":    "ssm_beta.weight",
		"linear_attn.in_proj_a.weight":    "ssm_alpha.weight",
		"linear_attn.conv1d.weight":       "ssm_conv1d.weight",
		"linear_attn.dt_bias":             "ssm_dt.bias",
		"linear_attn.A_log":               "ssm_a",
		"linear_attn.norm.weight":         "ssm_norm.weight",
		"linear_attn.out_proj.weight":     "ssm_out.weight",
	}
	linearMoELayer = merge(linearGGUFLayer, moeStackedLayer, map[string]string{
		"mlp.gate.weight":                    "ffn_gate_inp.weight",
		"mlp.shared_expert_gate.weight":      "ffn_gate_inp_shexp.weight",
		"mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
		"mlp.shared_expert.up_proj.weight":   "ffn_up_shexp.weight",
		"mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
	})
)

// linearRules squeezes the convolution kernel and stores A as −exp(A_log).
func linearRules(c *Config) map[string]ggufRule {
	const p = "linear_attn."
	return map[string]ggufRule{
		p + "conv1d.weight": ssmRules(c, p)[p+"conv1d.weight"],
		p + "A_log": {
			encode: negExp, decode: logNeg,
		},
	}
}

// splitQKVZ regroups Qwen3-Next's fused in_proj_qkvz ([q k v z] per key
// head) into in_proj_qkv (every query, then every key, then every value)
// and in_proj_z, moving whole rows.
func splitQKVZ(c *Config, src Source, names []string) ([]composite, error) {
	kh, vh := c.LinearNumKeyHeads, c.LinearNumValueHeads
	dk, dv := c.LinearKeyHeadDim, c.LinearValueHeadDim
	if kh <= 0 || vh%kh != 0 {
		return nil, fmt.Errorf("%s: %d value heads are not a multiple of %d key heads", c.ModelType, vh, kh)
	}
	r := vh / kh
	group := 2*dk + 2*r*dv
	var q, k, v, z []int
	for g := range kh {
		o := g * group
		q = appendRange(q, o, o+dk)
		k = appendRange(k, o+dk, o+2*dk)
		v = appendRange(v, o+2*dk, o+2*dk+r*dv)
		z = appendRange(z, o+2*dk+r*dv, o+group)
	}
	qkv := append(append(q, k...), v...)
	var out []composite
	for _, n := range names {
		p, ok := strings.CutSuffix(n, "linear_attn.in_proj_qkvz.weight")
		if !ok {
			continue
		}
		for _, part := range []struct {
			name string
			rows []int
		}{{"linear_attn.in_proj_qkv.weight", qkv}, {"linear_attn.in_proj_z.weight", z}} {
			cp, err := selectRows(src, n, p+part.name, []int{kh * group, c.HiddenSize}, part.rows)
			if err != nil {
				return nil, err
			}
			out = append(out, cp)
		}
	}
	return out, nil
}

// tileValueHeads reorders the value heads of a Qwen3.5 checkpoint's
// linear-attention layers from grouped to tiled order, as the converter
// does when there are more value heads than key heads.
func tileValueHeads(c *Config, src Source, names []string) ([]composite, error) {
	kh, vh := c.LinearNumKeyHeads, c.LinearNumValueHeads
	dk, dv := c.LinearKeyHeadDim, c.LinearValueHeadDim
	if c.LinearTiledHeads || kh == vh {
		return nil, nil
	}
	if kh <= 0 || vh%kh != 0 {
		return nil, fmt.Errorf("%s: %d value heads are not a multiple of %d key heads", c.ModelType, vh, kh)
	}
	// tiled maps heads of size n to their tiled order, after skip
	// untouched leading rows.
	tiled := func(skip, n int) []int {
		order := appendRange(nil, 0, skip)
		for j := range vh {
			old := (j%kh)*(vh/kh) + j/kh
			order = appendRange(order, skip+old*n, skip+(old+1)*n)
		}
		return order
	}
	qk := 2 * kh * dk
	var out []composite
	for _, n := range names {
		_, suffix, ok := layerSuffix(n)
		if !ok {
			continue
		}
		s, _ := src.Lookup(n)
		var cp composite
		var err error
		switch suffix {
		case "linear_attn.in_proj_qkv.weight":
			cp, err = selectRows(src, n, n, []int{qk + vh*dv, c.HiddenSize}, tiled(qk, dv))
		case "linear_attn.in_proj_z.weight":
			cp, err = selectRows(src, n, n, []int{vh * dv, c.HiddenSize}, tiled(0, dv))
		case "linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight":
			cp, err = selectRows(src, n, n, []int{vh, c.HiddenSize}, tiled(0, 1))
		case "linear_attn.A_log", "linear_attn.dt_bias":
			cp, err = selectRows(src, n, n, []int{vh}, tiled(0, 1))
		case "linear_attn.conv1d.weight":
			cp, err = selectRows(src, n, n, []int{qk + vh*dv, 1, c.LinearConvKernelDim}, tiled(qk, dv))
		case "linear_attn.out_proj.weight":
			cp, err = selectColumns(src, n, []int{c.HiddenSize, vh * dv}, tiled(0, dv))
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		if cp.dtype != s.DType {
			return nil, fmt.Errorf("tensor %s: internal error: dtype changed", n)
		}
		out = append(out, cp)
	}
	return out, nil
}

// ggufLinearConfig reads the linear-attention keys and marks which layers
// are recurrent.
func ggufLinearConfig(c *Config, k *ggufKeys) error {
	c.LinearConvKernelDim = k.need("linear_conv_kernel_dim")
	c.LinearKeyHeadDim = k.need("linear_key_head_dim")
	c.LinearNumKeyHeads = k.need("linear_num_key_heads")
	c.LinearNumValueHeads = k.need("linear_num_value_heads")
	inner := k.need("ssm.inner_size")
	if k.err != nil {
		return k.err
	}
	if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
		return fmt.Errorf("key %s.ssm.time_step_rank: %d value heads are not a multiple of %d key heads (ssm.group_count)", k.arch, c.LinearNumValueHeads, c.LinearNumKeyHeads)
	}
	if inner%c.LinearNumValueHeads != 0 {
		return fmt.Errorf("key %s.ssm.inner_size: %d channels are not a multiple of %d value heads (ssm.time_step_rank)", k.arch, inner, c.LinearNumValueHeads)
	}
	c.LinearValueHeadDim = inner / c.LinearNumValueHeads
	c.LinearTiledHeads = k.arch != "qwen3next"
	n := c.NumHiddenLayers
	recurrent := make([]bool, n)
	key := k.arch + ".attention.recurrent_layers"
	if v, ok := k.f.Value(key); ok {
		bs, ok := gguf.ArrayOf[bool](v)
		if !ok || len(bs) != n {
			return fmt.Errorf("key %s: want %d bools, got %s", key, n, v.Type())
		}
		copy(recurrent, bs)
	} else {
		interval := 4
		if v, ok := k.uint("full_attention_interval"); ok {
			if v == 0 {
				return fmt.Errorf("key %s.full_attention_interval is 0", k.arch)
			}
			interval = v
		}
		for i := range recurrent {
			recurrent[i] = (i+1)%interval != 0
		}
	}
	c.FullAttentionInterval = 0
	for i, r := range recurrent {
		c.LayerTypes[i] = FullAttention
		if r {
			c.LayerTypes[i] = "linear_attention"
		}
	}
	return k.err
}

// linearLayerKeys writes the linear-attention geometry keys that every
// delta-rule hybrid shares and returns which layers are recurrent.
func linearLayerKeys(c *Config, u32 func(string, int)) ([]bool, error) {
	u32("linear_conv_kernel_dim", c.LinearConvKernelDim)
	u32("linear_key_head_dim", c.LinearKeyHeadDim)
	u32("linear_num_key_heads", c.LinearNumKeyHeads)
	u32("linear_num_value_heads", c.LinearNumValueHeads)
	u32("ssm.inner_size", c.LinearValueHeadDim*c.LinearNumValueHeads)
	recurrent := make([]bool, c.NumHiddenLayers)
	for i := range recurrent {
		switch t := c.LayerType(i); t {
		case "linear_attention":
			recurrent[i] = true
		case FullAttention:
		default:
			return nil, fmt.Errorf("%s: layer %d is %q; want linear_attention or full_attention", c.ModelType, i, t)
		}
	}
	return recurrent, nil
}

// linearMetadata writes the linear-attention keys and which layers attend.
func (l *GGUFLayout) linearMetadata(u32 func(string, int)) error {
	c := l.cfg
	if err := checkLinear(c); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	if c.LinearKeyHeadDim != c.LinearValueHeadDim {
		l.Warnings = append(l.Warnings, fmt.Sprintf("linear_key_head_dim %d ≠ linear_value_head_dim %d: llama.cpp sizes both from ssm.state_size and will not load the file", c.LinearKeyHeadDim, c.LinearValueHeadDim))
	}
	recurrent, err := linearLayerKeys(c, u32)
	if err != nil {
		return err
	}
	interval := cmp.Or(c.FullAttentionInterval, 4)
	follows := func(n int) bool {
		for i, r := range recurrent {
			if r != ((i+1)%n != 0) {
				return false
			}
		}
		return true
	}
	if !follows(interval) {
		interval = 0
		for n := 1; n <= c.NumHiddenLayers+1 && interval == 0; n++ {
			if follows(n) {
				interval = n
			}
		}
	}
	if interval > 0 {
		u32("full_attention_interval", interval)
	} else {
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".attention.recurrent_layers", Value: gguf.Array(recurrent)})
	}
	if l.Arch != "qwen3next" {
		sections := []int32{11, 11, 10, 0}
		if s := c.Rope(FullAttention).MRopeSection; len(s) > 0 {
			if len(s) > 4 {
				return fmt.Errorf("%s: mrope_section %v has more than 4 sections", c.ModelType, s)
			}
			sections = make([]int32, 4)
			for i, v := range s {
				sections[i] = int32(v)
			}
		}
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".rope.dimension_sections", Value: gguf.Array(sections)})
	}
	return nil
}

// linearFromGGUF returns the read hook of the delta-rule hybrids, with
// experts or without.
func linearFromGGUF(moe bool) func(k *ggufKeys, c *Config, g *GGUF) error {
	return func(k *ggufKeys, c *Config, g *GGUF) error {
		if moe {
			ff, hasFF := ggufExperts(c, k, "moe_intermediate_size")
			// llama.cpp's defaults when the keys are absent.
			if !hasFF && c.NumExpertsPerTok > 0 {
				ff = c.IntermediateSize / c.NumExpertsPerTok
			}
			c.MoEIntermediateSize = ff
			c.SharedExpertIntermediateSize = c.IntermediateSize
			if v, ok := k.uint("shared_expert_intermediate_size"); ok {
				c.SharedExpertIntermediateSize = v
			}
			c.DecoderSparseStep = 1
			c.NormTopKProb = true
			if k.arch == "qwen3next" {
				ggufExpertNorm(c, k)
			}
			checkExpertFF(c, k)
		}
		return ggufLinearConfig(c, k)
	}
}

// linearToGGUF returns the write hook of the delta-rule hybrids, which
// write no sliding window.
func linearToGGUF(moe bool) func(l *GGUFLayout, w *ggufWriter) error {
	return func(l *GGUFLayout, w *ggufWriter) error {
		w.window = true
		if moe {
			if err := l.linearMoEMetadata(w); err != nil {
				return err
			}
		}
		return l.linearMetadata(w.u32)
	}
}

// linearMoEMetadata writes the expert keys of qwen3next and qwen35moe.
func (l *GGUFLayout) linearMoEMetadata(w *ggufWriter) error {
	c := l.cfg
	w.u32("num_experts", c.NumExperts)
	w.u32("num_experts_per_tok", c.NumExpertsPerTok)
	if l.Arch == "qwen3next" {
		if err := l.checkAllSparse(); err != nil {
			return err
		}
	}
	if c.SharedExpertIntermediateSize <= 0 {
		return fmt.Errorf("%s: llama.cpp's %s needs the shared expert (shared_expert_intermediate_size)", c.ModelType, l.Arch)
	}
	w.u32("moe_intermediate_size", c.MoEIntermediateSize)
	w.u32("shared_expert_intermediate_size", c.SharedExpertIntermediateSize)
	if l.Arch == "qwen3next" {
		l.writeExpertNorm()
	}
	return nil
}

// linearKeys are the config keys of the delta-rule hybrids. The SSM keys
// hold the linear-attention sizes; ssm.inner_size is
// linear_value_head_dim × linear_num_value_heads.
var linearKeys = []ConfigKey{
	{"linear_conv_kernel_dim", "ssm.conv_kernel"},
	{"linear_key_head_dim", "ssm.state_size"},
	{"linear_num_key_heads", "ssm.group_count"},
	{"linear_num_value_heads", "ssm.time_step_rank"},
	{"full_attention_interval", "full_attention_interval"},
	{"moe_intermediate_size", "expert_feed_forward_length"},
	{"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
}

// LinearParams describe the gated delta-rule linear attention of
// Qwen3-Next and Qwen3.5: the layers that layer_types marks
// "linear_attention". LinearNumValueHeads is a multiple of
// LinearNumKeyHeads.
type LinearParams struct {
	LinearNumKeyHeads     int // linear_num_key_heads
	LinearNumValueHeads   int // linear_num_value_heads
	LinearKeyHeadDim      int // linear_key_head_dim
	LinearValueHeadDim    int // linear_value_head_dim
	LinearConvKernelDim   int // linear_conv_kernel_dim: width of the short causal convolution
	FullAttentionInterval int // full_attention_interval: every n-th layer attends (when layer_types is absent)
	// LinearTiledHeads says the value heads of the linear-attention
	// weights are in tiled order (value head h reads key head h mod
	// LinearNumKeyHeads) rather than grouped by key head as the Hugging
	// Face checkpoints store them: llama.cpp's qwen35 and qwen35moe files
	// reorder them so. Set by the GGUF reader; no config.json key.
	LinearTiledHeads bool
}

func (p *LinearParams) read(f *fields) {
	f.size("linear_num_key_heads", &p.LinearNumKeyHeads)
	f.size("linear_num_value_heads", &p.LinearNumValueHeads)
	f.size("linear_key_head_dim", &p.LinearKeyHeadDim)
	f.size("linear_value_head_dim", &p.LinearValueHeadDim)
	f.size("linear_conv_kernel_dim", &p.LinearConvKernelDim)
	f.size("full_attention_interval", &p.FullAttentionInterval)
}

func (p *LinearParams) check(prefix string) error {
	if k, v := p.LinearNumKeyHeads, p.LinearNumValueHeads; k > 0 && v%k != 0 {
		return fmt.Errorf("key %q: %d linear value heads are not a multiple of %d key heads", prefix+"linear_num_value_heads", v, k)
	}
	return nil
}
