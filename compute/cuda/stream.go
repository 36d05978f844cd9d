package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// A CUDA context is current on one OS thread at a time, so every driver
// call is made by one goroutine locked to its thread (the owner). The
// Backend, used by one goroutine, records operations in a batch and hands
// full batches to the owner over a channel; the owner launches them on its
// stream while the caller records the next batch. Only Read and the rare
// calls that need an answer (allocation, capture) wait for the owner.

// maxArgs is the most kernel arguments an op carries.
const maxArgs = 26

// flushAt is the batch length at which recorded operations are handed to
// the owner without waiting, so that the GPU starts early.
const flushAt = 48

// op is one recorded operation: a kernel launch, or a call run on the owner
// thread.
type op struct {
	fn          uintptr // CUfunction; 0 when call is set
	name        string
	grid, block [3]uint32
	shared      uint32
	pdl         bool // may start before the previous kernel ends (pdl.go)
	nargs       int
	args        [maxArgs]uint64
	call        func(*owner) error
	work        bool         // call computes (a cuBLAS product): SetInterrupt may skip it
	stop        *atomic.Bool // skip the op once this is set (SetInterrupt)
}

// ptr appends a device pointer argument.
func (o *op) ptr(p uintptr) *op { o.args[o.nargs] = uint64(p); o.nargs++; return o }

// i appends an int argument.
func (o *op) i(v int) *op { o.args[o.nargs] = uint64(uint32(int32(v))); o.nargs++; return o }

// i64 appends a long long argument.
func (o *op) i64(v int) *op { o.args[o.nargs] = uint64(int64(v)); o.nargs++; return o }

// f appends a float argument.
func (o *op) f(v float32) *op { o.args[o.nargs] = uint64(math.Float32bits(v)); o.nargs++; return o }

// batch is a unit of work for the owner: recorded ops (skipped after the
// first failure, which sticks) or one function that always runs.
type batch struct {
	ops  []op
	fn   func(*owner) error
	done chan error // nil: nobody waits
}

// owner is the state of the goroutine that owns the CUDA context.
type owner struct {
	d      *driver
	dev    int32
	ctx    uintptr
	stream uintptr
	params [maxArgs]uintptr
	launch launchConfig // cuLaunchKernelEx's configuration
	attr   launchAttr
	err    error // first failure of a recorded op; sticks
}

// loop runs batches until reqs is closed.
func (w *owner) loop(reqs <-chan batch, recycle chan<- []op) {
	runtime.LockOSThread()
	for bt := range reqs {
		var err error
		if bt.fn != nil {
			err = bt.fn(w)
		} else {
			for i := range bt.ops {
				if w.err != nil {
					break
				}
				if s := bt.ops[i].stop; s != nil && s.Load() {
					continue
				}
				w.err = w.exec(&bt.ops[i])
			}
			err = w.err
			clear(bt.ops)
			select {
			case recycle <- bt.ops[:0]:
			default:
			}
		}
		if bt.done != nil {
			bt.done <- err
		}
	}
}

// exec performs one recorded op.
func (w *owner) exec(o *op) error {
	if o.call != nil {
		return o.call(w)
	}
	for i := 0; i < o.nargs; i++ {
		w.params[i] = uintptr(unsafe.Pointer(&o.args[i]))
	}
	if o.pdl && w.d.cuLaunchKernelEx != 0 {
		return w.launchPDL(o)
	}
	r := call(w.d.cuLaunchKernel, o.fn,
		uintptr(o.grid[0]), uintptr(o.grid[1]), uintptr(o.grid[2]),
		uintptr(o.block[0]), uintptr(o.block[1]), uintptr(o.block[2]),
		uintptr(o.shared), w.stream, uintptr(unsafe.Pointer(&w.params[0])), 0)
	if r != cudaSuccess {
		return fmt.Errorf("kernel %s grid %v block %v: %w", o.name, o.grid, o.block, w.d.check("cuLaunchKernel", r))
	}
	return nil
}

func (w *owner) check(op string, r result) error { return w.d.check(op, r) }

// htod copies host bytes to the device in stream order. The driver stages
// pageable memory before returning, so data may be reused afterwards.
func (w *owner) htod(dst uintptr, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	r := call(w.d.cuMemcpyHtoDAsync, dst, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), w.stream)
	runtime.KeepAlive(data)
	return w.check("cuMemcpyHtoDAsync", r)
}

// dtoh copies device bytes to the host and waits for them.
func (w *owner) dtoh(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	r := call(w.d.cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), src, uintptr(len(dst)), w.stream)
	if r == cudaSuccess {
		r = call(w.d.cuStreamSynchronize, w.stream)
	}
	runtime.KeepAlive(dst)
	return w.check("cuMemcpyDtoHAsync", r)
}

// sync waits for the stream.
func (w *owner) sync() error {
	return w.check("cuStreamSynchronize", call(w.d.cuStreamSynchronize, w.stream))
}

// alloc allocates device memory.
func (w *owner) alloc(size int64) (uintptr, error) {
	var p uintptr
	if err := w.check(fmt.Sprintf("cuMemAlloc(%d bytes)", size), call(w.d.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size))); err != nil {
		return 0, err
	}
	return p, nil
}
