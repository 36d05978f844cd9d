package chat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// loadHarmony parses testdata/harmony.jinja, a template in the Harmony
// format of the gpt-oss models.
func loadHarmony(t *testing.T) *Template {
	t.Helper()
	src, err := os.ReadFile("testdata/harmony.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse(string(src), Options{Name: "harmony"})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestHarmonyTemplate detects the Harmony format from a template in it,
// renders a conversation with a tool call and its result, and parses the
// call back from the form the template renders it in.
func TestHarmonyTemplate(t *testing.T) {
	tmpl := loadHarmony(t)
	f := DetectOutputFormat(tmpl)
	if f != harmony {
		t.Fatalf("DetectOutputFormat = %+v, want %+v", f, harmony)
	}
	const weather = `{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`
	in := Input{
		Messages: []Message{
			{Role: "system", Content: Text("Be brief.")},
			{Role: "user", Content: Text("Weather in Paris?")},
			{Role: "assistant", Extra: []Field{{Key: "thinking", Value: json.RawMessage(`"Use the tool."`)}}, ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city": "Paris"}`)}}},
			{Role: "tool", ToolCallID: "call_1", Content: Text("21 C")},
		},
		Tools:               []json.RawMessage{json.RawMessage(weather)},
		AddGenerationPrompt: true,
	}
	prompt, err := tmpl.Render(in)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|start|>system<|message|>You are a test model.\nReasoning: medium\n\n# Valid channels: analysis, commentary, final.\n" +
		"Calls to these tools must go to the commentary channel: 'functions'.<|end|>" +
		"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n" +
		"// Weather in a city.\ntype get_weather = (_: " + `{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}` + ") => any;\n\n} // namespace functions<|end|>" +
		"<|start|>user<|message|>Weather in Paris?<|end|>" +
		"<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>" +
		`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>` +
		`<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"21 C"<|end|>` +
		"<|start|>assistant"
	if prompt != want {
		t.Errorf("render:\n got %q\nwant %q", prompt, want)
	}
	if f.InReasoning(prompt) {
		t.Errorf("InReasoning(%q) = true", prompt)
	}

	// The assistant turn as the template renders it into the history,
	// less the "<|start|>assistant" that ends the prompt, is output the
	// parser reads back as the reasoning and the call.
	history, err := tmpl.Render(Input{Messages: in.Messages[:3], Tools: in.Tools})
	if err != nil {
		t.Fatal(err)
	}
	_, turn, ok := strings.Cut(history, "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant")
	if !ok {
		t.Fatalf("no assistant turn in %q", history)
	}
	checkAllFeeds(t, f, false, true, turn, parsed{Reasoning: "Use the tool.", Calls: []string{`get_weather {"city":"Paris"}`}})
}

// TestHarmonyParserStreams checks that Harmony output is released as it
// comes: reasoning and content as soon as they cannot be a marker, a call
// once its message ends.
func TestHarmonyParserStreams(t *testing.T) {
	steps := []feedStep{
		{"<|channel|>analy", ""},
		{"sis<|message|>Let", "reasoning:Let"},
		{" me see. <|", "reasoning: me see."},
		{"end|><|start|>assistant<|channel|>final<|message|>Hi", "content:Hi"},
		{" there<|end|><|start|>assistant<|channel|>commentary to=functions.f", "content: there"},
		{" <|constrain|>json<|message|>{\"a\": ", ""},
		{"1}", ""},
		{"<|call|>", "tool_call:f"},
	}
	checkSteps(t, harmony.NewParser(false, true), steps)
}
