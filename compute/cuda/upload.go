package cuda

import (
	"runtime"
	"sync"
	"unsafe"
)

// Weights are uploaded once, but a model's worth of them is most of the time
// from start to first token. A copy from pageable memory (the memory-mapped
// file) goes through the driver's own staging on one thread; instead, large
// weights are copied by several goroutines into one of two pinned buffers
// while the GPU copies the other one to the device, so that the host copy,
// the page faults of the mapping and the transfer overlap.

// stageChunk is the size of each pinned buffer.
const stageChunk = 64 << 20

// staging holds the pinned buffers and the events that tell when the
// device has finished reading them.
type staging struct {
	host   [2][]byte
	ptr    [2]uintptr
	ev     [2]uintptr
	used   [2]bool
	next   int
	failed bool // pinned memory unavailable: copy from pageable memory
}

// setup allocates the pinned buffers and events on first use.
func (s *staging) setup(w *owner) error {
	for i := range s.ptr {
		var p uintptr
		if err := w.check("cuMemAllocHost", call(w.d.cuMemAllocHost, uintptr(unsafe.Pointer(&p)), stageChunk)); err != nil {
			return err
		}
		s.ptr[i] = p
		s.host[i] = unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), stageChunk)
		if err := w.check("cuEventCreate", call(w.d.cuEventCreate, uintptr(unsafe.Pointer(&s.ev[i])), 0)); err != nil {
			return err
		}
	}
	return nil
}

// free releases the buffers (on the owner thread, at Close).
func (s *staging) free(w *owner) {
	for i := range s.ptr {
		if s.ev[i] != 0 {
			call(w.d.cuEventDestroy, s.ev[i])
		}
		if s.ptr[i] != 0 {
			call(w.d.cuMemFreeHost, s.ptr[i])
		}
	}
	*s = staging{}
}

// uploadWeight copies data to device address dst in stream order; data may
// be reused once it returns.
func (b *Backend) uploadWeight(dst uintptr, data []byte) error {
	s := &b.stage
	if len(data) < 1<<20 || s.failed {
		return b.do(func(w *owner) error {
			return w.check("cuMemcpyHtoD", call(w.d.cuMemcpyHtoD, dst, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data))))
		})
	}
	if s.ptr[0] == 0 {
		if err := b.do(s.setup); err != nil {
			b.do(func(w *owner) error { s.free(w); return nil })
			s.failed = true
			return b.uploadWeight(dst, data)
		}
	}
	for off := 0; off < len(data); off += stageChunk {
		j := s.next
		s.next ^= 1
		n := min(stageChunk, len(data)-off)
		if s.used[j] {
			ev := s.ev[j]
			if err := b.do(func(w *owner) error { return w.check("cuEventSynchronize", call(w.d.cuEventSynchronize, ev)) }); err != nil {
				return err
			}
		}
		parallelCopy(s.host[j][:n], data[off:off+n])
		p, hp, ev := dst+uintptr(off), s.ptr[j], s.ev[j]
		err := b.do(func(w *owner) error {
			if err := w.check("cuMemcpyHtoDAsync", call(w.d.cuMemcpyHtoDAsync, p, hp, uintptr(n), w.stream)); err != nil {
				return err
			}
			return w.check("cuEventRecord", call(w.d.cuEventRecord, ev, w.stream))
		})
		if err != nil {
			return err
		}
		s.used[j] = true
	}
	return nil
}

// parallelCopy copies src to dst with up to eight goroutines.
func parallelCopy(dst, src []byte) {
	parts := min(8, runtime.GOMAXPROCS(0), max(1, len(src)>>22))
	if parts == 1 {
		copy(dst, src)
		return
	}
	var wg sync.WaitGroup
	step := (len(src) + parts - 1) / parts
	for lo := 0; lo < len(src); lo += step {
		hi := min(lo+step, len(src))
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}
