package engine

import (
	"encoding/binary"
	"hash/maphash"
)

// The paged cache's bookkeeping: each group of attention layers (see
// model.KVGroup) has a pool of fixed-size blocks. A block is free,
// referenced by running sequences (its reference count), or cached: full,
// named by the hash of its content and unreferenced, kept for a later
// sequence with the same prefix until the pool needs room, least recently
// used first.

// blockKey names a full block's content: a hash of its parent block's key
// and its own token ids, so that equal keys mean equal prefixes.
type blockKey struct{ a, b uint64 }

// hasher computes block keys. Its seeds are random per process: keys are
// never stored.
type hasher struct {
	sa, sb maphash.Seed
	buf    []byte
}

func newHasher() *hasher { return &hasher{sa: maphash.MakeSeed(), sb: maphash.MakeSeed()} }

// key returns the key of a block of tokens after the block named parent
// (the zero key for the first block).
func (h *hasher) key(parent blockKey, tokens []int32) blockKey {
	b := h.buf[:0]
	b = binary.LittleEndian.AppendUint64(b, parent.a)
	b = binary.LittleEndian.AppendUint64(b, parent.b)
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	h.buf = b
	return blockKey{maphash.Bytes(h.sa, b), maphash.Bytes(h.sb, b) | 1}
}

// chain returns the keys of the full blocks of tokens, reusing the first
// keys of known (those of a prefix of tokens).
func (h *hasher) chain(known []blockKey, tokens []int32, size int) []blockKey {
	n := len(tokens) / size
	for j := len(known); j < n; j++ {
		var parent blockKey
		if j > 0 {
			parent = known[j-1]
		}
		known = append(known, h.key(parent, tokens[j*size:(j+1)*size]))
	}
	return known
}

// blockPool is the blocks of one group.
type blockPool struct {
	ref    []int32
	key    []blockKey // of cached (hashed) blocks; zero when not hashed
	free   []int32    // unreferenced and unhashed
	cached map[blockKey]int32
	// The unreferenced hashed blocks, least recently used first: a
	// doubly linked list through prev and next, with node len(ref) as
	// its head.
	prev, next []int32
	lru        int // blocks on the list
	used       int // referenced blocks
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		ref: make([]int32, n), key: make([]blockKey, n),
		cached: map[blockKey]int32{},
		prev:   make([]int32, n+1), next: make([]int32, n+1),
	}
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, int32(i))
	}
	p.prev[n], p.next[n] = int32(n), int32(n)
	return p
}

// size returns the number of blocks.
func (p *blockPool) size() int { return len(p.ref) }

// available returns the blocks alloc can still return.
func (p *blockPool) available() int { return len(p.free) + p.lru }

func (p *blockPool) unlink(b int32) {
	p.next[p.prev[b]] = p.next[b]
	p.prev[p.next[b]] = p.prev[b]
	p.lru--
}

// pushLRU puts b at the most recently used end.
func (p *blockPool) pushLRU(b int32) {
	h := int32(len(p.ref))
	last := p.prev[h]
	p.prev[b], p.next[b] = last, h
	p.next[last], p.prev[h] = b, b
	p.lru++
}

// alloc returns a referenced block, taking a free one or else evicting
// the least recently used cached one; ok is false when neither is left.
func (p *blockPool) alloc() (b int32, ok bool) {
	switch {
	case len(p.free) > 0:
		b = p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
	case p.lru > 0:
		b = p.next[len(p.ref)]
		p.unlink(b)
		delete(p.cached, p.key[b])
		p.key[b] = blockKey{}
	default:
		return -1, false
	}
	p.ref[b] = 1
	p.used++
	return b, true
}

// retain adds a reference to b.
func (p *blockPool) retain(b int32) {
	if p.ref[b] == 0 {
		if p.key[b] != (blockKey{}) {
			p.unlink(b)
		}
		p.used++
	}
	p.ref[b]++
}

// release drops a reference to b; an unreferenced block stays cached
// when it is hashed and goes back to the free list otherwise.
func (p *blockPool) release(b int32) {
	p.ref[b]--
	if p.ref[b] > 0 {
		return
	}
	p.used--
	if p.key[b] != (blockKey{}) {
		p.pushLRU(b)
	} else {
		p.free = append(p.free, b)
	}
}

// lookup returns the cached block with key k.
func (p *blockPool) lookup(k blockKey) (int32, bool) {
	b, ok := p.cached[k]
	return b, ok
}

// register names the referenced full block b by k, so that later
// sequences may share it. It does nothing when b is named already or
// another block holds k.
func (p *blockPool) register(b int32, k blockKey) {
	if p.key[b] != (blockKey{}) {
		return
	}
	if _, ok := p.cached[k]; ok {
		return
	}
	p.cached[k] = b
	p.key[b] = k
}
