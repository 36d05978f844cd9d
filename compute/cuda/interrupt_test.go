package cuda

import (
	"sync/atomic"
	"testing"
)

// TestInterruptTags checks, without a GPU, which recorded ops SetInterrupt
// ties to its flag: kernel launches and cuBLAS products, not the calls that
// move, allocate or wait, and nothing while a graph is being captured; and
// that it ends the memos that let an op build on the one before.
func TestInterruptTags(t *testing.T) {
	b := &Backend{}
	stop := new(atomic.Bool)
	seq := b.recorded
	b.SetInterrupt(stop)
	if b.recorded == seq {
		t.Error("SetInterrupt kept the sequence that fusion and input memos compare")
	}
	kernel := b.launch(1, "kernel", 1, 32)
	product := b.record(op{name: "cublasGemmEx", work: true, call: func(*owner) error { return nil }})
	b.enqueue(func(*owner) error { return nil })
	copyOp := &b.pending[len(b.pending)-1]
	b.capturing = true
	captured := b.launch(1, "captured", 1, 32)
	b.capturing = false
	b.SetInterrupt(nil)
	after := b.launch(1, "after", 1, 32)
	for _, c := range []struct {
		name string
		o    *op
		tied bool
	}{
		{"kernel", kernel, true},
		{"cuBLAS product", product, true},
		{"copy", copyOp, false},
		{"kernel captured in a graph", captured, false},
		{"kernel after SetInterrupt(nil)", after, false},
	} {
		if tied := c.o.stop == stop; tied != c.tied || !tied && c.o.stop != nil {
			t.Errorf("%s: tied to the flag %v, want %v", c.name, tied, c.tied)
		}
	}
}

// TestOwnerSkipsInterrupted runs the owner loop without a GPU on calls
// tied to a flag: those it reaches after the flag is set are skipped, the
// others run, and the batch still reports completion.
func TestOwnerSkipsInterrupted(t *testing.T) {
	reqs, recycle := make(chan batch), make(chan []op, 1)
	defer close(reqs)
	w := &owner{}
	go w.loop(reqs, recycle)

	stop := new(atomic.Bool)
	var ran []string
	call := func(name string, set bool) func(*owner) error {
		return func(*owner) error {
			ran = append(ran, name)
			if set {
				stop.Store(true)
			}
			return nil
		}
	}
	done := make(chan error, 1)
	reqs <- batch{ops: []op{
		{call: call("first", false), stop: stop},
		{call: call("sets the flag", true), stop: stop},
		{call: call("skipped", false), stop: stop},
		{call: call("untied", false)},
		{call: call("skipped too", false), stop: stop},
	}, done: done}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []string{"first", "sets the flag", "untied"}
	if len(ran) != len(want) {
		t.Fatalf("ran %q, want %q", ran, want)
	}
	for i := range want {
		if ran[i] != want[i] {
			t.Fatalf("ran %q, want %q", ran, want)
		}
	}
}
