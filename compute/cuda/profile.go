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

// profiler records an event before and after every kernel launch.
type profiler struct {
	busy   bool
	events []uintptr // pool, in pairs
	used   int
	names  []string
	err    error
}

func (p *profiler) event(w *owner) uintptr {
	if p.used == len(p.events) {
		var e uintptr
		if err := w.check("cuEventCreate", call(w.d.cuEventCreate, uintptr(unsafe.Pointer(&e)), 0)); err != nil {
			p.err = err
			return 0
		}
		p.events = append(p.events, e)
	}
	p.used++
	return p.events[p.used-1]
}

// time launches o between two events.
func (p *profiler) time(w *owner, o *op) error {
	start, end := p.event(w), p.event(w)
	if start == 0 || end == 0 {
		return p.err
	}
	call(w.d.cuEventRecord, start, w.stream)
	p.busy = true
	err := w.exec(o)
	p.busy = false
	call(w.d.cuEventRecord, end, w.stream)
	p.names = append(p.names, o.name)
	return err
}

// Profile runs fn, which must not capture a graph, with every kernel it
// launches timed on the device, and returns the time per kernel name,
// largest first. Timing serialises the launches, so the sum exceeds what
// fn takes untimed; the shares are what it shows.
func (b *Backend) Profile(fn func()) ([]KernelTime, error) {
	if err := b.Synchronize(); err != nil {
		return nil, err
	}
	p := &profiler{}
	b.do(func(w *owner) error { w.prof = p; return nil })
	fn()
	err := b.Synchronize()
	var out []KernelTime
	b.do(func(w *owner) error {
		w.prof = nil
		if p.err != nil {
			err = p.err
		}
		by := map[string]*KernelTime{}
		for i, name := range p.names {
			var ms float32
			if e := w.check("cuEventElapsedTime", call(w.d.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), p.events[2*i], p.events[2*i+1])); e != nil {
				err = e
				break
			}
			k := by[name]
			if k == nil {
				k = &KernelTime{Name: name}
				by[name] = k
			}
			k.Launches++
			k.Time += time.Duration(float64(ms) * 1e6)
		}
		for _, k := range by {
			out = append(out, *k)
		}
		for _, e := range p.events {
			call(w.d.cuEventDestroy, e)
		}
		return nil
	})
	slices.SortFunc(out, func(a, c KernelTime) int { return int(c.Time - a.Time) })
	if err != nil {
		return out, fmt.Errorf("cuda: profile: %w", err)
	}
	return out, nil
}
