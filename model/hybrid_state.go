package model

import "lem/compute"

// hybridState is the per-sequence memory of a hybrid stack: a KV cache per
// attention layer, and per linear-attention layer the convolution's last
// inputs and the delta-rule state, checkpointed by recurrentState.
type hybridState struct {
	*recurrentState[hybridScratch]
	conv  []*compute.Tensor // per layer: [K-1, convDim]; nil on attention layers
	delta []*compute.Tensor // per layer: [value heads, value dim, key dim]; nil on attention layers
}

// NewState implements Model.
func (m *hybrid) NewState(ctx int) State {
	st := &hybridState{
		recurrentState: newRecurrentState[hybridScratch](m.b, ctx),
		conv:           make([]*compute.Tensor, len(m.layers)),
		delta:          make([]*compute.Tensor, len(m.layers)),
	}
	st.caches = make([]*compute.KVCache, len(m.layers))
	for i, l := range m.layers {
		if a := l.attn; a != nil {
			st.caches[i] = m.b.NewKVCache(ctx, a.attn.KVHeads*a.attn.HeadDim, false)
			continue
		}
		d := l.linear
		st.conv[i] = st.recurrent(d.kernel-1, d.convDim())
		st.delta[i] = st.recurrent(d.rule.ValueHeads, d.rule.ValueDim, d.rule.KeyDim)
	}
	return st
}
