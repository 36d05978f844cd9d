package model

import "lem/compute"

// hybridState is the per-sequence memory of a hybrid stack: a KV cache per
// attention layer, and per linear-attention layer the convolution's last
// inputs and the delta-rule state, checkpointed by recurrentState.
type hybridState struct {
	*recurrentState
	conv  []*compute.Tensor // per layer: [K-1, convDim]; nil on attention layers
	delta []*compute.Tensor // per layer: [value heads, value dim, key dim]; nil on attention layers
}

// NewState implements Model.
func (m *hybrid) NewState(ctx int) State {
	attns := make([]*attention, len(m.layers))
	for i, l := range m.layers {
		attns[i] = l.attn
	}
	st := &hybridState{
		recurrentState: newRecurrentState(m.b, attns, ctx),
		conv:           make([]*compute.Tensor, len(m.layers)),
		delta:          make([]*compute.Tensor, len(m.layers)),
	}
	for i, l := range m.layers {
		if l.attn != nil {
			continue
		}
		d := l.linear
		st.conv[i] = st.recurrent(d.kernel-1, d.convDim())
		st.delta[i] = st.recurrent(d.rule.ValueHeads, d.rule.ValueDim, d.rule.KeyDim)
	}
	return st
}
