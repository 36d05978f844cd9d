package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// The chat model's two tools.
const (
	weatherTool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	addTool     = `{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}`
	bothTools   = `"tools":[` + weatherTool + `,` + addTool + `]`
	weatherQ    = `"messages":[{"role":"user","content":"What's the weather in Paris?"}]`
)

// oaCalls returns the tool calls and content of a chat completion.
func oaCalls(t *testing.T, v map[string]any) (calls []map[string]any, content, finish string) {
	t.Helper()
	choices, _ := v["choices"].([]any)
	if len(choices) != 1 {
		t.Fatalf("choices %v", v)
	}
	c, _ := choices[0].(map[string]any)
	msg, _ := c["message"].(map[string]any)
	for _, x := range asList(msg["tool_calls"]) {
		calls = append(calls, x.(map[string]any))
	}
	content, _ = msg["content"].(string)
	finish, _ = c["finish_reason"].(string)
	return calls, content, finish
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// checkArgs checks that a call's arguments fit the chat model's tools.
func checkArgs(t *testing.T, name, args string) {
	t.Helper()
	switch name {
	case "get_weather":
		var a struct {
			City *string `json:"city"`
		}
		if err := strictUnmarshal(args, &a); err != nil || a.City == nil {
			t.Errorf("get_weather arguments %s: %v", args, err)
		}
	case "add":
		var a struct {
			A, B *int
		}
		if err := strictUnmarshal(args, &a); err != nil || a.A == nil || a.B == nil {
			t.Errorf("add arguments %s: %v", args, err)
		}
	default:
		t.Errorf("called %q", name)
	}
}

func strictUnmarshal(s string, v any) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// TestOpenAIToolChoice drives tool_choice through /v1/chat/completions:
// the questions are ones the model answers in text (or with another tool)
// when it may choose, so only the constraint makes the calls.
func TestOpenAIToolChoice(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	url := ts.URL + "/v1/chat/completions"
	tests := []struct {
		name      string
		body      string
		wantCall  string // "" none, "*" any declared
		thinkSeen bool
	}{
		{"auto answers in text", `{"model":"chat","temperature":0,` + japan + `,` + bothTools + `}`, "", false},
		{"required calls a tool", `{"model":"chat","temperature":0,` + japan + `,` + bothTools + `,"tool_choice":"required"}`, "*", true},
		{"required sampled", `{"model":"chat","temperature":1,"seed":3,` + japan + `,` + bothTools + `,"tool_choice":"required"}`, "*", false},
		{"required without thinking", `{"model":"chat","temperature":0,"chat_template_kwargs":{"enable_thinking":false},` + japan + `,` + bothTools + `,"tool_choice":"required"}`, "*", false},
		{"named overrides the model's choice", `{"model":"chat","temperature":0,` + weatherQ + `,` + bothTools + `,"tool_choice":{"type":"function","function":{"name":"add"}}}`, "add", false},
		{"none keeps calls out", `{"model":"chat","temperature":0,` + weatherQ + `,` + bothTools + `,"tool_choice":"none"}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, url, tt.body)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			calls, content, finish := oaCalls(t, v)
			if strings.Contains(content, "<tool_call>") {
				t.Errorf("content %q holds a call", content)
			}
			if tt.wantCall == "" {
				if len(calls) > 0 || finish == "tool_calls" {
					t.Fatalf("calls %v, finish %s", calls, finish)
				}
				return
			}
			if len(calls) == 0 || finish != "tool_calls" {
				t.Fatalf("no call: finish %s, content %q", finish, content)
			}
			for _, c := range calls {
				fn, _ := c["function"].(map[string]any)
				name, _ := fn["name"].(string)
				args, _ := fn["arguments"].(string)
				if tt.wantCall != "*" && name != tt.wantCall {
					t.Errorf("called %s, want %s", name, tt.wantCall)
				}
				checkArgs(t, name, args)
			}
			if tt.thinkSeen {
				choices, _ := v["choices"].([]any)
				msg := choices[0].(map[string]any)["message"].(map[string]any)
				if r, _ := msg["reasoning_content"].(string); r == "" {
					t.Errorf("no reasoning before the call: %s", raw)
				}
			}
		})
	}
	// Streamed, the call arrives as tool-call deltas.
	code, _, raw := post(t, url, `{"model":"chat","temperature":0,"stream":true,`+japan+`,`+bothTools+`,"tool_choice":"required"}`)
	if code != 200 || !strings.Contains(raw, `"tool_calls":[{"index":0`) || !strings.Contains(raw, `"finish_reason":"tool_calls"`) {
		t.Errorf("stream %d: %s", code, raw)
	}
}

// TestAnthropicToolChoice drives tool_choice any, tool and none through
// /v1/messages.
func TestAnthropicToolChoice(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`{"name":"add","input_schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}]`
	for _, tt := range []struct {
		name, body, want string
	}{
		{"any", japan + `,"tool_choice":{"type":"any"}`, "*"},
		{"tool", weatherQ + `,"tool_choice":{"type":"tool","name":"add"}`, "add"},
		{"none", weatherQ + `,"tool_choice":{"type":"none"}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"chat","max_tokens":200,"temperature":0,`+tools+`,`+tt.body+`}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			var uses []map[string]any
			for _, b := range asList(v["content"]) {
				b := b.(map[string]any)
				switch b["type"] {
				case "tool_use":
					uses = append(uses, b)
				case "text":
					if strings.Contains(b["text"].(string), "<tool_call>") {
						t.Errorf("text %q holds a call", b["text"])
					}
				}
			}
			if tt.want == "" {
				if len(uses) > 0 || v["stop_reason"] == "tool_use" {
					t.Fatalf("tool use under none: %s", raw)
				}
				return
			}
			if len(uses) == 0 || v["stop_reason"] != "tool_use" {
				t.Fatalf("no tool use: %s", raw)
			}
			for _, u := range uses {
				name, _ := u["name"].(string)
				if tt.want != "*" && name != tt.want {
					t.Errorf("used %s, want %s", name, tt.want)
				}
				input, _ := json.Marshal(u["input"])
				checkArgs(t, name, string(input))
			}
		})
	}
}

// TestAnthropicThinkingBudget checks that budget_tokens ends reasoning
// after that many tokens, and that thinking left out or disabled gives no
// thinking block.
func TestAnthropicThinkingBudget(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	url := ts.URL + "/v1/messages"
	thinking := func(t *testing.T, extra string) (string, string) {
		t.Helper()
		code, v, raw := post(t, url, `{"model":"chat","max_tokens":100,"temperature":0,`+japan+extra+`}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		var th, text string
		for _, b := range asList(v["content"]) {
			b := b.(map[string]any)
			switch b["type"] {
			case "thinking":
				th += b["thinking"].(string)
			case "text":
				text += b["text"].(string)
			}
		}
		return th, text
	}
	full, _ := thinking(t, `,"thinking":{"type":"enabled","budget_tokens":60}`)
	short, text := thinking(t, `,"thinking":{"type":"enabled","budget_tokens":3}`)
	if full != "The user asks for the capital of Japan. It is Tokyo." {
		t.Fatalf("full reasoning %q", full)
	}
	// <think> is not reasoning; "\n", "The", " user" are its 3 tokens.
	if short == "" || !strings.HasPrefix(full, short) || len(short) >= len(full)/2 {
		t.Errorf("reasoning under a budget of 3 tokens: %q (unbounded: %q)", short, full)
	}
	if strings.Contains(text, "</think>") || strings.Contains(text, "<think>") {
		t.Errorf("markers in the text: %q", text)
	}
	for _, extra := range []string{``, `,"thinking":{"type":"disabled"}`} {
		if th, text := thinking(t, extra); th != "" || text != "The capital of Japan is Tokyo." {
			t.Errorf("thinking %q: reasoning %q, text %q", extra, th, text)
		}
	}
}

// TestJSONSchemaOutput asks each dialect for output held to a schema.
func TestJSONSchemaOutput(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	// The model was never taught JSON, and left free inside a string it
	// does not find the closing quote: the schema keeps its strings to
	// enums.
	const schema = `{"type":"object","properties":{"capital":{"enum":["Tokyo","Paris","Rome"]},"continent":{"enum":["Asia","Europe"]},"rank":{"type":"integer"},"big":{"type":"boolean"},"cities":{"type":"array","items":{"enum":["Osaka","Kyoto"]},"maxItems":2}},"required":["capital","continent","rank"],"additionalProperties":false}`
	check := func(t *testing.T, text string) {
		t.Helper()
		var v struct {
			Capital   string
			Continent string
			Rank      *int
			Big       *bool
			Cities    []string
		}
		if err := strictUnmarshal(text, &v); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if v.Capital == "" || v.Rank == nil || (v.Continent != "Asia" && v.Continent != "Europe") || len(v.Cities) > 2 {
			t.Errorf("%q does not fit the schema", text)
		}
	}
	const q = `"messages":[{"role":"user","content":"What is the capital of Japan? Answer in JSON."}]`
	t.Run("openai", func(t *testing.T) {
		code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,`+q+`,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":`+schema+`}}}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		_, content, finish := oaCalls(t, v)
		if finish != "stop" {
			t.Fatalf("finish %s: %q", finish, content)
		}
		check(t, content)
	})
	t.Run("responses", func(t *testing.T) {
		code, v, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":300,"input":"What is the capital of Japan? Answer in JSON.","text":{"format":{"type":"json_schema","name":"answer","schema":`+schema+`}}}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		text := ""
		for _, item := range asList(v["output"]) {
			for _, c := range asList(item.(map[string]any)["content"]) {
				if c := c.(map[string]any); c["type"] == "output_text" {
					text += c["text"].(string)
				}
			}
		}
		check(t, text)
	})
	t.Run("anthropic", func(t *testing.T) {
		code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"chat","max_tokens":300,"temperature":0,`+q+`,"output_config":{"format":{"type":"json_schema","schema":`+schema+`}}}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		content := asList(v["content"])
		if len(content) != 1 {
			t.Fatalf("content %s", raw)
		}
		check(t, content[0].(map[string]any)["text"].(string))
	})
	t.Run("ollama", func(t *testing.T) {
		code, v, raw := post(t, ts.URL+"/api/chat", `{"model":"chat","stream":false,"options":{"temperature":0,"num_predict":300},`+q+`,"format":`+schema+`}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		msg, _ := v["message"].(map[string]any)
		check(t, msg["content"].(string))
	})
}
