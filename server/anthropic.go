package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/engine"
)

// This file is the Anthropic dialect: POST /v1/messages (streamed as
// Anthropic's server-sent events, or whole) and POST
// /v1/messages/count_tokens.
//
// Choices where the Messages API and a local model differ:
//   - thinking left out means thinking off (enable_thinking false, and
//     where the template does not close reasoning itself, an empty
//     reasoning block is forced), as the API defines it; {"type":
//     "enabled"} or {"type": "adaptive"} turns it on. budget_tokens is
//     enforced: after that many reasoning tokens the model's
//     end-of-reasoning marker is forced.
//   - max_tokens is required by the API, so clients send large values: it
//     is a bound, cut to what the context leaves after the prompt, and a
//     reply that reaches the cut ends with stop_reason "max_tokens". Only
//     a prompt that fills the context by itself is refused, and values
//     outside every dialect's bounds (below 1, above MaxTokensLimit).
//   - temperature, top_p and top_k have every dialect's bounds
//     (validate.go), wider than the Messages API's (temperature 0 to 1).
//   - messages may also hold the role "system", as a system prompt.
//   - Thinking blocks carry an opaque signature that lem does not check
//     when clients send them back.
//   - output_config.format {"type": "json_schema"} constrains the reply to
//     a JSON value the schema accepts (a keyword lem cannot enforce is a
//     400 naming it).
//   - temperature, top_p and top_k are taken when sent (newer SDKs no
//     longer send them); otherwise the model's generation_config.json
//     holds.

// anthropicErrors writes an error in Anthropic's shape:
// {"type": "error", "error": {"type", "message"}, "request_id"}.
func anthropicErrors(w http.ResponseWriter, e *Error) {
	setRetryAfter(w, e)
	body := anErrorBody(e)
	if id := w.Header().Get("X-Request-Id"); id != "" {
		body.RequestID = id
	}
	writeJSON(w, e.Status, body)
}

// anError is an Anthropic error body.
type anError struct {
	Type  string `json:"type" enum:"error"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

func anErrorBody(e *Error) *anError {
	b := &anError{Type: "error"}
	b.Error.Type = anErrorType(e.Status)
	b.Error.Message = e.Error()
	return b
}

// anErrorType maps an HTTP status to Anthropic's error type.
func anErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anRequest is a /v1/messages (or count_tokens) request.
type anRequest struct {
	Model         string            `json:"model"`
	Messages      []anMessage       `json:"messages"`
	System        json.RawMessage   `json:"system"`
	MaxTokens     *int              `json:"max_tokens"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	Thinking      json.RawMessage   `json:"thinking"`
	// OutputConfig's format {"type": "json_schema", "schema": {…}} asks
	// for a JSON value the schema accepts.
	OutputConfig *struct {
		Format json.RawMessage `json:"format"`
	} `json:"output_config"`
	// Metadata (user_id) is accepted and ignored, as are fields for
	// Anthropic's own service (service_tier, cache_control, …).
	Metadata json.RawMessage `json:"metadata"`
}

// anMessage is one message of the conversation: content is a string or
// an array of content blocks.
type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anBlock is a content block as clients send it: the union of the fields
// of the block types lem takes.
type anBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// thinking
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// anBlocks decodes content: a string (one text block) or an array of
// blocks. where names the field in errors.
func anBlocks(raw json.RawMessage, where string) ([]anBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid(where, "is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid(where, "%v", err)
		}
		return []anBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, invalid(where, "want a string or an array of content blocks")
	}
	return blocks, nil
}

// anUnsupported rejects a block type lem cannot take.
func anUnsupported(where, typ string) *Error {
	switch typ {
	case "image", "document", "search_result", "container_upload":
		return invalid(where+".type", "content of type %q is not supported: this server takes text only", typ)
	case "":
		return invalid(where+".type", "is required")
	}
	return invalid(where+".type", "content of type %q is not supported here", typ)
}

// anText joins the text blocks of a system prompt or tool result.
func anText(raw json.RawMessage, where string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	blocks, err := anBlocks(raw, where)
	if err != nil {
		return "", err
	}
	var texts []string
	for j, b := range blocks {
		if b.Type != "text" {
			return "", anUnsupported(fmt.Sprintf("%s[%d]", where, j), b.Type)
		}
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// anMessages converts the system prompt and messages into chat messages.
// A user message's tool_result blocks become tool messages; an assistant
// message's thinking, text and tool_use blocks become one message with
// reasoning, content and tool calls.
func anMessages(system json.RawMessage, msgs []anMessage) ([]chat.Message, error) {
	if len(msgs) == 0 {
		return nil, invalid("messages", "must hold at least one message")
	}
	var out []chat.Message
	sys, err := anText(system, "system")
	if err != nil {
		return nil, err
	}
	if sys != "" {
		out = append(out, chat.Message{Role: "system", Content: chat.Text(sys)})
	}
	toolNames := map[string]string{} // tool_use id → tool name
	for i, msg := range msgs {
		where := fmt.Sprintf("messages[%d]", i)
		blocks, err := anBlocks(msg.Content, where+".content")
		if err != nil {
			return nil, err
		}
		switch msg.Role {
		case "user", "system":
			var texts []string
			flush := func() {
				if len(texts) > 0 {
					out = append(out, chat.Message{Role: msg.Role, Content: chat.Text(strings.Join(texts, "\n"))})
					texts = nil
				}
			}
			for j, b := range blocks {
				bw := fmt.Sprintf("%s.content[%d]", where, j)
				switch {
				case b.Type == "text":
					texts = append(texts, b.Text)
				case b.Type == "tool_result" && msg.Role == "user":
					if b.ToolUseID == "" {
						return nil, invalid(bw+".tool_use_id", "is required")
					}
					text, err := anText(b.Content, bw+".content")
					if err != nil {
						return nil, err
					}
					if b.IsError {
						text = "Error: " + text
					}
					flush()
					out = append(out, chat.Message{Role: "tool", Content: chat.Text(text), ToolCallID: b.ToolUseID, Name: toolNames[b.ToolUseID]})
				default:
					return nil, anUnsupported(bw, b.Type)
				}
			}
			if len(blocks) == 0 {
				texts = []string{""}
			}
			flush()
		case "assistant":
			am := chat.Message{Role: "assistant"}
			var texts, thoughts []string
			for j, b := range blocks {
				bw := fmt.Sprintf("%s.content[%d]", where, j)
				switch b.Type {
				case "text":
					texts = append(texts, b.Text)
				case "thinking":
					thoughts = append(thoughts, b.Thinking)
				case "redacted_thinking":
					// Encrypted reasoning of another model: nothing to render.
				case "tool_use":
					if b.Name == "" {
						return nil, invalid(bw+".name", "is required")
					}
					args := bytes.TrimSpace(b.Input)
					if len(args) == 0 || string(args) == "null" {
						args = []byte("{}")
					}
					if args[0] != '{' {
						return nil, invalid(bw+".input", "must be a JSON object")
					}
					am.ToolCalls = append(am.ToolCalls, chat.ToolCall{ID: b.ID, Name: b.Name, Arguments: json.RawMessage(args)})
					toolNames[b.ID] = b.Name
				default:
					return nil, anUnsupported(bw, b.Type)
				}
			}
			am.Content = chat.Text(strings.Join(texts, ""))
			am.ReasoningContent = strings.Join(thoughts, "\n")
			out = append(out, am)
		case "":
			return nil, invalid(where+".role", "is required")
		default:
			return nil, invalid(where+".role", "want \"user\" or \"assistant\", got %q", msg.Role)
		}
	}
	return out, nil
}

// anTool is a tool definition. Tools with another type than "custom" are
// Anthropic's server tools (web search, code execution, …).
type anTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anTools converts tool definitions into the core's
// {"type":"function","function":{…}} shape, keeping the order of the
// schema's keys.
func anTools(raw []json.RawMessage) ([]json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]json.RawMessage, len(raw))
	for i, r := range raw {
		where := fmt.Sprintf("tools[%d]", i)
		var t anTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, invalid(where, "want {\"name\": …, \"input_schema\": {…}}")
		}
		if t.Type != "" && t.Type != "custom" {
			return nil, invalid(where+".type", "the server tool %q is not supported; give client tools with an input_schema", t.Type)
		}
		if t.Name == "" {
			return nil, invalid(where+".name", "is required")
		}
		schema := bytes.TrimSpace(t.InputSchema)
		if len(schema) == 0 || string(schema) == "null" {
			schema = []byte(`{"type":"object","properties":{}}`)
		}
		if schema[0] != '{' {
			return nil, invalid(where+".input_schema", "must be a JSON object")
		}
		b := []byte(`{"type":"function","function":{"name":`)
		b = appendJSONString(b, t.Name)
		if t.Description != "" {
			b = append(b, `,"description":`...)
			b = appendJSONString(b, t.Description)
		}
		b = append(b, `,"parameters":`...)
		b = append(b, schema...)
		b = append(b, "}}"...)
		out[i] = b
	}
	return out, nil
}

// anToolChoice reads {"type": "auto" | "any" | "tool" | "none", "name"}.
func anToolChoice(raw json.RawMessage) (ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ToolChoice{}, nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &tc) != nil {
		return ToolChoice{}, invalid("tool_choice", "want {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}")
	}
	switch tc.Type {
	case "auto":
		return ToolChoice{Mode: ToolAuto}, nil
	case "any":
		return ToolChoice{Mode: ToolRequired}, nil
	case "none":
		return ToolChoice{Mode: ToolNone}, nil
	case "tool":
		if tc.Name == "" {
			return ToolChoice{}, invalid("tool_choice.name", "is required when type is \"tool\"")
		}
		return ToolChoice{Mode: ToolNamed, Name: tc.Name}, nil
	}
	return ToolChoice{}, invalid("tool_choice.type", "want \"auto\", \"any\", \"tool\" or \"none\", got %q", tc.Type)
}

// anThinking reads thinking: {"type": "enabled", "budget_tokens": N},
// {"type": "adaptive"} or {"type": "disabled"}. Left out, thinking is
// off. It returns whether thinking is on and its budget in tokens (0:
// none). maxTokens is 0 when the request has none (count_tokens).
func anThinking(raw json.RawMessage, maxTokens int) (bool, int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return false, 0, nil
	}
	var th struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
	if json.Unmarshal(raw, &th) != nil {
		return false, 0, invalid("thinking", "want {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}")
	}
	switch th.Type {
	case "disabled":
		return false, 0, nil
	case "adaptive":
		return true, 0, nil
	case "enabled":
		switch b := th.BudgetTokens; {
		case b == nil:
			return false, 0, invalid("thinking.budget_tokens", "is required when thinking is enabled")
		case *b < 1:
			return false, 0, invalid("thinking.budget_tokens", "must be at least 1, got %d", *b)
		case maxTokens > 0 && *b >= maxTokens:
			return false, 0, invalid("thinking.budget_tokens", "must be less than max_tokens (%d), got %d", maxTokens, *b)
		default:
			return true, *b, nil
		}
	}
	return false, 0, invalid("thinking.type", "want \"enabled\", \"adaptive\" or \"disabled\", got %q", th.Type)
}

// anOutputFormat reads output_config.format: {"type": "json_schema",
// "schema": {…}}, output held to the schema.
func anOutputFormat(raw json.RawMessage) (*constrain.Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(raw, &f) != nil || f.Type != "json_schema" {
		return nil, invalid("output_config.format", "want {\"type\": \"json_schema\", \"schema\": {…}}")
	}
	return compileSchema(f.Schema, "output_config.format.schema", false)
}

// toRequest converts the request into a core request. count is set for
// count_tokens, which needs no max_tokens. It returns the max_tokens
// bound (0 for count_tokens).
func (a *anRequest) toRequest(defaults engine.SampleParams, count bool) (*Request, int, error) {
	limit := 0
	if !count {
		if a.MaxTokens == nil {
			return nil, 0, invalid("max_tokens", "Field required")
		}
		limit = *a.MaxTokens
	}
	req := &Request{Sample: defaults, MaxTokensParam: "max_tokens", Params: anParams}
	if !count {
		req.MaxTokens, req.MaxTokensSet = limit, true
	}
	var err error
	if req.Messages, err = anMessages(a.System, a.Messages); err != nil {
		return nil, 0, err
	}
	if req.Tools, err = anTools(a.Tools); err != nil {
		return nil, 0, err
	}
	if req.ToolChoice, err = anToolChoice(a.ToolChoice); err != nil {
		return nil, 0, err
	}
	think, budget, err := anThinking(a.Thinking, limit)
	if err != nil {
		return nil, 0, err
	}
	req.Kwargs = map[string]any{"enable_thinking": think}
	req.ThinkingBudget = budget
	// Their bounds are the core's, as on every dialect (checkRequest).
	if t := a.Temperature; t != nil {
		req.Sample.Temperature = float32(*t)
	}
	if p := a.TopP; p != nil {
		req.Sample.TopP = float32(*p)
	}
	if k := a.TopK; k != nil {
		req.Sample.TopK = *k
	}
	req.Stop = a.StopSequences
	if a.OutputConfig != nil {
		if req.Schema, err = anOutputFormat(a.OutputConfig.Format); err != nil {
			return nil, 0, err
		}
	}
	return req, limit, nil
}

// anParams are the Anthropic names of core fields that differ.
var anParams = map[string]string{"stop": "stop_sequences"}

// prepareBounded prepares req with its token limit as a bound on the
// tokens to generate rather than a demand (Request.MaxTokensBound): the
// limit is cut to what the context leaves after the prompt. A positive
// limit sets req's (Ollama's num_predict; 0: none); Anthropic's required
// max_tokens is set by toRequest. Dialects whose clients always send a
// limit use it, so that a large limit does not fail a short prompt; the
// limit's bounds are those of every dialect.
func prepareBounded(ctx context.Context, m *Model, req *Request, limit int) (*Prepared, error) {
	if limit > 0 {
		req.MaxTokens, req.MaxTokensSet = limit, true
	}
	req.MaxTokensBound = true
	return m.PrepareContext(ctx, req)
}

// anDecode reads and converts a messages request, writing the error when
// it fails.
func (s *Server) anDecode(w http.ResponseWriter, r *http.Request, count bool) (*Model, *anRequest, *Prepared) {
	var a anRequest
	m := s.readForModel(w, r, &a, &a.Model, anthropicErrors)
	if m == nil {
		return nil, nil, nil
	}
	req, limit, err := a.toRequest(m.SampleDefaults(), count)
	if err != nil {
		anthropicErrors(w, AsError(err))
		return nil, nil, nil
	}
	noteUnenforced(w, req)
	if count {
		// Counting tokens is not a turn of the conversation: the
		// welfare guard leaves it alone.
		req.welfare = &welfareOutcome{}
	}
	p, err := prepareBounded(r.Context(), m, req, limit)
	if err != nil {
		anthropicErrors(w, AsError(err))
		return nil, nil, nil
	}
	return m, &a, p
}

func (s *Server) anthropicCountTokens(w http.ResponseWriter, r *http.Request) {
	_, _, p := s.anDecode(w, r, true)
	if p == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": p.PromptTokens()})
}

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	if id := w.Header().Get("X-Request-Id"); id != "" {
		w.Header().Set("Request-Id", id)
	}
	m, a, p := s.anDecode(w, r, false)
	if p == nil {
		return
	}
	id := NewID("msg_")
	if !a.Stream {
		res, err := m.Generate(r.Context(), p, nil)
		if err != nil {
			s.generationFailed(w, r, err, anthropicErrors)
			return
		}
		writeJSON(w, http.StatusOK, anMessageBody(id, m.id, res))
		return
	}
	st := newStream(w)
	defer st.close()
	as := &anStream{st: st, enc: anEncoder{buf: make([]byte, 0, 512)}}
	res, err := m.Generate(r.Context(), p, func(ev Event) error {
		switch ev.Kind {
		case EventQueued, EventKeepAlive:
			return st.wait(ev, "text/event-stream", anPing)
		case EventStart:
			if err := st.start("text/event-stream"); err != nil {
				return err
			}
			start := anResponse{ID: id, Type: "message", Role: "assistant", Model: m.id, Content: []anContent{},
				Usage: anUsage{InputTokens: p.PromptTokens()}}
			if err := as.event("message_start", anMessageStart{Type: "message_start", Message: start}); err != nil {
				return err
			}
			return as.event("ping", anBareEvent{Type: "ping"})
		}
		return as.handle(ev)
	})
	if err != nil {
		if !st.started {
			s.generationFailed(w, r, err, anthropicErrors)
			return
		}
		if r.Context().Err() == nil {
			as.event("error", anErrorBody(AsError(err)))
		}
		return
	}
	c := res.Choices[0]
	reason, seq := anStopReason(c.Finish, c.StopSequence)
	delta := anMessageDelta{Type: "message_delta", Usage: anUsageOf(res.Usage)}
	delta.Delta.StopReason, delta.Delta.StopSequence = reason, seq
	as.event("message_delta", delta)
	as.event("message_stop", anBareEvent{Type: "message_stop"})
}

// anResponse is a message as the API returns it (and as message_start
// carries it, with no content yet).
type anResponse struct {
	ID           string      `json:"id"`
	Type         string      `json:"type" enum:"message"`
	Role         string      `json:"role" enum:"assistant"`
	Model        string      `json:"model"`
	Content      []anContent `json:"content"`
	StopReason   *string     `json:"stop_reason"`
	StopSequence *string     `json:"stop_sequence"`
	Usage        anUsage     `json:"usage"`
}

// anUsage counts tokens as Anthropic does: input_tokens are the prompt
// tokens computed, cache_read_input_tokens those reused from the previous
// request's cache; together they are the prompt.
type anUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func anUsageOf(u Usage) anUsage {
	return anUsage{InputTokens: u.PromptTokens - u.CachedTokens, CacheReadInputTokens: u.CachedTokens, OutputTokens: u.CompletionTokens}
}

// anContent is a content block of a response: an anTextBlock,
// anThinkingBlock or anToolUseBlock.
type anContent interface{ anContent() }

// Content blocks of a response.
type (
	anTextBlock struct {
		Type string `json:"type" enum:"text"`
		Text string `json:"text"`
	}
	anThinkingBlock struct {
		Type      string `json:"type" enum:"thinking"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	anToolUseBlock struct {
		Type  string          `json:"type" enum:"tool_use"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
)

func (anTextBlock) anContent()     {}
func (anThinkingBlock) anContent() {}
func (anToolUseBlock) anContent()  {}

// anToolUseID gives a tool call an id in Anthropic's style.
func anToolUseID(c *ToolCall) string {
	return "toolu_" + strings.TrimPrefix(c.ID, "call_")
}

// anSignature returns the opaque signature of a thinking block.
func anSignature() string { return NewID("lem_") }

// anStopReason maps a finish reason to stop_reason and stop_sequence.
func anStopReason(finish, stopSeq string) (string, *string) {
	switch finish {
	case FinishLength:
		return "max_tokens", nil
	case FinishToolCalls:
		return "tool_use", nil
	case FinishContentFilter:
		return "refusal", nil
	}
	if stopSeq != "" {
		return "stop_sequence", &stopSeq
	}
	return "end_turn", nil
}

// anMessageBody is the whole reply of a non-streamed request.
func anMessageBody(id, model string, res *Result) anResponse {
	c := res.Choices[0]
	content := []anContent{}
	if c.Reasoning != "" {
		content = append(content, anThinkingBlock{Type: "thinking", Thinking: c.Reasoning, Signature: anSignature()})
	}
	if c.Content != "" {
		content = append(content, anTextBlock{Type: "text", Text: c.Content})
	}
	for i := range c.ToolCalls {
		tc := &c.ToolCalls[i]
		content = append(content, anToolUseBlock{Type: "tool_use", ID: anToolUseID(tc), Name: tc.Name, Input: tc.Arguments})
	}
	reason, seq := anStopReason(c.Finish, c.StopSequence)
	return anResponse{ID: id, Type: "message", Role: "assistant", Model: model, Content: content,
		StopReason: &reason, StopSequence: seq, Usage: anUsageOf(res.Usage)}
}

// Stream events. The content_block_delta events, one a token, are encoded
// by hand (anEncoder) in anBlockDelta's shape.
type (
	anMessageStart struct {
		Type    string     `json:"type" enum:"message_start"`
		Message anResponse `json:"message"`
	}
	anBlockStart struct {
		Type         string    `json:"type" enum:"content_block_start"`
		Index        int       `json:"index"`
		ContentBlock anContent `json:"content_block"`
	}
	anBlockDelta struct {
		Type  string  `json:"type" enum:"content_block_delta"`
		Index int     `json:"index"`
		Delta anDelta `json:"delta"`
	}
	anBlockStop struct {
		Type  string `json:"type" enum:"content_block_stop"`
		Index int    `json:"index"`
	}
	// anBareEvent is an event that is its type alone.
	anBareEvent struct {
		Type string `json:"type" enum:"ping,message_stop"`
	}
	anMessageDelta struct {
		Type  string `json:"type" enum:"message_delta"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage anUsage `json:"usage"`
	}
)

// anStreamEvents are the kinds of /v1/messages stream events.
var anStreamEvents = []any{anMessageStart{}, anBareEvent{}, anBlockStart{}, anBlockDelta{}, anBlockStop{}, anMessageDelta{}, anError{}}

// anDelta is the delta of a content_block_delta event: an anTextDelta,
// anThinkingDelta, anSignatureDelta or anInputJSONDelta.
type anDelta interface{ anDelta() }

// Deltas of content blocks.
type (
	anTextDelta struct {
		Type string `json:"type" enum:"text_delta"`
		Text string `json:"text"`
	}
	anThinkingDelta struct {
		Type     string `json:"type" enum:"thinking_delta"`
		Thinking string `json:"thinking"`
	}
	anSignatureDelta struct {
		Type      string `json:"type" enum:"signature_delta"`
		Signature string `json:"signature"`
	}
	anInputJSONDelta struct {
		Type        string `json:"type" enum:"input_json_delta"`
		PartialJSON string `json:"partial_json"`
	}
)

func (anTextDelta) anDelta()      {}
func (anThinkingDelta) anDelta()  {}
func (anSignatureDelta) anDelta() {}
func (anInputJSONDelta) anDelta() {}

// Kinds of the open content block of a stream.
const (
	anNoBlock = iota
	anThinkingOpen
	anTextOpen
)

// anStream turns core events into Anthropic stream events: each run of
// reasoning or text becomes a thinking or text block, each tool call a
// tool_use block with its input in one input_json_delta.
type anStream struct {
	st   *stream
	enc  anEncoder
	next int // index of the next block
	open int // kind of the open block
}

// event writes one event with v as its data.
func (a *anStream) event(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b := append(a.enc.buf[:0], "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	a.enc.buf = b
	return a.st.write(b)
}

func (a *anStream) handle(ev Event) error {
	switch ev.Kind {
	case EventReasoning:
		return a.text(anThinkingOpen, ev.Text)
	case EventContent:
		return a.text(anTextOpen, ev.Text)
	case EventToolCall:
		if err := a.closeBlock(); err != nil {
			return err
		}
		c := ev.Call
		index := a.next
		a.next++
		start := anToolUseBlock{Type: "tool_use", ID: anToolUseID(c), Name: c.Name, Input: json.RawMessage("{}")}
		if err := a.event("content_block_start", anBlockStart{Type: "content_block_start", Index: index, ContentBlock: start}); err != nil {
			return err
		}
		if err := a.st.write(a.enc.delta(index, "input_json_delta", "partial_json", string(c.Arguments))); err != nil {
			return err
		}
		return a.event("content_block_stop", anBlockStop{Type: "content_block_stop", Index: index})
	case EventEnd:
		return a.closeBlock()
	}
	return nil
}

// text writes a thinking or text delta, opening its block when needed.
func (a *anStream) text(kind int, text string) error {
	if a.open != kind {
		if err := a.closeBlock(); err != nil {
			return err
		}
		var block anContent = anTextBlock{Type: "text"}
		if kind == anThinkingOpen {
			block = anThinkingBlock{Type: "thinking"}
		}
		if err := a.event("content_block_start", anBlockStart{Type: "content_block_start", Index: a.next, ContentBlock: block}); err != nil {
			return err
		}
		a.open = kind
		a.next++
	}
	if kind == anThinkingOpen {
		return a.st.write(a.enc.delta(a.next-1, "thinking_delta", "thinking", text))
	}
	return a.st.write(a.enc.delta(a.next-1, "text_delta", "text", text))
}

// closeBlock ends the open block; a thinking block gets its signature
// first.
func (a *anStream) closeBlock() error {
	if a.open == anNoBlock {
		return nil
	}
	index := a.next - 1
	if a.open == anThinkingOpen {
		if err := a.st.write(a.enc.delta(index, "signature_delta", "signature", anSignature())); err != nil {
			return err
		}
	}
	a.open = anNoBlock
	return a.event("content_block_stop", anBlockStop{Type: "content_block_stop", Index: index})
}

// anEncoder encodes content_block_delta events by hand into a reused
// buffer: a per-token frame allocates nothing.
type anEncoder struct {
	buf []byte
}

// delta encodes a content_block_delta event of the block index whose
// delta has the type typ and field set to text.
func (e *anEncoder) delta(index int, typ, field, text string) []byte {
	b := append(e.buf[:0], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendJSONString(b, text)
	b = append(b, "}}\n\n"...)
	e.buf = b
	return b
}
