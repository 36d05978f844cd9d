package server

import (
	"strings"
	"testing"
)

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		chunks  []string
		want    string // text released, flush included when not stopped
		stopped bool
		matched string
	}{
		{"none", nil, []string{"a", "b"}, "ab", false, ""},
		{"whole chunk", []string{"STOP"}, []string{"Hello ", "STOP", " more"}, "Hello ", true, "STOP"},
		{"split across chunks", []string{"STOP"}, []string{"Hello S", "T", "OP!"}, "Hello ", true, "STOP"},
		{"false start released", []string{"STOP"}, []string{"Hello ST", "ART"}, "Hello START", false, ""},
		{"inside a chunk", []string{"\n\n"}, []string{"a\n", "\nb"}, "a", true, "\n\n"},
		{"earliest wins", []string{"cd", "bcd"}, []string{"abcde"}, "a", true, "bcd"},
		{"prefix of another", []string{"ab", "abc"}, []string{"xa", "bc"}, "x", true, "ab"},
		{"unicode", []string{"東京"}, []string{"首都は東", "京です"}, "首都は", true, "東京"},
		{"held at end released", []string{"STOP"}, []string{"abc ST"}, "abc ST", false, ""},
		{"at start", []string{"x"}, []string{"x"}, "", true, "x"},
		{"repeated partial", []string{"aab"}, []string{"a", "a", "a", "b"}, "a", true, "aab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newStopMatcher(tt.stops)
			var out strings.Builder
			stopped := false
			for _, c := range tt.chunks {
				s, st := m.push(c)
				out.WriteString(s)
				if st {
					stopped = true
					break
				}
			}
			if !stopped {
				out.WriteString(m.flush())
			}
			if out.String() != tt.want || stopped != tt.stopped || m.matched != tt.matched {
				t.Errorf("got %q stopped=%v matched=%q, want %q %v %q", out.String(), stopped, m.matched, tt.want, tt.stopped, tt.matched)
			}
		})
	}
}

// TestStopMatcherWindow checks that the text held back never grows with the
// reply: only what could begin a stop sequence is kept.
func TestStopMatcherWindow(t *testing.T) {
	m := newStopMatcher([]string{"<END>", "zzz"})
	for range 10000 {
		m.push("some text <EN")
		if len(m.pending) > 4 {
			t.Fatalf("pending %d bytes", len(m.pending))
		}
		m.push("D? no ")
	}
}

func FuzzStopMatcher(f *testing.F) {
	f.Add("hello STOP world", "STOP", 3)
	f.Add("aaab", "aab", 1)
	f.Add("日本語のテキスト", "のテ", 2)
	f.Fuzz(func(t *testing.T, text, stop string, step int) {
		if stop == "" || step <= 0 {
			return
		}
		m := newStopMatcher([]string{stop})
		var out strings.Builder
		stopped := false
		for i := 0; i < len(text) && !stopped; i += step {
			s, st := m.push(text[i:min(i+step, len(text))])
			out.WriteString(s)
			stopped = st
		}
		if !stopped {
			out.WriteString(m.flush())
		}
		want := text
		if i := strings.Index(text, stop); i >= 0 {
			want = text[:i]
		}
		if out.String() != want || stopped != strings.Contains(text, stop) {
			t.Fatalf("text %q stop %q step %d: got %q (stopped %v), want %q", text, stop, step, out.String(), stopped, want)
		}
	})
}
