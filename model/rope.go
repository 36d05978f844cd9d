package model

import (
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// NewRope computes the rotary embedding of one layer type: the inverse
// frequency of each rotated pair and the scale applied to cos and sin,
// following the rope_type of the config (default, linear, dynamic, llama3,
// yarn, longrope, proportional).
//
// headDim is the head size of the layers it serves; maxPos the model's
// max_position_embeddings.
func NewRope(p RopeParams, headDim, maxPos int) (*compute.Rope, error) {
	if p.Type == "proportional" {
		return proportionalRope(p, headDim)
	}
	partial := p.PartialRotaryFactor
	if partial == 0 {
		partial = 1
	}
	dim := int(float64(headDim) * partial)
	dim -= dim % 2
	if dim <= 0 {
		return nil, fmt.Errorf("rope: %d rotary dimensions for head size %d", dim, headDim)
	}
	theta := p.Theta
	if theta == 0 {
		theta = 10000
	}
	// Frequencies are computed in float32 as the reference does, so that
	// positions far into the context rotate by the same angles.
	base := make([]float32, dim/2)
	for i := range base {
		exp := float32(2*i) / float32(dim)
		base[i] = 1 / float32(math.Pow(theta, float64(exp)))
	}
	r := &compute.Rope{Dims: dim, InvFreq: base, Scale: 1}
	switch p.Type {
	case "", "default":
	case "linear":
		for i := range base {
			base[i] /= float32(p.Factor)
		}
	case "dynamic":
		// At the trained length dynamic NTK equals the default rope; the
		// engine never extends beyond max_position_embeddings silently.
	case "llama3":
		llama3Rope(base, p)
	case "yarn":
		yarnRope(r, p, theta, maxPos)
	case "longrope":
		if len(p.ShortFactor) != dim/2 {
			return nil, fmt.Errorf("rope: longrope short_factor has %d values, want %d", len(p.ShortFactor), dim/2)
		}
		for i := range base {
			base[i] /= float32(p.ShortFactor[i])
		}
		orig := p.OriginalMaxPositionEmbeddings
		if orig > 0 && maxPos > orig {
			factor := float64(maxPos) / float64(orig)
			r.Scale = float32(math.Sqrt(1 + math.Log(factor)/math.Log(float64(orig))))
		}
		if p.AttentionFactor != 0 {
			r.Scale = float32(p.AttentionFactor)
		}
	default:
		return nil, fmt.Errorf("rope: unsupported rope_type %q", p.Type)
	}
	if len(p.FreqFactors) > 0 {
		if len(p.FreqFactors) != dim/2 {
			return nil, fmt.Errorf("rope: %d frequency factors for %d rotated pairs", len(p.FreqFactors), dim/2)
		}
		for i, f := range p.FreqFactors {
			if !(f > 0) {
				return nil, fmt.Errorf("rope: frequency factor %d is %g, not positive", i, f)
			}
			r.InvFreq[i] /= float32(f)
		}
	}
	r.Interleaved = p.Interleaved
	return r, nil
}

// fullRope builds the rotary embedding of a family's full-attention
// layers, of head_dim, as the hybrid families (LFM2, Falcon-H1, OLMo
// Hybrid) rotate them.
func fullRope(cfg *Config) (*compute.Rope, error) {
	r, err := NewRope(cfg.Rope(FullAttention), cfg.HeadDim, cfg.MaxPositionEmbeddings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	return r, nil
}

// proportionalRope is Gemma 4's partial rotary embedding of its global
// layers: the whole head is split in halves as usual, but only the first
// partial_rotary_factor of the pairs turn, at the frequencies a full-width
// rope would give them (exponents over headDim, not over the rotated
// width); the remaining pairs have frequency 0 and stay in place.
func proportionalRope(p RopeParams, headDim int) (*compute.Rope, error) {
	if headDim < 2 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: proportional rope needs an even head size, got %d", headDim)
	}
	partial := p.PartialRotaryFactor
	if partial == 0 {
		partial = 1
	}
	theta, factor := p.Theta, p.Factor
	if theta == 0 {
		theta = 10000
	}
	if factor == 0 {
		factor = 1
	}
	turning := int(math.Floor(partial * float64(headDim) / 2))
	inv := make([]float32, headDim/2)
	for i := range min(turning, len(inv)) {
		exp := float32(2*i) / float32(headDim)
		inv[i] = 1 / float32(math.Pow(theta, float64(exp))) / float32(factor)
	}
	return &compute.Rope{Dims: headDim, InvFreq: inv, Scale: 1}, nil
}

// llama3Rope applies Llama 3.1's frequency-dependent scaling: long
// wavelengths are divided by the factor, short ones kept, and the band
// between interpolated smoothly.
func llama3Rope(inv []float32, p RopeParams) {
	old := float64(p.OriginalMaxPositionEmbeddings)
	lowWave := old / p.LowFreqFactor
	highWave := old / p.HighFreqFactor
	for i, f := range inv {
		wave := 2 * math.Pi / float64(f)
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[i] = f / float32(p.Factor)
		default:
			smooth := (old/wave - p.LowFreqFactor) / (p.HighFreqFactor - p.LowFreqFactor)
			inv[i] = float32((1-smooth)*float64(f)/p.Factor + smooth*float64(f))
		}
	}
}

// yarnRope blends interpolated and extrapolated frequencies with a linear
// ramp between the correction dimensions and sets the attention factor.
func yarnRope(r *compute.Rope, p RopeParams, theta float64, maxPos int) {
	dim := r.Dims
	factor := p.Factor
	orig := p.OriginalMaxPositionEmbeddings
	if orig == 0 {
		orig = maxPos
	}
	// The factor is used as given, as transformers 5 does: older releases
	// replaced it by max_position_embeddings / original_max_position_embeddings
	// (the gpt_oss fixture, 512 / 4096 against a factor of 32, tells the two
	// apart).
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	attn := p.AttentionFactor
	if attn == 0 {
		if p.MScale != 0 && p.MScaleAllDim != 0 {
			attn = mscale(factor, p.MScale) / mscale(factor, p.MScaleAllDim)
		} else {
			attn = mscale(factor, 1)
		}
	}
	betaFast, betaSlow := p.BetaFast, p.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(float64(orig)/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	low, high := corr(betaFast), corr(betaSlow)
	if !p.NoTruncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	for i := range r.InvFreq {
		posFreq := float32(math.Pow(theta, float64(float32(2*i)/float32(dim))))
		extra := 1 / posFreq
		inter := 1 / (float32(factor) * posFreq)
		ramp := float32(min(max((float64(i)-low)/(high-low), 0), 1))
		ext := 1 - ramp
		r.InvFreq[i] = inter*(1-ext) + extra*ext
	}
	r.Scale = float32(attn)
}
