package server

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lem-engine/lem/chat"
)

// responseStore keeps recent responses of /v1/responses so that a later
// request can continue one through previous_response_id. It holds at most
// max entries, forgetting the least recently used.
type responseStore struct {
	mu    sync.Mutex
	max   int
	order *list.List // of string ids, most recent at the front
	byID  map[string]*storedResponse
	items map[string]respItem // output item id → item, of the stored responses
}

// storedResponse is a response with the conversation that led to it.
type storedResponse struct {
	id       string
	elem     *list.Element
	messages []chat.Message // the whole conversation, its output included
	body     *respBody      // the response object as returned
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, order: list.New(), byID: map[string]*storedResponse{}, items: map[string]respItem{}}
}

func (s *responseStore) put(r *storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.byID[r.id]; old != nil {
		s.order.Remove(old.elem)
		s.forget(old)
	}
	r.elem = s.order.PushFront(r.id)
	s.byID[r.id] = r
	for _, it := range r.outputItems() {
		if id := it.itemID(); id != "" {
			s.items[id] = it
		}
	}
	for s.order.Len() > s.max {
		last := s.order.Back()
		s.order.Remove(last)
		id := last.Value.(string)
		s.forget(s.byID[id])
		delete(s.byID, id)
	}
}

// forget drops the output items of r from the item index.
func (s *responseStore) forget(r *storedResponse) {
	if r == nil {
		return
	}
	for _, it := range r.outputItems() {
		if id := it.itemID(); id != "" {
			delete(s.items, id)
		}
	}
}

// outputItems returns the output items of a stored response.
func (r *storedResponse) outputItems() []respItem {
	if r.body == nil {
		return nil
	}
	return r.body.Output
}

// item returns the output item of a stored response with the given id,
// encoded as an input item, or nil if no stored response holds it.
func (s *responseStore) item(id string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[id]
	if it == nil {
		return nil
	}
	data, err := json.Marshal(it)
	if err != nil {
		return nil
	}
	return data
}

func (s *responseStore) get(id string) *storedResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byID[id]
	if r != nil {
		s.order.MoveToFront(r.elem)
	}
	return r
}

func (s *responseStore) delete(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byID[id]
	if r == nil {
		return false
	}
	s.order.Remove(r.elem)
	s.forget(r)
	delete(s.byID, id)
	return true
}

// --- /v1/responses ---

type respRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	TopK               *int              `json:"top_k"`
	MinP               *float64          `json:"min_p"`
	Seed               *int64            `json:"seed"`
	Stream             bool              `json:"stream"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	PreviousResponseID string            `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	Reasoning          *struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Text *struct {
		Format *respTextFormat `json:"format"`
	} `json:"text"`
	Metadata           map[string]string          `json:"metadata"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// respTextFormat is the format of a response's text, as the request gives
// it and the response repeats it.
type respTextFormat struct {
	Type   string          `json:"type"`
	Name   string          `json:"name,omitempty"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Strict *bool           `json:"strict,omitempty"`
}

// respInputItem is one item of a Responses input list.
type respInputItem struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// respText returns the text of a Responses content value: a string, or a
// list of input_text / output_text parts.
func respText(raw json.RawMessage, where string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(where, "want a string or an array of content parts")
	}
	var b bytes.Buffer
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "reasoning_text":
			b.WriteString(p.Text)
		default:
			return "", invalid(fmt.Sprintf("%s[%d].type", where, i), "content of type %q is not supported: this server takes text only", p.Type)
		}
	}
	return b.String(), nil
}

// respMessages converts Responses input into chat messages. item returns
// the stored output item an item_reference names, or nil.
func respMessages(raw json.RawMessage, item func(id string) json.RawMessage) ([]chat.Message, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid("input", "is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []chat.Message{{Role: "user", Content: chat.Text(text)}}, nil
	}
	var items []respInputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "want a string or an array of input items")
	}
	var msgs []chat.Message
	names := map[string]string{} // call id → function name
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		// An item reference may leave its type out (the openai SDKs do):
		// then it is an id alone.
		if it.Type == "item_reference" || it.Type == "" && it.ID != "" && it.Role == "" && len(it.Content) == 0 {
			if it.ID == "" {
				return nil, invalid(where+".id", "is required")
			}
			var ref json.RawMessage
			if item != nil {
				ref = item(it.ID)
			}
			if ref == nil {
				return nil, invalid(where+".id", "no stored response holds an item with id %q (items are kept when store is true, until evicted or deleted)", it.ID)
			}
			it = respInputItem{}
			if err := json.Unmarshal(ref, &it); err != nil {
				return nil, fmt.Errorf("stored item %q: %w", items[i].ID, err)
			}
		}
		switch it.Type {
		case "", "message":
			if err := checkRole(it.Role, where+".role", responsesRoles); err != nil {
				return nil, err
			}
			t, err := respText(it.Content, where+".content")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chat.Message{Role: it.Role, Content: chat.Text(t)})
		case "function_call":
			if it.Name == "" {
				return nil, invalid(where+".name", "is required")
			}
			args := json.RawMessage(it.Arguments)
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage("{}")
			}
			if !json.Valid(args) {
				return nil, invalid(where+".arguments", "is not valid JSON")
			}
			names[it.CallID] = it.Name
			call := chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			} else {
				msgs = append(msgs, chat.Message{Role: "assistant", Content: chat.Text(""), ToolCalls: []chat.ToolCall{call}})
			}
		case "function_call_output":
			out, err := respText(it.Output, where+".output")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chat.Message{Role: "tool", Content: chat.Text(out), ToolCallID: it.CallID, Name: names[it.CallID]})
		case "reasoning":
			// Reasoning of earlier turns is not shown to the model again.
		default:
			return nil, invalid(where+".type", "input items of type %q are not supported", it.Type)
		}
	}
	if len(msgs) == 0 {
		return nil, invalid("input", "holds no messages")
	}
	return msgs, nil
}

// respTools converts Responses function tools ({"type":"function","name",
// "description","parameters"}) to the chat shape templates read.
func respTools(tools []json.RawMessage) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for i, raw := range tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Name == "" {
			if err == nil && t.Type != "function" {
				return nil, invalid(fmt.Sprintf("tools[%d].type", i), "tools of type %q are not supported; only \"function\"", t.Type)
			}
			return nil, invalid(fmt.Sprintf("tools[%d]", i), "want {\"type\": \"function\", \"name\": …, \"parameters\": …}")
		}
		fn := map[string]any{"name": t.Name}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		if len(t.Parameters) > 0 && string(t.Parameters) != "null" {
			fn["parameters"] = t.Parameters
		}
		data, _ := json.Marshal(map[string]any{"type": "function", "function": fn})
		out = append(out, data)
	}
	return out, nil
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	var o respRequest
	m := s.readForModel(w, r, &o, &o.Model, openaiErrors)
	if m == nil {
		return
	}
	req, history, err := s.respRequest(m, &o)
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
	rs := &respState{id: NewID("resp_"), created: time.Now().Unix(), model: m.id, req: &o}
	store := o.Store == nil || *o.Store
	if !o.Stream {
		res, err := m.Generate(r.Context(), p, nil)
		if err != nil {
			s.generationFailed(w, r, err, openaiErrors)
			return
		}
		rs.build(&res.Choices[0])
		body := rs.body(res.Usage)
		if store {
			s.store.put(&storedResponse{id: rs.id, messages: rs.conversation(history, &res.Choices[0]), body: body})
		}
		writeJSON(w, http.StatusOK, body)
		return
	}
	st := newStream(w)
	defer st.close()
	rs.st = st
	res, err := m.Generate(r.Context(), p, rs.event)
	if err != nil {
		if !st.started {
			s.generationFailed(w, r, err, openaiErrors)
		} else if r.Context().Err() == nil {
			e := AsError(err)
			rs.frame("error", respErrorEvent{Type: "error", SequenceNumber: rs.next(), Code: e.Code, Message: e.Message})
		}
		return
	}
	body := rs.body(res.Usage)
	if store {
		s.store.put(&storedResponse{id: rs.id, messages: rs.conversation(history, &res.Choices[0]), body: body})
	}
	typ := "response.completed"
	if body.Status == "incomplete" {
		typ = "response.incomplete"
	}
	rs.send(respEvent{Type: typ, Response: body})
}

// respRequest builds the core request of a Responses call and returns the
// conversation it continues (for the store).
func (s *Server) respRequest(m *Model, o *respRequest) (*Request, []chat.Message, error) {
	req := &Request{Sample: m.SampleDefaults(), MaxTokensParam: "max_output_tokens", PromptParam: "input"}
	input, err := respMessages(o.Input, s.store.item)
	if err != nil {
		return nil, nil, err
	}
	var history []chat.Message
	if o.PreviousResponseID != "" {
		prev := s.store.get(o.PreviousResponseID)
		if prev == nil {
			return nil, nil, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Param: "previous_response_id",
				Message: fmt.Sprintf("no stored response with id %q", o.PreviousResponseID)}
		}
		history = prev.messages
	}
	history = append(append([]chat.Message(nil), history...), input...)
	if o.Instructions != nil && *o.Instructions != "" {
		req.Messages = append([]chat.Message{{Role: "system", Content: chat.Text(*o.Instructions)}}, history...)
	} else {
		req.Messages = history
	}
	if o.MaxOutputTokens != nil {
		req.MaxTokens, req.MaxTokensSet = *o.MaxOutputTokens, true
	}
	samp := oaSampling{Temperature: o.Temperature, TopP: o.TopP, TopK: o.TopK, MinP: o.MinP, Seed: o.Seed}
	if err := samp.apply(req); err != nil {
		return nil, nil, err
	}
	if req.Tools, err = respTools(o.Tools); err != nil {
		return nil, nil, err
	}
	if req.ToolChoice, err = parseToolChoice(o.ToolChoice, "tool_choice", true); err != nil {
		return nil, nil, err
	}
	if o.Text != nil && o.Text.Format != nil {
		switch o.Text.Format.Type {
		case "", "text":
		case "json_object":
			req.JSON = true
		case "json_schema":
			strict := o.Text.Format.Strict != nil && *o.Text.Format.Strict
			if req.Schema, err = compileSchema(o.Text.Format.Schema, "text.format.schema", strict); err != nil {
				return nil, nil, err
			}
		default:
			return nil, nil, invalid("text.format.type", "%q is not supported; use \"text\", \"json_object\" or \"json_schema\"", o.Text.Format.Type)
		}
	}
	var effort *string
	if o.Reasoning != nil {
		effort = o.Reasoning.Effort
	}
	if req.Kwargs, err = templateKwargs(o.ChatTemplateKwargs, effort, "reasoning.effort"); err != nil {
		return nil, nil, err
	}
	return req, history, nil
}

// respState builds a response's output items, streaming them as events
// when st is set.
type respState struct {
	id      string
	created int64
	model   string
	req     *respRequest
	st      *stream
	seq     int
	output  []respItem
	status  string
	finish  string

	// The item being streamed.
	cur     respItem
	curKind EventKind
	curText bytes.Buffer
	buf     []byte
}

// next returns the sequence number of the next event.
func (rs *respState) next() int {
	rs.seq++
	return rs.seq - 1
}

// send writes one event, numbering it.
func (rs *respState) send(ev respEvent) error {
	ev.SequenceNumber = rs.next()
	return rs.frame(ev.Type, ev)
}

// frame writes one event of type typ with v as its data.
func (rs *respState) frame(typ string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b := append(rs.buf[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	rs.buf = b
	return rs.st.write(b)
}

// textDelta writes an output_text or reasoning_text delta event.
func (rs *respState) textDelta(typ, itemID string, text string) error {
	return rs.st.write(rs.textDeltaFrame(typ, itemID, text))
}

// textDeltaFrame encodes a text delta event by hand into the reused
// buffer: it allocates nothing.
func (rs *respState) textDeltaFrame(typ, itemID string, text string) []byte {
	b := append(rs.buf[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(rs.seq), 10)
	rs.seq++
	b = append(b, `,"item_id":`...)
	b = appendJSONString(b, itemID)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(len(rs.output)), 10)
	b = append(b, `,"content_index":0,"delta":`...)
	b = appendJSONString(b, text)
	if typ == "response.output_text.delta" {
		b = append(b, `,"logprobs":[]`...)
	}
	b = append(b, "}\n\n"...)
	rs.buf = b
	return b
}

// respBody is a response object: the reply of POST /v1/responses and
// GET /v1/responses/{id}, and what the response.* stream events carry.
type respBody struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object" enum:"response"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status" enum:"completed,incomplete,in_progress"`
	Model              string            `json:"model"`
	Output             []respItem        `json:"output"`
	Error              *respError        `json:"error"` // always null: a failed generation is an error reply or event
	IncompleteDetails  *respIncomplete   `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Tools              []json.RawMessage `json:"tools"`       // as the request gave them
	ToolChoice         json.RawMessage   `json:"tool_choice"` // as the request gave it, or "auto"
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	Text               respTextConfig    `json:"text"`
	Metadata           map[string]string `json:"metadata"`
	Store              bool              `json:"store"`
	Usage              *respUsage        `json:"usage,omitempty"` // absent while in progress
}

// respError is the error of a failed response.
type respError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// respIncomplete says why a response is incomplete.
type respIncomplete struct {
	Reason string `json:"reason" enum:"max_output_tokens,content_filter"`
}

// respTextConfig is the text configuration a response repeats.
type respTextConfig struct {
	Format *respTextFormat `json:"format"`
}

// respUsage counts a response's tokens.
type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// respItem is an output item: a *respMessage, *respReasoning or
// *respFunctionCall.
type respItem interface {
	itemID() string
}

// respMessage is a message output item.
type respMessage struct {
	Type    string     `json:"type" enum:"message"`
	ID      string     `json:"id"`
	Status  string     `json:"status" enum:"in_progress,completed"`
	Role    string     `json:"role" enum:"assistant"`
	Content []respPart `json:"content"` // one output_text part once completed
}

// respReasoning is a reasoning output item.
type respReasoning struct {
	Type    string     `json:"type" enum:"reasoning"`
	ID      string     `json:"id"`
	Summary []respPart `json:"summary"` // summary_text parts
	Content []respPart `json:"content"` // reasoning_text parts
	Status  string     `json:"status" enum:"in_progress,completed"`
}

// respFunctionCall is a function call output item.
type respFunctionCall struct {
	Type      string `json:"type" enum:"function_call"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status" enum:"in_progress,completed"`
}

func (m *respMessage) itemID() string      { return m.ID }
func (m *respReasoning) itemID() string    { return m.ID }
func (m *respFunctionCall) itemID() string { return m.ID }

// respPart is a content part of an output item. An output_text part has
// annotations and logprobs (always empty); the others have text alone.
type respPart struct {
	Type        string            `json:"type" enum:"output_text,reasoning_text,summary_text"`
	Text        string            `json:"text"`
	Annotations []json.RawMessage `json:"annotations,omitzero"`
	Logprobs    []json.RawMessage `json:"logprobs,omitzero"`
}

// respEvent is a stream event of /v1/responses other than an error;
// which fields it has depends on its type. The text deltas, the most
// frequent events, are encoded by hand (textDeltaFrame) in this shape.
type respEvent struct {
	Type           string    `json:"type" enum:"response.created,response.in_progress,response.completed,response.incomplete,response.output_item.added,response.output_item.done,response.content_part.added,response.content_part.done,response.output_text.delta,response.output_text.done,response.reasoning_text.delta,response.reasoning_text.done,response.reasoning_summary_part.added,response.reasoning_summary_part.done,response.reasoning_summary_text.delta,response.reasoning_summary_text.done,response.function_call_arguments.delta,response.function_call_arguments.done"`
	SequenceNumber int       `json:"sequence_number"`
	Response       *respBody `json:"response,omitempty"`
	ItemID         string    `json:"item_id,omitempty"`
	OutputIndex    *int      `json:"output_index,omitempty"`
	ContentIndex   *int      `json:"content_index,omitempty"`
	SummaryIndex   *int      `json:"summary_index,omitempty"`
	Item           respItem  `json:"item,omitempty"`
	Part           *respPart `json:"part,omitempty"`
	Delta          *string   `json:"delta,omitempty"`
	Text           *string   `json:"text,omitempty"`
	Name           string    `json:"name,omitempty"`
	Arguments      *string   `json:"arguments,omitempty"`
	// Logprobs of output_text deltas and done events: always empty.
	Logprobs []json.RawMessage `json:"logprobs,omitzero"`
}

// respErrorEvent is the error event that ends a stream whose generation
// failed after it started.
type respErrorEvent struct {
	Type           string  `json:"type" enum:"error"`
	SequenceNumber int     `json:"sequence_number"`
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
}

// respStreamEvents are the kinds of /v1/responses stream events.
var respStreamEvents = []any{respEvent{}, respErrorEvent{}}

// body is the response object.
func (rs *respState) body(u Usage) *respBody {
	o := rs.req
	b := &respBody{
		ID: rs.id, Object: "response", CreatedAt: rs.created, Status: "completed", Model: rs.model,
		Output: rs.output, Instructions: o.Instructions, MaxOutputTokens: o.MaxOutputTokens,
		Temperature: o.Temperature, TopP: o.TopP, Tools: o.Tools, ToolChoice: o.ToolChoice,
		ParallelToolCalls: o.ParallelToolCalls == nil || *o.ParallelToolCalls,
		Text:              respTextConfig{Format: &respTextFormat{Type: "text"}},
		Metadata:          o.Metadata, Store: o.Store == nil || *o.Store,
	}
	switch rs.finish {
	case FinishLength:
		b.Status, b.IncompleteDetails = "incomplete", &respIncomplete{Reason: "max_output_tokens"}
	case FinishContentFilter:
		b.Status, b.IncompleteDetails = "incomplete", &respIncomplete{Reason: "content_filter"}
	}
	if rs.status != "" {
		b.Status = rs.status
	}
	if b.Output == nil {
		b.Output = []respItem{}
	}
	if b.Tools == nil {
		b.Tools = []json.RawMessage{}
	}
	if len(b.ToolChoice) == 0 {
		b.ToolChoice = json.RawMessage(`"auto"`)
	}
	if o.Text != nil && o.Text.Format != nil && o.Text.Format.Type != "" {
		b.Text.Format = o.Text.Format
	}
	if b.Metadata == nil {
		b.Metadata = map[string]string{}
	}
	if o.PreviousResponseID != "" {
		b.PreviousResponseID = &o.PreviousResponseID
	}
	if b.Status != "in_progress" {
		b.Usage = &respUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens()}
		b.Usage.InputTokensDetails.CachedTokens = u.CachedTokens
		b.Usage.OutputTokensDetails.ReasoningTokens = u.ReasoningTokens
	}
	return b
}

// item constructors.

// reasoningItem is a reasoning output item. Its text is also given as the
// summary when summary is set: the model's reasoning is its own summary,
// for clients that read reasoning.summary only.
func reasoningItem(id, text, status string, summary bool) *respReasoning {
	it := &respReasoning{Type: "reasoning", ID: id, Summary: []respPart{}, Content: []respPart{}, Status: status}
	if text != "" || status == "completed" {
		it.Content = append(it.Content, reasoningTextPart(text))
		if summary {
			it.Summary = append(it.Summary, summaryTextPart(text))
		}
	}
	return it
}

func reasoningTextPart(text string) respPart {
	return respPart{Type: "reasoning_text", Text: text}
}

func summaryTextPart(text string) respPart {
	return respPart{Type: "summary_text", Text: text}
}

// summary reports whether the request asked for a reasoning summary.
func (o *respRequest) summary() bool {
	return o.Reasoning != nil && o.Reasoning.Summary != nil && *o.Reasoning.Summary != "" && *o.Reasoning.Summary != "none"
}

func messageItem(id, text, status string) *respMessage {
	it := &respMessage{Type: "message", ID: id, Status: status, Role: "assistant", Content: []respPart{}}
	if status == "completed" {
		it.Content = append(it.Content, outputTextPart(text))
	}
	return it
}

func outputTextPart(text string) respPart {
	return respPart{Type: "output_text", Text: text, Annotations: []json.RawMessage{}, Logprobs: []json.RawMessage{}}
}

func functionCallItem(id string, c *ToolCall, status string) *respFunctionCall {
	return &respFunctionCall{Type: "function_call", ID: id, CallID: c.ID, Name: c.Name,
		Arguments: string(c.Arguments), Status: status}
}

// build fills the output of a non-streamed response from its choice.
func (rs *respState) build(c *Choice) {
	if c.Reasoning != "" {
		rs.output = append(rs.output, reasoningItem(NewID("rs_"), c.Reasoning, "completed", rs.req.summary()))
	}
	if c.Content != "" || len(c.ToolCalls) == 0 {
		rs.output = append(rs.output, messageItem(NewID("msg_"), c.Content, "completed"))
	}
	for i := range c.ToolCalls {
		rs.output = append(rs.output, functionCallItem(NewID("fc_"), &c.ToolCalls[i], "completed"))
	}
	rs.finish = c.Finish
}

// conversation is the history a later request continues: the input
// conversation and this response's output.
func (rs *respState) conversation(history []chat.Message, c *Choice) []chat.Message {
	out := append([]chat.Message(nil), history...)
	msg := chat.Message{Role: "assistant", Content: chat.Text(c.Content)}
	for _, tc := range c.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	return append(out, msg)
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

// event streams a core event as Responses events.
func (rs *respState) event(ev Event) error {
	switch ev.Kind {
	case EventQueued, EventKeepAlive:
		return rs.st.wait(ev, "text/event-stream", sseKeepAlive)
	case EventStart:
		if err := rs.st.start("text/event-stream"); err != nil {
			return err
		}
		rs.status = "in_progress"
		body := rs.body(Usage{})
		rs.status = ""
		if err := rs.send(respEvent{Type: "response.created", Response: body}); err != nil {
			return err
		}
		return rs.send(respEvent{Type: "response.in_progress", Response: body})
	case EventReasoning, EventContent:
		if rs.cur != nil && rs.curKind != ev.Kind {
			if err := rs.closeItem(); err != nil {
				return err
			}
		}
		if rs.cur == nil {
			if err := rs.openItem(ev.Kind); err != nil {
				return err
			}
		}
		rs.curText.WriteString(ev.Text)
		typ := "response.output_text.delta"
		if ev.Kind == EventReasoning {
			typ = "response.reasoning_text.delta"
		}
		return rs.textDelta(typ, rs.cur.itemID(), ev.Text)
	case EventToolCall:
		if err := rs.closeItem(); err != nil {
			return err
		}
		id := NewID("fc_")
		idx := ptr(len(rs.output))
		if err := rs.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: functionCallItem(id, ev.Call, "in_progress")}); err != nil {
			return err
		}
		args := string(ev.Call.Arguments)
		if err := rs.send(respEvent{Type: "response.function_call_arguments.delta", ItemID: id, OutputIndex: idx, Delta: &args}); err != nil {
			return err
		}
		if err := rs.send(respEvent{Type: "response.function_call_arguments.done", ItemID: id, OutputIndex: idx, Name: ev.Call.Name, Arguments: &args}); err != nil {
			return err
		}
		item := functionCallItem(id, ev.Call, "completed")
		rs.output = append(rs.output, item)
		return rs.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
	case EventEnd:
		rs.finish = ev.Finish
		if rs.cur == nil && len(rs.output) == 0 {
			// An empty reply is still a message.
			if err := rs.openItem(EventContent); err != nil {
				return err
			}
		}
		return rs.closeItem()
	}
	return nil
}

func (rs *respState) openItem(kind EventKind) error {
	idx := ptr(len(rs.output))
	rs.curKind = kind
	rs.curText.Reset()
	part := outputTextPart("")
	if kind == EventReasoning {
		rs.cur = reasoningItem(NewID("rs_"), "", "in_progress", rs.req.summary())
		part = reasoningTextPart("")
	} else {
		rs.cur = messageItem(NewID("msg_"), "", "in_progress")
	}
	if err := rs.send(respEvent{Type: "response.output_item.added", OutputIndex: idx, Item: rs.cur}); err != nil {
		return err
	}
	// The part is announced before its deltas, as clients that accumulate
	// the stream need.
	return rs.send(respEvent{Type: "response.content_part.added", ItemID: rs.cur.itemID(), OutputIndex: idx,
		ContentIndex: ptr(0), Part: &part})
}

func (rs *respState) closeItem() error {
	if rs.cur == nil {
		return nil
	}
	idx := ptr(len(rs.output))
	id := rs.cur.itemID()
	text := rs.curText.String()
	var item respItem
	if rs.curKind == EventReasoning {
		if err := rs.send(respEvent{Type: "response.reasoning_text.done", ItemID: id, OutputIndex: idx, ContentIndex: ptr(0), Text: &text}); err != nil {
			return err
		}
		part := reasoningTextPart(text)
		if err := rs.send(respEvent{Type: "response.content_part.done", ItemID: id, OutputIndex: idx, ContentIndex: ptr(0), Part: &part}); err != nil {
			return err
		}
		if rs.req.summary() {
			if err := rs.summaryEvents(id, idx, text); err != nil {
				return err
			}
		}
		item = reasoningItem(id, text, "completed", rs.req.summary())
	} else {
		if err := rs.send(respEvent{Type: "response.output_text.done", ItemID: id, OutputIndex: idx, ContentIndex: ptr(0), Text: &text, Logprobs: []json.RawMessage{}}); err != nil {
			return err
		}
		part := outputTextPart(text)
		if err := rs.send(respEvent{Type: "response.content_part.done", ItemID: id, OutputIndex: idx, ContentIndex: ptr(0), Part: &part}); err != nil {
			return err
		}
		item = messageItem(id, text, "completed")
	}
	rs.output = append(rs.output, item)
	rs.cur = nil
	return rs.send(respEvent{Type: "response.output_item.done", OutputIndex: idx, Item: item})
}

// summaryEvents streams the reasoning text of item id as its summary: one
// summary part, added, filled in one delta and done.
func (rs *respState) summaryEvents(id string, idx *int, text string) error {
	f := func(typ string) respEvent {
		return respEvent{Type: typ, ItemID: id, OutputIndex: idx, SummaryIndex: ptr(0)}
	}
	ev := f("response.reasoning_summary_part.added")
	ev.Part = ptr(summaryTextPart(""))
	if err := rs.send(ev); err != nil {
		return err
	}
	ev = f("response.reasoning_summary_text.delta")
	ev.Delta = &text
	if err := rs.send(ev); err != nil {
		return err
	}
	ev = f("response.reasoning_summary_text.done")
	ev.Text = &text
	if err := rs.send(ev); err != nil {
		return err
	}
	ev = f("response.reasoning_summary_part.done")
	ev.Part = ptr(summaryTextPart(text))
	return rs.send(ev)
}

func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	sr := s.store.get(r.PathValue("id"))
	if sr == nil {
		openaiErrors(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Param: "id",
			Message: fmt.Sprintf("no stored response with id %q", r.PathValue("id"))})
		return
	}
	writeJSON(w, http.StatusOK, sr.body)
}

func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.store.delete(id) {
		openaiErrors(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Param: "id",
			Message: fmt.Sprintf("no stored response with id %q", id)})
		return
	}
	writeJSON(w, http.StatusOK, respDeleted{ID: id, Object: "response", Deleted: true})
}

// respDeleted is the reply of DELETE /v1/responses/{id}.
type respDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}
