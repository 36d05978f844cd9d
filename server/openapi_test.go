package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/jsonschema/v6"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// openapiDocument returns the document and an OpenAPI validator for it.
func openapiDocument(t *testing.T) (map[string]any, validator.Validator) {
	t.Helper()
	data, err := OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	d, err := libopenapi.NewDocument(data)
	if err != nil {
		t.Fatalf("libopenapi: %v", err)
	}
	if _, err := d.BuildV3Model(); err != nil {
		t.Fatalf("building the OpenAPI model: %v", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	return doc, v
}

func TestOpenAPIDocumentValid(t *testing.T) {
	doc, v := openapiDocument(t)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("invalid document: %s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s at %s", se.Reason, se.KeywordLocation)
			}
		}
	}
}

// TestOpenAPIRoutes checks that every route the server registers is in
// the document and every operation of the document is registered.
func TestOpenAPIRoutes(t *testing.T) {
	doc, _ := openapiDocument(t)
	s, _ := newTestServer(t, Config{})
	paths := doc["paths"].(map[string]any)
	documented := map[string]bool{}
	for p, item := range paths {
		for m := range item.(map[string]any) {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	registered := map[string]bool{}
	for _, pattern := range s.patterns {
		if pattern == "/" { // the catch-all 404
			continue
		}
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Errorf("route %q has no method, so the document cannot describe it", pattern)
			continue
		}
		p, _ := openapiPath(path)
		registered[method+" "+p] = true
		if !documented[method+" "+p] {
			t.Errorf("route %q is served but not in the OpenAPI document", pattern)
		}
	}
	for op := range documented {
		if !registered[op] {
			t.Errorf("%s is in the OpenAPI document but not served", op)
		}
	}
	if len(registered) < 19 {
		t.Errorf("%d routes registered, want at least 19", len(registered))
	}
}

func TestOpenAPISchemas(t *testing.T) {
	doc, _ := openapiDocument(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, tc := range []struct {
		name        string
		required    []string // exactly
		has, hasNot []string // properties
	}{
		// A reply: fields without omitempty are required.
		{"anResponse", []string{"content", "id", "model", "role", "stop_reason", "stop_sequence", "type", "usage"}, []string{"usage"}, nil},
		// An embedded pointer (the metrics of a final chunk) may be absent;
		// omitempty fields are not required.
		{"olChatResponse", []string{"created_at", "done", "message", "model"}, []string{"total_duration", "done_reason", "truncated_messages"}, []string{"olMetrics"}},
		// A request: nothing is required; embedded fields are promoted.
		{"oaChatRequest", nil, []string{"model", "messages", "temperature", "stop", "response_format"}, []string{"oaSampling"}},
		{"olChatRequest", nil, []string{"model", "messages", "options", "stream"}, nil},
		{"olShowRequest", nil, []string{"model", "name", "verbose"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := schemas[tc.name].(map[string]any)
			if !ok {
				t.Fatalf("no component schema %s", tc.name)
			}
			var req []string
			if r, ok := s["required"].([]any); ok {
				for _, x := range r {
					req = append(req, x.(string))
				}
			}
			if !slices.Equal(req, tc.required) {
				t.Errorf("required = %v, want %v", req, tc.required)
			}
			props := s["properties"].(map[string]any)
			for _, p := range tc.has {
				if props[p] == nil {
					t.Errorf("no property %q", p)
				}
			}
			for _, p := range tc.hasNot {
				if props[p] != nil {
					t.Errorf("unexpected property %q", p)
				}
			}
		})
	}
	chat := schemas["oaChatRequest"].(map[string]any)["properties"].(map[string]any)
	if typ, _ := json.Marshal(chat["temperature"]); string(typ) != `{"type":["number","null"]}` {
		t.Errorf("temperature (a *float64) = %s, want a nullable number", typ)
	}
	if stop, _ := json.Marshal(chat["stop"]); !strings.Contains(string(stop), "oneOf") {
		t.Errorf("stop (a string or a list) = %s, want oneOf", stop)
	}
	created, _ := json.Marshal(schemas["olChatResponse"].(map[string]any)["properties"].(map[string]any)["created_at"])
	if string(created) != `{"format":"date-time","type":"string"}` {
		t.Errorf("created_at (a time.Time) = %s", created)
	}
}

// TestOpenAPIReplyTypes checks that every JSON reply and error body of
// the document has a schema (not "any JSON value"), and that the routes
// that stream server-sent events of JSON document the events' schema.
func TestOpenAPIReplyTypes(t *testing.T) {
	doc, _ := openapiDocument(t)
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if path == "/openapi.json" {
				continue // the document itself: any JSON value
			}
			responses := op.(map[string]any)["responses"].(map[string]any)
			for code, r := range responses {
				content, _ := r.(map[string]any)["content"].(map[string]any)
				if j, ok := content["application/json"].(map[string]any); ok && len(j["schema"].(map[string]any)) == 0 {
					t.Errorf("%s %s: the %s reply's schema is any JSON value", method, path, code)
				}
			}
		}
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"} {
		s := sseEventSchema(t, doc, path)
		if len(s) == 0 {
			t.Errorf("POST %s: no schema of its stream's events", path)
		}
	}
}

// TestOpenAPIEventKinds checks that the schemas of the streams with
// several kinds of event tell the kinds apart by their type: an event
// must have the fields of its kind.
func TestOpenAPIEventKinds(t *testing.T) {
	data, err := OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, event string
		valid       bool
	}{
		{"/v1/responses", `{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"a","logprobs":[]}`, true},
		{"/v1/responses", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}}`, true},
		{"/v1/responses", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","content":[]}}`, false},
		{"/v1/responses", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"reasoning","id":"rs_1","status":"in_progress","content":[]}}`, false},
		{"/v1/responses", `{"type":"response.content_part.added","sequence_number":2,"item_id":"rs_1","output_index":0,"content_index":0,"part":{"type":"refusal","text":""}}`, false},
		{"/v1/responses", `{"type":"response.output_text.delta","delta":"a"}`, false},
		{"/v1/responses", `{"type":"response.bogus","sequence_number":1}`, false},
		{"/v1/responses", `{"type":"error","sequence_number":9,"code":"server_error","message":"m","param":null}`, true},
		{"/v1/responses", `{"type":"error","sequence_number":9,"code":"server_error","message":"m"}`, false},
		{"/v1/messages", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`, true},
		{"/v1/messages", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","thinking":"a"}}`, false},
		{"/v1/messages", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`, true},
		{"/v1/messages", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f"}}`, false},
		{"/v1/messages", `{"type":"message_stop"}`, true},
		{"/v1/messages", `{"type":"ping"}`, true},
		{"/v1/messages", `{"type":"message_end"}`, false},
		{"/v1/messages", `{"type":"error","error":{"type":"overloaded_error","message":"m"}}`, true},
	} {
		s := sseValidator(t, data, tc.path)
		ev, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.event))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(ev); (err == nil) != tc.valid {
			t.Errorf("%s event %s: valid = %v, want %v (%v)", tc.path, tc.event, err == nil, tc.valid, err)
		}
	}
}

// sseEventSchema returns the documented schema of the JSON data of a
// POST route's server-sent events.
func sseEventSchema(t *testing.T, doc map[string]any, path string) map[string]any {
	t.Helper()
	op, _ := doc["paths"].(map[string]any)[path].(map[string]any)["post"].(map[string]any)
	content := op["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)
	sse, _ := content[mediaSSE].(map[string]any)
	if sse == nil {
		t.Fatalf("POST %s has no %s reply", path, mediaSSE)
	}
	s, _ := sse["schema"].(map[string]any)["contentSchema"].(map[string]any)
	return s
}

// sseValidator compiles the documented schema of a POST route's
// server-sent events.
func sseValidator(t *testing.T, data []byte, path string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	ptr := "/paths/" + strings.ReplaceAll(path, "/", "~1") + "/post/responses/200/content/text~1event-stream/schema/contentSchema"
	s, err := c.Compile("openapi.json#" + ptr)
	if err != nil {
		t.Fatalf("compiling the event schema of %s: %v", path, err)
	}
	return s
}

// TestOpenAPIReplies validates real replies of a running server against
// the document, and serves the document without an API key.
func TestOpenAPIReplies(t *testing.T) {
	_, v := openapiDocument(t)
	_, ts := newTestServer(t, Config{APIKey: "k", Version: "test"})
	data, err := OpenAPI("test")
	if err != nil {
		t.Fatal(err)
	}
	lastResponse := "resp_none" // the id of the last response created
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/health", ""},
		{"GET", "/openapi.json", ""},
		{"GET", "/api/tags", ""},
		{"GET", "/api/ps", ""},
		{"GET", "/api/version", ""},
		{"POST", "/api/chat", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}`},
		{"POST", "/api/chat", `{"model":"chat","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":3}}`},
		{"POST", "/api/generate", `{"model":"chat","prompt":"hi","stream":false,"options":{"num_predict":3}}`},
		{"POST", "/v1/messages", `{"model":"chat","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages", `{"model":"chat","max_tokens":60,"stream":true,"thinking":{"type":"enabled","budget_tokens":30},"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages", `{"model":"chat","max_tokens":40,"stream":true,"tool_choice":{"type":"any"},"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}],"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages/count_tokens", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages", `{"model":"nope","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/api/chat", `{"model":"nope","messages":[]}`},
		{"POST", "/api/show", `{"model":"chat"}`},
		{"POST", "/v1/chat/completions", `{"model":"chat","max_tokens":3,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/chat/completions", `{"model":"chat","max_tokens":3,"stream":true,"logprobs":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/chat/completions", `{"model":"chat","max_tokens":3,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/completions", `{"model":"chat","max_tokens":3,"prompt":"hi","echo":true,"logprobs":2}`},
		{"POST", "/v1/completions", `{"model":"chat","max_tokens":3,"prompt":["hi","ho"],"stream":true,"echo":true,"logprobs":1,"stream_options":{"include_usage":true}}`},
		{"GET", "/v1/models", ""},
		{"GET", "/v1/models?limit=1&after_id=chat", ""},
		{"GET", "/v1/models/chat", ""},
		{"GET", "/v1/models/nope", ""},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":3,"input":"hi"}`},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":3,"input":"hi","stream":true}`},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":40,"reasoning":{"summary":"auto"},"input":"hi","stream":true}`},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":40,"reasoning":{"effort":"none"},"tool_choice":"required","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}],"input":"hi","stream":true}`},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":40,"reasoning":{"summary":"auto"},"input":"hi"}`},
		{"POST", "/v1/responses", `{"model":"chat","max_output_tokens":40,"reasoning":{"effort":"none"},"tool_choice":"required","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}],"input":"hi"}`},
		{"GET", "/v1/responses/{last}", ""},
		{"DELETE", "/v1/responses/{last}", ""},
		{"DELETE", "/v1/responses/{last}", ""},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			path := strings.ReplaceAll(tc.path, "{last}", lastResponse)
			req, err := http.NewRequest(tc.method, ts.URL+path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.path != "/openapi.json" && tc.path != "/health" {
				req.Header.Set("Authorization", "Bearer k")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if tc.path == "/openapi.json" {
				want, _ := OpenAPI("test")
				if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
					t.Fatalf("GET /openapi.json without a key: %d, %.200s", resp.StatusCode, body)
				}
			}
			// The validator reads the bodies again; the lines of a JSON
			// lines stream are each a reply of the chunk's schema.
			parts := [][]byte{body}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), mediaSSE) {
				// Each event's data against the documented event schema.
				events := sseValidator(t, data, tc.path)
				n := 0
				for _, line := range strings.Split(string(body), "\n") {
					d, ok := strings.CutPrefix(line, "data: ")
					if !ok || d == "[DONE]" {
						continue
					}
					n++
					ev, err := jsonschema.UnmarshalJSON(strings.NewReader(d))
					if err != nil {
						t.Fatalf("event data %q: %v", d, err)
					}
					if err := events.Validate(ev); err != nil {
						t.Errorf("event %s: %v", d, err)
					}
					var r struct{ Response struct{ ID string } }
					if json.Unmarshal([]byte(d), &r) == nil && r.Response.ID != "" {
						lastResponse = r.Response.ID
					}
				}
				if n < 3 {
					t.Fatalf("want a stream of several events, got %.300s", body)
				}
				return
			}
			if tc.path == "/v1/responses" {
				var r struct{ ID string }
				json.Unmarshal(body, &r)
				lastResponse = r.ID
			}
			if resp.Header.Get("Content-Type") == mediaNDJSON {
				parts = bytes.SplitAfter(bytes.TrimSpace(body), []byte("\n"))
				resp.Header.Set("Content-Type", "application/json")
			}
			if len(parts) < 2 && strings.Contains(tc.body, `"num_predict"`) && !strings.Contains(tc.body, `"stream":false`) {
				t.Fatalf("want a stream of several lines, got %.300s", body)
			}
			for _, part := range parts {
				req.Body = io.NopCloser(strings.NewReader(tc.body))
				resp.Body = io.NopCloser(bytes.NewReader(part))
				if ok, errs := v.ValidateHttpRequestResponse(req, resp); !ok {
					for _, e := range errs {
						t.Errorf("%d %.300s: %s: %s", resp.StatusCode, part, e.Message, e.Reason)
						for _, se := range e.SchemaValidationErrors {
							t.Errorf("  %s at %s", se.Reason, se.KeywordLocation)
						}
					}
				}
			}
		})
	}
}
