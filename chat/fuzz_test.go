package chat

import (
	"encoding/json"
	"testing"
)

// FuzzParse feeds arbitrary template source through Parse and Render: any
// outcome but a panic is acceptable.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"{{ messages[0].content }}",
		"{%- for m in messages %}{{ m.role }}\n{% endfor %}",
		"{% raw %}{{ x }}{% endraw %}",
		"{% if x %}\n  {{- y | tojson(indent=2) -}}\n{% endif %}",
		"{{ raise_exception('no') }}",
		"{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}",
		"{# c #}\r\n{{ 'a' ~ 1 }}\n",
		"{% for i in range(3) %}{% if i %}{% break %}{% endif %}{% endfor %}",
		"{{",
		"{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	in := Input{
		Messages: []Message{
			{Role: "user", Content: Text("hi")},
			{Role: "assistant", Content: Text("ok"), ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{"a": 1}`)}}},
		},
		Tools:               []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "f"}}`)},
		AddGenerationPrompt: true,
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse(src, Options{Now: fixedNow})
		if err != nil {
			return
		}
		_, _ = tmpl.Render(in)
	})
}

// FuzzParseInput feeds arbitrary JSON through ParseInput and, when it is
// accepted, renders it.
func FuzzParseInput(f *testing.F) {
	seeds := []string{
		`{"messages": [{"role": "user", "content": "hi"}]}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "tools": [{"a": 1.5e300}]}`,
		`{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"z": [1, {"y": null}]}}}]}], "k": "\u00e9"}`,
		`{"messages": [], "add_generation_prompt": true, "x": 123456789012345678901234567890}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	tmpl, err := Parse("{{ messages|tojson }}{{ tools|tojson }}{% for k in ['k', 'x'] %}{{ k }}{% endfor %}", Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseInput(data)
		if err != nil {
			return
		}
		_, _ = tmpl.Render(in)
	})
}
