package model

import "github.com/lem-engine/lem/compute"

// kvState is the per-sequence state of the attention layers: a KV cache per
// layer that owns one (full-attention layers hold ctx positions,
// sliding-window layers a ring of their window), and the sequence's
// activation arenas. Stacks without recurrent layers use it as their State;
// recurrentState extends it.
type kvState struct {
	caches []*compute.KVCache // per layer; nil where the layer owns no cache
	// snaps holds, for sliding-window layers whose ring a later layer
	// reads, a copy of the ring taken before a chunk writes into it.
	snaps []*compute.KVCache
	ctx   int
	arenas
	one pass // the pass of Forward, reused (onePass)
}

// newKVState allocates the caches of the attention blocks attns, one per
// layer (nil for layers that do not attend).
func newKVState(b compute.Backend, attns []*attention, ctx int) *kvState {
	st := &kvState{
		ctx: ctx, arenas: newArenas(b),
		caches: make([]*compute.KVCache, len(attns)),
		snaps:  make([]*compute.KVCache, len(attns)),
	}
	for i, a := range attns {
		if a == nil || !a.ownsCache() {
			continue
		}
		capacity, ring := ctx, false
		if a.attn.Window > 0 && a.attn.Window < ctx {
			capacity, ring = a.attn.Window, true
		}
		kvDim := a.attn.KVHeads * a.attn.HeadDim
		st.caches[i] = b.NewKVCache(capacity, kvDim, ring)
		if ring && a.shared {
			st.snaps[i] = b.NewKVCache(capacity, kvDim, ring)
		}
	}
	return st
}

// Capacity implements State.
func (s *kvState) Capacity() int { return s.ctx }

// Memory implements State.
func (s *kvState) Memory() StateMemory {
	return StateMemory{KV: cacheBytes(s.caches...) + cacheBytes(s.snaps...)}
}

// CanRewind implements State. A ring of capacity c holds positions
// [length-c, length); continuing at n needs positions (n-window, n), which
// survive unless the ring wrapped past them.
func (s *kvState) CanRewind(n, length int) bool {
	for _, c := range s.caches {
		if c != nil && c.Ring && length > c.Capacity && n < length-1 {
			return false
		}
	}
	return true
}
