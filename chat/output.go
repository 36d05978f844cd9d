package chat

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// OutputFormat describes how a model marks reasoning and tool calls in its
// output.
type OutputFormat struct {
	// ThinkStart and ThinkEnd enclose the model's reasoning, such as
	// "<think>" and "</think>". An empty ThinkEnd means the model does not
	// reason (outside the Harmony format, which has its own channels).
	ThinkStart, ThinkEnd string
	// Tools is how tool calls are written.
	Tools ToolFormat
}

// ToolFormat names a way of writing tool calls in a model's output.
type ToolFormat string

// Tool-call formats.
const (
	// ToolsNone: the model does not call tools; all output is text.
	ToolsNone ToolFormat = ""
	// ToolsHermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
	// anywhere in the reply (Qwen 2.5/3, Hermes). The body may also be
	// <function=NAME><parameter=KEY>VALUE</parameter></function> (Qwen 3.5,
	// Nemotron) or NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>
	// (GLM).
	ToolsHermes ToolFormat = "hermes"
	// ToolsLlama3: {"name": ..., "parameters": {...}} as the reply,
	// optionally after <|python_tag|>; several calls may follow each other,
	// separated by white space or ";".
	ToolsLlama3 ToolFormat = "llama3"
	// ToolsMistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...],
	// or [TOOL_CALLS]NAME[ARGS]{...} (optionally NAME[CALL_ID]ID[ARGS]{...}),
	// once per call.
	ToolsMistral ToolFormat = "mistral"
	// ToolsGemma: the reply is a JSON object {"name": ..., "parameters":
	// {...}} (or an array of them), or a ```tool_code, ```tool_call or
	// ```json fenced block holding such JSON or Python-style calls
	// (name(key=value, ...), one per line or as a [list]), or such a
	// [list] unfenced. Gemma 3 templates render no tools themselves; these
	// are the forms Gemma's function-calling guide asks the model for.
	ToolsGemma ToolFormat = "gemma"
	// ToolsHarmony: gpt-oss's channels. <|channel|>analysis<|message|>...<|end|>
	// is reasoning, <|channel|>final<|message|>... content, and
	// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
	// a tool call (the recipient may also come before <|channel|>).
	ToolsHarmony ToolFormat = "harmony"
)

// DetectOutputFormat infers a model's output format from its template's
// source: the markers the template renders for reasoning ("<think>",
// "[THINK]") and for tool calls ("<|channel|>", "[TOOL_CALLS]",
// "<tool_call>", "<|python_tag|>" or a Llama 3 prompt asking for
// "parameters", a Gemma turn marker). A nil template gives the zero format.
func DetectOutputFormat(t *Template) OutputFormat {
	if t == nil {
		return OutputFormat{}
	}
	return detectOutputFormat(t.Source())
}

func detectOutputFormat(src string) OutputFormat {
	var f OutputFormat
	switch {
	case strings.Contains(src, "<|channel|>"):
		// Harmony reasons through its channels, not with markers.
		return OutputFormat{Tools: ToolsHarmony}
	case strings.Contains(src, "[TOOL_CALLS]"):
		f.Tools = ToolsMistral
	case strings.Contains(src, "<tool_call>"):
		f.Tools = ToolsHermes
	case strings.Contains(src, "<|python_tag|>"),
		strings.Contains(src, "<|start_header_id|>") && strings.Contains(src, `"parameters"`):
		f.Tools = ToolsLlama3
	case strings.Contains(src, "<start_of_turn>"):
		f.Tools = ToolsGemma
	}
	switch {
	case strings.Contains(src, "<think>") || strings.Contains(src, "</think>"):
		f.ThinkStart, f.ThinkEnd = "<think>", "</think>"
	case strings.Contains(src, "[THINK]") || strings.Contains(src, "[/THINK]"):
		f.ThinkStart, f.ThinkEnd = "[THINK]", "[/THINK]"
	}
	return f
}

// InReasoning reports whether a rendered prompt ends inside an open
// reasoning block: it ends with ThinkStart, possibly followed by white
// space, as Qwen 3.5's or DeepSeek R1's generation prompts do. A server
// passes the result to NewParser.
func (f OutputFormat) InReasoning(prompt string) bool {
	if f.ThinkStart == "" || f.ThinkEnd == "" || f.Tools == ToolsHarmony {
		return false
	}
	return strings.HasSuffix(strings.TrimRight(prompt, wsChars), f.ThinkStart)
}

// OutputKind tells the parts of a model's output apart.
type OutputKind int

// Output kinds.
const (
	OutputContent   OutputKind = iota // the reply's text
	OutputReasoning                   // reasoning text
	OutputToolCall                    // a complete tool call
)

func (k OutputKind) String() string {
	switch k {
	case OutputContent:
		return "content"
	case OutputReasoning:
		return "reasoning"
	case OutputToolCall:
		return "tool_call"
	}
	return "OutputKind(" + strconv.Itoa(int(k)) + ")"
}

// OutputEvent is one piece of parsed output.
type OutputEvent struct {
	Kind OutputKind
	// Text is a delta of content or reasoning.
	Text string
	// Call is the complete call, for OutputToolCall.
	Call *ParsedToolCall
}

// OutputParser splits the text a model generates into reasoning, content
// and tool calls as it streams. It holds back only what could still be the
// start of a marker (or of a tool call, where a whole reply may be one) and
// never lets markers or reasoning into content. Reasoning is trimmed of the
// white space around it, and content of the white space after the end of
// reasoning and around tool calls. A tool call that is malformed or left
// unterminated becomes content, as written.
//
// Events depend only on the text, not on how it is split into deltas: the
// concatenated texts of each kind, and the calls, are the same whichever
// way it is fed. Work per delta is proportional to its length (text held
// back is not scanned again). An OutputParser is not safe for concurrent
// use.
type OutputParser struct {
	f     OutputFormat
	tools bool

	st       pstate
	buf      string // text received and not yet consumed; kept short
	final    bool   // Finish was called: nothing more will come
	finished bool
	out      []OutputEvent

	ws       []byte // trailing white space held back from the text emitted last
	wsKind   OutputKind
	trimLead bool // drop white space at the start of the next text
	reply    bool // at the start of a reply (Llama 3, Gemma: a call may begin here)
	sepOK    bool // ';' may separate calls here (Llama 3)

	// The tool-call block (or Harmony header or call) being read.
	raw     string // its opening text, consumed
	preWS   string // white space held back before it
	acc     []byte // its text consumed from buf so far
	block   blockKind
	scan    valueScanner
	checked bool // stepValue: the start of the value was found plausible
	name    string

	// Harmony.
	hKind OutputKind // what the message body is
	hText OutputKind // what a call's body becomes when it is not one
}

// pstate is the parser's state.
type pstate uint8

const (
	sStart         pstate = iota // before anything: reasoning may open
	sReasoning                   // inside reasoning
	sContent                     // content, watching for tool calls
	sBlock                       // a tool-call block with an end marker (Hermes, Gemma fence)
	sMistral                     // after [TOOL_CALLS]
	sMistralName                 // after [TOOL_CALLS]NAME, before [ARGS]
	sValue                       // a bracketed value that may be tool calls
	sHarmonyHeader               // a Harmony message header, up to <|message|>
	sHarmonyBody                 // a Harmony message body
)

// blockKind tells what a block of tool calls holds.
type blockKind uint8

const (
	bHermes     blockKind = iota // <tool_call>...</tool_call>
	bFence                       // ```tool_code ... ```
	bJSON                        // Llama 3 / Gemma: JSON (or Python-style) calls
	bMistralArr                  // [TOOL_CALLS][...]
	bMistralArg                  // [TOOL_CALLS]NAME[ARGS]{...}
)

// Markers.
const (
	hermesOpen   = "<tool_call>"
	hermesClose  = "</tool_call>"
	pythonTag    = "<|python_tag|>"
	mistralCalls = "[TOOL_CALLS]"
	mistralArgs  = "[ARGS]"
	mistralID    = "[CALL_ID]"
	fenceClose   = "```"

	hMessage = "<|message|>"
	hChannel = "<|channel|>"
	hStart   = "<|start|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"
)

// gemmaFences open a fenced block of tool calls in the Gemma format.
var gemmaFences = []string{"```tool_code", "```tool_call", "```json"}

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

// maxMistralName bounds what may come between [TOOL_CALLS] and [ARGS].
const maxMistralName = 512

const wsChars = " \t\r\n"

// NewParser returns a parser for one reply. inReasoning says that the
// prompt ended inside a reasoning block (see InReasoning), so the output
// starts as reasoning. Tool calls are recognised only when toolsOffered;
// otherwise all output is content or reasoning.
func (f OutputFormat) NewParser(inReasoning, toolsOffered bool) *OutputParser {
	p := &OutputParser{f: f, tools: toolsOffered && f.Tools != ToolsNone, reply: true}
	switch {
	case f.Tools == ToolsHarmony:
		p.st = sHarmonyHeader
		if inReasoning {
			p.st, p.hKind, p.trimLead = sHarmonyBody, OutputReasoning, true
		}
	case inReasoning && f.ThinkEnd != "":
		p.st, p.trimLead = sReasoning, true
	default:
		p.st = sStart
	}
	return p
}

// Feed parses the next piece of output and returns the events it completes.
// Feed after Finish returns nothing.
func (p *OutputParser) Feed(delta string) []OutputEvent {
	if p.finished {
		return nil
	}
	p.buf += delta
	p.run()
	return p.take()
}

// Finish ends the output: it releases text held back, turns an
// unterminated or malformed tool call into content, and returns the last
// events. Later calls return nothing.
func (p *OutputParser) Finish() []OutputEvent {
	if p.finished {
		return nil
	}
	p.final = true
	p.run()
	if len(p.ws) > 0 && p.wsKind == OutputContent {
		p.emit(OutputContent, string(p.ws))
	}
	p.ws = nil
	p.finished = true
	return p.take()
}

// take returns the events gathered and resets the list.
func (p *OutputParser) take() []OutputEvent {
	out := p.out
	p.out = nil
	return out
}

// emit adds an event, merging text with the previous event of its kind.
func (p *OutputParser) emit(kind OutputKind, s string) {
	if s == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].Kind == kind && kind != OutputToolCall {
		p.out[n-1].Text += s
		return
	}
	p.out = append(p.out, OutputEvent{Kind: kind, Text: s})
}

// text emits s as content or reasoning, dropping leading white space when
// trimLead is set and holding back trailing white space until more text of
// the same kind follows (white space held back from another kind is
// dropped).
func (p *OutputParser) text(kind OutputKind, s string) {
	if p.trimLead {
		s = strings.TrimLeft(s, wsChars)
		if s == "" {
			return
		}
		p.trimLead = false
	}
	if s == "" {
		return
	}
	if p.wsKind != kind {
		p.ws = p.ws[:0]
	}
	body := strings.TrimRight(s, wsChars)
	if body != "" {
		if len(p.ws) > 0 {
			p.emit(kind, string(p.ws))
			p.ws = p.ws[:0]
		}
		p.emit(kind, body)
	}
	p.ws = append(p.ws, s[len(body):]...)
	p.wsKind = kind
}

// call emits a tool call, dropping white space held back before it.
func (p *OutputParser) call(c ParsedToolCall) {
	p.ws = p.ws[:0]
	p.out = append(p.out, OutputEvent{Kind: OutputToolCall, Call: &c})
}

// run steps the state machine until it needs more input.
func (p *OutputParser) run() {
	for p.step() {
	}
}

// step makes one move and reports whether another may follow.
func (p *OutputParser) step() bool {
	switch p.st {
	case sStart:
		return p.stepStart()
	case sReasoning:
		return p.stepReasoning()
	case sContent:
		return p.stepContent()
	case sBlock:
		return p.stepBlock()
	case sMistral:
		return p.stepMistral()
	case sMistralName:
		return p.stepMistralName()
	case sValue:
		return p.stepValue()
	case sHarmonyHeader:
		return p.stepHarmonyHeader()
	case sHarmonyBody:
		return p.stepHarmonyBody()
	}
	return false
}

// stepStart waits to see whether the output opens with reasoning. White
// space before it is held back as content.
func (p *OutputParser) stepStart() bool {
	start := p.f.ThinkStart
	if start == "" || p.f.ThinkEnd == "" {
		p.st = sContent
		return true
	}
	t := strings.TrimLeft(p.buf, wsChars)
	p.text(OutputContent, p.buf[:len(p.buf)-len(t)])
	p.buf = t
	if strings.HasPrefix(t, start) {
		p.buf = t[len(start):]
		p.ws = p.ws[:0]
		p.st, p.trimLead = sReasoning, true
		return true
	}
	if !p.final && strings.HasPrefix(start, t) {
		return false
	}
	p.st = sContent
	return true
}

// stepReasoning streams reasoning up to ThinkEnd.
func (p *OutputParser) stepReasoning() bool {
	end := p.f.ThinkEnd
	if i := strings.Index(p.buf, end); i >= 0 {
		p.text(OutputReasoning, p.buf[:i])
		p.ws = p.ws[:0]
		p.buf = p.buf[i+len(end):]
		p.st, p.trimLead, p.reply = sContent, true, true
		return true
	}
	return p.release(OutputReasoning, end)
}

// release emits the part of buf that cannot be the start of one of the
// markers (nor split a character) as text of the given kind.
func (p *OutputParser) release(kind OutputKind, markers ...string) bool {
	n := len(p.buf)
	if !p.final {
		n = wholeRunes(p.buf, markerFree(p.buf, markers))
	}
	if n == 0 {
		return false
	}
	p.text(kind, p.buf[:n])
	p.buf = p.buf[n:]
	return true
}

// hold moves the part of buf that cannot be the start of one of the
// markers into acc.
func (p *OutputParser) hold(markers ...string) {
	n := markerFree(p.buf, markers)
	p.acc = append(p.acc, p.buf[:n]...)
	p.buf = p.buf[n:]
}

// stepContent streams content, watching for the start of tool calls.
func (p *OutputParser) stepContent() bool {
	if !p.tools {
		return p.release(OutputContent)
	}
	switch p.f.Tools {
	case ToolsHermes:
		return p.contentUntil(hermesOpen, func() { p.block, p.st = bHermes, sBlock })
	case ToolsMistral:
		return p.contentUntil(mistralCalls, func() { p.st = sMistral })
	case ToolsLlama3, ToolsGemma:
		if p.reply {
			if moved, decided := p.replyStart(); !decided {
				return moved
			}
		}
	}
	return p.release(OutputContent)
}

// contentUntil streams content up to marker, then opens a block with it.
func (p *OutputParser) contentUntil(marker string, open func()) bool {
	i := strings.Index(p.buf, marker)
	if i < 0 {
		return p.release(OutputContent, marker)
	}
	p.text(OutputContent, p.buf[:i])
	p.openBlock(marker)
	p.buf = p.buf[i+len(marker):]
	open()
	return true
}

// openBlock starts reading a tool-call block whose opening text is raw.
func (p *OutputParser) openBlock(raw string) {
	p.preWS = ""
	if p.wsKind == OutputContent {
		p.preWS = string(p.ws)
	}
	p.ws = p.ws[:0]
	p.raw = raw
	p.acc = p.acc[:0]
	p.scan = valueScanner{}
	p.checked = false
}

// replyStart looks for a tool call at the start of a reply (Llama 3,
// Gemma). decided is false while the text could still open one, or when one
// was opened (moved reports progress); true means the reply is text.
func (p *OutputParser) replyStart() (moved, decided bool) {
	cut := wsChars
	if p.sepOK {
		cut += ";"
	}
	t := strings.TrimLeft(p.buf, cut)
	if !p.sepOK {
		p.text(OutputContent, p.buf[:len(p.buf)-len(t)])
	}
	// Else white space and separators between calls: dropped.
	p.buf = t
	if t == "" {
		if p.final {
			p.reply, p.sepOK = false, false
			return true, false
		}
		return false, false
	}
	if p.f.Tools == ToolsLlama3 && strings.HasPrefix(t, pythonTag) {
		p.openBlock(pythonTag)
		p.buf = t[len(pythonTag):]
		p.block, p.st = bJSON, sValue
		return true, false
	}
	if p.f.Tools == ToolsGemma {
		for _, f := range gemmaFences {
			if strings.HasPrefix(t, f) {
				p.openBlock(f)
				p.buf = t[len(f):]
				p.block, p.st = bFence, sBlock
				return true, false
			}
		}
	}
	if t[0] == '{' || t[0] == '[' && p.f.Tools == ToolsGemma {
		p.openBlock("")
		p.block, p.st = bJSON, sValue
		return true, false
	}
	if !p.final {
		if p.f.Tools == ToolsLlama3 && strings.HasPrefix(pythonTag, t) {
			return false, false
		}
		if p.f.Tools == ToolsGemma {
			for _, f := range gemmaFences {
				if strings.HasPrefix(f, t) {
					return false, false
				}
			}
		}
	}
	p.reply, p.sepOK = false, false
	return true, true
}

// degrade gives up on the block being read: its opening text (and the
// white space before it) becomes content, and what followed is read again
// as content.
func (p *OutputParser) degrade() bool {
	p.st = sContent
	p.reply, p.sepOK = false, false
	p.text(OutputContent, p.preWS+p.raw)
	p.buf = string(p.acc) + p.buf
	p.preWS, p.raw, p.acc = "", "", p.acc[:0]
	return true
}

// finishCalls emits the calls a block held and consumes n bytes of buf.
func (p *OutputParser) finishCalls(calls []ParsedToolCall, n int) bool {
	for _, c := range calls {
		p.call(c)
	}
	p.buf = p.buf[n:]
	p.preWS, p.raw, p.acc = "", "", p.acc[:0]
	p.st, p.trimLead = sContent, true
	p.reply = p.f.Tools == ToolsLlama3 || p.f.Tools == ToolsGemma
	p.sepOK = p.f.Tools == ToolsLlama3
	return true
}

// stepBlock waits for the end marker of a Hermes block or a Gemma fence.
func (p *OutputParser) stepBlock() bool {
	end := hermesClose
	if p.block == bFence {
		end = fenceClose
	}
	i := strings.Index(p.buf, end)
	if i < 0 {
		if p.final {
			return p.degrade()
		}
		p.hold(end)
		return false
	}
	body := string(p.acc) + p.buf[:i]
	var calls []ParsedToolCall
	var ok bool
	if p.block == bFence {
		calls, ok = parseGemmaCalls(body)
	} else {
		calls, ok = parseHermesBody(body)
	}
	if !ok {
		return p.degrade()
	}
	return p.finishCalls(calls, i+len(end))
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
		p.block, p.st = bMistralArr, sValue
		return true
	}
	p.st = sMistralName
	return true
}

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
	p.block, p.st = bMistralArg, sValue
	p.name = name
	return true
}

// stepValue reads a bracketed value (JSON, or Python-style calls for
// Gemma) to its end and parses it as tool calls.
func (p *OutputParser) stepValue() bool {
	if !p.scan.started {
		t := strings.TrimLeft(p.buf, wsChars)
		p.raw += p.buf[:len(p.buf)-len(t)]
		p.buf = t
		if t == "" {
			if p.final {
				return p.degrade()
			}
			return false
		}
		if t[0] != '{' && t[0] != '[' {
			return p.degrade()
		}
		p.scan.started = true
	}
	if p.block == bJSON && !p.checked {
		// A reply that merely starts with a bracket is text: look at
		// what follows it.
		t := strings.TrimLeft(p.buf[1:], wsChars)
		if t == "" {
			if p.final {
				return p.degrade()
			}
			return false
		}
		if !plausibleStart(p.buf[0], t[0], p.f.Tools == ToolsGemma) {
			return p.degrade()
		}
		p.checked = true
	}
	end, bad := p.scan.advance(p.buf)
	if bad {
		return p.degrade()
	}
	if end < 0 {
		if p.final {
			return p.degrade()
		}
		p.acc = append(p.acc, p.buf...)
		p.buf = ""
		return false
	}
	val := string(p.acc) + p.buf[:end]
	var calls []ParsedToolCall
	ok := false
	switch p.block {
	case bJSON:
		calls, ok = parseJSONCalls(val, false)
		if !ok && p.f.Tools == ToolsGemma && val[0] == '[' {
			calls, ok = parsePythonCalls(val)
		}
	case bMistralArr:
		calls, ok = parseJSONCalls(val, true)
	case bMistralArg:
		if args, aok := objectArgs([]byte(val)); aok {
			calls, ok = []ParsedToolCall{{Name: p.name, Arguments: args}}, true
		}
	}
	if !ok {
		return p.degrade()
	}
	return p.finishCalls(calls, end)
}

// plausibleStart reports whether a value opening with the bracket open and
// going on with c may be tool calls: an object must go on with a key (or
// close), an array with an object (or, for Gemma, a Python-style call).
func plausibleStart(open, c byte, python bool) bool {
	if open == '{' {
		return c == '"' || c == '}'
	}
	return c == '{' || c == ']' || python && (c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
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
		p.st, p.hKind = sHarmonyBody, OutputContent
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
		p.st, p.hKind = sHarmonyBody, OutputContent
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
	p.st, p.trimLead = sHarmonyBody, true
	p.name = ""
	p.hKind = OutputContent
	if channel == "analysis" {
		p.hKind = OutputReasoning
	}
	p.hText = p.hKind
	if name, ok := strings.CutPrefix(recipient, "functions."); ok && p.tools && validName(name) {
		p.hKind, p.name = OutputToolCall, name
	}
	return true
}

// headerLead reports whether text before the first marker may belong to a
// Harmony header: white space, then nothing or a recipient ("to=...").
// Unless complete, more text may follow it.
func headerLead(s string, complete bool) bool {
	t := strings.TrimLeft(s, wsChars)
	return t == "" || strings.HasPrefix(t, "to=") || !complete && strings.HasPrefix("to=", t)
}

// firstMarker returns the offset of the first of the markers in s and
// which one it is, or -1.
func firstMarker(s string, markers ...string) (int, string) {
	i, m := -1, ""
	for _, mk := range markers {
		if j := strings.Index(s, mk); j >= 0 && (i < 0 || j < i) {
			i, m = j, mk
		}
	}
	return i, m
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
	p.st, p.trimLead = sHarmonyHeader, true
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
// proper prefix of one of the markers.
func markerFree(s string, markers []string) int {
	longest := 0
	for _, m := range markers {
		longest = max(longest, len(m))
	}
	for k := max(len(s)-longest+1, 0); k < len(s); k++ {
		for _, m := range markers {
			if len(s)-k < len(m) && strings.HasPrefix(m, s[k:]) {
				return k
			}
		}
	}
	return len(s)
}

// wholeRunes shortens n so that s[:n] does not end inside a character.
func wholeRunes(s string, n int) int {
	for k := n - 1; k >= 0 && k >= n-utf8.UTFMax; k-- {
		if utf8.RuneStart(s[k]) {
			if !utf8.FullRuneInString(s[k:n]) {
				return k
			}
			break
		}
	}
	return n
}

// valueScanner finds the end of a bracketed value ({...}, [...]) fed to it
// in pieces, skipping over strings ("..." and, for Python-style calls,
// '...'). It does not validate the value.
type valueScanner struct {
	stack   []byte // expected closing brackets
	quote   byte   // the quote of the string being read, or 0
	esc     bool
	started bool
}

// maxNesting bounds the brackets a tool-call value may nest.
const maxNesting = 128

// advance scans the next piece of the value and returns the offset in s
// just past its end (-1 while it is open); bad reports a closing bracket
// that does not match, or too deep a nesting.
func (v *valueScanner) advance(s string) (end int, bad bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if v.quote != 0 {
			switch {
			case v.esc:
				v.esc = false
			case c == '\\':
				v.esc = true
			case c == v.quote:
				v.quote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			v.quote = c
		case '{':
			v.stack = append(v.stack, '}')
		case '[':
			v.stack = append(v.stack, ']')
		case '(':
			v.stack = append(v.stack, ')')
		case '}', ']', ')':
			if len(v.stack) == 0 || v.stack[len(v.stack)-1] != c {
				return -1, true
			}
			v.stack = v.stack[:len(v.stack)-1]
			if len(v.stack) == 0 {
				return i + 1, false
			}
		}
		if len(v.stack) > maxNesting {
			return -1, true
		}
	}
	return -1, false
}
