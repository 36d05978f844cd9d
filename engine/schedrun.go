package engine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// holdoff is how long a step waits for the sequences that were handed
// logits by the last step to submit their next token: sampling is quick,
// and a slow consumer only misses steps, it never stalls the others.
const holdoff = 20 * time.Millisecond

// maxDefaultParallel bounds the Parallel chosen from memory: 8 on the
// CPU, whose steps grow with every row; 64 on a device that records
// graphs (a GPU), whose decode steps cost about the same up to many rows.
func maxDefaultParallel(b compute.Backend) int {
	if padsSteps(b) {
		return 64
	}
	return 8
}

// group is one group of attention layers of the paged cache.
type group struct {
	window int // 0: every position
	pool   *blockPool
}

// sequence is one generation or prompt scoring in a Scheduler. The fields
// below mu are guarded by the Scheduler's mu; the scheduler's loop alone
// changes the others, also under mu.
type sequence struct {
	tokens []int32 // prompt, then the generated tokens handed in, then spec drafts
	prompt int     // the prompt's length
	// spec is how many tokens at the end of tokens are drafts (see
	// draft.go): run and handed over like the others, but not yet
	// accepted, so they name no cached block and may be dropped.
	spec  int
	score bool    // PromptLogprobs: every row's logits
	pick  int     // candidates the backend picks for the caller (pickK); 0: the logits
	embed bool    // Embed: pooled final hidden states, no logits
	pool  Pooling // Embed: how the rows' hidden states are pooled

	// The scheduler's.
	running bool
	order   uint64 // admission order, for preemption
	done    int    // positions computed
	kept    int    // positions whose full blocks keep has named
	// cut is the first position whose token the caller replaced (a
	// rejected draft) while a step ran rows of the sequence (after a
	// preemption it may run them while the caller reads the rows it was
	// handed): the step's rows from there are not the sequence's. -1: none.
	cut    int
	tables [][]int32 // per group: block of each block index, -1 for none
	keys   []blockKey
	slot   int // recurrent state slot, -1 for none
	// swap holds, per group, the bytes of the blocks of a preempted
	// sequence's first swapDone positions (nil for blocks it lacked),
	// swapBytes their total (see swap.go).
	swap      [][][]byte
	swapDone  int
	swapBytes int64
	cached    int // prompt tokens reused at first admission
	started   bool
	// Steps queued ahead (see schedahead.go): flying counts the steps in
	// flight that run a row of the sequence; fed is 1 when its last token
	// is one the device picked and fed ahead that the caller has not yet
	// handed in (the token's id is -1 until the step that picked it
	// lands); later is the pick of the row run from that token, landed
	// before the caller handed it in.
	flying int
	fed    int
	later  *candidate

	// Handshake with the caller.
	need   bool        // the caller waits for the logits of the last token
	left   int         // the tokens that may follow the one the caller handed in last
	acked  bool        // scoring: the caller took the rows last handed over
	scored int         // scoring: rows handed over
	gone   bool        // the caller left
	err    error       // ends the sequence
	host   []float32   // the logits handed over: one row, or rows for scoring
	cands  []candidate // the candidates handed over, when pick > 0
	nrows  int         // rows in host (scoring), or rows of cands / host handed over
	vec    []float32   // Embed: the pooled hidden state, summed while running
	ended  bool        // Embed: vec is complete; the blocks can go
	// delivered is when the scheduler last handed logits over.
	delivered time.Time
	ready     chan struct{}
}

// signal wakes the sequence's caller.
func (q *sequence) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// stepPart is one sequence's rows [lo, hi) of a step.
type stepPart struct {
	q         *sequence
	lo, hi    int
	logits    bool // the last row's logits go to the caller (every row's with drafts)
	nlog      int  // with logits: the rows handed over, the part's last
	all, from int  // scoring: every row's, handed over from row from
	hidden    int  // Embed: final hidden states of its last row (1) or every row (hi-lo)
}

// newScheduler starts a scheduler; pad asks for decode steps padded to
// buckets of rows (see bucket), which models with recurrent layers never
// take.
func newScheduler(m *Model, net model.Batched, opts SchedulerOptions, pad bool) (*Scheduler, error) {
	s := &Scheduler{m: m, net: net, b: m.Backend, layout: net.KVLayout(), hash: newHasher(),
		vocab: m.Net.Config().VocabSize, hidden: m.Net.Config().HiddenSize, wake: make(chan struct{}, 1), exited: make(chan struct{}),
		tensors: map[[2]int]*compute.Tensor{}}
	if err := s.size(opts); err != nil {
		return nil, err
	}
	s.pad = pad && !s.recurrent
	s.ahead = s.runsAhead()
	spec := model.CacheSpec{BlockSize: s.bs, States: s.states}
	for _, g := range s.groups {
		n := g.pool.size()
		if s.pad {
			// One block past the pool's (and the KVBytes budget's),
			// for padding rows to write to.
			s.scratch = append(s.scratch, int32(n))
			n++
		}
		spec.Blocks = append(spec.Blocks, n)
	}
	c, err := net.NewCache(spec)
	if err != nil {
		return nil, fmt.Errorf("scheduler: allocating the paged cache: %w", err)
	}
	s.cache = c
	if rs, ok := s.b.(compute.RowStable); ok {
		rs.SetRowStable(true)
	}
	for i := range s.parallel {
		s.slots = append(s.slots, s.parallel-1-i)
	}
	for i := range s.states - s.parallel {
		s.ckptSlot = append(s.ckptSlot, s.parallel+i)
		s.ckptKey = append(s.ckptKey, blockKey{})
	}
	s.ckpt = map[blockKey]int{}
	go s.loop()
	return s, nil
}

// size resolves the options against the model's layout and the memory.
func (s *Scheduler) size(opts SchedulerOptions) error {
	if opts.Parallel < 0 || opts.Context < 0 || opts.KVBytes < 0 || opts.BlockSize < 0 || opts.Chunk < 0 || opts.BatchTokens < 0 {
		return fmt.Errorf("scheduler: negative option in %+v", opts)
	}
	s.bs = opts.BlockSize
	if s.bs == 0 {
		s.bs = DefaultBlockSize
	}
	s.context = opts.Context
	if s.context == 0 {
		s.context = s.m.DefaultLength()
	}
	s.recurrent = s.layout.StateBytes > 0
	s.chunk = opts.Chunk
	if s.chunk == 0 {
		s.chunk = schedChunk(s.b, s.recurrent)
	}
	s.chunk = (s.chunk + s.bs - 1) / s.bs * s.bs
	if !s.recurrent {
		// A recurrent state cannot drop the positions of a rejected
		// draft.
		s.draft = opts.Draft
		if s.draft == 0 {
			s.draft = DefaultDraft(s.b)
		}
		s.draft = max(s.draft, 0)
	}
	// A sequence's blocks at full context in each group.
	need := make([]int, len(s.layout.Groups))
	var perSeq int64
	for i, g := range s.layout.Groups {
		n := (s.context + s.bs - 1) / s.bs
		if g.Window > 0 {
			// The window before a chunk's first row, and the chunk.
			n = min(n, (g.Window-1+s.chunk+s.bs-1)/s.bs+1)
		}
		need[i] = n
		perSeq += int64(n) * int64(s.bs) * g.PositionBytes
	}
	perSeq += s.layout.StateBytes * 2 // its running slot and a checkpoint
	budget := opts.KVBytes
	if budget == 0 {
		budget = defaultKVBytes(s.b)
	}
	s.parallel = opts.Parallel
	if s.parallel == 0 {
		s.parallel = int(min(max(budget/max(perSeq, 1), 1), int64(maxDefaultParallel(s.b))))
	}
	if opts.KVBytes == 0 {
		// Room for every sequence at full context, twice over for
		// the prefix cache, and no more.
		budget = min(budget, 2*int64(s.parallel)*perSeq)
	}
	s.swapCap = opts.SwapBytes
	if s.swapCap == 0 {
		s.swapCap = budget
		if avail := memAvailable(); avail > 0 {
			s.swapCap = min(s.swapCap, avail/4)
		}
	}
	if s.recurrent {
		// A running slot per sequence, and checkpoints: one per
		// sequence, up to four per sequence while they take at most
		// a quarter of the memory.
		ckpts := s.parallel
		if s.layout.StateBytes > 0 {
			ckpts = max(ckpts, min(4*s.parallel, int(budget/4/s.layout.StateBytes)))
		}
		s.states = s.parallel + ckpts
		if need := int64(s.states) * s.layout.StateBytes; need > budget {
			return fmt.Errorf("scheduler: %d bytes of paged cache cannot hold %d recurrent states of %d bytes", budget, s.states, s.layout.StateBytes)
		}
		budget -= int64(s.states) * s.layout.StateBytes
	}
	// Sliding windows take what a step needs at the least and their
	// share of the rest; full-attention groups share what is left.
	blocks := make([]int, len(need))
	var unit int64 // the bytes of need blocks in every group
	for i, g := range s.layout.Groups {
		unit += int64(need[i]) * int64(s.bs) * g.PositionBytes
	}
	// Sliding windows get what every running sequence's windows take at
	// once, when that leaves full-attention groups two blocks per
	// sequence at least.
	var windows, twoEach int64
	for i, g := range s.layout.Groups {
		if g.Window > 0 {
			windows += int64(s.parallel*need[i]) * int64(s.bs) * g.PositionBytes
		} else {
			twoEach += int64(2*s.parallel) * int64(s.bs) * g.PositionBytes
		}
	}
	left := budget
	for i, g := range s.layout.Groups {
		if g.Window == 0 {
			continue
		}
		if windows+twoEach <= budget {
			blocks[i] = s.parallel * need[i]
		} else {
			blocks[i] = max(need[i], int(float64(need[i])*float64(budget)/float64(max(unit, 1))))
		}
		left -= int64(blocks[i]) * int64(s.bs) * g.PositionBytes
		unit -= int64(need[i]) * int64(s.bs) * g.PositionBytes
	}
	s.seqCap = s.context
	for i, g := range s.layout.Groups {
		if g.Window > 0 {
			continue
		}
		blocks[i] = int(float64(need[i]) * float64(left) / float64(max(unit, 1)))
		if blocks[i] < 1 {
			return fmt.Errorf("scheduler: %d bytes of paged cache hold no block of %d positions (%d bytes each)", budget, s.bs, int64(s.bs)*g.PositionBytes)
		}
		s.seqCap = min(s.seqCap, blocks[i]*s.bs)
	}
	if left < 0 {
		return fmt.Errorf("scheduler: %d bytes of paged cache cannot hold the sliding windows' blocks of one step", budget)
	}
	for i, g := range s.layout.Groups {
		s.groups = append(s.groups, group{window: g.Window, pool: newBlockPool(blocks[i])})
	}
	s.maxBlocks = (s.context + s.bs - 1) / s.bs
	s.batchTokens = opts.BatchTokens
	if s.batchTokens == 0 {
		s.batchTokens = s.chunk*prefillChunks(s.b) + s.parallel
	}
	return nil
}

// cpuChunk is the prompt chunk of a scheduler's sequences on a backend
// that names none (the CPU). A chunk runs as long as many decode steps
// there, and the decoding sequences wait for it: at 128 positions they
// wait half what a session's chunk (DefaultChunk) would make them, while
// prompts run at the rate of longer chunks and the served tokens/s stay
// (BENCHMARKS.md).
const cpuChunk = 128

// schedChunk returns the prompt chunk of a scheduler's sequences on b:
// the backend's (compute.PrefillChunker) if it names one, else cpuChunk,
// or DefaultChunk for models with recurrent layers, whose state
// checkpoints and chunked scans fall at chunk boundaries.
func schedChunk(b compute.Backend, recurrent bool) int {
	if c, ok := b.(compute.PrefillChunker); ok && c.PrefillChunk() > 0 || recurrent {
		return chunkFor(b)
	}
	return cpuChunk
}

// prefillChunks is how many prompt chunks a step takes by default: one on
// the CPU, where a chunk already takes as long as many decode steps; four
// on a device that records graphs (a GPU), which runs a chunk in a few
// milliseconds and serves many newcomers' prompts best in large steps.
func prefillChunks(b compute.Backend) int {
	if padsSteps(b) {
		return 4
	}
	return 1
}

// defaultKVBytes is the paged cache's memory when none is asked for: a
// share of the backend's free memory where it reports it
// (compute.MemoryReporter: a GPU's, the weights already loaded), else of
// the host's available memory.
func defaultKVBytes(b compute.Backend) int64 {
	if f, ok := b.(compute.MemoryReporter); ok {
		if n, err := f.FreeMemory(); err == nil && n > 0 {
			return n / 2
		}
	}
	if n := memAvailable(); n > 0 {
		return n / 4
	}
	return 1 << 30
}

// memAvailable returns the host's available memory (Linux's MemAvailable),
// or 0 where it cannot tell.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// submit queues a sequence; it fails when its tokens cannot run.
func (s *Scheduler) submit(q *sequence) error {
	if len(q.tokens) > s.seqCap {
		return fmt.Errorf("context length exceeded: a prompt of %d tokens > the %d positions a sequence may hold (the context, or the paged cache's blocks)", len(q.tokens), s.seqCap)
	}
	for _, t := range q.tokens {
		if t < 0 || int(t) >= s.vocab {
			return fmt.Errorf("token id %d out of range [0, %d)", t, s.vocab)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSchedulerClosed
	}
	s.promptTokens += int64(len(q.tokens))
	s.waiting = append(s.waiting, q)
	s.poke()
	return nil
}

// poke wakes the loop.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wait waits for the scheduler to hand q's caller what it asked for.
func (s *Scheduler) wait(ctx context.Context, q *sequence) error {
	select {
	case <-q.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.err
}

// leave ends q: its blocks go back between steps.
func (s *Scheduler) leave(q *sequence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q.gone = true
	if i := slices.Index(s.waiting, q); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.dropSwap(q)
	}
	s.poke()
}

func (s *Scheduler) stats() SchedulerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SchedulerStats{
		Parallel: s.parallel, Running: len(s.running), Waiting: len(s.waiting),
		PromptTokens: s.promptTokens, CachedTokens: s.cachedTokens, Preemptions: s.preemptions,
		DraftTokens: s.drafted, DraftAccepted: s.accepted, Restored: s.restored,
	}
	for _, g := range s.groups {
		st.BlocksUsed += g.pool.used
		st.BlocksTotal += g.pool.size()
	}
	return st
}

func (s *Scheduler) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.poke()
	<-s.exited
	s.dropBuckets()
	for _, t := range s.tensors {
		s.b.Free(t)
	}
	clear(s.tensors)
	if s.cands != nil {
		s.b.Free(s.cands)
		s.cands = nil
	}
	return nil
}

// loop is the scheduler's goroutine: it alone runs the model.
func (s *Scheduler) loop() {
	defer close(s.exited)
	var timer *time.Timer
	for {
		s.mu.Lock()
		if s.closed {
			if f := s.flight; f != nil && f.wait != nil {
				f.wait()
			}
			s.flight = nil
			for _, q := range slices.Concat(s.running, s.waiting) {
				q.err = ErrSchedulerClosed
				q.signal()
			}
			for _, q := range s.running {
				s.free(q)
			}
			s.running, s.waiting = nil, nil
			s.mu.Unlock()
			return
		}
		s.reap()
		s.admit()
		ready, wait := s.survey()
		s.mu.Unlock()
		switch {
		case wait > 0:
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-s.wake:
			case <-timer.C:
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			continue
		case !ready:
			<-s.wake
			continue
		}
		s.step()
	}
}

// runnable reports whether q has rows to run now.
func (q *sequence) runnable() bool {
	return !q.gone && q.err == nil && q.done < len(q.tokens) && (!q.score || q.acked)
}

// survey reports whether any running sequence has rows to run, and how
// long to wait for those that the last step handed logits to and that are
// about to hand in their next token (none once holdoff has passed since).
func (s *Scheduler) survey() (ready bool, wait time.Duration) {
	now := time.Now()
	if f := s.flight; f != nil {
		// A step in flight: the next waits a while for the callers to
		// hand in the tokens fed ahead (see schedahead.go).
		hold := time.Duration(0)
		for _, p := range f.parts {
			if q := p.q; q.fed > 0 && !q.gone && q.err == nil {
				hold = max(hold, holdoff-now.Sub(q.delivered))
			}
		}
		if hold <= 0 {
			return true, 0
		}
		wait = hold
	}
	for _, q := range s.running {
		switch {
		case q.flying > 0:
		case q.runnable():
			ready = true
		case !q.gone && q.err == nil && (q.score && !q.acked || !q.score && !q.need && q.done == len(q.tokens)):
			wait = max(wait, holdoff-now.Sub(q.delivered))
		}
	}
	return ready, wait
}

// reap frees the sequences whose callers left.
func (s *Scheduler) reap() {
	s.running = slices.DeleteFunc(s.running, func(q *sequence) bool {
		if q.gone || q.err != nil || q.ended {
			s.free(q)
			return true
		}
		return false
	})
}

// free releases q's blocks and state slot.
func (s *Scheduler) free(q *sequence) {
	for g, t := range q.tables {
		for _, b := range t {
			if b >= 0 {
				s.groups[g].pool.release(b)
			}
		}
	}
	q.tables = nil
	if q.slot >= 0 {
		s.slots = append(s.slots, q.slot)
		q.slot = -1
	}
	q.running = false
}

// admit starts waiting sequences while there is room.
func (s *Scheduler) admit() {
	for len(s.waiting) > 0 && len(s.running) < s.parallel {
		q := s.waiting[0]
		p := 0
		if !q.score && (!q.embed || q.pool == PoolLast) {
			// Pooling over every row computes them all.
			p = s.prefix(q)
		}
		if len(s.running) > 0 && !s.fits(q, p) {
			return
		}
		s.waiting = s.waiting[1:]
		s.start(q, p)
	}
}

// fits reports whether the pool has room for q's tokens past its cached
// prefix of p positions without preempting; in a sliding window's group,
// also for what the running sequences' windows may still take.
func (s *Scheduler) fits(q *sequence, p int) bool {
	for g, gr := range s.groups {
		n := (len(q.tokens)+1+s.bs-1)/s.bs - p/s.bs
		if gr.window > 0 {
			least := s.windowBlocks(gr.window)
			n = min(n, least)
			for _, r := range s.running {
				held := 0
				for _, b := range r.tables[g] {
					if b >= 0 {
						held++
					}
				}
				n += max(least-held, 0)
			}
		}
		if gr.pool.available() < n {
			return false
		}
	}
	return true
}

// windowBlocks returns the most blocks a sequence holds in a group of
// sliding window w: the window before a chunk's first row, and the chunk.
func (s *Scheduler) windowBlocks(w int) int {
	return (w-1+s.chunk+s.bs-1)/s.bs + 1
}

// prefix returns the longest prefix of q's tokens (a whole number of
// blocks, leaving at least one token to run) that the cache holds: every
// full-attention block, the blocks of each window before it, and for a
// recurrent model a state checkpoint at its end.
func (s *Scheduler) prefix(q *sequence) int {
	maxJ := (len(q.tokens) - 1 - q.spec) / s.bs
	q.keys = s.hash.chain(q.keys, q.tokens[:maxJ*s.bs], s.bs)
	jf := 0
	for jf < maxJ && s.holds(jf, q.keys[jf], 0) {
		jf++
	}
	for j := jf; j > 0; j-- {
		p := j * s.bs
		ok := true
		if s.recurrent {
			_, held := s.ckpt[q.keys[j-1]]
			ok = p%s.chunk == 0 && held
		}
		for _, g := range s.groups {
			if !ok || g.window == 0 {
				continue
			}
			for i := max(0, p-g.window+1) / s.bs; i < j && ok; i++ {
				_, ok = g.pool.lookup(q.keys[i])
			}
		}
		if ok {
			return p
		}
	}
	return 0
}

// holds reports whether every full-attention group caches block key k.
func (s *Scheduler) holds(j int, k blockKey, _ int) bool {
	for _, g := range s.groups {
		if g.window > 0 {
			continue
		}
		if _, ok := g.pool.lookup(k); !ok {
			return false
		}
	}
	return true
}

// start makes q a running sequence from its cached prefix of p positions.
func (s *Scheduler) start(q *sequence, p int) {
	s.order++
	q.order = s.order
	q.running = true
	q.slot = -1
	q.tables = make([][]int32, len(s.groups))
	for g, gr := range s.groups {
		t := make([]int32, 0, s.maxBlocks)
		for i := range p / s.bs {
			b := int32(-1)
			if gr.window == 0 || i >= max(0, p-gr.window+1)/s.bs {
				b, _ = gr.pool.lookup(q.keys[i])
				gr.pool.retain(b)
			}
			t = append(t, b)
		}
		q.tables[g] = t
	}
	if s.recurrent {
		q.slot = s.slots[len(s.slots)-1]
		s.slots = s.slots[:len(s.slots)-1]
		if p > 0 {
			c := s.ckpt[q.keys[p/s.bs-1]]
			s.touchCheckpoint(c)
			s.cache.CopyState(q.slot, c)
		} else {
			s.cache.ResetState(q.slot)
		}
	}
	q.kept = p
	q.done = s.swapIn(q, p)
	if !q.started {
		q.started = true
		q.cached = p
		s.cachedTokens += int64(p)
	}
	s.running = append(s.running, q)
}

// touchCheckpoint marks checkpoint slot c as just used.
func (s *Scheduler) touchCheckpoint(c int) {
	i := slices.Index(s.ckptSlot, c)
	s.ckptSlot = append(slices.Delete(s.ckptSlot, i, i+1), c)
}

// checkpoint copies q's state, after the block named k, into the least
// recently used checkpoint slot.
func (s *Scheduler) checkpoint(q *sequence, k blockKey) {
	if len(s.ckptSlot) == 0 {
		return
	}
	if c, ok := s.ckpt[k]; ok {
		s.touchCheckpoint(c)
		return
	}
	c := s.ckptSlot[0]
	i := c - s.parallel
	if old := s.ckptKey[i]; old != (blockKey{}) {
		delete(s.ckpt, old)
	}
	s.cache.CopyState(c, q.slot)
	s.ckptKey[i] = k
	s.ckpt[k] = c
	s.touchCheckpoint(c)
}

// preempt sets q back to the head of the queue, its blocks freed: it
// later recomputes its tokens and goes on as if nothing had happened.
func (s *Scheduler) preempt(q *sequence) {
	s.swapOut(q)
	s.free(q)
	q.done = 0
	i := slices.Index(s.running, q)
	s.running = slices.Delete(s.running, i, i+1)
	s.waiting = slices.Insert(s.waiting, 0, q)
	s.preemptions++
}

// newest returns the running sequence admitted last.
func (s *Scheduler) newest() *sequence {
	var n *sequence
	for _, q := range s.running {
		if n == nil || q.order > n.order {
			n = q
		}
	}
	return n
}

// place gives q blocks for positions [lo, hi) in every group, first
// dropping those a sliding window has left, and preempting the newest
// sequences while the pool has none. It reports false when q itself was
// preempted (or failed: alone, it does not fit the pool).
func (s *Scheduler) place(q *sequence, lo, hi int, parts *[]stepPart, budget *int) bool {
	for g, gr := range s.groups {
		s.dropWindow(q, g, lo)
		t := q.tables[g]
		for i := lo / s.bs; i <= (hi-1)/s.bs; i++ {
			for len(t) <= i {
				t = append(t, -1)
			}
			for t[i] < 0 {
				if b, ok := gr.pool.alloc(); ok {
					t[i] = b
					break
				}
				v := s.newest()
				if v == q && len(s.running) == 1 {
					q.tables[g] = t
					q.err = fmt.Errorf("scheduler: a sequence of %d positions does not fit the paged cache (%d blocks of %d positions)", hi, gr.pool.size(), s.bs)
					q.signal()
					return false
				}
				if v == q {
					q.tables[g] = t
				}
				s.preempt(v)
				if i := slices.IndexFunc(*parts, func(p stepPart) bool { return p.q == v }); i >= 0 {
					*budget += (*parts)[i].hi - (*parts)[i].lo
					*parts = slices.Delete(*parts, i, i+1)
				}
				if v == q {
					return false
				}
			}
		}
		q.tables[g] = t
	}
	return true
}

// dropWindow releases q's blocks of group g that a sliding window has
// left before position lo.
func (s *Scheduler) dropWindow(q *sequence, g, lo int) {
	w := s.groups[g].window
	if w <= 0 {
		return
	}
	for i, b := range q.tables[g] {
		if b >= 0 && (i+1)*s.bs <= lo-w+1 {
			s.groups[g].pool.release(b)
			q.tables[g][i] = -1
		}
	}
}

// plan chooses the rows of the next step: first every decoding sequence's
// next token, then prompt chunks (each up to the next multiple of the
// chunk size) while the step's budget lasts.
func (s *Scheduler) plan() []stepPart {
	var parts []stepPart
	budget := s.batchTokens
	order := slices.Clone(s.running)
	slices.SortStableFunc(order, func(a, b *sequence) int {
		da, db := len(a.tokens)-a.done == 1+a.spec, len(b.tokens)-b.done == 1+b.spec
		switch {
		case da && !db:
			return -1
		case db && !da:
			return 1
		}
		return 0
	})
	spare := draftRows
	for _, q := range order {
		if q.running && q.runnable() && len(q.tokens)-q.done == 1+q.spec {
			spare--
		}
	}
	for _, q := range order {
		if !q.running || !q.runnable() || budget == 0 {
			continue
		}
		lo := q.done
		hi := min(len(q.tokens), (lo/s.chunk+1)*s.chunk)
		if s.recurrent {
			// A recurrent state folds positions in with arithmetic
			// that depends on how they are grouped: a preempted
			// sequence recomputes its prompt in the same chunks and
			// its generated tokens one at a time, as it first ran.
			if lo < q.prompt {
				hi = min(hi, q.prompt)
			} else {
				hi = lo + 1
			}
		}
		if q.spec > 0 {
			// A draft's rows run together with the token before them
			// (after a preemption, once the positions before are
			// back), or not at all when the step has no room.
			v := len(q.tokens) - 1 - q.spec
			switch {
			case lo < v:
				hi = min(hi, v)
			case q.need:
				// Drafts take the rows the step spares.
				keep := max(min(q.spec, spare, budget-1), 0)
				q.tokens = q.tokens[:len(q.tokens)-q.spec+keep]
				q.spec = keep
				spare -= keep
				hi = len(q.tokens)
			default:
				hi = len(q.tokens)
			}
		}
		if hi-lo > budget {
			if s.recurrent {
				// A recurrent sequence's chunks stay whole, so that
				// they are the same in any batch.
				if len(parts) > 0 {
					continue
				}
			} else {
				hi = lo + budget
			}
		}
		if !s.place(q, lo, hi, &parts, &budget) {
			continue
		}
		q.cut = -1
		p := stepPart{q: q, lo: lo, hi: hi, logits: !q.score && hi == len(q.tokens) && q.need}
		if p.logits {
			p.nlog = 1 + q.spec
		}
		if q.embed {
			switch {
			case q.pool == PoolMean, q.pool == PoolFirst && lo == 0:
				p.hidden = hi - lo
			case q.pool == PoolLast && hi == len(q.tokens):
				p.hidden = 1
			}
		}
		if q.score {
			p.all = hi - lo
			p.from = max(q.scored-lo, 0)
		}
		parts = append(parts, p)
		budget -= hi - lo
	}
	return parts
}

// input returns a cached tensor of n elements of type dt for use u.
func (s *Scheduler) input(u, n int, dt compute.DType, cols int) *compute.Tensor {
	k := [2]int{u, n}
	t := s.tensors[k]
	if t == nil {
		if cols > 0 {
			t = s.b.Alloc(dt, n, cols)
		} else {
			t = s.b.Alloc(dt, n)
		}
		s.tensors[k] = t
	}
	return t
}

// Tensor uses (input's u).
const (
	useIDs = iota
	usePos
	useLogits
	useSeq   // + 2·group
	useTable // + 2·group

	useHidden = -1
)

// step runs one forward pass over the planned rows and hands the logits
// (or the backend's candidates) over.
func (s *Scheduler) step() {
	if f := s.flight; f != nil {
		s.flight = nil
		s.advance(f)
		return
	}
	s.mu.Lock()
	parts := s.plan()
	if len(parts) == 0 {
		s.mu.Unlock()
		return
	}
	n := 0
	for _, p := range parts {
		n += p.hi - p.lo
	}
	var (
		bt   *model.Batch
		rows []int // each part's first row of bt.Logits; -1 for none
		bk   *bucket
	)
	if bk = s.bucketFor(parts); bk != nil {
		bt, rows = s.fillBucket(bk, parts)
	} else {
		bt, rows = s.fill(parts, n)
	}
	s.mu.Unlock()

	var err error
	if bk != nil {
		err = s.runBucket(bk, bt)
	} else {
		err = s.forward(bt)
	}
	if s.flies(parts, bk) {
		s.fly(parts, bt, err)
		return
	}
	if err == nil && bt.Logits != nil {
		err = s.readLogits(parts, rows, bt.Logits)
	}
	if err == nil && bt.Hidden != nil {
		s.hiddenHost = slices.Grow(s.hiddenHost[:0], bt.Hidden.Len())[:bt.Hidden.Len()]
		s.b.Read(s.hiddenHost, bt.Hidden)
		err = s.backendErr()
	}
	if bk == nil && bt.Logits != nil && bt.Logits.Rows() > s.parallel {
		// Rare: prompt scoring's rows. Keep only the common sizes.
		s.b.Free(bt.Logits)
		delete(s.tensors, [2]int{useLogits, bt.Logits.Rows()})
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows += int64(n)
	s.steps++
	hrow := 0 // the part's first row of bt.Hidden
	for i, p := range parts {
		q := p.q
		if !s.ran(p, err) {
			continue
		}
		if q.embed {
			s.pool(q, p, hrow)
			hrow += p.hidden
			continue
		}
		switch {
		case p.all > 0:
			if p.from >= p.all {
				continue
			}
			off := s.hostOff[i]
			q.host = append(q.host[:0], s.logitsHost[off:off+(p.all-p.from)*s.vocab]...)
			q.nrows = p.all - p.from
			q.scored = p.hi
			q.acked = false
		case p.logits:
			if q.pick > 0 {
				q.cands = q.cands[:0]
				for r := range p.nlog {
					c := s.candsHost[(rows[i]+r)*2*s.kmax:]
					for j := range q.pick {
						q.cands = append(q.cands, candidate{id: int32(c[s.kmax+j]), logit: c[j]})
					}
				}
			} else {
				off := s.hostOff[i]
				q.host = append(q.host[:0], s.logitsHost[off:off+p.nlog*s.vocab]...)
			}
			q.nrows = p.nlog
			q.need = false
			s.drafted += int64(p.nlog - 1)
		default:
			continue
		}
		q.delivered = time.Now()
		q.signal()
	}
}

// ran records that a step ran part p, or failed with err (reporting
// false): the sequence's positions are computed up to the part's end, or
// up to a token its caller replaced meanwhile (sequence.cut), and its full
// blocks named for the prefix cache.
func (s *Scheduler) ran(p stepPart, err error) bool {
	q := p.q
	if err != nil {
		q.err = err
		q.signal()
		return false
	}
	q.done = p.hi
	if q.cut >= 0 {
		q.done = min(q.done, q.cut)
	}
	s.keep(q, p.lo, p.hi)
	return true
}

// pool folds the hidden states part p handed over (from row r of the
// step's hidden states) into its sequence's embedding, and hands the
// embedding over at the sequence's end.
func (s *Scheduler) pool(q *sequence, p stepPart, r int) {
	h := s.hidden
	if p.lo == 0 || q.vec == nil {
		q.vec = make([]float32, h) // also after a preemption: recomputed from the start
	}
	rows := s.hiddenHost[r*h : (r+p.hidden)*h]
	switch {
	case q.pool == PoolMean:
		for j := range p.hidden {
			for c, x := range rows[j*h : (j+1)*h] {
				q.vec[c] += x
			}
		}
	case p.hidden > 0 && (q.pool == PoolLast || p.lo == 0):
		copy(q.vec, rows[:h])
	}
	if p.hi < len(q.tokens) {
		return
	}
	if q.pool == PoolMean {
		inv := 1 / float32(len(q.tokens))
		for c := range q.vec {
			q.vec[c] *= inv
		}
	}
	q.ended = true
	q.delivered = time.Now()
	q.signal()
}

// fill uploads the inputs of a step of n rows over the parts, its tensors
// sized to the step, and returns its batch and each part's first row of
// the batch's logits (-1 for none).
func (s *Scheduler) fill(parts []stepPart, n int) (*model.Batch, []int) {
	k, kh := 0, 0
	ids, pos := s.idsHost[:0], s.posHost[:0]
	rows := s.rowsOf[:0]
	for _, p := range parts {
		ids = append(ids, p.q.tokens[p.lo:p.hi]...)
		for i := p.lo; i < p.hi; i++ {
			pos = append(pos, int32(i))
		}
		r := -1
		switch {
		case p.all > 0:
			r = k
			k += p.all
		case p.logits:
			r = k
			k += p.nlog
		}
		rows = append(rows, r)
		kh += p.hidden
	}
	s.idsHost, s.posHost, s.rowsOf = ids, pos, rows
	bt := &model.Batch{IDs: s.input(useIDs, n, compute.I32, 0), Pos: s.input(usePos, n, compute.I32, 0)}
	s.b.UploadInts(bt.IDs, ids)
	s.b.UploadInts(bt.Pos, pos)
	seqRows, spans := s.seqHost[:0], s.spans[:0]
	for i, p := range parts {
		spans = append(spans, compute.PageSpan{Row: len(seqRows), Rows: p.hi - p.lo, Start: p.lo})
		for range p.hi - p.lo {
			seqRows = append(seqRows, int32(i))
		}
		bt.Seqs = append(bt.Seqs, model.BatchSeq{Rows: p.hi - p.lo, State: p.q.slot, Logits: p.logits, AllLogits: p.all > 0 || p.nlog > 1,
			Hidden: p.hidden > 0 && p.q.pool == PoolLast, AllHidden: p.hidden > 0 && p.q.pool != PoolLast})
	}
	s.seqHost, s.spans = seqRows, spans
	w := s.tableWidth(parts)
	for g := range s.groups {
		pg := compute.Pages{BlockSize: s.bs, MaxBlocks: w, Spans: spans}
		pg.Seq = s.input(useSeq+2*g, n, compute.I32, 0)
		s.b.UploadInts(pg.Seq, seqRows)
		tab := s.tableHost[:0]
		for _, p := range parts {
			tab = appendTable(tab, p.q.tables[g], w)
		}
		s.tableHost = tab
		// A view of a table tensor with room for every sequence's table
		// at the context's width (a column of one).
		room := max(s.parallel, len(parts)) * s.maxBlocks
		pg.Table = s.b.View(s.input(useTable+2*g, room, compute.I32, 1), 0, len(tab))
		s.b.UploadInts(pg.Table, tab)
		bt.Pages = append(bt.Pages, pg)
	}
	if k > 0 {
		bt.Logits = s.input(useLogits, k, compute.F32, s.vocab)
	}
	if kh > 0 {
		bt.Hidden = s.input(useHidden, kh, compute.F32, s.hidden)
	}
	return bt, rows
}

// appendTable appends a sequence's block table, padded with -1 to the
// width w, to tab.
func appendTable(tab, t []int32, w int) []int32 {
	tab = append(tab, t...)
	for range w - len(t) {
		tab = append(tab, -1)
	}
	return tab
}

// readLogits brings what the step's callers need to the host: the
// candidates of the rows whose requests let the backend pick them
// (sequence.pick, through compute.TokenPicker), every logit of the others,
// each part's rows at s.hostOff[part] in s.logitsHost. Rows nobody reads
// stay on the device.
func (s *Scheduler) readLogits(parts []stepPart, rows []int, logits *compute.Tensor) error {
	kmax, picked := 0, 0
	for i, p := range parts {
		if p.all == 0 && p.logits && p.q.pick > 0 {
			kmax = max(kmax, p.q.pick)
			picked = rows[i] + p.nlog
		}
	}
	s.kmax = kmax
	if kmax > 0 {
		n := picked * 2 * kmax
		s.growCands(max(n, 2*s.parallel*kmax))
		x := logits
		if picked < logits.Rows() {
			x = s.b.View(logits, 0, picked)
		}
		s.b.(compute.TokenPicker).TopK(s.cands, x, kmax)
		if cap(s.candsHost) < n {
			s.candsHost = make([]float32, n)
		}
		s.candsHost = s.candsHost[:n]
		s.b.Read(s.candsHost, s.cands)
		s.readFloats += int64(n)
	}
	// The full rows, in runs of consecutive rows.
	offs := s.hostOff[:0]
	need := 0
	for _, p := range parts {
		offs = append(offs, need)
		switch {
		case p.all > 0:
			need += max(p.all-p.from, 0) * s.vocab
		case p.logits && p.q.pick == 0:
			need += p.nlog * s.vocab
		}
	}
	s.hostOff = offs
	if need > 0 && cap(s.logitsHost) < need {
		s.logitsHost = make([]float32, need)
	}
	lo, hi, at := 0, 0, 0 // the run of rows [lo, hi) goes to logitsHost[at:]
	flush := func() {
		if hi > lo {
			x := logits
			if lo > 0 || hi < logits.Rows() {
				x = s.b.View(logits, lo, hi)
			}
			s.b.Read(s.logitsHost[at:at+(hi-lo)*s.vocab], x)
			s.readFloats += int64((hi - lo) * s.vocab)
		}
	}
	for i, p := range parts {
		a, b := -1, -1
		switch {
		case p.all > 0 && p.from < p.all:
			a, b = rows[i]+p.from, rows[i]+p.all
		case p.all == 0 && p.logits && p.q.pick == 0:
			a, b = rows[i], rows[i]+p.nlog
		}
		if a < 0 {
			continue
		}
		if a != hi || hi == lo {
			flush()
			lo, at = a, offs[i]
		}
		hi = b
	}
	flush()
	return s.backendErr()
}

// growCands makes s.cands hold at least n values.
func (s *Scheduler) growCands(n int) {
	if s.cands == nil || s.cands.Len() < n {
		if s.cands != nil {
			s.b.Free(s.cands)
		}
		s.cands = s.b.Alloc(compute.F32, n)
	}
}

// keep names the blocks q filled for the prefix cache, up to position hi
// and its last accepted token, and checkpoints a recurrent state at the end
// of a chunk [lo, hi).
func (s *Scheduler) keep(q *sequence, lo, hi int) {
	k := min(hi, q.held(), q.done)
	if k/s.bs > q.kept/s.bs {
		q.keys = s.hash.chain(q.keys, q.tokens[:k], s.bs)
	}
	for i := q.kept / s.bs; i < k/s.bs; i++ {
		for g, gr := range s.groups {
			if b := q.tables[g][i]; b >= 0 {
				gr.pool.register(b, q.keys[i])
			}
		}
	}
	q.kept = max(q.kept, k)
	if s.recurrent && hi%s.chunk == 0 && hi-lo > 1 {
		s.checkpoint(q, q.keys[hi/s.bs-1])
	}
}

// forward runs the pass; a panic in the model becomes an error of the
// step's sequences rather than the server's end.
func (s *Scheduler) forward(bt *model.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("scheduler: batched pass of %s failed: %v", s.m.Name, r)
		}
	}()
	s.net.ForwardBatch(s.cache, bt)
	return s.backendErr()
}

// backendErr reports a failure of an asynchronous backend.
func (s *Scheduler) backendErr() error {
	if r, ok := s.b.(compute.ErrorReporter); ok {
		if err := r.Err(); err != nil {
			return fmt.Errorf("backend %s: %w", s.b.Name(), err)
		}
	}
	return nil
}

// schedSteps runs a generation's steps as a sequence of a Scheduler.
type schedSteps struct {
	s *Scheduler
	q *sequence
	// drafts are the tokens proposed after the last token fed (see
	// draft.go), row the row of the last step's result handed out last:
	// row r's logits follow drafts[r-1]. accepted is set when the last
	// token fed was drafts[row], so that result hands out the next row
	// without a step.
	drafts   []int32
	row      int
	accepted bool
	drafter  drafter
}

func (t *schedSteps) prompt(ctx context.Context, prompt []int32) ([]float32, []candidate, error) {
	if err := t.s.submit(t.q); err != nil {
		return nil, nil, err
	}
	if err := t.s.wait(ctx, t.q); err != nil {
		return nil, nil, err
	}
	return t.q.host, t.q.cands, nil
}

func (t *schedSteps) feed(ctx context.Context, id int32, left int) error {
	s, q := t.s, t.q
	if id < 0 || int(id) >= s.vocab {
		return fmt.Errorf("token id %d out of range [0, %d)", id, s.vocab)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.fed > 0 && s.confirm(q, id, left) {
		return nil
	}
	q.left = left
	if t.row < len(t.drafts) {
		if id == t.drafts[t.row] {
			t.row++
			q.spec--
			s.accepted++
			t.accepted = true
			return nil
		}
		// The rows after a rejected draft are dropped: their positions
		// run again from the token that replaces it.
		n := len(q.tokens) - q.spec
		q.tokens = q.tokens[:n]
		q.spec = 0
		q.done = min(q.done, n)
		if q.cut < 0 || n < q.cut {
			q.cut = n
		}
	}
	t.accepted = false
	t.drafter.settle(len(t.drafts), t.row, s.draft)
	q.tokens = append(q.tokens, id)
	t.drafts = t.drafter.propose(t.drafts[:0], q.tokens, min(s.draft, left))
	q.tokens = append(q.tokens, t.drafts...)
	q.spec = len(t.drafts)
	q.need = true
	s.poke()
	return nil
}

func (t *schedSteps) result(ctx context.Context) ([]float32, []candidate, error) {
	q := t.q
	if !t.accepted {
		if err := t.s.wait(ctx, q); err != nil {
			return nil, nil, err
		}
		t.row = 0
		t.drafts = t.drafts[:q.nrows-1] // the step may have had no room for them
	}
	r := t.row
	if q.pick > 0 {
		return nil, q.cands[r*q.pick : (r+1)*q.pick], nil
	}
	v := t.s.vocab
	return q.host[r*v : (r+1)*v], nil, nil
}

func (t *schedSteps) held() int        { return t.q.held() }
func (t *schedSteps) capacity() int    { return t.s.seqCap }
func (t *schedSteps) history() []int32 { return t.q.tokens[:t.q.held()] }

// held returns the sequence's tokens that its caller handed in (the
// prompt, then the generated tokens): not its drafts, nor a token fed
// ahead.
func (q *sequence) held() int     { return len(q.tokens) - q.spec - q.fed }
func (t *schedSteps) pick() int   { return t.q.pick }
func (t *schedSteps) cached() int { return t.q.cached }
func (t *schedSteps) vocab() int  { return t.s.vocab }

func newSequence(tokens []int32, score bool) *sequence {
	return &sequence{tokens: tokens, prompt: len(tokens), score: score, need: !score, acked: true, slot: -1, cut: -1, ready: make(chan struct{}, 1)}
}

func (s *Scheduler) generate(ctx context.Context, req Request, onToken func(Token) error) (*Result, error) {
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := newSequence(slices.Clone(req.Prompt), false)
	q.pick = pickK(s.b, &req, s.vocab)
	defer s.leave(q)
	return s.m.generate(ctx, &schedSteps{s: s, q: q}, req, onToken)
}

func (s *Scheduler) promptLogprobs(ctx context.Context, ids []int32, top int) ([]Token, error) {
	out := make([]Token, 0, max(len(ids)-1, 0))
	if len(ids) < 2 {
		return out, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Position j's logits give the probabilities of token j+1; the last
	// position's are not needed.
	q := newSequence(slices.Clone(ids[:len(ids)-1]), true)
	defer s.leave(q)
	if err := s.submit(q); err != nil {
		return nil, fmt.Errorf("scoring the prompt: %w", err)
	}
	lp := newLogprobs(s.vocab, top)
	for len(out) < len(ids)-1 {
		if err := s.wait(ctx, q); err != nil {
			return nil, err
		}
		for j := range q.nrows {
			lp.observe(q.host[j*s.vocab : (j+1)*s.vocab])
			t := Token{ID: ids[len(out)+1]}
			t.Logprob, t.Top = lp.report(t.ID)
			out = append(out, t)
		}
		s.mu.Lock()
		q.acked = true
		s.poke()
		s.mu.Unlock()
	}
	return out, nil
}
