package chat

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestRenderGoMessages renders a conversation built in Go (reasoning, two
// tool calls whose arguments are not in sorted key order, tool results,
// tools whose schemas hold floats and HTML characters) with Qwen3's
// template. The expected text was rendered by Python Jinja2 3.1.6 set up as
// Hugging Face transformers sets it up.
func TestRenderGoMessages(t *testing.T) {
	set, err := LoadDir(fixtures.Dir(t, "tokenizers", "qwen3"), Options{Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{
		Messages: []Message{
			{Role: "system", Content: Text("You are helpful.")},
			{Role: "user", Content: Text("Weather in Paris, and 2+3?")},
			{Role: "assistant", Content: Text(""), ReasoningContent: "Need two tools.", ToolCalls: []ToolCall{
				{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"unit": "celsius", "city": "Paris"}`)},
				{ID: "call_2", Name: "add", Arguments: json.RawMessage(`{"b":3,"a":2.0}`)},
			}},
			{Role: "tool", Content: Text(`{"temp_c": 21}`), ToolCallID: "call_1", Name: "get_weather"},
			{Role: "tool", Content: Text("5"), ToolCallID: "call_2", Name: "add"},
			{Role: "assistant", Content: Text("It is 21°C in Paris; 2+3 is 5."), ReasoningContent: "Both tools answered."},
		},
		Tools: []json.RawMessage{
			json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later", "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "city": {"type": "string"}}, "required": ["city"]}}}`),
			json.RawMessage(`{"type":"function","function":{"name":"add","description":"Add","parameters":{"type":"object","properties":{"b":{"type":"number","minimum":1.0},"a":{"type":"number","maximum":1e-7}}}}}`),
		},
		AddGenerationPrompt: true,
	}
	want := "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather <now> & later\", \"parameters\": {\"type\": \"object\", \"properties\": {\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"Add\", \"parameters\": {\"type\": \"object\", \"properties\": {\"b\": {\"type\": \"number\", \"minimum\": 1.0}, \"a\": {\"type\": \"number\", \"maximum\": 1e-07}}}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris, and 2+3?<|im_end|>\n<|im_start|>assistant\n<think>\nNeed two tools.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\", \"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": 3, \"a\": 2.0}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response>\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nBoth tools answered.\n</think>\n\nIt is 21°C in Paris; 2+3 is 5.<|im_end|>\n<|im_start|>assistant\n"
	got, err := set.Default().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("render mismatch\n got: %q\nwant: %q", got, want)
	}
}

func TestRenderVariables(t *testing.T) {
	tests := []struct {
		name string
		src  string
		opts Options
		in   Input
		want string
	}{
		{
			name: "special tokens",
			src:  "{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}",
			opts: Options{SpecialTokens: map[string]string{"bos_token": "<s>", "eos_token": "</s>"}},
			want: "<s>|</s>|False",
		},
		{
			name: "kwargs override special tokens",
			src:  "{{ bos_token }}",
			opts: Options{SpecialTokens: map[string]string{"bos_token": "<s>"}},
			in:   Input{Kwargs: map[string]any{"bos_token": "[BOS]"}},
			want: "[BOS]",
		},
		{
			name: "add_generation_prompt",
			src:  "{{ add_generation_prompt }}",
			in:   Input{AddGenerationPrompt: true},
			want: "True",
		},
		{
			name: "tools and documents are none by default",
			src:  "{{ tools is none }} {{ documents is none }} {{ messages|length }}",
			want: "True True 0",
		},
		{
			name: "kwarg kinds",
			src:  "{{ a }} {{ b }} {{ c }} {{ d|tojson }} {{ e|tojson }} {{ f|tojson }} {{ g is none }}",
			in: Input{Kwargs: map[string]any{
				"a": 7, "b": "s", "c": false,
				"d": json.RawMessage(`{"z": [1, 2.5], "a": null}`),
				"e": map[string]any{"y": 1, "x": []any{"p", json.Number("3")}},
				"f": []string{"u", "v"},
				"g": nil,
			}},
			want: `7 s False {"z": [1, 2.5], "a": null} {"x": ["p", 3], "y": 1} ["u", "v"] True`,
		},
		{
			name: "enable_thinking false",
			src:  "{% if enable_thinking is defined and enable_thinking is false %}off{% endif %}",
			in:   Input{Kwargs: map[string]any{"enable_thinking": false}},
			want: "off",
		},
		{
			name: "strftime_now with the injected clock",
			src:  `{{ strftime_now("%d %b %Y") }}`,
			opts: Options{Now: fixedNow},
			want: "15 Jan 2025",
		},
		{
			name: "loop controls",
			src:  "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
			want: "023",
		},
		{
			name: "trim_blocks and lstrip_blocks",
			src:  "a\n    {% if true %}\nb\n    {% endif %}\nc",
			want: "a\nb\nc",
		},
		{
			name: "message fields",
			src:  "{% for m in messages %}{{ m|tojson }}\n{% endfor %}",
			in: Input{Messages: []Message{
				{Role: "user", Content: Parts(Part{Type: "image", Extra: []Field{{"url", json.RawMessage(`"x.png"`)}}}, Part{Type: "text", Text: "hi"})},
				{Role: "assistant", ToolCalls: []ToolCall{{Name: "f"}}, Extra: []Field{{"thinking", json.RawMessage(`"hmm"`)}}},
				{Role: "tool", Content: Text("1"), ToolCallID: "c1", Name: "f"},
			}},
			want: `{"role": "user", "content": [{"type": "image", "url": "x.png"}, {"type": "text", "text": "hi"}]}` + "\n" +
				`{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}], "thinking": "hmm"}` + "\n" +
				`{"role": "tool", "content": "1", "tool_call_id": "c1", "name": "f"}` + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse(tt.src, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestRenderInputErrors(t *testing.T) {
	tmpl, err := Parse("{{ messages|length }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"reserved kwarg", Input{Kwargs: map[string]any{"messages": 1}}, `kwarg "messages"`},
		{"unsupported kwarg type", Input{Kwargs: map[string]any{"x": time.Second}}, `kwarg "x": unsupported type`},
		{"malformed kwarg JSON", Input{Kwargs: map[string]any{"x": json.RawMessage(`{"a":`)}}, `kwarg "x"`},
		{"malformed tool", Input{Tools: []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{`)}}, "tool 1"},
		{"malformed arguments", Input{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{"a" 1}`)}}}}}, "message 0: tool call 0: arguments"},
		{"malformed extra", Input{Messages: []Message{{Role: "user", Extra: []Field{{"k", json.RawMessage(`nope`)}}}}}, "message 0: k"},
		{"continue and generation prompt", Input{ContinueFinalMessage: true, AddGenerationPrompt: true}, "cannot both be set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tmpl.Render(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestContinueFinalMessage(t *testing.T) {
	tmpl, err := Parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}  </{{ m.role }}>\n{% endfor %}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{
		Messages: []Message{
			{Role: "user", Content: Text("Say hi")},
			{Role: "assistant", Content: Text("Hi, I am ")},
		},
		ContinueFinalMessage: true,
	}
	got, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<user>Say hi  </user>\n<assistant>Hi, I am"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	in.Messages[1].Content = Content{}
	if _, err := tmpl.Render(in); err == nil {
		t.Error("no error for a final message without content")
	}
}

// TestErrorLines checks that parse and runtime errors name the template line
// that failed, including errors the engine reports without a line.
func TestErrorLines(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		parse    bool // the error comes from Parse
		wantLine int
		wantMsg  string
	}{
		{"unknown statement", "a\n{% if x %}\nb\n{% endfor %}", true, 4, `unknown statement "endfor"`},
		{"unclosed block", "a\n{% if x %}\n{% for y in z %}\nb\n{% endfor %}", true, 2, "unclosed if block"},
		{"bad expression", "a\n{{ x |\n}}", true, 2, "filter name"},
		{"unclosed tag", "a\n\n{{ x", true, 3, "unclosed expression tag"},
		{"raise in loop", "{% for x in [1, 2] %}\n{% if x == 2 %}\n{{ raise_exception('two: ' ~ x) }}\n{% endif %}\n{% endfor %}", false, 3, "two: 2"},
		{"error in macro body", "{% macro m(a) %}\n{{ a.b() }}\n{% endmacro %}\nx\n{{ m(1) }}", false, 2, "not callable"},
		{"error in set", "\n{% set y = nofn() %}", false, 2, "nofn"},
		{"error in elif", "{% if false %}\n{% elif nofn() %}\n{% endif %}", false, 2, "nofn"},
		{"error in for iterable", "\n\n{% for a in nofn() %}{% endfor %}", false, 3, "nofn"},
		{"error in for filter", "\n{% for a in [1] if nofn() %}{% endfor %}", false, 2, "nofn"},
		{"error in tojson", "{{ x | tojson }}\n{{ undefined_thing | tojson }}", false, 2, "not JSON serializable"},
		{"unknown filter", "\n\n\n{{ 'x' | nosuch }}", false, 4, `unknown filter "nosuch"`},
		{"multi-line tag", "{{ 1 }}\n{%- if\n  nofn()\n-%}{% endif %}", false, 2, "nofn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse(tt.src, Options{Name: "test"})
			if err == nil {
				if tt.parse {
					t.Fatal("Parse succeeded, want an error")
				}
				_, err = tmpl.Render(Input{Kwargs: map[string]any{"x": 1}})
			} else if !tt.parse {
				t.Fatalf("Parse: %v", err)
			}
			var terr *Error
			if !errors.As(err, &terr) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if terr.Line != tt.wantLine || terr.Name != "test" {
				t.Errorf("error %v: name %q line %d, want \"test\" line %d", err, terr.Name, terr.Line, tt.wantLine)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestRaiseError(t *testing.T) {
	tmpl, err := Parse("line one\n{{ raise_exception('Only user and assistant roles are supported!') }}", Options{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{})
	var raised *RaiseError
	if !errors.As(err, &raised) || raised.Message != "Only user and assistant roles are supported!" {
		t.Fatalf("error = %v, want a *RaiseError", err)
	}
	if want := `chat template "default", line 2: Only user and assistant roles are supported!`; err.Error() != want {
		t.Errorf("error text %q, want %q", err, want)
	}
}

func TestStrftime(t *testing.T) {
	// Expected values from Python's datetime.strftime on Linux.
	t1 := time.Date(2025, 3, 7, 14, 5, 9, 123456000, time.UTC)
	t2 := time.Date(2024, 12, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		format, want1, want2 string
	}{
		{"%Y-%m-%d %H:%M:%S", "2025-03-07 14:05:09", "2024-12-30 00:00:00"},
		{"%d %b %Y", "07 Mar 2025", "30 Dec 2024"},
		{"%-d %B %Y", "7 March 2025", "30 December 2024"},
		{"%A %a %j %I %p %y %e", "Friday Fri 066 02 PM 25  7", "Monday Mon 365 12 AM 24 30"},
		{"%c", "Fri Mar  7 14:05:09 2025", "Mon Dec 30 00:00:00 2024"},
		{"%x %X %D %F %T %R %r", "03/07/25 14:05:09 03/07/25 2025-03-07 14:05:09 14:05 02:05:09 PM", "12/30/24 00:00:00 12/30/24 2024-12-30 00:00:00 00:00 12:00:00 AM"},
		{"%U %W %V %G %g %u %w %C %k %l %f", "09 09 10 2025 25 5 5 20 14  2 123456", "52 53 01 2025 25 1 1 20  0 12 000000"},
		{"%%Y %Q %-m/%-d %-H", "%Y %Q 3/7 14", "%Y %Q 12/30 0"},
		{"trailing %", "trailing %", "trailing %"},
	}
	for _, tt := range tests {
		if got := strftime(tt.format, t1); got != tt.want1 {
			t.Errorf("strftime(%q, t1) = %q, want %q", tt.format, got, tt.want1)
		}
		if got := strftime(tt.format, t2); got != tt.want2 {
			t.Errorf("strftime(%q, t2) = %q, want %q", tt.format, got, tt.want2)
		}
	}
}

// TestInstrumentedRendersAlike checks that the instrumented copy used to
// locate runtime errors renders exactly like the template itself.
func TestInstrumentedRendersAlike(t *testing.T) {
	for _, dir := range []string{
		filepath.Join("tokenizers", "qwen3"),
		filepath.Join("tokenizers", "llama3"),
		filepath.Join("tokenizers", "gemma3"),
	} {
		set, err := LoadDir(fixtures.Dir(t, dir), Options{Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		tmpl := set.Default()
		src, ok := prepare(tmpl.Source(), true)
		if !ok {
			t.Fatalf("%s: prepare failed", dir)
		}
		traced, err := compile(src)
		if err != nil {
			t.Fatalf("%s: instrumented template: %v", dir, err)
		}
		in := Input{
			Messages: []Message{
				{Role: "system", Content: Text("sys")},
				{Role: "user", Content: Text("hi")},
				{Role: "assistant", Content: Text("<think>\nr\n</think>\n\nok"), ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{"b":1,"a":2}`)}}},
				{Role: "tool", Content: Text("3")},
				{Role: "user", Content: Parts(Part{Type: "text", Text: "again"})},
			},
			Tools:               []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)},
			AddGenerationPrompt: true,
		}
		want, err1 := tmpl.Render(in)
		// The copy calls the line marker; give it an identity.
		data, err := tmpl.data(in)
		if err != nil {
			t.Fatal(err)
		}
		var line int
		data[markName] = lineMarker(&line)
		got, err2 := execute(traced, data)
		if line == 0 {
			t.Errorf("%s: the line marker was never called", dir)
		}
		if (err1 == nil) != (err2 == nil) || got != want {
			t.Errorf("%s: instrumented render differs\n got: %q, %v\nwant: %q, %v", dir, got, err2, want, err1)
		}
	}
}

func TestParsePanicsBecomeErrors(t *testing.T) {
	// Inputs the engine may mishandle must give an error or a render, never
	// a panic; these shapes come from fuzzing.
	for _, src := range []string{
		"{{ x[::0] }}",
		"{% for a, b in 1 %}{% endfor %}",
		"{{ (1)(2) }}",
		"{% set ns.x = 1 %}",
		"{{ range(1, 2, 0) }}",
		"{% macro m( %}{% endmacro %}",
		"{{ messages[0].content.split() }}",
	} {
		tmpl, err := Parse(src, Options{})
		if err != nil {
			continue
		}
		_, _ = tmpl.Render(Input{Messages: []Message{{Role: "user", Content: Text("x")}}})
	}
}

func TestRange(t *testing.T) {
	tests := []struct {
		src, want string // want "" means an error
	}{
		{"{{ range(3)|list }}", "[0, 1, 2]"},
		{"{{ range(1, 4)|list }}", "[1, 2, 3]"},
		{"{{ range(10, 0, -3)|list }}", "[10, 7, 4, 1]"},
		{"{{ range(0)|list }}", "[]"},
		{"{{ range(5, 1)|list }}", "[]"},
		{"{{ range(-9223372036854775807, 9223372036854775807, 9223372036854775807)|list }}", "[-9223372036854775807, 0]"},
		{"{{ range(100000)|length }}", "100000"},
		{"{{ range(100001) }}", ""},
		{"{{ range(0, 1, 0) }}", ""},
		{"{{ range('a') }}", ""},
		{"{{ range() }}", ""},
	}
	for _, tt := range tests {
		tmpl, err := Parse(tt.src, Options{})
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		got, err := tmpl.Render(Input{})
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("%s: rendered %q, want an error", tt.src, got)
		case tt.want != "" && err != nil:
			t.Errorf("%s: %v", tt.src, err)
		case got != tt.want:
			t.Errorf("%s: got %q, want %q", tt.src, got, tt.want)
		}
	}
}
