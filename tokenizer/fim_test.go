package tokenizer

import (
	"slices"
	"testing"
)

// TestFIM checks that the fill-in-the-middle markers are found in the
// vocabularies that declare them (the Qwen fixtures as published, the
// other styles added to a published vocabulary as their models add them)
// and not in those that do not, and that the prompt is assembled in the
// prefix, suffix, middle order.
func TestFIM(t *testing.T) {
	withAdded := func(name string, toks ...string) *Tokenizer {
		spec := fixtureSpec(t, name)
		next := int32(len(spec.Vocab))
		for _, a := range spec.Added {
			next = max(next, a.ID+1)
		}
		for i, s := range toks {
			spec.Added = append(spec.Added, AddedToken{ID: next + int32(i), Content: s, Special: true})
		}
		tok, err := New(*spec)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tests := []struct {
		name  string
		tok   *Tokenizer
		style string // "" for none
		marks [3]string
	}{
		{"qwen3", loadFixture(t, "qwen3"), "qwen", [3]string{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}},
		{"llama2", loadFixture(t, "llama2"), "", [3]string{}},
		{"llama3", loadFixture(t, "llama3"), "", [3]string{}},
		{"gemma3", loadFixture(t, "gemma3"), "", [3]string{}},
		{"starcoder", withAdded("llama3", "<fim_prefix>", "<fim_middle>", "<fim_suffix>"), "starcoder", [3]string{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}},
		{"codellama", withAdded("llama2", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"), "codellama", [3]string{"▁<PRE>", "▁<SUF>", "▁<MID>"}},
		{"deepseek", withAdded("llama3", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>"), "deepseek", [3]string{"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}},
		{"partial", withAdded("llama3", "<fim_prefix>", "<fim_suffix>"), "", [3]string{}},
		{"mistral", withAdded("llama2", "[INST]", "[/INST]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]"), "mistral", [3]string{"[PREFIX]", "[SUFFIX]", ""}},
	}
	for _, tt := range tests {
		f, ok := tt.tok.FIM()
		if ok != (tt.style != "") || f.Style != tt.style {
			t.Errorf("%s: FIM() = %+v, %v; want style %q", tt.name, f, ok, tt.style)
			continue
		}
		if !ok {
			continue
		}
		got := [3]string{tt.tok.Token(f.Prefix), tt.tok.Token(f.Suffix), tt.tok.Token(f.Middle)}
		if got != tt.marks {
			t.Errorf("%s: markers %q, want %q", tt.name, got, tt.marks)
		}
		pre, suf := tt.tok.EncodePlain("def add(a, b):\n    return ", false), tt.tok.EncodePlain("\n\nprint(add(1, 2))\n", false)
		want := slices.Concat([]int32{f.Prefix}, pre, []int32{f.Suffix}, suf, []int32{f.Middle})
		if tt.style == "mistral" {
			// Codestral's order: the suffix first, the prefix last.
			want = slices.Concat([]int32{f.Suffix}, suf, []int32{f.Prefix}, pre)
		}
		if p := f.Prompt(pre, suf); !slices.Equal(p, want) {
			t.Errorf("%s: Prompt = %v, want %v", tt.name, p, want)
		}
	}
	// The Qwen markers are single tokens of the published vocabulary, and
	// the assembled prompt reads as Qwen2.5-Coder's documented FIM prompt.
	qwen := loadFixture(t, "qwen3")
	f, _ := qwen.FIM()
	p := f.Prompt(qwen.EncodePlain("a = ", false), qwen.EncodePlain("\nb = a", false))
	if got, want := qwen.Decode(p, false), "<|fim_prefix|>a = <|fim_suffix|>\nb = a<|fim_middle|>"; got != want {
		t.Errorf("qwen prompt %q, want %q", got, want)
	}
}
