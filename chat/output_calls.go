package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode"
)

// ParsedToolCall is a tool call read from a model's output.
type ParsedToolCall struct {
	Name string
	// Arguments is always a valid JSON object, its keys in the model's
	// order.
	Arguments json.RawMessage
}

// maxNameLen bounds a tool name.
const maxNameLen = 256

// ValidToolName reports whether s can be read back from a model's output
// as a tool's name: letters, digits and "_-.:/@", at most 256 bytes.
func ValidToolName(s string) bool { return validName(s) }

// validName reports whether s can be a tool's name: letters, digits and
// "_-.:/@", at most maxNameLen bytes.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("_-.:/@", r) {
			return false
		}
	}
	return true
}

// parseJSONCalls reads tool calls written as JSON: an object, an array of
// objects, or several objects one after the other, each
// {"name": ..., "arguments": {...}} (or "parameters", or the OpenAI shape
// {"type": "function", "function": {...}}). Unless lenient, each object
// must have its arguments.
func parseJSONCalls(s string, lenient bool) ([]ParsedToolCall, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []ParsedToolCall
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false
		}
		switch raw[0] {
		case '{':
			c, ok := callFromObject(raw, lenient, 0)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		case '[':
			var items []json.RawMessage
			if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
				return nil, false
			}
			for _, it := range items {
				c, ok := callFromObject(it, lenient, 0)
				if !ok {
					return nil, false
				}
				calls = append(calls, c)
			}
		default:
			return nil, false
		}
	}
	return calls, len(calls) > 0
}

// callFromObject reads one call object.
func callFromObject(raw json.RawMessage, lenient bool, depth int) (ParsedToolCall, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return ParsedToolCall{}, false
	}
	if fn, ok := m["function"]; ok && depth == 0 && len(fn) > 0 && fn[0] == '{' {
		if _, hasName := m["name"]; !hasName {
			return callFromObject(fn, lenient, 1)
		}
	}
	var name string
	if err := json.Unmarshal(m["name"], &name); err != nil || !validName(name) {
		return ParsedToolCall{}, false
	}
	argRaw, ok := m["arguments"]
	if !ok {
		argRaw, ok = m["parameters"]
	}
	if !ok {
		if !lenient {
			return ParsedToolCall{}, false
		}
		argRaw = json.RawMessage("{}")
	}
	args, ok := objectArgs(argRaw)
	if !ok {
		return ParsedToolCall{}, false
	}
	return ParsedToolCall{Name: name, Arguments: args}, true
}

// objectArgs returns arguments given as a JSON object, as a string holding
// one, or as null (no arguments).
func objectArgs(raw []byte) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	switch raw[0] {
	case '{':
		if !json.Valid(raw) {
			return nil, false
		}
		return json.RawMessage(bytes.Clone(raw)), true
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		t := strings.TrimSpace(s)
		if t == "" {
			return json.RawMessage("{}"), true
		}
		if t[0] != '{' || !json.Valid([]byte(t)) {
			return nil, false
		}
		return json.RawMessage(t), true
	case 'n':
		if string(raw) == "null" {
			return json.RawMessage("{}"), true
		}
	}
	return nil, false
}

// paramValue turns a parameter written as text into JSON: a value that is
// valid JSON stays so (numbers, booleans, null, objects, arrays, quoted
// strings); any other text becomes a string. One newline on each side is
// the format's and is dropped.
func paramValue(v string) []byte {
	v = strings.TrimPrefix(v, "\n")
	v = strings.TrimSuffix(v, "\n")
	if t := strings.TrimSpace(v); t != "" && json.Valid([]byte(t)) {
		return []byte(t)
	}
	return jsonString(v)
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if e.Encode(s) != nil {
		return []byte(`""`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// objectBuilder writes a JSON object key by key, in order.
type objectBuilder struct {
	b []byte
}

func (o *objectBuilder) add(key string, val []byte) {
	if len(o.b) == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ", "...)
	}
	o.b = append(o.b, jsonString(key)...)
	o.b = append(o.b, ": "...)
	o.b = append(o.b, val...)
}

func (o *objectBuilder) bytes() json.RawMessage {
	if len(o.b) == 0 {
		return json.RawMessage("{}")
	}
	return json.RawMessage(append(o.b, '}'))
}
