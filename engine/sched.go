package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// SchedulerOptions configure a Scheduler. Zero fields take defaults.
type SchedulerOptions struct {
	// Parallel bounds the sequences running at once (0: chosen from the
	// memory of the paged cache).
	Parallel int
	// Context is the most positions per sequence (0: the model's
	// DefaultLength).
	Context int
	// KVBytes is the memory of the paged cache: key/value blocks and
	// recurrent state slots (0: a share of the free memory).
	KVBytes int64
	// BlockSize is the positions per block (0: DefaultBlockSize).
	BlockSize int
	// Chunk is the most prompt positions a sequence runs per step (0: the
	// backend's prefill chunk, see PrefillChunker); it is rounded up to a
	// multiple of BlockSize.
	Chunk int
	// BatchTokens bounds the rows of one step (0: Parallel plus one
	// Chunk on the CPU, four on a GPU).
	BatchTokens int
	// SwapBytes is the host memory that the blocks of preempted sequences
	// may take, so that they resume from them instead of recomputing
	// their tokens (0: as much as the paged cache, at most a quarter of
	// the host's available memory; negative: none). Only backends that
	// copy rows to the host (compute.RowMover) swap, and not models with
	// recurrent layers.
	SwapBytes int64
	// Draft is the most draft tokens a decoding sequence runs per step
	// (speculative decoding by prompt lookup, see draft.go): 0 takes
	// DefaultDraft, a negative number runs none. Models with recurrent
	// layers run none.
	Draft int
}

// DefaultBlockSize is the positions per block of the paged cache.
const DefaultBlockSize = 16

// SchedulerStats is a snapshot of a Scheduler's state.
type SchedulerStats struct {
	// Parallel is the most sequences that run at once; Running and Waiting
	// are those running and those queued now.
	Parallel, Running, Waiting int
	// BlocksUsed is the blocks that running sequences hold, BlocksTotal
	// the blocks of the pool, all groups together.
	BlocksUsed, BlocksTotal int
	// PromptTokens is the prompt tokens submitted; CachedTokens those of
	// them served from the prefix cache.
	PromptTokens, CachedTokens int64
	// Preemptions counts sequences set back to the queue for want of
	// blocks.
	Preemptions int64
	// DraftTokens is the draft tokens run (SchedulerOptions.Draft),
	// DraftAccepted those of them the generation accepted.
	DraftTokens, DraftAccepted int64
	// Restored counts preempted sequences resumed from their blocks in
	// host memory (SchedulerOptions.SwapBytes) instead of recomputed.
	Restored int64
}

// ErrSchedulerClosed is returned by a Scheduler's methods after Close.
var ErrSchedulerClosed = errors.New("engine: scheduler closed")

// Scheduler runs many sequences of one model together: each step is one
// forward pass over the next rows of every running sequence (a decoding
// sequence's next token, a chunk of a newcomer's prompt), their keys and
// values in a paged cache shared by all (see model.Batched). Full blocks
// are kept after their sequences end and reused by any later sequence
// with the same prefix. Its methods are safe for concurrent use.
type Scheduler struct {
	m      *Model
	net    model.Batched
	b      compute.Backend
	layout model.KVLayout
	cache  *model.Cache
	groups []group
	hash   *hasher
	vocab  int
	hidden int // the width of the final hidden states

	// Resolved options.
	parallel, context, bs, chunk, batchTokens int
	draft                                     int // SchedulerOptions.Draft
	seqCap                                    int // the most positions of a sequence
	maxBlocks                                 int // block table width
	recurrent                                 bool
	states                                    int // recurrent state slots: running ones, then checkpoints

	wake   chan struct{}
	exited chan struct{}

	// The loop's buffers.
	tensors                              map[[2]int]*compute.Tensor
	idsHost, posHost, seqHost, tableHost []int32
	spans                                []compute.PageSpan // fill's spans of the parts, shared by every group's Pages
	logitsHost                           []float32
	hiddenHost                           []float32 // the last step's hidden states
	rowsOf, hostOff                      []int     // per part of a step: first logits row, offset in logitsHost

	// Candidates picked on the device (compute.TokenPicker): cands holds
	// TopK's output for the last step's kmax, candsHost its copy.
	cands      *compute.Tensor
	candsHost  []float32
	kmax       int
	readFloats int64 // logits and candidate values read to the host

	// Decode steps padded to buckets of rows, each bucket's step recorded
	// as a graph where the backend records them (see bucket).
	pad         bool
	scratch     []int32 // per group: the block padding rows write to
	buckets     map[int]*bucket
	graphFailed bool
	graphMem    int64 // the cache's memory when the graphs were recorded
	padded      int64 // steps run padded to a bucket
	padRows     int64 // padding rows run
	padDrafts   int64 // padded steps that ran drafts
	replays     int64 // of them replayed from a graph

	// Greedy steps queued ahead (see schedahead.go): the step in flight,
	// its picks' host buffers (two, alternating) and the steps queued.
	ahead      bool
	flight     *flight
	aheadHost  [2][]float32
	aheadSlot  int
	aheadSteps int64

	mu                                      sync.Mutex
	closed                                  bool
	waiting                                 []*sequence
	running                                 []*sequence // in admission order
	order                                   uint64
	slots                                   []int            // free running state slots
	ckpt                                    map[blockKey]int // checkpoint slot of a block's end
	ckptSlot                                []int            // checkpoint slots, least recently used first
	ckptKey                                 []blockKey       // key held by each checkpoint slot
	rows                                    int64            // rows run
	promptTokens, cachedTokens, preemptions int64
	drafted, accepted                       int64 // draft tokens run and accepted
	swapCap, swapUsed                       int64 // host memory for preempted sequences' blocks, and in use
	restored                                int64
	steps                                   int64 // forward passes
}

// NewScheduler starts a scheduler for the model. The model's network must
// support batched passes (model.Batched).
func (m *Model) NewScheduler(opts SchedulerOptions) (*Scheduler, error) {
	net, ok := batched(m.Net)
	if !ok {
		return nil, fmt.Errorf("scheduler: %s (%s) does not run batched passes", m.Name, m.Net.Config().ModelType)
	}
	return newScheduler(m, net, opts, padsSteps(m.Backend))
}

// Generate is Model.Generate over the scheduler: the same Request,
// callbacks, Result and errors; it blocks until the generation ends. Each
// call is one sequence of the running batch.
func (s *Scheduler) Generate(ctx context.Context, req Request, onToken func(Token) error) (*Result, error) {
	return s.generate(ctx, req, onToken)
}

// PromptLogprobs is Model.PromptLogprobs over the scheduler.
func (s *Scheduler) PromptLogprobs(ctx context.Context, ids []int32, top int) ([]Token, error) {
	return s.promptLogprobs(ctx, ids, top)
}

// Stats returns a snapshot of the scheduler's state.
func (s *Scheduler) Stats() SchedulerStats { return s.stats() }

// Close stops the scheduler: running and waiting generations end with
// ErrSchedulerClosed, and the paged cache is released.
func (s *Scheduler) Close() error { return s.close() }

// batched returns the model's batched passes, looking through a
// model.Loaded to the architecture's model.
func batched(net model.Model) (model.Batched, bool) {
	if l, ok := net.(*model.Loaded); ok {
		if b, ok := l.Model.(model.Batched); ok {
			return b, true
		}
	}
	b, ok := net.(model.Batched)
	return b, ok
}
