package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aparam "github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/server"
	"github.com/lem-engine/lem/tiny"
)

// refCase is one case of the chat model's reference.json: a conversation
// in Hugging Face's chat format, the tools on offer, whether thinking is
// on, the prompt and the greedy continuation of the reference
// implementation.
type refCase struct {
	Messages       []refMessage      `json:"messages"`
	Tools          []json.RawMessage `json:"tools"`
	EnableThinking bool              `json:"enable_thinking"`
	Prompt         string            `json:"prompt"`
	PromptIDs      []int32           `json:"prompt_ids"`
	GreedyIDs      []int32           `json:"greedy_ids"`
	GreedyText     string            `json:"greedy_text"`
}

type refMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		Function refCall `json:"function"`
	} `json:"tool_calls"`
}

// refCall is a tool call: its name and its arguments as a JSON object.
type refCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// refAnswer is a reply split as the APIs return it: the reasoning, the
// text, and the tool calls.
type refAnswer struct {
	Reasoning string
	Content   string
	Calls     []refCall
}

// refReply is what one dialect returned: the answer, its finish reason,
// and the prompt and completion lengths it reported.
type refReply struct {
	refAnswer
	Finish                   string
	PromptTokens, Completion int
}

// refDialect asks one API for a case's greedy reply.
type refDialect struct {
	name string
	// stop and toolStop are the finish reasons of a reply that ends its
	// turn and of one that calls tools.
	stop, toolStop string
	// schemaOrder says whether the client can send a tool's parameter
	// schema with its keys in the reference's order, which the prompt
	// renders.
	schemaOrder bool
	ask         func(t *testing.T, base string, c refCase) refReply
}

// TestReferenceCases serves lem-tiny, the embedded model, and replays every
// case of ../shared/fixtures/chat-model/reference.json through the
// official OpenAI, Anthropic and Ollama clients with greedy sampling: each
// dialect must return the reference continuation split into its reasoning,
// text and tool-call fields, with the right finish reason, after a prompt
// of the reference's length, in as many tokens as the reference's.
//
// Ollama's client cannot send a tool schema in the reference's key order:
// its api.ToolFunctionParameters writes "required" before "properties".
// Its tool prompts differ from the reference's in that order alone, so
// their length is not checked; the answer still is.
func TestReferenceCases(t *testing.T) {
	cases := loadRefCases(t)
	base, _ := startTinyServer(t, server.Config{})
	// The usage the servers report leaves out the token that ends the
	// turn; the reference continuations end with it.
	imEnd, ok := tinyModel(t).Tokenizer.TokenID("<|im_end|>")
	if !ok {
		t.Fatal("lem-tiny has no <|im_end|> token")
	}
	for _, d := range []refDialect{
		{"openai", "stop", "tool_calls", true, askOpenAI},
		{"anthropic", string(anthropic.StopReasonEndTurn), string(anthropic.StopReasonToolUse), true, askAnthropic},
		{"ollama", "stop", "stop", false, askOllama},
	} {
		t.Run(d.name, func(t *testing.T) {
			for i, c := range cases {
				t.Run(fmt.Sprintf("%02d_think=%v", i, c.EnableThinking), func(t *testing.T) {
					want, err := splitGreedy(c.GreedyText)
					if err != nil {
						t.Fatalf("reference case %d: %v", i, err)
					}
					got := d.ask(t, base, c)
					checkRefReply(t, got, want)
					finish := d.stop
					if len(want.Calls) > 0 {
						finish = d.toolStop
					}
					if got.Finish != finish {
						t.Errorf("finish reason %q, want %q", got.Finish, finish)
					}
					switch {
					case len(c.Tools) > 0 && !d.schemaOrder:
						t.Logf("prompt of %d tokens, not checked: the client reorders the tool schemas", got.PromptTokens)
					case got.PromptTokens != len(c.PromptIDs):
						t.Errorf("prompt of %d tokens, the reference's has %d", got.PromptTokens, len(c.PromptIDs))
					}
					n := len(c.GreedyIDs)
					if n == 0 || c.GreedyIDs[n-1] != imEnd {
						t.Fatalf("reference case %d: greedy_ids %v do not end with <|im_end|> (%d)", i, c.GreedyIDs, imEnd)
					}
					if got.Completion != n-1 {
						t.Errorf("%d completion tokens, the reference has %d before <|im_end|>", got.Completion, n-1)
					}
				})
			}
		})
	}
}

func loadRefCases(t *testing.T) []refCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "chat-model"), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("reference.json: %v", err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("reference.json: no cases")
	}
	for i, c := range ref.Cases {
		for j, m := range c.Messages {
			for k, tc := range m.ToolCalls {
				var compact bytes.Buffer
				if err := json.Compact(&compact, tc.Function.Arguments); err != nil {
					t.Fatalf("reference.json: case %d message %d call %d: arguments: %v", i, j, k, err)
				}
				ref.Cases[i].Messages[j].ToolCalls[k].Function.Arguments = compact.Bytes()
			}
		}
	}
	return ref.Cases
}

// splitGreedy splits a reference continuation as an API returns it: the
// reasoning inside <think></think>, each <tool_call>{"name": …,
// "arguments": …}</tool_call>, and the text around them, all without the
// closing <|im_end|> and the whitespace at their ends.
func splitGreedy(text string) (refAnswer, error) {
	var a refAnswer
	text, ok := strings.CutSuffix(text, "<|im_end|>")
	if !ok {
		return a, fmt.Errorf("greedy_text %q does not end with <|im_end|>", text)
	}
	if rest, ok := strings.CutPrefix(text, "<think>"); ok {
		thought, after, ok := strings.Cut(rest, "</think>")
		if !ok {
			return a, fmt.Errorf("greedy_text %q: <think> is never closed", text)
		}
		a.Reasoning, text = strings.TrimSpace(thought), after
	}
	var content strings.Builder
	for {
		before, rest, ok := strings.Cut(text, "<tool_call>")
		content.WriteString(before)
		if !ok {
			break
		}
		body, after, ok := strings.Cut(rest, "</tool_call>")
		if !ok {
			return a, fmt.Errorf("greedy_text: <tool_call> is never closed in %q", rest)
		}
		var call refCall
		if err := json.Unmarshal([]byte(body), &call); err != nil || call.Name == "" {
			return a, fmt.Errorf("greedy_text: tool call %q: want {\"name\": …, \"arguments\": {…}} (%v)", body, err)
		}
		a.Calls = append(a.Calls, call)
		text = after
	}
	a.Content = strings.TrimSpace(content.String())
	return a, nil
}

// checkRefReply compares a reply with the reference answer: the same text
// and reasoning, and the same calls with arguments equal as JSON.
func checkRefReply(t *testing.T, got refReply, want refAnswer) {
	t.Helper()
	if got.Content != want.Content {
		t.Errorf("content %q, want %q", got.Content, want.Content)
	}
	if got.Reasoning != want.Reasoning {
		t.Errorf("reasoning %q, want %q", got.Reasoning, want.Reasoning)
	}
	if len(got.Calls) != len(want.Calls) {
		t.Fatalf("%d tool calls %s, want %d %s", len(got.Calls), callsString(got.Calls), len(want.Calls), callsString(want.Calls))
	}
	for i, c := range got.Calls {
		w := want.Calls[i]
		if c.Name != w.Name || !jsonEqual(c.Arguments, w.Arguments) {
			t.Errorf("tool call %d: %s(%s), want %s(%s)", i, c.Name, c.Arguments, w.Name, w.Arguments)
		}
	}
}

func callsString(calls []refCall) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "[%s(%s)]", c.Name, c.Arguments)
	}
	return b.String()
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// refCallIDs gives each tool call of a conversation an id, and each tool
// message the id of the call it answers: the reference conversations name
// none, and the k-th tool message after an assistant turn answers its k-th
// call, as Hugging Face templates read them. ids[i] holds message i's call
// ids (an assistant turn) or the one id it answers (a tool message); names
// are the called tools alike.
func refCallIDs(t *testing.T, msgs []refMessage) (ids, names [][]string) {
	t.Helper()
	ids, names = make([][]string, len(msgs)), make([][]string, len(msgs))
	var pending, pendingNames []string
	n := 0
	for i, m := range msgs {
		switch m.Role {
		case "assistant":
			pending, pendingNames = nil, nil
			for _, tc := range m.ToolCalls {
				id := fmt.Sprintf("call_%d", n)
				n++
				ids[i] = append(ids[i], id)
				names[i] = append(names[i], tc.Function.Name)
				pending, pendingNames = append(pending, id), append(pendingNames, tc.Function.Name)
			}
		case "tool":
			if len(pending) == 0 {
				t.Fatalf("message %d: a tool result with no call before it", i)
			}
			ids[i], names[i] = pending[:1], pendingNames[:1]
			pending, pendingNames = pending[1:], pendingNames[1:]
		}
	}
	return ids, names
}

// refTool reads a reference tool's function name and description, and its
// parameters schema as given (key order kept: the prompt renders it).
func refTool(t *testing.T, raw json.RawMessage) (name, description string, parameters json.RawMessage) {
	t.Helper()
	var tool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &tool); err != nil || tool.Type != "function" || tool.Function.Name == "" {
		t.Fatalf("reference tool %s: want {\"type\": \"function\", \"function\": {\"name\": …}} (%v)", raw, err)
	}
	return tool.Function.Name, tool.Function.Description, tool.Function.Parameters
}

// askOpenAI sends a case through /v1/chat/completions.
func askOpenAI(t *testing.T, base string, c refCase) refReply {
	client := newClient(base)
	ids, _ := refCallIDs(t, c.Messages)
	p := openai.ChatCompletionNewParams{Model: tiny.Name, Temperature: param.NewOpt(0.0), MaxCompletionTokens: param.NewOpt[int64](200)}
	for i, m := range c.Messages {
		switch m.Role {
		case "system":
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case "user":
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case "assistant":
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(m.Content)
			}
			for j, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: ids[i][j],
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: tc.Function.Name, Arguments: string(tc.Function.Arguments),
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case "tool":
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, ids[i][0]))
		default:
			t.Fatalf("message %d: role %q", i, m.Role)
		}
	}
	for _, raw := range c.Tools {
		refTool(t, raw)
		// The tool as reference.json gives it: the SDK's typed tool
		// writes "function" before "type" and the schema's keys sorted,
		// and the template renders the tool as sent.
		tool := param.Override[openai.ChatCompletionFunctionToolParam](raw)
		p.Tools = append(p.Tools, openai.ChatCompletionToolUnionParam{OfFunction: &tool})
	}
	thinking := option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": c.EnableThinking})
	res, err := client.Chat.Completions.New(context.Background(), p, thinking)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 {
		t.Fatalf("%d choices", len(res.Choices))
	}
	ch := res.Choices[0]
	r := refReply{
		refAnswer: refAnswer{Content: ch.Message.Content, Reasoning: extraString(ch.Message.JSON.ExtraFields, "reasoning_content")},
		Finish:    ch.FinishReason, PromptTokens: int(res.Usage.PromptTokens), Completion: int(res.Usage.CompletionTokens),
	}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "function" || tc.ID == "" {
			t.Errorf("tool call %s", tc.RawJSON())
		}
		r.Calls = append(r.Calls, refCall{Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
	}
	return r
}

// askAnthropic sends a case through /v1/messages.
func askAnthropic(t *testing.T, base string, c refCase) refReply {
	client := newAnthropic(base)
	ids, _ := refCallIDs(t, c.Messages)
	p := anthropic.MessageNewParams{Model: tiny.Name, MaxTokens: 200}
	if c.EnableThinking {
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(100)
	} else {
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}}
	}
	for i, m := range c.Messages {
		switch m.Role {
		case "system":
			if i != 0 {
				t.Fatalf("message %d: a system message after the first has no Anthropic form", i)
			}
			p.System = []anthropic.TextBlockParam{{Text: m.Content}}
		case "user":
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Content)))
		case "assistant":
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for j, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(ids[i][j], tc.Function.Arguments, tc.Function.Name))
			}
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		case "tool":
			// Consecutive tool results go back in one user message.
			block := anthropic.NewToolResultBlock(ids[i][0], m.Content, false)
			if i > 0 && c.Messages[i-1].Role == "tool" {
				last := p.Messages[len(p.Messages)-1].OfUser
				last.Content = append(last.Content, block)
			} else {
				p.Messages = append(p.Messages, anthropic.NewUserMessage(block))
			}
		default:
			t.Fatalf("message %d: role %q", i, m.Role)
		}
	}
	for _, raw := range c.Tools {
		name, description, parameters := refTool(t, raw)
		// The schema as given: the typed one writes its keys sorted.
		tool := anthropic.ToolUnionParamOfTool(aparam.Override[anthropic.ToolInputSchemaParam](parameters), name)
		if description != "" {
			tool.OfTool.Description = aparam.NewOpt(description)
		}
		p.Tools = append(p.Tools, tool)
	}
	msg, err := client.Messages.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	r := refReply{
		Finish:       string(msg.StopReason),
		PromptTokens: int(msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens), Completion: int(msg.Usage.OutputTokens),
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "thinking":
			r.Reasoning += b.Thinking
		case "text":
			r.Content += b.Text
		case "tool_use":
			if b.ID == "" {
				t.Errorf("tool_use without an id: %s", b.RawJSON())
			}
			r.Calls = append(r.Calls, refCall{Name: b.Name, Arguments: b.Input})
		default:
			t.Errorf("block of type %q: %s", b.Type, b.RawJSON())
		}
	}
	return r
}

// askOllama sends a case through /api/chat, not streamed.
func askOllama(t *testing.T, base string, c refCase) refReply {
	ids, names := refCallIDs(t, c.Messages)
	req := &api.ChatRequest{Model: tiny.Name, Stream: &olFalse, Think: olThink(c.EnableThinking),
		Options: map[string]any{"temperature": 0, "num_predict": 200}}
	for i, m := range c.Messages {
		msg := api.Message{Role: m.Role, Content: m.Content}
		switch m.Role {
		case "system", "user":
		case "assistant":
			for j, tc := range m.ToolCalls {
				call := api.ToolCall{ID: ids[i][j], Function: api.ToolCallFunction{Index: j, Name: tc.Function.Name}}
				if err := json.Unmarshal(tc.Function.Arguments, &call.Function.Arguments); err != nil {
					t.Fatalf("message %d call %d: arguments %s: %v", i, j, tc.Function.Arguments, err)
				}
				msg.ToolCalls = append(msg.ToolCalls, call)
			}
		case "tool":
			msg.ToolCallID, msg.ToolName = ids[i][0], names[i][0]
		default:
			t.Fatalf("message %d: role %q", i, m.Role)
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, raw := range c.Tools {
		var tool api.Tool
		if err := json.Unmarshal(raw, &tool); err != nil {
			t.Fatalf("reference tool %s: %v", raw, err)
		}
		req.Tools = append(req.Tools, tool)
	}
	chunks := olChat(t, newOllama(t, base, ""), req)
	if len(chunks) != 1 {
		t.Fatalf("%d chunks without streaming", len(chunks))
	}
	res := chunks[0]
	r := refReply{
		refAnswer: refAnswer{Content: res.Message.Content, Reasoning: res.Message.Thinking},
		Finish:    res.DoneReason, PromptTokens: res.Metrics.PromptEvalCount, Completion: res.Metrics.EvalCount,
	}
	for _, tc := range res.Message.ToolCalls {
		args, err := json.Marshal(tc.Function.Arguments)
		if err != nil {
			t.Fatal(err)
		}
		r.Calls = append(r.Calls, refCall{Name: tc.Function.Name, Arguments: args})
	}
	return r
}
