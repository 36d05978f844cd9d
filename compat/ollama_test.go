package compat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/lem-engine/lem/server"
	"github.com/lem-engine/lem/tiny"
)

// newOllama returns Ollama's client of the server at base; a key, when
// given, goes in an Authorization: Bearer header.
func newOllama(t *testing.T, base, key string) *api.Client {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	hc := http.DefaultClient
	if key != "" {
		hc = &http.Client{Transport: bearer{key}}
	}
	return api.NewClient(u, hc)
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

var (
	olFalse = false
	olTrue  = true
)

// olGreedy is options for greedy decoding.
func olGreedy() map[string]any { return map[string]any{"temperature": 0} }

func olUser(text string) api.Message { return api.Message{Role: "user", Content: text} }

func olThink(on bool) *api.ThinkValue { return &api.ThinkValue{Value: on} }

// olChat runs a chat and returns the chunks it got.
func olChat(t *testing.T, c *api.Client, req *api.ChatRequest) []api.ChatResponse {
	t.Helper()
	var chunks []api.ChatResponse
	if err := c.Chat(context.Background(), req, func(r api.ChatResponse) error {
		chunks = append(chunks, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(chunks) == 0 || !chunks[len(chunks)-1].Done {
		t.Fatalf("%d chunks, the last not done", len(chunks))
	}
	return chunks
}

// olJoin joins the content and thinking of chunks.
func olJoin(chunks []api.ChatResponse) (content, thinking string) {
	var c, th strings.Builder
	for _, r := range chunks {
		c.WriteString(r.Message.Content)
		th.WriteString(r.Message.Thinking)
	}
	return c.String(), th.String()
}

func olWeatherTool() api.Tool {
	props := api.NewToolPropertiesMap()
	props.Set("city", api.ToolProperty{Type: api.PropertyType{"string"}, Description: "City name"})
	return api.Tool{Type: "function", Function: api.ToolFunction{
		Name: "get_weather", Description: "Get the current weather in a city",
		Parameters: api.ToolFunctionParameters{Type: "object", Required: []string{"city"}, Properties: props},
	}}
}

func checkMetrics(t *testing.T, r api.ChatResponse) {
	t.Helper()
	m := r.Metrics
	if m.PromptEvalCount == 0 || m.EvalCount == 0 || m.TotalDuration <= 0 || m.EvalDuration <= 0 || m.PromptEvalDuration <= 0 ||
		m.TotalDuration < m.EvalDuration+m.PromptEvalDuration {
		t.Errorf("metrics %+v", m)
	}
}

func TestOllamaChat(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")

	// Not streamed; the name with its tag.
	chunks := olChat(t, c, &api.ChatRequest{Model: "chat-model:latest", Messages: []api.Message{olUser(japan)},
		Stream: &olFalse, Think: olThink(false), Options: olGreedy()})
	if len(chunks) != 1 {
		t.Fatalf("%d chunks without streaming", len(chunks))
	}
	r := chunks[0]
	if r.Message.Content != tokyo || r.Message.Role != "assistant" || r.Message.Thinking != "" || r.DoneReason != "stop" || r.Model != "chat-model:latest" {
		t.Errorf("reply %+v", r)
	}
	if r.CreatedAt.IsZero() {
		t.Error("no created_at")
	}
	checkMetrics(t, r)

	// Streamed (the default), the name without its tag.
	chunks = olChat(t, c, &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)}, Think: olThink(false), Options: olGreedy()})
	if len(chunks) < 3 {
		t.Fatalf("%d chunks streamed", len(chunks))
	}
	content, _ := olJoin(chunks)
	last := chunks[len(chunks)-1]
	if content != tokyo || last.DoneReason != "stop" || last.Message.Content != "" {
		t.Errorf("streamed %q, last %+v", content, last)
	}
	for _, r := range chunks[:len(chunks)-1] {
		if r.Done || r.Metrics.EvalCount != 0 {
			t.Fatalf("chunk before the end: %+v", r)
		}
	}
	checkMetrics(t, last)

	// A system message and options.
	chunks = olChat(t, c, &api.ChatRequest{Model: "chat-model", Stream: &olFalse, Think: olThink(false),
		Messages: []api.Message{{Role: "system", Content: "You are a helpful assistant."}, olUser(japan)},
		Options:  map[string]any{"temperature": 0, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "repeat_penalty": 1.0, "repeat_last_n": 64, "seed": 7, "num_ctx": 4096}})
	if !strings.Contains(chunks[0].Message.Content, "Tokyo") {
		t.Errorf("with a system message: %q", chunks[0].Message.Content)
	}

	// num_predict cuts the reply.
	chunks = olChat(t, c, &api.ChatRequest{Model: "chat-model", Stream: &olFalse, Think: olThink(false), Messages: []api.Message{olUser(japan)},
		Options: map[string]any{"temperature": 0, "num_predict": 3}})
	if r := chunks[0]; r.DoneReason != "length" || r.Metrics.EvalCount != 3 {
		t.Errorf("num_predict 3: %q after %d tokens", r.DoneReason, r.Metrics.EvalCount)
	}

	// An empty conversation loads the model.
	chunks = olChat(t, c, &api.ChatRequest{Model: "chat-model"})
	if chunks[0].DoneReason != "load" {
		t.Errorf("load: %+v", chunks[0])
	}
}

func TestOllamaThinking(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	for _, stream := range []bool{false, true} {
		chunks := olChat(t, c, &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)},
			Stream: &stream, Think: olThink(true), Options: olGreedy()})
		content, thinking := olJoin(chunks)
		if content != tokyo || thinking != japanThink {
			t.Errorf("stream=%v: content %q thinking %q", stream, content, thinking)
		}
		for _, r := range chunks {
			if stream && r.Message.Content != "" && r.Message.Thinking != "" {
				t.Errorf("a chunk with both content and thinking: %+v", r.Message)
			}
			if strings.Contains(r.Message.Content, "think>") {
				t.Error("thinking markers in content")
			}
		}
	}
	// Thinking levels turn it on too.
	chunks := olChat(t, c, &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)},
		Stream: &olFalse, Think: &api.ThinkValue{Value: "low"}, Options: olGreedy()})
	if chunks[0].Message.Thinking != japanThink {
		t.Errorf("think low: %q", chunks[0].Message.Thinking)
	}
	// The thinking goes back in the next turn.
	chunks = olChat(t, c, &api.ChatRequest{Model: "chat-model", Stream: &olFalse, Think: olThink(true), Options: olGreedy(),
		Messages: []api.Message{olUser(japan), chunks[0].Message, olUser(japan)}})
	if chunks[0].Message.Content == "" {
		t.Errorf("second turn: %+v", chunks[0].Message)
	}
}

func TestOllamaTools(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	for _, stream := range []bool{false, true} {
		req := &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(paris)}, Stream: &stream,
			Tools: api.Tools{olWeatherTool()}, Think: olThink(false), Options: olGreedy()}
		chunks := olChat(t, c, req)
		var calls []api.ToolCall
		for _, r := range chunks {
			calls = append(calls, r.Message.ToolCalls...)
			if strings.Contains(r.Message.Content, "tool_call") {
				t.Errorf("tool-call markup in content: %q", r.Message.Content)
			}
		}
		if len(calls) != 1 {
			t.Fatalf("stream=%v: %d calls", stream, len(calls))
		}
		call := calls[0]
		if city, _ := call.Function.Arguments.Get("city"); call.Function.Name != "get_weather" || city != "Paris" || call.ID == "" {
			t.Errorf("stream=%v: call %+v", stream, call)
		}
		if last := chunks[len(chunks)-1]; last.DoneReason != "stop" {
			t.Errorf("done_reason %q", last.DoneReason)
		}

		// Answer the call: the model reports the result.
		req.Messages = append(req.Messages, api.Message{Role: "assistant", ToolCalls: calls},
			api.Message{Role: "tool", Content: `{"temp_c": 21}`, ToolName: "get_weather", ToolCallID: call.ID})
		content, _ := olJoin(olChat(t, c, req))
		if content != "It is 21°C in Paris." {
			t.Errorf("stream=%v: after the tool result: %q", stream, content)
		}
	}
}

func TestOllamaStop(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	for _, stream := range []bool{false, true} {
		chunks := olChat(t, c, &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)}, Stream: &stream,
			Think: olThink(false), Options: map[string]any{"temperature": 0, "stop": []string{"Tokyo", "Kyoto"}}})
		content, _ := olJoin(chunks)
		if content != "The capital of Japan is " || chunks[len(chunks)-1].DoneReason != "stop" {
			t.Errorf("stream=%v: %q (%s)", stream, content, chunks[len(chunks)-1].DoneReason)
		}
	}
}

func TestOllamaGenerate(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	ctx := context.Background()
	generate := func(req *api.GenerateRequest) []api.GenerateResponse {
		t.Helper()
		var out []api.GenerateResponse
		if err := c.Generate(ctx, req, func(r api.GenerateResponse) error {
			out = append(out, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 || !out[len(out)-1].Done {
			t.Fatal("no done chunk")
		}
		return out
	}
	join := func(rs []api.GenerateResponse) (string, string) {
		var r, th strings.Builder
		for _, x := range rs {
			r.WriteString(x.Response)
			th.WriteString(x.Thinking)
		}
		return r.String(), th.String()
	}

	// Through the chat template, streamed.
	rs := generate(&api.GenerateRequest{Model: "chat-model", Prompt: japan, Think: olThink(false), Options: olGreedy()})
	if text, _ := join(rs); text != tokyo || len(rs) < 3 {
		t.Errorf("streamed %q in %d chunks", text, len(rs))
	}
	last := rs[len(rs)-1]
	if last.DoneReason != "stop" || last.EvalCount == 0 || last.PromptEvalCount == 0 || last.TotalDuration <= 0 {
		t.Errorf("last chunk %+v", last)
	}

	// Thinking on, whole.
	rs = generate(&api.GenerateRequest{Model: "chat-model", Prompt: japan, Think: olThink(true), Stream: &olFalse, Options: olGreedy()})
	if text, thinking := join(rs); len(rs) != 1 || text != tokyo || thinking != japanThink {
		t.Errorf("thinking: %q / %q in %d chunks", text, thinking, len(rs))
	}

	// Raw: the prompt as it is.
	raw := "<|im_start|>user\nWhat is the capital of Japan?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	rs = generate(&api.GenerateRequest{Model: "chat-model", Prompt: raw, Raw: true, Stream: &olFalse, Options: olGreedy()})
	if text, _ := join(rs); text != tokyo {
		t.Errorf("raw: %q", text)
	}

	// format json: one JSON object.
	rs = generate(&api.GenerateRequest{Model: "chat-model", Prompt: japan, Format: json.RawMessage(`"json"`), Stream: &olFalse,
		Options: map[string]any{"seed": 3, "num_predict": 60}})
	if text, _ := join(rs); !strings.HasPrefix(strings.TrimSpace(text), "{") || strings.Contains(text, "<think>") {
		t.Errorf("format json: %q", text)
	}
	// A schema is taken as JSON too.
	rs = generate(&api.GenerateRequest{Model: "chat-model", Prompt: japan, Stream: &olFalse,
		Format:  json.RawMessage(`{"type":"object","properties":{"capital":{"type":"string"}}}`),
		Options: map[string]any{"seed": 3, "num_predict": 60}})
	if text, _ := join(rs); !strings.HasPrefix(strings.TrimSpace(text), "{") {
		t.Errorf("format schema: %q", text)
	}

	// An empty prompt loads the model; keep_alive 0 unloads it.
	if rs = generate(&api.GenerateRequest{Model: "chat-model"}); rs[0].DoneReason != "load" {
		t.Errorf("load: %+v", rs[0])
	}
	if rs = generate(&api.GenerateRequest{Model: "chat-model", KeepAlive: &api.Duration{}}); rs[0].DoneReason != "unload" {
		t.Errorf("unload: %+v", rs[0])
	}
}

func TestOllamaModels(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	ctx := context.Background()
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := c.Version(ctx)
	if err != nil || v == "" {
		t.Fatalf("version %q: %v", v, err)
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 1 {
		t.Fatalf("%d models", len(list.Models))
	}
	m := list.Models[0]
	if m.Name != "chat-model:latest" || m.Model != m.Name || m.Size == 0 || len(m.Digest) != 64 || m.ModifiedAt.IsZero() ||
		m.Details.Format != "safetensors" || m.Details.Family != "qwen3" || m.Details.ParameterSize == "" || m.Details.QuantizationLevel != "BF16" {
		t.Errorf("listed %+v", m)
	}
	ps, err := c.ListRunning(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Models) != 1 || ps.Models[0].Name != m.Name || ps.Models[0].ContextLength == 0 || ps.Models[0].ExpiresAt.IsZero() {
		t.Errorf("running %+v", ps.Models)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: "chat-model"})
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]bool{}
	for _, c := range show.Capabilities {
		caps[string(c)] = true
	}
	if !caps["completion"] || !caps["tools"] || !caps["thinking"] {
		t.Errorf("capabilities %v", show.Capabilities)
	}
	if !strings.Contains(show.Template, "<|im_start|>") || show.Details.Family != "qwen3" || !strings.Contains(show.Modelfile, "FROM") ||
		show.ModelInfo["general.architecture"] != "qwen3" || !strings.Contains(show.Parameters, "<|im_end|>") {
		t.Errorf("show: template %d bytes, details %+v, model_info %v, parameters %q", len(show.Template), show.Details, show.ModelInfo, show.Parameters)
	}
	// One model served: any name reaches it, as llama-server does.
	if other, err := c.Show(ctx, &api.ShowRequest{Model: "llama9"}); err != nil || other.Details.Family != "qwen3" {
		t.Errorf("show another name: %v", err)
	}
}

func isStatus(err error, code int) bool {
	var se api.StatusError
	return errors.As(err, &se) && se.StatusCode == code && se.ErrorMessage != ""
}

func TestOllamaErrors(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	c := newOllama(t, base, "")
	ctx := context.Background()
	nop := func(api.ChatResponse) error { return nil }
	tests := []struct {
		name   string
		req    *api.ChatRequest
		status int
		want   string
	}{
		{"image", &api.ChatRequest{Model: "chat-model", Messages: []api.Message{{Role: "user", Content: "hi", Images: []api.ImageData{[]byte("png")}}}}, 400, "images"},
		{"bad option", &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser("hi")}, Options: map[string]any{"temperature": "hot"}}, 400, "options.temperature"},
		{"bad think", &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser("hi")}, Think: &api.ThinkValue{Value: "extreme"}}, 400, "think"},
		{"bad format", &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser("hi")}, Format: json.RawMessage(`"yaml"`)}, 400, "format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Chat(ctx, tt.req, nop)
			var se api.StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status || !strings.Contains(se.ErrorMessage, tt.want) {
				t.Errorf("err %v, want %d with %q", err, tt.status, tt.want)
			}
		})
	}
	for name, req := range map[string]*api.GenerateRequest{
		"template": {Model: "chat-model", Prompt: "hi", Template: "{{ .Prompt }}"},
		"context":  {Model: "chat-model", Prompt: "hi", Context: []int{1, 2}},
	} {
		if err := c.Generate(ctx, req, func(api.GenerateResponse) error { return nil }); !isStatus(err, 400) {
			t.Errorf("generate with %s: %v", name, err)
		}
	}

	// Malformed JSON, which the client cannot send.
	for _, path := range []string{"/api/chat", "/api/generate", "/api/show"} {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(`{"model":`))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body map[string]any
		if json.Unmarshal(data, &body) != nil || resp.StatusCode != 400 || len(body) != 1 || body["error"] == "" {
			t.Errorf("%s malformed JSON: %d %s", path, resp.StatusCode, data)
		}
	}
}

func TestOllamaAuth(t *testing.T) {
	base, _ := startServer(t, server.Config{APIKey: "s3cret"})
	ctx := context.Background()
	req := &api.ChatRequest{Model: "chat-model", Messages: []api.Message{olUser(japan)}, Stream: &olFalse, Think: olThink(false), Options: olGreedy()}
	err := newOllama(t, base, "wrong").Chat(ctx, req, func(api.ChatResponse) error { return nil })
	var ae api.AuthorizationError
	if !errors.As(err, &ae) || ae.StatusCode != 401 {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := newOllama(t, base, "").List(ctx); err == nil {
		t.Error("models listed without a key")
	}
	chunks := olChat(t, newOllama(t, base, "s3cret"), req)
	if chunks[0].Message.Content != tokyo {
		t.Errorf("right key: %q", chunks[0].Message.Content)
	}
	// Liveness needs no key.
	if err := newOllama(t, base, "").Heartbeat(ctx); err != nil {
		t.Errorf("heartbeat without a key: %v", err)
	}
}

// TestOllamaTinyModel lists lem-tiny, which has no files: its size and
// digest are those of its embedded weights.
func TestOllamaTinyModel(t *testing.T) {
	base, _ := startTinyServer(t, server.Config{})
	c := newOllama(t, base, "")
	ctx := context.Background()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := tiny.Weights()
	sum := sha256.Sum256(w)
	if len(list.Models) != 1 {
		t.Fatalf("%d models", len(list.Models))
	}
	m := list.Models[0]
	if m.Name != tiny.Name+":latest" || m.Size != int64(len(w)) || m.Digest != hex.EncodeToString(sum[:]) ||
		m.Details.Format != "safetensors" || m.Details.Family != "qwen3" || m.Details.ParameterSize != "5.0M" || m.Details.QuantizationLevel != "BF16" {
		t.Errorf("listed %+v, want size %d", m, len(w))
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: tiny.Name})
	if err != nil {
		t.Fatal(err)
	}
	if show.Details.QuantizationLevel != "BF16" || show.Details.Format != "safetensors" || show.Details.ParameterSize != "5.0M" || show.ModelInfo["general.parameter_count"] == nil {
		t.Errorf("show details %+v, model_info %v", show.Details, show.ModelInfo)
	}
}
