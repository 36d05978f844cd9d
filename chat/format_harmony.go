package chat

import "strings"

// ToolsHarmony is the format of gpt-oss, whose output is a sequence of
// messages in channels: <|channel|>analysis<|message|>...<|end|> is
// reasoning, <|channel|>final<|message|>... content, and
// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
// a tool call (the recipient may also come before <|channel|>). A template
// that renders "<|channel|>" is in it.
var ToolsHarmony ToolFormat = harmonyFormat{}

type harmonyFormat struct{ formatBase }

// Harmony markers.
const (
	hMessage = "<|message|>"
	hChannel = "<|channel|>"
	hStart   = "<|start|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"

	harmonyAnalysis   = "analysis"   // the reasoning channel
	harmonyFinal      = "final"      // the answer's channel
	harmonyCommentary = "commentary" // the channel of tool calls
	harmonyFunctions  = "functions." // the namespace of the tools' recipients
)

// harmonyEnds end a Harmony message body. The first three belong to the
// message; the others start the next one.
var harmonyEnds = []string{hEnd, hCall, hReturn, hStart, hChannel}

// maxHeaderLead bounds the text before the first marker of a Harmony
// header (" to=functions.NAME"); longer text is not a header.
const maxHeaderLead = 64

// maxHeader bounds a Harmony header up to <|message|>: room for the role,
// the channel, a recipient with a tool name of maxNameLen bytes and a
// content type. A longer one is malformed.
const maxHeader = 96 + maxNameLen

func (harmonyFormat) Name() string   { return "harmony" }
func (harmonyFormat) String() string { return "harmony" }

// Forced writes a call as a message in the commentary channel to a
// function. The stop token <|call|> ends a call, and one call ends the
// turn.
func (harmonyFormat) Forced() ForcedCalls {
	return ForcedCalls{
		Syntax: CallSyntax{Call: hChannel + harmonyCommentary + " to=" + harmonyFunctions, Mid: " <|constrain|>json" + hMessage},
		Marker: "to=" + harmonyFunctions,
	}
}

// harmonyChannels: reasoning is the analysis channel, which the end of its
// message and the header of the next one close (the generation prompt
// ends with "<|start|>assistant", so output begins with "<|channel|>");
// any "<|" would end the message, so two bytes commit to the end. The
// answer is the final channel; templates read an earlier turn's analysis
// from the message's "thinking" key.
var harmonyChannels = Channels{
	Reasoning:    hChannel + harmonyAnalysis + hMessage,
	Next:         hEnd + hStart + "assistant",
	NextCommit:   len("<|"),
	Answer:       hChannel + harmonyFinal + hMessage,
	ReasoningKey: "thinking",
}

func (harmonyFormat) Channels() *Channels {
	c := harmonyChannels
	return &c
}

func (harmonyFormat) detect(src string) bool { return strings.Contains(src, hChannel) }

// begin starts with a message header or, when the prompt ended inside
// reasoning, in the body of an analysis message.
func (harmonyFormat) begin(p *OutputParser, inReasoning bool) bool {
	p.st = (*OutputParser).stepHarmonyHeader
	if inReasoning {
		p.st, p.hKind, p.trimLead = (*OutputParser).stepHarmonyBody, OutputReasoning, true
		p.reasoning = true
	}
	return true
}

// stepHarmonyHeader reads a Harmony message header up to <|message|>.
// Text that cannot open a header (anything but white space or a recipient,
// " to=...", before the first marker) is content up to the next marker. A
// header that is too long, or that an end marker closes before
// <|message|>, is malformed: its text becomes content. A header cut short
// by the end of the output is dropped.
func (p *OutputParser) stepHarmonyHeader() bool {
	j := strings.Index(p.buf, "<|")
	lead := p.buf
	switch {
	case j >= 0:
		lead = p.buf[:j]
	case !p.final:
		lead = strings.TrimSuffix(lead, "<") // "<|" may follow
	}
	if len(lead) > maxHeaderLead || !headerLead(lead, j >= 0 || p.final) || j < 0 && p.final && p.buf != "" {
		p.st, p.hKind = (*OutputParser).stepHarmonyBody, OutputContent
		return true
	}
	if j < 0 {
		return false
	}
	// The header's length is bounded, so it is searched from its start
	// each time rather than gathered.
	window := p.buf[:min(len(p.buf), maxHeader+len(hMessage))]
	i, m := firstMarker(window, hMessage, hEnd, hCall, hReturn)
	switch {
	case i > maxHeader || i < 0 && len(p.buf) > maxHeader+len(hMessage):
		n := maxHeader + 1
		p.text(OutputContent, p.buf[:n])
		p.buf = p.buf[n:]
		p.st, p.hKind = (*OutputParser).stepHarmonyBody, OutputContent
		return true
	case i < 0 && p.final:
		// A header cut short: nothing of it is text.
		p.buf = ""
		return false
	case i < 0:
		return false
	case m != hMessage:
		// An end marker before <|message|>: the text was not a header.
		p.text(OutputContent, p.buf[:i])
		p.ws = p.ws[:0]
		p.buf = p.buf[i+len(m):]
		p.trimLead = true
		return true
	}
	channel, recipient := parseHarmonyHeader(p.buf[:i])
	p.buf = p.buf[i+len(hMessage):]
	p.acc = p.acc[:0]
	p.st, p.trimLead = (*OutputParser).stepHarmonyBody, true
	p.name = ""
	p.hKind = OutputContent
	if channel == harmonyAnalysis {
		p.hKind = OutputReasoning
	}
	p.hText = p.hKind
	if name, ok := strings.CutPrefix(recipient, harmonyFunctions); ok && p.tools && validName(name) {
		p.hKind, p.name = OutputToolCall, name
	}
	p.reasoning = p.hKind == OutputReasoning
	return true
}

// headerLead reports whether text before the first marker may belong to a
// Harmony header: white space, then nothing or a recipient ("to=...").
// Unless complete, more text may follow it.
func headerLead(s string, complete bool) bool {
	t := strings.TrimLeft(s, wsChars)
	return t == "" || strings.HasPrefix(t, "to=") || !complete && strings.HasPrefix("to=", t)
}

// stepHarmonyBody streams a message body up to its end.
func (p *OutputParser) stepHarmonyBody() bool {
	i, m := firstMarker(p.buf, harmonyEnds...)
	if i < 0 && !p.final {
		if p.hKind == OutputToolCall {
			p.hold(harmonyEnds...)
			return false
		}
		return p.release(p.hKind, harmonyEnds...)
	}
	if i < 0 {
		i = len(p.buf)
	}
	body := p.buf[:i]
	rest := p.buf[i:]
	if m == hEnd || m == hCall || m == hReturn {
		rest = rest[len(m):]
	}
	if p.hKind == OutputToolCall {
		body = string(p.acc) + body
		p.acc = p.acc[:0]
		if args, ok := objectArgs([]byte(body)); ok {
			p.call(ParsedToolCall{Name: p.name, Arguments: args})
		} else {
			p.text(p.hText, body)
		}
	} else {
		p.text(p.hKind, body)
	}
	p.ws = p.ws[:0]
	p.buf = rest
	p.st, p.trimLead, p.reasoning = (*OutputParser).stepHarmonyHeader, true, false
	return i > 0 || m != ""
}

// parseHarmonyHeader returns the channel and the recipient named in a
// Harmony header such as "<|start|>assistant<|channel|>commentary
// to=functions.get_weather <|constrain|>json".
func parseHarmonyHeader(h string) (channel, recipient string) {
	if i := strings.Index(h, hChannel); i >= 0 {
		channel = headerWord(h[i+len(hChannel):])
	}
	for s := h; ; {
		i := strings.Index(s, "to=")
		if i < 0 {
			break
		}
		if i == 0 || strings.IndexByte(" \t\n>", s[i-1]) >= 0 {
			recipient = headerWord(s[i+3:])
			break
		}
		s = s[i+3:]
	}
	return channel, recipient
}

// headerWord returns s up to white space or the next marker.
func headerWord(s string) string {
	end := len(s)
	if i := strings.IndexAny(s, wsChars); i >= 0 {
		end = i
	}
	if i := strings.Index(s[:end], "<|"); i >= 0 {
		end = i
	}
	return s[:end]
}

// markerFree returns the length of s without its longest suffix that is a
