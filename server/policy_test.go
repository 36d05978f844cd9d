package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

func mustPolicy(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var testScope = &policyScope{ctx: context.Background(), model: "m", dialect: "openai"}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`{`, "bad JSON"},
		{`{"rules":[]}`, "no rules"},
		{`{"rules":[{"match":"term","value":"","action":"redact"}]}`, "empty value"},
		{`{"rules":[{"match":"word","value":"x","action":"redact"}]}`, `match "word"`},
		{`{"rules":[{"match":"term","value":"x","action":"block"}]}`, `action "block"`},
		{`{"rules":[{"match":"pattern","value":"a(","action":"redact"}]}`, "missing closing )"},
		{`{"rules":[{"match":"pattern","value":"a*","action":"redact"}]}`, "matches the empty string"},
		{`{"rules":[{"match":"pattern","value":"\\bcat","action":"redact"}]}`, "empty-width"},
		{`{"window":-1,"rules":[{"match":"term","value":"x","action":"redact"}]}`, "window -1"},
		{`{"rules":[{"match":"term","value":"x","action":"redact","window":100000}]}`, "window 100000"},
		{`{"rules":[{"match":"term","value":"x","action":"redact","extra":1}]}`, "unknown field"},
	} {
		_, err := ParsePolicy([]byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

// TestPolicyHoldBack checks that a stream holds back exactly the bytes
// that could still begin a match.
func TestPolicyHoldBack(t *testing.T) {
	p := mustPolicy(t, `{"window":16,"rules":[
		{"match":"term","value":"Tokyo","action":"redact"},
		{"match":"pattern","value":"c[a-z]+l","action":"redact","replacement":"#"}]}`)
	for _, tc := range []struct {
		chunks []string
		want   []string // released after each chunk
	}{
		{[]string{"The capi", "tal of Japan"}, []string{"The ", "# of Japan"}},
		{[]string{"is to", "KY", "o."}, []string{"is ", "", "[redacted]."}},
		{[]string{"Tok", "en"}, []string{"", "Token"}},
		{[]string{"cxxxxxxxxxxxxxxx", "xl"}, []string{"cxxxxxxxxxxxxxxx", "xl"}}, // past the window: no match
		{[]string{"ca", "t"}, []string{"", ""}},                                  // c[a-z]+ may still end in l
		{[]string{"é", "\xe6\x9d", "\xb1"}, []string{"é", "", "東"}},              // a split rune waits
	} {
		f := p.newStream(testScope, "content")
		for i, c := range tc.chunks {
			got, refused := f.push(c, false)
			if refused || got != tc.want[i] {
				t.Errorf("%q: chunk %d released %q, want %q", tc.chunks, i, got, tc.want[i])
			}
		}
	}
}

// policyRef is an independent reference for redact-only policies: no
// match of any rule may start at a released position.
func policyNoMatch(t *testing.T, res []*regexp.Regexp, out string) {
	t.Helper()
	for _, re := range res {
		if loc := re.FindStringIndex(out); loc != nil {
			t.Fatalf("output %q contains a match of %s at %v", out, re, loc)
		}
	}
}

const fuzzPolicy = `{"window":12,"rules":[
	{"match":"term","value":"tokyo","action":"redact","replacement":"#"},
	{"match":"term","value":"CAP","action":"redact","replacement":"#"},
	{"match":"pattern","value":"T[a-z]{1,4}o","action":"redact","replacement":"#"},
	{"match":"pattern","value":"(?i)é+[kl]","action":"redact","replacement":"#"}]}`

// fuzzPolicyRes are the rules of fuzzPolicy as unanchored expressions.
var fuzzPolicyRes = []*regexp.Regexp{regexp.MustCompile(`(?i)tokyo`), regexp.MustCompile(`(?i)cap`), regexp.MustCompile(`T[a-z]{1,4}o`), regexp.MustCompile(`(?i)é+[kl]`)}

// checkPolicySplit streams text in the chunks cuts makes and checks the
// concatenation against the whole text's filtering and that nothing
// released contains a match.
func checkPolicySplit(t *testing.T, p *Policy, text string, cuts []int) {
	t.Helper()
	want, _, _ := p.filterAll(testScope, "content", text)
	f := p.newStream(testScope, "content")
	var got strings.Builder
	last := 0
	for _, c := range cuts {
		if c < last || c > len(text) {
			continue
		}
		out, _ := f.push(text[last:c], false)
		got.WriteString(out)
		policyNoMatch(t, fuzzPolicyRes, got.String())
		last = c
	}
	out, _ := f.push(text[last:], true)
	got.WriteString(out)
	if got.String() != want {
		t.Fatalf("text %q cut at %v: streamed %q, whole %q", text, cuts, got.String(), want)
	}
	policyNoMatch(t, fuzzPolicyRes, want)
}

func TestPolicyStreamRandom(t *testing.T) {
	p := mustPolicy(t, fuzzPolicy)
	rng := rand.New(rand.NewPCG(1, 2))
	alpha := []string{"T", "o", "k", "y", "O", "c", "a", "p", "C", "A", "P", " ", "é", "É", "l", "x", "\n", "東"}
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(alpha[rng.IntN(len(alpha))])
		}
		text := b.String()
		var cuts []int
		for c := 0; c < len(text); c += 1 + rng.IntN(5) {
			cuts = append(cuts, c)
		}
		checkPolicySplit(t, p, text, cuts)
	}
}

func FuzzPolicyStream(f *testing.F) {
	f.Add("The capital of Japan is Tokyo.", []byte{3, 1, 7})
	f.Add("TokYO tOkyo Taaao ééél", []byte{1, 1, 1, 1})
	f.Add("cacaCAP\xe6\x9d\xb1Tok", []byte{2, 5})
	p := mustPolicy(f, fuzzPolicy)
	f.Fuzz(func(t *testing.T, text string, steps []byte) {
		var cuts []int
		c := 0
		for _, s := range steps {
			c += int(s % 8)
			cuts = append(cuts, c)
		}
		checkPolicySplit(t, p, text, cuts)
	})
}

// policyOut is what a reply carried, from any dialect.
type policyOut struct {
	content, reasoning, args, finish string
}

// policyRequest sends body to route and gathers the reply, streamed or not.
func policyRequest(t *testing.T, url, route, body string, stream bool) policyOut {
	t.Helper()
	body = strings.TrimSuffix(body, "}") + fmt.Sprintf(`,"stream":%v}`, stream)
	resp, err := http.Post(url+route, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", route, resp.StatusCode, raw.String())
	}
	var o policyOut
	var objs []map[string]any
	if strings.HasPrefix(route, "/api/") {
		sc := bufio.NewScanner(&raw)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			objs = append(objs, v)
		}
	} else if stream {
		for _, d := range sseEvents(raw.String()) {
			if d == "[DONE]" {
				continue
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			objs = append(objs, v)
		}
	} else {
		var v map[string]any
		if err := json.Unmarshal(raw.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, v)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	for _, v := range objs {
		switch {
		case strings.HasPrefix(route, "/api/"):
			if m, ok := v["message"].(map[string]any); ok {
				o.content += str(m["content"])
				o.reasoning += str(m["thinking"])
				calls, _ := m["tool_calls"].([]any)
				for _, c := range calls {
					b, _ := json.Marshal(c.(map[string]any)["function"].(map[string]any)["arguments"])
					o.args += string(b)
				}
			}
			o.content += str(v["response"])
			if route == "/api/generate" {
				o.reasoning += str(v["thinking"])
			}
			if v["done"] == true {
				o.finish = str(v["done_reason"])
			}
		case route == "/v1/messages" && stream:
			d, _ := v["delta"].(map[string]any)
			o.content += str(d["text"])
			o.reasoning += str(d["thinking"])
			o.args += str(d["partial_json"])
			if v["type"] == "message_delta" {
				o.finish = str(d["stop_reason"])
			}
		case route == "/v1/messages":
			o.finish = str(v["stop_reason"])
			for _, b := range v["content"].([]any) {
				b := b.(map[string]any)
				o.content += str(b["text"])
				o.reasoning += str(b["thinking"])
				if b["type"] == "tool_use" {
					j, _ := json.Marshal(b["input"])
					o.args += string(j)
				}
			}
		case route == "/v1/responses" && stream:
			switch v["type"] {
			case "response.output_text.delta":
				o.content += str(v["delta"])
			case "response.reasoning_text.delta":
				o.reasoning += str(v["delta"])
			case "response.function_call_arguments.done":
				o.args += str(v["arguments"])
			case "response.completed", "response.incomplete":
				o.finish = responsesFinish(v["response"].(map[string]any))
			}
		case route == "/v1/responses":
			o.finish = responsesFinish(v)
			for _, it := range v["output"].([]any) {
				it := it.(map[string]any)
				o.args += str(it["arguments"])
				parts, _ := it["content"].([]any)
				for _, p := range parts {
					p := p.(map[string]any)
					if it["type"] == "reasoning" {
						o.reasoning += str(p["text"])
					} else {
						o.content += str(p["text"])
					}
				}
			}
		default: // OpenAI chat and completions
			for _, c := range v["choices"].([]any) {
				c := c.(map[string]any)
				m, ok := c["message"].(map[string]any)
				if !ok {
					m, _ = c["delta"].(map[string]any)
				}
				o.content += str(c["text"]) + str(m["content"])
				o.reasoning += str(m["reasoning_content"])
				calls, _ := m["tool_calls"].([]any)
				for _, tc := range calls {
					o.args += str(tc.(map[string]any)["function"].(map[string]any)["arguments"])
				}
				if f := str(c["finish_reason"]); f != "" {
					o.finish = f
				}
			}
		}
	}
	// Arguments are compared as JSON values: dialects re-encode them.
	var c bytes.Buffer
	if json.Compact(&c, []byte(o.args)) == nil {
		o.args = c.String()
	}
	return o
}

func responsesFinish(r map[string]any) string {
	if d, ok := r["incomplete_details"].(map[string]any); ok {
		return str2(d["reason"])
	}
	return str2(r["status"])
}

func str2(v any) string { s, _ := v.(string); return s }

// policyRoutes are a request per route: a question the chat model answers
// "The capital of Japan is Tokyo." (after reasoning where think says so).
func policyRoutes(think bool) []struct{ route, body string } {
	q := "What is the capital of Japan?"
	prompt := "<|im_start|>user\\n" + q + "<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n"
	return []struct{ route, body string }{
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"chat","temperature":0,"chat_template_kwargs":{"enable_thinking":%v},"messages":[{"role":"user","content":%q}]}`, think, q)},
		{"/v1/completions", fmt.Sprintf(`{"model":"chat","temperature":0,"max_tokens":30,"prompt":"%s"}`, prompt)},
		{"/v1/responses", fmt.Sprintf(`{"model":"chat","temperature":0,"chat_template_kwargs":{"enable_thinking":%v},"input":%q}`, think, q)},
		{"/v1/messages", fmt.Sprintf(`{"model":"chat","temperature":0,"max_tokens":100,%s"messages":[{"role":"user","content":%q}]}`, map[bool]string{true: `"thinking":{"type":"enabled","budget_tokens":60},`, false: ``}[think], q)},
		{"/api/chat", fmt.Sprintf(`{"model":"chat","think":%v,"options":{"temperature":0},"messages":[{"role":"user","content":%q}]}`, think, q)},
		{"/api/generate", fmt.Sprintf(`{"model":"chat","think":%v,"options":{"temperature":0},"prompt":%q}`, think, q)},
	}
}

// auditBuffer is an audit log in memory (the policy's, the welfare
// guard's) shared by a server's requests.
type auditBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (a *auditBuffer) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.b.Write(p)
}

// lines returns the audit lines decoded.
func (a *auditBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(a.b.String()), "\n") {
		if l == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

func (a *auditBuffer) reset() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.b.String()
	a.b.Reset()
	return s
}

func TestPolicyRedactDialects(t *testing.T) {
	p := mustPolicy(t, `{"window":32,"rules":[
		{"match":"term","value":"tokyo","action":"redact","replacement":"[city]"},
		{"match":"pattern","value":"c[a-z]+l","action":"redact"}]}`)
	audit := &auditBuffer{}
	p.Audit = audit
	_, ts := newTestServer(t, Config{Policy: p})
	for _, think := range []bool{false, true} {
		for _, r := range policyRoutes(think) {
			t.Run(fmt.Sprintf("%s/think=%v", r.route, think), func(t *testing.T) {
				audit.reset()
				whole := policyRequest(t, ts.URL, r.route, r.body, false)
				streamed := policyRequest(t, ts.URL, r.route, r.body, true)
				if whole != streamed {
					t.Errorf("streamed %+v\nwhole    %+v", streamed, whole)
				}
				if !strings.Contains(whole.content, "The [redacted] of Japan is [city].") {
					t.Errorf("content %q", whole.content)
				}
				if think && r.route != "/v1/completions" && whole.reasoning != "The user asks for the [redacted] of Japan. It is [city]." {
					t.Errorf("reasoning %q", whole.reasoning)
				}
				lines := audit.lines(t)
				if len(lines) < 4 {
					t.Fatalf("audit: %d lines, want 4 or more", len(lines))
				}
				for _, l := range lines {
					if l["action"] != "redact" || l["model"] != "chat" || l["request_id"] == "" || l["dialect"] == "" || l["time"] == "" {
						t.Errorf("audit line %v", l)
					}
				}
				if raw := audit.reset(); strings.Contains(strings.ToLower(raw), "tokyo") || strings.Contains(raw, "capital") {
					t.Errorf("audit log holds matched text: %s", raw)
				}
			})
		}
	}
}

func TestPolicyRefuseDialects(t *testing.T) {
	p := mustPolicy(t, `{"rules":[{"match":"pattern","value":"J[a-z]+n","action":"refuse","message":"No comment."}]}`)
	_, ts := newTestServer(t, Config{Policy: p})
	finish := map[string]string{"/v1/messages": "refusal", "/v1/responses": "content_filter"}
	for _, r := range policyRoutes(false) {
		t.Run(r.route, func(t *testing.T) {
			whole := policyRequest(t, ts.URL, r.route, r.body, false)
			streamed := policyRequest(t, ts.URL, r.route, r.body, true)
			if whole != streamed {
				t.Errorf("streamed %+v\nwhole    %+v", streamed, whole)
			}
			if !strings.HasSuffix(whole.content, "The capital of No comment.") || strings.Contains(whole.content, "Tokyo") {
				t.Errorf("content %q", whole.content)
			}
			want := finish[r.route]
			if want == "" {
				want = FinishContentFilter
			}
			if whole.finish != want {
				t.Errorf("finish %q, want %q", whole.finish, want)
			}
		})
	}
}

func TestPolicyToolArguments(t *testing.T) {
	p := mustPolicy(t, `{"audit_text":true,"rules":[{"match":"term","value":"paris","action":"redact","replacement":"[place]"}]}`)
	audit := &auditBuffer{}
	p.Audit = audit
	_, ts := newTestServer(t, Config{Policy: p})
	q := "What's the weather in Paris?"
	oaTool := `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	for _, r := range []struct{ route, body string }{
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"chat","temperature":0,"chat_template_kwargs":{"enable_thinking":false},"tools":[%s],"messages":[{"role":"user","content":%q}]}`, oaTool, q)},
		{"/v1/responses", fmt.Sprintf(`{"model":"chat","temperature":0,"chat_template_kwargs":{"enable_thinking":false},"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"input":%q}`, q)},
		{"/v1/messages", fmt.Sprintf(`{"model":"chat","temperature":0,"max_tokens":100,"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"messages":[{"role":"user","content":%q}]}`, q)},
		{"/api/chat", fmt.Sprintf(`{"model":"chat","think":false,"options":{"temperature":0},"tools":[%s],"messages":[{"role":"user","content":%q}]}`, oaTool, q)},
	} {
		t.Run(r.route, func(t *testing.T) {
			audit.reset()
			whole := policyRequest(t, ts.URL, r.route, r.body, false)
			streamed := policyRequest(t, ts.URL, r.route, r.body, true)
			if whole != streamed {
				t.Errorf("streamed %+v\nwhole    %+v", streamed, whole)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(whole.args), &args); err != nil || args["city"] != "[place]" {
				t.Errorf("arguments %q (%v)", whole.args, err)
			}
			lines := audit.lines(t)
			if len(lines) != 2 || lines[0]["field"] != "tool_arguments" || lines[0]["text"] != "Paris" {
				t.Errorf("audit %v", lines)
			}
		})
	}
}

func TestPolicyRewrite(t *testing.T) {
	var mode struct {
		sync.Mutex
		v string
	}
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	med := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Text      string `json:"text"`
			Rule      int    `json:"rule"`
			RequestID string `json:"request_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Text != "Tokyo" || in.Rule != 0 || in.RequestID == "" {
			http.Error(w, "bad request", 400)
			return
		}
		mode.Lock()
		m := mode.v
		mode.Unlock()
		switch m {
		case "good":
			fmt.Fprint(w, `{"text":"a large city"}`)
		case "matches":
			fmt.Fprint(w, `{"text":"TOKYO!"}`)
		case "slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			http.Error(w, "broken", 500)
		}
	}))
	t.Cleanup(med.Close)
	p := mustPolicy(t, `{"mediator_timeout_ms":300,"rules":[{"match":"term","value":"Tokyo","action":"rewrite","replacement":"[city]"}]}`)
	p.Mediator = med.URL
	audit := &auditBuffer{}
	p.Audit = audit
	_, ts := newTestServer(t, Config{Policy: p})
	for _, tc := range []struct{ mode, want, action string }{
		{"good", "The capital of Japan is a large city.", "rewrite"},
		{"matches", "The capital of Japan is [city].", "redact"},
		{"slow", "The capital of Japan is [city].", "redact"},
		{"500", "The capital of Japan is [city].", "redact"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Lock()
			mode.v = tc.mode
			mode.Unlock()
			audit.reset()
			for _, r := range policyRoutes(false)[4:5] {
				whole := policyRequest(t, ts.URL, r.route, r.body, false)
				streamed := policyRequest(t, ts.URL, r.route, r.body, true)
				if whole.content != tc.want || streamed.content != tc.want {
					t.Errorf("whole %q, streamed %q, want %q", whole.content, streamed.content, tc.want)
				}
			}
			lines := audit.lines(t)
			if len(lines) != 2 || lines[0]["action"] != tc.action {
				t.Errorf("audit %v", lines)
			}
		})
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	if _, err := LoadPolicy(path); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Errorf("missing file: %v", err)
	}
	os.WriteFile(path, []byte(`{"rules":[{"match":"term","value":"x","action":"redact"}]}`), 0o600)
	p, err := LoadPolicy(path)
	if err != nil || p.rules[0].window != DefaultPolicyWindow || p.rules[0].replacement != DefaultPolicyReplacement || p.MediatorTimeout != DefaultPolicyMediatorTimeout {
		t.Errorf("%v %+v", err, p)
	}
}

// BenchmarkPolicyToken is the filter's cost per streamed token: ten rules
// (terms and patterns), a reply streamed a few bytes at a time.
func BenchmarkPolicyToken(b *testing.B) {
	p := mustPolicy(b, `{"window":64,"rules":[
		{"match":"term","value":"password","action":"redact"},
		{"match":"term","value":"secret","action":"redact"},
		{"match":"term","value":"Project Falcon","action":"refuse"},
		{"match":"term","value":"internal only","action":"redact"},
		{"match":"term","value":"confidential","action":"redact"},
		{"match":"pattern","value":"[0-9]{3}-[0-9]{2}-[0-9]{4}","action":"redact"},
		{"match":"pattern","value":"sk-[A-Za-z0-9]{20,40}","action":"redact"},
		{"match":"pattern","value":"[a-z0-9.]+@example\\.com","action":"redact"},
		{"match":"pattern","value":"(?i)api[_ ]key","action":"redact"},
		{"match":"pattern","value":"T[a-z]+yo","action":"redact"}]}`)
	tokens := strings.SplitAfter("The capital of Japan is a city of many districts, and its people travel by train every day to work in offices, shops and factories. ", " ")
	b.ReportAllocs()
	f := p.newStream(testScope, "content")
	b.ResetTimer()
	for i := range b.N {
		f.push(tokens[i%len(tokens)], false)
	}
}
