package gguf

import (
	"fmt"
	"testing"
)

// vocabFile returns a file with a tokenizer of n tokens and n merges, the
// shape of a large modern vocabulary.
func vocabFile(tb testing.TB, n int) []byte {
	tb.Helper()
	tokens := make([]string, n)
	merges := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range n {
		tokens[i] = fmt.Sprintf("▁tok%d", i)
		merges[i] = fmt.Sprintf("t%d ok%d", i%977, i)
		scores[i] = -float32(i)
		types[i] = int32(i % 3)
	}
	w := NewWriter()
	for _, kv := range []KV{
		{"general.architecture", String("llama")},
		{"tokenizer.ggml.model", String("gpt2")},
		{"tokenizer.ggml.tokens", Array(tokens)},
		{"tokenizer.ggml.scores", Array(scores)},
		{"tokenizer.ggml.token_type", Array(types)},
		{"tokenizer.ggml.merges", Array(merges)},
	} {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			tb.Fatal(err)
		}
	}
	return encode(tb, w)
}

const vocabSize = 150_000

// TestVocabAllocs checks that parsing a large vocabulary does not allocate
// per element.
func TestVocabAllocs(t *testing.T) {
	data := vocabFile(t, vocabSize)
	f, err := Parse("vocab.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	tokens, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(tokens) != vocabSize || tokens[12345] != "▁tok12345" {
		t.Fatalf("tokens: %d, %v", len(tokens), ok)
	}
	if m, _ := f.Strings("tokenizer.ggml.merges"); len(m) != vocabSize || m[1000] != "t23 ok1000" {
		t.Fatalf("merges wrong")
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := Parse("vocab.gguf", data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 40 {
		t.Errorf("Parse of a %d-token vocabulary made %v allocations; want a handful, not one per token", vocabSize, allocs)
	}
}

func BenchmarkParseVocab(b *testing.B) {
	data := vocabFile(b, vocabSize)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("vocab.gguf", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteVocab(b *testing.B) {
	data := vocabFile(b, vocabSize)
	f, err := Parse("vocab.gguf", data)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rewrite(b, f); err != nil {
			b.Fatal(err)
		}
	}
}
