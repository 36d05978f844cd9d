package compat

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lem-engine/lem/server"
)

// The questions below are ones the chat model answers in text, or with
// another tool, when it may choose: only constrained decoding makes the
// calls and the JSON these tests want.

// answerSchema keeps its strings to enums: the model was never taught
// JSON, and free inside a string it does not find the closing quote.
var answerSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"capital":   map[string]any{"enum": []any{"Tokyo", "Paris"}},
		"continent": map[string]any{"enum": []any{"Asia", "Europe"}},
		"rank":      map[string]any{"type": "integer"},
	},
	"required":             []any{"capital", "continent", "rank"},
	"additionalProperties": false,
}

// checkAnswer checks a reply against answerSchema.
func checkAnswer(t *testing.T, text string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	var v struct {
		Capital, Continent string
		Rank               *int
	}
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	if (v.Capital != "Tokyo" && v.Capital != "Paris") || (v.Continent != "Asia" && v.Continent != "Europe") || v.Rank == nil {
		t.Errorf("%q does not fit the schema", text)
	}
}

func TestOpenAIToolChoiceEnforced(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		question string
		choice   openai.ChatCompletionToolChoiceOptionUnionParam
		want     string // "*": any declared tool
	}{
		{"required", japan, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, "*"},
		{"named", paris, openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "add"}), "add"},
		{"none", paris, openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := greedy(openai.UserMessage(tt.question))
			p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool(), addTool()}
			p.ToolChoice = tt.choice
			res, err := client.Chat.Completions.New(ctx, p, noThinking)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Choices[0]
			if strings.Contains(c.Message.Content, "tool_call") {
				t.Errorf("tool-call markup in content %q", c.Message.Content)
			}
			if tt.want == "" {
				if len(c.Message.ToolCalls) > 0 || c.FinishReason == "tool_calls" || c.Message.Content == "" {
					t.Errorf("finish %q, calls %v, content %q", c.FinishReason, c.Message.ToolCalls, c.Message.Content)
				}
				return
			}
			if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) == 0 {
				t.Fatalf("finish %q, content %q", c.FinishReason, c.Message.Content)
			}
			for _, tc := range c.Message.ToolCalls {
				if tt.want != "*" && tc.Function.Name != tt.want {
					t.Errorf("called %s, want %s", tc.Function.Name, tt.want)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
					t.Errorf("arguments %q: %v", tc.Function.Arguments, err)
				}
				if tc.Function.Name == "get_weather" && args["city"] == nil || tc.Function.Name == "add" && (args["a"] == nil || args["b"] == nil) {
					t.Errorf("%s arguments %q miss a required property", tc.Function.Name, tc.Function.Arguments)
				}
			}
		})
	}
}

func TestOpenAIJSONSchema(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	p := greedy(openai.UserMessage(japan + " Answer in JSON."))
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Strict: openai.Bool(true), Schema: answerSchema},
	}}
	res, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswer(t, res.Choices[0].Message.Content)

	// Under strict, a keyword lem cannot enforce is refused, named.
	bad := map[string]any{"type": "object", "properties": map[string]any{"capital": map[string]any{"type": "string", "not": map[string]any{"const": "Paris"}}}}
	p.ResponseFormat.OfJSONSchema.JSONSchema.Schema = bad
	_, err = client.Chat.Completions.New(context.Background(), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "response_format.json_schema.schema.properties.capital.not" {
		t.Errorf("a schema with not: %v", err)
	}
}

// TestOpenAIStructuredAfterReasoning asks for structured output with
// thinking on (the chat model's template default): the model reasons in
// free text first, and the JSON schema or the forced call holds from the
// end of its reasoning; with thinking off it holds from the first token.
func TestOpenAIStructuredAfterReasoning(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	// The rank bounded: left free, the model writes integers beyond int.
	schema := map[string]any{}
	for k, v := range answerSchema {
		schema[k] = v
	}
	props := map[string]any{"rank": map[string]any{"type": "integer", "minimum": 1, "maximum": 100}}
	for k, v := range answerSchema["properties"].(map[string]any) {
		if k != "rank" {
			props[k] = v
		}
	}
	schema["properties"] = props
	format := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Strict: openai.Bool(true), Schema: schema},
	}}
	noMarkers := func(t *testing.T, s ...string) {
		t.Helper()
		for _, s := range s {
			if strings.Contains(s, "think>") {
				t.Errorf("reasoning markers in %q", s)
			}
		}
	}

	t.Run("json schema", func(t *testing.T) {
		p := greedy(openai.UserMessage(japan))
		p.ResponseFormat = format
		res, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg := res.Choices[0].Message
		reasoning := extraString(msg.JSON.ExtraFields, "reasoning_content")
		if reasoning != japanThink || res.Choices[0].FinishReason != "stop" {
			t.Errorf("finish %q, reasoning %q", res.Choices[0].FinishReason, reasoning)
		}
		noMarkers(t, reasoning, msg.Content)
		checkAnswer(t, msg.Content)
	})

	t.Run("json schema streamed", func(t *testing.T) {
		p := greedy(openai.UserMessage(japan))
		p.ResponseFormat = format
		stream := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		var reasoning strings.Builder
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) > 0 {
				reasoning.WriteString(extraString(ch.Choices[0].Delta.JSON.ExtraFields, "reasoning_content"))
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if reasoning.String() != japanThink {
			t.Errorf("streamed reasoning %q", reasoning.String())
		}
		noMarkers(t, reasoning.String(), acc.Choices[0].Message.Content)
		checkAnswer(t, acc.Choices[0].Message.Content)
	})

	t.Run("tool_choice required", func(t *testing.T) {
		p := greedy(openai.UserMessage(japan))
		p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool(), addTool()}
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		res, err := client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		reasoning := extraString(c.Message.JSON.ExtraFields, "reasoning_content")
		if reasoning != japanThink || c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) == 0 || c.Message.Content != "" {
			t.Fatalf("finish %q, reasoning %q, content %q, calls %v", c.FinishReason, reasoning, c.Message.Content, c.Message.ToolCalls)
		}
		for _, tc := range c.Message.ToolCalls {
			var args map[string]any
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
				t.Errorf("%s arguments %q: %v", tc.Function.Name, tc.Function.Arguments, err)
			}
		}
	})

	t.Run("thinking off", func(t *testing.T) {
		p := greedy(openai.UserMessage(japan))
		p.ResponseFormat = format
		res, err := client.Chat.Completions.New(ctx, p, noThinking)
		if err != nil {
			t.Fatal(err)
		}
		msg := res.Choices[0].Message
		if r := extraString(msg.JSON.ExtraFields, "reasoning_content"); r != "" {
			t.Errorf("reasoning %q with thinking off", r)
		}
		if !strings.HasPrefix(msg.Content, "{") {
			t.Errorf("content %q does not begin with the value", msg.Content)
		}
		checkAnswer(t, msg.Content)
	})
}

func TestAnthropicToolChoiceEnforced(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	for _, tt := range []struct {
		name     string
		question string
		choice   anthropic.ToolChoiceUnionParam
		want     string
	}{
		{"any", japan, anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}, "*"},
		{"tool", paris, anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "add"}}, "add"},
		{"none", paris, anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := anGreedy(anUser(tt.question))
			p.Tools = []anthropic.ToolUnionParam{anWeatherTool(), anAddTool()}
			p.ToolChoice = tt.choice
			msg, err := client.Messages.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			var uses []anthropic.ContentBlockUnion
			for _, c := range msg.Content {
				if c.Type == "tool_use" {
					uses = append(uses, c)
				}
			}
			if strings.Contains(anText(msg), "tool_call") {
				t.Errorf("tool-call markup in text %q", anText(msg))
			}
			if tt.want == "" {
				if len(uses) > 0 || msg.StopReason == "tool_use" {
					t.Errorf("stop %q, tool uses %d", msg.StopReason, len(uses))
				}
				return
			}
			if msg.StopReason != "tool_use" || len(uses) == 0 {
				t.Fatalf("stop %q, text %q", msg.StopReason, anText(msg))
			}
			for _, u := range uses {
				var input map[string]any
				if err := json.Unmarshal(u.Input, &input); err != nil || tt.want != "*" && u.Name != tt.want {
					t.Errorf("tool use %s %s: %v", u.Name, u.Input, err)
				}
			}
		})
	}
}

func TestAnthropicThinkingBudget(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	p := anGreedy(anUser(japan))
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(100)
	full, err := client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	p.Thinking = anthropic.ThinkingConfigParamOfEnabled(3)
	short, err := client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if anThought(full) == "" || anThought(short) == "" || len(anThought(short)) >= len(anThought(full))/2 || !strings.HasPrefix(anThought(full), anThought(short)) {
		t.Errorf("reasoning with budget 100 %q, with 3 %q", anThought(full), anThought(short))
	}
	if text := anText(short); text == "" || strings.Contains(text, "think>") {
		t.Errorf("text after the budget: %q", text)
	}
}

func TestAnthropicModels(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newAnthropic(base)
	ctx := context.Background()
	page, err := client.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.HasMore || page.FirstID != "chat-model" || page.LastID != "chat-model" {
		t.Fatalf("page %s", page.RawJSON())
	}
	m := page.Data[0]
	if m.ID != "chat-model" || m.DisplayName == "" || m.CreatedAt.IsZero() || m.Type != "model" {
		t.Errorf("model %s", m.RawJSON())
	}
	var ids []string
	for iter := client.Models.ListAutoPaging(ctx, anthropic.ModelListParams{Limit: anthropic.Int(1)}); iter.Next(); {
		ids = append(ids, iter.Current().ID)
	}
	if len(ids) != 1 {
		t.Errorf("auto-paging listed %v", ids)
	}
	got, err := client.Models.Get(ctx, "chat-model", anthropic.ModelGetParams{})
	if err != nil || got.ID != "chat-model" || got.CreatedAt.IsZero() {
		t.Fatalf("get: %v %v", got, err)
	}
	_, err = client.Models.Get(ctx, "claude-nope", anthropic.ModelGetParams{})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Type() != "not_found_error" {
		t.Errorf("unknown model: %v", err)
	}
}

func TestOllamaFormatSchema(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	format, _ := json.Marshal(answerSchema)
	for _, stream := range []bool{false, true} {
		// Thinking left out is the template's default (on): the model
		// reasons, then the schema holds.
		req := &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan + " Answer in JSON.")}, Stream: &stream,
			Format: format, Options: olGreedy()}
		content, thinking := olJoin(olChat(t, c, req))
		if thinking == "" || strings.Contains(thinking, "think>") {
			t.Errorf("stream=%v: thinking %q", stream, thinking)
		}
		checkAnswer(t, content)
		req.Think = olThink(false)
		content, thinking = olJoin(olChat(t, c, req))
		if thinking != "" {
			t.Errorf("stream=%v, think false: thinking %q", stream, thinking)
		}
		checkAnswer(t, content)
	}
}
