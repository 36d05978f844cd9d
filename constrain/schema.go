package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A Schema is a JSON Schema compiled for constrained decoding: output held
// to it is a JSON value the schema accepts. It supports objects with
// properties, required and additionalProperties, arrays with items,
// minItems and maxItems, the types string, number, integer, boolean and
// null (alone or as a list), enum, const, anyOf and oneOf whose
// alternatives begin differently (such as a type or null), nullable, and
// local $ref into $defs or definitions. Strings take minLength and
// maxLength (in characters), the formats date-time, date, time, email,
// uuid, ipv4 and uri, and pattern (see compilePattern for the subset);
// integers take minimum, maximum, exclusiveMinimum, exclusiveMaximum
// and a whole multipleOf, and numbers the four bounds with up to 6
// decimal places (a bounded number is written without an exponent and
// with at most 18 digits before its bounds' last decimal place).
// Annotations (title, description, default, examples, …) are
// ignored.
//
// An object's output holds only its declared properties (any of them, in
// any order, each at most once, the required ones always), so that
// additionalProperties makes no difference once properties are declared;
// an object that declares none takes any keys, with values of its
// additionalProperties schema. White space between tokens is limited to
// short runs, and numbers to 24 digits on each side of the point, so that
// a model cannot run on forever without producing the value.
type Schema struct {
	root    *node
	skipped []string
}

// Unenforced lists the keywords that CompileSchemaLax left out, each as
// the JSON pointer of the keyword in the schema ("/properties/a/not").
func (s *Schema) Unenforced() []string { return s.skipped }

// A SchemaError reports a schema that CompileSchema cannot enforce.
type SchemaError struct {
	// Path is the JSON pointer of the (sub)schema at fault, "" for the
	// root.
	Path string
	// Keyword is the keyword at fault.
	Keyword string
	Msg     string
}

func (e *SchemaError) Error() string {
	at := e.Path
	if at == "" {
		at = "the root"
	}
	if e.Keyword == "" {
		return fmt.Sprintf("schema at %s: %s", at, e.Msg)
	}
	return fmt.Sprintf("schema keyword %q at %s: %s", e.Keyword, at, e.Msg)
}

// kind is what a schema node accepts.
type kind uint8

const (
	kAny     kind = iota // any JSON value
	kObject              // an object (props, or any keys when none are declared)
	kArray               // an array of items
	kString              // any string
	kNumber              // any number
	kInteger             // a number without fraction or exponent
	kLiteral             // one of lits (enum, const, boolean, null)
	kUnion               // one of alts, told apart by the first byte
)

// node is a compiled schema.
type node struct {
	kind kind

	// kObject: declared properties sorted by their JSON-encoded keys
	// (keys[i] is `"name"`), the required ones as a bit set; extra is
	// the schema of values under undeclared keys when none are declared
	// (nil: no keys at all when closed, any values when open).
	keys     [][]byte
	props    []*node
	required uint64
	open     bool
	extra    *node

	// kArray.
	items              *node
	minItems, maxItems int // maxItems 0: unbounded

	// kString: lengths, format and pattern (nil: any string).
	str *strCons

	// kNumber, kInteger: bounds and multipleOf (nil: any).
	num *numCons

	// kLiteral: the JSON texts accepted, sorted.
	lits [][]byte

	// kUnion: the alternative chosen by a value's first byte (index+1,
	// 0: none).
	alts []*node
	pick [256]uint8
}

// Shared nodes of values without a schema.
var (
	anyNode     = &node{kind: kAny}
	anyObject   = &node{kind: kObject, open: true}
	anyArray    = &node{kind: kArray, items: anyNode}
	anyLiterals = &node{kind: kLiteral, lits: [][]byte{[]byte("false"), []byte("null"), []byte("true")}}
	boolNode    = &node{kind: kLiteral, lits: [][]byte{[]byte("false"), []byte("true")}}
	nullNode    = &node{kind: kLiteral, lits: [][]byte{[]byte("null")}}
	stringNode  = &node{kind: kString}
	numberNode  = &node{kind: kNumber}
)

// maxProps bounds the declared properties of one object.
const maxProps = 64

// maxLiterals bounds an enum.
const maxLiterals = 4096

// annotations are the keywords that do not constrain a value.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "$anchor": true, "contentMediaType": true,
	"contentEncoding": true,
}

// CompileSchema compiles a JSON Schema for output that must satisfy it. A
// keyword it cannot enforce (allOf, not, format hostname, …) is an error
// naming it, as is a schema it cannot hold output to (anyOf alternatives
// that begin alike, a property required but not declared). The error is
// a *SchemaError for schema content, or a JSON syntax error.
func CompileSchema(raw []byte) (*Schema, error) {
	return compileSchema(raw, true, false)
}

// CompileSchemaLax compiles a JSON Schema as CompileSchema does, except
// that a keyword it cannot enforce is left out, as an annotation, and
// listed by the schema's Unenforced.
func CompileSchemaLax(raw []byte) (*Schema, error) {
	return compileSchema(raw, true, true)
}

// CompileToolSchema compiles the parameters schema of a tool for the
// arguments of a call. It does what it can: keywords it cannot enforce are
// left out (the arguments keep the shape the rest of the schema gives
// them), unions it cannot tell apart take any value, and a missing or
// malformed schema, or one that is not of an object, takes any object.
func CompileToolSchema(raw []byte) *Schema {
	s, err := compileSchema(raw, false, false)
	if err != nil || (s.root.kind != kObject && s.root.kind != kAny) {
		return &Schema{root: anyObject}
	}
	if s.root.kind == kAny {
		s.root = anyObject
	}
	return s
}

func compileSchema(raw []byte, strict, lax bool) (*Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		if strict {
			return nil, &SchemaError{Msg: "is empty"}
		}
		return &Schema{root: anyObject}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := &compiler{doc: doc, strict: strict, lax: lax, refs: map[string]*node{}}
	n, err := c.compile(doc, "", 0)
	if err != nil {
		return nil, err
	}
	return &Schema{root: n, skipped: c.skipped}, nil
}

// compiler compiles one schema document.
type compiler struct {
	doc     any
	strict  bool
	lax     bool             // keywords not enforced are left out and listed
	skipped []string         // the keywords left out
	refs    map[string]*node // compiled $ref targets by pointer
}

// maxSchemaDepth bounds the nesting of subschemas (and $ref chains).
const maxSchemaDepth = 64

func (c *compiler) fail(path, kw, format string, args ...any) error {
	return &SchemaError{Path: path, Keyword: kw, Msg: fmt.Sprintf(format, args...)}
}

// compile compiles the subschema v found at path.
func (c *compiler) compile(v any, path string, depth int) (*node, error) {
	if depth > maxSchemaDepth {
		return nil, c.fail(path, "", "nests more than %d deep", maxSchemaDepth)
	}
	switch v := v.(type) {
	case bool:
		if v {
			return anyNode, nil
		}
		if c.strict {
			return nil, c.fail(path, "", "the schema false accepts no value")
		}
		return anyNode, nil
	case map[string]any:
		return c.compileObject(v, path, depth)
	}
	if c.strict {
		return nil, c.fail(path, "", "want a JSON object or a boolean, got %s", jsonKind(v))
	}
	return anyNode, nil
}

func (c *compiler) compileObject(s map[string]any, path string, depth int) (*node, error) {
	// Reject what cannot be enforced, in a stable order.
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if c.strict {
		for _, k := range keys {
			if !annotations[k] && !supported[k] {
				if err := c.unenforced(path, k, "is not supported"); err != nil {
					return nil, err
				}
			}
		}
	}

	if ref, ok := s["$ref"]; ok {
		if c.strict {
			for _, k := range keys {
				if k != "$ref" && !annotations[k] {
					if err := c.unenforced(path, k, "is not supported beside $ref"); err != nil {
						return nil, err
					}
				}
			}
		}
		return c.ref(ref, path, depth)
	}
	if v, ok := s["const"]; ok {
		return c.literals([]any{v}, path+"/const", "const")
	}
	if v, ok := s["enum"]; ok {
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			if c.strict {
				return nil, c.fail(path, "enum", "want a non-empty array")
			}
			return anyNode, nil
		}
		return c.literals(list, path+"/enum", "enum")
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		v, ok := s[kw]
		if !ok {
			continue
		}
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			if c.strict {
				return nil, c.fail(path, kw, "want a non-empty array")
			}
			return anyNode, nil
		}
		var alts []*node
		for i, sub := range list {
			n, err := c.compile(sub, fmt.Sprintf("%s/%s/%d", path, kw, i), depth+1)
			if err != nil {
				return nil, err
			}
			alts = append(alts, n)
		}
		return c.union(alts, path, kw)
	}

	var types []string
	switch t := s["type"].(type) {
	case nil:
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			name, ok := x.(string)
			if !ok {
				if c.strict {
					return nil, c.fail(path, "type", "want a type name or a list of them")
				}
				continue
			}
			types = append(types, name)
		}
	default:
		if c.strict {
			return nil, c.fail(path, "type", "want a type name or a list of them")
		}
	}
	if len(types) == 0 {
		// Infer the type from the keywords, as loose schemas expect.
		switch {
		case s["properties"] != nil || s["required"] != nil || s["additionalProperties"] != nil:
			types = []string{"object"}
		case s["items"] != nil || s["minItems"] != nil || s["maxItems"] != nil:
			types = []string{"array"}
		case s["minLength"] != nil || s["maxLength"] != nil || s["pattern"] != nil || s["format"] != nil:
			types = []string{"string"}
		case s["minimum"] != nil || s["maximum"] != nil || s["exclusiveMinimum"] != nil || s["exclusiveMaximum"] != nil || s["multipleOf"] != nil:
			types = []string{"number"}
		}
	}
	if nullable, _ := s["nullable"].(bool); nullable && len(types) > 0 && !slices.Contains(types, "null") {
		types = append(types, "null")
	}
	if len(types) == 0 {
		return anyNode, nil
	}
	var alts []*node
	for _, t := range types {
		var n *node
		var err error
		switch t {
		case "object":
			n, err = c.object(s, path, depth)
		case "array":
			n, err = c.array(s, path, depth)
		case "string":
			n, err = c.str(s, path)
		case "number":
			n, err = c.num(s, path, false)
		case "integer":
			n, err = c.num(s, path, true)
		case "boolean":
			n = boolNode
		case "null":
			n = nullNode
		default:
			if c.strict {
				return nil, c.fail(path, "type", "unknown type %q", t)
			}
			n = anyNode
		}
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.union(alts, path, "type")
}

// supported are the keywords CompileSchema enforces.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
	"anyOf": true, "oneOf": true, "$ref": true, "nullable": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"multipleOf": true,
}

// ref compiles a $ref: a JSON pointer into the document ("#", "#/$defs/x").
func (c *compiler) ref(v any, path string, depth int) (*node, error) {
	ref, _ := v.(string)
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok {
		if c.strict {
			return nil, c.fail(path, "$ref", "only references inside the schema (#/…) are supported, got %q", ref)
		}
		return anyNode, nil
	}
	if n := c.refs[ptr]; n != nil {
		return n, nil
	}
	target, err := resolvePointer(c.doc, ptr)
	if err != nil {
		if c.strict {
			return nil, c.fail(path, "$ref", "%q: %v", ref, err)
		}
		return anyNode, nil
	}
	// A placeholder first, so that a recursive reference finds it.
	n := &node{}
	c.refs[ptr] = n
	got, err := c.compile(target, ptr, depth+1)
	if err != nil {
		return nil, err
	}
	*n = *got
	return n, nil
}

// resolvePointer follows a JSON pointer (RFC 6901) into doc.
func resolvePointer(doc any, ptr string) (any, error) {
	if ptr == "" {
		return doc, nil
	}
	if ptr[0] != '/' {
		return nil, fmt.Errorf("not a JSON pointer")
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("no element %q", tok)
			}
			cur = x[i]
		default:
			return nil, fmt.Errorf("no %q", tok)
		}
	}
	return cur, nil
}

func (c *compiler) object(s map[string]any, path string, depth int) (*node, error) {
	n := &node{kind: kObject}
	props, _ := s["properties"].(map[string]any)
	if s["properties"] != nil && props == nil && c.strict {
		return nil, c.fail(path, "properties", "want an object")
	}
	if len(props) > maxProps {
		if c.strict {
			return nil, c.fail(path, "properties", "at most %d properties are supported, got %d", maxProps, len(props))
		}
		return anyObject, nil
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	type prop struct {
		key  []byte
		name string
	}
	list := make([]prop, len(names))
	for i, name := range names {
		list[i] = prop{key: encodeJSON(name), name: name}
	}
	slices.SortFunc(list, func(a, b prop) int { return bytes.Compare(a.key, b.key) })
	index := map[string]int{}
	for i, p := range list {
		sub, err := c.compile(props[p.name], path+"/properties/"+escapePointer(p.name), depth+1)
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, p.key)
		n.props = append(n.props, sub)
		index[p.name] = i
	}
	if req, ok := s["required"]; ok {
		list, ok := req.([]any)
		if !ok && c.strict {
			return nil, c.fail(path, "required", "want an array of property names")
		}
		for _, x := range list {
			name, _ := x.(string)
			i, ok := index[name]
			if !ok {
				if c.strict {
					return nil, c.fail(path, "required", "names %q, which is not among the properties", name)
				}
				continue
			}
			n.required |= 1 << i
		}
	}
	if len(n.props) == 0 {
		switch ap := s["additionalProperties"].(type) {
		case nil:
			n.open = true
		case bool:
			n.open = ap
		default:
			sub, err := c.compile(ap, path+"/additionalProperties", depth+1)
			if err != nil {
				return nil, err
			}
			n.open, n.extra = true, sub
		}
	} else if ap, ok := s["additionalProperties"]; ok {
		// Declared properties only, whatever it says; it must still be
		// a schema.
		if _, isBool := ap.(bool); !isBool {
			if _, err := c.compile(ap, path+"/additionalProperties", depth+1); err != nil {
				return nil, err
			}
		}
	}
	return n, nil
}

func (c *compiler) array(s map[string]any, path string, depth int) (*node, error) {
	n := &node{kind: kArray, items: anyNode}
	if it, ok := s["items"]; ok {
		if _, isList := it.([]any); isList {
			if err := c.unenforced(path, "items", "tuples (a list of schemas) are not supported"); err != nil {
				return nil, err
			}
		} else {
			sub, err := c.compile(it, path+"/items", depth+1)
			if err != nil {
				return nil, err
			}
			n.items = sub
		}
	}
	var err error
	if n.minItems, err = c.count(s, "minItems", path); err != nil {
		return nil, err
	}
	if n.maxItems, err = c.count(s, "maxItems", path); err != nil {
		return nil, err
	}
	if _, set := s["maxItems"]; set && n.maxItems == 0 {
		n.maxItems = -1 // only []
	}
	if n.maxItems > 0 && n.minItems > n.maxItems {
		if c.strict {
			return nil, c.fail(path, "minItems", "%d is more than maxItems %d", n.minItems, n.maxItems)
		}
		n.minItems = 0
	}
	return n, nil
}

// count reads a non-negative integer keyword (0 when absent).
func (c *compiler) count(s map[string]any, kw, path string) (int, error) {
	v, ok := s[kw]
	if !ok {
		return 0, nil
	}
	num, _ := v.(json.Number)
	i, err := strconv.Atoi(string(num))
	if err != nil || i < 0 || i > 1<<20 {
		if c.strict {
			return 0, c.fail(path, kw, "want a non-negative integer, got %v", v)
		}
		return 0, nil
	}
	return i, nil
}

// literals compiles enum or const values: the output is one of their JSON
// texts, written compactly.
func (c *compiler) literals(list []any, path, kw string) (*node, error) {
	if len(list) > maxLiterals {
		if c.strict {
			return nil, c.fail(path, kw, "at most %d values are supported, got %d", maxLiterals, len(list))
		}
		return anyNode, nil
	}
	n := &node{kind: kLiteral}
	for _, v := range list {
		n.lits = append(n.lits, encodeJSON(v))
	}
	slices.SortFunc(n.lits, bytes.Compare)
	n.lits = slices.CompactFunc(n.lits, bytes.Equal)
	return n, nil
}

// union compiles alternatives that a value's first byte tells apart.
func (c *compiler) union(alts []*node, path, kw string) (*node, error) {
	var flat []*node
	for _, a := range alts {
		if a.kind == kUnion {
			flat = append(flat, a.alts...)
		} else {
			flat = append(flat, a)
		}
	}
	// A number takes integers; literals join.
	hasNumber := slices.ContainsFunc(flat, func(a *node) bool { return a.kind == kNumber })
	var lits [][]byte
	var out []*node
	for _, a := range flat {
		switch {
		case a.kind == kAny:
			return anyNode, nil
		case a.kind == kInteger && hasNumber:
		case a.kind == kLiteral:
			lits = append(lits, a.lits...)
		default:
			out = append(out, a)
		}
	}
	if len(lits) > 0 {
		l := &node{kind: kLiteral, lits: lits}
		slices.SortFunc(l.lits, bytes.Compare)
		l.lits = slices.CompactFunc(l.lits, bytes.Equal)
		out = append(out, l)
	}
	if len(out) == 1 {
		return out[0], nil
	}
	n := &node{kind: kUnion, alts: out}
	for i, a := range out {
		for b := range 256 {
			if !startsWith(a, byte(b)) {
				continue
			}
			if n.pick[b] != 0 {
				if err := c.unenforced(path, kw, "alternatives %d and %d can both begin with %q; only alternatives that begin differently (such as a type or null) are supported", n.pick[b]-1, i, byte(b)); err != nil {
					return nil, err
				}
				return anyNode, nil
			}
			n.pick[b] = uint8(i + 1)
		}
	}
	return n, nil
}

// startsWith reports whether a value of n may begin with byte b.
func startsWith(n *node, b byte) bool {
	switch n.kind {
	case kAny:
		return valueStart(b)
	case kObject:
		return b == '{'
	case kArray:
		return b == '['
	case kString:
		return b == '"'
	case kNumber, kInteger:
		return b == '-' || b >= '0' && b <= '9'
	case kLiteral:
		return slices.ContainsFunc(n.lits, func(l []byte) bool { return l[0] == b })
	case kUnion:
		return n.pick[b] != 0
	}
	return false
}

// valueStart reports whether a JSON value may begin with b.
func valueStart(b byte) bool {
	return strings.IndexByte(`{["-0123456789tfn`, b) >= 0
}

// encodeJSON writes v as compact JSON, without escaping HTML characters.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// Check reports whether b is a prefix of output the schema allows, and
// whether it is a complete value.
func (s *Schema) Check(b []byte) (prefix, complete bool) {
	v := newValue(s.root)
	for _, c := range b {
		if !v.step(c) {
			return false, false
		}
	}
	return true, v.complete()
}
