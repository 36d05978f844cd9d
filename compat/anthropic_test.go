package compat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/server"
)

// newAnthropic returns an Anthropic SDK client of the server at base,
// blind to the environment's ANTHROPIC_* settings. Its requests sample
// greedily (the SDK has no temperature field; the API still takes one).
func newAnthropic(base string, opts ...aopt.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aopt.RequestOption{
		aopt.WithoutEnvironmentDefaults(), aopt.WithBaseURL(base + "/"), aopt.WithAPIKey("unused"), aopt.WithMaxRetries(0),
		aopt.WithJSONSet("temperature", 0),
	}, opts...)...)
}

func anUser(text string) anthropic.MessageParam {
	return anthropic.NewUserMessage(anthropic.NewTextBlock(text))
}

// anGreedy asks for a reply of up to 200 tokens, thinking off unless set.
func anGreedy(msgs ...anthropic.MessageParam) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "chat-model", MaxTokens: 200, Messages: msgs}
}

func anThinkingOn(p anthropic.MessageNewParams) anthropic.MessageNewParams {
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(100)
	return p
}

func anWeatherTool() anthropic.ToolUnionParam {
	t := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
		Required:   []string{"city"},
	}, "get_weather")
	t.OfTool.Description = param.NewOpt("Get the current weather in a city")
	return t
}

func anAddTool() anthropic.ToolUnionParam {
	t := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number"}},
	}, "add")
	t.OfTool.Description = param.NewOpt("Add two numbers")
	return t
}

// anText joins a reply's text blocks; anThought its thinking blocks.
func anText(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func anThought(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "thinking" {
			b.WriteString(c.Thinking)
		}
	}
	return b.String()
}

func TestAnthropicMessages(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()

	msg, err := client.Messages.New(ctx, anGreedy(anUser(japan)))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != tokyo {
		t.Errorf("content %s", msg.RawJSON())
	}
	if msg.StopReason != anthropic.StopReasonEndTurn || msg.StopSequence != "" || msg.Role != "assistant" || msg.Type != "message" {
		t.Errorf("stop %q/%q role %q type %q", msg.StopReason, msg.StopSequence, msg.Role, msg.Type)
	}
	if !strings.HasPrefix(msg.ID, "msg_") || msg.Model != "chat-model" {
		t.Errorf("id %q model %q", msg.ID, msg.Model)
	}
	if msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens == 0 || msg.Usage.OutputTokens == 0 {
		t.Errorf("usage %s", msg.Usage.RawJSON())
	}

	// The same question again reads the prompt from the cache in whole
	// blocks of the paged cache, but for its last token.
	again, err := client.Messages.New(ctx, anGreedy(anUser(japan)))
	if err != nil {
		t.Fatal(err)
	}
	total, bs := msg.Usage.InputTokens+msg.Usage.CacheReadInputTokens, int64(engine.DefaultBlockSize)
	if read := (total - 1) / bs * bs; read == 0 || again.Usage.CacheReadInputTokens != read || again.Usage.InputTokens != total-read {
		t.Errorf("second usage %s", again.Usage.RawJSON())
	}

	// A system prompt as blocks and as a string.
	p := anGreedy(anUser(japan))
	p.System = []anthropic.TextBlockParam{{Text: "You are a helpful assistant."}}
	if msg, err = client.Messages.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(anText(msg), "Tokyo") {
		t.Errorf("system blocks: %q", anText(msg))
	}
	if msg, err = client.Messages.New(ctx, anGreedy(anUser(japan)), aopt.WithJSONSet("system", "You are a helpful assistant.")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(anText(msg), "Tokyo") {
		t.Errorf("system string: %q", anText(msg))
	}

	// max_tokens cuts the reply.
	p = anGreedy(anUser(japan))
	p.MaxTokens = 3
	if msg, err = client.Messages.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.OutputTokens != 3 {
		t.Errorf("max_tokens 3: %q after %d tokens", msg.StopReason, msg.Usage.OutputTokens)
	}
	// A max_tokens beyond the context is a bound, not an error.
	p.MaxTokens = 8000
	if msg, err = client.Messages.New(ctx, p); err != nil || anText(msg) != tokyo {
		t.Errorf("max_tokens 8000: %v", err)
	}

	// Sampling parameters are taken.
	p = anGreedy(anUser("Hello!"))
	p.MaxTokens = 30
	p.Metadata = anthropic.MetadataParam{UserID: param.NewOpt("user-1")}
	if msg, err = client.Messages.New(ctx, p, aopt.WithJSONSet("temperature", 0.7), aopt.WithJSONSet("top_p", 0.9),
		aopt.WithJSONSet("top_k", 20)); err != nil || msg.Usage.OutputTokens == 0 {
		t.Errorf("sampling: %v", err)
	}
}

func TestAnthropicThinking(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()

	msg, err := client.Messages.New(ctx, anThinkingOn(anGreedy(anUser(japan))))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[1].Type != "text" {
		t.Fatalf("blocks %s", msg.RawJSON())
	}
	if th := msg.Content[0]; th.Thinking != japanThink || th.Signature == "" {
		t.Errorf("thinking %q signature %q", th.Thinking, th.Signature)
	}
	if msg.Content[1].Text != tokyo {
		t.Errorf("text %q", msg.Content[1].Text)
	}

	// Streaming: the events come in the order the SDK expects, and the
	// accumulated message matches.
	stream := client.Messages.NewStreaming(ctx, anThinkingOn(anGreedy(anUser(japan))))
	var acc anthropic.Message
	var order []string
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		step := ev.Type
		switch ev.Type {
		case "content_block_start":
			step += ":" + ev.ContentBlock.Type
		case "content_block_delta":
			step += ":" + ev.Delta.Type
		}
		if len(order) == 0 || order[len(order)-1] != step {
			order = append(order, step)
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" && strings.Contains(ev.Delta.Text, "think>") {
			t.Error("thinking markers streamed as text")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"message_start", "content_block_start:thinking", "content_block_delta:thinking_delta",
		"content_block_delta:signature_delta", "content_block_stop", "content_block_start:text",
		"content_block_delta:text_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("events\n%v\nwant\n%v", order, want)
	}
	if anThought(&acc) != japanThink || anText(&acc) != tokyo || acc.Content[0].Signature == "" {
		t.Errorf("accumulated %s", acc.RawJSON())
	}
	if acc.StopReason != anthropic.StopReasonEndTurn || acc.Usage.OutputTokens == 0 || acc.Usage.InputTokens+acc.Usage.CacheReadInputTokens == 0 {
		t.Errorf("stop %q usage %s", acc.StopReason, acc.Usage.RawJSON())
	}

	// The thinking block goes back in the next turn.
	p := anThinkingOn(anGreedy(anUser(japan), msg.ToParam(), anUser(japan)))
	if _, err := client.Messages.New(ctx, p); err != nil {
		t.Errorf("thinking block sent back: %v", err)
	}

	// Disabled, or left out: no thinking block.
	p = anGreedy(anUser(japan))
	p.Thinking = anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}}
	for _, p := range []anthropic.MessageNewParams{p, anGreedy(anUser(japan))} {
		msg, err := client.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if anThought(msg) != "" || anText(msg) != tokyo {
			t.Errorf("thinking off: %s", msg.RawJSON())
		}
	}
}

func TestAnthropicToolUse(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()
	for _, think := range []bool{false, true} {
		p := anGreedy(anUser(paris))
		if think {
			p = anThinkingOn(p)
		}
		p.Tools = []anthropic.ToolUnionParam{anWeatherTool(), anAddTool()}
		msg, err := client.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("think=%v: stop %q: %s", think, msg.StopReason, msg.RawJSON())
		}
		var use anthropic.ContentBlockUnion
		for _, c := range msg.Content {
			if c.Type == "tool_use" {
				use = c
			}
		}
		var input map[string]any
		if err := json.Unmarshal(use.Input, &input); err != nil || input["city"] != "Paris" || use.Name != "get_weather" || use.ID == "" {
			t.Fatalf("think=%v: tool_use %s", think, use.RawJSON())
		}
		if strings.Contains(anText(msg), "tool_call") {
			t.Errorf("tool-call markup in text: %q", anText(msg))
		}
		if think && anThought(msg) == "" {
			t.Error("no thinking before the call")
		}

		// Answer the call: the model reports the result.
		p.Messages = append(p.Messages, msg.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, `{"temp_c": 21}`, false)))
		res, err := client.Messages.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if anText(res) != "It is 21°C in Paris." || res.StopReason != anthropic.StopReasonEndTurn {
			t.Errorf("think=%v: after the tool result: %q (%s)", think, anText(res), res.StopReason)
		}
	}

	// Streaming: the input arrives as input_json_delta.
	p := anGreedy(anUser(paris))
	p.Tools = []anthropic.ToolUnionParam{anWeatherTool()}
	stream := client.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	sawDelta := false
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		sawDelta = sawDelta || ev.Delta.Type == "input_json_delta"
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	last := acc.Content[len(acc.Content)-1]
	var input map[string]any
	if !sawDelta || acc.StopReason != anthropic.StopReasonToolUse || last.Type != "tool_use" || last.Name != "get_weather" ||
		json.Unmarshal(last.Input, &input) != nil || input["city"] != "Paris" {
		t.Errorf("streamed tool use: %s", acc.RawJSON())
	}

	// tool_choice none: no call.
	p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
	msg, err := client.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason == anthropic.StopReasonToolUse {
		t.Error("tool_choice none made a call")
	}
	// tool_choice naming the tool.
	p.ToolChoice = anthropic.ToolChoiceParamOfTool("get_weather")
	if msg, err = client.Messages.New(ctx, p); err != nil || msg.StopReason != anthropic.StopReasonToolUse {
		t.Errorf("tool_choice tool: %v %s", err, msg.RawJSON())
	}
}

func TestAnthropicStopSequences(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()
	p := anGreedy(anUser(japan))
	p.StopSequences = []string{"Tokyo", "Kyoto"}
	msg, err := client.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if anText(msg) != "The capital of Japan is " || msg.StopReason != anthropic.StopReasonStopSequence || msg.StopSequence != "Tokyo" {
		t.Errorf("got %q stop %q sequence %q", anText(msg), msg.StopReason, msg.StopSequence)
	}
	p.StopSequences = []string{"of Ja"}
	stream := client.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if anText(&acc) != "The capital " || acc.StopReason != anthropic.StopReasonStopSequence || acc.StopSequence != "of Ja" {
		t.Errorf("streamed %q stop %q sequence %q", anText(&acc), acc.StopReason, acc.StopSequence)
	}
}

func TestAnthropicErrors(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()
	tests := []struct {
		name   string
		params anthropic.MessageNewParams
		opts   []aopt.RequestOption
		status int
		typ    string
		want   string // in the message
	}{
		{"missing max_tokens", anGreedy(anUser("hi")), []aopt.RequestOption{aopt.WithJSONDel("max_tokens")}, 400, "invalid_request_error", "max_tokens"},
		{"no messages", anGreedy(), []aopt.RequestOption{aopt.WithJSONSet("messages", []any{})}, 400, "invalid_request_error", "messages"},
		{"temperature", anGreedy(anUser("hi")), []aopt.RequestOption{aopt.WithJSONSet("temperature", -1)}, 400, "invalid_request_error", "temperature"},
		{"image", anGreedy(anthropic.NewUserMessage(anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo="))), nil, 400, "invalid_request_error", "messages[0].content[0].type"},
		{"budget over max_tokens", func() anthropic.MessageNewParams {
			p := anGreedy(anUser("hi"))
			p.Thinking = anthropic.ThinkingConfigParamOfEnabled(500)
			return p
		}(), nil, 400, "invalid_request_error", "budget_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Messages.New(ctx, tt.params, tt.opts...)
			var apiErr *anthropic.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err %v, want *anthropic.Error", err)
			}
			if apiErr.StatusCode != tt.status || string(apiErr.Type()) != tt.typ || !strings.Contains(apiErr.Message, tt.want) {
				t.Errorf("status %d type %q message %q, want %d %q with %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message, tt.status, tt.typ, tt.want)
			}
			if apiErr.RequestID == "" {
				t.Error("no request id")
			}
		})
	}

	// A stream that fails before it starts is an HTTP error too.
	stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "chat-model", MaxTokens: 10, Messages: []anthropic.MessageParam{anUser("hi")}}, aopt.WithJSONSet("temperature", -1))
	for stream.Next() {
	}
	var apiErr *anthropic.Error
	if !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 400 || apiErr.Type() != "invalid_request_error" {
		t.Errorf("streaming with a bad temperature: %v", stream.Err())
	}

	// Malformed JSON, which the SDK cannot send.
	resp, err := http.Post(base+"/v1/messages", "application/json", strings.NewReader(`{"model":"chat-model",`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var body struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil || resp.StatusCode != 400 || body.Type != "error" ||
		body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, "malformed JSON") {
		t.Errorf("malformed JSON: %d %s", resp.StatusCode, data)
	}
}

func TestAnthropicAuth(t *testing.T) {
	base, _ := startServer(t, server.Config{APIKey: "s3cret"})
	ctx := context.Background()
	wrong, right := newAnthropic(base, aopt.WithAPIKey("wrong")), newAnthropic(base, aopt.WithAPIKey("s3cret"))
	_, err := wrong.Messages.New(ctx, anGreedy(anUser(japan)))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Type() != "authentication_error" {
		t.Fatalf("wrong key: %v", err)
	}
	msg, err := right.Messages.New(ctx, anGreedy(anUser(japan)))
	if err != nil || anText(msg) != tokyo {
		t.Fatalf("right key (x-api-key): %v", err)
	}
	// The SDK's bearer token works too.
	bearer := anthropic.NewClient(aopt.WithoutEnvironmentDefaults(), aopt.WithBaseURL(base+"/"), aopt.WithAuthToken("s3cret"),
		aopt.WithMaxRetries(0), aopt.WithJSONSet("temperature", 0))
	msg, err = bearer.Messages.New(ctx, anGreedy(anUser(japan)))
	if err != nil || anText(msg) != tokyo {
		t.Fatalf("right key (bearer): %v", err)
	}
}

func TestAnthropicCountTokens(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()
	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "chat-model", Messages: []anthropic.MessageParam{anUser(japan)},
	})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := client.Messages.New(ctx, anGreedy(anUser(japan)))
	if err != nil {
		t.Fatal(err)
	}
	if total := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens; count.InputTokens != total || total == 0 {
		t.Errorf("count_tokens %d, the message used %d", count.InputTokens, total)
	}
	// Tools add to the prompt.
	withTools, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "chat-model", Messages: []anthropic.MessageParam{anUser(japan)},
		Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: anWeatherTool().OfTool}},
	})
	if err != nil || withTools.InputTokens <= count.InputTokens {
		t.Errorf("with tools: %v (%d tokens)", err, withTools.InputTokens)
	}
	// With one model served, any name counts with it.
	other, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-nope", Messages: []anthropic.MessageParam{anUser(japan)}})
	if err != nil || other.InputTokens != count.InputTokens {
		t.Errorf("another model name: %v (%d tokens, want %d)", err, other.InputTokens, count.InputTokens)
	}
}
