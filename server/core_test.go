package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/engine"
)

type sampleP = engine.SampleParams

func samp(f func(*sampleP)) sampleP {
	var s sampleP
	f(&s)
	return s
}

// newTestModel returns the chat model attached to a fresh server.
func newTestModel(t testing.TB, cfg Config) (*Server, *Model) {
	t.Helper()
	m, err := NewModel("chat", openChatModel(t), ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, m
}

func userMessage(text string) []chat.Message {
	return []chat.Message{{Role: "user", Content: chat.Text(text)}}
}

func TestGenerateReasoningAndContent(t *testing.T) {
	_, m := newTestModel(t, Config{})
	req := &Request{Messages: userMessage("What is the capital of Japan?")}
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	var content, reasoning strings.Builder
	var kinds []EventKind
	res, err := m.Generate(context.Background(), p, func(ev Event) error {
		kinds = append(kinds, ev.Kind)
		switch ev.Kind {
		case EventContent:
			content.WriteString(ev.Text)
		case EventReasoning:
			reasoning.WriteString(ev.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	if c.Content != "The capital of Japan is Tokyo." || content.String() != c.Content {
		t.Errorf("content %q (streamed %q)", c.Content, content.String())
	}
	if c.Reasoning != "The user asks for the capital of Japan. It is Tokyo." || reasoning.String() != c.Reasoning {
		t.Errorf("reasoning %q (streamed %q)", c.Reasoning, reasoning.String())
	}
	if c.Finish != FinishStop || kinds[0] != EventStart || kinds[len(kinds)-1] != EventEnd {
		t.Errorf("finish %q, events %v", c.Finish, kinds)
	}
	if res.Usage.PromptTokens != p.PromptTokens() || res.Usage.CompletionTokens != c.Tokens || c.Tokens == 0 {
		t.Errorf("usage %+v, choice tokens %d", res.Usage, c.Tokens)
	}
}

func TestGenerateToolCall(t *testing.T) {
	_, m := newTestModel(t, Config{})
	tool := `{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	req := &Request{Messages: userMessage("What's the weather in Paris?"), Tools: []json.RawMessage{json.RawMessage(tool)}, Kwargs: map[string]any{"enable_thinking": false}}
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Generate(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	if c.Finish != FinishToolCalls || len(c.ToolCalls) != 1 {
		t.Fatalf("finish %q, calls %+v, content %q", c.Finish, c.ToolCalls, c.Content)
	}
	tc := c.ToolCalls[0]
	if tc.Name != "get_weather" || string(tc.Arguments) != `{"city": "Paris"}` || !strings.HasPrefix(tc.ID, "call_") {
		t.Errorf("call %+v", tc)
	}
	if c.Content != "" {
		t.Errorf("content %q beside the call", c.Content)
	}

	// With tool_choice none the tools leave the prompt and the model answers.
	req.ToolChoice = ToolChoice{Mode: ToolNone}
	p2, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p2.PromptText(), "get_weather") {
		t.Error("tool_choice none still renders the tools")
	}
}

// TestPrefixReuse checks that a request continuing the last one prefills
// only what is new and reports the rest as cached: the prefix cache keeps
// whole blocks, so the reuse is the common prefix rounded down to the
// block size.
func TestPrefixReuse(t *testing.T) {
	_, m := newTestModel(t, Config{})
	off := map[string]any{"enable_thinking": false}
	first := &Request{Messages: userMessage("What is 12 + 30?"), Kwargs: off, Sample: m.SampleDefaults()}
	first.Sample.Temperature = 0
	p1, _ := m.Prepare(first)
	r1, err := m.Generate(context.Background(), p1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Usage.CachedTokens != 0 {
		t.Errorf("cold request reports %d cached tokens", r1.Usage.CachedTokens)
	}
	second := &Request{Kwargs: off, Messages: append(userMessage("What is 12 + 30?"),
		chat.Message{Role: "assistant", Content: chat.Text(r1.Choices[0].Content)},
		chat.Message{Role: "user", Content: chat.Text("Reverse the word garden.")})}
	p2, _ := m.Prepare(second)
	r2, err := m.Generate(context.Background(), p2, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The template renders the earlier turn without its empty think block,
	// so the prompts agree up to the first assistant header.
	common := 0
	for common < len(p1.ids) && common < len(p2.ids) && p1.ids[common] == p2.ids[common] {
		common++
	}
	bs := engine.DefaultBlockSize
	if want := common / bs * bs; r2.Usage.CachedTokens != want || common < bs {
		t.Errorf("cached %d tokens, want the %d in whole blocks of the %d the prompts share", r2.Usage.CachedTokens, want, common)
	}
	if r2.Choices[0].Content != "nedrag" {
		t.Errorf("second reply %q, want nedrag", r2.Choices[0].Content)
	}
	// The same prompt again reuses the whole blocks before its last
	// token (which runs again, to give the next token's logits).
	r3, _ := m.Generate(context.Background(), p2, nil)
	if r3.Usage.CachedTokens != (p2.PromptTokens()-1)/bs*bs || r3.Choices[0].Content != "nedrag" {
		t.Errorf("repeat: cached %d of %d, reply %q", r3.Usage.CachedTokens, p2.PromptTokens(), r3.Choices[0].Content)
	}
}

// TestCancelWithinOneToken cancels a long generation from its event
// callback and checks that no more than one further token is generated.
func TestCancelWithinOneToken(t *testing.T) {
	_, m := newTestModel(t, Config{})
	req := &Request{Prompt: "Once upon a time", MaxTokens: 500, Sample: m.SampleDefaults()}
	req.Sample.LogitBias = map[int32]float32{2: -100} // no end of turn
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := 0
	res, err := m.Generate(ctx, p, func(ev Event) error {
		if ev.Kind == EventContent {
			events++
			if events == 5 {
				cancel()
			}
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	// Tokens may hold back text (a partial character), so events ≤ tokens;
	// the cancellation must stop the next step.
	if n := res.Choices[0].Tokens; n > events+2 {
		t.Fatalf("generated %d tokens after cancelling at event %d", n, events)
	}
	// The model is free again.
	if err := m.q.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.q.release()
}

func TestStopSequences(t *testing.T) {
	_, m := newTestModel(t, Config{})
	req := &Request{Messages: userMessage("What is the capital of Japan?"), Kwargs: map[string]any{"enable_thinking": false}, Stop: []string{"Tokyo", "never"}}
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	res, err := m.Generate(context.Background(), p, func(ev Event) error {
		if ev.Kind == EventContent {
			streamed.WriteString(ev.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Choices[0]
	if c.Content != "The capital of Japan is " || streamed.String() != c.Content || c.Finish != FinishStop || c.StopSequence != "Tokyo" {
		t.Errorf("content %q streamed %q finish %q stop %q", c.Content, streamed.String(), c.Finish, c.StopSequence)
	}
}

func TestChoicesAndLogprobs(t *testing.T) {
	_, m := newTestModel(t, Config{})
	req := &Request{Messages: userMessage("Hello!"), Kwargs: map[string]any{"enable_thinking": false},
		N: 3, Logprobs: true, TopLogprobs: 2, Sample: m.SampleDefaults()}
	req.Sample.Seed, req.Sample.HasSeed = 7, true
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	// The choices run at once: each ends once, in any order, after its
	// own events.
	ends := 0
	ended := map[int]bool{}
	res, err := m.Generate(context.Background(), p, func(ev Event) error {
		if ended[ev.Choice] {
			t.Errorf("choice %d: event %d after its end", ev.Choice, ev.Kind)
		}
		if ev.Kind == EventEnd {
			ended[ev.Choice] = true
			ends++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 3 || ends != 3 || len(ended) != 3 {
		t.Fatalf("%d choices, %d ends", len(res.Choices), ends)
	}
	total := 0
	for i, c := range res.Choices {
		total += c.Tokens
		if len(c.Logprobs) != c.Tokens {
			t.Errorf("choice %d: %d logprobs for %d tokens", i, len(c.Logprobs), c.Tokens)
		}
		for _, lp := range c.Logprobs {
			if lp.Logprob > 0 || len(lp.Top) != 2 || lp.Token == "" {
				t.Fatalf("choice %d: bad logprob %+v", i, lp)
			}
		}
	}
	if res.Usage.CompletionTokens != total {
		t.Errorf("usage %d completion tokens, choices hold %d", res.Usage.CompletionTokens, total)
	}
}

func TestPrepareErrors(t *testing.T) {
	_, m := newTestModel(t, Config{})
	msgs := userMessage("hi")
	tests := []struct {
		name  string
		req   Request
		param string
		code  string
	}{
		{"negative max", Request{Messages: msgs, MaxTokens: -1}, "max_tokens", CodeInvalidRequest},
		{"too many tokens", Request{Messages: msgs, MaxTokens: 100000}, "max_tokens", CodeContextExceeded},
		{"too many tokens renamed", Request{Messages: msgs, MaxTokens: 100000, MaxTokensParam: "max_output_tokens"}, "max_output_tokens", CodeContextExceeded},
		{"long prompt", Request{Prompt: strings.Repeat("word ", 5000)}, "prompt", CodeContextExceeded},
		{"n", Request{Messages: msgs, N: 99}, "n", CodeInvalidRequest},
		{"temperature", Request{Messages: msgs, Sample: samp(func(s *sampleP) { s.Temperature = -1 })}, "temperature", CodeInvalidRequest},
		{"top_p", Request{Messages: msgs, Sample: samp(func(s *sampleP) { s.TopP = 2 })}, "top_p", CodeInvalidRequest},
		{"logit bias id", Request{Messages: msgs, Sample: samp(func(s *sampleP) { s.LogitBias = map[int32]float32{999999: 1} })}, "logit_bias", CodeInvalidRequest},
		{"empty stop", Request{Messages: msgs, Stop: []string{""}}, "stop[0]", CodeInvalidRequest},
		{"no role", Request{Messages: []chat.Message{{Content: chat.Text("x")}}}, "messages[0].role", CodeInvalidRequest},
		{"image part", Request{Messages: []chat.Message{{Role: "user", Content: chat.Parts(chat.Part{Type: "image_url"})}}}, "messages[0].content[0]", CodeInvalidRequest},
		{"named tool missing", Request{Messages: msgs, ToolChoice: ToolChoice{Mode: ToolNamed, Name: "x"}}, "tool_choice", CodeInvalidRequest},
		{"required without tools", Request{Messages: msgs, ToolChoice: ToolChoice{Mode: ToolRequired}}, "tool_choice", CodeInvalidRequest},
		{"empty prompt", Request{Prompt: ""}, "prompt", CodeInvalidRequest},
		{"bad prompt id", Request{PromptIDs: []int32{5, -1}}, "prompt[1]", CodeInvalidRequest},
		{"template raises", Request{Messages: []chat.Message{{Role: "assistant", Content: chat.Text("x")}}, Kwargs: map[string]any{"messages": 1}}, "messages", CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Prepare(&tt.req)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v, want *Error", err)
			}
			if e.Status != 400 || e.Param != tt.param || e.Code != tt.code {
				t.Errorf("got %d %q %q (%s), want 400 %q %q", e.Status, e.Param, e.Code, e.Message, tt.param, tt.code)
			}
		})
	}
}

func TestJSONObject(t *testing.T) {
	_, m := newTestModel(t, Config{})
	// With thinking on (the template's default) the model reasons first
	// and the object follows; with it off the object comes at once.
	for _, think := range []bool{true, false} {
		req := &Request{Messages: userMessage("What is the capital of Japan?"), JSON: true, MaxTokens: 200, Sample: m.SampleDefaults()}
		if !think {
			req.Kwargs = map[string]any{"enable_thinking": false}
		}
		req.Sample.Seed, req.Sample.HasSeed = 1, true
		p, err := m.Prepare(req)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Generate(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		t.Logf("thinking %v, %s: %q after %q", think, c.Finish, c.Content, c.Reasoning)
		var v map[string]any
		if c.Finish == FinishStop && json.Unmarshal([]byte(c.Content), &v) != nil {
			t.Errorf("finished output %q is not a JSON object", c.Content)
		}
		if !strings.HasPrefix(strings.TrimSpace(c.Content), "{") || (c.Reasoning != "") != think || strings.Contains(c.Reasoning, "{") {
			t.Errorf("thinking %v: content %q reasoning %q", think, c.Content, c.Reasoning)
		}
	}
}
