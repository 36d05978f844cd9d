package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestQueueFIFO(t *testing.T) {
	q := newQueue(1, 3, nil)
	if err := q.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if err := q.acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			order <- i
			q.release()
		}()
		// Let each waiter queue up before the next.
		for q.waiting() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := q.acquire(context.Background()); AsError(err).Code != CodeQueueFull {
		t.Fatalf("acquire on a full queue: %v, want errQueueFull", err)
	}
	q.release()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d ran in position %d", got, want)
		}
	}
}

func TestQueueCancelWhileWaiting(t *testing.T) {
	q := newQueue(1, 1, nil)
	q.acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q.acquire(ctx) }()
	for q.waiting() != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if q.waiting() != 0 {
		t.Fatal("cancelled waiter still queued")
	}
	q.release()
	// The model is free again.
	if err := q.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.close()
	q.release()
	if err := q.acquire(context.Background()); AsError(err).Code != CodeUnavailable {
		t.Fatalf("after close: %v", err)
	}
}

func TestQueueNoWaiting(t *testing.T) {
	q := newQueue(1, 0, nil)
	q.acquire(context.Background())
	if err := q.acquire(context.Background()); AsError(err).Code != CodeQueueFull {
		t.Fatalf("got %v, want errQueueFull", err)
	}
}

// TestQueueSlots admits as many requests at once as the queue has slots,
// queues the next ones in order and refuses those beyond the waiting
// room.
func TestQueueSlots(t *testing.T) {
	q := newQueue(3, 2, nil)
	for i := range 3 {
		if err := q.acquire(context.Background()); err != nil {
			t.Fatalf("acquire %d of 3 slots: %v", i+1, err)
		}
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			if err := q.acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			order <- i
		}()
		for q.waiting() != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	err := q.acquire(context.Background())
	if e := AsError(err); e == nil || e.Code != CodeQueueFull || e.RetryAfter < minRetryAfter {
		t.Fatalf("acquire with 3 running and 2 waiting: %v, want errQueueFull with a Retry-After", err)
	}
	q.release()
	if got := <-order; got != 0 {
		t.Fatalf("waiter %d ran first", got)
	}
	q.release()
	if got := <-order; got != 1 {
		t.Fatalf("waiter %d ran second", got)
	}
	// Three run again; a fourth waits rather than being refused.
	if n := q.waiting(); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
	for range 3 {
		q.release()
	}
	for i := range 3 {
		if err := q.acquire(context.Background()); err != nil {
			t.Fatalf("acquire %d after the releases: %v", i+1, err)
		}
	}
}
