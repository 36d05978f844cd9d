package model

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// deltaNet is a Gated DeltaNet linear-attention layer (Qwen3-Next,
// Qwen3.5). For the rows h of one chunk:
//
//	[q k v] = SiLU(CausalConv(h·W_qkvᵀ))      short convolution over time
//	z = h·W_zᵀ,  b = h·W_bᵀ,  a = h·W_aᵀ
//	o = DeltaRule(q, k, v; a, b)               per value head, see compute.DeltaRuler
//	out = (RMSNorm(o) ⊙ w_norm ⊙ SiLU(z))·W_outᵀ   the norm per value head
//
// Its memory is the convolution's last K-1 inputs and one state matrix per
// value head, both carried from chunk to chunk.
type deltaNet struct {
	qkv, z, b, a, out *compute.Tensor // projections, stored dtype
	conv, convBias    *compute.Tensor // F32 [convDim, K], optional F32 [convDim]
	norm              *compute.Tensor // F32 [ValueDim]
	eps               float32         // the gated norm's
	rule              compute.DeltaRule
	kernel            int // K, the convolution's width
	convolver         compute.Convolver
	ruler             compute.DeltaRuler
	// rec is the index of the layer's recurrent tensors in a sequence's
	// list: the convolution window, then the delta-rule state.
	rec int
}

// checkDeltaNet reports an error when backend b lacks an operation that
// linear-attention layers need or cfg their geometry.
func checkDeltaNet(cfg *Config, b compute.Backend) error {
	if _, ok := b.(compute.Convolver); !ok {
		return fmt.Errorf("backend %s lacks the short causal convolution (compute.Convolver) that linear-attention layers need", b.Name())
	}
	if _, ok := b.(compute.DeltaRuler); !ok {
		return fmt.Errorf("backend %s lacks the gated delta rule (compute.DeltaRuler) that linear-attention layers need", b.Name())
	}
	return checkLinear(cfg)
}

// newDeltaNet returns a layer of the config's geometry, before its tensors
// are read, whose gated norm has the given eps. The backend's operations
// are those checkDeltaNet checked.
func newDeltaNet(cfg *Config, b compute.Backend, eps float32) *deltaNet {
	dk := cfg.LinearKeyHeadDim
	d := &deltaNet{
		rule: compute.DeltaRule{
			KeyHeads: cfg.LinearNumKeyHeads, ValueHeads: cfg.LinearNumValueHeads,
			KeyDim: dk, ValueDim: cfg.LinearValueHeadDim,
			Scale: float32(1 / math.Sqrt(float64(dk))), NormEps: 1e-6,
			Tiled: cfg.LinearTiledHeads,
		},
		kernel: cfg.LinearConvKernelDim,
		eps:    eps,
	}
	d.convolver, _ = b.(compute.Convolver)
	d.ruler, _ = b.(compute.DeltaRuler)
	return d
}

// convDim is the number of channels the convolution mixes: q, k and v.
func (d *deltaNet) convDim() int { return d.rule.Width() }

// addState appends the shapes of the layer's recurrent tensors, the
// convolution's last K-1 inputs and a delta-rule state per value head, to
// shapes, and records where they are.
func (d *deltaNet) addState(shapes [][]int) [][]int {
	d.rec = len(shapes)
	return append(shapes, []int{d.kernel - 1, d.convDim()}, []int{d.rule.ValueHeads, d.rule.ValueDim, d.rule.KeyDim})
}

// forward runs the layer on h and writes its output to out, updating the
// layer's convolution and delta-rule states.
func (d *deltaNet) forward(p *pass, out, h *compute.Tensor) {
	b, ar := p.b, p.ar
	r := &d.rule
	vdim := r.ValueHeads * r.ValueDim
	qkv, mixed := ar.get("delta.qkv", d.convDim()), ar.get("delta.mixed", d.convDim())
	z, core := ar.get("delta.z", vdim), ar.get("delta.core", vdim)
	alpha, beta := ar.get("delta.alpha", r.ValueHeads), ar.get("delta.beta", r.ValueHeads)
	b.MatMul(qkv, h, d.qkv)
	b.MatMul(z, h, d.z)
	b.MatMul(beta, h, d.b)
	b.MatMul(alpha, h, d.a)
	for _, s := range p.seqs {
		d.convolver.CausalConv(p.part(mixed, s), p.part(qkv, s), d.conv, d.convBias, s.rec[d.rec], true)
	}
	for _, s := range p.seqs {
		d.ruler.DeltaRule(p.part(core, s), p.part(mixed, s), p.part(alpha, s), p.part(beta, s), s.rec[d.rec+1], r)
	}
	b.RMSNorm(core, core, d.norm, d.eps, 0)
	b.GLU(core, z, core, compute.SiLU)
	b.MatMul(out, core, d.out)
}

// loadDeltaNet reads the linear-attention layer under prefix p (ending in
// "linear_attn."). Qwen3.5 stores the projections apart (in_proj_qkv,
// in_proj_z, in_proj_b, in_proj_a); Qwen3-Next fuses them (in_proj_qkvz,
// in_proj_ba) grouped by key head, and their rows are regrouped here into
// the same four projections. GGUF files of Qwen3-Next hold in_proj_qkv and
// in_proj_z apart beside the fused in_proj_ba; those of Qwen3.5 hold the
// value heads in tiled order (Config.LinearTiledHeads). The gated norm
// has eps rms_norm_eps.
func loadDeltaNet(cfg *Config, l *loader, p string) *deltaNet {
	kh, vh := cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads
	dk, dv := cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	hid, k := cfg.HiddenSize, cfg.LinearConvKernelDim
	d := newDeltaNet(cfg, l.b, float32(cfg.RMSNormEps))
	// r = vh/kh value heads share a key head.
	r := vh / kh
	if l.has(p + "in_proj_qkvz.weight") {
		// Per key head: q (dk rows), k (dk), v (r·dv), z (r·dv).
		group := 2*dk + 2*r*dv
		var q, kk, v, z []int
		for g := range kh {
			o := g * group
			q = appendRange(q, o, o+dk)
			kk = appendRange(kk, o+dk, o+2*dk)
			v = appendRange(v, o+2*dk, o+2*dk+r*dv)
			z = appendRange(z, o+2*dk+r*dv, o+group)
		}
		name := p + "in_proj_qkvz.weight"
		d.qkv = l.rows(name, []int{kh * group, hid}, append(append(q, kk...), v...))
		d.z = l.rows(name, []int{kh * group, hid}, z)
	} else {
		d.qkv = l.weight(p+"in_proj_qkv.weight", d.convDim(), hid)
		d.z = l.weight(p+"in_proj_z.weight", vh*dv, hid)
	}
	if l.has(p + "in_proj_ba.weight") {
		// Per key head: b (r rows), a (r).
		var bo, ao []int
		for g := range kh {
			bo = appendRange(bo, g*2*r, g*2*r+r)
			ao = appendRange(ao, g*2*r+r, (g+1)*2*r)
		}
		name := p + "in_proj_ba.weight"
		d.b = l.rows(name, []int{2 * vh, hid}, bo)
		d.a = l.rows(name, []int{2 * vh, hid}, ao)
	} else {
		d.b = l.weight(p+"in_proj_b.weight", vh, hid)
		d.a = l.weight(p+"in_proj_a.weight", vh, hid)
	}
	d.conv = l.reshaped(p+"conv1d.weight", []int{d.convDim(), 1, k}, d.convDim(), k)
	d.convBias = l.optionalVector(p+"conv1d.bias", d.convDim())
	d.rule.ALog = l.vector(p+"A_log", vh)
	d.rule.DtBias = l.vector(p+"dt_bias", vh)
	d.norm = l.vector(p+"norm.weight", dv)
	d.out = l.weight(p+"out_proj.weight", hid, vh*dv)
	return d
}

// checkLinear validates the linear-attention keys of a config.
func checkLinear(cfg *Config) error {
	for _, k := range []struct {
		key string
		v   int
	}{
		{"linear_num_key_heads", cfg.LinearNumKeyHeads},
		{"linear_num_value_heads", cfg.LinearNumValueHeads},
		{"linear_key_head_dim", cfg.LinearKeyHeadDim},
		{"linear_value_head_dim", cfg.LinearValueHeadDim},
		{"linear_conv_kernel_dim", cfg.LinearConvKernelDim},
	} {
		if k.v <= 0 {
			return fmt.Errorf("config key %q is missing or zero; linear-attention layers need it", k.key)
		}
	}
	return nil
}

func appendRange(s []int, lo, hi int) []int {
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}
