package cuda

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// profile times each recorded operation by synchronising the stream around
// it, for benchmarks that break a forward pass down by kernel. The
// synchronisations add a few microseconds per operation, so totals are
// upper bounds; it must be off during graph capture.
type profile struct {
	inside bool
	by     map[string]*profEntry
}

type profEntry struct {
	n int
	t time.Duration
}

// profiled runs o between two stream synchronisations and books the time
// under its name.
func (w *owner) profiled(o *op) error {
	w.prof.inside = true
	defer func() { w.prof.inside = false }()
	if err := w.sync(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := w.exec(o); err != nil {
		return err
	}
	err := w.sync()
	name := o.name
	if name == "" {
		name = "(host call)"
	}
	e := w.prof.by[name]
	if e == nil {
		e = &profEntry{}
		w.prof.by[name] = e
	}
	e.n++
	e.t += time.Since(t0)
	return err
}

// setProfile turns per-operation timing on (clearing earlier counts) or
// off.
func (b *Backend) setProfile(on bool) error {
	b.Synchronize()
	return b.do(func(w *owner) error {
		w.prof = nil
		if on {
			w.prof = &profile{by: map[string]*profEntry{}}
		}
		return nil
	})
}

// profileReport formats the times booked since setProfile(true), largest
// first.
func (b *Backend) profileReport() string {
	b.Synchronize()
	var sb strings.Builder
	b.do(func(w *owner) error {
		if w.prof == nil {
			return nil
		}
		names := make([]string, 0, len(w.prof.by))
		var total time.Duration
		for n, e := range w.prof.by {
			names = append(names, n)
			total += e.t
		}
		sort.Slice(names, func(i, j int) bool { return w.prof.by[names[i]].t > w.prof.by[names[j]].t })
		fmt.Fprintf(&sb, "total %v", total.Round(time.Microsecond))
		for _, n := range names {
			e := w.prof.by[n]
			fmt.Fprintf(&sb, "; %s %v (%d×, %.0f%%)", n, e.t.Round(time.Microsecond), e.n, 100*e.t.Seconds()/total.Seconds())
		}
		return nil
	})
	return sb.String()
}
