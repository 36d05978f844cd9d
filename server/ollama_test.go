package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/engine"
)

func TestOllamaOptions(t *testing.T) {
	tests := []struct {
		opts  string
		limit int
		check func(*Request) bool
	}{
		{`{}`, 0, func(r *Request) bool { return r.Sample.Temperature == 1 && !r.Sample.HasSeed }},
		{`{"num_predict":12,"temperature":0.2,"top_k":5,"top_p":0.8,"min_p":0.1,"repeat_penalty":1.2,"presence_penalty":0.5,"frequency_penalty":0.25,"seed":9,"repeat_last_n":32}`, 12,
			func(r *Request) bool {
				s := r.Sample
				return s.Temperature == 0.2 && s.TopK == 5 && s.TopP == 0.8 && s.MinP == 0.1 && s.RepetitionPenalty == 1.2 &&
					s.PresencePenalty == 0.5 && s.FrequencyPenalty == 0.25 && s.Seed == 9 && s.HasSeed && s.PenaltyWindow == 32
			}},
		{`{"num_predict":-1,"seed":-1,"top_k":-1}`, 0, func(r *Request) bool { return !r.Sample.HasSeed && r.Sample.TopK == -1 }},
		{`{"num_predict":-2,"num_predict_x":"ignored","num_ctx":8192,"num_gpu":99,"mirostat":2,"temperature":null}`, 0,
			func(r *Request) bool { return r.Sample.Temperature == 1 }},
		{`{"num_predict":40.0}`, 40, func(r *Request) bool { return true }},
		{`{"repeat_penalty":1.3,"presence_penalty":1,"repeat_last_n":0}`, 0, func(r *Request) bool {
			return r.Sample.RepetitionPenalty == 0 && r.Sample.PresencePenalty == 0
		}},
		{`{"repeat_last_n":-1}`, 0, func(r *Request) bool { return r.Sample.PenaltyWindow == 0 }},
		{`{"stop":["a","bc"]}`, 0, func(r *Request) bool { return strings.Join(r.Stop, ",") == "a,bc" }},
		{`{"stop":"a"}`, 0, func(r *Request) bool { return strings.Join(r.Stop, ",") == "a" }},
	}
	for _, tt := range tests {
		var opts map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tt.opts), &opts); err != nil {
			t.Fatal(err)
		}
		req := &Request{Sample: engine.SampleParams{Temperature: 1}}
		limit, err := olOptions(opts, req)
		if err != nil || limit != tt.limit || !tt.check(req) {
			t.Errorf("%s: limit %d (%v), request %+v", tt.opts, limit, err, req.Sample)
		}
	}
	for _, tt := range []struct{ opts, param string }{
		{`{"temperature":"hot"}`, "options.temperature"},
		{`{"num_predict":1.5}`, "options.num_predict"},
		{`{"top_k":"5"}`, "options.top_k"},
		{`{"seed":true}`, "options.seed"},
		{`{"stop":5}`, "options.stop"},
		{`{"repeat_last_n":[]}`, "options.repeat_last_n"},
	} {
		var opts map[string]json.RawMessage
		json.Unmarshal([]byte(tt.opts), &opts)
		_, err := olOptions(opts, &Request{})
		if e, ok := err.(*Error); !ok || e.Status != 400 || e.Param != tt.param {
			t.Errorf("%s: %v, want a 400 naming %s", tt.opts, err, tt.param)
		}
	}
}

func TestOllamaThinkAndFormat(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want string // enable_thinking/effort, or "err"
	}{
		{``, "<nil>"}, {`null`, "<nil>"}, {`true`, "true/"}, {`false`, "false/"}, {`"high"`, "true/high"}, {`"low"`, "true/low"},
		{`"max"`, "err"}, {`1`, "err"}, {`{}`, "err"},
	} {
		kw, err := olThink(json.RawMessage(tt.raw))
		got := "err"
		if err == nil {
			got = "<nil>"
			if kw != nil {
				effort, _ := kw["reasoning_effort"].(string)
				got = map[bool]string{true: "true/", false: "false/"}[kw["enable_thinking"].(bool)] + effort
			}
		}
		if got != tt.want {
			t.Errorf("think %s: %s, want %s", tt.raw, got, tt.want)
		}
	}
	for _, tt := range []struct {
		raw  string
		want string // "none", "json", "schema" or "err"
	}{
		{``, "none"}, {`null`, "none"}, {`""`, "none"}, {`"json"`, "json"}, {`{"type":"object","properties":{}}`, "schema"}, {`{}`, "schema"},
		{`{"type":"array","items":{"type":"integer"}}`, "schema"},
		{`{"type":"string","pattern":"a","format":"hostname"}`, "schema"},
		{`"xml"`, "err"}, {`{"type":"object","properties":{},"required":["a"]}`, "err"}, {`[1]`, "err"}, {`7`, "err"}, {`{"type":`, "err"},
	} {
		on, schema, err := olFormat(json.RawMessage(tt.raw))
		got := "none"
		switch {
		case err != nil:
			got = "err"
			if e, ok := err.(*Error); !ok || !strings.HasPrefix(e.Param, "format") {
				t.Errorf("format %s: %v", tt.raw, err)
			}
		case on:
			got = "json"
		case schema != nil:
			got = "schema"
		}
		if got != tt.want {
			t.Errorf("format %s: %s, want %s", tt.raw, got, tt.want)
		}
	}
}

func TestOllamaModelNames(t *testing.T) {
	s, _ := newTestModel(t, Config{})
	// With one model served, every name is that model (TestModelNames
	// checks the 404 of a server of two).
	for name, ok := range map[string]bool{"chat": true, "chat:latest": true, "": true, " chat ": true, "chat:7b": true, "llama3": true, "llama3:latest": true} {
		m, err := s.ollamaModel(name)
		if ok != (err == nil) || ok && m.ID() != "chat" {
			t.Errorf("%q: %v", name, err)
		}
		if !ok {
			if e := AsError(err); e.Status != 404 || !strings.Contains(e.Message, "not found") {
				t.Errorf("%q: %v", name, err)
			}
		}
	}
	for id, want := range map[string]string{"chat": "chat:latest", "qwen3:8b": "qwen3:8b"} {
		if got := ollamaName(id); got != want {
			t.Errorf("ollamaName(%q) = %q", id, got)
		}
	}
	for n, want := range map[int64]string{7_615_616_512: "7.6B", 494_032_768: "494.0M", 4_996_608: "5.0M", 12_345: "12.3K", 999: "999"} {
		if got := humanCount(n); got != want {
			t.Errorf("humanCount(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestOllamaHTTPErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxBodyBytes: 4096})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		want   string
	}{
		{"malformed JSON", "/api/chat", `{"model":"chat",`, 400, "malformed JSON"},
		{"not an object", "/api/generate", `[1]`, 400, "JSON object"},
		{"wrong type", "/api/chat", `{"model":"chat","messages":"hi"}`, 400, "messages"},
		{"shared field type", "/api/chat", `{"model":"chat","stream":"yes",` + msgs + `}`, 400, "stream: wrong type"},
		{"generate field type", "/api/generate", `{"model":"chat","raw":1,"prompt":"hi"}`, 400, "raw: wrong type"},
		{"too large", "/api/chat", `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "larger than"},
		{"prompt over the context", "/api/chat", `{"model":"chat","messages":[{"role":"user","content":"` + strings.Repeat("x ", 2000) + `"}]}`, 400, "context"},
		{"images", "/api/chat", `{"model":"chat","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, 400, "messages[0].images"},
		{"no role", "/api/chat", `{"model":"chat","messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"tool call without a name", "/api/chat", `{"model":"chat","messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":{}}}]}]}`, 400, "function.name"},
		{"tool call arguments", "/api/chat", `{"model":"chat","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]}`, 400, "function.arguments"},
		{"bad tool", "/api/chat", `{"model":"chat",` + msgs + `,"tools":[{"type":"function"}]}`, 400, "tools[0]"},
		{"bad option", "/api/chat", `{"model":"chat",` + msgs + `,"options":{"top_p":"high"}}`, 400, "options.top_p"},
		{"bad think", "/api/chat", `{"model":"chat",` + msgs + `,"think":"max"}`, 400, "think"},
		{"schema shape", "/api/chat", `{"model":"chat",` + msgs + `,"format":{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":2}}}}`, 400, `format.properties.a.minimum: schema keyword "minimum" at /properties/a`},
		{"bad format", "/api/chat", `{"model":"chat",` + msgs + `,"format":"xml"}`, 400, "format"},
		{"top_logprobs", "/api/chat", `{"model":"chat",` + msgs + `,"top_logprobs":99}`, 400, "top_logprobs"},
		{"generate images", "/api/generate", `{"model":"chat","prompt":"hi","images":["aGk="]}`, 400, "images"},
		{"generate template", "/api/generate", `{"model":"chat","prompt":"hi","template":"{{ .Prompt }}"}`, 400, "template"},
		{"generate context", "/api/generate", `{"model":"chat","prompt":"hi","context":[1,2,3]}`, 400, "context"},
		{"show without a model", "/api/show", `{}`, 400, "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, raw)
			}
			msg, _ := v["error"].(string)
			if len(v) != 1 || !strings.Contains(msg, tt.want) {
				t.Errorf("body %s, want {\"error\": …%s…}", raw, tt.want)
			}
		})
	}
	// A wrong key: 401 in Ollama's shape.
	_, ts = newTestServer(t, Config{APIKey: "k"})
	code, v, raw := post(t, ts.URL+"/api/chat", `{"model":"chat",`+msgs+`}`, "Authorization", "Bearer nope")
	if _, ok := v["error"].(string); code != 401 || !ok {
		t.Errorf("wrong key: %d %s", code, raw)
	}
}

// olLines reads an NDJSON body, checking each line is a JSON object.
func olLines(t *testing.T, resp *http.Response) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

func TestOllamaStreamShape(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tests := []struct {
		name, path, body string
		text, thinking   string
		field            string // "message" (chat) or "response" (generate)
		reason           string
	}{
		{"chat", "/api/chat", `{"model":"chat",` + japan + `,"options":{"temperature":0}}`,
			"The capital of Japan is Tokyo.", "The user asks for the capital of Japan. It is Tokyo.", "message", "stop"},
		{"chat no thinking", "/api/chat", `{"model":"chat:latest",` + japan + `,"think":false,"options":{"temperature":0,"num_predict":3}}`,
			"The capital of", "", "message", "length"},
		{"generate", "/api/generate", `{"model":"chat","prompt":"What is the capital of Japan?","think":true,"options":{"temperature":0}}`,
			"The capital of Japan is Tokyo.", "The user asks for the capital of Japan. It is Tokyo.", "response", "stop"},
		{"generate raw", "/api/generate", `{"model":"chat","raw":true,"prompt":"<|im_start|>user\nWhat is the capital of Japan?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n","options":{"temperature":0,"stop":["Japan"]}}`,
			"The capital of ", "", "response", "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(ts.URL+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
				t.Fatalf("%d %s", resp.StatusCode, ct)
			}
			lines := olLines(t, resp)
			var text, thinking strings.Builder
			for i, l := range lines {
				if _, err := time.Parse(time.RFC3339Nano, l["created_at"].(string)); err != nil || l["model"] == "" {
					t.Fatalf("line %d: %v", i, l)
				}
				if done := l["done"].(bool); done != (i == len(lines)-1) {
					t.Fatalf("line %d of %d: done %v", i, len(lines), done)
				}
				if tt.field == "message" {
					msg := l["message"].(map[string]any)
					if msg["role"] != "assistant" {
						t.Fatalf("line %d: %v", i, l)
					}
					text.WriteString(msg["content"].(string))
					th, _ := msg["thinking"].(string)
					thinking.WriteString(th)
				} else {
					text.WriteString(l["response"].(string))
					th, _ := l["thinking"].(string)
					thinking.WriteString(th)
				}
			}
			if text.String() != tt.text || thinking.String() != tt.thinking {
				t.Errorf("text %q thinking %q", text.String(), thinking.String())
			}
			last := lines[len(lines)-1]
			if last["done_reason"] != tt.reason {
				t.Errorf("done_reason %v", last["done_reason"])
			}
			for _, k := range []string{"total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"} {
				if n, ok := last[k].(float64); !ok || n < 0 || n != float64(int64(n)) || k != "load_duration" && n == 0 {
					t.Errorf("%s = %v", k, last[k])
				}
			}
		})
	}
}

func TestOllamaLogprobsAndTools(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	code, v, raw := post(t, ts.URL+"/api/chat", `{"model":"chat","stream":false,"think":false,`+japan+`,"logprobs":true,"top_logprobs":2,"options":{"temperature":0}}`)
	lps, _ := v["logprobs"].([]any)
	if code != 200 || len(lps) == 0 {
		t.Fatalf("%d %s", code, raw)
	}
	first := lps[0].(map[string]any)
	if tops, _ := first["top_logprobs"].([]any); first["token"] == "" || len(tops) != 2 || first["logprob"].(float64) > 0 {
		t.Errorf("logprob %v", first)
	}

	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(`{"model":"chat","think":false,"options":{"temperature":0},`+tools+
		`,"messages":[{"role":"user","content":"What's the weather in Paris?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls []any
	for _, l := range olLines(t, resp) {
		if c, ok := l["message"].(map[string]any)["tool_calls"].([]any); ok {
			calls = append(calls, c...)
		}
	}
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	fn := calls[0].(map[string]any)["function"].(map[string]any)
	if args, _ := fn["arguments"].(map[string]any); fn["name"] != "get_weather" || args["city"] != "Paris" || fn["index"] != 0.0 {
		t.Errorf("call %v", calls[0])
	}
}

func TestOllamaModelRoutes(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	code, v := get("/api/tags")
	models, _ := v["models"].([]any)
	if code != 200 || len(models) != 1 {
		t.Fatalf("tags %d %v", code, v)
	}
	m := models[0].(map[string]any)
	d := m["details"].(map[string]any)
	if m["name"] != "chat:latest" || m["size"].(float64) < 1e6 || len(m["digest"].(string)) != 64 || d["family"] != "qwen3" || d["parameter_size"] != "5.0M" {
		t.Errorf("tag %v", m)
	}
	code, v = get("/api/ps")
	if models, _ := v["models"].([]any); code != 200 || len(models) != 1 || models[0].(map[string]any)["context_length"] != 2048.0 {
		t.Errorf("ps %d %v", code, v)
	}
	if code, v = get("/api/version"); code != 200 || v["version"] == "" {
		t.Errorf("version %d %v", code, v)
	}
	code, v, raw := post(t, ts.URL+"/api/show", `{"model":"chat:latest"}`)
	info, _ := v["model_info"].(map[string]any)
	if code != 200 || info["general.architecture"] != "qwen3" || info["qwen3.context_length"] != 2048.0 || v["template"] == "" {
		t.Errorf("show %d %s", code, raw)
	}
	for _, method := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(method, ts.URL+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s /: %d", method, resp.StatusCode)
		}
	}
	// Loading and unloading.
	for body, reason := range map[string]string{`{"model":"chat"}`: "load", `{"model":"chat","keep_alive":0}`: "unload", `{"model":"chat","keep_alive":"0s"}`: "unload"} {
		for _, path := range []string{"/api/chat", "/api/generate"} {
			if code, v, raw := post(t, ts.URL+path, body); code != 200 || v["done_reason"] != reason || v["done"] != true {
				t.Errorf("%s %s: %d %s", path, body, code, raw)
			}
		}
	}
}

func TestOllamaFrameAllocs(t *testing.T) {
	chat, gen := newOlEncoder("qwen3:8b", true), newOlEncoder("qwen3:8b", false)
	for name, f := range map[string]func(){
		"chat content":      func() { chat.text(false, " Tokyo", nil) },
		"chat thinking":     func() { chat.text(true, " \"quoted\"\n", nil) },
		"generate response": func() { gen.text(false, " Tokyo", nil) },
		"generate thinking": func() { gen.text(true, "é", nil) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per frame", name, n)
		}
	}
	for _, tt := range []struct {
		enc           *olEncoder
		thinking      bool
		field, nested string
	}{{chat, false, "content", "message"}, {chat, true, "thinking", "message"}, {gen, false, "response", ""}, {gen, true, "thinking", ""}} {
		frame := tt.enc.text(tt.thinking, "a\"b\\c\n\x01é", nil)
		var v map[string]any
		if frame[len(frame)-1] != '\n' || json.Unmarshal(frame, &v) != nil || v["done"] != false || v["model"] != "qwen3:8b" {
			t.Fatalf("bad frame %q", frame)
		}
		if tt.nested != "" {
			v = v[tt.nested].(map[string]any)
		}
		if v[tt.field] != "a\"b\\c\n\x01é" {
			t.Errorf("frame %q lacks %s", frame, tt.field)
		}
	}
}

// BenchmarkOllamaFrame measures the encoding of one per-token chunk.
func BenchmarkOllamaFrame(b *testing.B) {
	for _, chat := range []bool{true, false} {
		name := map[bool]string{true: "chat", false: "generate"}[chat]
		enc := newOlEncoder("qwen3:8b", chat)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				enc.text(false, " Tokyo", nil)
			}
		})
	}
}
