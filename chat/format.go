package chat

import (
	"strings"
)

// A tool-call format is one unit: how a template shows that a model writes
// it (detection), the markers it writes, how its output is parsed as it
// streams, and how a grammar forces a call in it. Each format lives in a
// file of its own (format_hermes.go, format_llama3.go, format_mistral.go,
// format_gemma.go, format_harmony.go) and is listed once, in toolFormats.
// The parsing machinery the formats share is in output.go, and the
// readers of calls they share in output_calls.go.

// ToolFormat is one way of writing tool calls in a model's output. The
// formats are the values ToolsHermes, ToolsLlama3, ToolsMistral,
// ToolsGemma and ToolsHarmony (ToolFormats lists them); a nil ToolFormat
// means the model does not call tools. ToolFormat values are comparable.
type ToolFormat interface {
	// Name names the format: "hermes", "llama3", "mistral", "gemma" or
	// "harmony".
	Name() string
	// Forced returns how a grammar writes calls in the format, as the
	// format's parser reads them back.
	Forced() ForcedCalls
	// Channels describes the format's message channels, or is nil for a
	// format whose output is one reply.
	Channels() *Channels

	// detect reports whether a template's source renders the format.
	detect(src string) bool
	// begin sets a new parser's first state and reports whether it did;
	// false leaves the shared start (reasoning markers, then content).
	begin(p *OutputParser, inReasoning bool) bool
	// content is the parser's step in content while tools are offered:
	// it streams text and watches for the start of the format's calls.
	content(p *OutputParser) bool
	// reply describes calls that open a reply, or is nil for a format
	// whose calls follow a marker anywhere in it.
	reply() *replyCalls
}

// toolFormats are the formats, in the order DetectOutputFormat tries
// them: a template may show the markers of a later format as well (a
// Harmony template may mention "<think>"; a Mistral one "<tool_call>").
var toolFormats = []ToolFormat{ToolsHarmony, ToolsMistral, ToolsHermes, ToolsLlama3, ToolsGemma}

// ToolFormats returns the tool-call formats, in the order
// DetectOutputFormat tries them.
func ToolFormats() []ToolFormat {
	return append([]ToolFormat(nil), toolFormats...)
}

// LookupToolFormat returns the format of the given name, or nil.
func LookupToolFormat(name string) ToolFormat {
	for _, f := range toolFormats {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

// CallSyntax is how tool calls are written, as a grammar forces them
// (package constrain holds output to the same fields): Open, then each call
// as Call, the function's name, Mid, its arguments as a JSON object and
// Suffix, the calls separated by Sep, then Close.
type CallSyntax struct {
	Open, Call, Mid, Suffix, Sep, Close string
}

// Render writes calls in the syntax, their arguments as given.
func (s CallSyntax) Render(calls []ParsedToolCall) string {
	var b strings.Builder
	b.WriteString(s.Open)
	for i, c := range calls {
		if i > 0 {
			b.WriteString(s.Sep)
		}
		b.WriteString(s.Call)
		b.WriteString(c.Name)
		b.WriteString(s.Mid)
		b.Write(c.Arguments)
		b.WriteString(s.Suffix)
	}
	b.WriteString(s.Close)
	return b.String()
}

// ForcedCalls is what a grammar needs to hold output to a format's tool
// calls, or to keep them out.
type ForcedCalls struct {
	// Syntax is how a forced call is written.
	Syntax CallSyntax
	// Multiple says that several calls may follow each other.
	Multiple bool
	// Marker is the text that opens calls, which a grammar keeps out of
	// the output when calls are refused (tool_choice none); empty when no
	// one text opens them.
	Marker string
}

// Channels describes a format whose output is a sequence of messages, each
// in a named channel, rather than one reply: reasoning is a channel of its
// own, and so is the answer. A grammar cannot keep the reasoning channel
// out of free text; where it holds the answer or a call, it allows
// reasoning before it unless thinking is off.
type Channels struct {
	// Reasoning opens a message in the reasoning channel.
	Reasoning string
	// Next ends a message and opens the next one, which ends reasoning;
	// once NextCommit bytes of it are written, the rest must follow.
	Next       string
	NextCommit int
	// Answer opens a message in the answer's channel, where a JSON reply
	// goes.
	Answer string
	// ReasoningKey is the message key under which the format's templates
	// read an earlier turn's reasoning.
	ReasoningKey string
}

// formatBase gives a format the defaults of the hooks it does not need.
type formatBase struct{}

func (formatBase) Channels() *Channels            { return nil }
func (formatBase) begin(*OutputParser, bool) bool { return false }
func (formatBase) reply() *replyCalls             { return nil }
func (formatBase) content(p *OutputParser) bool   { return p.release(OutputContent) }

// OutputFormat describes how a model marks reasoning and tool calls in its
// output.
type OutputFormat struct {
	// ThinkStart and ThinkEnd enclose the model's reasoning, such as
	// "<think>" and "</think>". An empty ThinkEnd means the model does not
	// reason between markers (a format with Channels reasons in a channel
	// instead).
	ThinkStart, ThinkEnd string
	// Tools is how tool calls are written; nil: the model does not call
	// tools.
	Tools ToolFormat
}

// thinkMarkers are the reasoning markers templates render, in the order
// detection tries them.
var thinkMarkers = []struct{ start, end string }{
	{"<think>", "</think>"},
	{"[THINK]", "[/THINK]"},
}

// DetectOutputFormat infers a model's output format from its template's
// source: the markers the template renders for reasoning ("<think>",
// "[THINK]") and its tool-call format (see each format's detection). A nil
// template gives the zero format.
func DetectOutputFormat(t *Template) OutputFormat {
	if t == nil {
		return OutputFormat{}
	}
	return detectOutputFormat(t.Source())
}

func detectOutputFormat(src string) OutputFormat {
	var f OutputFormat
	for _, tf := range toolFormats {
		if tf.detect(src) {
			f.Tools = tf
			break
		}
	}
	if f.Channels() != nil {
		// It reasons through its channels, not with markers.
		return f
	}
	for _, m := range thinkMarkers {
		if strings.Contains(src, m.start) || strings.Contains(src, m.end) {
			f.ThinkStart, f.ThinkEnd = m.start, m.end
			break
		}
	}
	return f
}

// Channels returns the channels of the format's output, or nil when the
// output is one reply.
func (f OutputFormat) Channels() *Channels {
	if f.Tools == nil {
		return nil
	}
	return f.Tools.Channels()
}

// ReasoningMarkers returns the markers that enclose reasoning within a
// reply, or empty strings when the model reasons in no such block (it does
// not reason, or reasons in a channel).
func (f OutputFormat) ReasoningMarkers() (start, end string) {
	if f.ThinkEnd == "" || f.Channels() != nil {
		return "", ""
	}
	return f.ThinkStart, f.ThinkEnd
}

// Reasons reports whether the model reasons: between markers or in a
// channel.
func (f OutputFormat) Reasons() bool {
	_, end := f.ReasoningMarkers()
	return end != "" || f.Channels() != nil
}

// InReasoning reports whether a rendered prompt ends inside an open
// reasoning block: it ends with ThinkStart, possibly followed by white
// space, as Qwen 3.5's or DeepSeek R1's generation prompts do. A server
// passes the result to NewParser.
func (f OutputFormat) InReasoning(prompt string) bool {
	start, end := f.ReasoningMarkers()
	if start == "" || end == "" {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(prompt, wsChars), start)
}
