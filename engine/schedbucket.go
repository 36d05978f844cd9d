package engine

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// Padded decode steps. A step in which every sequence runs one token, or
// one token and its drafts (no prompt chunk), is padded to a bucket of
// rows, a power of two up to maxBucket, with rows of dummy sequences at
// position 0 whose keys and values go to a block reserved for them
// (Scheduler.scratch, one per group beyond the pool that the memory
// budget sizes). Every row of a bucket asks for its logits, as a draft's
// rows do, and finds its sequence's block table through the row→sequence
// map, so a sequence's rows need not be one row. Rows are independent, so
// padding changes no sequence's numbers. Each bucket keeps
// its input tensors (ids, positions, the row→sequence maps and block
// tables, the logits), so that on a backend that records graphs
// (compute.GraphCapturer) the bucket's step is recorded on its second use
// and replayed after, the new inputs uploaded to the same tensors before
// each replay: a decode step of any batch costs a few uploads and one
// launch. A step's block tables are as wide as its longest sequence needs
// (tableWidth), not the context: paged attention launches its work for
// every position a table can hold, which at a context of 128K positions
// would be thousands of empty splits a row. A bucket keeps a graph for
// each width it has run. Models with recurrent layers are not padded:
// their replayed steps would need the host's bookkeeping of each slot.

// maxBucket is the most rows of a padded step; steps of more sequences
// run unpadded.
const maxBucket = 256

// padsSteps reports whether a scheduler on b pads its decode steps: on
// backends that record graphs. (Tests pad on the CPU too.)
func padsSteps(b compute.Backend) bool {
	_, ok := b.(compute.GraphCapturer)
	return ok
}

// bucket is the fixed inputs of padded steps of one row count, and their
// recorded steps by table width.
type bucket struct {
	rows   int
	bt     model.Batch        // Pages[g].Table: a view of tables[g] at the step's width
	tables []*compute.Tensor  // per group: room for rows tables of the context's width
	width  int                // the table width of the step filled last
	graphs map[int]*stepGraph // by table width
}

// stepGraph is a bucket's recorded step at one table width.
type stepGraph struct {
	uses  int // steps run since the graph was last dropped
	graph compute.Graph
}

// minTableBlocks is the narrowest block table of a step.
const minTableBlocks = 16

// tableWidth returns the block-table width of a step over the parts: the
// most blocks any of their sequences' tables needs, rounded up to a
// quarter of the power of two below it (at least minTableBlocks), so that
// a sequence that grows changes its steps' width, and so their graphs, a
// few times an octave; at most the context's width.
func (s *Scheduler) tableWidth(parts []stepPart) int {
	need := 1
	for _, p := range parts {
		need = max(need, (p.hi+s.bs-1)/s.bs)
		for _, t := range p.q.tables {
			need = max(need, len(t))
		}
	}
	step := minTableBlocks
	for step*8 <= need {
		step <<= 1
	}
	return min(s.maxBlocks, (need+step-1)/step*step)
}

// bucketRows returns the rows of the bucket that n rows pad to.
func bucketRows(n int) int {
	r := 1
	for r < n {
		r <<= 1
	}
	return r
}

// bucketFor returns the bucket of a step over the parts, or nil when the
// step is not padded: padding is off, or a part runs a prompt chunk,
// scores a prompt or embeds.
func (s *Scheduler) bucketFor(parts []stepPart) *bucket {
	if !s.pad {
		return nil
	}
	rows := 0
	for _, p := range parts {
		n := p.hi - p.lo
		if n != 1 && !(p.logits && p.nlog == n) || p.all > 0 || p.q.embed {
			return nil
		}
		rows += n
	}
	n := bucketRows(rows)
	if n > maxBucket {
		return nil
	}
	if bk := s.buckets[n]; bk != nil {
		return bk
	}
	bk := &bucket{rows: n, graphs: map[int]*stepGraph{}}
	bt := &bk.bt
	bt.IDs = s.b.Alloc(compute.I32, n)
	bt.Pos = s.b.Alloc(compute.I32, n)
	for range s.groups {
		// Tables are views of n·width entries: a column of one.
		bk.tables = append(bk.tables, s.b.Alloc(compute.I32, n*s.maxBlocks, 1))
		bt.Pages = append(bt.Pages, compute.Pages{BlockSize: s.bs, Seq: s.b.Alloc(compute.I32, n)})
	}
	for range n {
		// Every row asks for its logits: the pass then writes them all
		// in order, with no row map to upload.
		bt.Seqs = append(bt.Seqs, model.BatchSeq{Rows: 1, State: -1, Logits: true})
	}
	bt.Logits = s.b.Alloc(compute.F32, n, s.vocab)
	if s.buckets == nil {
		s.buckets = map[int]*bucket{}
	}
	s.buckets[n] = bk
	return bk
}

// fillBucket uploads a padded step's inputs to the bucket's tensors: part
// i is sequence i, its rows in order; the rows after the parts' are each
// a dummy sequence of one token at position 0 in the scratch block. It
// returns the batch and each part's first row of its logits.
func (s *Scheduler) fillBucket(bk *bucket, parts []stepPart) (*model.Batch, []int) {
	ids, pos, seq, rows := s.idsHost[:0], s.posHost[:0], s.seqHost[:0], s.rowsOf[:0]
	drafts := false
	for i, p := range parts {
		drafts = drafts || p.hi-p.lo > 1
		rows = append(rows, len(ids))
		ids = append(ids, p.q.tokens[p.lo:p.hi]...)
		for r := p.lo; r < p.hi; r++ {
			pos = append(pos, int32(r))
			seq = append(seq, int32(i))
		}
	}
	if drafts {
		s.padDrafts++
	}
	pads := bk.rows - len(ids)
	s.padRows += int64(pads)
	for i := range pads {
		ids = append(ids, 0)
		pos = append(pos, 0)
		seq = append(seq, int32(len(parts)+i))
	}
	s.idsHost, s.posHost, s.seqHost, s.rowsOf = ids, pos, seq, rows
	bt := &bk.bt
	s.b.UploadInts(bt.IDs, ids)
	s.b.UploadInts(bt.Pos, pos)
	pad := []int32{0}
	w := s.tableWidth(parts)
	bk.width = w
	for g := range s.groups {
		tab := s.tableHost[:0]
		for _, p := range parts {
			tab = appendTable(tab, p.q.tables[g], w)
		}
		pad[0] = s.scratch[g]
		for range pads {
			tab = appendTable(tab, pad, w)
		}
		s.tableHost = tab
		pg := &bt.Pages[g]
		pg.MaxBlocks = w
		pg.Table = s.b.View(bk.tables[g], 0, bk.rows*w)
		s.b.UploadInts(pg.Table, tab)
		s.b.UploadInts(pg.Seq, seq)
	}
	return bt, rows
}

// runBucket runs a padded step: directly on its bucket's first use, then
// recorded as a graph where the backend records them, replayed after. A
// failed recording turns graphs off; the steps run directly from then on.
func (s *Scheduler) runBucket(bk *bucket, bt *model.Batch) error {
	s.padded++
	gc, ok := s.b.(compute.GraphCapturer)
	if !ok || s.graphFailed {
		return s.forward(bt)
	}
	// The graphs refer to the cache's activation buffers: when a pass
	// has grown them (a longer step, a new buffer), they go.
	if m := s.cache.Memory(); m != s.graphMem {
		s.dropGraphs()
		s.graphMem = m
	}
	sg := bk.graphs[bk.width]
	if sg == nil {
		sg = &stepGraph{}
		bk.graphs[bk.width] = sg
	}
	sg.uses++
	switch {
	case sg.graph != nil:
	case sg.uses >= 2:
		g, err := s.capture(gc, bt)
		if err != nil {
			s.graphFailed = true
			return s.forward(bt)
		}
		sg.graph = g
		s.graphMem = s.cache.Memory()
	default:
		// The first use sizes the buffers the graph will use.
		return s.forward(bt)
	}
	sg.graph.Launch()
	s.replays++
	return s.backendErr()
}

// capture records the pass over bt as a graph; a panic in the model
// becomes an error.
func (s *Scheduler) capture(gc compute.GraphCapturer, bt *model.Batch) (g compute.Graph, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scheduler: recording the batched pass of %s: %v", s.m.Name, r)
		}
	}()
	return gc.Capture(func() { s.net.ForwardBatch(s.cache, bt) })
}

// dropGraphs releases the buckets' graphs; each is recorded again after a
// direct step.
func (s *Scheduler) dropGraphs() {
	for _, bk := range s.buckets {
		for _, sg := range bk.graphs {
			if sg.graph != nil {
				sg.graph.Close()
			}
		}
		clear(bk.graphs)
	}
}

// dropBuckets releases the buckets' graphs and tensors.
func (s *Scheduler) dropBuckets() {
	s.dropGraphs()
	for _, bk := range s.buckets {
		bt := &bk.bt
		for _, t := range []*compute.Tensor{bt.IDs, bt.Pos, bt.Logits} {
			s.b.Free(t)
		}
		for g, pg := range bt.Pages {
			s.b.Free(bk.tables[g])
			s.b.Free(pg.Seq)
		}
	}
	clear(s.buckets)
}
