package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lem-engine/lem/chat"
)

// This file is the OpenAI dialect: /v1/chat/completions, /v1/completions
// and /v1/models. /v1/responses is in openai_responses.go.

// openaiErrors writes an error in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
func openaiErrors(w http.ResponseWriter, e *Error) {
	setRetryAfter(w, e)
	writeJSON(w, e.Status, oaError{Error: openaiErrorBody(e)})
}

// oaError is an error reply in OpenAI's shape.
type oaError struct {
	Error oaErrorBody `json:"error"`
}

// oaErrorBody is the error object of an oaError; param is null when the
// error names no parameter.
type oaErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func openaiErrorBody(e *Error) oaErrorBody {
	typ := "invalid_request_error"
	switch e.Status {
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable:
		typ = "service_unavailable_error"
	case http.StatusInternalServerError:
		typ = "server_error"
	}
	var p *string
	if e.Param != "" {
		p = &e.Param
	}
	return oaErrorBody{Message: e.Message, Type: typ, Param: p, Code: e.Code}
}

// stringList is a JSON string or array of strings.
type stringList []string

func (l *stringList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		*l = nil
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*l = stringList{s}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(data, &ss); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*l = ss
	return nil
}

// oaSampling are the sampling fields OpenAI-style requests share, with
// the common extensions (top_k, min_p, repetition_penalty).
type oaSampling struct {
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	Seed              *int64             `json:"seed"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	Stop              stringList         `json:"stop"`
	IgnoreEOS         bool               `json:"ignore_eos"`
}

// apply sets the fields given on req.Sample and req.Stop.
func (o *oaSampling) apply(req *Request) error {
	req.IgnoreEOS = o.IgnoreEOS
	p := &req.Sample
	setF := func(dst *float32, v *float64) {
		if v != nil {
			*dst = float32(*v)
		}
	}
	setF(&p.Temperature, o.Temperature)
	setF(&p.TopP, o.TopP)
	setF(&p.MinP, o.MinP)
	setF(&p.PresencePenalty, o.PresencePenalty)
	setF(&p.FrequencyPenalty, o.FrequencyPenalty)
	setF(&p.RepetitionPenalty, o.RepetitionPenalty)
	if o.TopK != nil {
		p.TopK = *o.TopK
	}
	if o.Seed != nil {
		p.Seed, p.HasSeed = uint64(*o.Seed), true
	}
	if len(o.LogitBias) > 0 {
		p.LogitBias = make(map[int32]float32, len(o.LogitBias))
		for k, v := range o.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return invalid("logit_bias", "keys must be token ids, got %q", k)
			}
			p.LogitBias[int32(id)] = float32(v)
		}
	}
	req.Stop = o.Stop
	return nil
}

// oaChatRequest is a /v1/chat/completions request.
type oaChatRequest struct {
	Model    string            `json:"model"`
	Messages []json.RawMessage `json:"messages"`
	Stream   bool              `json:"stream"`

	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	N                   *int `json:"n"`
	Logprobs            bool `json:"logprobs"`
	TopLogprobs         *int `json:"top_logprobs"`
	oaSampling

	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	} `json:"response_format"`
	Tools              []json.RawMessage          `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ReasoningEffort    *string                    `json:"reasoning_effort"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// toRequest converts the OpenAI request into a core request.
func (o *oaChatRequest) toRequest(m *Model) (*Request, error) {
	req := &Request{Sample: m.SampleDefaults(), MaxTokensParam: "max_tokens"}
	if len(o.Messages) == 0 {
		return nil, invalid("messages", "must hold at least one message")
	}
	req.Messages = make([]chat.Message, len(o.Messages))
	for i, raw := range o.Messages {
		msg := &req.Messages[i]
		if err := json.Unmarshal(raw, msg); err != nil {
			return nil, invalid(fmt.Sprintf("messages[%d]", i), "%v", err)
		}
		if err := checkRole(msg.Role, fmt.Sprintf("messages[%d].role", i), openaiRoles); err != nil {
			return nil, err
		}
		if msg.Role == "function" {
			// The deprecated function role holds a function's result,
			// as a tool message does.
			msg.Role = "tool"
		}
	}
	if o.MaxTokens != nil {
		req.MaxTokens, req.MaxTokensSet = *o.MaxTokens, true
	}
	if o.MaxCompletionTokens != nil {
		req.MaxTokens, req.MaxTokensSet, req.MaxTokensParam = *o.MaxCompletionTokens, true, "max_completion_tokens"
	}
	if o.N != nil {
		if *o.N < 1 {
			return nil, invalid("n", "must be at least 1")
		}
		req.N = *o.N
	}
	req.Logprobs = o.Logprobs
	if o.TopLogprobs != nil {
		if !o.Logprobs && *o.TopLogprobs > 0 {
			return nil, invalid("top_logprobs", "needs logprobs set to true")
		}
		req.TopLogprobs = *o.TopLogprobs
	}
	if err := o.oaSampling.apply(req); err != nil {
		return nil, err
	}
	if rf := o.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			req.JSON = true
		case "json_schema":
			if rf.JSONSchema == nil {
				return nil, invalid("response_format.json_schema", "is required when type is \"json_schema\"")
			}
			strict := rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
			s, err := compileSchema(rf.JSONSchema.Schema, "response_format.json_schema.schema", strict)
			if err != nil {
				return nil, err
			}
			req.Schema = s
		default:
			return nil, invalid("response_format.type", "%q is not supported; use \"text\", \"json_object\" or \"json_schema\"", rf.Type)
		}
	}
	for i, t := range o.Tools {
		if toolName(t) == "" {
			return nil, invalid(fmt.Sprintf("tools[%d]", i), "want {\"type\": \"function\", \"function\": {\"name\": …, \"parameters\": …}}")
		}
	}
	req.Tools = o.Tools
	tc, err := parseToolChoice(o.ToolChoice, "tool_choice", false)
	if err != nil {
		return nil, err
	}
	req.ToolChoice = tc
	req.Kwargs, err = templateKwargs(o.ChatTemplateKwargs, o.ReasoningEffort, "reasoning_effort")
	if err != nil {
		return nil, err
	}
	return req, nil
}

// parseToolChoice reads "auto" | "none" | "required" | a named function,
// {"type":"function","function":{"name":…}} (chat) or {"type":"function",
// "name":…} (responses, flat).
func parseToolChoice(raw json.RawMessage, field string, flat bool) (ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ToolChoice{}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto":
			return ToolChoice{Mode: ToolAuto}, nil
		case "none":
			return ToolChoice{Mode: ToolNone}, nil
		case "required":
			return ToolChoice{Mode: ToolRequired}, nil
		}
		return ToolChoice{}, invalid(field, "want \"auto\", \"none\", \"required\" or a named function, got %q", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" {
		return ToolChoice{}, invalid(field, "want \"auto\", \"none\", \"required\" or {\"type\": \"function\", …}")
	}
	name := obj.Function.Name
	if flat || name == "" {
		name = obj.Name
	}
	if name == "" {
		return ToolChoice{}, invalid(field, "names no function")
	}
	return ToolChoice{Mode: ToolNamed, Name: name}, nil
}

// templateKwargs builds chat-template variables from chat_template_kwargs
// and a reasoning effort: "none" turns thinking off (enable_thinking
// false), any other effort turns it on, unless the kwargs say otherwise.
func templateKwargs(kw map[string]json.RawMessage, effort *string, effortField string) (map[string]any, error) {
	out := make(map[string]any, len(kw)+2)
	if effort != nil {
		switch *effort {
		case "none":
			out["enable_thinking"] = false
		case "minimal", "low", "medium", "high":
			out["enable_thinking"] = true
		default:
			return nil, invalid(effortField, "want none, minimal, low, medium or high, got %q", *effort)
		}
		out["reasoning_effort"] = *effort
	}
	for k, v := range kw {
		switch k {
		case "messages", "tools", "add_generation_prompt":
			return nil, invalid("chat_template_kwargs."+k, "is set by the request itself")
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// readForModel decodes the request body into v and returns the model
// that *id (v's model field) names; when either fails it writes the error
// in ew's shape and returns nil.
func (s *Server) readForModel(w http.ResponseWriter, r *http.Request, v any, id *string, ew errorWriter) *Model {
	if err := s.readJSON(r, v); err != nil {
		ew(w, err)
		return nil
	}
	return s.lookupModel(w, r, *id, ew)
}

// lookupModel finds the request's model, writing a 404 when it is unknown.
func (s *Server) lookupModel(w http.ResponseWriter, r *http.Request, id string, ew errorWriter) *Model {
	if id == "" {
		ew(w, invalid("model", "is required"))
		return nil
	}
	m, err := s.acquireModel(r, id)
	if err != nil {
		ew(w, AsError(err))
		return nil
	}
	return m
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var o oaChatRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	req, err := o.toRequest(m)
	if err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	noteUnenforced(w, req)
	p, err := m.PrepareContext(r.Context(), req)
	if err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	id := NewID("chatcmpl-")
	created := time.Now().Unix()
	if !o.Stream {
		res, err := m.Generate(r.Context(), p, nil)
		if err != nil {
			s.generationFailed(w, r, err, openaiErrors)
			return
		}
		writeJSON(w, http.StatusOK, oaChatResponse(id, created, m.id, res))
		return
	}
	includeUsage := o.StreamOptions != nil && o.StreamOptions.IncludeUsage
	st := newStream(w)
	defer st.close()
	enc := newChatChunker(id, created, m.id)
	res, err := m.Generate(r.Context(), p, func(ev Event) error {
		switch ev.Kind {
		case EventQueued, EventKeepAlive:
			return st.wait(ev, "text/event-stream", sseKeepAlive)
		case EventStart:
			if err := st.start("text/event-stream"); err != nil {
				return err
			}
			for i := range max(req.N, 1) {
				if err := st.write(enc.role(i)); err != nil {
					return err
				}
			}
			return nil
		case EventContent:
			return st.write(enc.delta(ev.Choice, "content", ev.Text, ev.Logprobs))
		case EventReasoning:
			return st.write(enc.delta(ev.Choice, "reasoning_content", ev.Text, ev.Logprobs))
		case EventToolCall:
			return st.write(enc.toolCall(ev.Choice, ev.Call, ev.Logprobs))
		case EventEnd:
			return st.write(enc.finish(ev.Choice, ev.Finish, ev.Logprobs))
		}
		return nil
	})
	if err != nil {
		if !st.started {
			s.generationFailed(w, r, err, openaiErrors)
			return
		}
		if r.Context().Err() == nil {
			st.write(sseError(AsError(err)))
		}
		return
	}
	if includeUsage {
		st.write(enc.usage(res.Usage))
	}
	st.write([]byte("data: [DONE]\n\n"))
}

// generationFailed reports an error of Generate before anything was sent.
func (s *Server) generationFailed(w http.ResponseWriter, r *http.Request, err error, ew errorWriter) {
	if r.Context().Err() != nil {
		// The client left (or the server is stopping): nobody to tell.
		return
	}
	e := AsError(err)
	if e.Status == http.StatusInternalServerError {
		s.log.Error("generation failed", "request_id", RequestID(r.Context()), "error", err)
	}
	ew(w, e)
}

// sseError is an error event in the middle of an OpenAI stream.
func sseError(e *Error) []byte {
	data, _ := json.Marshal(oaError{Error: openaiErrorBody(e)})
	return append(append([]byte("data: "), data...), '\n', '\n')
}

// oaUsageBody is usage in chat-completions shape. Reasoning tokens are
// counted in completion_tokens too.
type oaUsageBody struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// oaUsage is usage in chat-completions shape.
func oaUsage(u Usage) oaUsageBody {
	b := oaUsageBody{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens()}
	b.PromptTokensDetails.CachedTokens = u.CachedTokens
	b.CompletionTokensDetails.ReasoningTokens = u.ReasoningTokens
	return b
}

// oaToolCall is a tool call in chat-completions shape (arguments as a
// string holding JSON).
type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func newOAToolCall(c *ToolCall, withIndex bool) oaToolCall {
	t := oaToolCall{ID: c.ID, Type: "function"}
	if withIndex {
		i := c.Index
		t.Index = &i
	}
	t.Function.Name, t.Function.Arguments = c.Name, string(c.Arguments)
	return t
}

// oaLogprob is one token of a chat logprobs object.
type oaLogprob struct {
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []oaTopLogpro `json:"top_logprobs"`
}

type oaTopLogpro struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// finiteLogprob keeps -Inf (a masked token) out of JSON.
func finiteLogprob(x float32) float64 {
	if math.IsInf(float64(x), -1) || math.IsNaN(float64(x)) {
		return -9999
	}
	return float64(x)
}

func oaLogprobs(lps []TokenLogprob) []oaLogprob {
	out := make([]oaLogprob, len(lps))
	for i, lp := range lps {
		o := oaLogprob{Token: lp.Token, Logprob: finiteLogprob(lp.Logprob), Bytes: tokenBytes(lp.Token), TopLogprobs: []oaTopLogpro{}}
		for _, t := range lp.Top {
			o.TopLogprobs = append(o.TopLogprobs, oaTopLogpro{Token: t.Token, Logprob: finiteLogprob(t.Logprob), Bytes: tokenBytes(t.Token)})
		}
		out[i] = o
	}
	return out
}

// oaChatCompletion is a non-streamed chat completion.
type oaChatCompletion struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	Choices           []oaChatChoice `json:"choices"`
	Usage             oaUsageBody    `json:"usage"`
	SystemFingerprint string         `json:"system_fingerprint"`
}

// oaChatChoice is one choice of an oaChatCompletion.
type oaChatChoice struct {
	Index        int             `json:"index"`
	Message      oaChatMessage   `json:"message"`
	Logprobs     *oaChatLogprobs `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// oaChatMessage is the assistant's message of a choice: content is null
// when the message holds tool calls only.
type oaChatMessage struct {
	Role             string       `json:"role"`
	Content          *string      `json:"content"`
	ReasoningContent string       `json:"reasoning_content,omitempty"`
	ToolCalls        []oaToolCall `json:"tool_calls,omitempty"`
}

// oaChatLogprobs is the logprobs object of a chat choice or chunk.
type oaChatLogprobs struct {
	Content []oaLogprob `json:"content"`
}

// oaChatResponse is a non-streamed chat completion.
func oaChatResponse(id string, created int64, model string, res *Result) oaChatCompletion {
	choices := make([]oaChatChoice, len(res.Choices))
	for i, c := range res.Choices {
		msg := oaChatMessage{Role: "assistant", Content: &c.Content, ReasoningContent: c.Reasoning}
		if len(c.ToolCalls) > 0 {
			calls := make([]oaToolCall, len(c.ToolCalls))
			for j := range c.ToolCalls {
				calls[j] = newOAToolCall(&c.ToolCalls[j], false)
			}
			msg.ToolCalls = calls
			if c.Content == "" {
				msg.Content = nil
			}
		}
		var lp *oaChatLogprobs
		if c.Logprobs != nil {
			lp = &oaChatLogprobs{Content: oaLogprobs(c.Logprobs)}
		}
		choices[i] = oaChatChoice{Index: i, Message: msg, Logprobs: lp, FinishReason: c.Finish}
	}
	return oaChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: model,
		Choices: choices, Usage: oaUsage(res.Usage), SystemFingerprint: "lem"}
}

// oaChatChunk is a chat.completion.chunk event (chatChunker writes it by
// hand, without allocating; TestOpenAPIReplies validates its events
// against this type's schema).
type oaChatChunk struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"`
	Created           int64               `json:"created"`
	Model             string              `json:"model"`
	SystemFingerprint string              `json:"system_fingerprint"`
	Choices           []oaChatChunkChoice `json:"choices"`
	Usage             *oaUsageBody        `json:"usage,omitempty"`
}

// oaChatChunkChoice is one choice of a chunk.
type oaChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        oaChatDelta     `json:"delta"`
	Logprobs     *oaChatLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// oaChatDelta is the new part of a chunk's message.
type oaChatDelta struct {
	Role             string       `json:"role,omitempty"`
	Content          *string      `json:"content,omitempty"`
	ReasoningContent *string      `json:"reasoning_content,omitempty"`
	ToolCalls        []oaToolCall `json:"tool_calls,omitempty"`
}

// chatChunker encodes chat.completion.chunk frames. Content and reasoning
// deltas are appended by hand into a reused buffer: encoding one allocates
// nothing.
type chatChunker struct {
	prefix []byte // data: {"id":…,"choices":[{"index":
	head   []byte // data: {"id":…,"model":…,
	buf    []byte
}

func newChatChunker(id string, created int64, model string) *chatChunker {
	head := []byte(`data: {"id":`)
	head = appendJSONString(head, id)
	head = append(head, `,"object":"chat.completion.chunk","created":`...)
	head = strconv.AppendInt(head, created, 10)
	head = append(head, `,"model":`...)
	head = appendJSONString(head, model)
	head = append(head, `,"system_fingerprint":"lem",`...)
	prefix := append(append([]byte(nil), head...), `"choices":[{"index":`...)
	return &chatChunker{prefix: prefix, head: head, buf: make([]byte, 0, 1024)}
}

func (c *chatChunker) start(index int) []byte {
	b := append(c.buf[:0], c.prefix...)
	return strconv.AppendInt(b, int64(index), 10)
}

func (c *chatChunker) end(b []byte, lps []TokenLogprob, finish string) []byte {
	b = append(b, `,"logprobs":`...)
	if lps == nil {
		b = append(b, "null"...)
	} else {
		data, _ := json.Marshal(oaChatLogprobs{Content: oaLogprobs(lps)})
		b = append(b, data...)
	}
	b = append(b, `,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, finish)
	}
	b = append(b, "}]}\n\n"...)
	c.buf = b
	return b
}

// role is the first chunk of a choice.
func (c *chatChunker) role(index int) []byte {
	b := c.start(index)
	b = append(b, `,"delta":{"role":"assistant","content":""}`...)
	return c.end(b, nil, "")
}

// delta is a chunk of text in field (content or reasoning_content).
func (c *chatChunker) delta(index int, field, text string, lps []TokenLogprob) []byte {
	b := c.start(index)
	b = append(b, `,"delta":{"`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendJSONString(b, text)
	b = append(b, '}')
	return c.end(b, lps, "")
}

func (c *chatChunker) toolCall(index int, call *ToolCall, lps []TokenLogprob) []byte {
	b := c.start(index)
	data, _ := json.Marshal([]oaToolCall{newOAToolCall(call, true)})
	b = append(b, `,"delta":{"tool_calls":`...)
	b = append(b, data...)
	b = append(b, '}')
	return c.end(b, lps, "")
}

func (c *chatChunker) finish(index int, reason string, lps []TokenLogprob) []byte {
	b := c.start(index)
	b = append(b, `,"delta":{}`...)
	return c.end(b, lps, reason)
}

// usage is the last chunk when stream_options.include_usage is set.
func (c *chatChunker) usage(u Usage) []byte {
	b := append(c.buf[:0], c.head...)
	data, _ := json.Marshal(oaUsage(u))
	b = append(b, `"choices":[],"usage":`...)
	b = append(b, data...)
	b = append(b, "}\n\n"...)
	c.buf = b
	return b
}

// --- /v1/completions ---

type oaCompletionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Suffix        *string         `json:"suffix"`
	Echo          bool            `json:"echo"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens *int `json:"max_tokens"`
	N         *int `json:"n"`
	BestOf    *int `json:"best_of"`
	Logprobs  *int `json:"logprobs"`
	oaSampling
}

// completionPrompts decodes prompt: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids.
func completionPrompts(raw json.RawMessage) (texts []string, ids [][]int32, err error) {
	texts, ids, e := textsOrIDs(raw, "prompt")
	if e != nil {
		return nil, nil, e
	}
	return texts, ids, nil
}

// textsOrIDs decodes an OpenAI prompt or input field named param: a
// string, an array of strings, an array of token ids, or an array of
// arrays of token ids. Arrays must not be empty; an empty string is the
// caller's to judge.
func textsOrIDs(raw json.RawMessage, param string) ([]string, [][]int32, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, invalid(param, "is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		return ss, nil, nil
	}
	var one []int32
	if json.Unmarshal(raw, &one) == nil && len(one) > 0 {
		return nil, [][]int32{one}, nil
	}
	var many [][]int32
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		return nil, many, nil
	}
	return nil, nil, invalid(param, "want a string, an array of strings, an array of token ids or an array of such arrays (not empty)")
}

// maxPrompts bounds the prompts of one completion request.
const maxPrompts = 16

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var o oaCompletionRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	fim := o.Suffix != nil && *o.Suffix != ""
	if fim && o.Echo {
		openaiErrors(w, invalid("echo", "cannot be used with suffix: a fill-in-the-middle prompt is not the text the client sent"))
		return
	}
	if o.BestOf != nil && *o.BestOf > 1 {
		openaiErrors(w, invalid("best_of", "is not supported (use n)"))
		return
	}
	texts, idss, err := completionPrompts(o.Prompt)
	if err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	nPrompts := max(len(texts), len(idss))
	if nPrompts > maxPrompts {
		openaiErrors(w, invalid("prompt", "at most %d prompts per request, got %d", maxPrompts, nPrompts))
		return
	}
	// max_tokens 0 is the API's way to score a prompt: nothing is
	// generated, and with echo and logprobs the prompt's tokens come back
	// with their log-probabilities.
	base := Request{Sample: m.SampleDefaults(), MaxTokens: 16, MaxTokensSet: true, ZeroTokens: true,
		Params: map[string]string{"top_logprobs": "logprobs"}}
	if o.MaxTokens != nil {
		base.MaxTokens = *o.MaxTokens
	}
	if o.N != nil {
		if *o.N < 1 {
			openaiErrors(w, invalid("n", "must be at least 1"))
			return
		}
		base.N = *o.N
	}
	if o.Logprobs != nil {
		base.Logprobs, base.TopLogprobs = true, *o.Logprobs
		base.PromptLogprobs = o.Echo
	}
	if err := o.oaSampling.apply(&base); err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	preps := make([]*Prepared, nPrompts)
	for i := range preps {
		req := base
		if nPrompts > 1 {
			req.PromptParam = fmt.Sprintf("prompt[%d]", i)
		}
		switch {
		case fim && texts == nil:
			openaiErrors(w, invalid("suffix", "needs a text prompt, not token ids"))
			return
		case fim:
			// Fill in the middle: the prompt is the text before the gap.
			param := req.PromptParam
			if param == "" {
				param = "prompt"
			}
			if req.PromptIDs, err = m.fimPrompt(texts[i], *o.Suffix, param, "suffix"); err != nil {
				openaiErrors(w, AsError(err))
				return
			}
		case texts != nil:
			req.Prompt = texts[i]
		default:
			req.PromptIDs = idss[i]
		}
		if preps[i], err = m.PrepareContext(r.Context(), &req); err != nil {
			openaiErrors(w, AsError(err))
			return
		}
	}
	n := max(base.N, 1)
	id := NewID("cmpl-")
	created := time.Now().Unix()
	var usage Usage
	if !o.Stream {
		var choices []oaCompletionChoice
		for pi, p := range preps {
			res, err := m.Generate(r.Context(), p, nil)
			if err != nil {
				s.generationFailed(w, r, err, openaiErrors)
				return
			}
			addUsage(&usage, res.Usage)
			for ci, c := range res.Choices {
				text := c.Content
				lps, scored := c.Logprobs, false
				if o.Echo {
					text = p.PromptText() + text
					if res.PromptLogprobs != nil {
						lps, scored = append(slices.Clip(res.PromptLogprobs), c.Logprobs...), true
					}
				}
				var lp *oaLegacyLogprobs
				if lps != nil || o.Logprobs != nil {
					lp = legacyLogprobs(lps, scored)
				}
				choices = append(choices, oaCompletionChoice{Text: text, Index: pi*n + ci, Logprobs: lp, FinishReason: c.Finish})
			}
		}
		writeJSON(w, http.StatusOK, oaCompletion{ID: id, Object: "text_completion", Created: created,
			Model: m.id, Choices: choices, Usage: oaUsage(usage), SystemFingerprint: "lem"})
		return
	}
	st := newStream(w)
	defer st.close()
	enc := newCompletionChunker(id, created, m.id)
	for pi, p := range preps {
		res, err := m.Generate(r.Context(), p, func(ev Event) error {
			index := pi*n + ev.Choice
			switch ev.Kind {
			case EventQueued, EventKeepAlive:
				return st.wait(ev, "text/event-stream", sseKeepAlive)
			case EventStart:
				if err := st.start("text/event-stream"); err != nil {
					return err
				}
				if o.Echo {
					for i := range n {
						if err := st.write(enc.echo(pi*n+i, p.PromptText(), ev.Logprobs)); err != nil {
							return err
						}
					}
				}
			case EventContent:
				return st.write(enc.text(index, ev.Text, ev.Logprobs, ""))
			case EventEnd:
				return st.write(enc.text(index, "", ev.Logprobs, ev.Finish))
			}
			return nil
		})
		if err != nil {
			if !st.started {
				s.generationFailed(w, r, err, openaiErrors)
			} else if r.Context().Err() == nil {
				st.write(sseError(AsError(err)))
			}
			return
		}
		addUsage(&usage, res.Usage)
	}
	if o.StreamOptions != nil && o.StreamOptions.IncludeUsage {
		st.write(enc.usage(usage))
	}
	st.write([]byte("data: [DONE]\n\n"))
}

func addUsage(dst *Usage, u Usage) {
	dst.PromptTokens += u.PromptTokens
	dst.CompletionTokens += u.CompletionTokens
	dst.ReasoningTokens += u.ReasoningTokens
	dst.CachedTokens += u.CachedTokens
}

// legacyLogprobs is the logprobs object of /v1/completions. When lps
// begin with the prompt's (scored), the first token has no
// log-probability: null, as the API has it.
func legacyLogprobs(lps []TokenLogprob, scored bool) *oaLegacyLogprobs {
	out := &oaLegacyLogprobs{Tokens: make([]string, len(lps)), TokenLogprobs: make([]*float64, len(lps)),
		TopLogprobs: make([]map[string]float64, len(lps)), TextOffset: make([]int, len(lps))}
	offset := 0
	for i, lp := range lps {
		out.Tokens[i], out.TextOffset[i] = lp.Token, offset
		offset += len(lp.Token)
		if i == 0 && scored {
			continue
		}
		x := finiteLogprob(lp.Logprob)
		out.TokenLogprobs[i] = &x
		top := make(map[string]float64, len(lp.Top))
		for _, t := range lp.Top {
			top[t.Token] = finiteLogprob(t.Logprob)
		}
		out.TopLogprobs[i] = top
	}
	return out
}

// oaLegacyLogprobs is the logprobs object of /v1/completions: per token
// its text, log-probability (null for a scored prompt's first), the top
// alternatives (null there too) and its offset in the text.
type oaLegacyLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// oaCompletion is a non-streamed text completion.
type oaCompletion struct {
	ID                string               `json:"id"`
	Object            string               `json:"object"`
	Created           int64                `json:"created"`
	Model             string               `json:"model"`
	Choices           []oaCompletionChoice `json:"choices"`
	Usage             oaUsageBody          `json:"usage"`
	SystemFingerprint string               `json:"system_fingerprint"`
}

// oaCompletionChoice is one choice of a completion.
type oaCompletionChoice struct {
	Text         string            `json:"text"`
	Index        int               `json:"index"`
	Logprobs     *oaLegacyLogprobs `json:"logprobs"`
	FinishReason string            `json:"finish_reason"`
}

// oaCompletionChunk is a text_completion stream event (completionChunker
// writes it by hand; TestOpenAPIReplies validates its events against
// this type's schema).
type oaCompletionChunk struct {
	ID                string                    `json:"id"`
	Object            string                    `json:"object"`
	Created           int64                     `json:"created"`
	Model             string                    `json:"model"`
	SystemFingerprint string                    `json:"system_fingerprint"`
	Choices           []oaCompletionChunkChoice `json:"choices"`
	Usage             *oaUsageBody              `json:"usage,omitempty"`
}

// oaCompletionChunkChoice is one choice of a chunk.
type oaCompletionChunkChoice struct {
	Text         string            `json:"text"`
	Index        int               `json:"index"`
	Logprobs     *oaLegacyLogprobs `json:"logprobs"`
	FinishReason *string           `json:"finish_reason"`
}

// completionChunker encodes text_completion stream frames.
type completionChunker struct {
	head []byte
	buf  []byte
}

func newCompletionChunker(id string, created int64, model string) *completionChunker {
	head := []byte(`data: {"id":`)
	head = appendJSONString(head, id)
	head = append(head, `,"object":"text_completion","created":`...)
	head = strconv.AppendInt(head, created, 10)
	head = append(head, `,"model":`...)
	head = appendJSONString(head, model)
	head = append(head, `,"system_fingerprint":"lem",`...)
	return &completionChunker{head: head}
}

func (c *completionChunker) text(index int, text string, lps []TokenLogprob, finish string) []byte {
	return c.frame(index, text, lps, false, finish)
}

// echo is the chunk of an echoed prompt, with its tokens' log-probabilities
// when they were asked for.
func (c *completionChunker) echo(index int, text string, lps []TokenLogprob) []byte {
	return c.frame(index, text, lps, lps != nil, "")
}

func (c *completionChunker) frame(index int, text string, lps []TokenLogprob, scored bool, finish string) []byte {
	b := append(c.buf[:0], c.head...)
	b = append(b, `"choices":[{"text":`...)
	b = appendJSONString(b, text)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"logprobs":`...)
	if lps == nil {
		b = append(b, "null"...)
	} else {
		data, _ := json.Marshal(legacyLogprobs(lps, scored))
		b = append(b, data...)
	}
	b = append(b, `,"finish_reason":`...)
	if finish == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, finish)
	}
	b = append(b, "}]}\n\n"...)
	c.buf = b
	return b
}

func (c *completionChunker) usage(u Usage) []byte {
	b := append(c.buf[:0], c.head...)
	data, _ := json.Marshal(oaUsage(u))
	b = append(b, `"choices":[],"usage":`...)
	b = append(b, data...)
	b = append(b, "}\n\n"...)
	c.buf = b
	return b
}

// --- /v1/models ---

// The models routes serve the OpenAI and the Anthropic dialects with one
// shape that holds the fields of both: OpenAI's object, created and
// owned_by, and Anthropic's type, display_name and created_at per model;
// and for the list OpenAI's object with Anthropic's has_more, first_id and
// last_id. The list takes Anthropic's paging parameters (limit, after_id,
// before_id); without them it lists every model.

// oaModelCard describes a model in the shape both dialects read. A model
// a registry knows but has not loaded has only its names and loaded.
type oaModelCard struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Created        int64  `json:"created,omitempty"`
	OwnedBy        string `json:"owned_by"`
	Type           string `json:"type"`
	DisplayName    string `json:"display_name"`
	CreatedAt      string `json:"created_at,omitempty"`
	ContextLength  int    `json:"context_length,omitempty"`
	MaxInputTokens int    `json:"max_input_tokens,omitempty"`
	MaxTokens      int    `json:"max_tokens,omitempty"`
	Loaded         *bool  `json:"loaded,omitempty"`
}

// oaModelList is the reply of GET /v1/models: OpenAI's list with
// Anthropic's paging fields (first_id and last_id null when empty).
type oaModelList struct {
	Object  string        `json:"object"`
	Data    []oaModelCard `json:"data"`
	HasMore bool          `json:"has_more"`
	FirstID *string       `json:"first_id"`
	LastID  *string       `json:"last_id"`
}

// oaModel describes a model in the shape both dialects read.
func oaModel(m *Model) oaModelCard {
	return oaModelCard{
		ID: m.id, Object: "model", Created: m.created.Unix(), OwnedBy: "lem",
		Type: "model", DisplayName: m.id, CreatedAt: m.created.UTC().Format(time.RFC3339),
		ContextLength: m.ctxLen, MaxInputTokens: m.ctxLen, MaxTokens: m.ctxLen,
	}
}

// modelCards returns the /v1/models entries of the served models; with a
// registry, every known model, loaded or not ("loaded").
func (s *Server) modelCards() []oaModelCard {
	if s.reg == nil {
		out := make([]oaModelCard, len(s.models))
		for i, m := range s.models {
			out[i] = oaModel(m)
		}
		return out
	}
	var out []oaModelCard
	for _, st := range s.reg.states() {
		loaded := st.Loaded
		c := oaModelCard{ID: st.Name, Object: "model", OwnedBy: "lem", Type: "model", DisplayName: st.Name, Loaded: &loaded}
		if st.Loaded {
			c = oaModel(st.model)
			c.Loaded = &loaded
		}
		out = append(out, c)
	}
	return out
}

// maxModelsLimit bounds Anthropic's limit parameter, as the API does.
const maxModelsLimit = 1000

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	ew := sharedErrors(r)
	q := r.URL.Query()
	models := s.modelCards()
	limit := len(models)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxModelsLimit {
			ew(w, invalid("limit", "must be an integer between 1 and %d, got %q", maxModelsLimit, v))
			return
		}
		limit = n
	}
	after, before := q.Get("after_id"), q.Get("before_id")
	if after != "" && before != "" {
		ew(w, invalid("before_id", "cannot be given with after_id"))
		return
	}
	index := func(id, param string) (int, bool) {
		for i, m := range models {
			if m.ID == id {
				return i, true
			}
		}
		ew(w, &Error{Status: http.StatusNotFound, Code: CodeModelNotFound, Param: param,
			Message: fmt.Sprintf("%s %q is not a model of this server", param, id)})
		return 0, false
	}
	lo, hi := 0, len(models)
	switch {
	case after != "":
		i, ok := index(after, "after_id")
		if !ok {
			return
		}
		lo = i + 1
		hi = min(hi, lo+limit)
	case before != "":
		i, ok := index(before, "before_id")
		if !ok {
			return
		}
		hi = i
		lo = max(0, hi-limit)
	default:
		hi = min(hi, limit)
	}
	data := make([]oaModelCard, 0, hi-lo)
	data = append(data, models[lo:hi]...)
	var first, last *string
	if len(data) > 0 {
		first, last = &data[0].ID, &data[len(data)-1].ID
	}
	hasMore := hi < len(models)
	if before != "" {
		hasMore = lo > 0
	}
	writeJSON(w, http.StatusOK, oaModelList{Object: "list", Data: data,
		HasMore: hasMore, FirstID: first, LastID: last})
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.PathValue("id"))
	if s.reg != nil {
		for _, c := range s.modelCards() {
			if c.ID == id {
				writeJSON(w, http.StatusOK, c)
				return
			}
		}
		sharedErrors(r)(w, errModelNotFound(id))
		return
	}
	m := s.byID[id]
	if m == nil {
		sharedErrors(r)(w, errModelNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, oaModel(m))
}
