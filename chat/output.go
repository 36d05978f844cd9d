package chat

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is the streaming parser the tool-call formats share: reasoning
// between markers, content, and the reading of a block or a bracketed
// value of calls; each format's file adds the steps of its own syntax.

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
	rc    *replyCalls // the format's calls that open a reply, while tools are offered

	st       pstate
	buf      string // text received and not yet consumed; kept short
	final    bool   // Finish was called: nothing more will come
	finished bool
	out      []OutputEvent

	ws       []byte // trailing white space held back from the text emitted last
	wsKind   OutputKind
	trimLead bool // drop white space at the start of the next text
	reply    bool // at the start of a reply (formats with rc: a call may begin here)
	sepOK    bool // rc.sep may separate calls here

	// The tool-call block (or message header or call) being read.
	raw     string // its opening text, consumed
	preWS   string // white space held back before it
	acc     []byte // its text consumed from buf so far
	end     string // stepBlock: the marker that closes it
	parse   func(string) ([]ParsedToolCall, bool)
	check   bool // stepValue: a reply that merely starts with a bracket may be text
	scan    valueScanner
	checked bool // stepValue: the start of the value was found plausible
	name    string

	// reasoning: the output is inside reasoning (after its start marker,
	// or a Harmony analysis header, and before its end).
	reasoning bool

	// Formats with channels.
	hKind OutputKind // what the message body is
	hText OutputKind // what a call's body becomes when it is not one
}

// pstate is the parser's state: the step it makes next, which reports
// whether another may follow.
type pstate func(*OutputParser) bool

// replyCalls describes tool calls that open a reply rather than follow a
// marker anywhere in it (Llama 3, Gemma): a JSON object, or a text that
// opens calls.
type replyCalls struct {
	// openers are texts that open calls at the start of a reply. After
	// one, the calls are a bracketed value, or with fence set a block up
	// to fenceClose that fenced reads.
	openers []string
	fence   bool
	fenced  func(string) ([]ParsedToolCall, bool)
	// value reads the calls of a bracketed value.
	value func(string) ([]ParsedToolCall, bool)
	// arrays: a reply may open with "[" as well as "{", and such a value
	// may be a list of Python-style calls.
	arrays bool
	// sep: ";" may separate calls.
	sep bool
}

// fenceClose ends a fenced block.
const fenceClose = "```"

const wsChars = " \t\r\n"

// NewParser returns a parser for one reply. inReasoning says that the
// prompt ended inside a reasoning block (see InReasoning), so the output
// starts as reasoning. Tool calls are recognised only when toolsOffered;
// otherwise all output is content or reasoning.
func (f OutputFormat) NewParser(inReasoning, toolsOffered bool) *OutputParser {
	p := &OutputParser{f: f, tools: toolsOffered && f.Tools != nil, reply: true}
	if p.tools {
		p.rc = f.Tools.reply()
	}
	switch {
	case f.Tools != nil && f.Tools.begin(p, inReasoning):
	case inReasoning && f.ThinkEnd != "":
		p.st, p.trimLead, p.reasoning = (*OutputParser).stepReasoning, true, true
	default:
		p.st = (*OutputParser).stepStart
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

// Reasoning reports whether the output read so far ends inside reasoning:
// after the start of reasoning (its marker, a Harmony analysis header, or
// the prompt's end, see NewParser) and before its end. A marker is seen
// once all of its text has come. Servers count reasoning tokens with it.
func (p *OutputParser) Reasoning() bool { return p.reasoning }

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
	for p.st(p) {
	}
}

// stepStart waits to see whether the output opens with reasoning. White
// space before it is held back as content.
func (p *OutputParser) stepStart() bool {
	start := p.f.ThinkStart
	if start == "" || p.f.ThinkEnd == "" {
		p.st = (*OutputParser).stepContent
		return true
	}
	t := strings.TrimLeft(p.buf, wsChars)
	p.text(OutputContent, p.buf[:len(p.buf)-len(t)])
	p.buf = t
	if strings.HasPrefix(t, start) {
		p.buf = t[len(start):]
		p.ws = p.ws[:0]
		p.st, p.trimLead, p.reasoning = (*OutputParser).stepReasoning, true, true
		return true
	}
	if !p.final && strings.HasPrefix(start, t) {
		return false
	}
	p.st = (*OutputParser).stepContent
	return true
}

// stepReasoning streams reasoning up to ThinkEnd.
func (p *OutputParser) stepReasoning() bool {
	end := p.f.ThinkEnd
	if i := strings.Index(p.buf, end); i >= 0 {
		p.text(OutputReasoning, p.buf[:i])
		p.ws = p.ws[:0]
		p.buf = p.buf[i+len(end):]
		p.st, p.trimLead, p.reply = (*OutputParser).stepContent, true, true
		p.reasoning = false
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

// stepContent streams content, watching, while tools are offered, for the
// start of the format's calls.
func (p *OutputParser) stepContent() bool {
	if !p.tools {
		return p.release(OutputContent)
	}
	return p.f.Tools.content(p)
}

// contentUntil streams content up to marker, then opens a block with it
// and goes on with next.
func (p *OutputParser) contentUntil(marker string, next pstate) bool {
	i := strings.Index(p.buf, marker)
	if i < 0 {
		return p.release(OutputContent, marker)
	}
	p.text(OutputContent, p.buf[:i])
	p.openBlock(marker)
	p.buf = p.buf[i+len(marker):]
	p.st = next
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

// readBlock goes on to read the block up to its end marker, then its body
// with parse.
func (p *OutputParser) readBlock(end string, parse func(string) ([]ParsedToolCall, bool)) {
	p.end, p.parse, p.st = end, parse, (*OutputParser).stepBlock
}

// readValue goes on to read a bracketed value, then its calls with parse.
// check says that the value opens a reply, which may be text that merely
// starts with a bracket.
func (p *OutputParser) readValue(parse func(string) ([]ParsedToolCall, bool), check bool) {
	p.parse, p.check, p.st = parse, check, (*OutputParser).stepValue
}

// replyContent is the content step of a format whose calls open a reply.
func (p *OutputParser) replyContent() bool {
	if p.reply {
		if moved, decided := p.replyStart(); !decided {
			return moved
		}
	}
	return p.release(OutputContent)
}

// replyStart looks for tool calls at the start of a reply (see
// replyCalls). decided is false while the text could still open them, or
// when they were opened (moved reports progress); true means the reply is
// text.
func (p *OutputParser) replyStart() (moved, decided bool) {
	rc := p.rc
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
	for _, o := range rc.openers {
		if strings.HasPrefix(t, o) {
			p.openBlock(o)
			p.buf = t[len(o):]
			if rc.fence {
				p.readBlock(fenceClose, rc.fenced)
			} else {
				p.readValue(rc.value, true)
			}
			return true, false
		}
	}
	if t[0] == '{' || t[0] == '[' && rc.arrays {
		p.openBlock("")
		p.readValue(rc.value, true)
		return true, false
	}
	if !p.final {
		for _, o := range rc.openers {
			if strings.HasPrefix(o, t) {
				return false, false
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
	p.st = (*OutputParser).stepContent
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
	p.st, p.trimLead = (*OutputParser).stepContent, true
	p.reply = p.rc != nil
	p.sepOK = p.rc != nil && p.rc.sep
	return true
}

// stepBlock waits for the end marker of a block of calls and reads them.
func (p *OutputParser) stepBlock() bool {
	i := strings.Index(p.buf, p.end)
	if i < 0 {
		if p.final {
			return p.degrade()
		}
		p.hold(p.end)
		return false
	}
	calls, ok := p.parse(string(p.acc) + p.buf[:i])
	if !ok {
		return p.degrade()
	}
	return p.finishCalls(calls, i+len(p.end))
}

// stepValue reads a bracketed value (JSON, or Python-style calls) to its
// end and parses it as tool calls.
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
	if p.check && !p.checked {
		// A reply that merely starts with a bracket is text: look at
		// what follows it.
		t := strings.TrimLeft(p.buf[1:], wsChars)
		if t == "" {
			if p.final {
				return p.degrade()
			}
			return false
		}
		if !plausibleStart(p.buf[0], t[0], p.rc.arrays) {
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
	calls, ok := p.parse(string(p.acc) + p.buf[:end])
	if !ok {
		return p.degrade()
	}
	return p.finishCalls(calls, end)
}

// plausibleStart reports whether a value opening with the bracket open and
// going on with c may be tool calls: an object must go on with a key (or
// close), an array with an object (or, where python, a Python-style call).
func plausibleStart(open, c byte, python bool) bool {
	if open == '{' {
		return c == '"' || c == '}'
	}
	return c == '{' || c == ']' || python && (c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
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
