package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Pool is a set of worker goroutines that kernels split their work across.
// The goroutine that calls a kernel works too, so a Pool of n threads runs
// n-1 goroutines. A Pool runs one kernel call at a time: concurrent calls
// on the same Pool wait for each other. Kernel calls allocate nothing once
// the Pool's scratch buffers have grown to the largest shapes used.
//
// After a call the workers keep polling for the next one for a short while
// (poolSpin) before they sleep, because waking a sleeping goroutine costs
// tens of microseconds, as much as a small matrix-vector product takes, and
// decoding issues calls back to back.
//
// The workers stop when Close is called or the Pool becomes unreachable.
type Pool struct {
	s *poolState
}

// poolSpin is how long idle workers, and a caller waiting for them, poll
// before they sleep.
const poolSpin = 100 * time.Microsecond

type poolState struct {
	mu      sync.Mutex
	threads int
	workers []*worker // workers[0] is the calling goroutine
	closed  atomic.Bool
	// rowStable makes one-row products compute as many-row ones do
	// (Backend.SetRowStable).
	rowStable bool

	gen     atomic.Uint64 // incremented to start a task
	pending atomic.Int64  // workers still running the current task
	waiter  parker        // the calling goroutine, waiting for pending == 0

	// The current task: chunks [0, nchunks) are handed out by next.
	task    taskKind
	nchunks int
	next    atomic.Int64
	mm      matmulTask
	qm      qmatmulTask
	amx     amxTask
	stream  streamTask
	fn      func(chunk int)

	xp []float32 // packed activations
	xq []byte    // quantized activations (qscratch)
	xb []uint16  // bf16 activations (bscratch)
}

type worker struct {
	parker
	args  kargs
	qargs qargs
	wf    []float32 // dequantized weight rows
	amx   amxArgs
	bt    []byte                     // AMX: a strip of dequantized B tiles
	cs    [amxRows * amxRows]float32 // AMX: the products of a partial tile
	sum   uint64                     // StreamRead's partial sum
	_     [64]byte                   // keep neighbouring workers' fields on separate cache lines
}

// parker lets a goroutine sleep until woken without losing a wake-up that
// races with going to sleep.
type parker struct {
	parked atomic.Bool
	wake   chan struct{}
}

// sleep blocks until cond holds; wakeup must be called after every change
// that can make cond true.
//
// A wake-up can arrive late: the waker may be descheduled between making
// cond true and calling wakeup, while the sleeper notices cond by itself,
// goes on, and parks again for a later event. The stale token then ends
// that later sleep early, so sleep checks cond again after every wake-up
// instead of trusting it.
func (p *parker) sleep(cond func() bool) {
	for {
		p.parked.Store(true)
		if cond() && p.parked.CompareAndSwap(true, false) {
			return
		}
		<-p.wake
		if cond() {
			return
		}
	}
}

// wakeup wakes the goroutine if it is asleep or about to be.
func (p *parker) wakeup() {
	if p.parked.CompareAndSwap(true, false) {
		p.wake <- struct{}{}
	}
}

type taskKind uint8

const (
	taskPack taskKind = iota
	taskGEMV
	taskGEMM
	taskStream
	taskFunc
	taskQPack
	taskQGEMV
	taskQGEMM
	taskQDequant
	taskAMXCvt
	taskAMX
)

// NewPool returns a pool of the given number of threads; threads <= 0
// means runtime.GOMAXPROCS(0), which is the number of CPUs the process may
// use.
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	s := &poolState{threads: threads, workers: make([]*worker, threads)}
	s.waiter.wake = make(chan struct{}, 1)
	for i := range s.workers {
		s.workers[i] = &worker{parker: parker{wake: make(chan struct{}, 1)}}
		if i > 0 {
			go s.loop(i)
		}
	}
	p := &Pool{s: s}
	runtime.AddCleanup(p, func(s *poolState) { s.close() }, s)
	return p
}

// Threads returns the number of threads the pool runs kernels on.
func (p *Pool) Threads() int { return p.s.threads }

// Close stops the worker goroutines. The pool must not be used afterwards.
func (p *Pool) Close() { p.s.close() }

func (s *poolState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return
	}
	s.gen.Add(1)
	for _, w := range s.workers[1:] {
		w.wakeup()
	}
}

var defaultPool = sync.OnceValue(func() *Pool { return NewPool(0) })

// lock returns the pool's state, locked; a nil Pool means a shared
// default one of runtime.GOMAXPROCS(0) threads.
func (p *Pool) lock() *poolState {
	if p == nil {
		p = defaultPool()
	}
	s := p.s
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		panic("cpu: use of a closed Pool")
	}
	return s
}

// spinUntil polls cond for up to poolSpin and reports whether it held.
func spinUntil(cond func() bool) bool {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > poolSpin {
				return false
			}
			runtime.Gosched()
		}
	}
}

func (s *poolState) loop(i int) {
	w := s.workers[i]
	var seen uint64 // gen starts at 0, perhaps before this goroutine runs
	started := func() bool { return s.gen.Load() != seen }
	for {
		if !spinUntil(started) {
			w.sleep(started)
		}
		seen = s.gen.Load()
		if s.closed.Load() {
			return
		}
		s.work(i)
		if s.pending.Add(-1) == 0 {
			s.waiter.wakeup()
		}
	}
}

// run executes chunks [0, n) of the current task on the pool's threads,
// the caller's included, and returns when all are done.
func (s *poolState) run(task taskKind, n int) {
	s.task = task
	s.nchunks = n
	s.next.Store(0)
	if s.threads == 1 || n == 1 {
		s.work(0)
		return
	}
	s.pending.Store(int64(s.threads - 1))
	s.gen.Add(1)
	for _, w := range s.workers[1:] {
		w.wakeup()
	}
	s.work(0)
	done := func() bool { return s.pending.Load() == 0 }
	if !spinUntil(done) {
		s.waiter.sleep(done)
	}
}

// work runs chunks of the current task until none is left.
func (s *poolState) work(wi int) {
	for {
		c := int(s.next.Add(1) - 1)
		if c >= s.nchunks {
			return
		}
		switch s.task {
		case taskPack:
			s.mm.pack(c)
		case taskGEMV:
			s.mm.gemv(&s.workers[wi].args, c)
		case taskGEMM:
			s.mm.gemm(&s.workers[wi].args, c)
		case taskStream:
			s.stream.chunk(s.workers[wi], c)
		case taskFunc:
			s.fn(c)
		case taskQPack:
			s.qm.pack(c)
		case taskQGEMV:
			s.qm.gemv(&s.workers[wi].qargs, c)
		case taskQGEMM:
			s.qm.gemm(&s.workers[wi].qargs, c)
		case taskQDequant:
			s.qm.dequant(s.workers[wi], c)
		case taskAMXCvt:
			s.amx.cvt(c)
		case taskAMX:
			s.amx.product(s.workers[wi], c)
		}
	}
}

// scratch returns the packed-activation buffer with room for n floats.
func (s *poolState) scratch(n int) []float32 {
	if cap(s.xp) < n {
		s.xp = make([]float32, n)
	}
	return s.xp[:n]
}

// qscratch returns the quantized-activation buffer with room for n bytes,
// 64-byte aligned.
func (s *poolState) qscratch(n int) []byte {
	if cap(s.xq) < n {
		b := make([]byte, n+64)
		off := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
		s.xq = b[off : off+n]
	}
	return s.xq[:n]
}

// Run calls fn(0) … fn(n-1) on the pool's threads, the caller's included,
// and returns when all calls are done. It allocates nothing, so fn should be
// created once (a method value kept in a struct) rather than per call.
func (p *Pool) Run(n int, fn func(chunk int)) {
	if n <= 0 {
		return
	}
	s := p.lock()
	defer s.mu.Unlock()
	s.fn = fn
	s.run(taskFunc, n)
	s.fn = nil
}
