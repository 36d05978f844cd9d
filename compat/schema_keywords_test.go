package compat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/pb33f/jsonschema/v6"

	"github.com/lem-engine/lem/server"
)

// personSchema has the keywords Pydantic and Zod emit: pattern, string
// and array lengths, numeric bounds, enum and formats.
const personSchema = `{"type":"object","properties":{
	"name":{"type":"string","minLength":1,"maxLength":8},
	"code":{"type":"string","pattern":"^[A-Z]{2}[0-9]{2}$"},
	"age":{"type":"integer","minimum":18,"maximum":99},
	"score":{"type":"number","minimum":0,"maximum":1},
	"city":{"enum":["Tokyo","Paris"]},
	"born":{"type":"string","format":"date"},
	"mail":{"type":"string","format":"email","maxLength":24},
	"tags":{"type":"array","items":{"type":"string","maxLength":4},"minItems":1,"maxItems":3}
},"required":["name","code","age","score","city","born","mail","tags"],"additionalProperties":false}`

// compileSchema compiles a JSON Schema with its formats asserted.
func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("person.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("person.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOpenAIStructuredOutputKeywords asks for structured output with a
// schema of the keywords structured-output libraries emit, through the
// SDK: the reply validates against the schema. A keyword lem cannot
// enforce (uniqueItems) is named in the Lem-Schema-Unenforced header
// without strict, and refused, named, under strict.
func TestOpenAIStructuredOutputKeywords(t *testing.T) {
	base, _ := startServer(t, server.Config{})
	client := newClient(base)
	ctx := context.Background()
	var schema map[string]any
	if err := json.Unmarshal([]byte(personSchema), &schema); err != nil {
		t.Fatal(err)
	}
	format := func(s map[string]any, strict bool) openai.ChatCompletionNewParamsResponseFormatUnion {
		p := shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "person", Schema: s}
		if strict {
			p.Strict = openai.Bool(true)
		}
		return openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: p}}
	}
	p := greedy(openai.UserMessage("A person, in JSON."))
	p.MaxTokens = openai.Int(600)

	t.Run("strict", func(t *testing.T) {
		p := p
		p.ResponseFormat = format(schema, true)
		var raw *http.Response
		res, err := client.Chat.Completions.New(ctx, p, noThinking, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if h := raw.Header.Get("Lem-Schema-Unenforced"); h != "" {
			t.Errorf("Lem-Schema-Unenforced = %q, want none: every keyword is enforced", h)
		}
		c := res.Choices[0]
		if c.FinishReason != "stop" {
			t.Fatalf("finish %q: %q", c.FinishReason, c.Message.Content)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(c.Message.Content))
		if err != nil {
			t.Fatalf("%q: %v", c.Message.Content, err)
		}
		if err := compileSchema(t, personSchema).Validate(v); err != nil {
			t.Errorf("%s does not validate: %v", c.Message.Content, err)
		}
	})

	// uniqueItems is an annotation unless the client asks for strict.
	unique := map[string]any{}
	for k, v := range schema {
		unique[k] = v
	}
	props := map[string]any{}
	for k, v := range schema["properties"].(map[string]any) {
		props[k] = v
	}
	props["tags"] = map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3, "uniqueItems": true}
	unique["properties"] = props

	t.Run("unenforced", func(t *testing.T) {
		p := p
		p.ResponseFormat = format(unique, false)
		var raw *http.Response
		res, err := client.Chat.Completions.New(ctx, p, noThinking, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if h := raw.Header.Get("Lem-Schema-Unenforced"); h != "/properties/tags/uniqueItems" {
			t.Errorf("Lem-Schema-Unenforced = %q, want /properties/tags/uniqueItems", h)
		}
		// The rest of the schema still holds.
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(res.Choices[0].Message.Content))
		if err != nil {
			t.Fatalf("%q: %v", res.Choices[0].Message.Content, err)
		}
		if err := compileSchema(t, personSchema).Validate(v); err != nil {
			t.Errorf("%s does not validate: %v", res.Choices[0].Message.Content, err)
		}
	})

	t.Run("unenforced strict", func(t *testing.T) {
		p := p
		p.ResponseFormat = format(unique, true)
		_, err := client.Chat.Completions.New(ctx, p, noThinking)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message+apiErr.Param, "uniqueItems") {
			t.Errorf("uniqueItems under strict: %v, want a 400 naming uniqueItems", err)
		}
	})
}
