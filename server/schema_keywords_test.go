package server

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestJSONSchemaKeywords asks for output held to a schema with the
// keywords structured-output libraries emit (formats, lengths, item
// counts, bounds, multipleOf, pattern): the request is accepted and the
// output validates. A keyword lem cannot enforce is left out and named
// in the response's header, or refused under strict.
func TestJSONSchemaKeywords(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	const schema = `{"type":"object","properties":{
		"day":{"type":"string","format":"date"},
		"at":{"type":"string","format":"date-time"},
		"id":{"type":"string","format":"uuid"},
		"ip":{"type":"string","format":"ipv4"},
		"mail":{"type":"string","format":"email","maxLength":20},
		"code":{"type":"string","pattern":"^[A-Z]{2}[0-9]{2}$"},
		"name":{"type":"string","minLength":1,"maxLength":8},
		"age":{"type":"integer","minimum":18,"exclusiveMaximum":100},
		"score":{"type":"number","minimum":0,"maximum":1},
		"n":{"type":"integer","multipleOf":7,"minimum":-9007199254740991,"maximum":9007199254740991},
		"tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":2,"uniqueItems":true}
	},"required":["day","at","id","ip","mail","code","name","age","score","n","tags"],"additionalProperties":false}`
	check := func(t *testing.T, text string) {
		t.Helper()
		var v struct {
			Day, At, ID, IP, Mail, Code, Name string
			Age, N                            int64
			Score                             float64
			Tags                              []string
		}
		if err := strictUnmarshal(text, &v); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		for _, f := range []struct{ val, re string }{
			{v.Day, `^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$`},
			{v.At, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`},
			{v.ID, `^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$`},
			{v.IP, `^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$`},
			{v.Mail, `^[^@\s]+@[^@\s]+$`},
			{v.Code, `^[A-Z]{2}[0-9]{2}$`},
		} {
			if !regexp.MustCompile(f.re).MatchString(f.val) {
				t.Errorf("%q does not match %s (output %s)", f.val, f.re, text)
			}
		}
		if n := utf8.RuneCountInString(v.Name); n < 1 || n > 8 || utf8.RuneCountInString(v.Mail) > 20 {
			t.Errorf("lengths out of bounds: %s", text)
		}
		if v.Age < 18 || v.Age >= 100 || v.Score < 0 || v.Score > 1 || v.N%7 != 0 || math.Abs(float64(v.N)) > 9007199254740991 {
			t.Errorf("numbers out of bounds: %s", text)
		}
		if len(v.Tags) < 1 || len(v.Tags) > 2 {
			t.Errorf("tags: %s", text)
		}
		for _, tag := range v.Tags {
			if utf8.RuneCountInString(tag) > 3 {
				t.Errorf("tag %q longer than 3", tag)
			}
		}
	}
	send := func(t *testing.T, path, body string) (*http.Response, map[string]any, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var v map[string]any
		json.Unmarshal(data, &v)
		return resp, v, string(data)
	}
	const q = `"messages":[{"role":"user","content":"A person, in JSON."}]`
	// Thinking off: the value from the first token (the model, never
	// taught JSON, runs out of tokens in white space after reasoning).
	const noThink = `"chat_template_kwargs":{"enable_thinking":false}`
	const unenforced = "/properties/tags/uniqueItems"
	t.Run("openai", func(t *testing.T) {
		resp, v, raw := send(t, "/v1/chat/completions", `{"model":"chat","temperature":0,"max_tokens":600,`+noThink+`,`+q+`,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":`+schema+`}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		if got := resp.Header.Get(unenforcedHeader); got != unenforced {
			t.Errorf("%s: %q, want %q", unenforcedHeader, got, unenforced)
		}
		_, content, finish := oaCalls(t, v)
		if finish != "stop" {
			t.Fatalf("finish %s: %q", finish, content)
		}
		check(t, content)
	})
	t.Run("openai strict", func(t *testing.T) {
		resp, _, raw := send(t, "/v1/chat/completions", `{"model":"chat","max_tokens":5,`+q+`,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":`+schema+`}}}`)
		if resp.StatusCode != 400 || !strings.Contains(raw, "uniqueItems") {
			t.Errorf("%d %s, want a 400 naming uniqueItems", resp.StatusCode, raw)
		}
	})
	t.Run("ollama", func(t *testing.T) {
		resp, v, raw := send(t, "/api/chat", `{"model":"chat","stream":false,"think":false,"options":{"temperature":0,"num_predict":600},`+q+`,"format":`+schema+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		if got := resp.Header.Get(unenforcedHeader); got != unenforced {
			t.Errorf("%s: %q, want %q", unenforcedHeader, got, unenforced)
		}
		msg, _ := v["message"].(map[string]any)
		content, _ := msg["content"].(string)
		check(t, content)
	})
}
