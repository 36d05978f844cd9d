package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// Batched passes: one forward pass over the rows of many sequences, their
// keys and values in paged pools (compute.Pages) shared by all sequences,
// their recurrent state (where the family has some) in numbered slots.
// Rows that are not attention compute the same for every sequence and run
// over the whole batch at once; attention reads each row's own sequence
// through the block tables, and recurrent layers run each sequence's rows
// over its own slot.

// Batched is implemented by every family's model.
type Batched interface {
	// KVLayout describes the model's paged memory.
	KVLayout() KVLayout
	// NewCache allocates the memory of batched passes.
	NewCache(spec CacheSpec) (*Cache, error)
	// ForwardBatch runs one batched pass (see Batch).
	ForwardBatch(c *Cache, bt *Batch)
}

// Every family's model runs batched passes.
var (
	_ Batched = (*dense)(nil)
	_ Batched = (*gemma4)(nil)
	_ Batched = (*gemma3n)(nil)
	_ Batched = (*mamba2)(nil)
	_ Batched = (*lfm2)(nil)
	_ Batched = (*falconH1)(nil)
	_ Batched = (*hybrid)(nil)
	_ Batched = (*olmoHybrid)(nil)
)

// KVLayout is what a model keeps per position and per sequence.
type KVLayout struct {
	// Groups are the sets of attention layers that keep the same
	// positions and so share a block table per sequence: full-attention
	// layers, and the layers of each sliding window. Empty for a model
	// without attention.
	Groups []KVGroup
	// StateBytes is the memory of one recurrent state slot (0 when the
	// model has no recurrent layers).
	StateBytes int64
}

// KVGroup is one set of attention layers with the same positions.
type KVGroup struct {
	// Window is the positions a query sees, its own included, in every
	// layer of the group; 0 means all.
	Window int
	// Layers are the layers whose keys and values the group's blocks hold
	// (KV-shared layers read their source's and are not listed).
	Layers []int
	// PositionBytes is the memory one position takes over those layers.
	PositionBytes int64
}

// CacheSpec sizes a Cache.
type CacheSpec struct {
	// BlockSize is the positions per block, the same for every group.
	BlockSize int
	// Blocks is the number of blocks of each group, in KVLayout order.
	Blocks []int
	// States is the number of recurrent state slots: one per running
	// sequence plus the checkpoints kept for prefix reuse. 0 for a model
	// without recurrent layers.
	States int
}

// Batch is the input of one ForwardBatch: n rows, each sequence's rows
// consecutive and at consecutive positions.
type Batch struct {
	// IDs and Pos (I32, [n]) are the tokens and positions of the rows.
	IDs, Pos *compute.Tensor
	// Pages lays the rows over each group's pool, in KVLayout order.
	Pages []compute.Pages
	// Seqs are the sequences of the pass in row order; their Rows sum to n.
	Seqs []BatchSeq
	// Logits, when not nil, receives [k, vocab]: for each sequence that
	// asks, in order, the logits of its last row, or of every row with
	// AllLogits. nil when no sequence asks.
	Logits *compute.Tensor
	// Hidden, when not nil, receives [k, hidden size]: for each sequence
	// that asks (BatchSeq.Hidden, AllHidden), in order, the final hidden
	// states (after the final norm, before the output head) of its last
	// row or of every row. nil when no sequence asks. A pass with Hidden
	// and no Logits skips the output head.
	Hidden *compute.Tensor
}

// BatchSeq is one sequence's part of a Batch.
type BatchSeq struct {
	// Rows is the number of rows it contributes.
	Rows int
	// State is its recurrent state slot; -1 for a model without one.
	State int
	// Logits asks for its last row's logits; AllLogits for every row's.
	Logits, AllLogits bool
	// Hidden asks for its last row's final hidden state; AllHidden for
	// every row's (see Batch.Hidden).
	Hidden, AllHidden bool
}

// Cache is the memory of a model's batched passes: a key/value pool per
// attention layer that owns a cache (Capacity = blocks × BlockSize of its
// group), the recurrent state slots, and the activation buffers of the
// passes. It is used by one goroutine at a time.
type Cache struct {
	spec   CacheSpec
	layout KVLayout
	b      compute.Backend
	pager  compute.Pager

	pools []*compute.KVCache // per layer; nil where the layer owns no cache
	group []int              // per layer: the group of the keys and values it reads; -1 where it attends to none

	states [][]*compute.Tensor // per slot: the model's recurrent tensors
	zero   []*compute.Tensor   // zeros shaped like a slot, made by the first ResetState

	ar    *arena          // activations, grown to the longest pass
	pick  *compute.Tensor // I32: the rows whose logits a pass writes, grown as needed
	hpick *compute.Tensor // I32: the rows whose hidden states a pass writes
	seqs  []passSeq
}

// Spec returns the sizes the cache was made with.
func (c *Cache) Spec() CacheSpec { return c.spec }

// Memory returns the bytes the cache holds on its backend: pools, state
// slots and activation buffers.
func (c *Cache) Memory() int64 {
	n := cacheBytes(c.pools...) + tensorBytes(c.zero...) + tensorBytes(c.pick, c.hpick)
	for _, s := range c.states {
		n += tensorBytes(s...)
	}
	if c.ar != nil {
		n += c.ar.bytes()
	}
	return n
}

// BlockBytes returns the bytes of one block of group g as SaveBlock
// writes them (the keys and values of every layer of the group), or 0
// when the backend cannot copy blocks to the host (compute.RowMover).
func (c *Cache) BlockBytes(g int) int {
	if _, ok := c.b.(compute.RowMover); !ok {
		return 0
	}
	n := 0
	for _, i := range c.layout.Groups[g].Layers {
		for _, t := range []*compute.Tensor{c.pools[i].K, c.pools[i].V} {
			n += c.spec.BlockSize * rowBytesOf(t)
		}
	}
	return n
}

// rowBytesOf returns the bytes of one row of t as stored.
func rowBytesOf(t *compute.Tensor) int {
	rb, _ := t.DType.RowBytes(t.Cols())
	return rb
}

// SaveBlock copies block b of group g to dst, BlockBytes(g) bytes on the
// host, which hold it once BlocksSaved returns; LoadBlock copies them back
// into block b (or another block of the group).
func (c *Cache) SaveBlock(g int, b int32, dst []byte) { c.moveBlock(g, b, dst, false) }

// BlocksSaved waits for the copies SaveBlock started and returns the
// backend's error, if any (the copies are then not to be used).
func (c *Cache) BlocksSaved() error { return c.b.(compute.RowMover).SavedRows() }

// LoadBlock is SaveBlock's reverse.
func (c *Cache) LoadBlock(g int, b int32, src []byte) { c.moveBlock(g, b, src, true) }

func (c *Cache) moveBlock(g int, b int32, buf []byte, load bool) {
	mv := c.b.(compute.RowMover)
	lo := int(b) * c.spec.BlockSize
	hi := lo + c.spec.BlockSize
	for _, i := range c.layout.Groups[g].Layers {
		for _, t := range []*compute.Tensor{c.pools[i].K, c.pools[i].V} {
			n := c.spec.BlockSize * rowBytesOf(t)
			if load {
				mv.LoadRows(t, lo, buf[:n])
			} else {
				mv.SaveRows(buf[:n], t, lo, hi)
			}
			buf = buf[n:]
		}
	}
}

// ResetState zeroes state slot i: a sequence starting from nothing.
func (c *Cache) ResetState(i int) {
	c.checkSlot(i)
	if c.zero == nil {
		for _, t := range c.states[i] {
			c.zero = append(c.zero, c.b.Alloc(compute.F32, t.Shape...))
		}
	}
	for j, t := range c.states[i] {
		c.b.Columns(t, c.zero[j], 0)
	}
}

// CopyState copies state slot src into slot dst (a checkpoint saved or
// restored).
func (c *Cache) CopyState(dst, src int) {
	c.checkSlot(dst)
	c.checkSlot(src)
	if dst == src {
		return
	}
	for j, t := range c.states[src] {
		c.b.Columns(c.states[dst][j], t, 0)
	}
}

func (c *Cache) checkSlot(i int) {
	if i < 0 || i >= len(c.states) {
		panic(fmt.Sprintf("model: state slot %d of %d", i, len(c.states)))
	}
}

// stack is what a family tells the shared Cache code about its layers:
// the attention block of each layer (nil where it has none) and the shapes
// of one sequence's recurrent tensors, in the order its layers index them.
type stack struct {
	attns []*attention
	rec   [][]int
}

// layout returns the KVLayout of the stack on backend b: full-attention
// layers in one group, first; each distinct window in a group of its own,
// in order of first appearance.
func (s stack) layout(b compute.Backend) (KVLayout, []int) {
	elem := int64(compute.F32.Size())
	if kp, ok := b.(compute.KVPooler); ok {
		elem = int64(kp.KVPoolType().Size())
	}
	var l KVLayout
	group := make([]int, len(s.attns))
	byWindow := map[int]int{}
	for i, a := range s.attns {
		group[i] = -1
		if a == nil || !a.ownsCache() {
			continue
		}
		w := a.attn.Window
		g, ok := byWindow[w]
		if !ok {
			g = len(l.Groups)
			byWindow[w] = g
			l.Groups = append(l.Groups, KVGroup{Window: w})
		}
		kvDim := a.attn.KVHeads * a.attn.HeadDim
		l.Groups[g].Layers = append(l.Groups[g].Layers, i)
		// Two rows (a key and a value) per position, of the pool's type.
		l.Groups[g].PositionBytes += 2 * int64(kvDim) * elem
		group[i] = g
	}
	// Full attention first.
	if g, ok := byWindow[0]; ok && g != 0 {
		l.Groups[0], l.Groups[g] = l.Groups[g], l.Groups[0]
		for i, gi := range group {
			switch gi {
			case 0:
				group[i] = g
			case g:
				group[i] = 0
			}
		}
	}
	for i, a := range s.attns {
		if a != nil && !a.ownsCache() {
			group[i] = group[a.source]
		}
	}
	for _, shape := range s.rec {
		l.StateBytes += 4 * int64(shapeLen(shape))
	}
	return l, group
}

// newCache allocates the memory of batched passes of the stack.
func (s stack) newCache(b compute.Backend, spec CacheSpec) (*Cache, error) {
	layout, group := s.layout(b)
	c := &Cache{spec: spec, layout: layout, b: b, group: group, pools: make([]*compute.KVCache, len(s.attns))}
	if len(layout.Groups) > 0 {
		pg, ok := b.(compute.Pager)
		if !ok {
			return nil, fmt.Errorf("backend %s cannot attend over paged caches (compute.Pager), which batched passes need", b.Name())
		}
		c.pager = pg
		if spec.BlockSize <= 0 {
			return nil, fmt.Errorf("cache block size %d: want a positive number of positions", spec.BlockSize)
		}
	}
	if len(spec.Blocks) != len(layout.Groups) {
		return nil, fmt.Errorf("cache spec has block counts for %d groups; the model has %d", len(spec.Blocks), len(layout.Groups))
	}
	for g, n := range spec.Blocks {
		if n <= 0 {
			return nil, fmt.Errorf("cache group %d: %d blocks, want at least one", g, n)
		}
	}
	switch {
	case spec.States < 0:
		return nil, fmt.Errorf("cache spec: %d state slots", spec.States)
	case len(s.rec) > 0 && spec.States == 0:
		return nil, fmt.Errorf("cache spec: no state slots for a model with recurrent layers")
	}
	kp, pooled := b.(compute.KVPooler)
	for g, grp := range layout.Groups {
		for _, i := range grp.Layers {
			a := s.attns[i]
			kvDim := a.attn.KVHeads * a.attn.HeadDim
			if pooled {
				c.pools[i] = kp.NewKVPool(spec.Blocks[g], spec.BlockSize, kvDim)
			} else {
				c.pools[i] = b.NewKVCache(spec.Blocks[g]*spec.BlockSize, kvDim, false)
			}
		}
	}
	if len(s.rec) > 0 {
		c.states = make([][]*compute.Tensor, spec.States)
		for i := range c.states {
			for _, shape := range s.rec {
				c.states[i] = append(c.states[i], b.Alloc(compute.F32, shape...))
			}
		}
	}
	return c, nil
}

// batchPass prepares cache c for the batched pass bt and returns it.
// Inconsistent batches are the caller's bug and panic with what is wrong.
func (c *Cache) batchPass(bt *Batch) *pass {
	n := bt.IDs.Len()
	if bt.Pos.Len() != n {
		panic(fmt.Sprintf("model: batch of %d ids with %d positions", n, bt.Pos.Len()))
	}
	if len(bt.Pages) != len(c.layout.Groups) {
		panic(fmt.Sprintf("model: batch with pages for %d groups; the model has %d", len(bt.Pages), len(c.layout.Groups)))
	}
	if c.ar == nil || c.ar.capacity < n {
		if c.ar != nil {
			c.ar.free()
		}
		c.ar = newBatchArena(c.b, (n+31)/32*32)
	}
	c.ar.resize(n)
	c.seqs = c.seqs[:0]
	var pick, hpick []int32
	r, all, hall := 0, true, true
	for i, s := range bt.Seqs {
		if s.Rows <= 0 {
			panic(fmt.Sprintf("model: batch sequence %d has %d rows", i, s.Rows))
		}
		ps := passSeq{from: r, to: r + s.Rows}
		if c.states != nil {
			c.checkSlot(s.State)
			ps.rec = c.states[s.State]
		}
		c.seqs = append(c.seqs, ps)
		switch {
		case s.AllLogits:
			for j := ps.from; j < ps.to; j++ {
				pick = append(pick, int32(j))
			}
		case s.Logits:
			pick = append(pick, int32(ps.to-1))
			all = all && s.Rows == 1
		default:
			all = false
		}
		switch {
		case s.AllHidden:
			for j := ps.from; j < ps.to; j++ {
				hpick = append(hpick, int32(j))
			}
		case s.Hidden:
			hpick = append(hpick, int32(ps.to-1))
			hall = hall && s.Rows == 1
		default:
			hall = false
		}
		r += s.Rows
	}
	if r != n {
		panic(fmt.Sprintf("model: batch sequences hold %d rows; the batch has %d", r, n))
	}
	p := &pass{b: c.b, ar: c.ar, ids: bt.IDs, pos: bt.Pos, logits: bt.Logits, hidden: bt.Hidden, cache: c, bt: bt, seqs: c.seqs}
	if bt.Hidden != nil {
		if bt.Hidden.Rows() != len(hpick) {
			panic(fmt.Sprintf("model: batch hidden states have %d rows for the %d rows asked for", bt.Hidden.Rows(), len(hpick)))
		}
		if !hall {
			p.hpick = c.uploadRows(&c.hpick, hpick)
		}
	}
	if bt.Logits == nil {
		return p
	}
	if bt.Logits.Rows() != len(pick) {
		panic(fmt.Sprintf("model: batch logits have %d rows for the %d rows asked for", bt.Logits.Rows(), len(pick)))
	}
	if !all {
		p.pick = c.uploadRows(&c.pick, pick)
	}
	return p
}

// uploadRows copies the row indices rows into the I32 buffer *buf, grown
// (to at least the arena's capacity) when too small, and returns the view
// of it that holds them.
func (c *Cache) uploadRows(buf **compute.Tensor, rows []int32) *compute.Tensor {
	if *buf == nil || (*buf).Len() < len(rows) {
		if *buf != nil {
			c.b.Free(*buf)
		}
		*buf = c.b.Alloc(compute.I32, max(len(rows), c.ar.capacity), 1)
	}
	v := c.b.View(*buf, 0, len(rows))
	c.b.UploadInts(v, rows)
	return v
}

// batching implements Batched for a family from the stack its layers
// make and its forward pass; a family embeds it and sets it at load.
type batching struct {
	b       compute.Backend
	name    string       // the model type, for errors
	stack   func() stack // read when asked: the layers are loaded by then
	forward func(*pass)  // the family's forward pass
}

// ForwardBatch implements Batched.
func (x batching) ForwardBatch(c *Cache, bt *Batch) { x.forward(c.batchPass(bt)) }

// KVLayout implements Batched.
func (x batching) KVLayout() KVLayout {
	l, _ := x.stack().layout(x.b)
	return l
}

// NewCache implements Batched.
func (x batching) NewCache(spec CacheSpec) (*Cache, error) {
	c, err := x.stack().newCache(x.b, spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", x.name, err)
	}
	return c, nil
}
