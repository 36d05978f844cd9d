package chat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"
)

// Options configure a Template.
type Options struct {
	// Name names the template in errors, for example "default" or
	// "tool_use".
	Name string

	// SpecialTokens are template variables holding the tokenizer's special
	// tokens, keyed as Hugging Face names them: "bos_token", "eos_token",
	// "unk_token", "pad_token", … Templates such as Llama 3's and Gemma's
	// read bos_token. Kwargs of the same name override them.
	SpecialTokens map[string]string

	// Now returns the time strftime_now formats. Nil means time.Now.
	Now func() time.Time
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	name    string
	src     string
	tmpl    *jinja.Template
	special map[string]string
	now     func() time.Time

	strftimeNow jinja.Value // the strftime_now function, bound to now

	// traced is the instrumented copy used to locate runtime errors,
	// compiled on the first error.
	tracedOnce sync.Once
	traced     *jinja.Template
}

// Error reports a template that failed to parse or to render.
type Error struct {
	// Name is the template's name (Options.Name); it may be empty.
	Name string
	// Line is the 1-based line of the template source where it failed, or
	// 0 when it could not be told.
	Line int
	// Err is the underlying error. A template's raise_exception(msg)
	// surfaces here as a *RaiseError.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("chat template")
	if e.Name != "" {
		b.WriteString(" ")
		b.WriteString(strconv.Quote(e.Name))
	}
	if e.Line > 0 {
		b.WriteString(", line ")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("failed")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// RaiseError is the error a template raises by calling
// raise_exception(msg), typically to reject a conversation it cannot render
// ("Conversation roles must alternate user/assistant/…"). A server may
// report it to the client as a bad request.
type RaiseError struct {
	Message string
}

func (e *RaiseError) Error() string { return e.Message }

// Parse compiles a chat template from its source, such as the chat_template
// of a tokenizer_config.json or the tokenizer.chat_template of a GGUF file.
//
// Templates run as in Hugging Face transformers' apply_chat_template: with
// trim_blocks and lstrip_blocks, the loop controls break and continue,
// raise_exception(msg), strftime_now(format), and a tojson filter that
// writes what Python's json.dumps writes (see the package documentation for
// the known differences of the engine). Parse errors are *Error values.
func Parse(src string, opts Options) (*Template, error) {
	t := &Template{
		name:    opts.Name,
		src:     src,
		special: opts.SpecialTokens,
		now:     opts.Now,
	}
	if t.now == nil {
		t.now = time.Now
	}
	now := t.now
	t.strftimeNow = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now: want one format string")
		}
		return jinja.NewString(strftime(args[0].AsString(), now())), nil
	})
	prepared, ok := prepare(src, false)
	if !ok {
		// An unclosed tag: let the engine describe it.
		prepared = src
	}
	tmpl, err := compile(prepared)
	if err != nil {
		// Report the error as the engine gives it for the source as
		// written, whose lines and columns are the user's.
		_, err2 := compile(src)
		if err2 == nil {
			// Only the prepared source fails: a bug of this package.
			return nil, &Error{Name: t.name, Err: fmt.Errorf("preparing the template for the engine: %w", err)}
		}
		line := lineOf(err2.Error())
		if line == 0 {
			line = unclosedLine(src)
		}
		return nil, &Error{Name: t.name, Line: line, Err: err2}
	}
	t.tmpl = tmpl
	return t, nil
}

// Name returns the template's name (Options.Name).
func (t *Template) Name() string { return t.name }

// Source returns the template's source as given to Parse.
func (t *Template) Source() string { return t.src }

// Render renders the template with in. Errors in in itself (a malformed
// tool definition, an unsupported kwarg) are reported as such; errors the
// template raises are *Error values naming the line that failed.
func (t *Template) Render(in Input) (string, error) {
	if in.ContinueFinalMessage && in.AddGenerationPrompt {
		return "", errors.New("chat: ContinueFinalMessage and AddGenerationPrompt cannot both be set")
	}
	data, err := t.data(in)
	if err != nil {
		return "", err
	}
	out, err := execute(t.tmpl, data)
	if err != nil {
		return "", &Error{Name: t.name, Line: t.failedLine(in, err), Err: err}
	}
	if in.ContinueFinalMessage {
		return continueFinal(out, in.Messages)
	}
	return out, nil
}

// failedLine renders the instrumented copy of the template to find the line
// where rendering in failed with err. It returns 0 when the copy does not
// fail the same way.
func (t *Template) failedLine(in Input, err error) int {
	t.tracedOnce.Do(func() {
		if src, ok := prepare(t.src, true); ok {
			t.traced, _ = compile(src)
		}
	})
	if t.traced == nil {
		return 0
	}
	// Fresh data: the failed render may have changed the values it was
	// given (dict.update and list.append mutate in place).
	data, derr := t.data(in)
	if derr != nil {
		return 0
	}
	line := 0
	data[markName] = lineMarker(&line)
	if _, err2 := execute(t.traced, data); err2 == nil || err2.Error() != err.Error() {
		return 0
	}
	return line
}

// lineMarker returns the function the instrumented copy of a template calls
// before each expression: markName(n) stores n in *line and returns the
// identity function, which the copy applies to the expression.
func lineMarker(line *int) jinja.Value {
	return jinja.NewCallable(markName, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) > 0 && args[0].IsInt() {
			*line = int(args[0].AsInt())
		}
		return identity, nil
	})
}

// identity returns its first argument.
var identity = jinja.NewCallable("identity", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.None(), nil
	}
	return args[0], nil
})

// data builds the variables a render sees, as apply_chat_template does:
// the environment's functions, the special tokens, the kwargs (which may
// shadow both), then messages, tools, documents and add_generation_prompt.
func (t *Template) data(in Input) (map[string]jinja.Value, error) {
	data := make(map[string]jinja.Value, len(t.special)+len(in.Kwargs)+10)
	data["raise_exception"] = raiseException
	data["strftime_now"] = t.strftimeNow
	data["range"] = safeRange
	data[tojsonName] = tojson
	for k, v := range t.special {
		data[k] = jinja.NewString(v)
	}
	data["documents"] = jinja.None()
	for k, v := range in.Kwargs {
		switch k {
		case "messages", "tools", "add_generation_prompt":
			return nil, fmt.Errorf("chat: kwarg %q: set it through Input's field instead", k)
		case tojsonName, markName:
			return nil, fmt.Errorf("chat: kwarg %q: name reserved", k)
		}
		val, err := goValue(v)
		if err != nil {
			return nil, fmt.Errorf("chat: kwarg %q: %w", k, err)
		}
		data[k] = val
	}
	msgs := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		v, err := messageValue(m)
		if err != nil {
			return nil, fmt.Errorf("chat: message %d: %w", i, err)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)
	data["tools"] = jinja.None()
	if in.Tools != nil {
		tools := make([]jinja.Value, len(in.Tools))
		for i, raw := range in.Tools {
			v, err := jsonValue(raw)
			if err != nil {
				return nil, fmt.Errorf("chat: tool %d: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	}
	data["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	return data, nil
}

var (
	raiseException = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) == 0 {
			return jinja.Undefined(), &RaiseError{}
		}
		return jinja.Undefined(), &RaiseError{Message: pyStr(args[0])}
	})
	tojson    = jinja.NewCallable("tojson", tojsonFilter)
	safeRange = jinja.NewCallable("range", rangeFunc)
)

// maxRange is the most items range may produce, as in Jinja2's sandbox
// (which Hugging Face renders in).
const maxRange = 100000

// rangeFunc is Python's range(stop) / range(start, stop[, step]) with the
// sandbox's limit on its length.
func rangeFunc(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(kwargs) > 0 || len(args) == 0 || len(args) > 3 {
		return jinja.Undefined(), fmt.Errorf("range: want 1 to 3 integer arguments, got %d", len(args)+len(kwargs))
	}
	n := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			n[i] = a.AsInt()
		case a.IsBool() && a.AsBool():
			n[i] = 1
		case a.IsBool():
			n[i] = 0
		default:
			return jinja.Undefined(), fmt.Errorf("range: %s object cannot be interpreted as an integer", kindName(a))
		}
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(n) > 1 {
		start, stop = n[0], n[1]
	}
	if len(n) > 2 {
		step = n[2]
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	// Unsigned arithmetic: the distance between two int64s can exceed
	// math.MaxInt64.
	var count uint64
	switch {
	case step > 0 && start < stop:
		count = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		count = (uint64(start)-uint64(stop)-1)/(-uint64(step)) + 1
	}
	if count > maxRange {
		return jinja.Undefined(), fmt.Errorf("range: %d items is more than the sandbox allows (%d)", count, maxRange)
	}
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

// pyStr returns str(v) for a template value.
func pyStr(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// continueFinal cuts out after the last occurrence of the final message's
// text, as apply_chat_template(continue_final_message=True) does.
func continueFinal(out string, msgs []Message) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: ContinueFinalMessage set without messages")
	}
	c := msgs[len(msgs)-1].Content
	var final string
	switch {
	case c.IsText():
		final = c.Text()
	case c.IsParts():
		found := false
		for i := len(c.parts) - 1; i >= 0 && !found; i-- {
			if p := c.parts[i]; p.Type == "text" || p.Text != "" {
				final, found = p.Text, true
			}
		}
		if !found {
			return "", errors.New("chat: ContinueFinalMessage set but the final message has no text")
		}
	default:
		return "", errors.New("chat: ContinueFinalMessage set but the final message has no content")
	}
	final = strings.TrimSpace(final)
	i := strings.LastIndex(out, final)
	if i < 0 {
		return "", errors.New("chat: ContinueFinalMessage set but the final message does not appear in the render")
	}
	return out[:i+len(final)], nil
}

// messageValue converts a message to the dict a template reads.
func messageValue(m Message) (jinja.Value, error) {
	v, d := newDict(2 + len(m.Extra) + 4)
	d.Set("role", jinja.NewString(m.Role))
	content, err := contentValue(m.Content)
	if err != nil {
		return jinja.Undefined(), err
	}
	d.Set("content", content)
	if m.ReasoningContent != "" {
		d.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			c, err := toolCallValue(tc)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("tool call %d: %w", i, err)
			}
			calls[i] = c
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	if err := setFields(d, m.Extra); err != nil {
		return jinja.Undefined(), err
	}
	return v, nil
}

func contentValue(c Content) (jinja.Value, error) {
	switch c.kind {
	case contentText:
		return jinja.NewString(c.text), nil
	case contentParts:
		parts := make([]jinja.Value, len(c.parts))
		for i, p := range c.parts {
			v, d := newDict(2 + len(p.Extra))
			d.Set("type", jinja.NewString(p.Type))
			if p.Type == "text" || p.Text != "" {
				d.Set("text", jinja.NewString(p.Text))
			}
			if err := setFields(d, p.Extra); err != nil {
				return jinja.Undefined(), fmt.Errorf("content part %d: %w", i, err)
			}
			parts[i] = v
		}
		return jinja.NewList(parts), nil
	}
	return jinja.None(), nil
}

func toolCallValue(tc ToolCall) (jinja.Value, error) {
	fn, fnd := newDict(2)
	fnd.Set("name", jinja.NewString(tc.Name))
	args, _ := newDict(0)
	if len(tc.Arguments) > 0 {
		var err error
		if args, err = jsonValue(tc.Arguments); err != nil {
			return jinja.Undefined(), fmt.Errorf("arguments: %w", err)
		}
	}
	fnd.Set("arguments", args)

	v, d := newDict(3 + len(tc.Extra))
	if tc.ID != "" {
		d.Set("id", jinja.NewString(tc.ID))
	}
	d.Set("type", jinja.NewString("function"))
	d.Set("function", fn)
	if err := setFields(d, tc.Extra); err != nil {
		return jinja.Undefined(), err
	}
	return v, nil
}

// setFields adds extra keys to a dict.
func setFields(d *jinja.Dict, fields []Field) error {
	for _, f := range fields {
		v, err := jsonValue(f.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Key, err)
		}
		d.Set(f.Key, v)
	}
	return nil
}

// compile compiles template source, turning an engine panic into an error.
func compile(src string) (tmpl *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tmpl, err = nil, fmt.Errorf("template engine panic: %v", r)
		}
	}()
	return jinja.Compile(src)
}

// execute renders a compiled template, turning an engine panic into an
// error.
func execute(tmpl *jinja.Template, data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("template engine panic: %v", r)
		}
	}()
	return tmpl.RenderValues(data)
}
