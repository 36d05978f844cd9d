package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// loadBar draws on a terminal how far the weights of a model have loaded,
// one line redrawn at most every loadBarEvery, cleared at the end and
// followed by how long the load took.
type loadBar struct {
	w     io.Writer
	start time.Time
	drawn time.Time // of the last drawing
	width int       // of the line drawn, for clearing it
}

// loadBarEvery is the least time between two drawings.
const loadBarEvery = 100 * time.Millisecond

// newLoadBar returns a bar that draws on f, or nil when f is not a
// terminal or quiet is set.
func newLoadBar(f *os.File, quiet bool) *loadBar {
	if quiet || !isCharDevice(f) {
		return nil
	}
	return &loadBar{w: f, start: time.Now()}
}

// isCharDevice reports whether f is a character device (a terminal).
func isCharDevice(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// update draws done of total bytes, unless it drew less than loadBarEvery
// ago and the load is not complete.
func (b *loadBar) update(done, total int64) {
	now := time.Now()
	if !b.drawn.IsZero() && now.Sub(b.drawn) < loadBarEvery && done < total {
		return
	}
	b.drawn = now
	const width = 30
	filled := 0
	if total > 0 {
		filled = int(width * min(done, total) / total)
	}
	line := fmt.Sprintf("\rloading weights [%s%s] %.2f/%.2f GiB", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		float64(done)/(1<<30), float64(total)/(1<<30))
	fmt.Fprint(b.w, line)
	b.width = len(line)
}

// progress returns update as engine.Options wants it, or nil for a nil
// bar.
func (b *loadBar) progress() func(done, total int64) {
	if b == nil {
		return nil
	}
	return b.update
}

// finish clears the line and, when the model loaded, says how long it
// took.
func (b *loadBar) finish(loaded bool) {
	if b == nil {
		return
	}
	if b.width > 0 {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.width))
	}
	if loaded {
		fmt.Fprintf(b.w, "lem: loaded in %.1f s\n", time.Since(b.start).Seconds())
	}
}
