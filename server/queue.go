package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// queue admits requests to a model, up to slots at once, in arrival
// order. Up to max requests wait while every slot is taken; more are
// refused at once.
type queue struct {
	mu      sync.Mutex
	max     int
	slots   int
	closed  bool
	waiters []chan struct{}
	// depth, when set, is told the number of waiting requests.
	depth func(int)

	// running holds when each running request was admitted; hold is the
	// average time requests held a slot (exponentially weighted), 0
	// before the first one ended. They give Retry-After its estimate.
	running []time.Time
	hold    time.Duration
}

// newQueue returns a queue of slots places (at least 1) with room for
// waiting requests waiting.
func newQueue(slots, waiting int, depth func(int)) *queue {
	if depth == nil {
		depth = func(int) {}
	}
	return &queue{max: waiting, slots: max(slots, 1), depth: depth}
}

// acquire waits for a slot. It returns a 429 *Error when max requests
// already wait, a 503 *Error after close, and ctx's error when ctx ends
// first. On success the caller must call release exactly once.
func (q *queue) acquire(ctx context.Context) error {
	return q.acquireWaiting(ctx, 0, nil)
}

// acquireWaiting is acquire for a request that keeps its client informed
// while it waits: when it has to wait, waiting (if not nil) is called once
// it holds its place in the queue, and then every interval (if positive)
// until its turn comes. An error from waiting gives the place up and is
// returned.
func (q *queue) acquireWaiting(ctx context.Context, interval time.Duration, waiting func() error) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return errShuttingDown
	}
	if len(q.running) < q.slots && len(q.waiters) == 0 {
		q.running = append(q.running, time.Now())
		q.mu.Unlock()
		return nil
	}
	if len(q.waiters) >= q.max {
		e := *errQueueFull
		e.RetryAfter = q.retryAfterLocked()
		q.mu.Unlock()
		return &e
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.depth(len(q.waiters))
	q.mu.Unlock()

	if waiting != nil {
		if err := waiting(); err != nil {
			q.leave(ch)
			return err
		}
	}
	var tick <-chan time.Time
	if waiting != nil && interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			q.leave(ch)
			return ctx.Err()
		case <-tick:
			if err := waiting(); err != nil {
				q.leave(ch)
				return err
			}
		}
	}
}

// leave gives up the place of the waiter ch, passing the turn on if it
// was granted meanwhile.
func (q *queue) leave(ch chan struct{}) {
	q.mu.Lock()
	for i, w := range q.waiters {
		if w == ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			q.depth(len(q.waiters))
			q.mu.Unlock()
			return
		}
	}
	q.mu.Unlock()
	// Granted while giving up: pass the turn on.
	q.release()
}

// release gives up a slot: to the next waiter, or free.
func (q *queue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	// The oldest request ends its hold here: the holds are not told
	// apart, and the oldest is the one the estimate waits for.
	if len(q.running) > 0 {
		if d := now.Sub(q.running[0]); q.hold == 0 {
			q.hold = d
		} else {
			q.hold += (d - q.hold) / 4
		}
		q.running = append(q.running[:0], q.running[1:]...)
	}
	if len(q.waiters) == 0 {
		return
	}
	q.running = append(q.running, now)
	next := q.waiters[0]
	q.waiters[0] = nil
	q.waiters = q.waiters[1:]
	q.depth(len(q.waiters))
	close(next)
}

// Bounds of the Retry-After estimate of a full queue.
const (
	minRetryAfter = time.Second
	maxRetryAfter = time.Minute
)

// retryAfterLocked estimates when a refused request may find room: a
// place in the queue frees when a running request ends, the oldest
// expected first, after the average hold time less the time it has run. Before
// any request ended there is no average, and the estimate is the
// minimum. It is rounded up to whole seconds and kept within
// [minRetryAfter, maxRetryAfter].
func (q *queue) retryAfterLocked() time.Duration {
	var d time.Duration
	if len(q.running) > 0 {
		d = q.hold - time.Since(q.running[0])
	}
	d = time.Duration(math.Ceil(d.Seconds())) * time.Second
	return min(max(d, minRetryAfter), maxRetryAfter)
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

// shutdownRetryAfter is the Retry-After of a 503 while the server shuts
// down: the time for a supervisor to start lem again and load the model
// is unknown, so a few seconds; clients retry with their own backoff.
const shutdownRetryAfter = 5 * time.Second

// setRetryAfter adds a Retry-After header, in whole seconds, to a
// response carrying e, when e says when to retry.
func setRetryAfter(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
}
