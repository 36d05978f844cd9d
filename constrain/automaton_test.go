package constrain

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckJSON(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth-1)
	tests := []struct {
		in               string
		prefix, complete bool
	}{
		// Prefixes.
		{"", true, false},
		{"  \n\t\r", true, false},
		{"{", true, false},
		{" {", true, false},
		{`{"`, true, false},
		{`{"a`, true, false},
		{`{"a"`, true, false},
		{`{"a" :`, true, false},
		{`{"a": "\u00e`, true, false},
		{`{"a": "\u00e9`, true, false},
		{`{"a": "\uD83D\uDE00`, true, false},
		{`{"a": -`, true, false},
		{`{"a": -0.`, true, false},
		{`{"a": -0.5e`, true, false},
		{`{"a": -0.5e+`, true, false},
		{`{"a": -0.5e+3`, true, false},
		{`{"a": tr`, true, false},
		{`{"a": [1, [2, [`, true, false},
		{"{\"a\": \"\xc3", true, false},
		{"{\"a\": \"\xe2\x82", true, false},
		{"{\"a\": \"\xf0\x9f\x98", true, false},
		{`{"a":` + deep, true, false},

		// Complete.
		{"{}", true, true},
		{" {} \n", true, true},
		{`{"a": 1}`, true, true},
		{`{"a":-0.5e+3}`, true, true},
		{`{"a": 0, "b": -12.25E-2, "c": 1e9, "d": 10}`, true, true},
		{`{"a": true, "b": false, "c": null}`, true, true},
		{`{"a": [], "b": {}, "c": [[1, 2], {"d": [true]}]}`, true, true},
		{`{"é": "\u00e9\n\t\"\\\/\b\f\r", "x": "😀€é"}`, true, true},
		{"{\n  \"a\" : [ 1 , 2 ] ,\n  \"b\" : { }\n}\n", true, true},
		{`{"a":` + deep + strings.Repeat("]", MaxDepth-1) + "}", true, true},

		// Not prefixes.
		{"x", false, false},
		{"[]", false, false},
		{`"a"`, false, false},
		{"1", false, false},
		{"{}x", false, false},
		{"{} {}", false, false},
		{"{,", false, false},
		{`{"a" 1`, false, false},
		{`{"a": }`, false, false},
		{`{"a": 1,}`, false, false},
		{`{"a": [1,]}`, false, false},
		{`{"a": 01}`, false, false},
		{`{"a": -}`, false, false},
		{`{"a": +1}`, false, false},
		{`{"a": .5}`, false, false},
		{`{"a": 1.}`, false, false},
		{`{"a": 1e}`, false, false},
		{`{"a": 1e+}`, false, false},
		{`{"a": 0x1}`, false, false},
		{`{"a": tru}`, false, false},
		{`{"a": True}`, false, false},
		{`{"a": nul1}`, false, false},
		{`{"a": "\x"}`, false, false},
		{`{"a": "\u12G4"}`, false, false},
		{"{\"a\": \"\n\"}", false, false},
		{"{\"a\": \"\x00", false, false},
		{"{\"a\": \"\xc3\x28", false, false},
		{"{\"a\": \"\xc0\x80", false, false},
		{"{\"a\": \"\xed\xa0\x80", false, false},
		{"{\"a\": \"\xf5", false, false},
		{"{\"a\": \xff", false, false},
		{`{"a": 1]`, false, false},
		{`{"a": [1}`, false, false},
		{`{1: 2}`, false, false},
		{`{'a': 1}`, false, false},
		{`{"a":` + deep + "[", false, false},
	}
	for _, tc := range tests {
		prefix, complete := CheckJSON([]byte(tc.in))
		if prefix != tc.prefix || complete != tc.complete {
			t.Errorf("CheckJSON(%q) = %v, %v; want %v, %v", tc.in, prefix, complete, tc.prefix, tc.complete)
		}
		if tc.complete {
			var v map[string]any
			if err := json.Unmarshal([]byte(tc.in), &v); err != nil {
				t.Errorf("%q: complete, but encoding/json says %v", tc.in, err)
			}
		}
	}
}

// TestCheckJSONPrefixes checks that every prefix of valid objects is
// accepted, and only the whole is complete.
func TestCheckJSONPrefixes(t *testing.T) {
	for _, s := range []string{
		`{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5e-3, -0]}}`,
		`{"a":{"b":{"c":[{"d":null},true,false,"\u00e9\ud83d\ude00 é😀"]}}}`,
	} {
		for i := 0; i <= len(s); i++ {
			prefix, complete := CheckJSON([]byte(s[:i]))
			if !prefix || complete != (i == len(s)) {
				t.Errorf("CheckJSON(%q) = %v, %v", s[:i], prefix, complete)
			}
		}
	}
}

// FuzzCheckJSON checks the automaton against encoding/json: a complete
// text is valid JSON, and valid JSON objects (not too deep) are complete.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, -2.5e3, "x\u00e9", true, null, {}]}`, `{"a"`, "{\"\xc3\xa9\": 1}", `[1]`, `{"a": 01}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		prefix, complete := CheckJSON(b)
		if complete && !prefix {
			t.Fatal("complete but not a prefix")
		}
		var v map[string]any
		err := json.Unmarshal(b, &v)
		if complete && (err != nil || v == nil) {
			t.Fatalf("%q: complete, but encoding/json says %v", b, err)
		}
		// encoding/json lets invalid UTF-8 through; the automaton does not.
		if err == nil && v != nil && !complete && nesting(b) <= MaxDepth && utf8.Valid(b) {
			t.Fatalf("%q: valid object, but CheckJSON = %v, %v", b, prefix, complete)
		}
	})
}

// nesting returns the deepest nesting of brackets outside strings.
func nesting(b []byte) int {
	depth, most, in, esc := 0, 0, false, false
	for _, c := range b {
		switch {
		case in && esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			depth++
			most = max(most, depth)
		case !in && (c == '}' || c == ']'):
			depth--
		}
	}
	return most
}
