package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/lem-engine/lem/chat"
)

// Bounded work before admission.
//
// Rendering and tokenizing a prompt happen before the model's queue, so
// without a bound any number of huge prompts would be rendered and
// tokenized at once. Three things keep that work bounded:
//
//   - prepareGate, a semaphore weighted by bytes of prompt text, server-wide:
//     a request waits until its bytes fit (in arrival order) before its
//     prompt is rendered and tokenized. A request heavier than the whole
//     bound is not refused (the body limit already bounds it) but runs
//     alone: it waits until nothing else is being prepared and takes the
//     whole bound.
//   - a prompt is measured against the context before and while it is
//     tokenized: a lower bound on its tokens (its bytes over the most bytes
//     one token stands for) refuses a prompt that cannot fit before it is
//     rendered, and tokenization stops as soon as the tokens pass the
//     context (Tokenizer.EncodeLimit).
//   - after a large prompt, once no large prompt has come for
//     freeMemoryAfter, the memory the runtime holds is returned to the
//     system (debug.FreeOSMemory): the Go runtime otherwise keeps the freed
//     heap of a burst for minutes, and the bodies and decoded JSON of such
//     requests are freed only after they leave.

// DefaultMaxPrepareBytes is the default of Config.MaxPrepareBytes.
const DefaultMaxPrepareBytes = 64 << 20

const (
	// largePrompt is the size from which a prompt's memory is returned to
	// the system once the burst it belongs to is over.
	largePrompt = 1 << 20
	// freeMemoryAfter is how long after the last large prompt the memory
	// is returned.
	freeMemoryAfter = time.Second
)

// prepareGate is a semaphore weighted by bytes whose waiters are served in
// arrival order.
type prepareGate struct {
	mu      sync.Mutex
	size    int64
	used    int64
	waiters []*gateWaiter

	// Returning memory after large prompts.
	freeTimer *time.Timer
	freeMem   func() // debug.FreeOSMemory; replaced in tests
}

type gateWaiter struct {
	n     int64
	ready chan struct{}
}

// detachedGate bounds the models not served by a Server.
var detachedGate = newPrepareGate(DefaultMaxPrepareBytes)

func newPrepareGate(size int64) *prepareGate {
	return &prepareGate{size: size, freeMem: freeMemory}
}

// freeMemory returns the freed heap to the system. It collects twice: the
// first collection moves what sync.Pools hold to their victim caches, the
// second frees it.
func freeMemory() {
	debug.FreeOSMemory()
	debug.FreeOSMemory()
}

// acquire waits until n bytes (at most the gate's size) are free and no
// earlier request waits, then takes them. It returns the weight taken,
// to pass to release, or an error when ctx ends first.
func (g *prepareGate) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 1), g.size)
	g.mu.Lock()
	if len(g.waiters) == 0 && g.used+n <= g.size {
		g.used += n
		g.mu.Unlock()
		return n, nil
	}
	w := &gateWaiter{n: n, ready: make(chan struct{})}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		g.mu.Lock()
		for i, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				// The head may have been waiting behind this one.
				g.grant()
				g.mu.Unlock()
				return 0, ctx.Err()
			}
		}
		g.mu.Unlock()
		// Granted while giving up: give the bytes back.
		g.release(n)
		return 0, ctx.Err()
	}
}

// release gives back n bytes taken by acquire.
func (g *prepareGate) release(n int64) {
	g.mu.Lock()
	g.used -= n
	g.grant()
	g.mu.Unlock()
}

// grant wakes the waiters at the head of the line whose bytes fit. The
// caller holds g.mu.
func (g *prepareGate) grant() {
	for len(g.waiters) > 0 && g.used+g.waiters[0].n <= g.size {
		w := g.waiters[0]
		g.waiters[0] = nil
		g.waiters = g.waiters[1:]
		g.used += w.n
		close(w.ready)
	}
}

// done notes that a prompt of n bytes was prepared (or refused); after a
// large one, the memory is returned to the system freeMemoryAfter after
// the last.
func (g *prepareGate) done(n int64) {
	if n < largePrompt {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freeTimer == nil {
		g.freeTimer = time.AfterFunc(freeMemoryAfter, g.freeMem)
		return
	}
	g.freeTimer.Reset(freeMemoryAfter)
}

// readBody reads a request body. When the client announced its length
// (within the body limit) the buffer is allocated once at that size rather
// than grown by doubling, which for a body of megabytes would allocate
// about twice as much.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > s.cfg.MaxBodyBytes {
		return io.ReadAll(r.Body)
	}
	buf := make([]byte, 0, n+1) // +1: room to see the end without growing
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// errCanceled is returned when the client leaves while its request waits
// to be prepared; nobody reads it but the logs.
var errCanceled = &Error{Status: 499, Code: "canceled", Message: "the client went away before the request was prepared"}

// admit waits for the right to render and tokenize req's prompt, after
// refusing at once a prompt that cannot fit the context. It returns the
// function that ends that right.
func (m *Model) admit(ctx context.Context, req *Request, promptParam string) (func(), error) {
	weight, certain := promptBytes(req)
	g, base := detachedGate, context.Background()
	if m.srv != nil {
		g, base = m.srv.prepare, m.srv.base
	}
	if least := max(m.minTokens(certain), len(req.PromptIDs)); least >= m.ctxLen {
		g.done(weight)
		return nil, tooLong(promptParam, least, m.ctxLen)
	}
	n, err := g.acquire(ctx, weight)
	if err != nil {
		g.done(weight)
		if base.Err() != nil {
			return nil, errShuttingDown
		}
		return nil, errCanceled
	}
	return func() {
		g.release(n)
		g.done(weight)
	}, nil
}

// minTokens returns a lower bound on the tokens of a text of n bytes, or 0.
func (m *Model) minTokens(n int64) int {
	if per := m.eng.Tokenizer.MaxTokenBytes(); per > 0 {
		return int(n / int64(per))
	}
	return 0
}

// encodeBounded encodes a prompt with encode (Tokenizer.EncodeLimit or
// EncodePlainLimit), stopping with a context_length_exceeded error as soon
// as it has more tokens than the context holds.
func (m *Model) encodeBounded(encode func(string, bool, int) ([]int32, bool), text string, addSpecial bool, promptParam string) ([]int32, error) {
	ids, ok := encode(text, addSpecial, m.ctxLen)
	if !ok {
		return nil, tooLong(promptParam, len(ids), m.ctxLen)
	}
	return ids, nil
}

// tooLong reports a prompt of at least n tokens, which leaves no room for
// output in a context of ctxLen.
func tooLong(promptParam string, n, ctxLen int) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: promptParam,
		Message: fmt.Sprintf("the prompt has at least %d tokens; the model's context holds %d, leaving no room for output", n, ctxLen)}
}

// promptBytes measures the text of req that rendering and tokenizing
// handle: weight counts all of it (messages, reasoning, tool calls and
// definitions, the raw prompt), certain the part every chat template
// renders in full, the content of user and tool messages, or the raw
// prompt.
func promptBytes(req *Request) (weight, certain int64) {
	if len(req.Messages) == 0 {
		n := int64(len(req.Prompt) + 4*len(req.PromptIDs))
		return n, int64(len(req.Prompt))
	}
	for _, msg := range req.Messages {
		c := contentBytes(msg.Content)
		if msg.Role == "user" || msg.Role == "tool" {
			certain += c
		}
		weight += c + int64(len(msg.ReasoningContent)+len(msg.Name)+len(msg.ToolCallID))
		for _, tc := range msg.ToolCalls {
			weight += int64(len(tc.Name) + len(tc.Arguments))
		}
		for _, f := range msg.Extra {
			weight += int64(len(f.Value))
		}
	}
	for _, t := range req.Tools {
		weight += int64(len(t))
	}
	return weight, certain
}

// contentBytes returns the bytes of text in a message's content.
func contentBytes(c chat.Content) int64 {
	if !c.IsParts() {
		return int64(len(c.Text()))
	}
	var n int64
	for _, p := range c.Parts() {
		n += int64(len(p.Text))
	}
	return n
}
