package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// newContextServer serves the chat model as "chat" with a context of ctx
// tokens on a loopback port.
func newContextServer(t *testing.T, ctx int) *httptest.Server {
	t.Helper()
	_, ts := serveModels(t, Config{}, mustModel(t, "chat", openChatModel(t), ModelOptions{Context: ctx}))
	return ts
}

// longHistory is a system message and turns user/assistant turns of about
// 30 tokens each, then a last user question.
func longHistory(turns int) []map[string]string {
	msgs := []map[string]string{{"role": "system", "content": "You are terse."}}
	for i := range turns {
		msgs = append(msgs,
			map[string]string{"role": "user", "content": fmt.Sprintf("question %d: %s", i, strings.Repeat("tell me more about it ", 5))},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("answer %d: %s", i, strings.Repeat("here is more about it ", 5))})
	}
	return append(msgs, map[string]string{"role": "user", "content": "and now?"})
}

func olChatBody(msgs []map[string]string, extra string) string {
	data, _ := json.Marshal(msgs)
	return `{"model":"chat","stream":false,"messages":` + string(data) + extra + `}`
}

func TestOllamaTruncate(t *testing.T) {
	const ctx = 256
	ts := newContextServer(t, ctx)
	msgs := longHistory(12)
	opts := `,"options":{"temperature":0,"num_predict":8}`

	// The whole history is over the context: OpenAI's dialect refuses it,
	// and so does Ollama's with truncate false.
	code, v, raw := post(t, ts.URL+"/v1/chat/completions", `{"model":"chat","max_tokens":8,"messages":`+mustJSON(msgs)+`}`)
	if e, _ := v["error"].(map[string]any); code != 400 || e["code"] != CodeContextExceeded {
		t.Fatalf("openai: %d %s, want a 400 %s", code, raw, CodeContextExceeded)
	}
	code, v, raw = post(t, ts.URL+"/api/chat", olChatBody(msgs, opts+`,"truncate":false`))
	if msg, _ := v["error"].(string); code != 400 || !strings.Contains(msg, "context") {
		t.Fatalf("truncate false: %d %s, want a 400 about the context", code, raw)
	}

	// By default the oldest turns go, and the reply says how many.
	code, v, raw = post(t, ts.URL+"/api/chat", olChatBody(msgs, opts))
	if code != 200 {
		t.Fatalf("truncated: %d %s", code, raw)
	}
	dropped, _ := v["truncated_messages"].(float64)
	n, _ := v["prompt_eval_count"].(float64)
	if dropped <= 0 || int(dropped)%2 != 0 || n+8 > ctx || n < ctx/2 {
		t.Fatalf("truncated: dropped %v messages, prompt %v tokens, want whole turns and room for 8 of %d: %s", dropped, n, ctx, raw)
	}
	// What was kept is the system message and the newest turns: sent
	// alone, it is the same prompt, and it fits without dropping.
	kept := append([]map[string]string{msgs[0]}, msgs[1+int(dropped):]...)
	code, v2, raw := post(t, ts.URL+"/api/chat", olChatBody(kept, opts+`,"truncate":false`))
	if code != 200 || v2["prompt_eval_count"] != n || v2["truncated_messages"] != nil {
		t.Errorf("kept history: %d %s, want a prompt of %v tokens", code, raw, n)
	}
	// Keeping one turn more would not have left the room.
	more := append([]map[string]string{msgs[0]}, msgs[int(dropped)-1:]...)
	if code, v3, raw := post(t, ts.URL+"/api/chat", olChatBody(more, opts+`,"truncate":false`)); code == 200 && v3["prompt_eval_count"].(float64)+8 <= ctx {
		t.Errorf("one turn more fits too (%s): the truncation dropped more than it needed", raw)
	}

	// Streamed: the last chunk says it.
	resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(strings.Replace(olChatBody(msgs, opts), `"stream":false`, `"stream":true`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	lines := olLines(t, resp)
	resp.Body.Close()
	if last := lines[len(lines)-1]; last["done"] != true || last["truncated_messages"] != dropped {
		t.Errorf("streamed: last chunk %v, want truncated_messages %v", last, dropped)
	}

	// A last message too long for the context on its own is still a 400.
	huge := []map[string]string{msgs[0], msgs[1], msgs[2], {"role": "user", "content": strings.Repeat("x ", 400)}}
	if code, v, raw := post(t, ts.URL+"/api/chat", olChatBody(huge, opts)); code != 400 || !strings.Contains(fmt.Sprint(v["error"]), "context") {
		t.Errorf("huge last message: %d %s, want a 400", code, raw)
	}
}

func TestOllamaNumCtx(t *testing.T) {
	_, ts := newTestServer(t, Config{}) // a context of 2048
	prompt := `"prompt":"` + strings.Repeat("tell me more about it ", 10) + `"`
	tests := []struct {
		name    string
		body    string
		status  int
		wantCtx int // prompt plus output at most this, when status is 200
	}{
		{"num_ctx bounds prompt and output", `{"model":"chat","stream":false,` + prompt + `,"options":{"temperature":0,"num_ctx":120}}`, 200, 120},
		{"num_predict within num_ctx", `{"model":"chat","stream":false,` + prompt + `,"options":{"temperature":0,"num_ctx":120,"num_predict":500}}`, 200, 120},
		{"larger than served is clamped", `{"model":"chat","stream":false,` + prompt + `,"options":{"temperature":0,"num_ctx":1000000,"num_predict":4}}`, 200, 2048},
		{"prompt over num_ctx", `{"model":"chat","stream":false,"truncate":false,` + prompt + `,"options":{"num_ctx":20}}`, 400, 0},
		{"prompt over num_ctx truncated", `{"model":"chat","stream":false,` + prompt + `,"options":{"temperature":0,"num_ctx":40}}`, 200, 40},
		{"not an integer", `{"model":"chat","stream":false,` + prompt + `,"options":{"num_ctx":"big"}}`, 400, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, v, raw := post(t, ts.URL+"/api/generate", tt.body)
			if code != tt.status {
				t.Fatalf("%d %s, want %d", code, raw, tt.status)
			}
			if code != 200 {
				if msg, _ := v["error"].(string); !strings.Contains(msg, "num_ctx") {
					t.Errorf("error %s does not name num_ctx", raw)
				}
				return
			}
			n, out := v["prompt_eval_count"].(float64), v["eval_count"].(float64)
			if n+out > float64(tt.wantCtx) {
				t.Errorf("prompt %v + output %v tokens, over the context of %d", n, out, tt.wantCtx)
			}
			if tt.wantCtx < 2048 && v["done_reason"] == "length" && n+out != float64(tt.wantCtx) {
				t.Errorf("cut by length at %v tokens, want %d", n+out, tt.wantCtx)
			}
		})
	}
}

func TestOllamaShowContext(t *testing.T) {
	ts := newContextServer(t, 512) // the model was trained for 2048
	code, v, raw := post(t, ts.URL+"/api/show", `{"model":"chat"}`)
	info, _ := v["model_info"].(map[string]any)
	if code != 200 || info["qwen3.context_length"] != 512.0 {
		t.Errorf("show: %d %s, want context_length 512", code, raw)
	}
	params, _ := v["parameters"].(string)
	found := false
	for _, line := range strings.Split(params, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" && f[1] == "512" {
			found = true
		}
	}
	if !found || !strings.Contains(v["modelfile"].(string), "PARAMETER num_ctx") {
		t.Errorf("parameters %q (modelfile %q), want a num_ctx 512 line", params, v["modelfile"])
	}
}

func TestNotFoundShapes(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tests := []struct {
		method, path string
		status       int
		ollama       bool // {"error": "…"}, else OpenAI's {"error": {"message": …}}
	}{
		{"POST", "/api/embed-nothing", 404, true},
		{"GET", "/api/nothing", 404, true},
		{"GET", "/api/chat", 405, true},
		{"POST", "/v1/nothing", 404, false},
		{"GET", "/v1/chat/completions", 405, false},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d (%v), want %d", tt.method, tt.path, resp.StatusCode, err, tt.status)
			continue
		}
		msg, isString := v["error"].(string)
		if tt.ollama && (!isString || !strings.Contains(msg, tt.path)) {
			t.Errorf("%s %s: %v, want {\"error\": \"…%s…\"}", tt.method, tt.path, v, tt.path)
		}
		if e, ok := v["error"].(map[string]any); !tt.ollama && (!ok || e["message"] == nil) {
			t.Errorf("%s %s: %v, want OpenAI's error object", tt.method, tt.path, v)
		}
	}
}

// TestOllamaGenerateTruncate sends /api/generate prompts longer than the
// context (512 tokens): by default the oldest tokens of the prompt are
// dropped, the template and the end of the prompt kept, leaving room for
// num_predict; the answer is the one to the kept end sent alone. With
// truncate false it is a 400 that says so.
func TestOllamaGenerateTruncate(t *testing.T) {
	ts := newContextServer(t, 512)
	tok := openChatModel(t).Tokenizer
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "item %d is here. ", i)
	}
	prompt := b.String()
	opts := `"options":{"temperature":0,"num_predict":8}`
	const short = "item 1 is here."
	for _, raw := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"chat","stream":false,"raw":%v,"prompt":%s,%s}`, raw, mustJSON(prompt), opts)
		code, v, rawBody := post(t, ts.URL+"/api/generate", body)
		if code != 200 {
			t.Fatalf("raw %v: %d %s", raw, code, rawBody)
		}
		n := int(v["prompt_eval_count"].(float64))
		if n+8 > 512 || n < 512-8-16 || v["truncated"] != true {
			t.Errorf("raw %v: a prompt of %d tokens, truncated %v, want it to fill 512 less num_predict 8", raw, n, v["truncated"])
		}
		// The template's tokens around the prompt.
		_, w, _ := post(t, ts.URL+"/api/generate", fmt.Sprintf(`{"model":"chat","stream":false,"raw":%v,"prompt":%q,%s}`, raw, short, opts))
		around := int(w["prompt_eval_count"].(float64)) - len(tok.EncodePlain(short, false))
		// The kept end, sent alone, gives the same prompt and answer.
		toks := tok.EncodePlain(prompt, false)
		tail := tok.Decode(toks[len(toks)-(n-around):], false)
		if !strings.HasSuffix(prompt, tail) || !strings.HasSuffix(tail, "item 999 is here. ") {
			t.Fatalf("raw %v: kept %q, not the end of the prompt", raw, tail)
		}
		_, w, _ = post(t, ts.URL+"/api/generate", fmt.Sprintf(`{"model":"chat","stream":false,"raw":%v,"prompt":%s,%s}`, raw, mustJSON(tail), opts))
		if w["prompt_eval_count"] != v["prompt_eval_count"] || w["response"] != v["response"] || w["truncated"] != nil {
			t.Errorf("raw %v: truncated %v tokens answering %q, the kept end alone %v tokens answering %q", raw,
				v["prompt_eval_count"], v["response"], w["prompt_eval_count"], w["response"])
		}
	}

	// Streamed, the last chunk counts the dropped tokens.
	resp, err := http.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(`{"model":"chat","prompt":`+mustJSON(prompt)+`,`+opts+`}`))
	if err != nil {
		t.Fatal(err)
	}
	lines := olLines(t, resp)
	resp.Body.Close()
	if last := lines[len(lines)-1]; last["done"] != true || last["truncated"] != true {
		t.Errorf("streamed: last chunk %v, want truncated", last)
	}

	// Filling in the middle, the text before the gap loses its start.
	code, v, raw := post(t, ts.URL+"/api/generate", `{"model":"chat","stream":false,"prompt":`+mustJSON(prompt)+`,"suffix":"\nprint(x)\n",`+opts+`}`)
	if code != 200 || v["truncated"] != true || int(v["prompt_eval_count"].(float64))+8 > 512 {
		t.Errorf("suffix: %d %s", code, raw)
	}

	// truncate false: a 400 that names it.
	code, v, raw = post(t, ts.URL+"/api/generate", `{"model":"chat","stream":false,"truncate":false,"prompt":`+mustJSON(prompt)+`,`+opts+`}`)
	if msg, _ := v["error"].(string); code != 400 || !strings.Contains(msg, "truncate is false") {
		t.Errorf("truncate false: %d %s", code, raw)
	}
	// A prompt that fits is not touched.
	code, v, raw = post(t, ts.URL+"/api/generate", `{"model":"chat","stream":false,"prompt":"`+short+`",`+opts+`}`)
	if code != 200 || v["truncated"] != nil {
		t.Errorf("short prompt: %d %s", code, raw)
	}
}
