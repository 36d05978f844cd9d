package compat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lem-engine/lem/server"
)

// streamSnapshot rebuilds a response from its stream events as the
// openai SDKs' responses.stream() accumulators do: items from
// output_item.added, parts from content_part.added, text from deltas. A
// delta for a part never announced is an error, as it is there ("missing
// content at index 0").
type streamSnapshot struct {
	items []snapItem
}

type snapItem struct {
	id, typ string
	parts   []string // content part types
	text    []string // content part texts
	summary []string
}

func (s *streamSnapshot) item(idx int64, id string) (*snapItem, error) {
	if idx < 0 || int(idx) >= len(s.items) {
		return nil, fmt.Errorf("missing output at index %d", idx)
	}
	it := &s.items[idx]
	if it.id != id {
		return nil, fmt.Errorf("output %d is %s, event names %s", idx, it.id, id)
	}
	return it, nil
}

func (s *streamSnapshot) part(idx int64, id string, ci int64, typ string) (*snapItem, error) {
	it, err := s.item(idx, id)
	if err != nil {
		return nil, err
	}
	if ci < 0 || int(ci) >= len(it.parts) {
		return nil, fmt.Errorf("missing content at index %d of %s", ci, id)
	}
	if it.parts[ci] != typ {
		return nil, fmt.Errorf("%s event on a %s part", typ, it.parts[ci])
	}
	return it, nil
}

// add takes one event.
func (s *streamSnapshot) add(ev responses.ResponseStreamEventUnion) error {
	switch ev.Type {
	case "response.output_item.added":
		e := ev.AsResponseOutputItemAdded()
		if int(e.OutputIndex) != len(s.items) {
			return fmt.Errorf("item added at %d, want %d", e.OutputIndex, len(s.items))
		}
		s.items = append(s.items, snapItem{id: e.Item.ID, typ: e.Item.Type})
	case "response.content_part.added":
		e := ev.AsResponseContentPartAdded()
		it, err := s.item(e.OutputIndex, e.ItemID)
		if err != nil {
			return err
		}
		if int(e.ContentIndex) != len(it.parts) {
			return fmt.Errorf("part added at %d, want %d", e.ContentIndex, len(it.parts))
		}
		it.parts = append(it.parts, e.Part.Type)
		it.text = append(it.text, e.Part.Text)
	case "response.output_text.delta":
		e := ev.AsResponseOutputTextDelta()
		it, err := s.part(e.OutputIndex, e.ItemID, e.ContentIndex, "output_text")
		if err != nil {
			return err
		}
		it.text[e.ContentIndex] += e.Delta
	case "response.reasoning_text.delta":
		e := ev.AsResponseReasoningTextDelta()
		it, err := s.part(e.OutputIndex, e.ItemID, e.ContentIndex, "reasoning_text")
		if err != nil {
			return err
		}
		it.text[e.ContentIndex] += e.Delta
	case "response.output_text.done":
		e := ev.AsResponseOutputTextDone()
		it, err := s.part(e.OutputIndex, e.ItemID, e.ContentIndex, "output_text")
		if err != nil {
			return err
		}
		if it.text[e.ContentIndex] != e.Text {
			return fmt.Errorf("output_text.done %q, deltas made %q", e.Text, it.text[e.ContentIndex])
		}
	case "response.reasoning_text.done":
		e := ev.AsResponseReasoningTextDone()
		it, err := s.part(e.OutputIndex, e.ItemID, e.ContentIndex, "reasoning_text")
		if err != nil {
			return err
		}
		if it.text[e.ContentIndex] != e.Text {
			return fmt.Errorf("reasoning_text.done %q, deltas made %q", e.Text, it.text[e.ContentIndex])
		}
	case "response.content_part.done":
		e := ev.AsResponseContentPartDone()
		it, err := s.part(e.OutputIndex, e.ItemID, e.ContentIndex, e.Part.Type)
		if err != nil {
			return err
		}
		if it.text[e.ContentIndex] != e.Part.Text {
			return fmt.Errorf("content_part.done %q, deltas made %q", e.Part.Text, it.text[e.ContentIndex])
		}
	case "response.reasoning_summary_part.added":
		e := ev.AsResponseReasoningSummaryPartAdded()
		it, err := s.item(e.OutputIndex, e.ItemID)
		if err != nil {
			return err
		}
		if int(e.SummaryIndex) != len(it.summary) {
			return fmt.Errorf("summary part added at %d, want %d", e.SummaryIndex, len(it.summary))
		}
		it.summary = append(it.summary, e.Part.Text)
	case "response.reasoning_summary_text.delta":
		e := ev.AsResponseReasoningSummaryTextDelta()
		it, err := s.item(e.OutputIndex, e.ItemID)
		if err != nil {
			return err
		}
		if int(e.SummaryIndex) >= len(it.summary) {
			return fmt.Errorf("missing summary at index %d", e.SummaryIndex)
		}
		it.summary[e.SummaryIndex] += e.Delta
	case "response.output_item.done":
		e := ev.AsResponseOutputItemDone()
		it, err := s.item(e.OutputIndex, e.Item.ID)
		if err != nil {
			return err
		}
		return it.matches(e.Item)
	}
	return nil
}

// matches compares a finished item with the one the events built.
func (it *snapItem) matches(item responses.ResponseOutputItemUnion) error {
	var got []string
	switch item.Type {
	case "message":
		for _, c := range item.Content {
			got = append(got, c.Text)
		}
	case "reasoning":
		for _, c := range item.AsReasoning().Content {
			got = append(got, c.Text)
		}
		var summary []string
		for _, s := range item.Summary {
			summary = append(summary, s.Text)
		}
		if fmt.Sprint(summary) != fmt.Sprint(it.summary) {
			return fmt.Errorf("item %s summary %q, streamed %q", it.id, summary, it.summary)
		}
	default:
		return nil
	}
	if fmt.Sprint(got) != fmt.Sprint(it.text) {
		return fmt.Errorf("item %s content %q, streamed %q", it.id, got, it.text)
	}
	return nil
}

// TestResponsesStreamingReasoning streams a thinking model's answer
// through the SDK and rebuilds it from the events as the SDK's stream
// accumulators do.
func TestResponsesStreamingReasoning(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	for _, summary := range []bool{false, true} {
		p := responses.ResponseNewParams{
			Model:       "chat-model",
			Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(japan)},
			Temperature: param.NewOpt(0.0),
		}
		if summary {
			p.Reasoning = shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto}
		}
		stream := client.Responses.NewStreaming(context.Background(), p)
		var snap streamSnapshot
		var completed *responses.Response
		for stream.Next() {
			ev := stream.Current()
			if err := snap.add(ev); err != nil {
				t.Fatalf("summary %v: %s: %v", summary, ev.Type, err)
			}
			if ev.Type == "response.completed" {
				r := ev.AsResponseCompleted().Response
				completed = &r
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if completed == nil || len(completed.Output) != 2 || len(snap.items) != 2 {
			t.Fatalf("summary %v: completed %v, %d items streamed", summary, completed != nil, len(snap.items))
		}
		for i, item := range completed.Output {
			if err := snap.items[i].matches(item); err != nil {
				t.Errorf("summary %v: %v", summary, err)
			}
		}
		r, m := snap.items[0], snap.items[1]
		if r.typ != "reasoning" || fmt.Sprint(r.text) != fmt.Sprint([]string{japanThink}) || m.typ != "message" || fmt.Sprint(m.text) != fmt.Sprint([]string{tokyo}) {
			t.Errorf("summary %v: streamed %+v", summary, snap.items)
		}
		if want := map[bool]int{false: 0, true: 1}[summary]; len(r.summary) != want || summary && r.summary[0] != japanThink {
			t.Errorf("summary %v: reasoning summary %q", summary, r.summary)
		}
	}
}

// TestResponsesItemReference continues a stored response by naming its
// items, as the Vercel AI SDK's OpenAI provider does with store true.
func TestResponsesItemReference(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:       "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		Strict:     param.NewOpt(false),
	}}
	user := responses.ResponseInputItemParamOfMessage(paris, responses.EasyInputMessageRoleUser)
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}},
		Tools:       []responses.ToolUnionParam{tool},
		Temperature: param.NewOpt(0.0),
		Store:       param.NewOpt(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	input := responses.ResponseInputParam{user}
	var callID string
	for _, item := range first.Output {
		input = append(input, responses.ResponseInputItemParamOfItemReference(item.ID))
		if item.Type == "function_call" {
			callID = item.CallID
		}
	}
	if callID == "" {
		t.Fatalf("no function call: %s", first.RawJSON())
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp_c": 21}`)
	out.OfFunctionCallOutput.CallID = param.NewOpt(callID)
	input = append(input, out)
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools:       []responses.ToolUnionParam{tool},
		Temperature: param.NewOpt(0.0),
		Store:       param.NewOpt(true),
	})
	if err != nil {
		t.Fatalf("%v: %s", err, err.(*openai.Error).RawJSON())
	}
	if second.OutputText() != "It is 21°C in Paris." {
		t.Errorf("after the tool result: %q", second.OutputText())
	}

	// An id no stored response holds is a 400 naming the item.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "chat-model",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			user, responses.ResponseInputItemParamOfItemReference("fc_unknown")}},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "input[1].id" {
		t.Errorf("unknown reference: %v", err)
	}
}

// TestResponsesSchemaNotStrict asks for a schema with a keyword the grammar
// cannot hold to: strict false takes it, as the Vercel AI SDK and LangChain
// send it.
func TestResponsesSchemaNotStrict(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	var schema map[string]any
	json.Unmarshal([]byte(`{"type":"object","properties":{"city":{"enum":["Tokyo","Paris"],"not":{"const":"Paris"}}},"required":["city"],"additionalProperties":false}`), &schema)
	res, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(japan + " Answer in JSON.")},
		Temperature: param.NewOpt(0.0),
		Reasoning:   shared.ReasoningParam{Effort: shared.ReasoningEffortNone},
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "answer", Schema: schema, Strict: param.NewOpt(false)},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ City string }
	if err := json.Unmarshal([]byte(res.OutputText()), &v); err != nil || (v.City != "Tokyo" && v.City != "Paris") {
		t.Errorf("output %q: %v", res.OutputText(), err)
	}
}
