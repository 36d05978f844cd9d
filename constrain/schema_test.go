package constrain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCompileSchemaErrors(t *testing.T) {
	for _, tc := range []struct {
		schema  string
		keyword string // "" for a syntax error
		path    string
	}{
		{`{"type":"string","pattern":"(?i)a"}`, "pattern", ""},
		{`{"type":"object","properties":{"age":{"type":"number","minimum":0.0000005}}}`, "minimum", "/properties/age"},
		{`{"type":"object","properties":{"d":{"type":"string","format":"hostname"}}}`, "format", "/properties/d"},
		{`{"type":"array","items":{"type":"string","minLength":4,"maxLength":3}}`, "minLength", "/items"},
		{`{"type":"integer","minimum":3,"maximum":2}`, "minimum", ""},
		{`{"allOf":[{"type":"string"}]}`, "allOf", ""},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, "required", ""},
		{`{"anyOf":[{"type":"object"},{"type":"object","properties":{"x":{}}}]}`, "anyOf", ""},
		{`{"type":"strange"}`, "type", ""},
		{`{"$ref":"http://example.com/s.json"}`, "$ref", ""},
		{`{"$ref":"#/$defs/missing"}`, "$ref", ""},
		{`{"type":"array","items":[{"type":"string"}]}`, "items", ""},
		{`{"type":"array","minItems":3,"maxItems":2}`, "minItems", ""},
		{`{"type":"array","minItems":-1}`, "minItems", ""},
		{`{"enum":[]}`, "enum", ""},
		{`{"type":`, "", ""},
	} {
		_, err := CompileSchema([]byte(tc.schema))
		if err == nil {
			t.Errorf("%s: compiled", tc.schema)
			continue
		}
		var se *SchemaError
		if !errors.As(err, &se) {
			if tc.keyword != "" {
				t.Errorf("%s: %v is not a *SchemaError", tc.schema, err)
			}
			continue
		}
		if se.Keyword != tc.keyword || se.Path != tc.path {
			t.Errorf("%s: keyword %q at %q, want %q at %q (%v)", tc.schema, se.Keyword, se.Path, tc.keyword, tc.path, err)
		}
		if !strings.Contains(err.Error(), `"`+tc.keyword+`"`) {
			t.Errorf("%s: message %q does not name %q", tc.schema, err, tc.keyword)
		}
	}
}

func TestSchemaCheck(t *testing.T) {
	const person = `{"type":"object","properties":{
		"name":{"type":"string"},
		"age":{"type":"integer"},
		"height":{"type":"number"},
		"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},
		"pet":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/pet"}]},
		"ok":{"type":"boolean"},
		"kind":{"const":"person"}
	},"required":["name","age"],"additionalProperties":false,
	"$defs":{"pet":{"type":"object","properties":{"species":{"enum":["cat","dog"]}},"required":["species"]}}}`
	for _, tc := range []struct {
		schema           string
		text             string
		prefix, complete bool
	}{
		{person, `{"name": "Ann", "age": 31}`, true, true},
		{person, `{ "age":31 ,"name":"Ann\u00e9 \"x\"" }`, true, true},
		{person, `{"name": "Ann"}`, false, false},             // closes without age
		{person, `{"name": "Ann", "name": "B"`, false, false}, // a key twice
		{person, `{"nickname": "A"`, false, false},            // undeclared
		{person, `{"name": "Ann", "age": 31.5`, false, false},
		{person, `{"name": "Ann", "age": 3e1`, false, false},
		{person, `{"name": 5`, false, false},
		{person, `{"name": "A", "age": -0, "height": -1.5e+3}`, true, true},
		{person, `{"name": "A", "age": 1, "tags": ["a", "b"]}`, true, true},
		{person, `{"name": "A", "age": 1, "tags": ["a", "b", "a"]`, false, false}, // maxItems
		{person, `{"name": "A", "age": 1, "tags": ["c"]`, false, false},
		{person, `{"name": "A", "age": 1, "pet": null}`, true, true},
		{person, `{"name": "A", "age": 1, "pet": {"species": "dog"}}`, true, true},
		{person, `{"name": "A", "age": 1, "pet": {}`, false, false},
		{person, `{"name": "A", "age": 1, "pet": "dog"`, false, false},
		{person, `{"name": "A", "age": 1, "ok": tru`, true, false},
		{person, `{"name": "A", "age": 1, "ok": 1`, false, false},
		{person, `{"name": "A", "age": 1, "kind": "person"}`, true, true},
		{person, `{"name": "A", "age": 1, "kind": "persons"`, false, false},
		{person, `{"name": "A", "age": 1}}`, false, false},
		{person, `{"name": "A",` + strings.Repeat(" ", 30) + `"age": 1}`, false, false}, // white-space run
		{`{"type":"integer"}`, `12`, true, true},
		{`{"type":"integer"}`, `012`, false, false},
		{`{"enum":[1,12,"x",null]}`, `1`, true, true},
		{`{"enum":[1,12,"x",null]}`, `12`, true, true},
		{`{"enum":[1,12,"x",null]}`, `13`, false, false},
		{`{"enum":[1,12,"x",null]}`, `nul`, true, false},
		{`{"type":["string","null"]}`, `null`, true, true},
		{`{"type":["string","null"]}`, `"s"`, true, true},
		{`{"type":["string","null"]}`, `1`, false, false},
		{`{"type":"array","items":{"type":"number"},"minItems":1}`, `[]`, false, false},
		{`{"type":"array","items":{"type":"number"},"minItems":1}`, `[1, 2.5]`, true, true},
		{`{"type":"object"}`, `{"any": [1, {"x": null}], "b": "é"}`, true, true},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"a": 1, "b": 2}`, true, true},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"a": "x"`, false, false},
		{`{"type":"object","additionalProperties":false}`, `{}`, true, true},
		{`{"type":"object","additionalProperties":false}`, `{"a"`, false, false},
		{`{"type":"string"}`, "\"a\x01", false, false},
		{`{"type":"string"}`, "\"\xff", false, false},
		{`{"type":"number"}`, `1` + strings.Repeat("0", 30), false, false},
		// A recursive schema.
		{`{"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/t"}}}}},"$ref":"#/$defs/t"}`,
			`{"kids": [{"kids": []}, {}]}`, true, true},
	} {
		s, err := CompileSchema([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		prefix, complete := s.Check([]byte(tc.text))
		if prefix != tc.prefix || complete != tc.complete {
			t.Errorf("%.40s… on %q: prefix %v complete %v, want %v %v", tc.schema, tc.text, prefix, complete, tc.prefix, tc.complete)
		}
	}
}

func TestCompileToolSchema(t *testing.T) {
	for _, tc := range []struct {
		schema, text string
		ok           bool
	}{
		// Keywords it cannot enforce are left out; the rest holds.
		{`{"type":"object","properties":{"city":{"type":"string","format":"hostname"}},"required":["city"]}`, `{"city": "paris"}`, true},
		{`{"type":"object","properties":{"city":{"type":"string","format":"hostname"}},"required":["city"]}`, `{}`, false},
		// Keywords it can enforce hold.
		{`{"type":"object","properties":{"city":{"type":"string","pattern":"^[A-Z]"}},"required":["city"]}`, `{"city": "paris"}`, false},
		{`{"type":"object","properties":{"city":{"type":"string","pattern":"^[A-Z]"}},"required":["city"]}`, `{"city": "Paris"}`, true},
		// Missing, malformed or not an object: any object.
		{``, `{"x": 1}`, true},
		{`{"type":`, `{"x": 1}`, true},
		{`{"type":"string"}`, `{"x": 1}`, true},
		{`{"type":"object","properties":{"v":{"anyOf":[{"type":"object"},{"type":"object"}]}}}`, `{"v": [1]}`, true},
	} {
		s := CompileToolSchema([]byte(tc.schema))
		_, complete := s.Check([]byte(tc.text))
		if complete != tc.ok {
			t.Errorf("%s on %q: %v, want %v", tc.schema, tc.text, complete, tc.ok)
		}
	}
}

// FuzzCompileSchema checks that no schema, and no text checked against
// one, makes the compiler or the automaton panic, and that a text the
// automaton calls complete is valid JSON.
func FuzzCompileSchema(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"enum":[1,"x",null]}},"required":["a"]}`, `{"a": 1}`)
	f.Add(`{"$defs":{"t":{"type":"array","items":{"$ref":"#/$defs/t"}}},"$ref":"#/$defs/t"}`, `[[], [[]]]`)
	f.Add(`{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `-0`)
	f.Add(`{"type":["boolean","null"]}`, `true`)
	f.Add(`{"type":"string","format":"date-time","maxLength":30}`, `"2024-01-01T00:00:00Z"`)
	f.Add(`{"type":"integer","minimum":-5,"maximum":5,"multipleOf":2}`, `-4`)
	f.Add(`{"type":"number","exclusiveMinimum":0,"maximum":1}`, `0.5`)
	f.Add(`{"type":"string","pattern":"^[a-z]+[0-9]?$","minLength":2}`, `"ab1"`)
	f.Fuzz(func(t *testing.T, schema, text string) {
		for _, s := range []*Schema{mustCompile(schema), CompileToolSchema([]byte(schema))} {
			if s == nil {
				continue
			}
			if _, complete := s.Check([]byte(text)); complete && !json.Valid([]byte(text)) {
				t.Errorf("schema %s: %q is complete but not JSON", schema, text)
			}
		}
	})
}

func mustCompile(schema string) *Schema {
	s, err := CompileSchema([]byte(schema))
	if err != nil {
		return nil
	}
	return s
}
