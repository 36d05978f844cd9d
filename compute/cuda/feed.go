package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

var _ compute.TokenFeeder = (*Backend)(nil)

// Feed implements compute.TokenFeeder.
func (b *Backend) Feed(ids, pos, picked *compute.Tensor) {
	if ids.DType != compute.I32 || pos.DType != compute.I32 || picked.DType != compute.F32 ||
		ids.Len() < 1 || pos.Len() < 1 || picked.Len() < 2 {
		panic(fmt.Sprintf("cuda: Feed into %v %v %v from %v %v", ids.DType, ids.Shape, pos.Shape, picked.DType, picked.Shape))
	}
	b.launch(b.k.dec.feed, "feed_token", 1, 1).ptr(dptr(ids)).ptr(dptr(pos)).ptr(dptr(picked))
}

// FeedRows implements compute.TokenFeeder.
func (b *Backend) FeedRows(ids, picked *compute.Tensor, n int) {
	if ids.DType != compute.I32 || picked.DType != compute.F32 || n < 0 || ids.Len() < n || picked.Len() < 2*n {
		panic(fmt.Sprintf("cuda: FeedRows of %d rows into %v %v from %v %v", n, ids.DType, ids.Shape, picked.DType, picked.Shape))
	}
	if n == 0 {
		return
	}
	t := threads(n, 256)
	b.launch(b.k.dec.feedRows, "feed_rows", (n+t-1)/t, t).ptr(dptr(ids)).ptr(dptr(picked)).i(n)
}

// Small reads that ReadAsync leaves in flight land in pinned host slots,
// each with an event that tells when its copy is done.
const (
	readSlots    = 4
	readSlotSize = 4096
)

type readRing struct {
	ptr    uintptr // readSlots·readSlotSize bytes of pinned memory
	host   []byte
	ev     [readSlots]uintptr
	seq    [readSlots]uint64 // which read holds each slot
	reads  uint64            // reads started
	next   int
	failed bool // no pinned memory: reads are synchronous
}

func (r *readRing) setup(w *owner) error {
	if err := w.check("cuMemAllocHost", call(w.d.cuMemAllocHost, uintptr(unsafe.Pointer(&r.ptr)), readSlots*readSlotSize)); err != nil {
		return err
	}
	r.host = unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&r.ptr))), readSlots*readSlotSize)
	for i := range r.ev {
		if err := w.check("cuEventCreate", call(w.d.cuEventCreate, uintptr(unsafe.Pointer(&r.ev[i])), 0)); err != nil {
			return err
		}
	}
	return nil
}

// free releases the slots (on the owner thread).
func (r *readRing) free(w *owner) {
	for _, e := range r.ev {
		if e != 0 {
			call(w.d.cuEventDestroy, e)
		}
	}
	if r.ptr != 0 {
		call(w.d.cuMemFreeHost, r.ptr)
	}
	*r = readRing{failed: r.failed}
}

// ReadAsync implements compute.TokenFeeder: the copy joins the recorded
// operations and is handed to the device at once; wait blocks until it is
// done. Up to four reads may be in flight; a fifth reuses the first slot,
// whose wait then fails instead of returning the newer values. Reads
// larger than a slot, and every read where pinned memory is unavailable,
// are synchronous.
func (b *Backend) ReadAsync(dst []float32, src *compute.Tensor) (wait func() error) {
	n := 4 * len(dst)
	r := &b.reads
	if r.ptr == 0 && !r.failed && !b.capturing && n > 0 && n <= readSlotSize {
		if err := b.do(r.setup); err != nil {
			b.do(func(w *owner) error { r.free(w); return nil })
			r.failed = true
		}
	}
	if n == 0 || n > readSlotSize || r.failed || b.capturing {
		b.Read(dst, src)
		err := b.err
		if b.capturing {
			err = b.captureErr
		}
		return func() error { return err }
	}
	j := r.next
	r.next = (j + 1) % readSlots
	r.reads++
	r.seq[j] = r.reads
	seq := r.reads
	hp, ev, p := r.ptr+uintptr(j*readSlotSize), r.ev[j], dptr(src)
	b.enqueue(func(w *owner) error {
		if err := w.check("cuMemcpyDtoHAsync", call(w.d.cuMemcpyDtoHAsync, hp, p, uintptr(n), w.stream)); err != nil {
			return err
		}
		return w.check("cuEventRecord", call(w.d.cuEventRecord, ev, w.stream))
	})
	b.submit(false)
	host := r.host[j*readSlotSize : j*readSlotSize+n]
	return func() error {
		if r.seq[j] != seq {
			return fmt.Errorf("cuda: ReadAsync: more than %d reads were in flight", readSlots)
		}
		b.enqueue(func(w *owner) error { return w.check("cuEventSynchronize", call(w.d.cuEventSynchronize, ev)) })
		if err := b.submit(true); err != nil {
			for i := range dst {
				dst[i] = float32(math.NaN())
			}
			return err
		}
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), n), host)
		return nil
	}
}
