package chat

import (
	"encoding/json"
	"testing"
)

// TestTojson compares the tojson filter with Python's json.dumps. The
// expected strings were produced by CPython 3 with
// json.dumps(json.loads(value), ensure_ascii=False, **args).
func TestTojson(t *testing.T) {
	tests := []struct {
		name  string
		value string // JSON, passed to the template as kwarg x
		args  string // tojson's arguments, as written in the template
		want  string
	}{
		{"nested objects keep order", `{"z": 1, "a": {"y": [1, 2, {"b": null, "a": true}], "x": false}}`, "", "{\"z\": 1, \"a\": {\"y\": [1, 2, {\"b\": null, \"a\": true}], \"x\": false}}"},
		{"floats", `[1.0, 1e-7, 1e16, 1e15, 123456789.0, 0.1, -0.0, 1.5e300, 5e-324, 2.5, 1E+2, 0.0001, 0.00001, 100.5, 1e22, 12345678901234567.0, 3.14159]`, "", "[1.0, 1e-07, 1e+16, 1000000000000000.0, 123456789.0, 0.1, -0.0, 1.5e+300, 5e-324, 2.5, 100.0, 0.0001, 1e-05, 100.5, 1e+22, 1.2345678901234568e+16, 3.14159]"},
		{"ints", `[0, -1, 9007199254740993, 9223372036854775807, -9223372036854775808]`, "", "[0, -1, 9007199254740993, 9223372036854775807, -9223372036854775808]"},
		{"escapes", `"\u0000\u001f\b\f\n\r\t\"\\/\u007f"`, "", "\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\x7f\""},
		{"unicode stays literal", `"é中😀\u2028\u2029<>&'"`, "", "\"é中😀\u2028\u2029<>&'\""},
		{"ensure_ascii", `"é中😀\u2028<>&"`, "(ensure_ascii=true)", "\"\\u00e9\\u4e2d\\ud83d\\ude00\\u2028<>&\""},
		{"indent 2", `{"b": [1, {"d": [], "c": {}}], "a": "x"}`, "(indent=2)", "{\n  \"b\": [\n    1,\n    {\n      \"d\": [],\n      \"c\": {}\n    }\n  ],\n  \"a\": \"x\"\n}"},
		{"indent 0", `{"b": [1, {"d": [], "c": {}}], "a": "x"}`, "(indent=0)", "{\n\"b\": [\n1,\n{\n\"d\": [],\n\"c\": {}\n}\n],\n\"a\": \"x\"\n}"},
		{"indent string", `{"b": [1, {"d": [], "c": {}}], "a": "x"}`, "(indent=\"\\t\")", "{\n\t\"b\": [\n\t\t1,\n\t\t{\n\t\t\t\"d\": [],\n\t\t\t\"c\": {}\n\t\t}\n\t],\n\t\"a\": \"x\"\n}"},
		{"indent keeps order", `{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}`, "(indent=4)", "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"parameters\": {\n            \"z\": 1,\n            \"a\": 2\n        }\n    }\n}"},
		{"sort_keys", `{"b": 1, "a": {"d": 2, "c": 3}}`, "(sort_keys=true)", "{\"a\": {\"c\": 3, \"d\": 2}, \"b\": 1}"},
		{"separators", `{"b": 1, "a": [2, 3]}`, "(separators=[\",\", \":\"])", "{\"b\":1,\"a\":[2,3]}"},
		{"indent and separators", `{"b": 1, "a": [2, 3]}`, "(indent=4, separators=[\",\", \" = \"])", "{\n    \"b\" = 1,\n    \"a\" = [\n        2,\n        3\n    ]\n}"},
		{"positional ensure_ascii", `"é"`, "(true)", "\"\\u00e9\""},
		{"U+FDD0 stays literal, unlike Python", `"<\ufdd0|x|>é"`, "(ensure_ascii=true)", "\"<\uFDD0|x|>\\u00e9\""},
		{"empty list", `[]`, "", "[]"},
		{"empty object", `{}`, "", "{}"},
		{"null", `null`, "", "null"},
		{"bools", `[true, false]`, "", "[true, false]"},
		{"string", `"plain"`, "", "\"plain\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse("{{ x|tojson"+tt.args+" }}", Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(Input{Kwargs: map[string]any{"x": json.RawMessage(tt.value)}})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestTojsonTemplateValues covers values built by the template itself.
func TestTojsonTemplateValues(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{`{{ {'b': 1, 'a': 2.0}|tojson }}`, `{"b": 1, "a": 2.0}`},
		{`{{ [1.5, 'x', none, true]|tojson }}`, `[1.5, "x", null, true]`},
		{`{{ 'a"b' | tojson }}`, `"a\"b"`},
		{`{%- set d = {'k': 'v'} %}{{ d | tojson(indent=1) }}`, "{\n \"k\": \"v\"\n}"},
		{`{{ "not a filter: | tojson" }}`, `not a filter: | tojson`},
	}
	for _, tt := range tests {
		tmpl, err := Parse(tt.src, Options{})
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		got, err := tmpl.Render(Input{})
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestTojsonErrors(t *testing.T) {
	tests := []string{
		`{{ undefined_name|tojson }}`,
		`{{ raise_exception|tojson }}`,
		`{{ 1|tojson(indent=[1]) }}`,
		`{{ 1|tojson(separators=1) }}`,
		`{{ 1|tojson(bogus=1) }}`,
		`{{ 1|tojson(true, 2, none, false, 5) }}`,
	}
	for _, src := range tests {
		tmpl, err := Parse(src, Options{})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := tmpl.Render(Input{}); err == nil {
			t.Errorf("%s: rendered %q, want an error", src, got)
		}
	}
}
