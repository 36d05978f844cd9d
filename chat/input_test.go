package chat

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseInput(t *testing.T) {
	data := []byte(`{
		"messages": [
			{"role": "system", "content": "S"},
			{"role": "user", "content": [{"type": "image", "url": "a.png"}, {"type": "text", "text": "hi", "cache": true}]},
			{"role": "assistant", "content": null, "reasoning_content": "R", "tool_calls": [
				{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [true, null]}}},
				{"name": "g", "arguments": "{\"q\": 2}"}
			], "extra_key": {"y": 1, "x": 2}},
			{"role": "tool", "content": "out", "tool_call_id": "c1", "name": "f"}
		],
		"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"z": {}, "a": {}}}}}],
		"add_generation_prompt": true,
		"enable_thinking": false,
		"custom": {"b": 1, "a": 2}
	}`)
	in, err := ParseInput(data)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse("{{ messages|tojson }}\n{{ tools|tojson }}\n{{ add_generation_prompt }} {{ enable_thinking }} {{ custom|tojson }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role": "system", "content": "S"}, ` +
		`{"role": "user", "content": [{"type": "image", "url": "a.png"}, {"type": "text", "text": "hi", "cache": true}]}, ` +
		`{"role": "assistant", "content": null, "reasoning_content": "R", "tool_calls": [` +
		`{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [true, null]}}}, ` +
		`{"type": "function", "function": {"name": "g", "arguments": "{\"q\": 2}"}}], "extra_key": {"y": 1, "x": 2}}, ` +
		`{"role": "tool", "content": "out", "tool_call_id": "c1", "name": "f"}]` + "\n" +
		`[{"type": "function", "function": {"name": "f", "parameters": {"properties": {"z": {}, "a": {}}}}}]` + "\n" +
		`True False {"b": 1, "a": 2}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestParseInputErrors(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"not JSON", `{"messages": [`, "chat input"},
		{"not an object", `[1]`, "chat input"},
		{"null", `null`, "not a JSON object"},
		{"messages not an array", `{"messages": {}}`, "messages"},
		{"message not an object", `{"messages": ["hi"]}`, "message: not a JSON object"},
		{"role not a string", `{"messages": [{"role": 1}]}`, "role"},
		{"content a number", `{"messages": [{"role": "user", "content": 3}]}`, "content must be"},
		{"part not an object", `{"messages": [{"role": "user", "content": [1]}]}`, "content part"},
		{"tool_calls not an array", `{"messages": [{"role": "assistant", "tool_calls": {}}]}`, "tool_calls"},
		{"tool call of another type", `{"messages": [{"role": "assistant", "tool_calls": [{"type": "web", "function": {"name": "f"}}]}]}`, "unsupported type"},
		{"function not an object", `{"messages": [{"role": "assistant", "tool_calls": [{"function": "f"}]}]}`, "function"},
		{"tool not an object", `{"messages": [], "tools": ["f"]}`, "tool 0 is not a JSON object"},
		{"add_generation_prompt not a bool", `{"add_generation_prompt": "yes"}`, "add_generation_prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseInput([]byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestMessageUnmarshal(t *testing.T) {
	tests := []struct {
		name string
		data string
		want func(Message) bool
	}{
		{"text", `{"role": "user", "content": "hi"}`, func(m Message) bool {
			return m.Role == "user" && m.Content.IsText() && m.Content.Text() == "hi"
		}},
		{"null content", `{"role": "assistant", "content": null}`, func(m Message) bool { return m.Content.IsNone() }},
		{"absent content", `{"role": "assistant"}`, func(m Message) bool { return m.Content.IsNone() }},
		{"parts", `{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}`, func(m Message) bool {
			return m.Content.IsParts() && len(m.Content.Parts()) == 3 && m.Content.Text() == "ab"
		}},
		{"empty parts", `{"role": "user", "content": []}`, func(m Message) bool {
			return m.Content.IsParts() && len(m.Content.Parts()) == 0
		}},
		{"null optional fields", `{"role": "assistant", "content": "x", "reasoning_content": null, "tool_calls": null, "tool_call_id": null, "name": null}`, func(m Message) bool {
			return m.ReasoningContent == "" && m.ToolCalls == nil && m.ToolCallID == "" && m.Name == "" && m.Extra == nil
		}},
		{"OpenAI string arguments kept", `{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}`, func(m Message) bool {
			return len(m.ToolCalls) == 1 && m.ToolCalls[0].ID == "1" && m.ToolCalls[0].Name == "f" && string(m.ToolCalls[0].Arguments) == `"{\"a\":1}"`
		}},
		{"extra keys in order", `{"role": "user", "b": 1, "content": "x", "a": 2}`, func(m Message) bool {
			return len(m.Extra) == 2 && m.Extra[0].Key == "b" && m.Extra[1].Key == "a"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			if err := json.Unmarshal([]byte(tt.data), &m); err != nil {
				t.Fatal(err)
			}
			if !tt.want(m) {
				t.Errorf("unexpected message %+v", m)
			}
		})
	}
}

func TestContent(t *testing.T) {
	var none Content
	if !none.IsNone() || none.IsText() || none.IsParts() || none.Text() != "" {
		t.Error("zero Content is not none")
	}
	if c := Text(""); !c.IsText() || c.IsNone() {
		t.Error("Text(\"\") is not text")
	}
	if c := Parts(); !c.IsParts() || c.Parts() == nil {
		t.Error("Parts() is not an empty list")
	}
}
