package compute

import (
	"fmt"
	"strings"
)

// Device capabilities: what a caller may ask a backend (or a Graph) about
// the machine it runs on, beyond the operations. Each is optional; a caller
// asserts the interface, never a concrete backend.

// PrefillChunker is implemented by backends that prefer another number of
// prompt tokens per forward pass during prefill than the caller's default
// (the CUDA backend: its tensor cores want long chunks). A non-positive
// PrefillChunk means no preference.
type PrefillChunker interface {
	PrefillChunk() int
}

// KernelCounter is implemented by Graphs that know how many kernel
// launches one Launch replays (a CUDA graph), so that a caller can report
// the launches per decode step.
type KernelCounter interface {
	Kernels() int
}

// Threader is implemented by backends that compute on the host's threads
// (the CPU backend): Threads returns how many they use.
type Threader interface {
	Threads() int
}

// BandwidthMeter is implemented by backends that can measure the bandwidth
// of the memory that holds their tensors: the bound a decode step, which
// reads every weight once, approaches.
type BandwidthMeter interface {
	// MemoryBandwidth measures it over a buffer of size bytes, which it
	// allocates for the measurement and frees afterwards, and returns the
	// best of a few rounds in bytes per second.
	MemoryBandwidth(size int64) (float64, error)
	// BandwidthMethod says how MemoryBandwidth measures, for a report:
	// "streaming read" (every byte read once), "device copy" (bytes read
	// plus bytes written by device-to-device copies).
	BandwidthMethod() string
}

// Pages lays the rows of a batched forward pass over paged key-value
// caches. Each row belongs to one sequence of the pass; each sequence's
// positions live in fixed-size blocks of a pool (a KVCache of
// Capacity = blocks × BlockSize rows, Ring unset), found through its row of
// the block table. Every layer of a group of layers that keeps the same
// positions (the full-attention layers; the layers of one sliding window)
// shares one Pages per pass.
type Pages struct {
	// BlockSize is the number of positions a block holds.
	BlockSize int
	// MaxBlocks is the width of the block table: the most blocks a
	// sequence of the pass may reference.
	MaxBlocks int
	// Table (I32, [sequences × MaxBlocks]) holds at s·MaxBlocks+j the pool
	// block that holds sequence s's positions [j·BlockSize, (j+1)·BlockSize),
	// or -1 where the sequence holds no block (positions a sliding window
	// has left, or past its end).
	Table *Tensor
	// Seq (I32, [rows]) holds the sequence of each row of the pass.
	Seq *Tensor
	// Spans, when not nil, tells the host how the rows of the pass lie:
	// one entry per sequence of the pass, in row order, each sequence's
	// rows consecutive and at consecutive positions. Backends may use it
	// to attend a prompt chunk's rows by another kernel (CUDA: flash
	// attention over the chunk's keys gathered from the pool); nil (a
	// padded decode step replayed as a graph, whose spans change between
	// replays) leaves every row to the kernel that reads the table on the
	// device.
	Spans []PageSpan
}

// PageSpan is one sequence's rows of a paged pass, on the host.
type PageSpan struct {
	// Row is the sequence's first row in the pass and Rows how many
	// consecutive rows it has there.
	Row, Rows int
	// Start is the position of its first row (Pos[Row]); its other rows
	// follow at Start+1, Start+2, …
	Start int
}

// Pager is implemented by backends that attend over paged key-value
// caches, the memory of batched passes over many sequences.
type Pager interface {
	// AttendPaged stores the new keys k and values v [n, KVHeads·HeadDim]
	// of each row i in its sequence's slot for position pos[i] in the
	// pool, then writes to dst [n, Heads·HeadDim] the attention of each
	// query row over its sequence's positions up to and including its
	// own (those within a.Window when set), as Attend computes it. A
	// row's result depends only on its query and its sequence's cached
	// keys and values, never on the other rows of the call, so that a
	// sequence computes the same numbers in any batch.
	AttendPaged(dst, q, k, v *Tensor, pool *KVCache, pg *Pages, pos *Tensor, a *Attention)
}

// KVPooler is implemented by Pagers that keep paged pools in an element
// type of their choosing: F16 halves the memory and the bytes that
// attention reads (the CUDA backend's default), F32 keeps the keys and
// values as computed (the CPU's). Makers of paged pools call NewKVPool
// when the backend has it and NewKVCache(blocks·blockSize, kvDim, false)
// otherwise (F32).
type KVPooler interface {
	// NewKVPool allocates a pool of blocks × blockSize positions of kvDim
	// keys and values for AttendPaged.
	NewKVPool(blocks, blockSize, kvDim int) *KVCache
	// KVPoolType is the element type of the pools NewKVPool allocates.
	KVPoolType() DType
	// SetKVPoolType sets it for the pools allocated from now on: F16 or
	// F32.
	SetKVPoolType(DType) error
}

// RowMover is implemented by backends that copy rows of a tensor to host
// memory and back as they are stored, for a tier of the paged KV cache
// below the backend's memory: a preempted sequence's blocks wait there
// instead of being recomputed.
type RowMover interface {
	// SaveRows copies rows [lo, hi) of t, as stored, to dst, which holds
	// exactly their bytes (rows × the bytes of a row of t's type). The
	// copy may still be under way when it returns: dst holds the rows
	// once SavedRows returns, and neither dst nor the rows may change
	// until then.
	SaveRows(dst []byte, t *Tensor, lo, hi int)
	// SavedRows waits for the copies SaveRows started; after a failure
	// of the backend it returns its error, and what the copies wrote is
	// not to be used.
	SavedRows() error
	// LoadRows copies src, rows as SaveRows wrote them, into t from row
	// lo on (src may be reused when it returns).
	LoadRows(t *Tensor, lo int, src []byte)
}

// ParseKVPoolType returns the paged pool element type named name (case
// aside): "f16" or "f32".
func ParseKVPoolType(name string) (DType, error) {
	switch strings.ToLower(name) {
	case "f16":
		return F16, nil
	case "f32":
		return F32, nil
	}
	return 0, fmt.Errorf("paged KV pools of %q: want f16 or f32", name)
}

// CheckKVPoolType fails unless paged pools may hold elements of type dt
// (F16 or F32), for KVPooler.SetKVPoolType.
func CheckKVPoolType(dt DType) error {
	if dt != F16 && dt != F32 {
		return fmt.Errorf("paged KV pools of %s: want f16 or f32", dt)
	}
	return nil
}

// RowStable is implemented by backends whose matrix products can compute
// each row the same whatever the other rows of the call (when on, a
// one-row product takes the arithmetic of many-row ones where those
// differ, at some cost in speed). A batched server turns it on so that a
// sequence's output does not depend on the sequences sharing its batch.
type RowStable interface {
	SetRowStable(on bool)
}

// MemoryReporter is implemented by backends that can tell how much memory
// is still free for their tensors (the CUDA backend: the device's free
// memory), so that a caller can size a cache by what is left once the
// weights are loaded. Backends on the host's memory do not implement it;
// callers then look at the host.
type MemoryReporter interface {
	// FreeMemory returns the bytes that allocations may still take.
	FreeMemory() (int64, error)
}
