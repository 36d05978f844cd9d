package chat

import "strings"

// ToolsLlama3 is the format of Llama 3.1 and later: {"name": ...,
// "parameters": {...}} as the reply, optionally after <|python_tag|>;
// several calls may follow each other, separated by white space or ";". A
// template that renders "<|python_tag|>", or a Llama 3 header and a prompt
// asking for "parameters", is in it.
var ToolsLlama3 ToolFormat = llama3Format{}

type llama3Format struct{ formatBase }

// pythonTag may open a Llama 3 reply of calls.
const pythonTag = "<|python_tag|>"

func (llama3Format) Name() string   { return "llama3" }
func (llama3Format) String() string { return "llama3" }

func (llama3Format) Forced() ForcedCalls {
	return ForcedCalls{
		Syntax: CallSyntax{Call: "{\"name\": \"", Mid: "\", \"parameters\": ", Suffix: "}"},
		Marker: pythonTag,
	}
}

func (llama3Format) detect(src string) bool {
	return strings.Contains(src, pythonTag) ||
		strings.Contains(src, "<|start_header_id|>") && strings.Contains(src, `"parameters"`)
}

var llama3Reply = &replyCalls{
	openers: []string{pythonTag},
	value:   parseLlama3Calls,
	sep:     true,
}

func (llama3Format) reply() *replyCalls           { return llama3Reply }
func (llama3Format) content(p *OutputParser) bool { return p.replyContent() }

// parseLlama3Calls reads JSON calls, each with its arguments.
func parseLlama3Calls(s string) ([]ParsedToolCall, bool) { return parseJSONCalls(s, false) }
