package chat

import "strings"

// ToolsMistral is the format of Mistral's models:
// [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...], or
// [TOOL_CALLS]NAME[ARGS]{...} (optionally NAME[CALL_ID]ID[ARGS]{...}),
// once per call. A template that renders "[TOOL_CALLS]" is in it. (Its
// reasoning markers, "[THINK]" and "[/THINK]", are detected apart, as
// every format's are.)
var ToolsMistral ToolFormat = mistralFormat{}

type mistralFormat struct{ formatBase }

// Mistral markers.
const (
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
	mistralID    = "[CALL_ID]"
)

// maxMistralName bounds what may come between [TOOL_CALLS] and [ARGS].
const maxMistralName = 512

func (mistralFormat) Name() string   { return "mistral" }
func (mistralFormat) String() string { return "mistral" }

func (mistralFormat) Forced() ForcedCalls {
	return ForcedCalls{
		Syntax:   CallSyntax{Open: mistralCalls + "[", Call: "{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}", Sep: ", ", Close: "]"},
		Multiple: true,
		Marker:   mistralCalls,
	}
}

func (mistralFormat) detect(src string) bool { return strings.Contains(src, mistralCalls) }

func (mistralFormat) content(p *OutputParser) bool {
	return p.contentUntil(mistralCalls, (*OutputParser).stepMistral)
}

// stepMistral decides between the two Mistral forms after [TOOL_CALLS].
func (p *OutputParser) stepMistral() bool {
	t := strings.TrimLeft(p.buf, wsChars)
	p.raw += p.buf[:len(p.buf)-len(t)]
	p.buf = t
	if t == "" {
		if p.final {
			return p.degrade()
		}
		return false
	}
	if t[0] == '[' || t[0] == '{' {
		p.readValue(parseMistralCalls, false)
		return true
	}
	p.st = (*OutputParser).stepMistralName
	return true
}

// parseMistralCalls reads JSON calls, whose arguments may be left out.
func parseMistralCalls(s string) ([]ParsedToolCall, bool) { return parseJSONCalls(s, true) }

// stepMistralName reads NAME (and [CALL_ID]ID) up to [ARGS].
func (p *OutputParser) stepMistralName() bool {
	i := strings.Index(p.buf, mistralArgs)
	if i < 0 {
		if p.final || len(p.buf) > maxMistralName {
			return p.degrade()
		}
		return false
	}
	name := p.buf[:i]
	if j := strings.Index(name, mistralID); j >= 0 {
		name = name[:j]
	}
	name = strings.TrimSpace(name)
	if !validName(name) {
		return p.degrade()
	}
	p.raw += p.buf[:i+len(mistralArgs)]
	p.buf = p.buf[i+len(mistralArgs):]
	p.name = name
	p.readValue(p.namedArgs, false)
	return true
}

// namedArgs reads the arguments of the call named p.name.
func (p *OutputParser) namedArgs(s string) ([]ParsedToolCall, bool) {
	args, ok := objectArgs([]byte(s))
	if !ok {
		return nil, false
	}
	return []ParsedToolCall{{Name: p.name, Arguments: args}}, true
}
