package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// maxCheckpoints bounds the checkpoints a recurrent state keeps. When a
// new one would exceed it, the one whose loss leaves the smallest gap is
// dropped, so that the survivors thin out towards the start of the
// sequence: recent boundaries (where a conversation's next turn usually
// diverges) stay close, while old ones still cover the whole prompt.
const maxCheckpoints = 8

// recurrentState is the per-sequence state of a model with recurrent
// layers: the KV state of the layers that attend (full caches: nothing is
// ever overwritten that a rewind would need), and recurrent tensors (SSM
// states, convolution windows) for the layers that fold each position in.
// It implements Recurrent by copying the recurrent tensors at
// checkpoints.
type recurrentState struct {
	*kvState
	b      compute.Backend
	rec    []*compute.Tensor // every recurrent tensor, F32
	length int               // positions folded in
	saved  []checkpoint      // by increasing length
	spare  [][]*compute.Tensor
	zero   []*compute.Tensor // zeros shaped like rec, made by the first rewind to 0
}

// checkpoint is a copy of the recurrent tensors after length positions.
type checkpoint struct {
	length int
	rec    []*compute.Tensor
}

var _ Recurrent = (*recurrentState)(nil)

// newRecurrentState returns the state of a stack whose attention layers are
// attns (nil for the recurrent ones); the recurrent tensors are added with
// recurrent.
func newRecurrentState(b compute.Backend, attns []*attention, ctx int) *recurrentState {
	return &recurrentState{kvState: newKVState(b, attns, ctx), b: b}
}

// recurrent allocates a zeroed recurrent tensor of the given shape.
func (s *recurrentState) recurrent(shape ...int) *compute.Tensor {
	t := s.b.Alloc(compute.F32, shape...)
	s.rec = append(s.rec, t)
	return t
}

// allocate allocates zeroed recurrent tensors of the given shapes.
func (s *recurrentState) allocate(shapes [][]int) {
	for _, shape := range shapes {
		s.recurrent(shape...)
	}
}

// Memory implements State.
func (s *recurrentState) Memory() StateMemory {
	m := StateMemory{KV: cacheBytes(s.caches...), Recurrent: tensorBytes(s.rec...)}
	for _, c := range s.saved {
		m.Checkpoints += tensorBytes(c.rec...)
	}
	for _, rec := range s.spare {
		m.Checkpoints += tensorBytes(rec...)
	}
	m.Checkpoints += tensorBytes(s.zero...)
	return m
}

// CanRewind implements State: a state with recurrent tensors can only
// stay where it is (rewinding goes through Restore); one without can
// rewind anywhere.
func (s *recurrentState) CanRewind(n, length int) bool { return n == length || len(s.rec) == 0 }

// advance records that n more positions have been folded in.
func (s *recurrentState) advance(n int) { s.length += n }

// Advance implements Recurrent.
func (s *recurrentState) Advance(n int) { s.advance(n) }

// copyAll copies the tensors of src into dst, one by one.
func (s *recurrentState) copyAll(dst, src []*compute.Tensor) {
	for i, t := range src {
		s.b.Columns(dst[i], t, 0)
	}
}

// Checkpoint implements Recurrent.
func (s *recurrentState) Checkpoint(length int) {
	if length != s.length {
		panic(fmt.Sprintf("recurrent state: checkpoint at %d, but the state holds %d positions", length, s.length))
	}
	s.dropFrom(length)
	if len(s.saved) == maxCheckpoints {
		s.evict()
	}
	var rec []*compute.Tensor
	if n := len(s.spare); n > 0 {
		rec, s.spare = s.spare[n-1], s.spare[:n-1]
	} else {
		for _, t := range s.rec {
			rec = append(rec, s.b.Alloc(compute.F32, t.Shape...))
		}
	}
	s.copyAll(rec, s.rec)
	s.saved = append(s.saved, checkpoint{length: length, rec: rec})
}

// dropFrom discards the checkpoints at length n and later.
func (s *recurrentState) dropFrom(n int) {
	for len(s.saved) > 0 && s.saved[len(s.saved)-1].length >= n {
		s.spare = append(s.spare, s.saved[len(s.saved)-1].rec)
		s.saved = s.saved[:len(s.saved)-1]
	}
}

// evict drops one checkpoint: the one between the closest neighbours, or
// the oldest when there are too few to choose.
func (s *recurrentState) evict() {
	drop, gap := 0, -1
	for i := 1; i+1 < len(s.saved); i++ {
		if g := s.saved[i+1].length - s.saved[i-1].length; gap < 0 || g < gap {
			drop, gap = i, g
		}
	}
	s.spare = append(s.spare, s.saved[drop].rec)
	s.saved = append(s.saved[:drop], s.saved[drop+1:]...)
}

// Restore implements Recurrent. The attention caches need no copying:
// positions from the restored length on are simply written again.
func (s *recurrentState) Restore(n int) int {
	if n >= s.length {
		return s.length
	}
	s.dropFrom(n + 1)
	if len(s.rec) == 0 {
		// Only full attention caches (an LFM2 whose layers all attend):
		// any prefix is a state to continue from.
		s.length = n
		return n
	}
	if k := len(s.saved); k > 0 {
		c := s.saved[k-1]
		s.copyAll(s.rec, c.rec)
		s.length = c.length
		return s.length
	}
	if s.zero == nil {
		for _, t := range s.rec {
			s.zero = append(s.zero, s.b.Alloc(compute.F32, t.Shape...))
		}
	}
	s.copyAll(s.rec, s.zero)
	s.length = 0
	return 0
}
