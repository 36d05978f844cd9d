package engine

import (
	"slices"
	"testing"
)

func TestHashChain(t *testing.T) {
	h := newHasher()
	a := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	b := []int32{1, 2, 3, 4, 5, 0, 7, 8, 9}
	ka := h.chain(nil, a, 2)
	kb := h.chain(nil, b, 2)
	if len(ka) != 4 || len(kb) != 4 {
		t.Fatalf("chain of 9 tokens in blocks of 2: %d and %d keys, want 4", len(ka), len(kb))
	}
	// Blocks before the difference agree; the block with it and every
	// later one differ, although blocks 3 hold the same tokens.
	for j, want := range []bool{true, true, false, false} {
		if (ka[j] == kb[j]) != want {
			t.Errorf("block %d: keys equal = %v, want %v", j, ka[j] == kb[j], want)
		}
	}
	// Extending a chain computes only the new keys, the same as at once.
	part := h.chain(nil, a[:4], 2)
	if got := h.chain(part, a, 2); !slices.Equal(got, ka) {
		t.Errorf("extended chain %v, want %v", got, ka)
	}
	// The same tokens after another parent name another block.
	if h.key(blockKey{}, a[:2]) == h.key(ka[0], a[:2]) {
		t.Error("a block's key does not depend on its parent")
	}
}

func TestBlockPool(t *testing.T) {
	p := newBlockPool(3)
	var got []int32
	for range 3 {
		b, ok := p.alloc()
		if !ok {
			t.Fatal("alloc failed with free blocks left")
		}
		got = append(got, b)
	}
	if _, ok := p.alloc(); ok {
		t.Fatal("alloc succeeded on a full pool")
	}
	if p.used != 3 || p.available() != 0 {
		t.Fatalf("used %d available %d, want 3 and 0", p.used, p.available())
	}
	k0, k1 := blockKey{1, 1}, blockKey{2, 1}
	p.register(got[0], k0)
	p.register(got[1], k1)
	p.register(got[2], k0) // another block holds k0: stays unnamed
	// A shared block survives one release.
	p.retain(got[0])
	p.release(got[0])
	if p.ref[got[0]] != 1 || p.used != 3 {
		t.Fatalf("after retain and release: ref %d used %d", p.ref[got[0]], p.used)
	}
	// Released named blocks stay cached, unnamed ones go free.
	p.release(got[1]) // least recently used
	p.release(got[0])
	p.release(got[2])
	if p.used != 0 || p.available() != 3 || len(p.free) != 1 || p.lru != 2 {
		t.Fatalf("after releases: used %d available %d free %d cached %d", p.used, p.available(), len(p.free), p.lru)
	}
	if b, ok := p.lookup(k0); !ok || b != got[0] {
		t.Fatalf("lookup k0 = %d, %v; want %d", b, ok, got[0])
	}
	// A hit taken again leaves the LRU list.
	p.retain(got[0])
	if p.lru != 1 || p.used != 1 {
		t.Fatalf("after a hit: cached %d used %d", p.lru, p.used)
	}
	p.release(got[0])
	// Allocation takes the free block first, then evicts the least
	// recently used cached block (k1, released first).
	if b, _ := p.alloc(); b != got[2] {
		t.Fatalf("alloc took %d, want the free block %d", b, got[2])
	}
	if b, _ := p.alloc(); b != got[1] {
		t.Fatalf("alloc evicted %d, want %d (least recently used)", b, got[1])
	}
	if _, ok := p.lookup(k1); ok {
		t.Error("evicted block still found by its key")
	}
	if _, ok := p.lookup(k0); !ok {
		t.Error("recently used block evicted")
	}
	if b, _ := p.alloc(); b != got[0] {
		t.Fatalf("alloc evicted %d, want %d", b, got[0])
	}
	if _, ok := p.alloc(); ok || p.available() != 0 || p.used != 3 {
		t.Fatalf("pool not full after taking every block: available %d used %d", p.available(), p.used)
	}
}
