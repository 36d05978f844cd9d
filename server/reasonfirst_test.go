package server

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

// reasonSchema keeps its strings to enums: the chat model was never taught
// JSON, and free inside a string it does not find the closing quote.
const reasonSchema = `{"type":"object","properties":{"capital":{"enum":["Tokyo","Paris","Rome"]},"rank":{"type":"integer"}},"required":["capital","rank"],"additionalProperties":false}`

// checkReasonAnswer checks a reply against reasonSchema.
func checkReasonAnswer(t *testing.T, text string) {
	t.Helper()
	var v struct {
		Capital string
		Rank    *float64 // an integer, maybe beyond int64
	}
	if err := strictUnmarshal(text, &v); err != nil {
		t.Fatalf("content %q: %v", text, err)
	}
	if v.Capital != "Tokyo" && v.Capital != "Paris" && v.Capital != "Rome" || v.Rank == nil {
		t.Errorf("content %q does not fit the schema", text)
	}
}

// TestReasoningBeforeStructure checks that with thinking on the chat model
// (which writes <think>…</think> before its answer) reasons freely and the
// JSON or tool-call constraint begins at the end of its reasoning, on
// every dialect; that a thinking budget closes the reasoning and hands over
// to the constraint; and that with thinking off the constraint holds from
// the first token.
func TestReasoningBeforeStructure(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	q := japan
	const noThink = `"chat_template_kwargs":{"enable_thinking":false}`
	schemaFormat := `"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":` + reasonSchema + `}}`
	tests := []struct {
		name      string
		path      string
		body      string
		wantThink bool // reasoning comes back
		maxThink  int  // when positive: at most this many words of reasoning
		call      bool // a tool call, not JSON content
		object    bool // any JSON object (begun), not reasonSchema
	}{
		{"openai schema thinking", "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,` + q + `,` + schemaFormat + `}`, true, 0, false, false},
		{"openai schema thinking streamed", "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,"stream":true,` + q + `,` + schemaFormat + `}`, true, 0, false, false},
		{"openai json_object thinking", "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":60,` + q + `,"response_format":{"type":"json_object"}}`, true, 0, false, true},
		{"openai schema no thinking", "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,` + noThink + `,` + q + `,` + schemaFormat + `}`, false, 0, false, false},
		{"openai required thinking", "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,` + japan + `,` + bothTools + `,"tool_choice":"required"}`, true, 0, true, false},
		{"anthropic schema thinking", "/v1/messages", `{"model":"chat","temperature":0,"max_tokens":300,"thinking":{"type":"enabled","budget_tokens":200},` + q + `,"output_config":{"format":{"type":"json_schema","schema":` + reasonSchema + `}}}`, true, 0, false, false},
		{"anthropic schema budget", "/v1/messages", `{"model":"chat","temperature":0,"max_tokens":300,"thinking":{"type":"enabled","budget_tokens":3},` + q + `,"output_config":{"format":{"type":"json_schema","schema":` + reasonSchema + `}}}`, true, 3, false, false},
		{"anthropic schema no thinking", "/v1/messages", `{"model":"chat","temperature":0,"max_tokens":300,` + q + `,"output_config":{"format":{"type":"json_schema","schema":` + reasonSchema + `}}}`, false, 0, false, false},
		{"ollama format thinking", "/api/chat", `{"model":"chat","stream":false,"think":true,"options":{"temperature":0,"num_predict":300},` + q + `,"format":` + reasonSchema + `}`, true, 0, false, false},
		{"ollama format json thinking", "/api/chat", `{"model":"chat","stream":false,"think":true,"options":{"temperature":0,"num_predict":60},` + q + `,"format":"json"}`, true, 0, false, true},
		{"ollama format no thinking", "/api/chat", `{"model":"chat","stream":false,"think":false,"options":{"temperature":0,"num_predict":300},` + q + `,"format":` + reasonSchema + `}`, false, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+tt.path, tt.body)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			var think, content, finish string
			var calls []map[string]any
			switch {
			case strings.Contains(tt.body, `"stream":true`):
				for _, d := range sseEvents(raw) {
					if d == "[DONE]" {
						continue
					}
					var chunk struct {
						Choices []struct {
							Delta struct {
								Content          string `json:"content"`
								ReasoningContent string `json:"reasoning_content"`
							} `json:"delta"`
							FinishReason *string `json:"finish_reason"`
						}
					}
					if err := json.Unmarshal([]byte(d), &chunk); err != nil {
						t.Fatalf("%q: %v", d, err)
					}
					for _, c := range chunk.Choices {
						content += c.Delta.Content
						think += c.Delta.ReasoningContent
						if c.FinishReason != nil {
							finish = *c.FinishReason
						}
					}
				}
			case tt.path == "/v1/chat/completions":
				calls, content, finish = oaCalls(t, v)
				msg := asList(v["choices"])[0].(map[string]any)["message"].(map[string]any)
				think, _ = msg["reasoning_content"].(string)
			case tt.path == "/v1/messages":
				for _, b := range asList(v["content"]) {
					switch b := b.(map[string]any); b["type"] {
					case "thinking":
						think += b["thinking"].(string)
					case "text":
						content += b["text"].(string)
					}
				}
				finish, _ = v["stop_reason"].(string)
			default:
				msg, _ := v["message"].(map[string]any)
				content, _ = msg["content"].(string)
				think, _ = msg["thinking"].(string)
				finish, _ = v["done_reason"].(string)
			}
			t.Logf("finish %s, reasoning %q, content %q, calls %v", finish, think, content, calls)
			if tt.wantThink != (think != "") {
				t.Errorf("reasoning %q, want some: %v", think, tt.wantThink)
			}
			for _, s := range []string{think, content} {
				if strings.Contains(s, "<think>") || strings.Contains(s, "</think>") {
					t.Errorf("reasoning markers in %q", s)
				}
			}
			if tt.maxThink > 0 {
				// Each of the model's words is a token or more.
				if n := len(strings.Fields(think)); n > tt.maxThink {
					t.Errorf("reasoning %q has %d words, the budget %d tokens", think, n, tt.maxThink)
				}
			}
			if finish != "stop" && finish != "end_turn" && finish != "tool_calls" && !tt.object {
				t.Fatalf("finish %s", finish)
			}
			switch {
			case tt.call:
				if len(calls) == 0 || finish != "tool_calls" {
					t.Fatalf("no call: finish %s, content %q", finish, content)
				}
				for _, c := range calls {
					fn, _ := c["function"].(map[string]any)
					name, _ := fn["name"].(string)
					args, _ := fn["arguments"].(string)
					checkArgs(t, name, args)
				}
			case tt.object:
				// Free inside a string, the model does not find the
				// closing quote: the object begins, within the tokens.
				if !strings.HasPrefix(content, "{") {
					t.Errorf("content %q is not a JSON object", content)
				}
			default:
				checkReasonAnswer(t, content)
			}
		})
	}
}

// TestReasoningBeforeStructureOpenPrompt serves the chat model under a
// template whose generation prompt opens the reasoning block itself
// ("<think>\n", as Qwen 3.5's and DeepSeek R1's do): the reply begins
// inside reasoning, and the JSON schema holds only after its end marker.
func TestReasoningBeforeStructureOpenPrompt(t *testing.T) {
	src := fixtures.Dir(t, "chat-model")
	dir := t.TempDir()
	for _, name := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(src, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(src, "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	const closed = "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}"
	if !bytes.Contains(tmpl, []byte(closed)) {
		t.Fatal("the fixture's template no longer ends as this test expects")
	}
	tmpl = bytes.Replace(tmpl, []byte(closed), []byte("{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}"), 1)
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	em, err := engine.Open(dir, engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	_, ts := serveModels(t, Config{}, mustModel(t, "chat", em, ModelOptions{}))

	for _, tt := range []struct {
		name      string
		extra     string
		wantThink bool
	}{
		{"thinking", ``, true},
		{"thinking off", `"chat_template_kwargs":{"enable_thinking":false},`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":300,`+tt.extra+japan+
				`,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":`+reasonSchema+`}}}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			_, content, finish := oaCalls(t, v)
			msg := asList(v["choices"])[0].(map[string]any)["message"].(map[string]any)
			think, _ := msg["reasoning_content"].(string)
			t.Logf("finish %s, reasoning %q, content %q", finish, think, content)
			if (think != "") != tt.wantThink || strings.Contains(think, "{") || strings.Contains(content, "think>") || finish != "stop" {
				t.Errorf("finish %s, reasoning %q, content %q", finish, think, content)
			}
			checkReasonAnswer(t, content)
		})
	}
}

// TestHarmonyReasoningBeforeStructure asks a Harmony model for JSON with a
// thinking budget: the analysis channel, which the budget ends, comes back
// as the thinking block, and the JSON value, in the final channel, as the
// text. Without thinking the value comes at once.
func TestHarmonyReasoningBeforeStructure(t *testing.T) {
	_, ts := newHarmonyServer(t)
	const schema = `{"type":"object","properties":{"capital":{"enum":["Tokyo","Paris"]},"rank":{"type":"integer","minimum":1,"maximum":100}},"required":["capital","rank"],"additionalProperties":false}`
	const q = `"messages":[{"role":"user","content":"Capital of Japan, in JSON?"}]`
	const thinking = `"thinking":{"type":"enabled","budget_tokens":6},`
	for _, tt := range []struct {
		name, body string
		think      bool
	}{
		// With these random weights, greedy decoding takes the analysis
		// channel when it may.
		{"schema thinking", thinking + `"output_config":{"format":{"type":"json_schema","schema":` + schema + `}}`, true},
		{"schema", `"output_config":{"format":{"type":"json_schema","schema":` + schema + `}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"harmony","max_tokens":1000,"temperature":0,`+tt.body+`,`+q+`}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			var thought, text string
			for _, b := range asList(v["content"]) {
				switch b := b.(map[string]any); b["type"] {
				case "thinking":
					thought += b["thinking"].(string)
				case "text":
					text += b["text"].(string)
				default:
					t.Errorf("%s block: %s", b["type"], raw)
				}
			}
			t.Logf("stop %v, thinking %q, text %q", v["stop_reason"], thought, text)
			if tt.think != (thought != "") || strings.Contains(thought, "<|") || strings.Contains(text, "<|") || v["stop_reason"] != "end_turn" {
				t.Errorf("thinking %q: %s", thought, raw)
			}
			var a struct {
				Capital string
				Rank    *int
			}
			if err := strictUnmarshal(text, &a); err != nil || a.Rank == nil || *a.Rank < 1 || *a.Rank > 100 || a.Capital != "Tokyo" && a.Capital != "Paris" {
				t.Errorf("text %q: %v", text, err)
			}
		})
	}
}
