package tiny_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/tiny"
)

// tools are the two tools lem-tiny was trained to call.
const tools = `[
 {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]}}},
 {"type": "function", "function": {"name": "add", "description": "Add two integers",
  "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]`

// conversations go beyond reference.json: every kind of turn the model was
// trained on, in the combinations a client sends. Each renders with and
// without a generation prompt, and with thinking left alone, on and off.
var conversations = map[string]string{
	"system": `[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello!"}]`,
	"system+tools": `[{"role": "system", "content": "You are a weather bot."},
		{"role": "user", "content": "What's the weather in Paris?"}]`,
	"multi-turn": `[{"role": "user", "content": "What is the capital of Japan?"},
		{"role": "assistant", "content": "The capital of Japan is Tokyo."},
		{"role": "user", "content": "What is the capital of France?"}]`,
	"history reasoning_content": `[{"role": "user", "content": "What is 12 + 30?"},
		{"role": "assistant", "reasoning_content": "I add 12 and 30. The sum is 42.", "content": "12 + 30 = 42."},
		{"role": "user", "content": "Reverse the word garden."}]`,
	"history inline think": `[{"role": "system", "content": "Be kind."},
		{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "<think>\nThe user greets me. I greet them back.\n</think>\n\nHello! How can I help you today?"},
		{"role": "user", "content": "What is 3 + 4?"},
		{"role": "assistant", "content": "<think>\n\n</think>\n\n3 + 4 = 7."},
		{"role": "user", "content": "Reverse the word garden."}]`,
	"final assistant with reasoning": `[{"role": "user", "content": "What is the capital of Japan?"},
		{"role": "assistant", "content": "<think>\nThe user asks for the capital of Japan. It is Tokyo.\n</think>\n\nThe capital of Japan is Tokyo."}]`,
	"final assistant without reasoning": `[{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Hello! How can I help you today?"}]`,
	"tool call and result": `[{"role": "user", "content": "What's the weather in Paris?"},
		{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
		{"role": "tool", "content": "{\"temp_c\": 21}"}]`,
	"tool call with reasoning": `[{"role": "system", "content": "Use the tools."},
		{"role": "user", "content": "What's the weather in Paris?"},
		{"role": "assistant", "reasoning_content": "The user wants the weather in Paris. I call get_weather.", "content": "",
		 "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
		{"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"},
		{"role": "assistant", "reasoning_content": "The tool says 21 degrees in Paris.", "content": "It is 21°C in Paris."},
		{"role": "user", "content": "What is 2 + 5?"},
		{"role": "assistant", "content": "<think>\nI call add.\n</think>\n\nLet me add.",
		 "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 5}}}]},
		{"role": "tool", "content": "7"}]`,
	"parallel tool calls": `[{"role": "user", "content": "Weather in Paris and Rome, and 1 + 2?"},
		{"role": "assistant", "content": "Checking.", "tool_calls": [
			{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
			{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
			{"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
		{"role": "tool", "content": "{\"temp_c\": 21}"},
		{"role": "tool", "content": "{\"temp_c\": 25}"},
		{"role": "tool", "content": "3"},
		{"role": "assistant", "content": "Paris 21°C, Rome 25°C, and 3."}]`,
	"relayed tool response": `[{"role": "user", "content": "What is 20 - 5?"},
		{"role": "assistant", "reasoning_content": "I call add.", "content": "",
		 "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 20, "b": -5}}}]},
		{"role": "user", "content": "<tool_response>\n15\n</tool_response>"}]`,
	"system mid-conversation": `[{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Hello! How can I help you today?"},
		{"role": "system", "content": "Answer briefly."},
		{"role": "user", "content": "What is the capital of Italy?"}]`,
	"no user turn": `[{"role": "system", "content": "You are terse."},
		{"role": "assistant", "reasoning_content": "\nNothing asked.\n", "content": "\n\nHello."}]`,
}

// TestTemplateMatchesShipped renders every case of the chat model's
// reference.json, and the conversations above, with lem's template and with
// the template the model shipped with, and wants identical bytes.
func TestTemplateMatchesShipped(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	shippedSrc, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := chat.Parse(string(shippedSrc), chat.Options{Name: "shipped"})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := chat.Parse(tiny.ChatTemplate, chat.Options{Name: "lem-tiny"})
	if err != nil {
		t.Fatal(err)
	}

	// The server reads reasoning and tool-call markers off the source.
	if got, want := chat.DetectOutputFormat(ours), chat.DetectOutputFormat(shipped); got != want {
		t.Errorf("output format %+v, the shipped template gives %+v", got, want)
	}

	type input struct {
		name string
		json string
	}
	var inputs []input

	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Messages       json.RawMessage `json:"messages"`
			Tools          json.RawMessage `json:"tools"`
			EnableThinking *bool           `json:"enable_thinking"`
			Prompt         string          `json:"prompt"`
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for i, c := range ref.Cases {
		in := map[string]any{"messages": c.Messages, "tools": c.Tools, "add_generation_prompt": true}
		if c.EnableThinking != nil {
			in["enable_thinking"] = *c.EnableThinking
		}
		data, _ := json.Marshal(in)
		// The reference render is the transformers one: ours must be it.
		got, err := ours.Render(parseInput(t, data))
		if err != nil {
			t.Fatalf("reference case %d: %v", i, err)
		}
		if got != c.Prompt {
			t.Errorf("reference case %d:\n got %q\nwant %q", i, got, c.Prompt)
		}
		inputs = append(inputs, input{fmt.Sprintf("reference case %d", i), string(data)})
	}

	for name, msgs := range conversations {
		for _, withTools := range []bool{false, true} {
			for _, gen := range []bool{false, true} {
				for _, think := range []string{"", "true", "false"} {
					var b strings.Builder
					b.WriteString(`{"messages": ` + msgs)
					if withTools {
						b.WriteString(`, "tools": ` + tools)
					}
					if gen {
						b.WriteString(`, "add_generation_prompt": true`)
					}
					if think != "" {
						b.WriteString(`, "enable_thinking": ` + think)
					}
					b.WriteString("}")
					label := name
					if withTools {
						label += ", tools"
					}
					if gen {
						label += ", generation prompt"
					}
					if think != "" {
						label += ", enable_thinking=" + think
					}
					inputs = append(inputs, input{label, b.String()})
				}
			}
		}
	}

	for _, in := range inputs {
		parsed := parseInput(t, []byte(in.json))
		want, err := shipped.Render(parsed)
		if err != nil {
			t.Fatalf("%s: shipped template: %v", in.name, err)
		}
		got, err := ours.Render(parsed)
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		if got != want {
			t.Errorf("%s:\n got %q\nwant %q", in.name, got, want)
		}
	}
	t.Logf("%d renders identical", len(inputs))
}

func parseInput(t *testing.T, data []byte) chat.Input {
	t.Helper()
	in, err := chat.ParseInput(data)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return in
}
