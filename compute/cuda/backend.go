// Package cuda is the NVIDIA GPU implementation of compute.Backend, written
// without cgo: the CUDA driver API (libcuda.so.1) and NVRTC are opened at run
// time through purego, kernels are CUDA C embedded in the binary and compiled
// for the GPU on first use (see nvrtc.go), and one goroutine locked to its OS
// thread owns the CUDA context (see stream.go).
//
// Tensors live in device memory: activations, KV caches and I32 inputs come
// from a pooling allocator, weights are uploaded once by Weight in their
// stored dtype. Operations are asynchronous; Read synchronises. Errors from
// the driver stick: after one, operations are skipped, Read returns NaNs and
// Err reports the failure.
package cuda

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

// buffer is the Buf of a CUDA tensor.
type buffer struct {
	ptr   uintptr  // device address
	size  int64    // bytes allocated; 0 for views
	class int64    // pool size class; 0 when not pooled (weights, views)
	q     *qlayout // regions of a block-quantized weight (quant.go)
}

// Backend is a CUDA device implementing compute.Backend. Like every
// backend it is used by one goroutine at a time.
type Backend struct {
	info  DeviceInfo
	nvrtc string
	k     kernels

	reqs    chan batch
	recycle chan []op
	pending []op
	err     error
	closed  bool

	capturing  bool
	captureErr error

	quant quantState // quantized weights (quant.go)

	free      map[int64][]uintptr // pooled blocks by size class
	all       []uintptr           // every allocation, for Close
	allocated int64               // bytes

	ropes     map[*compute.Rope]*compute.Tensor
	attnPart  *buffer // partial results of split attention
	attnCount *buffer // split counters of attend_dec
	pickPart  *buffer // partial results of argmax_split
	pickCount *buffer // row counters of argmax_split

	stage          staging       // pinned buffers for weight uploads (upload.go)
	reads          readRing      // pinned slots for ReadAsync (feed.go)
	fuse           bool          // fold one-row operations into fewer launches (fuse.go)
	fgemvBlocks    int           // most blocks of an fgemv launch (0: no limit)
	stageK         int           // longest input row fgemv stages in shared memory
	attendChunk    int32         // fewest keys per split of attend_dec (attend.go)
	gemvRows       int           // most rows of a float product on the gemv kernels rather than the tensor cores (batch.go)
	pagedPart      int64         // most bytes of partial results of one paged attention launch (paged.go)
	pagedSpan      int           // positions per split of the paged attention kernels (paged.go)
	pagedGeneric   bool          // paged attention always on the general kernel (benchmarks, tests)
	pagedTC        int           // calls of at least this many rows attend f16 pools on the tensor cores; 0: never (paged.go)
	poolType       compute.DType // element type of NewKVPool's pools (paged.go)
	argmaxOneBlock bool          // TopK(…, 1) never splits a row (decode.go)
	pdl            bool          // launch the decode kernels with programmatic dependent launch (pdl.go)
	fz             fuseState     // the last recorded op, while it can absorb the next
	recorded       uint64        // ops recorded so far

	experts map[*compute.ExpertFFN]*expertTable // device descriptors of expert sets
	moeDesc []uint64                            // descriptors being checked against a table
	moeAct  *buffer                             // gated activations of (row, slot) pairs

	gemm    gemmState    // prefill matmuls on the tensor cores (gemm.go)
	flash   flashState   // prefill attention on the tensor cores (flash.go)
	prefill prefillState // chunked recurrences and grouped experts (prefill.go)

	stop *atomic.Bool // ties the ops recorded now to a flag (SetInterrupt)
}

var (
	_ compute.Backend       = (*Backend)(nil)
	_ compute.Interruptible = (*Backend)(nil)
)

// Open initialises GPU ordinal, compiles (or loads from the cache) the
// kernels and returns a backend on it.
func Open(ordinal int) (*Backend, error) {
	infos, err := Probe()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(infos) {
		return nil, fmt.Errorf("cuda: device %d does not exist (%d device(s))", ordinal, len(infos))
	}
	info := infos[ordinal]
	nv, err := openNVRTC()
	if err != nil {
		return nil, err
	}
	if nv.major*1000 > info.Driver {
		return nil, fmt.Errorf("cuda: NVRTC %d.%d (%s) is newer than the driver, which supports CUDA %s; update the driver or set LEM_NVRTC to an NVRTC %d.x",
			nv.major, nv.minor, nv.path, versionString(info.Driver), info.Driver/1000)
	}
	src, err := kernelSource()
	if err != nil {
		return nil, err
	}
	img, err := nv.module(src, info.Major, info.Minor)
	if err != nil {
		return nil, err
	}
	d, _ := loadDriver()
	b := &Backend{
		quant:       quantState{rows: qgemvRows, batch: qgemvBatch},
		info:        info,
		nvrtc:       fmt.Sprintf("%d.%d", nv.major, nv.minor),
		reqs:        make(chan batch, 64),
		recycle:     make(chan []op, 8),
		free:        map[int64][]uintptr{},
		ropes:       map[*compute.Rope]*compute.Tensor{},
		fuse:        fusionEnabled(),
		fgemvBlocks: fgemvGrid(info.SMs),
		attendChunk: attendChunk(),
		gemvRows:    gemvRows,
		pagedPart:   pagedPartMax,
		// LEM_CUDA_ARGMAX=block keeps a greedy pick in one block (argmax_rows).
		argmaxOneBlock: os.Getenv("LEM_CUDA_ARGMAX") == "block",
		pdl:            pdlEnabled() && info.Major >= 9 && d.cuLaunchKernelEx != 0,
	}
	w := &owner{d: d}
	go w.loop(b.reqs, b.recycle)
	err = b.do(func(w *owner) error {
		if err := w.check("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&w.dev)), uintptr(ordinal))); err != nil {
			return err
		}
		if err := w.check("cuDevicePrimaryCtxRetain", call(d.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&w.ctx)), uintptr(w.dev))); err != nil {
			return err
		}
		if err := w.check("cuCtxSetCurrent", call(d.cuCtxSetCurrent, w.ctx)); err != nil {
			return err
		}
		if err := w.check("cuStreamCreate", call(d.cuStreamCreate, uintptr(unsafe.Pointer(&w.stream)), 0)); err != nil {
			return err
		}
		var mod uintptr
		if err := w.check("cuModuleLoadData", call(d.cuModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&img[0])))); err != nil {
			return err
		}
		for name, p := range b.k.table() {
			cname := cBytes(name)
			if err := w.check("cuModuleGetFunction "+name, call(d.cuModuleGetFunction, uintptr(unsafe.Pointer(p)), mod, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = b.openGEMM()
	}
	if err == nil {
		err = b.openFlash()
	}
	if err == nil {
		b.poolType, err = parsePoolType(os.Getenv("LEM_CUDA_KV_POOL"))
	}
	if err == nil {
		b.pagedSpan, err = parsePagedSpan(os.Getenv("LEM_CUDA_PAGED_SPAN"))
	}
	if err == nil {
		b.pagedTC, err = parsePagedTC(os.Getenv("LEM_CUDA_PAGED_TC"))
	}
	if err == nil {
		err = b.openPagedTC()
	}
	if err == nil {
		err = b.openDecode()
	}
	if err != nil {
		close(b.reqs)
		return nil, err
	}
	return b, nil
}

// Name implements compute.Backend.
func (b *Backend) Name() string {
	return fmt.Sprintf("%s, NVRTC %s", b.info, b.nvrtc)
}

// Info describes the device.
func (b *Backend) Info() DeviceInfo { return b.info }

// Err returns the first failure of an operation, as seen by the last
// synchronisation (Read, Synchronize).
func (b *Backend) Err() error { return b.err }

// Allocated returns the bytes of device memory held by the backend.
func (b *Backend) Allocated() int64 { return b.allocated }

// submit hands the recorded operations to the owner; with wait it blocks
// until they ran and returns the sticky error.
func (b *Backend) submit(wait bool) error {
	if len(b.pending) == 0 && !wait {
		return nil
	}
	bt := batch{ops: b.pending}
	if wait {
		bt.done = make(chan error, 1)
	}
	b.reqs <- bt
	select {
	case s := <-b.recycle:
		b.pending = s
	default:
		b.pending = make([]op, 0, 2*flushAt)
	}
	if !wait {
		return nil
	}
	if err := <-bt.done; err != nil {
		b.err = err
	}
	return b.err
}

// do runs fn on the owner thread after the operations recorded so far and
// returns its error, which does not stick.
func (b *Backend) do(fn func(*owner) error) error {
	if !b.capturing {
		b.submit(false)
	}
	done := make(chan error, 1)
	b.reqs <- batch{fn: fn, done: done}
	return <-done
}

// record appends an op, first handing a full batch to the owner.
func (b *Backend) record(o op) *op {
	if len(b.pending) >= flushAt && !b.capturing {
		b.submit(false)
	}
	if b.stop != nil && !b.capturing && (o.fn != 0 || o.work) {
		o.stop = b.stop
	}
	b.pending = append(b.pending, o)
	b.recorded++
	return &b.pending[len(b.pending)-1]
}

// launch records a kernel launch of grid×block threads.
func (b *Backend) launch(fn uintptr, name string, grid, block int) *op {
	return b.record(op{fn: fn, name: name, grid: [3]uint32{uint32(grid), 1, 1}, block: [3]uint32{uint32(block), 1, 1}})
}

// launchEarly records a kernel launch of grid×block threads that may be
// scheduled before the kernel before it ends (programmatic dependent
// launch, pdl.go): fn must pdl_wait before it touches memory.
func (b *Backend) launchEarly(fn uintptr, name string, grid, block int) *op {
	o := b.launch(fn, name, grid, block)
	o.pdl = b.pdl
	return o
}

// SetInterrupt implements compute.Interruptible: the kernel launches and
// cuBLAS products recorded from now on carry stop, and the owner skips
// those it reaches once stop is set, so that a chunk's work that is not yet
// on the GPU's queue is not done. Nothing is tied to stop while a graph is
// being captured. The memos that let an op reuse the previous op's work
// (fusion, converted or quantized inputs) end here, so that no op relies
// on one that may be skipped while it is not.
func (b *Backend) SetInterrupt(stop *atomic.Bool) {
	b.stop = stop
	b.recorded++
}

// enqueue records a call made on the owner thread in stream order.
func (b *Backend) enqueue(fn func(*owner) error) { b.record(op{call: fn}) }

// Synchronize waits for every recorded operation and returns the sticky error.
func (b *Backend) Synchronize() error {
	if b.capturing {
		return fmt.Errorf("cuda: Synchronize during graph capture")
	}
	b.enqueue(func(w *owner) error { return w.sync() })
	return b.submit(true)
}

// Close releases the device memory and the context. The backend and its
// tensors must not be used afterwards.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.Synchronize()
	b.do(func(w *owner) error {
		b.gemm.close(w)
		for _, p := range b.all {
			call(w.d.cuMemFree, p)
		}
		b.stage.free(w)
		b.reads.free(w)
		call(w.d.cuStreamDestroy, w.stream)
		call(w.d.cuDevicePrimaryCtxRelease, uintptr(w.dev))
		return nil
	})
	close(b.reqs)
	b.all, b.free = nil, nil
	return err
}

func buf(t *compute.Tensor) *buffer { return t.Buf.(*buffer) }

// dptr returns a tensor's device address (0 for nil).
func dptr(t *compute.Tensor) uintptr {
	if t == nil {
		return 0
	}
	return buf(t).ptr
}

// sizeClass rounds an allocation up to a pool class: multiples of 256 bytes
// below 1 KiB, then quarter steps of the power of two (at most 25% slack).
func sizeClass(n int64) int64 {
	if n <= 1024 {
		return max(256, (n+255)/256*256)
	}
	step := int64(1) << (bits.Len64(uint64(n-1)) - 3)
	return (n + step - 1) / step * step
}

// rawAlloc takes a block of device memory from the pool or the driver.
func (b *Backend) rawAlloc(size int64, pooled bool) (*buffer, error) {
	class := size
	if pooled {
		class = sizeClass(size)
		if l := b.free[class]; len(l) > 0 {
			p := l[len(l)-1]
			b.free[class] = l[:len(l)-1]
			return &buffer{ptr: p, size: size, class: class}, nil
		}
	}
	var p uintptr
	err := b.do(func(w *owner) error {
		var err error
		p, err = w.alloc(max(class, 1))
		return err
	})
	if err != nil {
		return nil, err
	}
	b.all = append(b.all, p)
	b.allocated += class
	bf := &buffer{ptr: p, size: size}
	if pooled {
		bf.class = class
	}
	return bf, nil
}

// Weight implements compute.Backend: the data is copied to the device once,
// in its stored dtype.
func (b *Backend) Weight(dtype compute.DType, shape []int, data []byte) (*compute.Tensor, error) {
	t := &compute.Tensor{DType: dtype, Shape: append([]int(nil), shape...)}
	switch {
	case dtype == compute.F32 || dtype == compute.BF16 || dtype == compute.F16:
	case dtype.Quantized():
		return b.quantWeight(dtype, shape, data)
	default:
		return nil, fmt.Errorf("weight dtype %s not supported on CUDA", dtype)
	}
	if want := t.Len() * dtype.Size(); len(data) != want {
		return nil, fmt.Errorf("weight of shape %v %s: have %d bytes, want %d", shape, dtype, len(data), want)
	}
	bf, err := b.rawAlloc(int64(len(data)), false)
	if err != nil {
		return nil, fmt.Errorf("weight of shape %v %s: %w", shape, dtype, err)
	}
	if len(data) > 0 {
		if err = b.uploadWeight(bf.ptr, data); err != nil {
			return nil, fmt.Errorf("weight of shape %v %s: %w", shape, dtype, err)
		}
	}
	t.Buf = bf
	return t, nil
}

// Alloc implements compute.Backend. Memory comes from the pool and is
// zeroed in stream order. A failed allocation panics, as running out of
// host memory does on the CPU.
func (b *Backend) Alloc(dtype compute.DType, shape ...int) *compute.Tensor {
	t := &compute.Tensor{DType: dtype, Shape: append([]int(nil), shape...)}
	size := int64(t.Len() * dtype.Size())
	bf, err := b.rawAlloc(size, true)
	if err != nil {
		panic(fmt.Sprintf("cuda: alloc %s%v: %v", dtype, shape, err))
	}
	t.Buf = bf
	if size > 0 {
		p := bf.ptr
		b.enqueue(func(w *owner) error {
			return w.check("cuMemsetD8Async", call(w.d.cuMemsetD8Async, p, 0, uintptr(size), w.stream))
		})
	}
	return t
}

// Free implements compute.Backend: pooled memory returns to the pool (it is
// reused in stream order, so pending operations on it stay valid).
func (b *Backend) Free(t *compute.Tensor) {
	bf, ok := t.Buf.(*buffer)
	if !ok || bf == nil {
		return
	}
	if bf.class > 0 {
		b.free[bf.class] = append(b.free[bf.class], bf.ptr)
	}
	t.Buf = nil
}

// upload records a copy of host bytes (copied now) to a device address.
func (b *Backend) upload(dst uintptr, src []byte) {
	if b.capturing {
		b.captureErr = fmt.Errorf("cuda: host upload during graph capture")
		return
	}
	data := append([]byte(nil), src...)
	b.enqueue(func(w *owner) error { return w.htod(dst, data) })
}

// Upload implements compute.Backend.
func (b *Backend) Upload(dst *compute.Tensor, src []float32) {
	if len(src) == 0 {
		return
	}
	b.upload(dptr(dst), unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

// UploadInts implements compute.Backend.
func (b *Backend) UploadInts(dst *compute.Tensor, src []int32) {
	if len(src) == 0 {
		return
	}
	b.upload(dptr(dst), unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

// Read implements compute.Backend. After a driver failure it fills dst with
// NaNs; Err says why.
func (b *Backend) Read(dst []float32, src *compute.Tensor) {
	if len(dst) == 0 {
		return
	}
	if b.capturing {
		b.captureErr = fmt.Errorf("cuda: Read during graph capture")
		return
	}
	host := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst))
	p := dptr(src)
	b.enqueue(func(w *owner) error { return w.dtoh(host, p) })
	if b.submit(true) != nil {
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
	}
}

// View implements compute.Backend.
func (b *Backend) View(t *compute.Tensor, from, to int) *compute.Tensor {
	cols := t.Cols()
	shape := append([]int{to - from}, t.Shape[1:]...)
	off := uintptr(from * cols * t.DType.Size())
	return &compute.Tensor{DType: t.DType, Shape: shape, Buf: &buffer{ptr: buf(t).ptr + off}}
}

// NewKVCache implements compute.Backend.
func (b *Backend) NewKVCache(capacity, kvDim int, ring bool) *compute.KVCache {
	return &compute.KVCache{
		K:        b.Alloc(compute.F32, capacity, kvDim),
		V:        b.Alloc(compute.F32, capacity, kvDim),
		Capacity: capacity,
		Ring:     ring,
	}
}
