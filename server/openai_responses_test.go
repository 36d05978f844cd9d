package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// respStreamItem is an output item as a client rebuilds it from events.
type respStreamItem struct {
	id, typ  string
	parts    []map[string]any // content parts, their text accumulated
	done     []bool           // content_part.done seen, by part
	summary  []string
	finished bool
}

// replayResponseStream checks a /v1/responses event stream the way the
// SDKs' accumulators read it: sequence numbers count from 0, every item is
// added before its content parts, every part is added before its deltas,
// done events repeat what the deltas built, and the final response holds
// the items as streamed. It returns the rebuilt items and the final
// response.
func replayResponseStream(t *testing.T, body string) ([]*respStreamItem, map[string]any) {
	t.Helper()
	var items []*respStreamItem
	var final map[string]any
	item := func(ev map[string]any) *respStreamItem {
		t.Helper()
		idx, ok := ev["output_index"].(float64)
		if !ok || int(idx) >= len(items) || int(idx) < 0 {
			t.Fatalf("%s for an output index never added: %v", ev["type"], ev)
		}
		it := items[int(idx)]
		if id, ok := ev["item_id"]; ok && id != it.id {
			t.Fatalf("%s names item %v, output %d is %s", ev["type"], id, int(idx), it.id)
		}
		if it.finished {
			t.Fatalf("%s after output_item.done", ev["type"])
		}
		return it
	}
	part := func(ev map[string]any, typ string) (*respStreamItem, int) {
		t.Helper()
		it := item(ev)
		ci, _ := ev["content_index"].(float64)
		if int(ci) >= len(it.parts) {
			t.Fatalf("%s: missing content at index %d (part never announced by content_part.added)", ev["type"], int(ci))
		}
		if it.parts[int(ci)]["type"] != typ {
			t.Fatalf("%s on a part of type %v", ev["type"], it.parts[int(ci)]["type"])
		}
		if it.done[int(ci)] {
			t.Fatalf("%s after content_part.done", ev["type"])
		}
		return it, int(ci)
	}
	for n, data := range sseEvents(body) {
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %d: %v: %s", n, err, data)
		}
		if seq, _ := ev["sequence_number"].(float64); int(seq) != n {
			t.Fatalf("event %d has sequence_number %v", n, ev["sequence_number"])
		}
		if final != nil {
			t.Fatalf("%s after the final event", ev["type"])
		}
		switch typ := ev["type"].(string); typ {
		case "response.created", "response.in_progress":
		case "response.output_item.added":
			if idx := ev["output_index"].(float64); int(idx) != len(items) {
				t.Fatalf("item added at %v, want %d", idx, len(items))
			}
			m := ev["item"].(map[string]any)
			if len(asList(m["content"])) != 0 || len(asList(m["summary"])) != 0 {
				t.Fatalf("item added with content: %s", data)
			}
			items = append(items, &respStreamItem{id: m["id"].(string), typ: m["type"].(string)})
		case "response.content_part.added":
			it := item(ev)
			if ci := ev["content_index"].(float64); int(ci) != len(it.parts) {
				t.Fatalf("part added at %v, want %d", ci, len(it.parts))
			}
			p := ev["part"].(map[string]any)
			want := map[string]string{"message": "output_text", "reasoning": "reasoning_text"}[it.typ]
			if p["type"] != want || p["text"] != "" {
				t.Fatalf("%s item got part %s", it.typ, data)
			}
			it.parts = append(it.parts, p)
			it.done = append(it.done, false)
		case "response.output_text.delta", "response.reasoning_text.delta":
			it, ci := part(ev, strings.TrimSuffix(strings.TrimPrefix(typ, "response."), ".delta"))
			it.parts[ci]["text"] = it.parts[ci]["text"].(string) + ev["delta"].(string)
		case "response.output_text.done", "response.reasoning_text.done":
			it, ci := part(ev, strings.TrimSuffix(strings.TrimPrefix(typ, "response."), ".done"))
			if ev["text"] != it.parts[ci]["text"] {
				t.Fatalf("%s text %q, deltas made %q", typ, ev["text"], it.parts[ci]["text"])
			}
		case "response.content_part.done":
			p := ev["part"].(map[string]any)
			it, ci := part(ev, p["type"].(string))
			if p["text"] != it.parts[ci]["text"] {
				t.Fatalf("content_part.done text %q, deltas made %q", p["text"], it.parts[ci]["text"])
			}
			it.done[ci] = true
		case "response.reasoning_summary_part.added":
			it := item(ev)
			if si := ev["summary_index"].(float64); int(si) != len(it.summary) || it.typ != "reasoning" {
				t.Fatalf("summary part at %v of a %s item", si, it.typ)
			}
			it.summary = append(it.summary, "")
		case "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done", "response.reasoning_summary_part.done":
			it := item(ev)
			si := int(ev["summary_index"].(float64))
			if si >= len(it.summary) {
				t.Fatalf("%s for a summary part never added", typ)
			}
			switch typ {
			case "response.reasoning_summary_text.delta":
				it.summary[si] += ev["delta"].(string)
			case "response.reasoning_summary_text.done":
				if ev["text"] != it.summary[si] {
					t.Fatalf("summary done %q, deltas made %q", ev["text"], it.summary[si])
				}
			default:
				if p := ev["part"].(map[string]any); p["text"] != it.summary[si] || p["type"] != "summary_text" {
					t.Fatalf("summary part done %s, deltas made %q", data, it.summary[si])
				}
			}
		case "response.output_item.done":
			it := item(ev)
			for ci, d := range it.done {
				if !d {
					t.Fatalf("item %s done before its part %d", it.id, ci)
				}
			}
			checkRespItem(t, ev["item"].(map[string]any), it)
			it.finished = true
		case "response.completed", "response.incomplete":
			final = ev["response"].(map[string]any)
			out := asList(final["output"])
			if len(out) != len(items) {
				t.Fatalf("final response has %d items, %d streamed", len(out), len(items))
			}
			for i, it := range items {
				if !it.finished {
					t.Fatalf("item %s never done", it.id)
				}
				checkRespItem(t, out[i].(map[string]any), it)
			}
		case "response.function_call_arguments.delta", "response.function_call_arguments.done":
			item(ev)
		default:
			t.Fatalf("unexpected event %s", data)
		}
	}
	if final == nil {
		t.Fatalf("no final event in %s", body)
	}
	return items, final
}

// checkRespItem compares an item of a done event with the one streamed.
func checkRespItem(t *testing.T, m map[string]any, it *respStreamItem) {
	t.Helper()
	if m["id"] != it.id || m["type"] != it.typ || m["status"] != "completed" {
		t.Fatalf("item %v, streamed %s %s", m, it.typ, it.id)
	}
	content := asList(m["content"])
	if it.typ == "function_call" {
		return
	}
	if len(content) != len(it.parts) {
		t.Fatalf("item %s has %d parts, %d streamed", it.id, len(content), len(it.parts))
	}
	for i, c := range content {
		c := c.(map[string]any)
		if c["type"] != it.parts[i]["type"] || c["text"] != it.parts[i]["text"] {
			t.Fatalf("item %s part %d is %v, streamed %v", it.id, i, c, it.parts[i])
		}
	}
	summary := asList(m["summary"])
	if len(summary) != len(it.summary) {
		t.Fatalf("item %s has %d summary parts, %d streamed", it.id, len(summary), len(it.summary))
	}
	for i, s := range summary {
		if s := s.(map[string]any); s["text"] != it.summary[i] {
			t.Fatalf("item %s summary %d is %v, streamed %q", it.id, i, s, it.summary[i])
		}
	}
}

func TestResponsesStreamEvents(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tests := []struct {
		name    string
		extra   string
		summary bool
	}{
		{"reasoning", ``, false},
		{"reasoning summary", `"reasoning":{"summary":"auto"},`, true},
		{"thinking off", `"reasoning":{"effort":"none"},`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":200,"stream":true,`+tc.extra+`"input":"What is the capital of Japan?"}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			items, final := replayResponseStream(t, raw)
			var kinds []string
			for _, it := range items {
				kinds = append(kinds, it.typ)
			}
			want := "reasoning message"
			if tc.name == "thinking off" {
				want = "message"
			}
			if got := strings.Join(kinds, " "); got != want {
				t.Fatalf("items %q, want %q", got, want)
			}
			last := items[len(items)-1]
			if !strings.Contains(last.parts[0]["text"].(string), "Tokyo") {
				t.Errorf("answer %q", last.parts[0]["text"])
			}
			if want == "reasoning message" {
				r := items[0]
				if r.parts[0]["text"] == "" {
					t.Error("empty reasoning")
				}
				if tc.summary != (len(r.summary) == 1) || tc.summary && r.summary[0] != r.parts[0]["text"] {
					t.Errorf("summary %q, reasoning %q", r.summary, r.parts[0]["text"])
				}
			}

			// The same request unstreamed gives the same output.
			code, v, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":200,`+tc.extra+`"input":"What is the capital of Japan?"}`)
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			out := asList(v["output"])
			if len(out) != len(items) {
				t.Fatalf("unstreamed output %s", raw)
			}
			for i, o := range out {
				m := o.(map[string]any)
				m["id"] = items[i].id
				checkRespItem(t, m, items[i])
			}
			_ = final
		})
	}
}

func TestResponsesItemReference(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	tools := `"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	code, first, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":300,"store":true,`+tools+`,"input":"What is the weather like in Paris today?"}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	var refs []string
	var callID string
	for _, o := range asList(first["output"]) {
		m := o.(map[string]any)
		refs = append(refs, fmt.Sprintf(`{"type":"item_reference","id":%q}`, m["id"]))
		if m["type"] == "function_call" {
			callID = m["call_id"].(string)
		}
	}
	if callID == "" {
		t.Fatalf("no function call: %s", raw)
	}

	// The Vercel AI SDK's second step: the user's message again, the
	// earlier items by reference, and the tool's output.
	body := `{"model":"chat","temperature":0,"max_output_tokens":300,"store":true,` + tools + `,"input":[` +
		`{"role":"user","content":"What is the weather like in Paris today?"},` + strings.Join(refs, ",") +
		fmt.Sprintf(`,{"type":"function_call_output","call_id":%q,"output":"{\"temp_c\": 21}"}]}`, callID)
	code, second, raw := post(t, ts.URL+"/v1/responses", body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	// The same conversation through previous_response_id answers alike.
	code, third, raw3 := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":300,`+tools+
		fmt.Sprintf(`,"previous_response_id":%q,"input":[{"type":"function_call_output","call_id":%q,"output":"{\"temp_c\": 21}"}]}`, first["id"], callID))
	if code != 200 {
		t.Fatalf("%d %s", code, raw3)
	}
	if a, b := respOutputText(second), respOutputText(third); a == "" || a != b || !strings.Contains(a, "21") {
		t.Errorf("by reference %q, by previous_response_id %q", a, b)
	}

	// Unknown, deleted and malformed references are a 400 naming the item.
	req, _ := http.NewRequest("DELETE", ts.URL+"/v1/responses/"+first["id"].(string), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, tc := range []struct{ input, param string }{
		{`[{"type":"item_reference","id":"msg_nope"}]`, "input[0].id"},
		{`[{"role":"user","content":"hi"},` + refs[0] + `]`, "input[1].id"},
		{`[{"type":"item_reference"}]`, "input[0].id"},
		{`[{"id":"fc_nope"}]`, "input[0].id"},
	} {
		code, v, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","max_output_tokens":5,"input":`+tc.input+`}`)
		e, _ := v["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != tc.param || !strings.Contains(e["message"].(string), "no stored") && tc.param != "input[0].id" {
			t.Errorf("%s: %d %s", tc.input, code, raw)
		}
	}
}

// respOutputText joins the output_text parts of a response.
func respOutputText(v map[string]any) string {
	var b strings.Builder
	for _, o := range asList(v["output"]) {
		for _, c := range asList(o.(map[string]any)["content"]) {
			if c := c.(map[string]any); c["type"] == "output_text" {
				b.WriteString(c["text"].(string))
			}
		}
	}
	return b.String()
}

func TestResponsesSchemaStrict(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	// "not" cannot be held to in the grammar: strict (which OpenAI leaves
	// off by default) refuses it, otherwise it is left out. (The strings
	// are enums: the model, left free in a string, does not find the
	// closing quote.)
	schema := `{"type":"object","properties":{"city":{"enum":["Tokyo","Paris"],"not":{"const":"Paris"}}},"required":["city"],"additionalProperties":false}`
	tests := []struct {
		strict string
		code   int
	}{
		{``, 200},
		{`"strict":true,`, 400},
		{`"strict":false,`, 200},
	}
	for _, tc := range tests {
		code, v, raw := post(t, ts.URL+"/v1/responses", `{"model":"chat","temperature":0,"max_output_tokens":300,"reasoning":{"effort":"none"},"input":"What is the capital of Japan? Answer in JSON.","text":{"format":{"type":"json_schema","name":"answer",`+tc.strict+`"schema":`+schema+`}}}`)
		if code != tc.code {
			t.Fatalf("%s: %d %s", tc.strict, code, raw)
		}
		if code != 200 {
			if e, _ := v["error"].(map[string]any); e == nil || e["param"] != "text.format.schema.properties.city.not" {
				t.Errorf("%s: %s", tc.strict, raw)
			}
			continue
		}
		var out struct {
			City *string `json:"city"`
		}
		text := respOutputText(v)
		if err := json.Unmarshal([]byte(text), &out); err != nil || out.City == nil || (*out.City != "Tokyo" && *out.City != "Paris") || v["status"] != "completed" {
			t.Errorf("output %q (%v) status %v", text, err, v["status"])
		}
	}
}
