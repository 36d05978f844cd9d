package server

import "strings"

// stopMatcher finds stop sequences in streamed text. It holds back the
// shortest tail of the text that could still begin a stop sequence, so
// that no part of a stop sequence is ever released, and searches only the
// held-back tail plus the new text: the cost per token depends on the
// length of the stop sequences, not of the reply.
type stopMatcher struct {
	stops   []string
	pending []byte
	buf     []byte
	// matched is the stop sequence found, once push reports one.
	matched string
}

func newStopMatcher(stops []string) *stopMatcher {
	return &stopMatcher{stops: stops}
}

// push adds text and returns the text that can be released. stopped is
// true when a stop sequence was found; out then ends just before it and
// the matcher must not be used again.
func (m *stopMatcher) push(text string) (out string, stopped bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	if len(m.pending) == 0 && text == "" {
		return "", false
	}
	m.buf = append(append(m.buf[:0], m.pending...), text...)
	s := m.buf
	// The earliest stop sequence wins.
	first := -1
	for _, stop := range m.stops {
		if i := indexBytes(s, stop); i >= 0 && (first < 0 || i < first) {
			first, m.matched = i, stop
		}
	}
	if first >= 0 {
		m.pending = m.pending[:0]
		return string(s[:first]), true
	}
	hold := 0
	for _, stop := range m.stops {
		for k := min(len(stop)-1, len(s)); k > hold; k-- {
			if string(s[len(s)-k:]) == stop[:k] {
				hold = k
				break
			}
		}
	}
	out = string(s[:len(s)-hold])
	m.pending = append(m.pending[:0], s[len(s)-hold:]...)
	return out, false
}

// flush returns the text held back at the end of generation.
func (m *stopMatcher) flush() string {
	out := string(m.pending)
	m.pending = m.pending[:0]
	return out
}

// indexBytes is strings.Index over a byte slice without copying it.
func indexBytes(s []byte, sub string) int {
	// The conversion does not allocate: the compiler recognises
	// string(bytes) used only for the call.
	return strings.Index(string(s), sub)
}
