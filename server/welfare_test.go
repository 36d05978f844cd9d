package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// scriptedMediator answers every mediation with a fixed answer or error.
// It stands in for a model trained on the mediation instruction, which
// the fixtures lack, in the tests of the REPHRASE and PAUSE plumbing only;
// the model-backed mediator is tested with the chat model
// (TestWelfareChatModel).
type scriptedMediator struct {
	answer string
	err    error
	mu     sync.Mutex
	asked  []string
}

func (s *scriptedMediator) Mediate(ctx context.Context, m *Model, message string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, message)
	return s.answer, s.err
}

const hostile = "You stupid idiot!!! What is the capital of France?"

// welfareChat is an OpenAI chat request of the messages with thinking off.
func welfareChat(stream bool, msgs ...string) string {
	var ms []map[string]string
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ms = append(ms, map[string]string{"role": role, "content": m})
	}
	// Greedy: the tests compare replies with and without the guard.
	return mustJSON(map[string]any{"model": "chat", "messages": ms, "stream": stream, "max_tokens": 40, "temperature": 0,
		"chat_template_kwargs": map[string]any{"enable_thinking": false}})
}

func chatContent(t *testing.T, v map[string]any) (string, string) {
	t.Helper()
	ch, _ := v["choices"].([]any)
	if len(ch) == 0 {
		t.Fatalf("no choices in %v", v)
	}
	c := ch[0].(map[string]any)
	msg := c["message"].(map[string]any)
	s, _ := msg["content"].(string)
	return s, c["finish_reason"].(string)
}

// TestWelfareChatModel: the guard on, with the served chat model as the
// mediator. The model was not trained on the mediation instruction, so its
// answer is not a decision: the request proceeds unchanged (the same reply
// as without the guard), and the trigger is audited without the user's
// text.
func TestWelfareChatModel(t *testing.T) {
	audit := &auditBuffer{}
	_, on := newTestServer(t, Config{Welfare: &WelfareConfig{Audit: audit}})
	_, off := newTestServer(t, Config{})

	status, want, raw := post(t, off.URL+"/v1/chat/completions", welfareChat(false, hostile))
	if status != 200 {
		t.Fatalf("without the guard: %d %s", status, raw)
	}
	wantText, _ := chatContent(t, want)

	req, _ := http.NewRequest("POST", on.URL+"/v1/chat/completions", strings.NewReader(welfareChat(false, hostile)))
	req.Header.Set("X-Request-Id", "req-welfare-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(data, &got) != nil {
		t.Fatalf("with the guard: %d %s", resp.StatusCode, data)
	}
	if text, finish := chatContent(t, got); text != wantText || finish != "stop" {
		t.Errorf("with the guard the reply is %q (%s); without, %q", text, finish, wantText)
	}

	lines := audit.lines(t)
	if len(lines) != 1 {
		t.Fatalf("audit has %d lines, want 1: %v", len(lines), lines)
	}
	a := lines[0]
	if a["request_id"] != "req-welfare-1" || a["model"] != "chat" || a["decision"] != "proceed" || a["mediation"] != "unparseable" || a["time"] == "" {
		t.Errorf("audit line %v", a)
	}
	score, _ := a["score"].(map[string]any)
	if score["insults"] != 2.0 || score["directed"] != 2.0 || score["exclaim"] != 1.0 || score["turn"] != 4.5 {
		t.Errorf("audit score %v", score)
	}
	for _, k := range []string{"text", "answer", "reply"} {
		if _, ok := a[k]; ok {
			t.Errorf("the audit has %q without AuditText: %v", k, a)
		}
	}
	if strings.Contains(audit.b.String(), "France") {
		t.Error("the audit holds the user's text")
	}
	if n := metricValue(t, on.URL, `lem_welfare_triggers_total{decision="proceed",mediation="unparseable"}`); n != 1 {
		t.Errorf("triggers metric %v, want 1", n)
	}

	// A benign turn is scored and not mediated; a history of hostile
	// turns triggers through the decayed sum on a mildly hostile one.
	if status, _, raw := post(t, on.URL+"/v1/chat/completions", welfareChat(false, "What is the capital of Japan?")); status != 200 {
		t.Fatal(raw)
	}
	mild := "this is shit"
	if status, _, raw := post(t, on.URL+"/v1/chat/completions", welfareChat(false, mild, "ok", mild, "ok", mild, "ok", mild)); status != 200 {
		t.Fatal(raw)
	}
	lines = audit.lines(t)
	if len(lines) != 2 {
		t.Fatalf("audit has %d lines, want 2: %v", len(lines), lines)
	}
	if s := lines[1]["score"].(map[string]any); s["turn"] != 1.0 || s["turns"] != 4.0 || s["sustained"].(float64) < 2.5 {
		t.Errorf("sustained trigger's score %v", s)
	}
	if n := metricValue(t, on.URL, "lem_welfare_turns_scored_total"); n != 3 {
		t.Errorf("%v turns scored, want 3", n)
	}
}

// TestWelfareOffByDefault: without Config.Welfare (lem serve without
// --welfare) nothing is scored, however hostile.
func TestWelfareOffByDefault(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	if s.welfare != nil {
		t.Fatal("the guard is on by default")
	}
	if status, _, raw := post(t, ts.URL+"/v1/chat/completions", welfareChat(false, hostile)); status != 200 {
		t.Fatal(raw)
	}
	if n := metricValue(t, ts.URL, "lem_welfare_turns_scored_total"); n != 0 {
		t.Errorf("%v turns scored with the guard off", n)
	}
}

// TestWelfareMediatorFails: a mediation that fails proceeds unchanged and
// is audited as failed.
func TestWelfareMediatorFails(t *testing.T) {
	audit := &auditBuffer{}
	med := &scriptedMediator{err: errors.New("no slot")}
	_, ts := newTestServer(t, Config{Welfare: &WelfareConfig{Audit: audit, Mediator: med}})
	status, v, raw := post(t, ts.URL+"/v1/chat/completions", welfareChat(false, "You idiot, what is the capital of Japan?"))
	if status != 200 {
		t.Fatal(raw)
	}
	if text, _ := chatContent(t, v); !strings.Contains(text, "Tokyo") {
		t.Errorf("reply %q", text)
	}
	lines := audit.lines(t)
	if len(lines) != 1 || lines[0]["decision"] != "proceed" || lines[0]["mediation"] != "failed" || lines[0]["error"] != "no slot" {
		t.Errorf("audit %v", lines)
	}
}

// TestWelfareDecisionsDialects checks the plumbing of REPHRASE and PAUSE
// in every chat dialect, streamed and not, with a scripted mediator (see
// scriptedMediator): the rephrased message is what the chat model
// answers; the pause reply is the assistant's whole reply, finish stop.
func TestWelfareDecisionsDialects(t *testing.T) {
	const pause = "Let's take a short break and talk again soon."
	type dialect struct {
		name, path string
		body       func(stream bool, text string) string
	}
	dialects := []dialect{
		{"openai", "/v1/chat/completions", func(stream bool, text string) string { return welfareChat(stream, text) }},
		{"responses", "/v1/responses", func(stream bool, text string) string {
			return mustJSON(map[string]any{"model": "chat", "input": text, "stream": stream, "max_output_tokens": 40})
		}},
		{"anthropic", "/v1/messages", func(stream bool, text string) string {
			return mustJSON(map[string]any{"model": "chat", "max_tokens": 40, "stream": stream,
				"messages": []map[string]string{{"role": "user", "content": text}}})
		}},
		{"ollama", "/api/chat", func(stream bool, text string) string {
			return mustJSON(map[string]any{"model": "chat", "stream": stream, "think": false, "options": map[string]any{"num_predict": 40},
				"messages": []map[string]string{{"role": "user", "content": text}}})
		}},
	}
	for _, decision := range []string{"rephrase", "pause"} {
		audit := &auditBuffer{}
		med := &scriptedMediator{answer: "REPHRASE: What is the capital of Japan?"}
		want := "Tokyo"
		if decision == "pause" {
			med.answer, want = "  pause: "+pause+"\n", pause
		}
		_, ts := newTestServer(t, Config{Welfare: &WelfareConfig{Audit: audit, AuditText: true, Mediator: med}})
		n := 0
		for _, d := range dialects {
			for _, stream := range []bool{false, true} {
				name := d.name + "/" + decision
				if stream {
					name += "/stream"
				}
				t.Run(name, func(t *testing.T) {
					n++
					status, _, raw := post(t, ts.URL+d.path, d.body(stream, hostile))
					if status != 200 {
						t.Fatalf("%d %s", status, raw)
					}
					text, finish := replyText(t, d.name, stream, raw)
					if decision == "pause" && text != want || !strings.Contains(text, want) {
						t.Errorf("reply %q, want %q", text, want)
					}
					if strings.Contains(text, "Paris") {
						t.Errorf("the model answered the original message: %q", text)
					}
					if decision == "pause" && finish != map[string]string{"openai": "stop", "responses": "completed", "anthropic": "end_turn", "ollama": "stop"}[d.name] {
						t.Errorf("finish %q", finish)
					}
					lines := audit.lines(t)
					if len(lines) != n {
						t.Fatalf("%d audit lines after %d requests", len(lines), n)
					}
					a := lines[n-1]
					if a["decision"] != decision || a["mediation"] != "ok" || a["text"] != hostile || a["answer"] != med.answer {
						t.Errorf("audit %v", a)
					}
				})
			}
		}
		med.mu.Lock()
		for _, m := range med.asked {
			if m != hostile {
				t.Errorf("the mediator was asked about %q", m)
			}
		}
		if len(med.asked) != n {
			t.Errorf("%d mediations for %d requests", len(med.asked), n)
		}
		med.mu.Unlock()
		if v := metricValue(t, ts.URL, `lem_welfare_triggers_total{decision="`+decision+`",mediation="ok"}`); v != float64(n) {
			t.Errorf("triggers metric %v, want %d", v, n)
		}
	}
}

// replyText returns the assistant's text and finish reason (status for
// Responses) of a dialect's reply, streamed or not.
func replyText(t *testing.T, dialect string, stream bool, raw string) (string, string) {
	t.Helper()
	var text, finish strings.Builder
	var frames []string
	if !stream {
		frames = []string{raw}
	} else if dialect == "ollama" {
		frames = strings.Split(strings.TrimSpace(raw), "\n")
	} else {
		frames = sseEvents(raw)
	}
	for _, f := range frames {
		if f == "[DONE]" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(f), &v); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		switch dialect {
		case "openai":
			for _, c := range v["choices"].([]any) {
				c := c.(map[string]any)
				m, _ := c["message"].(map[string]any)
				if m == nil {
					m, _ = c["delta"].(map[string]any)
				}
				s, _ := m["content"].(string)
				text.WriteString(s)
				if r, _ := c["finish_reason"].(string); r != "" {
					finish.WriteString(r)
				}
			}
		case "responses":
			if stream {
				if v["type"] == "response.output_text.delta" {
					text.WriteString(v["delta"].(string))
				}
				if v["type"] == "response.completed" {
					finish.WriteString(v["response"].(map[string]any)["status"].(string))
				}
				continue
			}
			for _, o := range v["output"].([]any) {
				o := o.(map[string]any)
				if o["type"] != "message" {
					continue
				}
				for _, c := range o["content"].([]any) {
					text.WriteString(c.(map[string]any)["text"].(string))
				}
			}
			finish.WriteString(v["status"].(string))
		case "anthropic":
			if stream {
				if d, _ := v["delta"].(map[string]any); d != nil {
					if s, _ := d["text"].(string); s != "" {
						text.WriteString(s)
					}
					if r, _ := d["stop_reason"].(string); r != "" {
						finish.WriteString(r)
					}
				}
				continue
			}
			for _, c := range v["content"].([]any) {
				c := c.(map[string]any)
				if c["type"] == "text" {
					text.WriteString(c["text"].(string))
				}
			}
			finish.WriteString(v["stop_reason"].(string))
		case "ollama":
			m, _ := v["message"].(map[string]any)
			s, _ := m["content"].(string)
			text.WriteString(s)
			if r, _ := v["done_reason"].(string); r != "" {
				finish.WriteString(r)
			}
		}
	}
	return text.String(), finish.String()
}
