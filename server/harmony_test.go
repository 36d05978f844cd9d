package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/synth"
)

// harmonySpecials are the special tokens of the Harmony format.
var harmonySpecials = []string{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"}

// newHarmonyServer serves as "harmony" a random-weight model (lem synth's
// tiny geometry) whose tokenizer holds the Harmony format's special tokens
// and whose chat template is chat/testdata/harmony.jinja, a template in
// that format. No trained gpt-oss chat model is at hand: the model answers
// at random, and only the constraints make its output well formed.
func newHarmonyServer(t *testing.T) (*Model, *httptest.Server) {
	t.Helper()
	tmpl, err := os.ReadFile("../chat/testdata/harmony.jinja")
	if err != nil {
		t.Fatal(err)
	}
	bt, err := synth.NewBuiltinTokenizer(512 - len(harmonySpecials))
	if err != nil {
		t.Fatal(err)
	}
	bt.Special = append(bt.Special, harmonySpecials...)
	tj, err := bt.TokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{
		"add_bos_token": false, "bos_token": nil, "eos_token": "<|return|>", "pad_token": synth.EndOfText,
		"model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast",
	})
	if err != nil {
		t.Fatal(err)
	}
	tokDir, dir := t.TempDir(), t.TempDir()
	for name, data := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cfg, "chat_template.jinja": tmpl} {
		if err := os.WriteFile(filepath.Join(tokDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := synth.Write(dir, synth.Options{Like: "tiny", Tokenizer: tokDir, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	em, err := engine.Open(dir, engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	// <|return|> and <|call|> end a turn; <|end|> only a message.
	var stops []string
	for _, id := range em.StopIDs {
		stops = append(stops, em.Tokenizer.Token(id))
	}
	if strings.Join(stops, " ") != "<|return|> <|call|>" {
		t.Fatalf("stop tokens %q, want <|return|> and <|call|>", stops)
	}
	m, err := NewModel("harmony", em, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.format.Tools != chat.ToolsHarmony {
		t.Fatalf("format %+v, want Harmony", m.format)
	}
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, m)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); ts.Close() })
	return m, ts
}

// Tools whose arguments a random model completes: enums, integers and
// booleans, no free strings.
const (
	hWeather = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"enum":["Paris","Tokyo"]},"days":{"type":"integer"}},"required":["city"],"additionalProperties":false}}}`
	hAdd     = `{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}}}`
	hTools   = `"tools":[` + hWeather + `,` + hAdd + `]`
	hQ       = `"messages":[{"role":"user","content":"What's the weather in Paris?"}]`
	hNoThink = `"chat_template_kwargs":{"enable_thinking":false}`
)

// checkHarmonyArgs checks a call's arguments against the tools above.
func checkHarmonyArgs(t *testing.T, name, args string) {
	t.Helper()
	switch name {
	case "get_weather":
		var a struct {
			City *string `json:"city"`
			Days *int    `json:"days"`
		}
		if err := strictUnmarshal(args, &a); err != nil || a.City == nil || *a.City != "Paris" && *a.City != "Tokyo" {
			t.Errorf("get_weather arguments %s: %v", args, err)
		}
	case "add":
		checkArgs(t, name, args)
	default:
		t.Errorf("called %q", name)
	}
}

// TestHarmonyOpenAI drives tool_choice and response_format through
// /v1/chat/completions on a Harmony model: a forced call comes back as a
// tool call (finish_reason tool_calls), never as text, with or without
// analysis before it.
func TestHarmonyOpenAI(t *testing.T) {
	_, ts := newHarmonyServer(t)
	url := ts.URL + "/v1/chat/completions"
	tests := []struct {
		name     string
		body     string
		wantCall string // "" none, "*" any declared
	}{
		{"required", `{"model":"harmony","temperature":0,"max_tokens":1000,` + hNoThink + `,` + hQ + `,` + hTools + `,"tool_choice":"required"}`, "*"},
		{"required sampled", `{"model":"harmony","temperature":1,"seed":2,"max_tokens":1000,` + hNoThink + `,` + hQ + `,` + hTools + `,"tool_choice":"required"}`, "*"},
		{"named", `{"model":"harmony","temperature":0,"max_tokens":1000,` + hNoThink + `,` + hQ + `,` + hTools + `,"tool_choice":{"type":"function","function":{"name":"add"}}}`, "add"},
		{"none", `{"model":"harmony","temperature":1,"seed":4,"max_tokens":60,` + hQ + `,` + hTools + `,"tool_choice":"none"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, url, tt.body)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			calls, content, finish := oaCalls(t, v)
			t.Logf("finish %s, content %q, calls %v", finish, content, calls)
			if strings.Contains(content, "to=functions.") {
				t.Errorf("content %q holds a call", content)
			}
			if tt.wantCall == "" {
				if len(calls) > 0 || finish == "tool_calls" {
					t.Fatalf("calls %v, finish %s", calls, finish)
				}
				return
			}
			if len(calls) != 1 || finish != "tool_calls" || content != "" {
				t.Fatalf("finish %s, content %q, calls %v: want one call", finish, content, calls)
			}
			fn, _ := calls[0]["function"].(map[string]any)
			name, _ := fn["name"].(string)
			args, _ := fn["arguments"].(string)
			if tt.wantCall != "*" && name != tt.wantCall {
				t.Errorf("called %s, want %s", name, tt.wantCall)
			}
			checkHarmonyArgs(t, name, args)
		})
	}

	t.Run("stream", func(t *testing.T) {
		code, _, raw := post(t, url, `{"model":"harmony","temperature":0,"max_tokens":1000,"stream":true,`+hNoThink+`,`+hQ+`,`+hTools+`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		var name, args, finish string
		for _, d := range sseEvents(raw) {
			if d == "[DONE]" {
				continue
			}
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content   string `json:"content"`
						ToolCalls []struct {
							Function struct{ Name, Arguments string }
						} `json:"tool_calls"`
					}
					FinishReason *string `json:"finish_reason"`
				}
			}
			if err := json.Unmarshal([]byte(d), &chunk); err != nil {
				t.Fatalf("%q: %v", d, err)
			}
			for _, c := range chunk.Choices {
				if c.Delta.Content != "" {
					t.Errorf("content delta %q", c.Delta.Content)
				}
				for _, tc := range c.Delta.ToolCalls {
					name += tc.Function.Name
					args += tc.Function.Arguments
				}
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
		}
		if name != "get_weather" || finish != "tool_calls" {
			t.Fatalf("call %q, finish %q: %s", name, finish, raw)
		}
		checkHarmonyArgs(t, name, args)
	})

	t.Run("responses", func(t *testing.T) {
		code, v, raw := post(t, ts.URL+"/v1/responses", `{"model":"harmony","temperature":0,"max_output_tokens":1000,"reasoning":{"effort":"none"},"input":"Weather in Paris?",`+
			`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"enum":["Paris","Tokyo"]}},"required":["city"],"additionalProperties":false}}],"tool_choice":"required"}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		var calls []map[string]any
		for _, item := range asList(v["output"]) {
			switch item := item.(map[string]any); item["type"] {
			case "function_call":
				calls = append(calls, item)
			case "message":
				t.Errorf("message item: %s", raw)
			}
		}
		if len(calls) != 1 || calls[0]["name"] != "get_weather" {
			t.Fatalf("calls %v: %s", calls, raw)
		}
		args, _ := calls[0]["arguments"].(string)
		checkHarmonyArgs(t, "get_weather", args)
	})

	t.Run("json schema", func(t *testing.T) {
		const schema = `{"type":"object","properties":{"capital":{"enum":["Tokyo","Paris"]},"rank":{"type":"integer"}},"required":["capital","rank"],"additionalProperties":false}`
		code, v, raw := post(t, url, `{"model":"harmony","temperature":0,"max_tokens":1000,`+hNoThink+`,"messages":[{"role":"user","content":"Capital of Japan, in JSON?"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":`+schema+`}}}`)
		if code != 200 {
			t.Fatalf("%d %s", code, raw)
		}
		_, content, finish := oaCalls(t, v)
		var a struct {
			Capital string
			Rank    *float64
		}
		if err := strictUnmarshal(content, &a); err != nil || a.Rank == nil || a.Capital != "Tokyo" && a.Capital != "Paris" || finish != "stop" {
			t.Fatalf("finish %s, content %q: %v", finish, content, err)
		}
	})
}

// TestHarmonyAnthropic drives tool_choice through /v1/messages on a
// Harmony model. Without thinking the call comes at once; with a thinking
// budget the analysis channel, which the budget ends, comes back as a
// thinking block and the call as tool_use.
func TestHarmonyAnthropic(t *testing.T) {
	_, ts := newHarmonyServer(t)
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"enum":["Paris","Tokyo"]},"days":{"type":"integer"}},"required":["city"],"additionalProperties":false}},` +
		`{"name":"add","input_schema":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}}]`
	const thinking = `,"thinking":{"type":"enabled","budget_tokens":6}`
	for _, tt := range []struct {
		name, body, want string
		think            bool
	}{
		{"any", `"tool_choice":{"type":"any"}`, "*", false},
		{"tool", `"tool_choice":{"type":"tool","name":"add"}`, "add", false},
		// With these random weights, greedy decoding takes the analysis
		// channel when it may.
		{"any thinking", `"tool_choice":{"type":"any"}` + thinking, "*", true},
		{"tool thinking", `"tool_choice":{"type":"tool","name":"get_weather"}` + thinking, "get_weather", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"harmony","max_tokens":1000,"temperature":0,`+tools+`,`+hQ+`,`+tt.body+`}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			var uses []map[string]any
			thought := ""
			for _, b := range asList(v["content"]) {
				b := b.(map[string]any)
				switch b["type"] {
				case "tool_use":
					uses = append(uses, b)
				case "thinking":
					th, _ := b["thinking"].(string)
					thought += th
				default:
					t.Errorf("%s block: %s", b["type"], raw)
				}
			}
			if len(uses) != 1 || v["stop_reason"] != "tool_use" {
				t.Fatalf("no tool use: %s", raw)
			}
			name, _ := uses[0]["name"].(string)
			if tt.want != "*" && name != tt.want {
				t.Errorf("used %s, want %s", name, tt.want)
			}
			input, _ := json.Marshal(uses[0]["input"])
			checkHarmonyArgs(t, name, string(input))
			if tt.think != (thought != "") || strings.Contains(thought, "<|") {
				t.Errorf("thinking %q: %s", thought, raw)
			}
		})
	}
}

// TestHarmonyHistory renders a conversation that goes on after a tool
// call: the call's reasoning, sent back as reasoning_content, reaches the
// template as the "thinking" key Harmony templates read it from.
func TestHarmonyHistory(t *testing.T) {
	m, _ := newHarmonyServer(t)
	var o oaChatRequest
	body := `{"model":"harmony","messages":[{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","reasoning_content":"Use the tool.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"21 C"}],` + hTools + `}`
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	req, err := o.toRequest(m)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Prepare(req)
	if err != nil {
		t.Fatal(err)
	}
	const want = "<|start|>user<|message|>Weather in Paris?<|end|>" +
		"<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>" +
		`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>` +
		`<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"21 C"<|end|><|start|>assistant`
	if !strings.HasSuffix(p.PromptText(), want) {
		t.Errorf("prompt %q\ndoes not end with %q", p.PromptText(), want)
	}
}
