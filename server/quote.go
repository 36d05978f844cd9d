package server

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/tokenizer"
)

// A client's text must never become the model's control tokens: a message
// holding "<|im_start|>system" would otherwise open a system turn of its
// own. Before the chat template runs, every string that came from the
// request (content, reasoning, tool calls, tool results, names, tool
// definitions, template kwargs) is quoted with the model's Quoter, which
// puts a guard character inside each guarded token's text; the rendered
// prompt is then encoded with EncodeQuoted, which matches added tokens
// only where no guard splits them and encodes the client's text as plain
// text. The template's own markup is never quoted, so it alone produces
// control tokens. Raw prompts (completions) are not quoted.

// newQuoter returns the Quoter of a served model. It guards the special
// tokens, and the other added tokens that the model's chat templates or
// output format use as markup (markers such as <think> and <tool_call>
// need not be special), but not added tokens of white space or other
// vocabulary (such as "\n\n" and "<table>") that a client's text may hold
// and that the model reads as text.
func newQuoter(tok *tokenizer.Tokenizer, templates *chat.Set, format outputFormat) *tokenizer.Quoter {
	var markup []string
	if templates != nil {
		for _, name := range templates.Names() {
			markup = append(markup, templates.Lookup(name).Source())
		}
	}
	markers := []string{format.ThinkStart, format.ThinkEnd}
	return tok.NewQuoter(func(a tokenizer.AddedToken) bool {
		if a.Special {
			return true
		}
		if strings.TrimSpace(a.Content) == "" {
			return false
		}
		if slices.Contains(markers, a.Content) {
			return true
		}
		for _, src := range markup {
			if strings.Contains(src, a.Content) {
				return true
			}
		}
		return false
	})
}

// quoteInput returns the messages, tools and kwargs with every string in
// them quoted. The arguments are not modified.
func quoteInput(q *tokenizer.Quoter, msgs []chat.Message, tools []json.RawMessage, kwargs map[string]any) ([]chat.Message, []json.RawMessage, map[string]any) {
	out := make([]chat.Message, len(msgs))
	for i, msg := range msgs {
		msg.Role = q.Quote(msg.Role)
		if msg.Content.IsText() {
			msg.Content = chat.Text(q.Quote(msg.Content.Text()))
		} else if msg.Content.IsParts() {
			parts := slices.Clone(msg.Content.Parts())
			for j := range parts {
				parts[j].Text = q.Quote(parts[j].Text)
				parts[j].Extra = quoteFields(q, parts[j].Extra)
			}
			msg.Content = chat.Parts(parts...)
		}
		msg.ReasoningContent = q.Quote(msg.ReasoningContent)
		msg.ToolCallID = q.Quote(msg.ToolCallID)
		msg.Name = q.Quote(msg.Name)
		msg.Extra = quoteFields(q, msg.Extra)
		if msg.ToolCalls != nil {
			calls := make([]chat.ToolCall, len(msg.ToolCalls))
			for j, tc := range msg.ToolCalls {
				tc.ID = q.Quote(tc.ID)
				tc.Name = q.Quote(tc.Name)
				tc.Arguments = quoteJSON(q, tc.Arguments)
				tc.Extra = quoteFields(q, tc.Extra)
				calls[j] = tc
			}
			msg.ToolCalls = calls
		}
		out[i] = msg
	}
	var qtools []json.RawMessage
	if tools != nil {
		qtools = make([]json.RawMessage, len(tools))
		for i, t := range tools {
			qtools[i] = quoteJSON(q, t)
		}
	}
	var qkw map[string]any
	if kwargs != nil {
		qkw = make(map[string]any, len(kwargs))
		for k, v := range kwargs {
			qkw[k] = quoteValue(q, v)
		}
	}
	return out, qtools, qkw
}

func quoteFields(q *tokenizer.Quoter, fields []chat.Field) []chat.Field {
	if fields == nil {
		return nil
	}
	out := make([]chat.Field, len(fields))
	for i, f := range fields {
		out[i] = chat.Field{Key: q.Quote(f.Key), Value: quoteJSON(q, f.Value)}
	}
	return out
}

// quoteValue quotes the strings of a template kwarg (the value kinds
// chat.Input.Kwargs holds).
func quoteValue(q *tokenizer.Quoter, v any) any {
	switch v := v.(type) {
	case string:
		return q.Quote(v)
	case json.RawMessage:
		return quoteJSON(q, v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = quoteValue(q, e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[q.Quote(k)] = quoteValue(q, e)
		}
		return out
	}
	return v
}

// quoteJSON quotes every string literal, keys included, of a JSON text,
// keeping the rest as it is. Escapes are decoded first, so that
// "\u003c|im_start|>" is quoted too.
func quoteJSON(q *tokenizer.Quoter, raw json.RawMessage) json.RawMessage {
	var out []byte
	done := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(raw) && raw[j] != '"' {
			if raw[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(raw) {
			break // not JSON: the template's parser will say so
		}
		var s string
		if json.Unmarshal(raw[i:j+1], &s) == nil {
			if qs := q.Quote(s); qs != s {
				out = append(out, raw[done:i]...)
				out = appendJSONString(out, qs)
				done = j + 1
			}
		}
		i = j
	}
	if out == nil {
		return raw
	}
	return append(out, raw[done:]...)
}

// splitReasoning moves the reasoning that an assistant message holds
// inline in its content ("<think>…</think>answer", as clients that send the
// model's raw output back write it) into ReasoningContent, as the
// templates of reasoning models do for themselves, since once quoted the
// template can no longer find the markers. Messages that carry their
// reasoning apart are left alone.
func splitReasoning(msgs []chat.Message, f outputFormat) {
	start, end := f.ReasoningMarkers()
	if end == "" {
		return
	}
	for i, msg := range msgs {
		if msg.Role != "assistant" || msg.ReasoningContent != "" || !msg.Content.IsText() {
			continue
		}
		text := msg.Content.Text()
		e := strings.Index(text, end)
		if e < 0 {
			continue
		}
		reasoning := text[:e]
		if start != "" {
			if k := strings.LastIndex(reasoning, start); k >= 0 {
				reasoning = reasoning[k+len(start):]
			}
		}
		content := text[strings.LastIndex(text, end)+len(end):]
		msgs[i].ReasoningContent = strings.Trim(reasoning, "\n")
		msgs[i].Content = chat.Text(strings.TrimLeft(content, "\n"))
	}
}
