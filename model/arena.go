package model

import "github.com/lem-engine/lem/compute"

// arena hands out the float32 activation buffers of one forward pass over
// chunks of n rows: one buffer per name, layer and width, allocated on
// first use and reused by every later pass of that length. Blocks name
// their own buffers ("attn.q", "mlp.gate"); a family names the residual
// stream and whatever it keeps between blocks. A buffer is only valid
// within one block unless its name is the family's.
//
// Each sequence's state owns its arenas (arenas), so that sequences never
// share activations. The arena of batched passes (Cache) holds buffers of
// capacity rows and hands out views of their first n rows, n changing from
// pass to pass (resize).
type arena struct {
	b    compute.Backend
	n    int
	bufs map[arenaKey]*compute.Tensor
	moe  *moeScratch // routing of mixture-of-experts blocks, made on first use
	sets map[string][]*compute.Tensor

	capacity int                          // rows of the buffers; n when 0
	views    map[arenaKey]*compute.Tensor // the first n rows of bufs
	moeAll   *moeScratch                  // moe's buffers of capacity rows
}

type arenaKey struct {
	name              string
	layer, rows, cols int
}

func (a *arena) buf(k arenaKey) *compute.Tensor {
	if a.capacity > 0 && k.rows == a.n {
		return a.view(k)
	}
	t, ok := a.bufs[k]
	if !ok {
		t = a.b.Alloc(compute.F32, k.rows, max(k.cols, 1))
		a.bufs[k] = t
	}
	return t
}

// view returns the first n rows of the buffer of capacity rows that k
// names (k.rows is n).
func (a *arena) view(k arenaKey) *compute.Tensor {
	if v, ok := a.views[k]; ok {
		return v
	}
	full := k
	full.rows = a.capacity
	t, ok := a.bufs[full]
	if !ok {
		t = a.b.Alloc(compute.F32, a.capacity, max(k.cols, 1))
		a.bufs[full] = t
	}
	v := t
	if a.n != a.capacity {
		v = a.b.View(t, 0, a.n)
	}
	a.views[k] = v
	return v
}

// newBatchArena returns an arena whose buffers hold capacity rows.
func newBatchArena(b compute.Backend, capacity int) *arena {
	return &arena{b: b, n: capacity, capacity: capacity,
		bufs: map[arenaKey]*compute.Tensor{}, views: map[arenaKey]*compute.Tensor{}}
}

// resize makes the buffers of a batch arena n rows long (n ≤ capacity).
func (a *arena) resize(n int) {
	if n == a.n {
		return
	}
	a.n = n
	clear(a.views)
	a.sets, a.moe = nil, nil
}

// rows returns a buffer [k, cols] called name, k at most n: the one-row
// buffer for k = 1, else the first k rows of a buffer of the arena's
// length.
func (a *arena) rows(name string, k, cols int) *compute.Tensor {
	if k == 1 {
		return a.row(name, cols)
	}
	t := a.get(name, cols)
	if k == t.Rows() {
		return t
	}
	return a.b.View(t, 0, k)
}

// free releases every buffer.
func (a *arena) free() {
	for _, t := range a.bufs {
		a.b.Free(t)
	}
	if s := a.moeAll; s != nil {
		for _, t := range []*compute.Tensor{s.logits, s.shared, s.ids, s.weights} {
			if t != nil {
				a.b.Free(t)
			}
		}
	}
	a.bufs, a.moeAll, a.moe = nil, nil, nil
}

// bytes returns the memory of the arena's buffers.
func (a *arena) bytes() int64 {
	var n int64
	for _, t := range a.bufs {
		n += tensorBytes(t)
	}
	if s := a.moeAll; s != nil {
		n += tensorBytes(s.logits, s.shared, s.ids, s.weights)
	}
	return n
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
	if a.moe != nil {
		return a.moe
	}
	if a.capacity == 0 {
		a.moe = newMoEScratch(a.b, a.n, blk)
		return a.moe
	}
	if a.moeAll == nil {
		a.moeAll = newMoEScratch(a.b, a.capacity, blk)
	}
	s := *a.moeAll
	if a.n != a.capacity {
		for _, t := range []**compute.Tensor{&s.logits, &s.shared, &s.ids, &s.weights} {
			if *t != nil {
				*t = a.b.View(*t, 0, a.n)
			}
		}
	}
	a.moe = &s
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
