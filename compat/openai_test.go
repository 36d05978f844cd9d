package compat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/server"
)

const (
	japan      = "What is the capital of Japan?"
	tokyo      = "The capital of Japan is Tokyo."
	japanThink = "The user asks for the capital of Japan. It is Tokyo."
	paris      = "What's the weather in Paris?"
)

// noThinking turns the chat template's thinking off.
var noThinking = option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false})

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: param.NewOpt("Get the current weather in a city"),
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required":   []string{"city"},
		},
	})
}

func addTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "add",
		Description: param.NewOpt("Add two numbers"),
		Parameters: shared.FunctionParameters{
			"type": "object",
			"properties": map[string]any{
				"a": map[string]any{"type": "number"},
				"b": map[string]any{"type": "number"},
			},
		},
	})
}

func greedy(msgs ...openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "chat-model", Messages: msgs, Temperature: param.NewOpt(0.0)}
}

func TestChatNonStreaming(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()

	res, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	if c.Message.Content != tokyo || c.FinishReason != "stop" || c.Message.Role != "assistant" {
		t.Errorf("got %q finish %q", c.Message.Content, c.FinishReason)
	}
	if res.Model != "chat-model" || !strings.HasPrefix(res.ID, "chatcmpl-") || res.Object != "chat.completion" {
		t.Errorf("id %q model %q object %q", res.ID, res.Model, res.Object)
	}
	if res.Usage.PromptTokens == 0 || res.Usage.CompletionTokens == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
		t.Errorf("usage %+v", res.Usage)
	}

	// The same question again: the prompt is reused in whole blocks of
	// the paged cache, but for its last token.
	res2, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(engine.DefaultBlockSize)
	if got, want := res2.Usage.PromptTokensDetails.CachedTokens, (res2.Usage.PromptTokens-1)/bs*bs; got != want || got == 0 {
		t.Errorf("cached tokens %d, want %d", got, want)
	}
	if res2.Choices[0].Message.Content != tokyo {
		t.Errorf("second answer %q", res2.Choices[0].Message.Content)
	}

	// Content as an array of parts, and a system message.
	res3, err := client.Chat.Completions.New(ctx, greedy(
		openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(japan)})), noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if res3.Choices[0].Message.Content != tokyo {
		t.Errorf("parts: %q", res3.Choices[0].Message.Content)
	}
}

func TestChatReasoning(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()

	// Thinking is the template's default.
	res, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)))
	if err != nil {
		t.Fatal(err)
	}
	msg := res.Choices[0].Message
	reasoning := extraString(msg.JSON.ExtraFields, "reasoning_content")
	if msg.Content != tokyo || reasoning != japanThink {
		t.Errorf("content %q reasoning %q", msg.Content, reasoning)
	}

	// Streaming: reasoning deltas never reach content.
	stream := client.Chat.Completions.NewStreaming(ctx, greedy(openai.UserMessage(japan)))
	var content, streamed strings.Builder
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		d := ch.Choices[0].Delta
		content.WriteString(d.Content)
		streamed.WriteString(extraString(d.JSON.ExtraFields, "reasoning_content"))
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if content.String() != tokyo || streamed.String() != japanThink {
		t.Errorf("streamed content %q reasoning %q", content.String(), streamed.String())
	}
	if strings.Contains(content.String(), "think>") {
		t.Error("thinking markers leaked into content")
	}

	// reasoning_effort "none" turns thinking off.
	p := greedy(openai.UserMessage(japan))
	p.ReasoningEffort = shared.ReasoningEffortNone
	res, err = client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if msg := res.Choices[0].Message; msg.Content != tokyo || extraString(msg.JSON.ExtraFields, "reasoning_content") != "" {
		t.Errorf("effort none: content %q, reasoning present: %v", msg.Content, msg.JSON.ExtraFields["reasoning_content"].Valid())
	}
}

type rawField interface{ Raw() string }

func extraString[F rawField](fields map[string]F, key string) string {
	f, ok := fields[key]
	if !ok {
		return ""
	}
	var s string
	json.Unmarshal([]byte(f.Raw()), &s)
	return s
}

func TestChatStreaming(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	p := greedy(openai.UserMessage(japan))
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), p, noThinking)
	acc := openai.ChatCompletionAccumulator{}
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		chunks = append(chunks, ch)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 4 {
		t.Fatalf("%d chunks", len(chunks))
	}
	if first := chunks[0].Choices[0].Delta; first.Role != "assistant" || first.Content != "" {
		t.Errorf("first chunk %+v, want the role", first)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.CompletionTokens == 0 || last.Usage.PromptTokens == 0 {
		t.Errorf("last chunk %s, want usage only", last.RawJSON())
	}
	if fin := chunks[len(chunks)-2].Choices[0].FinishReason; fin != "stop" {
		t.Errorf("finish %q", fin)
	}
	if got := acc.Choices[0].Message.Content; got != tokyo {
		t.Errorf("accumulated %q", got)
	}
	for _, ch := range chunks {
		if ch.ID != chunks[0].ID || ch.Model != "chat-model" || ch.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %s", ch.RawJSON())
		}
	}
}

func TestChatToolCalls(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	for _, think := range []bool{false, true} {
		p := greedy(openai.UserMessage(paris))
		p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool(), addTool()}
		opts := []option.RequestOption{option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": think})}
		res, err := client.Chat.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
			t.Fatalf("think=%v: finish %q calls %d content %q", think, c.FinishReason, len(c.Message.ToolCalls), c.Message.Content)
		}
		tc := c.Message.ToolCalls[0]
		var args map[string]any
		if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || args["city"] != "Paris" {
			t.Errorf("arguments %q: %v", tc.Function.Arguments, err)
		}
		if tc.Function.Name != "get_weather" || tc.ID == "" || tc.Type != "function" {
			t.Errorf("call %+v", tc)
		}
		if c.Message.Content != "" || strings.Contains(c.Message.Content, "tool_call") {
			t.Errorf("content beside the call: %q", c.Message.Content)
		}
		if think && extraString(c.Message.JSON.ExtraFields, "reasoning_content") == "" {
			t.Error("no reasoning before the call")
		}

		// Answer the call; the model reports the result.
		p.Messages = append(p.Messages, c.Message.ToParam(), openai.ToolMessage(`{"temp_c": 21}`, tc.ID))
		res, err = client.Chat.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Choices[0].Message.Content; got != "It is 21°C in Paris." || res.Choices[0].FinishReason != "stop" {
			t.Errorf("think=%v: after the tool result: %q (%s)", think, got, res.Choices[0].FinishReason)
		}
	}

	// Streaming: the call arrives whole in one delta.
	p := greedy(openai.UserMessage(paris))
	p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
	stream := client.Chat.Completions.NewStreaming(ctx, p)
	acc := openai.ChatCompletionAccumulator{}
	finish := ""
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		if len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
		if len(ch.Choices) > 0 && strings.Contains(ch.Choices[0].Delta.Content, "<tool_call>") {
			t.Error("tool-call markup streamed as content")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	calls := acc.Choices[0].Message.ToolCalls
	if finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) {
		t.Errorf("streamed: finish %q calls %+v", finish, calls)
	}

	// tool_choice none: no call.
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt("none")}
	res, err := client.Chat.Completions.New(ctx, p, noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].FinishReason == "tool_calls" {
		t.Error("tool_choice none made a call")
	}
}

func TestStopSequences(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	p := greedy(openai.UserMessage(japan))
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"Tokyo", "Kyoto"}}
	res, err := client.Chat.Completions.New(context.Background(), p, noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Choices[0]; c.Message.Content != "The capital of Japan is " || c.FinishReason != "stop" {
		t.Errorf("got %q finish %q", c.Message.Content, c.FinishReason)
	}
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfString: param.NewOpt("of Ja")}
	stream := client.Chat.Completions.NewStreaming(context.Background(), p, noThinking)
	var content strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			content.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if content.String() != "The capital " {
		t.Errorf("streamed %q", content.String())
	}
}

func TestSamplingParameters(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{
		Model:            "chat-model",
		Messages:         []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello!")},
		Temperature:      param.NewOpt(0.8),
		TopP:             param.NewOpt(0.9),
		Seed:             param.NewOpt[int64](42),
		PresencePenalty:  param.NewOpt(0.1),
		FrequencyPenalty: param.NewOpt(0.1),
		N:                param.NewOpt[int64](3),
		MaxTokens:        param.NewOpt[int64](40),
		Logprobs:         param.NewOpt(true),
		TopLogprobs:      param.NewOpt[int64](2),
	}
	opts := []option.RequestOption{noThinking, option.WithJSONSet("top_k", 20), option.WithJSONSet("min_p", 0.05), option.WithJSONSet("repetition_penalty", 1.1)}
	res, err := client.Chat.Completions.New(ctx, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 3 {
		t.Fatalf("%d choices", len(res.Choices))
	}
	for i, c := range res.Choices {
		if c.Index != int64(i) || c.Message.Content == "" || len(c.Logprobs.Content) == 0 {
			t.Errorf("choice %d: %s", i, c.RawJSON())
		}
		for _, lp := range c.Logprobs.Content {
			if lp.Logprob > 0 || len(lp.TopLogprobs) != 2 {
				t.Fatalf("logprob %s", lp.RawJSON())
			}
		}
	}
	// The same seed gives the same choices.
	res2, err := client.Chat.Completions.New(ctx, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Choices {
		if res.Choices[i].Message.Content != res2.Choices[i].Message.Content {
			t.Errorf("seeded choice %d differs: %q vs %q", i, res.Choices[i].Message.Content, res2.Choices[i].Message.Content)
		}
	}

	// max_tokens cuts with finish reason length.
	p2 := greedy(openai.UserMessage(japan))
	p2.MaxCompletionTokens = param.NewOpt[int64](3)
	res, err = client.Chat.Completions.New(ctx, p2, noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Choices[0]; c.FinishReason != "length" || res.Usage.CompletionTokens != 3 {
		t.Errorf("finish %q after %d tokens", c.FinishReason, res.Usage.CompletionTokens)
	}

	// logit_bias bans the answer's first token.
	id, ok := chatModel(t).Tokenizer.TokenID("The")
	if !ok {
		t.Fatal("no token The")
	}
	p2.MaxCompletionTokens = param.Opt[int64]{}
	p2.LogitBias = map[string]int64{strconv.Itoa(int(id)): -100}
	res, err = client.Chat.Completions.New(ctx, p2, noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(res.Choices[0].Message.Content, "The") {
		t.Errorf("banned token still first: %q", res.Choices[0].Message.Content)
	}
}

func TestErrors(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	tests := []struct {
		name   string
		params openai.ChatCompletionNewParams
		opts   []option.RequestOption
		status int
		param  string
	}{
		{"no messages", openai.ChatCompletionNewParams{Model: "chat-model"}, []option.RequestOption{option.WithJSONSet("messages", []any{})}, 400, "messages"},
		{"over the context", openai.ChatCompletionNewParams{Model: "chat-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: param.NewOpt[int64](100000)}, nil, 400, "max_tokens"},
		{"temperature", openai.ChatCompletionNewParams{Model: "chat-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Temperature: param.NewOpt(-1.0)}, nil, 400, "temperature"},
		{"wrong type", openai.ChatCompletionNewParams{Model: "chat-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, []option.RequestOption{option.WithJSONSet("n", "two")}, 400, "n"},
		{"image", openai.ChatCompletionNewParams{Model: "chat-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"})})}}, nil, 400, "messages[0].content[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Chat.Completions.New(ctx, tt.params, tt.opts...)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Param != tt.param || apiErr.Message == "" {
				t.Errorf("status %d param %q message %q, want %d %q", apiErr.StatusCode, apiErr.Param, apiErr.Message, tt.status, tt.param)
			}
		})
	}
	// A streaming request that fails before it starts is an HTTP error too.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "chat-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Temperature: param.NewOpt(-1.0)})
	for stream.Next() {
	}
	var apiErr *openai.Error
	if !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("streaming with a bad temperature: %v", stream.Err())
	}
}

func TestAuth(t *testing.T) {
	base, _ := startServer(t, server.Config{APIKey: "s3cret"})
	ctx := context.Background()
	wrong, right := newClient(base, option.WithAPIKey("wrong")), newClient(base, option.WithAPIKey("s3cret"))
	_, err := wrong.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := wrong.Models.List(ctx); err == nil {
		t.Error("models listed with a wrong key")
	}
	res, err := right.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
	if err != nil || res.Choices[0].Message.Content != tokyo {
		t.Fatalf("right key: %v", err)
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health without a key: %d", resp.StatusCode)
	}
}

// longParams asks for a reply that cannot end early (end of turn banned).
func longParams(n int64) openai.ChatCompletionNewParams {
	p := greedy(openai.UserMessage("Hello!"))
	p.MaxTokens = param.NewOpt(n)
	p.LogitBias = map[string]int64{"2": -100}
	return p
}

func TestQueueOverflow(t *testing.T) {
	base, _ := startOneAtATime(t, server.Config{MaxQueue: 1})
	client := newClient(base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One request runs, one waits; the third is refused.
	running := client.Chat.Completions.NewStreaming(ctx, longParams(2000))
	if !running.Next() {
		t.Fatal(running.Err())
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)), noThinking)
		waitErr <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for queueDepth(t, base) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := client.Chat.Completions.New(ctx, greedy(openai.UserMessage(japan)))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("third request: %v, want 429", err)
	}
	if ra := apiErr.Response.Header.Get("Retry-After"); ra == "" {
		t.Error("the 429 has no Retry-After")
	}
	// Dropping the running stream lets the waiting request through.
	running.Close()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("queued request: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request did not run after the stream was dropped")
	}
}

// queueDepth reads lem_queue_depth from /metrics.
func queueDepth(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `lem_queue_depth{model="chat-model"} `); ok {
			return map[string]int{"0": 0, "1": 1, "2": 2}[v]
		}
	}
	return -1
}

func TestDisconnectCancels(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx, cancel := context.WithCancel(context.Background())
	stream := client.Chat.Completions.NewStreaming(ctx, longParams(2000))
	for range 5 {
		if !stream.Next() {
			t.Fatal(stream.Err())
		}
	}
	cancel()
	stream.Close()
	start := time.Now()
	res, err := client.Chat.Completions.New(context.Background(), greedy(openai.UserMessage(japan)), noThinking)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != tokyo {
		t.Errorf("next answer %q", res.Choices[0].Message.Content)
	}
	// A 2000-token reply takes seconds on this model; the abandoned one
	// must not be running.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the next request waited %v", d)
	}
	if n := metric(t, base, `lem_generated_tokens_total{model="chat-model"}`); n > 200 {
		t.Errorf("%v tokens generated in all: the abandoned stream kept going", n)
	}
}

// metric reads one sample from /metrics.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			json.Unmarshal([]byte(v), &f)
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func TestModels(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "chat-model" || page.Data[0].Object != "model" {
		t.Errorf("models %s", page.RawJSON())
	}
	m, err := client.Models.Get(ctx, "chat-model")
	if err != nil || m.ID != "chat-model" {
		t.Fatalf("get: %v", err)
	}
	_, err = client.Models.Get(ctx, "gpt-9")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Errorf("unknown model: %v", err)
	}
}

func TestCompletions(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	prompt := "<|im_start|>user\nWhat is the capital of Japan?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	p := openai.CompletionNewParams{
		Model:       "chat-model",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: param.NewOpt(prompt)},
		MaxTokens:   param.NewOpt[int64](30),
		Temperature: param.NewOpt(0.0),
	}
	res, err := client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Choices[0]; c.Text != tokyo || c.FinishReason != "stop" || res.Object != "text_completion" {
		t.Errorf("text %q finish %q", c.Text, c.FinishReason)
	}
	p.Echo = param.NewOpt(true)
	res, err = client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Text != prompt+tokyo {
		t.Errorf("echo: %q", res.Choices[0].Text)
	}
	p.Echo = param.Opt[bool]{}
	stream := client.Completions.NewStreaming(ctx, p)
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
		}
	}
	if err := stream.Err(); err != nil || text.String() != tokyo {
		t.Errorf("streamed %q, %v", text.String(), err)
	}
	// Several prompts give a choice each.
	p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{prompt, strings.Replace(prompt, "Japan", "France", 1)}}
	res, err = client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 2 || res.Choices[1].Index != 1 || res.Choices[0].Text != tokyo || !strings.Contains(res.Choices[1].Text, "Paris") {
		t.Errorf("two prompts: %s", res.RawJSON())
	}
	// The chat model's vocabulary declares fill-in-the-middle tokens.
	p.Suffix = param.NewOpt("tail")
	res, err = client.Completions.New(ctx, p)
	if err != nil || len(res.Choices) != 2 {
		t.Errorf("suffix: %v", err)
	}
}

func TestResponses(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	res, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(japan)},
		Temperature: param.NewOpt(0.0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputText() != tokyo || res.Status != "completed" || res.Usage.OutputTokens == 0 {
		t.Errorf("output %q status %q", res.OutputText(), res.Status)
	}
	var sawReasoning bool
	for _, item := range res.Output {
		if item.Type == "reasoning" {
			r := item.AsReasoning()
			sawReasoning = len(r.Content) == 1 && r.Content[0].Text == japanThink
		}
	}
	if !sawReasoning {
		t.Errorf("no reasoning item: %s", res.RawJSON())
	}

	// Streaming: output_text deltas add up to the answer.
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(japan)},
		Temperature: param.NewOpt(0.0),
	})
	var text strings.Builder
	var completed *responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != tokyo || completed == nil || completed.OutputText() != tokyo {
		t.Errorf("streamed %q, completed %v", text.String(), completed != nil)
	}

	// A tool call, answered through previous_response_id.
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:       "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		Strict:     param.NewOpt(false),
	}}
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:       "chat-model",
		Input:       responses.ResponseNewParamsInputUnion{OfString: param.NewOpt(paris)},
		Tools:       []responses.ToolUnionParam{tool},
		Temperature: param.NewOpt(0.0),
	})
	if err != nil {
		t.Fatal(err)
	}
	var call responses.ResponseFunctionToolCall
	for _, item := range first.Output {
		if item.Type == "function_call" {
			call = item.AsFunctionCall()
		}
	}
	if call.Name != "get_weather" || !json.Valid([]byte(call.Arguments)) || call.CallID == "" {
		t.Fatalf("no function call: %s", first.RawJSON())
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp_c": 21}`)
	out.OfFunctionCallOutput.CallID = param.NewOpt(call.CallID)
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "chat-model",
		PreviousResponseID: param.NewOpt(first.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}},
		Tools:              []responses.ToolUnionParam{tool},
		Temperature:        param.NewOpt(0.0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if second.OutputText() != "It is 21°C in Paris." {
		t.Errorf("after the tool result: %q", second.OutputText())
	}
	if got, err := client.Responses.Get(ctx, second.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != second.OutputText() {
		t.Errorf("stored response: %v", err)
	}
}

func TestJSONObjectAndChoices(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{
		Model:     "chat-model",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(japan)},
		MaxTokens: param.NewOpt[int64](40),
		Seed:      param.NewOpt[int64](3),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONObject: &shared.ResponseFormatJSONObjectParam{},
		},
	}
	res, err := client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Choices[0].Message.Content; !strings.HasPrefix(c, "{") || strings.Contains(c, "<think>") {
		t.Errorf("json_object content %q", c)
	}

	// Two streamed choices, told apart by index.
	p2 := greedy(openai.UserMessage(japan))
	p2.N = param.NewOpt[int64](2)
	stream := client.Chat.Completions.NewStreaming(ctx, p2, noThinking)
	var texts [2]strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			texts[ch.Index].WriteString(ch.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if texts[0].String() != tokyo || texts[1].String() != tokyo {
		t.Errorf("choices %q, %q", texts[0].String(), texts[1].String())
	}
}
