package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

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

// TestOpenAPIReplies validates real replies of a running server against
// the document, and serves the document without an API key.
func TestOpenAPIReplies(t *testing.T) {
	_, v := openapiDocument(t)
	_, ts := newTestServer(t, Config{APIKey: "k", Version: "test"})
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
		{"POST", "/v1/messages/count_tokens", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/messages", `{"model":"nope","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/api/chat", `{"model":"nope","messages":[]}`},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
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
