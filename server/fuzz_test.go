package server

import (
	"encoding/json"
	"testing"
)

// FuzzChatRequest feeds arbitrary bodies through the decoding, conversion
// and preparation of a chat completion (everything before generation):
// every input must give a request or a 4xx *Error, never a panic or a 500.
func FuzzChatRequest(f *testing.F) {
	_, m := newTestModel(f, Config{})
	for _, seed := range []string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["a"],"n":2}`,
		`{"model":"chat","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"1","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"model":"chat","messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":3},"response_format":{"type":"text"},"reasoning_effort":"none","chat_template_kwargs":{"x":[1,{"a":null}]}}`,
		`{"messages":7}`, `[]`, `null`, `{"messages":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var o oaChatRequest
		if err := decodeJSON(body, &o); err != nil {
			if err.Status >= 500 {
				t.Fatalf("decode: %v", err)
			}
			return
		}
		req, err := o.toRequest(m)
		if err == nil {
			_, err = m.Prepare(req)
		}
		if err != nil {
			if e := AsError(err); e.Status >= 500 {
				t.Fatalf("%s: %v", body, err)
			}
		}
	})
}

// FuzzResponsesInput does the same for /v1/responses input items.
func FuzzResponsesInput(f *testing.F) {
	for _, seed := range []string{`"hi"`, `[{"role":"user","content":"hi"}]`,
		`[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]`,
		`[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image"}]}]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		if !json.Valid(input) {
			return
		}
		if _, err := respMessages(input); err != nil {
			if e := AsError(err); e.Status != 400 {
				t.Fatalf("%s: %v", input, err)
			}
		}
	})
}
