package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// wordCache remembers the ids of pre-tokens. It is an open-addressing hash
// table of fixed size whose slots are filled once and never changed, so
// lookups take no lock and many goroutines can share it. Once the probe
// window of a key is full the key is not cached.
type wordCache struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Pointer[cacheEntry]
}

type cacheEntry struct {
	key string
	ids []int32
}

const cacheProbes = 8

// newWordCache returns a cache of size slots (a power of two).
func newWordCache(size int) *wordCache {
	return &wordCache{
		seed:  maphash.MakeSeed(),
		mask:  uint64(size - 1),
		slots: make([]atomic.Pointer[cacheEntry], size),
	}
}

func (c *wordCache) get(key string) ([]int32, bool) {
	h := maphash.String(c.seed, key)
	for i := uint64(0); i < cacheProbes; i++ {
		e := c.slots[(h+i)&c.mask].Load()
		if e == nil {
			return nil, false
		}
		if e.key == key {
			return e.ids, true
		}
	}
	return nil, false
}

func (c *wordCache) put(key string, ids []int32) {
	// Clone the key: it points into the caller's text.
	e := &cacheEntry{key: strings.Clone(key), ids: append([]int32(nil), ids...)}
	h := maphash.String(c.seed, key)
	for i := uint64(0); i < cacheProbes; i++ {
		s := &c.slots[(h+i)&c.mask]
		if s.CompareAndSwap(nil, e) {
			return
		}
		if s.Load().key == key {
			return // another goroutine got there first
		}
	}
}
