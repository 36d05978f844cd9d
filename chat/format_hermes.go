package chat

import "strings"

// ToolsHermes is the format of Qwen 2.5/3 and Hermes:
// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> anywhere in
// the reply. The body may also be
// <function=NAME><parameter=KEY>VALUE</parameter></function> (Qwen 3.5,
// Nemotron) or NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>
// (GLM). A template that renders "<tool_call>" is in it.
var ToolsHermes ToolFormat = hermesFormat{}

type hermesFormat struct{ formatBase }

// Hermes markers.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
)

func (hermesFormat) Name() string   { return "hermes" }
func (hermesFormat) String() string { return "hermes" }

func (hermesFormat) Forced() ForcedCalls {
	return ForcedCalls{
		Syntax:   CallSyntax{Call: hermesOpen + "\n{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}\n" + hermesClose},
		Multiple: true,
		Marker:   hermesOpen,
	}
}

func (hermesFormat) detect(src string) bool { return strings.Contains(src, hermesOpen) }

func (hermesFormat) content(p *OutputParser) bool {
	return p.contentUntil(hermesOpen, (*OutputParser).stepHermes)
}

// stepHermes opens the block after <tool_call>.
func (p *OutputParser) stepHermes() bool {
	p.readBlock(hermesClose, parseHermesBody)
	return true
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
