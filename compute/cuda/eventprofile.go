package cuda

import (
	"fmt"
	"slices"
	"time"
	"unsafe"
)

// KernelTime is the device time spent in the launches of one kernel.
type KernelTime struct {
	Name     string
	Launches int
	Time     time.Duration
}

// ProfileLaunches runs fn, which must issue device operations only (no
// Read, Upload or allocation, as for Capture), with each kernel it
// launches timed on the device by a pair of events, and returns the time
// per kernel name, largest first. The events serialise the launches, so
// the sum exceeds what fn takes untimed; the shares are what it shows.
func (b *Backend) ProfileLaunches(fn func()) ([]KernelTime, error) {
	if b.capturing {
		return nil, fmt.Errorf("cuda: profile during graph capture")
	}
	if err := b.Synchronize(); err != nil {
		return nil, err
	}
	// Collect fn's operations without handing them to the owner, as
	// Capture does.
	b.capturing, b.captureErr = true, nil
	func() {
		defer func() { b.capturing = false }()
		fn()
	}()
	ops := b.pending
	b.pending = make([]op, 0, 2*flushAt)
	if b.captureErr != nil {
		return nil, b.captureErr
	}
	var kernels []int
	for i := range ops {
		if ops[i].fn != 0 {
			kernels = append(kernels, i)
		}
	}
	events := make([]uintptr, 2*len(kernels))
	err := b.do(func(w *owner) error {
		for i := range events {
			if err := w.check("cuEventCreate", call(w.d.cuEventCreate, uintptr(unsafe.Pointer(&events[i])), 0)); err != nil {
				return err
			}
		}
		return nil
	})
	defer b.do(func(w *owner) error {
		for _, e := range events {
			if e != 0 {
				call(w.d.cuEventDestroy, e)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	mark := func(e uintptr) op {
		return op{call: func(w *owner) error { return w.check("cuEventRecord", call(w.d.cuEventRecord, e, w.stream)) }}
	}
	timed := make([]op, 0, len(ops)+len(events))
	next := 0
	for i := range ops {
		if next < len(kernels) && kernels[next] == i {
			timed = append(timed, mark(events[2*next]), ops[i], mark(events[2*next+1]))
			next++
			continue
		}
		timed = append(timed, ops[i])
	}
	b.pending = append(b.pending, timed...)
	if err := b.Synchronize(); err != nil {
		return nil, err
	}
	by := map[string]*KernelTime{}
	err = b.do(func(w *owner) error {
		for j, i := range kernels {
			var ms float32
			if err := w.check("cuEventElapsedTime", call(w.d.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), events[2*j], events[2*j+1])); err != nil {
				return err
			}
			name := ops[i].name
			k := by[name]
			if k == nil {
				k = &KernelTime{Name: name}
				by[name] = k
			}
			k.Launches++
			k.Time += time.Duration(float64(ms) * 1e6)
		}
		return nil
	})
	var out []KernelTime
	for _, k := range by {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, c KernelTime) int { return int(c.Time - a.Time) })
	if err != nil {
		return out, fmt.Errorf("cuda: profile: %w", err)
	}
	return out, nil
}
