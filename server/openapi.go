package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The OpenAPI 3.1 document of the routes (GET /openapi.json, lem spec) is
// built from the route table (routes.go) and from the Go types of the
// requests and replies the handlers decode and encode, by reflection, so
// that it cannot drift from what is served:
//
//   - a named struct becomes a component schema (#/components/schemas),
//     its properties named by the json tags; embedded structs lend their
//     fields, as in encoding/json;
//   - in a reply, a field without omitempty or omitzero is required; in a
//     request nothing is (absent fields take their defaults, and the
//     handler names a missing one in its 400);
//   - pointers, and slices and maps without omitempty in replies, may be
//     null; json.RawMessage, interfaces and types with their own
//     UnmarshalJSON or MarshalJSON (unless listed in schemaOverrides) are
//     free-form: any JSON value;
//   - time.Time is a date-time string, []byte a base64 string;
//   - an interface listed in schemaUnions is one of its types (oneOf),
//     told apart by their "type" property, whose values a field's enum
//     tag lists (`enum:"message"`); so is a route's event given as a
//     list of values, one of each kind.

// Media types of streamed replies.
const (
	mediaSSE    = "text/event-stream"
	mediaNDJSON = "application/x-ndjson"
)

// schemaOverrides gives the schema of types whose JSON is not their Go
// shape.
var schemaOverrides = map[reflect.Type]func() map[string]any{
	reflect.TypeFor[stringList](): func() map[string]any {
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string"},
			map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		}}
	},
	reflect.TypeFor[time.Time](): func() map[string]any {
		return map[string]any{"type": "string", "format": "date-time"}
	},
}

// schemaUnions gives the types of the values an interface holds in JSON
// replies.
var schemaUnions = map[reflect.Type][]reflect.Type{
	reflect.TypeFor[respItem](): {
		reflect.TypeFor[*respMessage](), reflect.TypeFor[*respReasoning](), reflect.TypeFor[*respFunctionCall](),
	},
	reflect.TypeFor[anContent](): {
		reflect.TypeFor[anTextBlock](), reflect.TypeFor[anThinkingBlock](), reflect.TypeFor[anToolUseBlock](),
	},
	reflect.TypeFor[anDelta](): {
		reflect.TypeFor[anTextDelta](), reflect.TypeFor[anThinkingDelta](), reflect.TypeFor[anSignatureDelta](), reflect.TypeFor[anInputJSONDelta](),
	},
}

// OpenAPI returns the OpenAPI 3.1 document of every route a Server serves,
// as JSON; version is the lem version it names.
func OpenAPI(version string) ([]byte, error) {
	doc, err := openapiDoc((&Server{}).routeTable(), version)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("openapi: encoding the document: %w", err)
	}
	return append(b, '\n'), nil
}

// openapiDoc builds the document of the routes.
func openapiDoc(routes []route, version string) (map[string]any, error) {
	if version == "" {
		version = "dev"
	}
	g := &schemaGen{names: map[schemaKey]string{}, taken: map[string]reflect.Type{}, schemas: map[string]any{}}
	paths := map[string]map[string]any{}
	for _, rt := range routes {
		method, path, ok := strings.Cut(rt.pattern, " ")
		if !ok {
			return nil, fmt.Errorf("openapi: route %q has no method", rt.pattern)
		}
		path, params := openapiPath(path)
		op := map[string]any{
			"operationId": operationID(method, path),
			"summary":     rt.summary,
			"tags":        []string{rt.dialect},
			"responses":   g.responses(rt),
		}
		if rt.flags&open != 0 {
			op["security"] = []any{} // no API key needed
		}
		if len(params) > 0 {
			var ps []any
			for _, p := range params {
				ps = append(ps, map[string]any{"name": p, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
			op["parameters"] = ps
		}
		if rt.request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.request), false)},
			}}
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		m := strings.ToLower(method)
		if paths[path][m] != nil {
			return nil, fmt.Errorf("openapi: route %s %s is in the table twice", method, path)
		}
		paths[path][m] = op
	}
	var dialects []any
	seen := map[string]bool{}
	for _, rt := range routes {
		if !seen[rt.dialect] {
			seen[rt.dialect] = true
			dialects = append(dialects, map[string]any{"name": rt.dialect, "description": dialectDescriptions[rt.dialect]})
		}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "lem",
			"version": version,
			"description": "The routes lem serves, in the OpenAI, Anthropic and Ollama dialects. " +
				"Streamed replies (\"stream\": true) come as server-sent events (text/event-stream) " +
				"in the OpenAI and Anthropic dialects and as JSON lines (application/x-ndjson) in Ollama's; " +
				"GET routes answer HEAD too.",
		},
		"tags":  dialects,
		"paths": paths,
		"components": map[string]any{
			"schemas": g.schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer",
					"description": "The server's API key (lem serve --api-key), when it has one."},
				"apiKey": map[string]any{"type": "apiKey", "in": "header", "name": "x-api-key"},
			},
		},
		"security": []any{map[string]any{"bearer": []any{}}, map[string]any{"apiKey": []any{}}},
	}, nil
}

// dialectDescriptions describe the route table's dialects (OpenAPI tags).
var dialectDescriptions = map[string]string{
	"lem":       "lem's own routes",
	"OpenAI":    "OpenAI's API",
	"Anthropic": "Anthropic's Messages API",
	"Ollama":    "Ollama's API",
}

// openapiPath turns a ServeMux path into an OpenAPI path and its
// parameters: {id...} becomes {id}, and {$} (the exact path) goes.
func openapiPath(p string) (string, []string) {
	p = strings.ReplaceAll(p, "{$}", "")
	var params []string
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			name := strings.TrimSuffix(strings.Trim(s, "{}"), "...")
			params = append(params, name)
			parts[i] = "{" + name + "}"
		}
	}
	p = strings.Join(parts, "/")
	if p == "" {
		p = "/"
	}
	return p, params
}

// operationID names an operation after its method and path:
// "post_v1_chat_completions".
func operationID(method, path string) string {
	id := strings.ToLower(method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "_").Replace(path)
	return strings.TrimSuffix(id, "_")
}

// noBody is the response of a route whose success has an empty body (as
// Ollama's /api/copy and /api/delete answer).
type noBody struct{}

// responses returns an operation's responses: the reply (JSON, streamed,
// or another media type) and the dialect's error.
func (g *schemaGen) responses(rt route) map[string]any {
	if _, ok := rt.response.(noBody); ok {
		out := map[string]any{"200": map[string]any{"description": "OK, with an empty body"}}
		if rt.errors != nil {
			out["default"] = map[string]any{"description": "An error, in the dialect's shape",
				"content": map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.errorBody), true)}}}
		}
		return out
	}
	content := map[string]any{}
	switch {
	case rt.media != "":
		content[rt.media] = map[string]any{"schema": map[string]any{"type": "string"}}
	case rt.response != nil:
		content["application/json"] = map[string]any{"schema": g.schema(reflect.TypeOf(rt.response), true)}
	default:
		content["application/json"] = map[string]any{"schema": map[string]any{}}
	}
	switch rt.stream {
	case mediaSSE:
		sse := map[string]any{"type": "string",
			"description": "Server-sent events, when the request asks to stream."}
		if rt.event != nil {
			// Each event's data is JSON of the event's type.
			sse["description"] = "Server-sent events, when the request asks to stream; each event's data is JSON of contentSchema."
			sse["contentMediaType"] = "application/json"
			if kinds, ok := rt.event.([]any); ok {
				var types []reflect.Type
				for _, k := range kinds {
					types = append(types, reflect.TypeOf(k))
				}
				sse["contentSchema"] = g.oneOf(types, true)
			} else {
				sse["contentSchema"] = g.schema(reflect.TypeOf(rt.event), true)
			}
		}
		content[mediaSSE] = map[string]any{"schema": sse}
	case mediaNDJSON:
		// Each line is one chunk of the reply's type.
		content[mediaNDJSON] = map[string]any{"schema": g.schema(reflect.TypeOf(rt.response), true)}
	}
	out := map[string]any{"200": map[string]any{"description": "OK", "content": content}}
	if rt.errors != nil {
		out["default"] = map[string]any{"description": "An error, in the dialect's shape",
			"content": map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.errorBody), true)}}}
	}
	return out
}

// schemaKey identifies a component: a type, as a request (false) or a
// reply (true).
type schemaKey struct {
	t     reflect.Type
	reply bool
}

// schemaGen builds JSON Schemas of Go types, the named structs as
// components.
type schemaGen struct {
	names   map[schemaKey]string
	taken   map[string]reflect.Type
	schemas map[string]any
}

// schema returns the schema of t in a request or a reply.
func (g *schemaGen) schema(t reflect.Type, reply bool) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	if f := schemaOverrides[t]; f != nil {
		return f()
	}
	if types := schemaUnions[t]; types != nil {
		return g.oneOf(types, reply)
	}
	if t.Kind() != reflect.Pointer && (t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler)) && t.Kind() != reflect.Struct {
		return map[string]any{} // its own JSON: any value
	}
	switch t.Kind() {
	case reflect.Pointer:
		return nullable(g.schema(t.Elem(), reply))
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		items := g.schema(t.Elem(), reply)
		if k := t.Elem().Kind(); reply && (k == reflect.Map || k == reflect.Slice) && schemaOverrides[t.Elem()] == nil {
			items = nullable(items) // a nil map or slice in a list is null
		}
		return map[string]any{"type": "array", "items": items}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem(), reply)}
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t, reply)
		}
		return map[string]any{"$ref": "#/components/schemas/" + g.component(t, reply)}
	}
	return map[string]any{} // interfaces: any value
}

// oneOf returns the schema of a value of one of the types; the types'
// "type" properties (enums) tell them apart.
func (g *schemaGen) oneOf(types []reflect.Type, reply bool) map[string]any {
	var kinds []any
	for _, t := range types {
		if t.Kind() == reflect.Pointer {
			t = t.Elem() // a non-nil pointer: the value
		}
		kinds = append(kinds, g.schema(t, reply))
	}
	return map[string]any{"oneOf": kinds}
}

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// component names the component of a named struct, building it the
// first time.
func (g *schemaGen) component(t reflect.Type, reply bool) string {
	k := schemaKey{t, reply}
	if name, ok := g.names[k]; ok {
		return name
	}
	name := t.Name()
	if other, ok := g.taken[name]; ok && other != t || g.names[schemaKey{t, !reply}] != "" {
		// The same name for another type, or this type on the other side.
		name = name + "_" + strings.ReplaceAll(t.PkgPath(), "/", "_")
		if reply {
			name += "_reply"
		}
	}
	g.names[k] = name
	g.taken[name] = t
	g.schemas[name] = map[string]any{} // for recursive types
	g.schemas[name] = g.object(t, reply)
	return name
}

// object returns the schema of a struct's fields, as encoding/json
// writes them.
func (g *schemaGen) object(t reflect.Type, reply bool) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, reply, false, props, &required)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	return s
}

// fields adds the JSON fields of struct t, its embedded structs' included,
// to props; a field named at a shallower depth wins, as in encoding/json.
// The fields of an embedded pointer (optional) may be absent.
func (g *schemaGen) fields(t reflect.Type, reply, optional bool, props map[string]any, required *[]string) {
	type embed struct {
		t        reflect.Type
		optional bool
	}
	var embedded []embed
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			e := embed{ft, optional}
			if ft.Kind() == reflect.Pointer {
				e = embed{ft.Elem(), true}
			}
			if e.t.Kind() == reflect.Struct {
				embedded = append(embedded, e)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := props[name]; ok {
			continue
		}
		omit := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		s := g.schema(ft, reply)
		if enum := f.Tag.Get("enum"); enum != "" {
			s = maps.Clone(s)
			var values []any
			for _, v := range strings.Split(enum, ",") {
				values = append(values, v)
			}
			s["enum"] = values
		}
		if reply && !omit && (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map) && schemaOverrides[ft] == nil {
			s = nullable(s) // a nil slice or map is null
		}
		props[name] = s
		if reply && !omit && !optional {
			*required = append(*required, name)
		}
	}
	for _, e := range embedded {
		g.fields(e.t, reply, e.optional, props, required)
	}
}

// nullable returns s that also accepts null.
func nullable(s map[string]any) map[string]any {
	if len(s) == 0 {
		return s // already any value
	}
	if typ, ok := s["type"].(string); ok {
		c := map[string]any{}
		for k, v := range s {
			c[k] = v
		}
		c["type"] = []any{typ, "null"}
		return c
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// serveOpenAPI answers GET /openapi.json.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	b, err := OpenAPI(s.cfg.Version)
	if err != nil {
		s.log.Error("building the OpenAPI document", "error", err)
		openaiErrors(w, internalError())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
