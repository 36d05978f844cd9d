package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
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

// parseHermesBody reads the inside of a <tool_call> block: JSON, the
// <function=NAME> form, or GLM's NAME<arg_key>... form.
func parseHermesBody(body string) ([]ParsedToolCall, bool) {
	b := strings.TrimSpace(body)
	switch {
	case strings.HasPrefix(b, "{"), strings.HasPrefix(b, "["):
		return parseJSONCalls(b, true)
	case strings.HasPrefix(b, "<function="):
		return parseFunctionTags(b)
	}
	c, ok := parseArgKeyCall(b)
	if !ok {
		return nil, false
	}
	return []ParsedToolCall{c}, true
}

// parseFunctionTags reads calls written as
// <function=NAME><parameter=KEY>VALUE</parameter>...</function>.
func parseFunctionTags(b string) ([]ParsedToolCall, bool) {
	var calls []ParsedToolCall
	for b = strings.TrimLeft(b, wsChars); b != ""; b = strings.TrimLeft(b, wsChars) {
		rest, ok := strings.CutPrefix(b, "<function=")
		if !ok {
			return nil, false
		}
		k := strings.IndexByte(rest, '>')
		if k < 0 {
			return nil, false
		}
		name := strings.TrimSpace(rest[:k])
		if !validName(name) {
			return nil, false
		}
		b = rest[k+1:]
		var args objectBuilder
		for {
			b = strings.TrimLeft(b, wsChars)
			if r, ok := strings.CutPrefix(b, "</function>"); ok {
				b = r
				break
			}
			if b == "" {
				break
			}
			r, ok := strings.CutPrefix(b, "<parameter=")
			if !ok {
				return nil, false
			}
			k := strings.IndexByte(r, '>')
			if k < 0 {
				return nil, false
			}
			key := strings.TrimSpace(r[:k])
			r = r[k+1:]
			e := strings.Index(r, "</parameter>")
			if e < 0 || key == "" {
				return nil, false
			}
			args.add(key, paramValue(r[:e]))
			b = r[e+len("</parameter>"):]
		}
		calls = append(calls, ParsedToolCall{Name: name, Arguments: args.bytes()})
	}
	return calls, len(calls) > 0
}

// parseArgKeyCall reads a call written as
// NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...
func parseArgKeyCall(b string) (ParsedToolCall, bool) {
	name, rest := b, ""
	if i := strings.Index(b, "<arg_key>"); i >= 0 {
		name, rest = b[:i], b[i:]
	}
	name = strings.TrimSpace(name)
	if !validName(name) {
		return ParsedToolCall{}, false
	}
	var args objectBuilder
	for rest = strings.TrimLeft(rest, wsChars); rest != ""; rest = strings.TrimLeft(rest, wsChars) {
		key, r, ok := cutTag(rest, "<arg_key>", "</arg_key>")
		if !ok {
			return ParsedToolCall{}, false
		}
		val, r, ok := cutTag(strings.TrimLeft(r, wsChars), "<arg_value>", "</arg_value>")
		if !ok {
			return ParsedToolCall{}, false
		}
		key = strings.TrimSpace(key)
		if key == "" {
			return ParsedToolCall{}, false
		}
		args.add(key, paramValue(val))
		rest = r
	}
	return ParsedToolCall{Name: name, Arguments: args.bytes()}, true
}

// cutTag reads open + inner + close at the start of s.
func cutTag(s, open, close string) (inner, rest string, ok bool) {
	s, ok = strings.CutPrefix(s, open)
	if !ok {
		return "", "", false
	}
	i := strings.Index(s, close)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+len(close):], true
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

// parseGemmaCalls reads the inside of a fenced block: JSON calls, or
// Python-style calls.
func parseGemmaCalls(body string) ([]ParsedToolCall, bool) {
	b := strings.TrimSpace(body)
	if b == "" {
		return nil, false
	}
	if b[0] == '{' || b[0] == '[' {
		if calls, ok := parseJSONCalls(b, false); ok {
			return calls, true
		}
	}
	return parsePythonCalls(b)
}

// parsePythonCalls reads Python-style calls: name(key=value, ...), one per
// line (or separated by ";"), or as a list [a(...), b(...)]. Values are
// Python literals: strings, numbers, True, False, None, lists, tuples and
// dicts. print(call(...)) stands for the call.
func parsePythonCalls(s string) ([]ParsedToolCall, bool) {
	p := &pyParser{s: strings.TrimSpace(s)}
	var calls []ParsedToolCall
	list := p.peek() == '['
	if list {
		p.i++
	}
	for {
		p.space()
		if list && p.peek() == ']' {
			p.i++
			break
		}
		if !list && p.i >= len(p.s) {
			break
		}
		c, ok := p.call(true)
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		p.space()
		switch {
		case p.peek() == ',' && list, p.peek() == ';' && !list:
			p.i++
		case list && p.peek() == ']':
		case !list && (p.i >= len(p.s) || p.newline):
		default:
			return nil, false
		}
	}
	p.space()
	if p.i != len(p.s) || len(calls) == 0 {
		return nil, false
	}
	return calls, true
}

// pyParser reads Python literals and calls.
type pyParser struct {
	s       string
	i       int
	depth   int
	newline bool // the last space() skipped a newline
}

// maxPyDepth bounds the nesting of Python values.
const maxPyDepth = 64

func (p *pyParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *pyParser) space() {
	p.newline = false
	for p.i < len(p.s) && strings.IndexByte(wsChars, p.s[p.i]) >= 0 {
		if p.s[p.i] == '\n' {
			p.newline = true
		}
		p.i++
	}
}

func (p *pyParser) ident() string {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || p.i > start && (c >= '0' && c <= '9' || c == '.') {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

// call reads name(key=value, ...). With unwrap, print(call) gives the
// inner call.
func (p *pyParser) call(unwrap bool) (ParsedToolCall, bool) {
	name := p.ident()
	p.space()
	if !validName(name) || p.peek() != '(' {
		return ParsedToolCall{}, false
	}
	p.i++
	if unwrap && name == "print" {
		p.space()
		c, ok := p.call(false)
		p.space()
		if !ok || p.peek() != ')' {
			return ParsedToolCall{}, false
		}
		p.i++
		return c, true
	}
	var args objectBuilder
	for {
		p.space()
		if p.peek() == ')' {
			p.i++
			break
		}
		key := p.ident()
		p.space()
		if key == "" || strings.Contains(key, ".") || p.peek() != '=' {
			return ParsedToolCall{}, false
		}
		p.i++
		p.space()
		val, ok := p.value()
		if !ok {
			return ParsedToolCall{}, false
		}
		args.add(key, val)
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case ')':
		default:
			return ParsedToolCall{}, false
		}
	}
	return ParsedToolCall{Name: name, Arguments: args.bytes()}, true
}

// value reads a Python literal and returns it as JSON.
func (p *pyParser) value() ([]byte, bool) {
	if p.depth >= maxPyDepth {
		return nil, false
	}
	p.depth++
	defer func() { p.depth-- }()
	switch c := p.peek(); {
	case c == '"' || c == '\'':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		return jsonString(s), true
	case c == '[' || c == '(':
		return p.seq(map[byte]byte{'[': ']', '(': ')'}[c])
	case c == '{':
		return p.dict()
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return p.number()
	}
	switch p.ident() {
	case "True", "true":
		return []byte("true"), true
	case "False", "false":
		return []byte("false"), true
	case "None", "null":
		return []byte("null"), true
	}
	return nil, false
}

// seq reads a list or tuple.
func (p *pyParser) seq(end byte) ([]byte, bool) {
	p.i++
	out := []byte{'['}
	for n := 0; ; n++ {
		p.space()
		if p.peek() == end {
			p.i++
			return append(out, ']'), true
		}
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		if n > 0 {
			out = append(out, ", "...)
		}
		out = append(out, v...)
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case end:
		default:
			return nil, false
		}
	}
}

// dict reads a dict with string keys.
func (p *pyParser) dict() ([]byte, bool) {
	p.i++
	var o objectBuilder
	for {
		p.space()
		if p.peek() == '}' {
			p.i++
			return o.bytes(), true
		}
		if c := p.peek(); c != '"' && c != '\'' {
			return nil, false
		}
		k, ok := p.str()
		if !ok {
			return nil, false
		}
		p.space()
		if p.peek() != ':' {
			return nil, false
		}
		p.i++
		p.space()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		o.add(k, v)
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
		default:
			return nil, false
		}
	}
}

// number reads an integer or a float.
func (p *pyParser) number() ([]byte, bool) {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte("+-.0123456789eE_", p.s[p.i]) >= 0 {
		p.i++
	}
	t := strings.ReplaceAll(p.s[start:p.i], "_", "")
	t = strings.TrimPrefix(t, "+")
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return strconv.AppendInt(nil, n, 10), true
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), true
}

// str reads a quoted string with Python's escapes.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n':
			return "", false
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.s) {
			return "", false
		}
		e := p.s[p.i]
		p.i++
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.i+n > len(p.s) {
				return "", false
			}
			v, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", false
			}
			b.WriteRune(rune(v))
			p.i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false
}
