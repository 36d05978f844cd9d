package constrain

import (
	"sync"
	"testing"
)

var (
	qwenVocabOnce sync.Once
	qwenVocab     *Vocab
	qwenVocabErr  error
)

// BenchmarkGrammarMask measures the allowed-token sets of grammar states
// over Qwen 3's 151k-token vocabulary: the work of one Mask, uncached.
func BenchmarkGrammarMask(b *testing.B) {
	tok := loadTokenizer(b, "tokenizers", "qwen3")
	qwenVocabOnce.Do(func() { qwenVocab, qwenVocabErr = NewVocab(tok) })
	if qwenVocabErr != nil {
		b.Fatal(qwenVocabErr)
	}
	v := qwenVocab
	schema, err := CompileSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name"]}`))
	if err != nil {
		b.Fatal(err)
	}
	keyed, err := CompileSchema([]byte(`{"type":"object","properties":{"at":{"type":"string","format":"date-time"},"name":{"type":"string","maxLength":20},"n":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}}}`))
	if err != nil {
		b.Fatal(err)
	}
	tools := &ToolCalls{Syntax: CallSyntax{Call: "<tool_call>\n{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}\n</tool_call>"},
		Tools: []Tool{{Name: "get_weather", Params: schema}}, Multiple: true}
	for _, st := range []struct {
		name   string
		spec   Spec
		prefix string
	}{
		{"schema/start", Spec{Schema: schema}, ""},
		{"schema/key", Spec{Schema: schema}, `{"`},
		{"schema/string", Spec{Schema: schema}, `{"name": "Par`},
		{"schema/number", Spec{Schema: schema}, `{"age": 4`},
		{"keywords/format", Spec{Schema: keyed}, `{"at": "2024-05-01T1`},
		{"keywords/length", Spec{Schema: keyed}, `{"name": "Par`},
		{"keywords/bounds", Spec{Schema: keyed}, `{"n": 4`},
		{"tools/start", Spec{ThinkStart: "<think>", ThinkEnd: "</think>", Tools: tools}, ""},
		{"tools/reasoning", Spec{ThinkStart: "<think>", ThinkEnd: "</think>", Tools: tools}, "<think>\nThe user"},
		{"tools/name", Spec{Tools: tools}, "<tool_call>\n{\"name\": \"get"},
		{"tools/arguments", Spec{Tools: tools}, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"name\": \"Pa"},
		{"forbid/text", Spec{Forbid: "<tool_call>"}, "Hello"},
	} {
		g, err := v.Compile(st.spec)
		if err != nil {
			b.Fatal(err)
		}
		s := g.init
		for i := 0; i < len(st.prefix); i++ {
			if !g.step(&s, st.prefix[i], false) {
				b.Fatalf("%s: bad prefix %q", st.name, st.prefix)
			}
		}
		bits := make([]uint64, v.words)
		walk := make([]gstate, v.trie.maxLen+1)
		g.allowed(&s, bits, walk) // builds byte splits on first use
		b.Run(st.name, func(b *testing.B) {
			for b.Loop() {
				clear(bits)
				g.allowed(&s, bits, walk)
			}
		})
	}
}
