package server

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "nl\n tab\t cr\r", "\x00\x1f\x7f", "日本 😀", "bad \xff utf8", "\u2028\u2029", "<html>&"} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, got, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s))
		}
		if back != want {
			t.Errorf("%q round-trips to %q", s, back)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("hello\n\"world\"")
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("%q round-trips to %q", s, back)
		}
	})
}
