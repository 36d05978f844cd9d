package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/engine"
)

// anConvert decodes body and converts it as /v1/messages does.
func anConvert(body string) (*Request, int, error) {
	var a anRequest
	if err := decodeJSON([]byte(body), &a); err != nil {
		return nil, 0, err
	}
	return a.toRequest(engine.SampleParams{Temperature: 1}, false)
}

// describe writes messages compactly for comparison.
func describe(msgs []chat.Message) string {
	var parts []string
	for _, m := range msgs {
		s := m.Role + ":" + m.Content.Text()
		if m.ReasoningContent != "" {
			s += " think=" + m.ReasoningContent
		}
		for _, c := range m.ToolCalls {
			s += fmt.Sprintf(" call=%s/%s%s", c.ID, c.Name, c.Arguments)
		}
		if m.ToolCallID != "" {
			s += " id=" + m.ToolCallID + " name=" + m.Name
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

func TestAnthropicMessagesConversion(t *testing.T) {
	const user = `{"role":"user","content":"hi"}`
	tests := []struct {
		name string
		body string
		want string
	}{
		{"string content", `{"max_tokens":5,"messages":[` + user + `]}`, "user:hi"},
		{"system string", `{"max_tokens":5,"system":"be brief","messages":[` + user + `]}`, "system:be brief | user:hi"},
		{"system blocks", `{"max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],"messages":[` + user + `]}`,
			"system:a\nb | user:hi"},
		{"text blocks", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, "user:a\nb"},
		{"assistant blocks", `{"max_tokens":5,"messages":[` + user + `,{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"redacted_thinking","data":"zz"},{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"b":1,"a":2}}]}]}`,
			`user:hi | assistant:ok think=hmm call=toolu_1/f{"b":1,"a":2}`},
		{"tool results", `{"max_tokens":5,"messages":[` + user + `,{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"g"}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"one"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"two"}],"is_error":true},{"type":"text","text":"and?"}]}]}`,
			`user:hi | assistant: call=t1/f{} call=t2/g{} | tool:one id=t1 name=f | tool:Error: two id=t2 name=g | user:and?`},
		{"empty tool result", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`, "tool: id=t name="},
		{"system message", `{"max_tokens":5,"messages":[{"role":"system","content":"s"},` + user + `]}`, "system:s | user:hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, limit, err := anConvert(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(req.Messages); got != tt.want {
				t.Errorf("messages\n%s\nwant\n%s", got, tt.want)
			}
			if limit != 5 || req.MaxTokens != 5 || !req.MaxTokensSet {
				t.Errorf("limit %d max tokens %d", limit, req.MaxTokens)
			}
		})
	}
}

func TestAnthropicOptionsConversion(t *testing.T) {
	const base = `"max_tokens":100,"messages":[{"role":"user","content":"hi"}]`
	req, _, err := anConvert(`{` + base + `,"temperature":0.5,"top_p":0.9,"top_k":7,"stop_sequences":["x","yz"],"metadata":{"user_id":"u"},` +
		`"tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"z":{},"a":{}}}},{"type":"custom","name":"noargs"}],` +
		`"tool_choice":{"type":"tool","name":"get_weather"},"thinking":{"type":"enabled","budget_tokens":50},"service_tier":"auto"}`)
	if err != nil {
		t.Fatal(err)
	}
	s := req.Sample
	if s.Temperature != 0.5 || s.TopP != 0.9 || s.TopK != 7 || strings.Join(req.Stop, ",") != "x,yz" {
		t.Errorf("sampling %+v stop %q", s, req.Stop)
	}
	wantTools := []string{
		`{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}`,
		`{"type":"function","function":{"name":"noargs","parameters":{"type":"object","properties":{}}}}`,
	}
	for i, w := range wantTools {
		if string(req.Tools[i]) != w || toolName(req.Tools[i]) == "" {
			t.Errorf("tool %d: %s", i, req.Tools[i])
		}
	}
	if req.ToolChoice != (ToolChoice{Mode: ToolNamed, Name: "get_weather"}) || req.Kwargs["enable_thinking"] != true {
		t.Errorf("tool choice %+v kwargs %v", req.ToolChoice, req.Kwargs)
	}

	for _, tt := range []struct {
		extra string
		mode  ToolMode
		think bool
		json  bool
	}{
		{``, ToolAuto, false, false},
		{`,"tool_choice":{"type":"auto"},"thinking":{"type":"disabled"}`, ToolAuto, false, false},
		{`,"tool_choice":{"type":"any","disable_parallel_tool_use":true},"thinking":{"type":"adaptive"}`, ToolRequired, true, false},
		{`,"tool_choice":{"type":"none"},"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}`, ToolNone, false, true},
	} {
		req, _, err := anConvert(`{` + base + tt.extra + `}`)
		if err != nil {
			t.Fatalf("%s: %v", tt.extra, err)
		}
		if req.ToolChoice.Mode != tt.mode || req.Kwargs["enable_thinking"] != tt.think || (req.Schema != nil) != tt.json {
			t.Errorf("%s: choice %+v kwargs %v schema %v", tt.extra, req.ToolChoice, req.Kwargs, req.Schema != nil)
		}
	}
}

func TestAnthropicRequestErrors(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		body  string
		param string
	}{
		{`{` + msgs + `}`, "max_tokens"},
		{`{"max_tokens":"ten",` + msgs + `}`, "max_tokens"},
		{`{"max_tokens":5,"messages":[]}`, "messages"},
		{`{"max_tokens":5}`, "messages"},
		{`{"max_tokens":5,"messages":[{"content":"hi"}]}`, "messages[0].role"},
		{`{"max_tokens":5,"messages":[{"role":"tool","content":"hi"}]}`, "messages[0].role"},
		{`{"max_tokens":5,"messages":[{"role":"user"}]}`, "messages[0].content"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":7}]}`, "messages[0].content"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages[0].content[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"text":"no type"}]}]}`, "messages[0].content[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","name":"f"}]}]}`, "messages[0].content[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`, "messages[0].content[0].type"},
		{`{"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"x","input":{}}]}]}`, "messages[0].content[0].name"},
		{`{"max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"x","name":"f","input":[1]}]}]}`, "messages[0].content[0].input"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages[0].content[0].tool_use_id"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]}`, "messages[0].content[0].content[0].type"},
		{`{"max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "system[0].type"},
		{`{"max_tokens":5,"system":5,` + msgs + `}`, "system"},
		{`{"max_tokens":5,` + msgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "tools[0].type"},
		{`{"max_tokens":5,` + msgs + `,"tools":[{"input_schema":{}}]}`, "tools[0].name"},
		{`{"max_tokens":5,` + msgs + `,"tools":[{"name":"f","input_schema":"x"}]}`, "tools[0].input_schema"},
		{`{"max_tokens":5,` + msgs + `,"tools":[7]}`, "tools[0]"},
		{`{"max_tokens":5,` + msgs + `,"tool_choice":{"type":"sometimes"}}`, "tool_choice.type"},
		{`{"max_tokens":5,` + msgs + `,"tool_choice":{"type":"tool"}}`, "tool_choice.name"},
		{`{"max_tokens":5,` + msgs + `,"tool_choice":"auto"}`, "tool_choice"},
		{`{"max_tokens":5,` + msgs + `,"thinking":{"type":"enabled"}}`, "thinking.budget_tokens"},
		{`{"max_tokens":5,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":0}}`, "thinking.budget_tokens"},
		{`{"max_tokens":5,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":5}}`, "thinking.budget_tokens"},
		{`{"max_tokens":5,` + msgs + `,"thinking":{"type":"on"}}`, "thinking.type"},
		{`{"max_tokens":5,` + msgs + `,"thinking":true}`, "thinking"},
		{`{"max_tokens":5,` + msgs + `,"output_config":{"format":{"type":"xml"}}}`, "output_config.format"},
		{`{"max_tokens":5,` + msgs + `,"output_config":{"format":{"type":"json_schema"}}}`, "output_config.format.schema"},
		{`{"max_tokens":5,` + msgs + `,"output_config":{"format":{"type":"json_schema","schema":{"type":"array","minItems":3,"maxItems":1}}}}`, "output_config.format.schema.minItems"},
		{`{"max_tokens":5,` + msgs + `,"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"n":{"type":"number","minimum":4,"maximum":3}}}}}}`, "output_config.format.schema.properties.n.minimum"},
	}
	for _, tt := range tests {
		_, _, err := anConvert(tt.body)
		e, ok := err.(*Error)
		if !ok || e.Status != 400 || e.Param != tt.param || e.Message == "" {
			t.Errorf("%s: err %v, want a 400 naming %q", tt.body, err, tt.param)
		}
	}
}

func TestAnthropicHTTPErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxBodyBytes: 4096})
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		typ    string
	}{
		{"malformed JSON", "/v1/messages", `{"model":"chat",`, 400, "invalid_request_error"},
		{"empty body", "/v1/messages", ``, 400, "invalid_request_error"},
		{"no max_tokens", "/v1/messages", `{"model":"chat",` + japan + `}`, 400, "invalid_request_error"},
		{"no model", "/v1/messages", `{"max_tokens":5,` + japan + `}`, 400, "invalid_request_error"},
		{"too large", "/v1/messages", `{"model":"chat","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large"},
		{"prompt over the context", "/v1/messages", `{"model":"chat","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x ", 2000) + `"}]}`, 400, "invalid_request_error"},
		{"template refuses", "/v1/messages", `{"model":"chat","max_tokens":5,"tool_choice":{"type":"any"},` + japan + `}`, 400, "invalid_request_error"},
		{"count malformed", "/v1/messages/count_tokens", `[]`, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, raw)
			}
			e, _ := v["error"].(map[string]any)
			if v["type"] != "error" || e == nil || e["type"] != tt.typ || e["message"] == "" || v["request_id"] == "" {
				t.Errorf("body %s, want an Anthropic error of type %s", raw, tt.typ)
			}
		})
	}

	// The key, as Anthropic clients send it.
	_, ts = newTestServer(t, Config{APIKey: "k"})
	code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"chat","max_tokens":5,`+japan+`}`, "x-api-key", "wrong")
	if e, _ := v["error"].(map[string]any); code != 401 || e == nil || e["type"] != "authentication_error" {
		t.Errorf("wrong key: %d %s", code, raw)
	}
	if code, _, raw := post(t, ts.URL+"/v1/messages", `{"model":"chat","max_tokens":5,`+japan+`}`, "x-api-key", "k"); code != 200 {
		t.Errorf("right key: %d %s", code, raw)
	}
}

func TestAnthropicErrorTypes(t *testing.T) {
	for status, want := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
		500: "api_error", 503: "overloaded_error", 529: "overloaded_error"} {
		if got := anErrorType(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}

func TestAnthropicResponse(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	code, v, raw := post(t, ts.URL+"/v1/messages", `{"model":"chat","max_tokens":100,"temperature":0,"thinking":{"type":"enabled","budget_tokens":50},`+japan+`}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	content, _ := v["content"].([]any)
	if len(content) != 2 {
		t.Fatalf("content %s", raw)
	}
	th, _ := content[0].(map[string]any)
	tx, _ := content[1].(map[string]any)
	if th["type"] != "thinking" || th["thinking"] != "The user asks for the capital of Japan. It is Tokyo." || th["signature"] == "" {
		t.Errorf("thinking block %v", th)
	}
	if tx["type"] != "text" || tx["text"] != "The capital of Japan is Tokyo." {
		t.Errorf("text block %v", tx)
	}
	u, _ := v["usage"].(map[string]any)
	if v["stop_reason"] != "end_turn" || v["stop_sequence"] != nil || u["output_tokens"] == 0.0 || u["cache_read_input_tokens"] == nil {
		t.Errorf("response %s", raw)
	}
	if !strings.Contains(raw, `"stop_sequence":null`) {
		t.Errorf("stop_sequence left out: %s", raw)
	}

	code, v, raw = post(t, ts.URL+"/v1/messages/count_tokens", `{"model":"chat",`+japan+`}`)
	if n, _ := v["input_tokens"].(float64); code != 200 || n < 10 || len(v) != 1 {
		t.Errorf("count_tokens %d %s", code, raw)
	}
}

// anEvents reads an SSE stream into (event, data) pairs, checking that
// each data is a JSON object whose type names its event.
func anEvents(t *testing.T, resp *http.Response) [][2]string {
	t.Helper()
	var out [][2]string
	sc := bufio.NewScanner(resp.Body)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data := line[len("data: "):]
			var v struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(data), &v); err != nil || v.Type != event {
				t.Fatalf("event %q with data %s", event, data)
			}
			out = append(out, [2]string{event, data})
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	return out
}

// checkEventOrder checks the grammar of a message stream: message_start,
// then blocks (start, deltas of the block's kind, stop) with indices
// 0, 1, …, then message_delta and message_stop; pings anywhere.
func checkEventOrder(t *testing.T, evs [][2]string) (kinds []string) {
	t.Helper()
	if len(evs) < 3 || evs[0][0] != "message_start" || evs[len(evs)-1][0] != "message_stop" || evs[len(evs)-2][0] != "message_delta" {
		t.Fatalf("stream does not open and close as a message: %v", evs)
	}
	open, next, sig := "", 0, false
	for _, ev := range evs[1 : len(evs)-2] {
		var v struct {
			Index        int `json:"index"`
			ContentBlock struct {
				Type string `json:"type"`
			} `json:"content_block"`
			Delta struct {
				Type string `json:"type"`
			} `json:"delta"`
		}
		json.Unmarshal([]byte(ev[1]), &v)
		switch ev[0] {
		case "ping":
		case "content_block_start":
			if open != "" || v.Index != next {
				t.Fatalf("block %d starts while %q is open (next %d)", v.Index, open, next)
			}
			open, sig = v.ContentBlock.Type, false
			kinds = append(kinds, open)
		case "content_block_delta":
			want := map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}[open]
			switch {
			case v.Index != next:
				t.Fatalf("delta for block %d, open is %d", v.Index, next)
			case v.Delta.Type == "signature_delta" && open == "thinking":
				sig = true
			case v.Delta.Type != want || sig:
				t.Fatalf("delta %s in a %s block (signed %v)", v.Delta.Type, open, sig)
			}
		case "content_block_stop":
			if open == "" || v.Index != next || open == "thinking" && !sig {
				t.Fatalf("stop of block %d (open %q, signed %v)", v.Index, open, sig)
			}
			open = ""
			next++
		default:
			t.Fatalf("unexpected event %s", ev[0])
		}
	}
	if open != "" {
		t.Fatalf("block %q left open", open)
	}
	return kinds
}

func TestAnthropicStreamEvents(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	tests := []struct {
		name  string
		body  string
		kinds string
		stop  string
	}{
		{"text", `{"model":"chat","max_tokens":100,"temperature":0,"stream":true,` + japan + `}`, "text", "end_turn"},
		{"thinking", `{"model":"chat","max_tokens":100,"temperature":0,"stream":true,"thinking":{"type":"enabled","budget_tokens":60},` + japan + `}`, "thinking text", "end_turn"},
		{"tool use", `{"model":"chat","max_tokens":100,"temperature":0,"stream":true,"thinking":{"type":"enabled","budget_tokens":60},` + tools +
			`,"messages":[{"role":"user","content":"What's the weather in Paris?"}]}`, "thinking tool_use", "tool_use"},
		{"max tokens", `{"model":"chat","max_tokens":2,"temperature":0,"stream":true,` + japan + `}`, "text", "max_tokens"},
		{"stop sequence", `{"model":"chat","max_tokens":100,"temperature":0,"stream":true,"stop_sequences":["Japan"],` + japan + `}`, "text", "stop_sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(ts.URL+"/v1/messages", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
				t.Fatalf("%d %s", resp.StatusCode, ct)
			}
			evs := anEvents(t, resp)
			if kinds := strings.Join(checkEventOrder(t, evs), " "); kinds != tt.kinds {
				t.Errorf("blocks %q, want %q", kinds, tt.kinds)
			}
			var delta struct {
				Delta struct {
					StopReason   string  `json:"stop_reason"`
					StopSequence *string `json:"stop_sequence"`
				} `json:"delta"`
				Usage anUsage `json:"usage"`
			}
			json.Unmarshal([]byte(evs[len(evs)-2][1]), &delta)
			if delta.Delta.StopReason != tt.stop || delta.Usage.OutputTokens == 0 || delta.Usage.InputTokens+delta.Usage.CacheReadInputTokens == 0 {
				t.Errorf("message_delta %s", evs[len(evs)-2][1])
			}
			if (tt.stop == "stop_sequence") != (delta.Delta.StopSequence != nil) {
				t.Errorf("stop_sequence in %s", evs[len(evs)-2][1])
			}
		})
	}
}

func TestAnthropicFrameAllocs(t *testing.T) {
	enc := anEncoder{buf: make([]byte, 0, 512)}
	for name, f := range map[string]func(){
		"text":     func() { enc.delta(1, "text_delta", "text", " Tokyo") },
		"thinking": func() { enc.delta(0, "thinking_delta", "thinking", " \"quoted\"\n") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per frame", name, n)
		}
	}
	frame := string(enc.delta(12, "text_delta", "text", "a\"b\\c\n\x01é\u2028"))
	event, data, ok := strings.Cut(frame, "\ndata: ")
	var v struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
	}
	if !ok || event != "event: content_block_delta" || !strings.HasSuffix(data, "}\n\n") || json.Unmarshal([]byte(data), &v) != nil ||
		v.Type != "content_block_delta" || v.Index != 12 || v.Delta.Type != "text_delta" || v.Delta.Text != "a\"b\\c\n\x01é\u2028" {
		t.Errorf("bad frame %q", frame)
	}
}

// BenchmarkAnthropicFrame measures the encoding of one per-token event.
func BenchmarkAnthropicFrame(b *testing.B) {
	enc := anEncoder{buf: make([]byte, 0, 512)}
	b.ReportAllocs()
	for b.Loop() {
		enc.delta(1, "text_delta", "text", " Tokyo")
	}
}
