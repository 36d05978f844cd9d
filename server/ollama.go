package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/server/webui"
	"github.com/lem-engine/lem/tokenizer"
)

// This file is the Ollama dialect: /api/chat and /api/generate (streamed
// as newline-delimited JSON unless "stream": false), /api/tags, /api/show,
// /api/ps, /api/version and the liveness answer at / (or, to a browser,
// the chat page of package webui).
//
// Choices where Ollama and lem differ:
//   - Sampling starts from the model's generation_config.json, not from
//     Ollama's defaults (temperature 0.8, top_k 40, …); options override
//     it. Options for Ollama's runner (num_ctx, num_gpu, num_thread, …)
//     are accepted and ignored (num_ctx aside: see below).
//   - num_predict is a bound, cut to what the context leaves after the
//     prompt.
//   - format "json" constrains the reply to one JSON object; a JSON schema
//     constrains it to a value the schema accepts (a keyword lem cannot
//     enforce is left out, named in the Lem-Schema-Unenforced header).
//   - /api/generate returns no context and refuses one (Ollama deprecates
//     it): multi-turn conversations go through /api/chat. template and
//     images are refused.
//   - suffix asks to fill in the middle between prompt and suffix, with
//     the fill-in-the-middle tokens the model's tokenizer declares (a 400
//     for a model without them); system and the chat template do not
//     apply then.
//   - options.num_ctx bounds a request's context (prompt and output) within
//     the context the server was started with; a larger one is clamped to
//     it. The KV cache stays the size the server set.
//   - truncate (default true) drops the oldest non-system messages of an
//     /api/chat history that does not fit (see olPrepare); the reply's
//     truncated_messages counts them, and the server logs it. With
//     truncate false such a history is a 400 context_length_exceeded.
//     On /api/generate, truncate drops the oldest tokens of a prompt that
//     does not fit, keeping its end, the template and any suffix (see
//     olGenerateRequest.prepare); the reply says truncated: true.

// ollamaVersion is the version of the Ollama API lem speaks, which
// /api/version reports: clients compare it to decide what to send.
const ollamaVersion = "0.17.4"

// ollamaRoot answers GET / (and HEAD): a browser (asking for HTML) gets
// the chat page; other clients, Ollama's among them, the liveness text.
func (s *Server) ollamaRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	if webui.WantsPage(r) {
		webui.ServePage(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("lem is running"))
}

// ollamaErrors writes an error in Ollama's shape: {"error": "…"}.
func ollamaErrors(w http.ResponseWriter, e *Error) {
	setRetryAfter(w, e)
	writeJSON(w, e.Status, map[string]string{"error": e.Error()})
}

// ollamaName is the name:tag under which Ollama clients see a model.
func ollamaName(id string) string {
	if strings.Contains(id, ":") {
		return id
	}
	return id + ":latest"
}

// ollamaModel finds the model a client names, with or without the
// ":latest" tag; an empty name gives the default model, and any name the
// only model when one is served.
func (s *Server) ollamaModel(name string) (*Model, error) {
	if s.reg != nil {
		return s.Model(name)
	}
	name = strings.TrimSpace(name)
	if name == "" || len(s.models) == 1 {
		return s.models[0], nil
	}
	if m := s.byID[name]; m != nil {
		return m, nil
	}
	if base, ok := strings.CutSuffix(name, ":latest"); ok {
		if m := s.byID[base]; m != nil {
			return m, nil
		}
	}
	return nil, &Error{Status: http.StatusNotFound, Code: CodeModelNotFound,
		Message: fmt.Sprintf("model %q not found", name)}
}

// ollamaModelFor is ollamaModel for the request r, which holds the model
// (with a registry, loading it if need be) until its handler returns,
// and keeps it loaded afterwards as keepAlive says (Ollama's keep_alive).
func (s *Server) ollamaModelFor(r *http.Request, name string, keepAlive json.RawMessage) (*Model, error) {
	if s.reg == nil {
		return s.ollamaModel(name)
	}
	d, err := parseKeepAlive(keepAlive)
	if err != nil {
		return nil, err
	}
	m, err := s.acquireModel(r, name)
	if err != nil {
		return nil, err
	}
	setKeepAlive(r, d)
	return m, nil
}

// canThink reports whether the model reasons (its template has thinking
// markers, or its format a reasoning channel).
func (m *Model) canThink() bool {
	return m.format.Reasons()
}

// canCallTools reports whether the model's template writes tool calls.
func (m *Model) canCallTools() bool {
	return m.eng.Templates != nil && m.format.Tools != nil
}

// olCommon are the fields /api/chat and /api/generate share.
type olCommon struct {
	Model       string                     `json:"model"`
	Stream      *bool                      `json:"stream"`
	Format      json.RawMessage            `json:"format"`
	KeepAlive   json.RawMessage            `json:"keep_alive"`
	Options     map[string]json.RawMessage `json:"options"`
	Think       json.RawMessage            `json:"think"`
	Logprobs    bool                       `json:"logprobs"`
	TopLogprobs int                        `json:"top_logprobs"`
	// Truncate, when not false, lets a chat history that does not fit
	// lose its oldest messages (see olPrepare).
	Truncate *bool `json:"truncate"`
	// Shift is accepted and ignored.
	Shift json.RawMessage `json:"shift"`
}

// fit returns how the request fits its prompt: options.num_ctx, clamped
// to the served context (unset, zero or negative: the served context),
// and truncate.
func (c *olCommon) fit(m *Model) (olFit, error) {
	f := olFit{ctx: m.ctxLen, truncate: c.Truncate == nil || *c.Truncate}
	raw := bytes.TrimSpace(c.Options["num_ctx"])
	if len(raw) == 0 || string(raw) == "null" {
		return f, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil || v != math.Trunc(v) {
		return f, invalid("options.num_ctx", "want an integer, got %s", raw)
	}
	if v > 0 && v < float64(m.ctxLen) {
		f.ctx = int(v)
	}
	return f, nil
}

// stream reports whether the reply is streamed (Ollama's default).
func (c *olCommon) stream() bool { return c.Stream == nil || *c.Stream }

// unload reports whether keep_alive asks to unload the model (0).
func (c *olCommon) unload() bool {
	k := string(bytes.TrimSpace(c.KeepAlive))
	return k == "0" || k == `"0"` || k == `"0s"` || k == `"0m"`
}

// apply sets the request's sampling, stops, logprobs, thinking and JSON
// mode, and returns the token bound (num_predict; 0: none).
func (c *olCommon) apply(m *Model, req *Request) (int, error) {
	limit, err := olOptions(c.Options, req)
	if err != nil {
		return 0, err
	}
	req.Logprobs, req.TopLogprobs = c.Logprobs || c.TopLogprobs > 0, c.TopLogprobs
	if req.JSON, req.Schema, err = olFormat(c.Format); err != nil {
		return 0, err
	}
	kw, err := olThink(c.Think)
	if err != nil {
		return 0, err
	}
	if on, _ := kw["enable_thinking"].(bool); on && !m.canThink() {
		return 0, invalid("think", "%q does not support thinking", ollamaName(m.id))
	}
	req.Kwargs = kw
	return limit, nil
}

// olThink reads think: true, false, or "high", "medium", "low" (thinking
// on at that effort). Left out, the template's default holds.
func olThink(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return map[string]any{"enable_thinking": b}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "high", "medium", "low":
			return map[string]any{"enable_thinking": true, "reasoning_effort": s}, nil
		}
	}
	return nil, invalid("think", "want true, false, \"high\", \"medium\" or \"low\", got %s", raw)
}

// olFormat reads format: "json" (a reply that is one JSON object) or a
// JSON schema (a reply the schema accepts).
func olFormat(raw json.RawMessage) (bool, *constrain.Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` {
		return false, nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "json" {
			return true, nil, nil
		}
		return false, nil, invalid("format", "want \"json\" or a JSON schema, got %q", s)
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return false, nil, invalid("format", "want \"json\" or a JSON schema object")
	}
	schema, err := compileSchema(raw, "format", false)
	return false, schema, err
}

// olIgnored are options of Ollama's runner and samplers lem does not
// have; they are accepted and have no effect.
var olIgnored = map[string]bool{
	"num_keep": true, "typical_p": true, "tfs_z": true, "mirostat": true,
	"mirostat_tau": true, "mirostat_eta": true, "penalize_newline": true, "numa": true,
	"num_batch": true, "num_gpu": true, "main_gpu": true, "low_vram": true, "f16_kv": true,
	"vocab_only": true, "use_mmap": true, "use_mlock": true, "num_thread": true,
	"logits_all": true, "embedding_only": true, "num_gqa": true, "rope_frequency_base": true,
	"rope_frequency_scale": true,
}

// olParams are the Ollama names of core fields: sampling parameters and
// stop sequences are options.
var olParams = map[string]string{
	"temperature": "options.temperature", "top_p": "options.top_p", "min_p": "options.min_p",
	"top_k": "options.top_k", "repetition_penalty": "options.repeat_penalty",
	"presence_penalty": "options.presence_penalty", "frequency_penalty": "options.frequency_penalty",
	"stop": "options.stop",
}

// olOptions applies options to req and returns num_predict as a bound
// (0: none; Ollama's -1 and -2 mean none too). Unknown options are
// ignored, as Ollama does; a known option of the wrong type is an error.
func olOptions(opts map[string]json.RawMessage, req *Request) (int, error) {
	limit := 0
	disablePenalties := false
	for key, raw := range opts {
		raw = bytes.TrimSpace(raw)
		if string(raw) == "null" || olIgnored[key] || key == "num_ctx" {
			continue
		}
		where := "options." + key
		num := func() (float64, error) {
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return 0, invalid(where, "want a number, got %s", raw)
			}
			return v, nil
		}
		integer := func() (int, error) {
			v, err := num()
			if err != nil {
				return 0, err
			}
			if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
				return 0, invalid(where, "want an integer, got %s", raw)
			}
			return int(v), nil
		}
		p := &req.Sample
		var err error
		switch key {
		case "num_predict":
			var n int
			n, err = integer()
			limit = max(n, 0)
		case "temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty":
			var v float64
			if v, err = num(); err != nil {
				break
			}
			dst := &p.Temperature
			switch key {
			case "top_p":
				dst = &p.TopP
			case "min_p":
				dst = &p.MinP
			case "repeat_penalty":
				dst = &p.RepetitionPenalty
			case "presence_penalty":
				dst = &p.PresencePenalty
			case "frequency_penalty":
				dst = &p.FrequencyPenalty
			}
			*dst = float32(v)
		case "top_k":
			var k int
			k, err = integer()
			p.TopK = k
		case "seed":
			var seed int
			if seed, err = integer(); err == nil && seed >= 0 {
				p.Seed, p.HasSeed = uint64(seed), true
			}
		case "repeat_last_n":
			var n int
			if n, err = integer(); err == nil {
				switch {
				case n > 0:
					p.PenaltyWindow = n
				case n == 0:
					disablePenalties = true
				default:
					p.PenaltyWindow = 0 // -1: the whole context
				}
			}
		case "stop":
			var stops stringList
			if json.Unmarshal(raw, &stops) != nil {
				return 0, invalid(where, "want an array of strings")
			}
			req.Stop = stops
		}
		if err != nil {
			return 0, err
		}
	}
	if disablePenalties {
		req.Sample.RepetitionPenalty, req.Sample.PresencePenalty, req.Sample.FrequencyPenalty = 0, 0, 0
	}
	return limit, nil
}

// olMessage is a chat message as Ollama clients send it.
type olMessage struct {
	Role       string            `json:"role"`
	Content    string            `json:"content"`
	Thinking   string            `json:"thinking"`
	Images     []json.RawMessage `json:"images"`
	ToolCalls  []olToolCall      `json:"tool_calls"`
	ToolName   string            `json:"tool_name"`
	ToolCallID string            `json:"tool_call_id"`
}

// olToolCall is a tool call, its arguments an object.
type olToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// olChatRequest is an /api/chat request.
type olChatRequest struct {
	olCommon
	olChatFields
}

type olChatFields struct {
	Messages []olMessage       `json:"messages"`
	Tools    []json.RawMessage `json:"tools"`
}

// UnmarshalJSON decodes the shared and the chat fields apart, so that
// type errors name fields as clients spell them.
func (o *olChatRequest) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &o.olCommon); err != nil {
		return err
	}
	return json.Unmarshal(data, &o.olChatFields)
}

// toRequest converts the chat request into a core request and returns
// the token bound.
func (o *olChatRequest) toRequest(m *Model) (*Request, int, error) {
	req := &Request{Sample: m.SampleDefaults(), MaxTokensParam: "options.num_predict", Params: olParams}
	req.Messages = make([]chat.Message, len(o.Messages))
	for i, msg := range o.Messages {
		where := fmt.Sprintf("messages[%d]", i)
		if err := checkRole(msg.Role, where+".role", ollamaRoles); err != nil {
			return nil, 0, err
		}
		if len(msg.Images) > 0 {
			return nil, 0, invalid(where+".images", "images are not supported: this server takes text only")
		}
		cm := chat.Message{Role: msg.Role, Content: chat.Text(msg.Content), ReasoningContent: msg.Thinking,
			Name: msg.ToolName, ToolCallID: msg.ToolCallID}
		for j, tc := range msg.ToolCalls {
			if tc.Function.Name == "" {
				return nil, 0, invalid(fmt.Sprintf("%s.tool_calls[%d].function.name", where, j), "is required")
			}
			args := bytes.TrimSpace(tc.Function.Arguments)
			switch {
			case len(args) == 0 || string(args) == "null":
				args = []byte("{}")
			case args[0] != '{' && args[0] != '"': // a string holding JSON is taken too
				return nil, 0, invalid(fmt.Sprintf("%s.tool_calls[%d].function.arguments", where, j), "must be a JSON object")
			}
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(args)})
		}
		req.Messages[i] = cm
	}
	if len(o.Tools) > 0 {
		if !m.canCallTools() {
			return nil, 0, invalid("tools", "%q does not support tools", ollamaName(m.id))
		}
		for i, t := range o.Tools {
			if toolName(t) == "" {
				return nil, 0, invalid(fmt.Sprintf("tools[%d]", i), "want {\"type\": \"function\", \"function\": {\"name\": …, \"parameters\": …}}")
			}
		}
		req.Tools = o.Tools
	}
	limit, err := o.apply(m, req)
	return req, limit, err
}

// olGenerateRequest is an /api/generate request.
type olGenerateRequest struct {
	olCommon
	olGenerateFields
}

// UnmarshalJSON decodes the shared and the generate fields apart (see
// olChatRequest).
func (o *olGenerateRequest) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &o.olCommon); err != nil {
		return err
	}
	return json.Unmarshal(data, &o.olGenerateFields)
}

type olGenerateFields struct {
	Prompt   string            `json:"prompt"`
	Suffix   string            `json:"suffix"`
	System   string            `json:"system"`
	Template string            `json:"template"`
	Context  []int             `json:"context"`
	Raw      bool              `json:"raw"`
	Images   []json.RawMessage `json:"images"`
}

// toRequest converts the generate request: the prompt as a user message
// (after system) through the chat template, or verbatim when raw.
func (o *olGenerateRequest) toRequest(m *Model) (*Request, int, error) {
	switch {
	case o.Template != "":
		return nil, 0, invalid("template", "is not supported: lem renders prompts with the model's own chat template (or none, with raw)")
	case len(o.Context) > 0:
		return nil, 0, invalid("context", "is not supported (Ollama deprecates it): send the conversation to /api/chat")
	case len(o.Images) > 0:
		return nil, 0, invalid("images", "images are not supported: this server takes text only")
	}
	req := &Request{Sample: m.SampleDefaults(), MaxTokensParam: "options.num_predict", Params: olParams}
	switch {
	case o.Suffix != "":
		// Fill in the middle: the prompt is the text before the gap, the
		// suffix the text after it, in the model's FIM markers (no chat
		// template, as Ollama's code templates do).
		ids, err := m.fimPrompt(o.Prompt, o.Suffix, "prompt", "suffix")
		if err != nil {
			return nil, 0, err
		}
		req.PromptIDs, req.PromptParam = ids, "prompt"
	case o.Raw || m.eng.Templates == nil:
		req.Prompt = o.System + o.Prompt
		req.PromptParam = "prompt"
	default:
		if o.System != "" {
			req.Messages = append(req.Messages, chat.Message{Role: "system", Content: chat.Text(o.System)})
		}
		req.Messages = append(req.Messages, chat.Message{Role: "user", Content: chat.Text(o.Prompt)})
		req.PromptParam = "prompt"
	}
	limit, err := o.apply(m, req)
	return req, limit, err
}

// olMetrics are the timings and counts of a finished generation, in
// nanoseconds as Ollama reports them.
type olMetrics struct {
	TotalDuration      int64 `json:"total_duration"`
	LoadDuration       int64 `json:"load_duration"`
	PromptEvalCount    int   `json:"prompt_eval_count"`
	PromptEvalDuration int64 `json:"prompt_eval_duration"`
	EvalCount          int   `json:"eval_count"`
	EvalDuration       int64 `json:"eval_duration"`
}

// olTimer times a generation from its events. load_duration is the wait
// for the model (lem keeps models loaded, so it is time in the queue);
// prompt evaluation runs from admission to the first output, evaluation
// from there to the end.
type olTimer struct {
	arrived, admitted, first, end time.Time
}

func (t *olTimer) mark(ev Event) {
	now := time.Now()
	switch ev.Kind {
	case EventQueued, EventKeepAlive:
	case EventStart:
		t.admitted = now
	case EventEnd:
		t.end = now
	default:
		if t.first.IsZero() {
			t.first = now
		}
	}
}

func (t *olTimer) metrics(u Usage) *olMetrics {
	now := time.Now()
	admitted, end := t.admitted, t.end
	if admitted.IsZero() {
		admitted = now
	}
	if end.IsZero() {
		end = now
	}
	first := t.first
	if first.IsZero() {
		first = end
	}
	return &olMetrics{
		TotalDuration:      now.Sub(t.arrived).Nanoseconds(),
		LoadDuration:       admitted.Sub(t.arrived).Nanoseconds(),
		PromptEvalCount:    u.PromptTokens,
		PromptEvalDuration: first.Sub(admitted).Nanoseconds(),
		EvalCount:          u.CompletionTokens,
		EvalDuration:       end.Sub(first).Nanoseconds(),
	}
}

// olDoneReason maps a finish reason to done_reason.
func olDoneReason(finish string) string {
	switch finish {
	case FinishLength:
		return "length"
	case FinishContentFilter:
		return FinishContentFilter
	}
	return "stop"
}

// olMessageOut is the assistant message of a chat reply.
type olMessageOut struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Thinking  string          `json:"thinking,omitempty"`
	ToolCalls []olToolCallOut `json:"tool_calls,omitempty"`
}

// olToolCallOut is a tool call of a reply.
type olToolCallOut struct {
	ID       string `json:"id"`
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

func olToolCalls(calls []ToolCall) []olToolCallOut {
	if len(calls) == 0 {
		return nil
	}
	out := make([]olToolCallOut, len(calls))
	for i, c := range calls {
		out[i].ID = c.ID
		out[i].Function.Index, out[i].Function.Name, out[i].Function.Arguments = c.Index, c.Name, c.Arguments
	}
	return out
}

// olLogprob is a token's log-probability in Ollama's shape.
type olLogprob struct {
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes,omitempty"`
	TopLogprobs []olTopLogprob `json:"top_logprobs,omitempty"`
}

type olTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes,omitempty"`
}

func olLogprobs(lps []TokenLogprob) []olLogprob {
	if lps == nil {
		return nil
	}
	out := make([]olLogprob, len(lps))
	for i, lp := range lps {
		o := olLogprob{Token: lp.Token, Logprob: finiteLogprob(lp.Logprob), Bytes: tokenBytes(lp.Token)}
		for _, t := range lp.Top {
			o.TopLogprobs = append(o.TopLogprobs, olTopLogprob{Token: t.Token, Logprob: finiteLogprob(t.Logprob), Bytes: tokenBytes(t.Token)})
		}
		out[i] = o
	}
	return out
}

// olChatResponse is an /api/chat reply or chunk.
type olChatResponse struct {
	Model      string       `json:"model"`
	CreatedAt  time.Time    `json:"created_at"`
	Message    olMessageOut `json:"message"`
	Done       bool         `json:"done"`
	DoneReason string       `json:"done_reason,omitempty"`
	Logprobs   []olLogprob  `json:"logprobs,omitempty"`
	// TruncatedMessages counts the oldest messages dropped so that the
	// history fits the context (lem's own field; Ollama only logs it).
	TruncatedMessages int `json:"truncated_messages,omitempty"`
	*olMetrics
}

// olGenerateResponse is an /api/generate reply or chunk.
type olGenerateResponse struct {
	Model      string          `json:"model"`
	CreatedAt  time.Time       `json:"created_at"`
	Response   string          `json:"response"`
	Thinking   string          `json:"thinking,omitempty"`
	ToolCalls  []olToolCallOut `json:"tool_calls,omitempty"`
	Done       bool            `json:"done"`
	DoneReason string          `json:"done_reason,omitempty"`
	Logprobs   []olLogprob     `json:"logprobs,omitempty"`
	// Truncated says the oldest part of the prompt was dropped so that it
	// fits the context (lem's own field).
	Truncated bool `json:"truncated,omitempty"`
	*olMetrics
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	t := olTimer{arrived: time.Now()}
	var o olChatRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	m, err := s.ollamaModelFor(r, o.Model, o.KeepAlive)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	if m.enc != nil {
		// Before a load request's answer too, as Ollama refuses
		// generation on an embedding model.
		ollamaErrors(w, m.errEmbeddingOnly())
		return
	}
	name := o.Model
	if name == "" {
		name = ollamaName(m.id)
	}
	if len(o.Messages) == 0 {
		// Ollama's way to load (or, with keep_alive 0, unload) a model.
		reason := "load"
		if o.unload() {
			reason = "unload"
		}
		writeJSON(w, http.StatusOK, olChatResponse{Model: name, CreatedAt: time.Now().UTC(),
			Message: olMessageOut{Role: "assistant"}, Done: true, DoneReason: reason})
		return
	}
	req, limit, err := o.toRequest(m)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	fit, err := o.fit(m)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	noteUnenforced(w, req)
	s.olRun(w, r, m, func() (*Prepared, int, error) { return olPrepare(r.Context(), m, req, limit, fit) }, fit, &t, newOlEncoder(name, true), o.stream())
}

func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request) {
	t := olTimer{arrived: time.Now()}
	var o olGenerateRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	m, err := s.ollamaModelFor(r, o.Model, o.KeepAlive)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	if m.enc != nil {
		// Before a load request's answer too, as Ollama refuses
		// generation on an embedding model.
		ollamaErrors(w, m.errEmbeddingOnly())
		return
	}
	name := o.Model
	if name == "" {
		name = ollamaName(m.id)
	}
	if o.Prompt == "" && o.System == "" && o.Template == "" {
		reason := "load"
		if o.unload() {
			reason = "unload"
		}
		writeJSON(w, http.StatusOK, olGenerateResponse{Model: name, CreatedAt: time.Now().UTC(), Done: true, DoneReason: reason})
		return
	}
	fit, err := o.fit(m)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	req, limit, err := o.toRequest(m)
	if err != nil && AsError(err).Code != CodeContextExceeded {
		ollamaErrors(w, AsError(err))
		return
	}
	if req != nil {
		noteUnenforced(w, req)
	}
	s.olRun(w, r, m, func() (*Prepared, int, error) { return o.prepare(r.Context(), m, req, limit, err, fit) }, fit, &t, newOlEncoder(name, false), o.stream())
}

// olRun generates a chat or generate reply, streamed as NDJSON chunks
// ended by one with done: true and the metrics, or whole. prepare
// prepares the request within fit and returns what it dropped to fit:
// messages of a chat, prompt bytes of a generate request.
func (s *Server) olRun(w http.ResponseWriter, r *http.Request, m *Model, prepare func() (*Prepared, int, error), fit olFit, t *olTimer, enc *olEncoder, streamed bool) {
	p, dropped, err := prepare()
	if err != nil {
		e := AsError(err)
		if e.Code == CodeContextExceeded && !fit.truncate {
			c := *e
			c.Message += " (truncate is false: the prompt is not shortened to fit)"
			e = &c
		}
		ollamaErrors(w, e)
		return
	}
	if dropped > 0 {
		if enc.chat {
			s.log.Info("chat history truncated to fit the context", "request_id", RequestID(r.Context()), "model", m.id,
				"dropped_messages", dropped, "prompt_tokens", p.PromptTokens(), "context", fit.ctx)
		} else {
			s.log.Info("prompt truncated to fit the context", "request_id", RequestID(r.Context()), "model", m.id,
				"dropped_bytes", dropped, "prompt_tokens", p.PromptTokens(), "context", fit.ctx)
		}
		enc.truncated = dropped
	}
	if !streamed {
		res, err := m.Generate(r.Context(), p, func(ev Event) error { t.mark(ev); return nil })
		if err != nil {
			s.generationFailed(w, r, err, ollamaErrors)
			return
		}
		c := res.Choices[0]
		met := t.metrics(res.Usage)
		now := time.Now().UTC()
		if enc.chat {
			writeJSON(w, http.StatusOK, olChatResponse{Model: enc.model, CreatedAt: now, Done: true, DoneReason: olDoneReason(c.Finish),
				Message:  olMessageOut{Role: "assistant", Content: c.Content, Thinking: c.Reasoning, ToolCalls: olToolCalls(c.ToolCalls)},
				Logprobs: olLogprobs(c.Logprobs), TruncatedMessages: enc.truncated, olMetrics: met})
		} else {
			writeJSON(w, http.StatusOK, olGenerateResponse{Model: enc.model, CreatedAt: now, Done: true, DoneReason: olDoneReason(c.Finish),
				Response: c.Content, Thinking: c.Reasoning, ToolCalls: olToolCalls(c.ToolCalls), Logprobs: olLogprobs(c.Logprobs),
				Truncated: enc.truncated > 0, olMetrics: met})
		}
		return
	}
	st := newStream(w)
	defer st.close()
	var finish string
	res, err := m.Generate(r.Context(), p, func(ev Event) error {
		t.mark(ev)
		switch ev.Kind {
		case EventQueued, EventKeepAlive:
			return st.wait(ev, "application/x-ndjson", enc.text(false, "", nil))
		case EventStart:
			return st.start("application/x-ndjson")
		case EventContent:
			return st.write(enc.text(false, ev.Text, ev.Logprobs))
		case EventReasoning:
			return st.write(enc.text(true, ev.Text, ev.Logprobs))
		case EventToolCall:
			return st.write(enc.toolCall(ev.Call, ev.Logprobs))
		case EventEnd:
			finish = ev.Finish
			if ev.Logprobs != nil {
				// Logprobs of tokens that produced no text.
				return st.write(enc.text(false, "", ev.Logprobs))
			}
		}
		return nil
	})
	if err != nil {
		if !st.started {
			s.generationFailed(w, r, err, ollamaErrors)
		} else if r.Context().Err() == nil {
			data, _ := json.Marshal(map[string]string{"error": AsError(err).Error()})
			st.write(append(data, '\n'))
		}
		return
	}
	st.write(enc.done(olDoneReason(finish), t.metrics(res.Usage)))
}

// olFit is how a request fits its prompt into the context.
type olFit struct {
	ctx      int  // the request's context: options.num_ctx, at most the served one
	truncate bool // drop the oldest messages of a chat history that does not fit
}

// reserve is the room for output a truncated prompt leaves: num_predict
// (limit; 0: unset, then olReserve), at most a quarter of the context.
func (f olFit) reserve(limit int) int {
	if limit > 0 {
		return min(limit, f.ctx/4)
	}
	return min(olReserve, f.ctx/4)
}

// olReserve is the room for output a truncated history leaves when
// num_predict does not say: this many tokens, at most a quarter of the
// context.
const olReserve = 1024

// olPrepare prepares a request within its context fit.ctx: the prompt must
// leave room for output there, and the output is cut to what it leaves.
//
// When a chat history does not fit, or leaves less room for output than
// num_predict (or olReserve when unset; either at most a quarter of the
// context), and fit.truncate holds, the oldest non-system messages are
// dropped: whole turns, so that what is kept starts at a user message
// (or is the last message alone), and the system messages and the last
// message always stay. The longest history that leaves that room is
// kept; failing that, the longest that fits at all. It returns the
// number of messages dropped.
func olPrepare(ctx context.Context, m *Model, req *Request, limit int, fit olFit) (*Prepared, int, error) {
	reserve := fit.reserve(limit)
	try := func(r *Request) (*Prepared, error) {
		p, err := prepareBounded(ctx, m, r, limit)
		if err != nil {
			return nil, err
		}
		if n := p.PromptTokens(); n >= fit.ctx {
			promptParam := param(r.PromptParam, "prompt")
			if len(r.Messages) > 0 {
				promptParam = param(r.PromptParam, "messages")
			}
			return nil, &Error{Status: http.StatusBadRequest, Code: CodeContextExceeded, Param: promptParam,
				Message: fmt.Sprintf("the prompt has %d tokens; the request's context (options.num_ctx, at most the server's %d) holds %d, leaving no room for output",
					n, m.ctxLen, fit.ctx)}
		}
		p.maxTokens = min(p.maxTokens, fit.ctx-p.PromptTokens())
		return p, nil
	}
	full := req.Messages
	p, err := try(req)
	roomy := func(p *Prepared) bool { return p.PromptTokens()+reserve <= fit.ctx }
	if err == nil && roomy(p) {
		return p, 0, nil
	}
	if err != nil && AsError(err).Code != CodeContextExceeded {
		return nil, 0, err
	}
	cuts := olCuts(full)
	if !fit.truncate || len(cuts) == 0 {
		return p, 0, err
	}
	// Each cut keeps less than the one before; the prompt shrinks with it.
	type attempt struct {
		p   *Prepared
		err error
	}
	tried := map[int]attempt{}
	at := func(i int) attempt {
		if a, ok := tried[i]; ok {
			return a
		}
		r := *req
		r.Messages = olKeep(full, cuts[i])
		p, err := try(&r)
		tried[i] = attempt{p, err}
		return tried[i]
	}
	// search finds the first cut whose prompt passes ok, or -1.
	search := func(ok func(*Prepared) bool) (int, error) {
		lo, hi := 0, len(cuts)
		for lo < hi {
			mid := (lo + hi) / 2
			a := at(mid)
			if a.err != nil && AsError(a.err).Code != CodeContextExceeded {
				return 0, a.err
			}
			if a.err == nil && ok(a.p) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if lo == len(cuts) {
			return -1, nil
		}
		return lo, nil
	}
	i, err2 := search(roomy)
	if err2 != nil {
		return nil, 0, err2
	}
	if i < 0 {
		if err == nil {
			// The whole history fits, if tightly, and no cut gives it
			// more room: keep it.
			return p, 0, nil
		}
		if i, err2 = search(func(*Prepared) bool { return true }); err2 != nil {
			return nil, 0, err2
		}
		if i < 0 {
			return nil, 0, at(len(cuts) - 1).err
		}
	}
	return at(i).p, olDropped(full, cuts[i]), nil
}

// prepare prepares a generate request within fit. When its prompt does
// not leave room for output (as olPrepare reckons it) and fit.truncate
// holds, the oldest tokens of the prompt text are dropped, as Ollama's
// runner drops the oldest tokens of a prompt too long for its context:
// the template around it, system and (filling in the middle) the suffix
// stay, and the end of the prompt is kept. The longest end that leaves
// that room is kept; failing that, the longest that fits at all. It
// returns the number of the prompt's bytes dropped.
//
// req is the request toRequest made, or nil with its error when the
// prompt was too long to encode whole.
func (o *olGenerateRequest) prepare(ctx context.Context, m *Model, req *Request, limit int, err error, fit olFit) (*Prepared, int, error) {
	var p *Prepared
	if req != nil {
		p, _, err = olPrepare(ctx, m, req, limit, fit)
	}
	roomy := func(p *Prepared) bool { return p.PromptTokens()+fit.reserve(limit) <= fit.ctx }
	if err == nil && roomy(p) || err != nil && AsError(err).Code != CodeContextExceeded || !fit.truncate || o.Prompt == "" {
		return p, 0, err
	}
	toks, whole := olTail(m.eng.Tokenizer, o.Prompt, fit.ctx)
	type attempt struct {
		p      *Prepared
		err    error
		prompt string
	}
	tried := map[int]attempt{}
	// The welfare guard decides once for all the cuts.
	var welfare *welfareOutcome
	if req != nil {
		welfare = req.welfare
	}
	// at prepares the request with the last keep tokens of the prompt.
	at := func(keep int) attempt {
		if a, ok := tried[keep]; ok {
			return a
		}
		short := *o
		// A cut inside a character leaves its tail bytes undecodable.
		short.Prompt = strings.TrimLeft(m.eng.Tokenizer.Decode(toks[len(toks)-keep:], false), "\uFFFD")
		r, _, err := short.toRequest(m)
		var p *Prepared
		if err == nil {
			r.welfare = welfare
			p, _, err = olPrepare(ctx, m, r, limit, fit)
			welfare = r.welfare
		}
		tried[keep] = attempt{p, err, short.Prompt}
		return tried[keep]
	}
	// search finds the most tokens to keep (at least one, at most those
	// of the whole prompt less one, and of the context) whose prompt
	// passes ok, or 0.
	search := func(ok func(*Prepared) bool) (int, error) {
		lo, hi := 0, min(len(toks), fit.ctx)
		if whole {
			hi = min(hi, len(toks)-1)
		}
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			a := at(mid)
			if a.err != nil && AsError(a.err).Code != CodeContextExceeded {
				return 0, a.err
			}
			if a.err == nil && ok(a.p) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo, nil
	}
	keep, err2 := search(roomy)
	if err2 != nil {
		return nil, 0, err2
	}
	if keep == 0 {
		if err == nil {
			// The whole prompt fits, if tightly, and no cut leaves it
			// the room: keep it.
			return p, 0, nil
		}
		if keep, err2 = search(func(*Prepared) bool { return true }); err2 != nil {
			return nil, 0, err2
		}
		if keep == 0 {
			return nil, 0, err
		}
	}
	return tried[keep].p, len(o.Prompt) - len(tried[keep].prompt), nil
}

// olTail encodes the end of prompt: at least ctx+1 tokens of it, or all of
// it (whole), so that a prompt of many megabytes is not tokenized whole to
// keep its last few thousand tokens. Where the window of text does not
// start the prompt, its first token, which may be cut from a longer one,
// is left out.
func olTail(tok *tokenizer.Tokenizer, prompt string, ctx int) (toks []int32, whole bool) {
	for w := 16 * (ctx + 1); ; w *= 4 {
		if w >= len(prompt) {
			return tok.EncodePlain(prompt, false), true
		}
		start := len(prompt) - w
		for start < len(prompt) && !utf8.RuneStart(prompt[start]) {
			start++
		}
		if toks = tok.EncodePlain(prompt[start:], false); len(toks) > ctx+1 {
			return toks[1:], false
		}
	}
}

// olCuts lists, in order, where a chat history may be cut so that what is
// kept (the system messages before it and everything from it) starts a
// turn: each user message after a non-system one, and the last message.
func olCuts(msgs []chat.Message) []int {
	var cuts []int
	seen := false
	for i, msg := range msgs {
		if seen && (msg.Role == "user" || i == len(msgs)-1) {
			cuts = append(cuts, i)
		}
		if msg.Role != "system" {
			seen = true
		}
	}
	return cuts
}

// olKeep returns the system messages of msgs before cut, then msgs from it.
func olKeep(msgs []chat.Message, cut int) []chat.Message {
	var kept []chat.Message
	for _, msg := range msgs[:cut] {
		if msg.Role == "system" {
			kept = append(kept, msg)
		}
	}
	return append(kept, msgs[cut:]...)
}

// olDropped counts the messages olKeep drops.
func olDropped(msgs []chat.Message, cut int) int {
	return cut - (len(olKeep(msgs, cut)) - (len(msgs) - cut))
}

// olEncoder encodes the chunks of a streamed chat or generate reply.
// Text chunks are appended by hand into a reused buffer: encoding one
// allocates nothing.
type olEncoder struct {
	model string
	chat  bool   // /api/chat chunks (a message) or /api/generate (response)
	head  []byte // {"model":…,"created_at":"
	buf   []byte

	// truncated counts the messages dropped from a chat history, or the
	// bytes from a generate prompt, reported in the last chunk.
	truncated int
}

func newOlEncoder(model string, chat bool) *olEncoder {
	head := appendJSONString([]byte(`{"model":`), model)
	head = append(head, `,"created_at":"`...)
	return &olEncoder{model: model, chat: chat, head: head, buf: make([]byte, 0, 512)}
}

// start begins a chunk with the model and the time.
func (e *olEncoder) start() []byte {
	b := append(e.buf[:0], e.head...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// text encodes a chunk of reply text, or of thinking.
func (e *olEncoder) text(thinking bool, text string, lps []TokenLogprob) []byte {
	b := e.start()
	if e.chat {
		b = append(b, `,"message":{"role":"assistant","content":`...)
	} else {
		b = append(b, `,"response":`...)
	}
	if thinking {
		b = append(b, `"","thinking":`...)
	}
	b = appendJSONString(b, text)
	if e.chat {
		b = append(b, '}')
	}
	return e.end(b, lps)
}

func (e *olEncoder) end(b []byte, lps []TokenLogprob) []byte {
	if lps != nil {
		data, _ := json.Marshal(olLogprobs(lps))
		b = append(b, `,"logprobs":`...)
		b = append(b, data...)
	}
	b = append(b, `,"done":false}`+"\n"...)
	e.buf = b
	return b
}

// toolCall encodes a chunk holding one tool call.
func (e *olEncoder) toolCall(c *ToolCall, lps []TokenLogprob) []byte {
	data, _ := json.Marshal(olToolCalls([]ToolCall{*c}))
	b := e.start()
	if e.chat {
		b = append(b, `,"message":{"role":"assistant","content":"","tool_calls":`...)
		b = append(b, data...)
		b = append(b, '}')
	} else {
		b = append(b, `,"response":"","tool_calls":`...)
		b = append(b, data...)
	}
	return e.end(b, lps)
}

// done encodes the last chunk.
func (e *olEncoder) done(reason string, met *olMetrics) []byte {
	now := time.Now().UTC()
	var v any
	if e.chat {
		v = olChatResponse{Model: e.model, CreatedAt: now, Message: olMessageOut{Role: "assistant"}, Done: true, DoneReason: reason,
			TruncatedMessages: e.truncated, olMetrics: met}
	} else {
		v = olGenerateResponse{Model: e.model, CreatedAt: now, Done: true, DoneReason: reason, Truncated: e.truncated > 0, olMetrics: met}
	}
	data, _ := json.Marshal(v)
	return append(data, '\n')
}

// --- models ---

// olDetails are a model's details in /api/tags, /api/ps and /api/show.
type olDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// olListed is a model in /api/tags and /api/ps.
type olListed struct {
	Name          string     `json:"name"`
	Model         string     `json:"model"`
	ModifiedAt    *time.Time `json:"modified_at,omitempty"`
	Size          int64      `json:"size"`
	Digest        string     `json:"digest"`
	Details       olDetails  `json:"details"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	SizeVRAM      *int64     `json:"size_vram,omitempty"`
	ContextLength int        `json:"context_length,omitempty"`
}

// olModelList is the reply of /api/tags and /api/ps.
type olModelList struct {
	Models []olListed `json:"models"`
}

// paramCount estimates a model's parameters from its configuration:
// embeddings, attention, MLP (or experts) and the output head.
func (m *Model) paramCount() int64 {
	c := m.config()
	h, v := int64(c.HiddenSize), int64(c.VocabSize)
	heads, kv, hd := int64(c.NumAttentionHeads), int64(c.NumKeyValueHeads), int64(c.HeadDim)
	if kv == 0 {
		kv = heads
	}
	if hd == 0 && heads > 0 {
		hd = h / heads
	}
	attn := h*heads*hd*2 + h*kv*hd*2
	mlp := 3 * h * int64(c.IntermediateSize)
	if c.NumExperts > 0 && c.MoEIntermediateSize > 0 {
		mlp = 3*h*int64(c.MoEIntermediateSize)*int64(c.NumExperts) + h*int64(c.NumExperts) +
			3*h*int64(c.SharedExpertIntermediateSize)
	}
	n := v*h + int64(c.NumHiddenLayers)*(attn+mlp+2*h) + h
	if !c.TieWordEmbeddings {
		n += v * h
	}
	return n
}

// humanCount writes a count as Ollama's parameter sizes: 7.6B, 494.0M.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// olDescribe returns a model's listing: the size of its files and the
// digest of its weights (see describeStore), and its details as Ollama
// gives them.
func (m *Model) olDescribe() olListed {
	cfg := m.config()
	st := m.store()
	format := "safetensors"
	if st.gguf {
		format = "gguf"
	}
	quant := st.quant
	if quant == "" {
		quant = strings.ToUpper(map[string]string{"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[cfg.DType])
		if q := cfg.Quantization; q != nil {
			quant = "quantized"
			if q.Method != "" {
				quant = strings.ToUpper(q.Method)
			}
		}
	}
	if quant == "" {
		quant = "unknown"
	}
	created := m.created.UTC()
	return olListed{
		Name: ollamaName(m.id), Model: ollamaName(m.id), ModifiedAt: &created, Size: st.size,
		Digest: st.digest,
		Details: olDetails{Format: format, Family: cfg.ModelType, Families: []string{cfg.ModelType},
			ParameterSize: humanCount(m.paramCount()), QuantizationLevel: quant},
	}
}

func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	if s.reg != nil {
		models := []olListed{}
		for _, st := range s.reg.states() {
			if st.Loaded {
				models = append(models, st.model.olDescribe())
				continue
			}
			d := describeStore(st.Path)
			mod := time.Time{}
			if fi, err := os.Stat(st.Path); err == nil {
				mod = fi.ModTime().UTC()
			}
			models = append(models, olListed{Name: ollamaName(st.Name), Model: ollamaName(st.Name), ModifiedAt: &mod,
				Size: d.size, Digest: d.digest, Details: olDetails{Format: map[bool]string{true: "gguf", false: "safetensors"}[d.gguf], QuantizationLevel: d.quant}})
		}
		writeJSON(w, http.StatusOK, olModelList{Models: models})
		return
	}
	models := make([]olListed, len(s.models))
	for i, m := range s.models {
		models[i] = m.olDescribe()
	}
	writeJSON(w, http.StatusOK, olModelList{Models: models})
}

func (s *Server) ollamaPS(w http.ResponseWriter, r *http.Request) {
	if s.reg != nil {
		models := []olListed{}
		for _, st := range s.reg.states() {
			if !st.Loaded {
				continue
			}
			d := st.model.olDescribe()
			d.ModifiedAt = nil
			d.Size = st.Bytes
			exp := st.ExpiresAt
			if exp == nil {
				// Busy, pinned or kept forever: Ollama reports far ahead.
				far := time.Now().UTC().AddDate(100, 0, 0)
				exp = &far
			}
			d.ExpiresAt = exp
			vram := st.VRAM
			d.SizeVRAM = &vram
			d.ContextLength = st.model.ctxLen
			models = append(models, d)
		}
		writeJSON(w, http.StatusOK, olModelList{Models: models})
		return
	}
	// lem keeps its models loaded until it stops.
	expires := time.Now().UTC().AddDate(100, 0, 0)
	models := make([]olListed, len(s.models))
	for i, m := range s.models {
		d := m.olDescribe()
		d.ModifiedAt = nil
		d.ExpiresAt = &expires
		vram := int64(0)
		if strings.HasPrefix(strings.ToLower(m.eng.Backend.Name()), "cuda") {
			vram = d.Size
		}
		d.SizeVRAM = &vram
		d.ContextLength = m.ctxLen
		models[i] = d
	}
	writeJSON(w, http.StatusOK, olModelList{Models: models})
}

func (s *Server) ollamaVersionHandler(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
}

// olShowRequest is an /api/show request.
type olShowRequest struct {
	Model   string `json:"model"`
	Name    string `json:"name"`
	Verbose bool   `json:"verbose"`
}

func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	var o olShowRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	name := o.Model
	if name == "" {
		name = o.Name
	}
	if name == "" {
		ollamaErrors(w, invalid("model", "is required"))
		return
	}
	if s.reg != nil {
		// A model that is not loaded is described from its files: showing
		// it does not load it.
		if sp, loaded, err := s.reg.specOf(name); err != nil {
			ollamaErrors(w, AsError(err))
			return
		} else if !loaded {
			s.showFromFiles(w, sp)
			return
		}
	}
	m, err := s.ollamaModelFor(r, name, nil)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	d := m.olDescribe()
	cfg := m.config()
	arch := cfg.ModelType
	info := map[string]any{
		"general.architecture":                     arch,
		"general.basename":                         m.id,
		"general.parameter_count":                  m.paramCount(),
		arch + ".context_length":                   m.ctxLen, // served, not trained: what a prompt may fill
		arch + ".embedding_length":                 cfg.HiddenSize,
		arch + ".block_count":                      cfg.NumHiddenLayers,
		arch + ".feed_forward_length":              cfg.IntermediateSize,
		arch + ".attention.head_count":             cfg.NumAttentionHeads,
		arch + ".attention.head_count_kv":          cfg.NumKeyValueHeads,
		arch + ".attention.key_length":             cfg.HeadDim,
		arch + ".vocab_size":                       cfg.VocabSize,
		arch + ".attention.layer_norm_rms_epsilon": cfg.RMSNormEps,
	}
	if cfg.NumExperts > 0 {
		info[arch+".expert_count"] = cfg.NumExperts
		info[arch+".expert_used_count"] = cfg.NumExpertsPerTok
	}
	caps := []string{"completion"}
	if m.enc != nil {
		caps = []string{"embedding"}
	}
	if m.canCallTools() {
		caps = append(caps, "tools")
	}
	if m.canThink() {
		caps = append(caps, "thinking")
	}
	template := ""
	if m.eng.Templates != nil {
		if t := m.eng.Templates.Default(); t != nil {
			template = t.Source()
		}
	}
	if fim := m.olFIMTemplate(); fim != "" {
		// Ollama's clients (Continue, for one) offer fill-in-the-middle
		// when the template reads .Suffix, or the model has the insert
		// capability.
		caps = append(caps, "insert")
		body := template
		if body == "" {
			body = "{{ .Prompt }}"
		}
		template = fim + "{{- else }}" + body + "{{- end }}"
	}
	params := m.olParameters()
	var mf strings.Builder
	// The model's file or folder by its name only: where it lies on the
	// server's disk (the user's name, the folder layout) is no business of
	// the client's.
	fmt.Fprintf(&mf, "# Modelfile generated by lem\n# To build a new Modelfile based on this, replace FROM with:\n# FROM %s\n\nFROM %s\n", d.Name, filepath.Base(filepath.Clean(m.eng.Name)))
	if template != "" {
		fmt.Fprintf(&mf, "TEMPLATE \"\"\"%s\"\"\"\n", template)
	}
	for _, line := range strings.Split(strings.TrimSpace(params), "\n") {
		if line != "" {
			fmt.Fprintf(&mf, "PARAMETER %s\n", line)
		}
	}
	writeJSON(w, http.StatusOK, olShowResponse{
		Modelfile:    mf.String(),
		Parameters:   params,
		Template:     template,
		Details:      d.Details,
		ModelInfo:    info,
		Capabilities: caps,
		ModifiedAt:   d.ModifiedAt,
	})
}

// olShowResponse is the reply of /api/show. model_info's keys are
// GGUF-style metadata names, most under the architecture's prefix.
type olShowResponse struct {
	Modelfile    string         `json:"modelfile"`
	Parameters   string         `json:"parameters"`
	Template     string         `json:"template"`
	Details      olDetails      `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   *time.Time     `json:"modified_at"`
}

// olFIMTemplate returns, for a model whose tokenizer declares
// fill-in-the-middle tokens, the opening branch of an Ollama template that
// writes its FIM prompt when a request has a suffix:
//
//	{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>
//
// (with Codestral's markers, [SUFFIX]{{ .Suffix }}[PREFIX]{{ .Prompt }}),
// and "" for a model without them. /api/show puts the chat template (or
// the bare prompt) in its else branch. lem builds the prompt itself (see
// fimPrompt): the template tells clients what suffix does.
func (m *Model) olFIMTemplate() string {
	tok := m.eng.Tokenizer
	if tok == nil {
		return ""
	}
	f, ok := tok.FIM()
	if !ok {
		return ""
	}
	mark := func(id int32) string { return strings.TrimSpace(tok.Decode([]int32{id}, false)) }
	if f.SuffixFirst {
		return "{{- if .Suffix }}" + mark(f.Suffix) + "{{ .Suffix }}" + mark(f.Prefix) + "{{ .Prompt }}"
	}
	return "{{- if .Suffix }}" + mark(f.Prefix) + "{{ .Prompt }}" + mark(f.Suffix) + "{{ .Suffix }}" + mark(f.Middle)
}

// olParameters lists the served context (num_ctx), the model's default
// sampling parameters and stop tokens as a Modelfile's parameters.
func (m *Model) olParameters() string {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-30s %s\n", k, v) }
	line("num_ctx", strconv.Itoa(m.ctxLen))
	d := &m.defaults
	if len(d.Stop) > 0 {
		for _, t := range d.Stop {
			line("stop", strconv.Quote(t))
		}
	} else if tok := m.eng.Tokenizer; tok != nil {
		for _, id := range m.eng.StopIDs {
			if t := tok.Token(id); t != "" {
				line("stop", strconv.Quote(t))
			}
		}
	}
	p := m.SampleDefaults()
	g := m.eng.GenConfig
	if g == nil {
		g = &model.GenerationConfig{}
	}
	if g.Temperature != nil || (g.DoSample != nil && !*g.DoSample) || d.Temperature != nil {
		line("temperature", fmt.Sprint(p.Temperature))
	}
	if g.TopK != nil || d.TopK != nil {
		line("top_k", fmt.Sprint(p.TopK))
	}
	if g.TopP != nil || d.TopP != nil {
		line("top_p", fmt.Sprint(p.TopP))
	}
	if g.MinP != nil || d.MinP != nil {
		line("min_p", fmt.Sprint(p.MinP))
	}
	if g.RepetitionPenalty != nil || d.RepeatPenalty != nil {
		line("repeat_penalty", fmt.Sprint(p.RepetitionPenalty))
	}
	if d.MaxTokens != nil {
		line("num_predict", strconv.Itoa(*d.MaxTokens))
	}
	return b.String()
}
