package model

import "lem/compute"

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
}

// BatchSeq is one sequence's part of a Batch.
type BatchSeq struct {
	// Rows is the number of rows it contributes.
	Rows int
	// State is its recurrent state slot; -1 for a model without one.
	State int
	// Logits asks for its last row's logits; AllLogits for every row's.
	Logits, AllLogits bool
}

// Cache is the memory of a model's batched passes: a key/value pool per
// attention layer that owns a cache (Capacity = blocks × BlockSize of its
// group), the recurrent state slots, and the activation buffers of the
// passes. It is used by one goroutine at a time.
type Cache struct {
	spec CacheSpec
}

// Spec returns the sizes the cache was made with.
func (c *Cache) Spec() CacheSpec { return c.spec }
