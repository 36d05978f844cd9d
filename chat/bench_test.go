package chat

import (
	"encoding/json"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// BenchmarkRenderQwen3Tools renders Qwen3's template with two tools, a tool
// call and its result: the work a server does per chat request.
func BenchmarkRenderQwen3Tools(b *testing.B) {
	set, err := LoadDir(fixtures.Dir(b, "tokenizers", "qwen3"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	tmpl := set.Default()
	in := Input{
		Messages: []Message{
			{Role: "system", Content: Text("You are a helpful assistant.")},
			{Role: "user", Content: Text("What's the weather in Paris, and what is 2+3?")},
			{Role: "assistant", Content: Text(""), ToolCalls: []ToolCall{
				{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city": "Paris", "unit": "celsius"}`)},
			}},
			{Role: "tool", Content: Text(`{"temp_c": 21}`), ToolCallID: "call_1"},
		},
		Tools: []json.RawMessage{
			json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}`),
			json.RawMessage(`{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}`),
		},
		AddGenerationPrompt: true,
	}
	if _, err := tmpl.Render(in); err != nil {
		b.Fatal(err)
	}
	// The whole render, as a server calls it.
	b.Run("render", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tmpl.Render(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Baseline: the engine alone, given values built once.
	b.Run("engine-only", func(b *testing.B) {
		data, err := tmpl.data(in)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := execute(tmpl.tmpl, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The conversion of the input to template values.
	b.Run("values", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tmpl.data(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkParseQwen3 measures compiling Qwen3's template (done once per
// model load).
func BenchmarkParseQwen3(b *testing.B) {
	set, err := LoadDir(fixtures.Dir(b, "tokenizers", "qwen3"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	src := set.Default().Source()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
