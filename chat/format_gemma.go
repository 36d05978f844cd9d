package chat

import (
	"math"
	"strconv"
	"strings"
	"unicode"
)

// ToolsGemma is the format of Gemma: the reply is a JSON object
// {"name": ..., "parameters": {...}} (or an array of them), or a
// ```tool_code, ```tool_call or ```json fenced block holding such JSON or
// Python-style calls (name(key=value, ...), one per line or as a [list]),
// or such a [list] unfenced. Gemma 3 templates render no tools
// themselves; these are the forms Gemma's function-calling guide asks the
// model for. A template that renders Gemma's turn marker is in it.
var ToolsGemma ToolFormat = gemmaFormat{}

type gemmaFormat struct{ formatBase }

func (gemmaFormat) Name() string   { return "gemma" }
func (gemmaFormat) String() string { return "gemma" }

func (gemmaFormat) Forced() ForcedCalls {
	return ForcedCalls{
		Syntax: CallSyntax{Call: "{\"name\": \"", Mid: "\", \"parameters\": ", Suffix: "}"},
	}
}

func (gemmaFormat) detect(src string) bool { return strings.Contains(src, "<start_of_turn>") }

// gemmaReply: fenced blocks, or a bare object or list.
var gemmaReply = &replyCalls{
	openers: []string{"```tool_code", "```tool_call", "```json"},
	fence:   true,
	fenced:  parseGemmaCalls,
	value:   parseGemmaValue,
	arrays:  true,
}

func (gemmaFormat) reply() *replyCalls           { return gemmaReply }
func (gemmaFormat) content(p *OutputParser) bool { return p.replyContent() }

// parseGemmaValue reads a bare value: JSON calls, or a list of
// Python-style calls.
func parseGemmaValue(val string) ([]ParsedToolCall, bool) {
	calls, ok := parseJSONCalls(val, false)
	if !ok && val[0] == '[' {
		calls, ok = parsePythonCalls(val)
	}
	return calls, ok
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
