package model

import (
	"fmt"

	"lem/compute"
)

// maxCheckpoints bounds the recurrent-state checkpoints a hybrid state
// keeps: the most recent ones, which are the ones a chat's next turn
// rewinds to.
const maxCheckpoints = 4

// hybridState is the per-sequence memory of a hybrid stack: a KV cache per
// attention layer, and per linear-attention layer the convolution's last
// inputs and the delta-rule states. It implements Recurrent.
type hybridState struct {
	b       compute.Backend
	ctx     int
	caches  []*compute.KVCache // per layer; nil on linear-attention layers
	conv    []*compute.Tensor  // per layer: [K-1, convDim]; nil on attention layers
	delta   []*compute.Tensor  // per layer: [value heads, value dim, key dim]
	scratch map[int]*hybridScratch

	// checkpoints, oldest first, hold copies of conv and delta. The KV
	// caches need none: positions past a checkpoint are overwritten when
	// the sequence continues from it.
	checkpoints []*checkpoint
	spare       *checkpoint                // the buffers of a dropped checkpoint, for reuse
	zeros       map[string]*compute.Tensor // zeroed tensors by shape
}

// checkpoint is the recurrent part of a state after length positions.
type checkpoint struct {
	length      int
	conv, delta []*compute.Tensor
}

// NewState implements Model.
func (m *hybrid) NewState(ctx int) State {
	st := &hybridState{
		b: m.b, ctx: ctx, scratch: map[int]*hybridScratch{},
		caches: make([]*compute.KVCache, len(m.layers)),
		conv:   make([]*compute.Tensor, len(m.layers)),
		delta:  make([]*compute.Tensor, len(m.layers)),
	}
	for i, l := range m.layers {
		if a := l.attn; a != nil {
			st.caches[i] = m.b.NewKVCache(ctx, a.attn.KVHeads*a.attn.HeadDim, false)
			continue
		}
		d := l.linear
		st.conv[i] = m.b.Alloc(compute.F32, d.kernel-1, d.convDim())
		st.delta[i] = m.b.Alloc(compute.F32, d.rule.ValueHeads, d.rule.ValueDim, d.rule.KeyDim)
	}
	return st
}

func (s *hybridState) Capacity() int { return s.ctx }

// CanRewind implements State; the engine rewinds a hybrid state through
// Recurrent instead, and it can only stay where it is.
func (s *hybridState) CanRewind(n, length int) bool { return n == length }

// Checkpoint implements Recurrent.
func (s *hybridState) Checkpoint(length int) {
	var cp *checkpoint
	switch k := len(s.checkpoints); {
	case k > 0 && s.checkpoints[k-1].length >= length:
		// Replace checkpoints the sequence has moved back behind.
		for k > 0 && s.checkpoints[k-1].length >= length {
			k--
		}
		cp = s.checkpoints[k]
		s.checkpoints = s.checkpoints[:k]
	case k == maxCheckpoints:
		cp = s.checkpoints[0]
		s.checkpoints = append(s.checkpoints[:0], s.checkpoints[1:]...)
	case s.spare != nil:
		cp, s.spare = s.spare, nil
	default:
		cp = &checkpoint{conv: s.like(s.conv), delta: s.like(s.delta)}
	}
	cp.length = length
	s.copy(cp.conv, s.conv)
	s.copy(cp.delta, s.delta)
	s.checkpoints = append(s.checkpoints, cp)
}

// Restore implements Recurrent.
func (s *hybridState) Restore(n int) int {
	k := len(s.checkpoints)
	for k > 0 && s.checkpoints[k-1].length > n {
		k--
	}
	if k < len(s.checkpoints) {
		s.spare = s.checkpoints[k]
	}
	s.checkpoints = s.checkpoints[:k]
	if k == 0 {
		s.zero(s.conv)
		s.zero(s.delta)
		return 0
	}
	cp := s.checkpoints[k-1]
	s.copy(s.conv, cp.conv)
	s.copy(s.delta, cp.delta)
	return cp.length
}

// like allocates tensors of the shapes of ts (nil where ts has nil).
func (s *hybridState) like(ts []*compute.Tensor) []*compute.Tensor {
	out := make([]*compute.Tensor, len(ts))
	for i, t := range ts {
		if t != nil {
			out[i] = s.b.Alloc(compute.F32, t.Shape...)
		}
	}
	return out
}

// copy copies src into dst tensor by tensor, on the backend.
func (s *hybridState) copy(dst, src []*compute.Tensor) {
	for i, t := range src {
		if t != nil {
			s.b.Columns(dst[i], t, 0)
		}
	}
}

// zero clears the tensors by copying from a zeroed one of the same shape,
// so that a state in use by a recorded decode graph keeps its buffers.
func (s *hybridState) zero(ts []*compute.Tensor) {
	if s.zeros == nil {
		s.zeros = map[string]*compute.Tensor{}
	}
	for _, t := range ts {
		if t == nil {
			continue
		}
		key := fmt.Sprint(t.Shape)
		z := s.zeros[key]
		if z == nil {
			z = s.b.Alloc(compute.F32, t.Shape...)
			s.zeros[key] = z
		}
		s.b.Columns(t, z, 0)
	}
}
