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
	items map[string]map[string]any // output item id → item, of the stored responses
}

// storedResponse is a response with the conversation that led to it.
type storedResponse struct {
	id       string
	elem     *list.Element
	messages []chat.Message // the whole conversation, its output included
	body     map[string]any // the response object as returned
}

func newResponseStore(max int) *responseStore {
	return &responseStore{max: max, order: list.New(), byID: map[string]*storedResponse{}, items: map[string]map[string]any{}}
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
		if id, _ := it["id"].(string); id != "" {
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
		if id, _ := it["id"].(string); id != "" {
			delete(s.items, id)
		}
	}
}

// outputItems returns the output items of a stored response.
func (r *storedResponse) outputItems() []map[string]any {
	out, _ := r.body["output"].([]map[string]any)
	return out
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
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name,omitempty"`
			Schema json.RawMessage `json:"schema,omitempty"`
			Strict *bool           `json:"strict,omitempty"`
		} `json:"format"`
	} `json:"text"`
	Metadata           map[string]string          `json:"metadata"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
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
	if err := s.readJSON(r, &o); err != nil {
		openaiErrors(w, err)
		return
	}
	m := s.lookupModel(w, r, o.Model, openaiErrors)
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
			rs.send("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
		}
		return
	}
	body := rs.body(res.Usage)
	if store {
		s.store.put(&storedResponse{id: rs.id, messages: rs.conversation(history, &res.Choices[0]), body: body})
	}
	typ := "response.completed"
	if body["status"] == "incomplete" {
		typ = "response.incomplete"
	}
	rs.send(typ, map[string]any{"response": body})
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
	output  []map[string]any
	status  string
	finish  string

	// The item being streamed.
	cur     map[string]any
	curKind EventKind
	curText bytes.Buffer
	buf     []byte
}

// send writes one event.
func (rs *respState) send(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = rs.seq
	rs.seq++
	data, err := json.Marshal(fields)
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

// body is the response object.
func (rs *respState) body(u Usage) map[string]any {
	o := rs.req
	status := "completed"
	var incomplete any
	switch rs.finish {
	case FinishLength:
		status = "incomplete"
		incomplete = map[string]any{"reason": "max_output_tokens"}
	case FinishContentFilter:
		status = "incomplete"
		incomplete = map[string]any{"reason": "content_filter"}
	}
	if rs.status != "" {
		status = rs.status
	}
	output := rs.output
	if output == nil {
		output = []map[string]any{}
	}
	tools := o.Tools
	if tools == nil {
		tools = []json.RawMessage{}
	}
	var toolChoice any = "auto"
	if len(o.ToolChoice) > 0 {
		toolChoice = o.ToolChoice
	}
	var textFormat any = map[string]any{"type": "text"}
	if o.Text != nil && o.Text.Format != nil && o.Text.Format.Type != "" {
		textFormat = o.Text.Format
	}
	metadata := o.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	b := map[string]any{
		"id": rs.id, "object": "response", "created_at": rs.created, "status": status, "model": rs.model,
		"output": output, "error": nil, "incomplete_details": incomplete,
		"instructions": o.Instructions, "max_output_tokens": o.MaxOutputTokens,
		"previous_response_id": nilIfEmpty(o.PreviousResponseID),
		"temperature":          o.Temperature, "top_p": o.TopP, "tools": tools, "tool_choice": toolChoice,
		"parallel_tool_calls": o.ParallelToolCalls == nil || *o.ParallelToolCalls,
		"text":                map[string]any{"format": textFormat},
		"metadata":            metadata, "store": o.Store == nil || *o.Store,
	}
	if status != "in_progress" {
		b["usage"] = map[string]any{
			"input_tokens": u.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
			"output_tokens": u.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens": u.TotalTokens(),
		}
	}
	return b
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// item constructors.

// reasoningItem is a reasoning output item. Its text is also given as the
// summary when summary is set: the model's reasoning is its own summary,
// for clients that read reasoning.summary only.
func reasoningItem(id, text, status string, summary bool) map[string]any {
	content := []map[string]any{}
	sum := []map[string]any{}
	if text != "" || status == "completed" {
		content = append(content, reasoningTextPart(text))
		if summary {
			sum = append(sum, summaryTextPart(text))
		}
	}
	return map[string]any{"type": "reasoning", "id": id, "summary": sum, "content": content, "status": status}
}

func reasoningTextPart(text string) map[string]any {
	return map[string]any{"type": "reasoning_text", "text": text}
}

func summaryTextPart(text string) map[string]any {
	return map[string]any{"type": "summary_text", "text": text}
}

// summary reports whether the request asked for a reasoning summary.
func (o *respRequest) summary() bool {
	return o.Reasoning != nil && o.Reasoning.Summary != nil && *o.Reasoning.Summary != "" && *o.Reasoning.Summary != "none"
}

func messageItem(id, text, status string) map[string]any {
	content := []map[string]any{}
	if status == "completed" {
		content = append(content, outputTextPart(text))
	}
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

func outputTextPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func functionCallItem(id string, c *ToolCall, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": c.ID, "name": c.Name,
		"arguments": string(c.Arguments), "status": status}
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
		if err := rs.send("response.created", map[string]any{"response": body}); err != nil {
			return err
		}
		return rs.send("response.in_progress", map[string]any{"response": body})
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
		return rs.textDelta(typ, rs.cur["id"].(string), ev.Text)
	case EventToolCall:
		if err := rs.closeItem(); err != nil {
			return err
		}
		id := NewID("fc_")
		idx := len(rs.output)
		if err := rs.send("response.output_item.added", map[string]any{"output_index": idx, "item": functionCallItem(id, ev.Call, "in_progress")}); err != nil {
			return err
		}
		args := string(ev.Call.Arguments)
		if err := rs.send("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": args}); err != nil {
			return err
		}
		if err := rs.send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "name": ev.Call.Name, "arguments": args}); err != nil {
			return err
		}
		item := functionCallItem(id, ev.Call, "completed")
		rs.output = append(rs.output, item)
		return rs.send("response.output_item.done", map[string]any{"output_index": idx, "item": item})
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
	idx := len(rs.output)
	rs.curKind = kind
	rs.curText.Reset()
	part := outputTextPart("")
	if kind == EventReasoning {
		rs.cur = reasoningItem(NewID("rs_"), "", "in_progress", rs.req.summary())
		part = reasoningTextPart("")
	} else {
		rs.cur = messageItem(NewID("msg_"), "", "in_progress")
	}
	if err := rs.send("response.output_item.added", map[string]any{"output_index": idx, "item": rs.cur}); err != nil {
		return err
	}
	// The part is announced before its deltas, as clients that accumulate
	// the stream need.
	return rs.send("response.content_part.added", map[string]any{"item_id": rs.cur["id"], "output_index": idx,
		"content_index": 0, "part": part})
}

func (rs *respState) closeItem() error {
	if rs.cur == nil {
		return nil
	}
	idx := len(rs.output)
	id := rs.cur["id"].(string)
	text := rs.curText.String()
	var item map[string]any
	if rs.curKind == EventReasoning {
		if err := rs.send("response.reasoning_text.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "text": text}); err != nil {
			return err
		}
		if err := rs.send("response.content_part.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": reasoningTextPart(text)}); err != nil {
			return err
		}
		if rs.req.summary() {
			if err := rs.summaryEvents(id, idx, text); err != nil {
				return err
			}
		}
		item = reasoningItem(id, text, "completed", rs.req.summary())
	} else {
		if err := rs.send("response.output_text.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}}); err != nil {
			return err
		}
		if err := rs.send("response.content_part.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": outputTextPart(text)}); err != nil {
			return err
		}
		item = messageItem(id, text, "completed")
	}
	rs.output = append(rs.output, item)
	rs.cur = nil
	return rs.send("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// summaryEvents streams the reasoning text of item id as its summary: one
// summary part, added, filled in one delta and done.
func (rs *respState) summaryEvents(id string, idx int, text string) error {
	f := func() map[string]any { return map[string]any{"item_id": id, "output_index": idx, "summary_index": 0} }
	ev := f()
	ev["part"] = summaryTextPart("")
	if err := rs.send("response.reasoning_summary_part.added", ev); err != nil {
		return err
	}
	ev = f()
	ev["delta"] = text
	if err := rs.send("response.reasoning_summary_text.delta", ev); err != nil {
		return err
	}
	ev = f()
	ev["text"] = text
	if err := rs.send("response.reasoning_summary_text.done", ev); err != nil {
		return err
	}
	ev = f()
	ev["part"] = summaryTextPart(text)
	return rs.send("response.reasoning_summary_part.done", ev)
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
