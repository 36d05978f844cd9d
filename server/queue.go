package server

import (
	"context"
	"sync"
)

// queue admits requests to a model one at a time, in arrival order. Up to
// max requests wait behind the one running; more are refused at once.
type queue struct {
	mu      sync.Mutex
	max     int
	busy    bool
	closed  bool
	waiters []chan struct{}
	// depth, when set, is told the number of waiting requests.
	depth func(int)
}

func newQueue(max int, depth func(int)) *queue {
	if depth == nil {
		depth = func(int) {}
	}
	return &queue{max: max, depth: depth}
}

// acquire waits for the model. It returns errQueueFull when max requests
// already wait, errShuttingDown after close, and ctx's error when ctx ends
// first. On success the caller must call release exactly once.
func (q *queue) acquire(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return errShuttingDown
	}
	if !q.busy && len(q.waiters) == 0 {
		q.busy = true
		q.mu.Unlock()
		return nil
	}
	if len(q.waiters) >= q.max {
		q.mu.Unlock()
		return errQueueFull
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.depth(len(q.waiters))
	q.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.depth(len(q.waiters))
				q.mu.Unlock()
				return ctx.Err()
			}
		}
		q.mu.Unlock()
		// Granted while giving up: pass the turn on.
		q.release()
		return ctx.Err()
	}
}

// release hands the model to the next waiter, or marks it idle.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	next := q.waiters[0]
	q.waiters[0] = nil
	q.waiters = q.waiters[1:]
	q.depth(len(q.waiters))
	close(next)
}

// waiting returns the number of requests waiting.
func (q *queue) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

// close refuses new requests; those waiting and running carry on.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}
