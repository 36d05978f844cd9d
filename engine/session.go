// Package engine runs models: sessions that own a sequence's KV cache,
// chunked prefill, decoding, sampling and generation, and a scheduler that
// runs many sequences in one batch over a paged cache (sched.go).
package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// DefaultChunk is the number of prompt tokens processed per forward pass
// during prefill; it bounds the scratch memory of a session.
const DefaultChunk = 256

// chunkFor returns the prefill chunk a session on b starts with: the
// backend's (compute.PrefillChunker) if it names one, else DefaultChunk.
func chunkFor(b compute.Backend) int {
	if c, ok := b.(compute.PrefillChunker); ok && c.PrefillChunk() > 0 {
		return c.PrefillChunk()
	}
	return DefaultChunk
}

// Session holds the state of one sequence: its tokens and the model's
// per-sequence state (KV caches). It is not safe for concurrent use.
type Session struct {
	m      model.Model
	b      compute.Backend
	st     model.State
	tokens []int32
	chunk  int
	vocab  int

	// Tensors reused across steps, keyed by row count.
	ids, pos map[int]*compute.Tensor
	logits   *compute.Tensor // [1, vocab]
	host     []float32       // logits of the last position, on the host
	posHost  []int32

	// The decode step recorded as a graph on backends that can (CUDA):
	// replaying it costs one launch instead of hundreds.
	graph       compute.Graph
	graphFailed bool
	decodeSteps int

	pick  *picked // the device's top candidates (pick.go)
	ahead ahead   // greedy steps queued ahead (ahead.go)
}

// NewSession allocates a session of up to ctx positions.
func NewSession(m model.Model, b compute.Backend, ctx int) *Session {
	vocab := m.Config().VocabSize
	return &Session{
		m: m, b: b, st: m.NewState(ctx), chunk: chunkFor(b), vocab: vocab,
		ids: map[int]*compute.Tensor{}, pos: map[int]*compute.Tensor{},
		logits: b.Alloc(compute.F32, 1, vocab),
		host:   make([]float32, vocab),
	}
}

// SetChunk sets the prefill chunk size (tokens per forward pass).
func (s *Session) SetChunk(n int) { s.chunk = max(1, n) }

// Len returns the number of positions processed so far.
func (s *Session) Len() int { return len(s.tokens) }

// Tokens returns the tokens processed so far.
func (s *Session) Tokens() []int32 { return s.tokens }

// Capacity returns the maximum number of positions.
func (s *Session) Capacity() int { return s.st.Capacity() }

// Memory returns the bytes the model's per-sequence state holds: KV caches,
// recurrent state and its checkpoints.
func (s *Session) Memory() model.StateMemory { return s.st.Memory() }

func (s *Session) inputs(n int) (ids, pos *compute.Tensor) {
	if s.ids[n] == nil {
		s.ids[n] = s.b.Alloc(compute.I32, n)
		s.pos[n] = s.b.Alloc(compute.I32, n)
	}
	return s.ids[n], s.pos[n]
}

// Append runs the tokens through the model in chunks and returns the logits
// of the last one. The returned slice is reused by the next call.
func (s *Session) Append(tokens []int32) ([]float32, error) {
	return s.AppendContext(context.Background(), tokens)
}

// AppendContext is Append that gives up once ctx is done, returning ctx's
// error: it checks ctx between chunks and, on a backend that can abandon
// work (compute.Interruptible), between the operations of a chunk too, so
// that it returns within about one operation, or one chunk elsewhere. The
// session then holds the chunks that were completed (those of a state
// with recurrent parts back to its last checkpoint, and none where the
// abandoned chunk overwrote a sliding window's positions), so that the
// next prompt can reuse them.
func (s *Session) AppendContext(ctx context.Context, tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("append: no tokens")
	}
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	if err := s.run(ctx, tokens); err != nil {
		return nil, err
	}
	s.b.Read(s.host, s.logits)
	if err := s.err(); err != nil {
		return nil, err
	}
	return s.host, nil
}

// run runs checked tokens through the model in chunks, leaving the logits
// of the last one in s.logits. Once ctx is done it stops, as AppendContext
// describes, and returns ctx's error.
func (s *Session) run(ctx context.Context, tokens []int32) error {
	watch := ctx.Done() != nil && len(tokens) > 1
	var stop *atomic.Bool
	ib, _ := s.b.(compute.Interruptible)
	if watch && ib != nil {
		stop = new(atomic.Bool)
		release := context.AfterFunc(ctx, func() { stop.Store(true) })
		ib.SetInterrupt(stop)
		defer func() {
			release()
			ib.SetInterrupt(nil)
		}()
	}
	for lo := 0; lo < len(tokens); lo += s.chunk {
		if watch {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("prefill stopped after %d of %d tokens: %w", lo, len(tokens), err)
			}
		}
		hi := min(lo+s.chunk, len(tokens))
		// Only the last chunk's logits are read; the model may skip
		// work for the others.
		var logits *compute.Tensor
		if hi == len(tokens) {
			logits = s.logits
		}
		held := len(s.tokens)
		s.forward(tokens[lo:hi], logits)
		if r, ok := s.st.(model.Recurrent); ok && len(tokens) > 1 {
			r.Checkpoint(len(s.tokens))
		}
		if stop == nil {
			continue
		}
		// Wait for the chunk (and its checkpoint): if stop is still
		// unset, none of its operations was skipped.
		s.b.Read(s.host[:1], s.logits)
		if stop.Load() {
			ib.SetInterrupt(nil)
			s.abandon(held, hi-lo)
			return fmt.Errorf("prefill stopped after %d of %d tokens: %w", lo, len(tokens), ctx.Err())
		}
	}
	return nil
}

// abandon drops the chunk of n positions after the first held, some of
// whose operations may have been skipped (compute.Interruptible): the
// cache rows it wrote and the recurrent state are undefined. A recurrent
// state goes back to its last checkpoint at or before held; caches whose
// sliding window the chunk may have wrapped over start afresh.
func (s *Session) abandon(held, n int) {
	s.tokens = s.tokens[:held]
	s.ahead.over = false
	if r, ok := s.st.(model.Recurrent); ok {
		s.tokens = s.tokens[:r.Restore(held)]
		return
	}
	if !s.st.CanRewind(held, held+n) {
		s.Reset()
	}
}

// err reports a failure of an asynchronous backend.
func (s *Session) err() error {
	if r, ok := s.b.(compute.ErrorReporter); ok {
		if err := r.Err(); err != nil {
			return fmt.Errorf("backend %s: %w", s.b.Name(), err)
		}
	}
	return nil
}

// AppendAll runs the tokens as one forward pass and returns the logits of
// every position, [len(tokens)][vocab]. Conformance tests use it.
func (s *Session) AppendAll(tokens []int32) ([][]float32, error) {
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	n := len(tokens)
	logits := s.b.Alloc(compute.F32, n, s.vocab)
	defer s.b.Free(logits)
	s.forward(tokens, logits)
	flat := make([]float32, n*s.vocab)
	s.b.Read(flat, logits)
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*s.vocab : (i+1)*s.vocab]
	}
	return out, nil
}

func (s *Session) check(tokens []int32) error {
	if len(s.tokens)+len(tokens) > s.Capacity() {
		return fmt.Errorf("context length exceeded: %d positions held + %d new > %d", len(s.tokens), len(tokens), s.Capacity())
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= s.vocab {
			return fmt.Errorf("token id %d out of range [0, %d)", t, s.vocab)
		}
	}
	return nil
}

func (s *Session) forward(tokens []int32, logits *compute.Tensor) {
	n := len(tokens)
	ids, pos := s.inputs(n)
	if cap(s.posHost) < n {
		s.posHost = make([]int32, n)
	}
	p := s.posHost[:n]
	for i := range p {
		p[i] = int32(len(s.tokens) + i)
	}
	s.b.UploadInts(ids, tokens)
	s.b.UploadInts(pos, p)
	if n == 1 && logits == s.logits {
		s.decode(ids, pos)
	} else {
		s.m.Forward(s.st, ids, pos, logits)
	}
	s.tokens = append(s.tokens, tokens...)
	s.ahead.over = false
}

// decode runs one decode step, through a recorded graph where the backend
// records them. The first step runs directly (it sizes the scratch
// buffers); the second is captured; later ones replay it. The inputs are
// the same tensors every step, so the graph reads the new id and position.
//
// The step is written out rather than kept in a closure, which would be
// allocated on every step.
func (s *Session) decode(ids, pos *compute.Tensor) {
	gc, ok := s.b.(compute.GraphCapturer)
	if !ok || s.graphFailed {
		s.m.Forward(s.st, ids, pos, s.logits)
		return
	}
	s.decodeSteps++
	if s.graph == nil && s.decodeSteps > 1 {
		g, err := gc.Capture(func() { s.m.Forward(s.st, ids, pos, s.logits) })
		if err != nil {
			s.graphFailed = true
			s.m.Forward(s.st, ids, pos, s.logits)
			return
		}
		s.graph = g
		// Capturing ran Forward's host bookkeeping once already.
		g.Launch()
		return
	}
	if s.graph != nil {
		s.graph.Launch()
		// The replay ran the step on the device only: a recurrent state
		// still has to count the position.
		if r, ok := s.st.(model.Recurrent); ok {
			r.Advance(1)
		}
		return
	}
	s.m.Forward(s.st, ids, pos, s.logits)
}

// Close releases the session's recorded graphs, if any.
func (s *Session) Close() error {
	var err error
	for _, g := range []*compute.Graph{&s.graph, &s.ahead.graph} {
		if *g != nil {
			if e := (*g).Close(); err == nil {
				err = e
			}
			*g = nil
		}
	}
	return err
}

// Reset forgets every position; the caches are reused.
func (s *Session) Reset() {
	s.ahead.queued, s.ahead.over = false, false
	s.tokens = s.tokens[:0]
	if r, ok := s.st.(model.Recurrent); ok {
		r.Restore(0)
	}
}

// written returns how many positions the caches hold: the session's
// tokens, and one more after a dropped step ahead.
func (s *Session) written() int {
	if s.ahead.over {
		return len(s.tokens) + 1
	}
	return len(s.tokens)
}

// Reuse prepares the session for a new prompt: it keeps the longest common
// prefix of the session's tokens and prompt that the state can rewind to
// (always leaving at least one prompt token to run, so that there are
// logits to sample from), and returns the number of tokens kept. The caller
// appends prompt[kept:]. A state with recurrent parts rewinds to its
// nearest checkpoint at or before the common prefix.
func (s *Session) Reuse(prompt []int32) int {
	n := 0
	for n < len(s.tokens) && n < len(prompt)-1 && s.tokens[n] == prompt[n] {
		n++
	}
	if n < len(s.tokens) {
		if r, ok := s.st.(model.Recurrent); ok {
			n = r.Restore(n)
		} else if !s.st.CanRewind(n, s.written()) {
			n = 0
		}
	}
	s.tokens = s.tokens[:n]
	return n
}
