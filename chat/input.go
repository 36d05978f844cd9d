package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Input is what a template renders: the conversation, the tools on offer,
// and the other variables a template reads. It corresponds to the arguments
// of Hugging Face's apply_chat_template.
type Input struct {
	// Messages is the conversation, oldest first.
	Messages []Message

	// Tools are the tool definitions on offer, each a JSON object in the
	// shape Hugging Face templates expect ({"type": "function", "function":
	// {"name": ..., "description": ..., "parameters": {...}}}). They are
	// kept as the client sent them, so their keys render in the client's
	// order. Nil renders tools as none.
	Tools []json.RawMessage

	// AddGenerationPrompt asks the template to end with the header that
	// opens an assistant turn.
	AddGenerationPrompt bool

	// ContinueFinalMessage cuts the render just after the content of the
	// last message (which must be text), with trailing whitespace removed,
	// so that the model continues that message (an assistant prefill). It
	// cannot be combined with AddGenerationPrompt.
	ContinueFinalMessage bool

	// Kwargs are further template variables, such as "enable_thinking" or
	// "documents". They override the template's special tokens (bos_token,
	// …) of the same name but may not use the names messages, tools or
	// add_generation_prompt. A value may be nil, a bool, a string, an
	// integer, a float, a json.Number, a json.RawMessage (decoded keeping
	// its key order), or a []any or map[string]any of those (map keys render
	// sorted; use json.RawMessage where order matters).
	Kwargs map[string]any
}

// ParseInput decodes an Input from a JSON object with the keys "messages",
// "tools" (an array of objects, or null), "add_generation_prompt" and
// "continue_final_message" (bools); every other key becomes a kwarg holding
// its raw JSON. Key order inside messages, tools and kwargs is kept.
func ParseInput(data []byte) (Input, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Input{}, fmt.Errorf("chat input: %w", err)
	}
	if raw == nil {
		return Input{}, errors.New("chat input: not a JSON object")
	}
	var in Input
	for key, val := range raw {
		var err error
		switch key {
		case "messages":
			err = json.Unmarshal(val, &in.Messages)
		case "tools":
			err = json.Unmarshal(val, &in.Tools)
			for i, t := range in.Tools {
				if err == nil && !isJSONObject(t) {
					err = fmt.Errorf("tool %d is not a JSON object", i)
				}
			}
		case "add_generation_prompt":
			err = json.Unmarshal(val, &in.AddGenerationPrompt)
		case "continue_final_message":
			err = json.Unmarshal(val, &in.ContinueFinalMessage)
		default:
			if in.Kwargs == nil {
				in.Kwargs = make(map[string]any)
			}
			in.Kwargs[key] = val
		}
		if err != nil {
			return Input{}, fmt.Errorf("chat input: %s: %w", key, err)
		}
	}
	return in, nil
}

// Message is one message of a conversation, in the shape Hugging Face chat
// templates read: a dict with the keys role and content, and, when set,
// reasoning_content, tool_calls, tool_call_id and name, followed by the
// Extra keys in order.
type Message struct {
	// Role is "system", "user", "assistant" or "tool" (or whatever else a
	// template knows).
	Role string

	// Content is the message's text, parts, or none.
	Content Content

	// ReasoningContent is the reasoning that preceded an assistant reply.
	// Rendered only when not empty.
	ReasoningContent string

	// ToolCalls are the calls an assistant message made. Rendered only when
	// not empty.
	ToolCalls []ToolCall

	// ToolCallID is the call a tool message answers. Rendered only when not
	// empty.
	ToolCallID string

	// Name is the tool that produced a tool message, or the name of a
	// participant. Rendered only when not empty.
	Name string

	// Extra are further keys of the message, rendered after the ones above
	// in the order given.
	Extra []Field
}

// Field is a key of a message, content part or tool call beyond the ones
// this package knows, with its value as JSON.
type Field struct {
	Key   string
	Value json.RawMessage
}

// ToolCall is one tool call made by an assistant message. It renders as
// {"id": ID, "type": "function", "function": {"name": Name, "arguments":
// Arguments}}, the id only when not empty.
type ToolCall struct {
	ID   string
	Name string

	// Arguments is the JSON of the call's arguments, normally an object,
	// whose keys render in the order given. (OpenAI clients send the
	// arguments as a string holding JSON: pass that string's text, not the
	// quoted string, to render them as an object.) Empty renders as {}.
	Arguments json.RawMessage

	// Extra are further keys of the call, rendered after the ones above.
	Extra []Field
}

// contentKind tells the forms of Content apart.
type contentKind uint8

const (
	contentNone contentKind = iota
	contentText
	contentParts
)

// Content is the content of a message: a string, a list of parts (for
// multimodal messages), or none. The zero Content is none; build the others
// with Text and Parts.
type Content struct {
	kind  contentKind
	text  string
	parts []Part
}

// Text returns content holding the string s.
func Text(s string) Content { return Content{kind: contentText, text: s} }

// Parts returns content holding a list of parts.
func Parts(parts ...Part) Content {
	if parts == nil {
		parts = []Part{}
	}
	return Content{kind: contentParts, parts: parts}
}

// IsNone reports whether c is none (JSON null).
func (c Content) IsNone() bool { return c.kind == contentNone }

// IsText reports whether c is a string.
func (c Content) IsText() bool { return c.kind == contentText }

// IsParts reports whether c is a list of parts.
func (c Content) IsParts() bool { return c.kind == contentParts }

// Text returns the string content, or, for a list of parts, the text of its
// "text" parts joined. It returns "" for none.
func (c Content) Text() string {
	if c.kind != contentParts {
		return c.text
	}
	var b bytes.Buffer
	for _, p := range c.parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Parts returns the parts of a list content, or nil.
func (c Content) Parts() []Part { return c.parts }

// Part is one element of a list content: {"type": Type, "text": Text}
// followed by the Extra keys. The text key is rendered when Type is "text"
// or Text is not empty.
type Part struct {
	Type  string
	Text  string
	Extra []Field
}

// UnmarshalJSON decodes a message in Hugging Face or OpenAI shape. Keys
// beyond the ones Message has fields for are kept in Extra, in order. A
// tool call's function may be wrapped ({"function": {"name", "arguments"}})
// or not ({"name", "arguments"}); a null value counts as absent.
func (m *Message) UnmarshalJSON(data []byte) error {
	fields, err := objectFields(data)
	if err != nil {
		return fmt.Errorf("message: %w", err)
	}
	*m = Message{}
	for _, f := range fields {
		var err error
		switch f.Key {
		case "role":
			err = json.Unmarshal(f.Value, &m.Role)
		case "content":
			err = json.Unmarshal(f.Value, &m.Content)
		case "reasoning_content":
			err = unmarshalOptional(f.Value, &m.ReasoningContent)
		case "tool_calls":
			err = unmarshalOptional(f.Value, &m.ToolCalls)
		case "tool_call_id":
			err = unmarshalOptional(f.Value, &m.ToolCallID)
		case "name":
			err = unmarshalOptional(f.Value, &m.Name)
		default:
			m.Extra = append(m.Extra, f)
		}
		if err != nil {
			return fmt.Errorf("message: %s: %w", f.Key, err)
		}
	}
	return nil
}

// UnmarshalJSON decodes content from a JSON string, array of parts, or null.
func (c *Content) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*c = Content{}
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*c = Text(s)
	case len(data) > 0 && data[0] == '[':
		var parts []Part
		if err := json.Unmarshal(data, &parts); err != nil {
			return err
		}
		*c = Parts(parts...)
	default:
		return errors.New("content must be a string, an array of parts or null")
	}
	return nil
}

// UnmarshalJSON decodes a content part, keeping unknown keys in Extra.
func (p *Part) UnmarshalJSON(data []byte) error {
	fields, err := objectFields(data)
	if err != nil {
		return fmt.Errorf("content part: %w", err)
	}
	*p = Part{}
	for _, f := range fields {
		var err error
		switch f.Key {
		case "type":
			err = json.Unmarshal(f.Value, &p.Type)
		case "text":
			err = unmarshalOptional(f.Value, &p.Text)
		default:
			p.Extra = append(p.Extra, f)
		}
		if err != nil {
			return fmt.Errorf("content part: %s: %w", f.Key, err)
		}
	}
	return nil
}

// UnmarshalJSON decodes a tool call, wrapped in "function" or not. The
// "type" key is dropped (a call always renders as type "function").
func (tc *ToolCall) UnmarshalJSON(data []byte) error {
	fields, err := objectFields(data)
	if err != nil {
		return fmt.Errorf("tool call: %w", err)
	}
	*tc = ToolCall{}
	for _, f := range fields {
		var err error
		switch f.Key {
		case "id":
			err = unmarshalOptional(f.Value, &tc.ID)
		case "type":
			var typ string
			if err = unmarshalOptional(f.Value, &typ); err == nil && typ != "" && typ != "function" {
				err = fmt.Errorf("unsupported type %q", typ)
			}
		case "function":
			var fn []Field
			if fn, err = objectFields(f.Value); err != nil {
				break
			}
			for _, ff := range fn {
				switch ff.Key {
				case "name":
					err = json.Unmarshal(ff.Value, &tc.Name)
				case "arguments":
					tc.Arguments = ff.Value
				}
				if err != nil {
					err = fmt.Errorf("%s: %w", ff.Key, err)
					break
				}
			}
		case "name":
			err = json.Unmarshal(f.Value, &tc.Name)
		case "arguments":
			tc.Arguments = f.Value
		default:
			tc.Extra = append(tc.Extra, f)
		}
		if err != nil {
			return fmt.Errorf("tool call: %s: %w", f.Key, err)
		}
	}
	return nil
}

// unmarshalOptional decodes data into v unless it is null.
func unmarshalOptional(data json.RawMessage, v any) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	return json.Unmarshal(data, v)
}

// isJSONObject reports whether data, which must be valid JSON, is an object.
func isJSONObject(data json.RawMessage) bool {
	data = bytes.TrimSpace(data)
	return len(data) > 0 && data[0] == '{'
}

// objectFields splits a JSON object into its keys and raw values, in order.
func objectFields(data []byte) ([]Field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var fields []Field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("malformed object")
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		fields = append(fields, Field{Key: key, Value: val})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after object")
	}
	return fields, nil
}
