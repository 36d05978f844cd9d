package model

import (
	"fmt"

	"lem/compute"
)

// The attention layers that hybrid families (LFM2, Falcon-H1) put beside
// their recurrent layers.

// loadHybridAttention reads layer i's attention block under prefix: heads
// of head_dim over a full KV cache, per-head q/k norms where names has them.
func loadHybridAttention(l *loader, cfg *Config, i int, prefix string, names attnNames, rope *compute.Rope) *attention {
	a := newAttention(i, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim, float32(cfg.NormEps()), rope)
	a.load(l, prefix, cfg.HiddenSize, names)
	return &a
}

// fullRope builds the rotary embedding of a hybrid family's attention
// layers.
func fullRope(cfg *Config) (*compute.Rope, error) {
	r, err := NewRope(cfg.Rope(FullAttention), cfg.HeadDim, cfg.MaxPositionEmbeddings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	return r, nil
}
