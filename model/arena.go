package model

import "lem/compute"

// arena hands out the float32 activation buffers of one forward pass over
// chunks of n rows: one buffer per name, layer and width, allocated on
// first use and reused by every later pass of that length. Blocks name
// their own buffers ("attn.q", "mlp.gate"); a family names the residual
// stream and whatever it keeps between blocks. A buffer is only valid
// within one block unless its name is the family's.
//
// Each sequence's state owns its arenas (arenas), so that sequences never
// share activations.
type arena struct {
	b    compute.Backend
	n    int
	bufs map[arenaKey]*compute.Tensor
	moe  *moeScratch // routing of mixture-of-experts blocks, made on first use
	sets map[string][]*compute.Tensor
}

type arenaKey struct {
	name              string
	layer, rows, cols int
}

func (a *arena) buf(k arenaKey) *compute.Tensor {
	t, ok := a.bufs[k]
	if !ok {
		t = a.b.Alloc(compute.F32, k.rows, max(k.cols, 1))
		a.bufs[k] = t
	}
	return t
}

// get returns the buffer [n, cols] called name.
func (a *arena) get(name string, cols int) *compute.Tensor {
	return a.buf(arenaKey{name: name, layer: -1, rows: a.n, cols: cols})
}

// layer returns layer i's own buffer [n, cols] called name.
func (a *arena) layer(name string, i, cols int) *compute.Tensor {
	return a.buf(arenaKey{name: name, layer: i, rows: a.n, cols: cols})
}

// set returns k buffers [n, cols] called name.
func (a *arena) set(name string, k, cols int) []*compute.Tensor {
	if ts, ok := a.sets[name]; ok {
		return ts
	}
	ts := make([]*compute.Tensor, k)
	for j := range ts {
		ts[j] = a.layer(name, j, cols)
	}
	if a.sets == nil {
		a.sets = map[string][]*compute.Tensor{}
	}
	a.sets[name] = ts
	return ts
}

// row returns the buffer [1, cols] called name.
func (a *arena) row(name string, cols int) *compute.Tensor {
	return a.buf(arenaKey{name: name, layer: -1, rows: 1, cols: cols})
}

// moeFor returns the routing scratch of the mixture-of-experts blocks, shaped
// like blk's routing (every block of a model routes alike).
func (a *arena) moeFor(blk *moeBlock) *moeScratch {
	if a.moe == nil {
		a.moe = newMoEScratch(a.b, a.n, blk)
	}
	return a.moe
}

// arenas keeps a sequence's arenas: that of decode steps (one row) and that
// of the most recent chunk length.
type arenas struct {
	b   compute.Backend
	byN map[int]*arena
}

func newArenas(b compute.Backend) arenas { return arenas{b: b, byN: map[int]*arena{}} }

// arenaFor returns the arena of chunks of n rows.
func (s *arenas) arenaFor(n int) *arena {
	if a, ok := s.byN[n]; ok {
		return a
	}
	for k := range s.byN {
		if k != 1 {
			delete(s.byN, k)
		}
	}
	a := &arena{b: s.b, n: n, bufs: map[arenaKey]*compute.Tensor{}}
	s.byN[n] = a
	return a
}
