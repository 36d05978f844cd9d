package constrain_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/constrain"
	"github.com/lem-engine/lem/synth"
	"github.com/lem-engine/lem/tokenizer"
)

// The Harmony format of the gpt-oss models, as a server holds output to it.
var (
	harmonyCall = constrain.CallSyntax{Call: "<|channel|>commentary to=functions.", Mid: " <|constrain|>json<|message|>"}
	// harmonyThink is the analysis channel, up to the header of the next
	// message.
	harmonyThink = constrain.Spec{ThinkStart: "<|channel|>analysis<|message|>", ThinkEnd: "<|end|><|start|>assistant", ThinkEndCommit: 2}
)

// harmonySpecials are the special tokens of the Harmony format.
var harmonySpecials = []string{"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"}

var (
	harmonyOnce  sync.Once
	harmonyTok   *tokenizer.Tokenizer
	harmonyVocab *constrain.Vocab
	harmonyErr   error
)

// harmonyTokens returns a small byte-level BPE tokenizer (lem synth's
// built-in one) with the Harmony format's special tokens, and its table.
func harmonyTokens(t *testing.T) (*tokenizer.Tokenizer, *constrain.Vocab) {
	t.Helper()
	harmonyOnce.Do(func() {
		bt, err := synth.NewBuiltinTokenizer(512 - len(harmonySpecials))
		if err != nil {
			harmonyErr = err
			return
		}
		bt.Special = append(bt.Special, harmonySpecials...)
		data, err := bt.TokenizerJSON()
		if err != nil {
			harmonyErr = err
			return
		}
		if harmonyTok, harmonyErr = tokenizer.Parse(data); harmonyErr != nil {
			return
		}
		harmonyVocab, harmonyErr = constrain.NewVocab(harmonyTok)
	})
	if harmonyErr != nil {
		t.Fatal(harmonyErr)
	}
	return harmonyTok, harmonyVocab
}

// harmonyTools are two tools whose arguments a random walk completes in
// a few hundred tokens.
func harmonyTools(t *testing.T, only string) []constrain.Tool {
	t.Helper()
	var out []constrain.Tool
	for _, tl := range []struct{ name, params string }{
		{"get_weather", `{"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]}, "days": {"type": "integer"}}, "required": ["city"], "additionalProperties": false}`},
		{"add", `{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "exact": {"type": "boolean"}}, "required": ["a", "b"], "additionalProperties": false}`},
	} {
		if only == "" || tl.name == only {
			out = append(out, constrain.Tool{Name: tl.name, Params: constrain.CompileToolSchema([]byte(tl.params))})
		}
	}
	return out
}

// accepts reports whether the grammar takes text, tokenized, and whether
// the output is then complete.
func accepts(t *testing.T, g *constrain.Grammar, tok *tokenizer.Tokenizer, text string) (ok, done bool) {
	t.Helper()
	c := g.New(nil)
	for _, id := range tok.Encode(text, false) {
		c.Accept(id)
		if c.Err() != nil {
			return false, false
		}
	}
	return true, c.Done()
}

// TestGrammarHarmony checks which outputs the Harmony constraints take.
func TestGrammarHarmony(t *testing.T) {
	tok, v := harmonyTokens(t)
	required := harmonyThink
	required.Tools = &constrain.ToolCalls{Syntax: harmonyCall, Tools: harmonyTools(t, "")}
	named := harmonyThink
	named.Tools = &constrain.ToolCalls{Syntax: harmonyCall, Tools: harmonyTools(t, "add")}
	schema, err := constrain.CompileSchema([]byte(`{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	final := harmonyThink
	final.Schema, final.Prefix = schema, "<|channel|>final<|message|>"
	none := constrain.Spec{Forbid: "to=functions."}
	const (
		call     = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}`
		analysis = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
	)
	tests := []struct {
		name     string
		spec     constrain.Spec
		text     string
		ok, done bool
	}{
		{"required call", required, call, true, true},
		{"required call after analysis", required, analysis + call, true, true},
		{"required call in parts", required, `<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, `, true, false},
		{"required analysis open", required, "<|channel|>analysis<|message|>Hmm, let me think", true, false},
		{"required final", required, "<|channel|>final<|message|>Hi", false, false},
		{"required preamble", required, "<|channel|>commentary<|message|>Checking.", false, false},
		{"required undeclared", required, `<|channel|>commentary to=functions.search <|constrain|>json<|message|>{}`, false, false},
		{"required bad arguments", required, `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}`, false, false},
		{"required nothing after the call", required, call + "<|end|>", false, false},
		{"required analysis then final", required, analysis + "<|channel|>final<|message|>Hi", false, false},
		{"required text after end", required, "<|channel|>analysis<|message|>a<|end|>b", false, false},
		{"required marker in analysis", required, "<|channel|>analysis<|message|>a <|b", false, false},
		{"required second analysis", required, analysis + "<|channel|>analysis<|message|>", false, false},
		{"required white space first", required, strings.Repeat(" \n", 10) + analysis + call, true, true},
		{"required endless white space", required, strings.Repeat(" \n", 11) + analysis + call, false, false},
		{"named call", named, `<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b": 2}`, true, true},
		{"named other", named, call, false, false},
		{"none final", none, "<|channel|>analysis<|message|>No tools.<|end|><|start|>assistant<|channel|>final<|message|>Hi", true, false},
		{"none call", none, call, false, false},
		{"none call in role header", none, "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}", false, false},
		{"final value", final, `<|channel|>final<|message|>{"a": 12}`, true, true},
		{"final value after analysis", final, analysis + `<|channel|>final<|message|>{"a": 12}`, true, true},
		{"final value without header", final, `{"a": 12}`, false, false},
		{"final text", final, "<|channel|>final<|message|>Twelve", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := v.Compile(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			ok, done := accepts(t, g, tok, tc.text)
			if ok != tc.ok || done != tc.done {
				t.Errorf("%q: accepted %v, complete %v; want %v, %v", tc.text, ok, done, tc.ok, tc.done)
			}
		})
	}
}

// TestGrammarHarmonyWalk generates at random under the Harmony
// constraints, every allowed token as likely as any other, and checks that
// the Harmony output parser reads the result as the call the constraint
// asked for, with arguments that fit the tool's schema.
func TestGrammarHarmonyWalk(t *testing.T) {
	tok, v := harmonyTokens(t)
	stops := []int32{mustID(t, tok, "<|call|>"), mustID(t, tok, "<|return|>")}
	parserFormat := chat.OutputFormat{Tools: chat.ToolsHarmony}
	for _, tc := range []struct {
		name  string
		think bool
		only  string
	}{
		{"required", false, ""},
		{"required after analysis", true, ""},
		{"named", false, "add"},
		{"named after analysis", true, "get_weather"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := constrain.Spec{Tools: &constrain.ToolCalls{Syntax: harmonyCall, Tools: harmonyTools(t, tc.only)}}
			if tc.think {
				spec.ThinkStart, spec.ThinkEnd, spec.ThinkEndCommit = harmonyThink.ThinkStart, harmonyThink.ThinkEnd, harmonyThink.ThinkEndCommit
				spec.ThinkBudget = 8
			}
			g, err := v.Compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			analysed := 0
			for seed := range uint64(12) {
				text := walk(t, g, tok, stops, seed)
				p := parserFormat.NewParser(false, true)
				var calls []*chat.ParsedToolCall
				var content string
				for _, e := range append(p.Feed(text), p.Finish()...) {
					switch e.Kind {
					case chat.OutputToolCall:
						calls = append(calls, e.Call)
					case chat.OutputContent:
						content += e.Text
					}
				}
				if len(calls) != 1 || content != "" {
					t.Fatalf("seed %d: %q parses to calls %v and content %q", seed, text, calls, content)
				}
				var schema *constrain.Schema
				for _, tl := range harmonyTools(t, tc.only) {
					if tl.Name == calls[0].Name {
						schema = tl.Params
					}
				}
				if schema == nil {
					t.Fatalf("seed %d: %q calls %q", seed, text, calls[0].Name)
				}
				if _, complete := schema.Check(calls[0].Arguments); !complete {
					t.Errorf("seed %d: arguments %s do not fit %s's schema", seed, calls[0].Arguments, calls[0].Name)
				}
				if strings.HasPrefix(text, "<|channel|>analysis") {
					analysed++
				}
				t.Logf("seed %d: %q", seed, text)
			}
			// Analysis may come first only where the spec has it, and
			// then the walk takes that way about half the time.
			if tc.think != (analysed > 0) {
				t.Errorf("%d of 12 outputs open with analysis", analysed)
			}
		})
	}
}

// walk generates under g with random logits until a stop token, the end
// of the output, or 4000 tokens, and returns the text.
func walk(t *testing.T, g *constrain.Grammar, tok *tokenizer.Tokenizer, stops []int32, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	c := g.New(stops)
	logits := make([]float32, tok.VocabSize())
	var ids []int32
	for range 4000 {
		if c.Done() {
			return tok.Decode(ids, false)
		}
		for i := range logits {
			logits[i] = rng.Float32()
		}
		c.Mask(logits)
		best := int32(-1)
		for i, l := range logits {
			if !math.IsInf(float64(l), -1) && (best < 0 || l > logits[best]) {
				best = int32(i)
			}
		}
		if best < 0 {
			t.Fatalf("seed %d: no token allowed after %q", seed, tok.Decode(ids, false))
		}
		for _, s := range stops {
			if best == s {
				return tok.Decode(ids, false)
			}
		}
		c.Accept(best)
		if c.Err() != nil {
			t.Fatalf("seed %d: %v after %q", seed, c.Err(), tok.Decode(ids, false))
		}
		ids = append(ids, best)
	}
	t.Fatalf("seed %d: no end after 4000 tokens: %q", seed, tok.Decode(ids, false))
	return ""
}
