package constrain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

var (
	grammarOnce  sync.Once
	grammarModel *engine.Model
	grammarVocab *constrain.Vocab
	grammarErr   error
)

// openGrammarModel loads the trained chat model and its vocabulary table
// once.
func openGrammarModel(t *testing.T) (*engine.Model, *constrain.Vocab) {
	t.Helper()
	dir := fixtures.Dir(t, "chat-model")
	grammarOnce.Do(func() {
		if grammarModel, grammarErr = engine.Open(dir, engine.Options{Backend: cpu.New(0)}); grammarErr != nil {
			return
		}
		grammarVocab, grammarErr = constrain.NewVocab(grammarModel.Tokenizer)
	})
	if grammarErr != nil {
		t.Fatal(grammarErr)
	}
	return grammarModel, grammarVocab
}

const testTools = `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
 {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]`

var hermes = constrain.CallSyntax{Call: "<tool_call>\n{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}\n</tool_call>"}

// render renders one user question with the model's template.
func render(t *testing.T, m *engine.Model, question string, tools bool, kwargs map[string]any) string {
	t.Helper()
	in := chat.Input{Messages: []chat.Message{{Role: "user", Content: chat.Text(question)}}, AddGenerationPrompt: true, Kwargs: kwargs}
	if tools {
		var list []json.RawMessage
		if err := json.Unmarshal([]byte(testTools), &list); err != nil {
			t.Fatal(err)
		}
		in.Tools = list
	}
	text, err := m.Templates.Default().Render(in)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// generateWith generates from prompt under a grammar, checking that every
// token the engine chose was one the constraint allowed.
func generateWith(t *testing.T, m *engine.Model, g *constrain.Grammar, prompt string, sp engine.SampleParams, maxTokens int) (*engine.Result, *constrain.State) {
	t.Helper()
	c := g.New(m.StopIDs)
	res, err := m.Generate(context.Background(), m.NewSession(0), engine.Request{
		Prompt: m.Tokenizer.Encode(prompt, false), Sample: sp, MaxTokens: maxTokens, Constraint: c,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Err() != nil {
		t.Fatalf("%v (output %q)", c.Err(), res.Text)
	}
	return res, c
}

// toolTools returns the test tools for a spec, the named one only when
// name is set.
func specTools(name string) []constrain.Tool {
	var list []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	json.Unmarshal([]byte(testTools), &list)
	var out []constrain.Tool
	for _, tl := range list {
		if name == "" || tl.Function.Name == name {
			out = append(out, constrain.Tool{Name: tl.Function.Name, Params: constrain.CompileToolSchema(tl.Function.Parameters)})
		}
	}
	return out
}

// parseCall finds the one Hermes tool call after any reasoning.
func parseCall(t *testing.T, text string) (name string, args json.RawMessage) {
	t.Helper()
	if _, after, ok := strings.Cut(text, "</think>"); ok {
		text = after
	}
	text = strings.TrimLeft(text, " \n")
	body, ok := strings.CutPrefix(text, "<tool_call>\n")
	if !ok {
		t.Fatalf("output %q does not start with a tool call", text)
	}
	body, ok = strings.CutSuffix(body, "\n</tool_call>")
	if !ok {
		t.Fatalf("output %q does not end with the call", text)
	}
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(body), &call); err != nil {
		t.Fatalf("call %q: %v", body, err)
	}
	return call.Name, call.Arguments
}

func TestGrammarToolCalls(t *testing.T) {
	m, v := openGrammarModel(t)
	for _, tc := range []struct {
		name     string
		question string
		think    bool
		only     string // the named tool
		want     string // the name it must call ("": any declared)
	}{
		{"required answers a question with a call", "What is the capital of Japan?", false, "", ""},
		{"required after reasoning", "What is the capital of Japan?", true, "", ""},
		{"required keeps the model's own call", "What's the weather in Paris?", false, "", "get_weather"},
		{"named overrides the model's choice", "What's the weather in Paris?", false, "add", "add"},
		{"named after reasoning", "What is 12 + 30?", true, "get_weather", "get_weather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := render(t, m, tc.question, true, map[string]any{"enable_thinking": tc.think})
			tools := specTools(tc.only)
			g, err := v.Compile(constrain.Spec{ThinkStart: "<think>", ThinkEnd: "</think>",
				Tools: &constrain.ToolCalls{Syntax: hermes, Tools: tools, Multiple: tc.only == ""}})
			if err != nil {
				t.Fatal(err)
			}
			for seed := range uint64(3) {
				sp := engine.SampleParams{}
				if seed > 0 {
					sp = engine.SampleParams{Temperature: 1, Seed: seed, HasSeed: true}
				}
				res, c := generateWith(t, m, g, prompt, sp, 120)
				if res.StopReason != engine.StopToken {
					t.Fatalf("seed %d: %q did not end (%s)", seed, res.Text, res.StopReason)
				}
				t.Logf("seed %d: %q", seed, res.Text)
				if tc.think && seed == 0 && !strings.HasPrefix(res.Text, "<think>") {
					t.Errorf("seed %d: no reasoning before the call: %q", seed, res.Text)
				}
				name, args := parseCall(t, res.Text)
				var schema *constrain.Schema
				for _, tl := range tools {
					if tl.Name == name {
						schema = tl.Params
					}
				}
				if schema == nil || tc.want != "" && name != tc.want {
					t.Fatalf("seed %d: called %q", seed, name)
				}
				if _, complete := schema.Check(args); !complete {
					t.Errorf("seed %d: arguments %s do not fit %s's schema", seed, args, name)
				}
				if tc.only != "" && !c.Done() {
					t.Errorf("seed %d: a named call must end the output", seed)
				}
			}
		})
	}
}

func TestGrammarThinking(t *testing.T) {
	m, v := openGrammarModel(t)
	tok := m.Tokenizer
	end, ok := tok.TokenID("</think>")
	if !ok {
		t.Fatal("no </think> token")
	}
	prompt := render(t, m, "What is the capital of Japan?", false, nil)
	const free = "<think>\nThe user asks for the capital of Japan. It is Tokyo.\n</think>\n\nThe capital of Japan is Tokyo."
	for _, tc := range []struct {
		name   string
		spec   constrain.Spec
		prompt string
		check  func(t *testing.T, res *engine.Result)
	}{
		{"a large budget changes nothing", constrain.Spec{ThinkBudget: 100}, prompt, func(t *testing.T, res *engine.Result) {
			if res.Text != free {
				t.Errorf("got %q, want %q", res.Text, free)
			}
		}},
		{"budget of 4 reasoning tokens", constrain.Spec{ThinkBudget: 4}, prompt, func(t *testing.T, res *engine.Result) {
			i := indexOf(res.IDs, end)
			// <think>, then 4 tokens of reasoning, then </think>.
			if i < 0 || i > 5 || res.IDs[0] != mustID(t, tok, "<think>") {
				t.Errorf("</think> at token %d of %q", i, res.Text)
			}
			if !strings.Contains(res.Text[strings.Index(res.Text, "</think>"):], "Tokyo") {
				t.Errorf("no answer after the forced end of reasoning: %q", res.Text)
			}
		}},
		{"budget of 1 inside open reasoning", constrain.Spec{ThinkBudget: 1, InReasoning: true}, prompt + "<think>\n", func(t *testing.T, res *engine.Result) {
			if i := indexOf(res.IDs, end); i != 1 {
				t.Errorf("</think> at token %d of %q, want 1", i, res.Text)
			}
		}},
		{"no thinking", constrain.Spec{NoThinking: true}, prompt, func(t *testing.T, res *engine.Result) {
			// An empty reasoning block, as the template writes when
			// thinking is off, then the answer.
			if !strings.HasPrefix(res.Text, "<think></think>") || strings.Count(res.Text, "</think>") != 1 {
				t.Errorf("got %q", res.Text)
			}
		}},
		{"no thinking inside open reasoning", constrain.Spec{NoThinking: true, InReasoning: true}, prompt + "<think>\n", func(t *testing.T, res *engine.Result) {
			if len(res.IDs) == 0 || res.IDs[0] != end {
				t.Errorf("got %q, want </think> first", res.Text)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.ThinkStart, tc.spec.ThinkEnd = "<think>", "</think>"
			g, err := v.Compile(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			res, _ := generateWith(t, m, g, tc.prompt, engine.SampleParams{}, 80)
			t.Logf("%q", res.Text)
			tc.check(t, res)
		})
	}
}

func TestGrammarForbid(t *testing.T) {
	m, v := openGrammarModel(t)
	// The model calls get_weather here when it may.
	prompt := render(t, m, "What's the weather in Paris?", true, map[string]any{"enable_thinking": false})
	g, err := v.Compile(constrain.Spec{Forbid: "<tool_call>"})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(4) {
		sp := engine.SampleParams{}
		if seed > 0 {
			sp = engine.SampleParams{Temperature: 1, Seed: seed, HasSeed: true}
		}
		res, _ := generateWith(t, m, g, prompt, sp, 40)
		t.Logf("seed %d: %q", seed, res.Text)
		if strings.Contains(res.Text, "<tool_call>") {
			t.Errorf("seed %d: %q holds the forbidden marker", seed, res.Text)
		}
	}
}

func TestGrammarSchema(t *testing.T) {
	m, v := openGrammarModel(t)
	schema, err := constrain.CompileSchema([]byte(`{"type":"object","properties":{
		"capital":{"type":"string"},"population":{"type":"integer"},
		"continent":{"enum":["Asia","Europe"]},"cities":{"type":"array","items":{"type":"string"},"maxItems":3}},
		"required":["capital","continent"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := v.Compile(constrain.Spec{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	prompt := render(t, m, "What is the capital of Japan? Answer in JSON.", false, map[string]any{"enable_thinking": false})
	for seed := range uint64(4) {
		sp := engine.SampleParams{}
		if seed > 0 {
			sp = engine.SampleParams{Temperature: 1, Seed: seed, HasSeed: true}
		}
		res, c := generateWith(t, m, g, prompt, sp, 150)
		t.Logf("seed %d: %q", seed, res.Text)
		if !c.Done() {
			if res.StopReason != engine.StopLength {
				t.Fatalf("seed %d: ended with %s before the value was complete", seed, res.StopReason)
			}
			if prefix, _ := schema.Check([]byte(res.Text)); !prefix {
				t.Errorf("seed %d: %q leaves the schema", seed, res.Text)
			}
			continue
		}
		var out struct {
			Capital    *string  `json:"capital"`
			Population *int     `json:"population"`
			Continent  string   `json:"continent"`
			Cities     []string `json:"cities"`
		}
		dec := json.NewDecoder(strings.NewReader(res.Text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("seed %d: %q: %v", seed, res.Text, err)
		}
		if out.Capital == nil || (out.Continent != "Asia" && out.Continent != "Europe") || len(out.Cities) > 3 {
			t.Errorf("seed %d: %q does not fit the schema", seed, res.Text)
		}
	}
}

func indexOf(ids []int32, id int32) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

func mustID(t *testing.T, tok interface{ TokenID(string) (int32, bool) }, s string) int32 {
	t.Helper()
	id, ok := tok.TokenID(s)
	if !ok {
		t.Fatal(fmt.Sprintf("no token %q", s))
	}
	return id
}
