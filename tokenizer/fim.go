package tokenizer

// FIM holds the fill-in-the-middle tokens a vocabulary declares: a code
// model trained on them completes the text between a prefix and a suffix
// when the prompt is prefix marker, prefix, suffix marker, suffix and
// middle marker (the "PSM" order), or, for Mistral's Codestral, suffix
// marker, suffix, prefix marker and prefix (SuffixFirst).
type FIM struct {
	// Style names the family of the markers: "qwen" (<|fim_prefix|>, as
	// in Qwen2.5-Coder), "starcoder" (<fim_prefix>, StarCoder, StarCoder2,
	// Granite Code), "codellama" (<PRE>, <SUF>, <MID>), "deepseek"
	// (<｜fim▁begin｜>, <｜fim▁hole｜>, <｜fim▁end｜>) or "mistral"
	// ([PREFIX], [SUFFIX], as in Codestral).
	Style string
	// Prefix, Suffix and Middle are the markers' ids. Middle is -1 where
	// the prompt has no middle marker (SuffixFirst).
	Prefix, Suffix, Middle int32
	// SuffixFirst puts the suffix before the prefix, the prefix last so
	// that the model continues it: [SUFFIX] suffix [PREFIX] prefix, the
	// order Mistral's reference tokenizer builds for Codestral.
	SuffixFirst bool
}

// fimStyles lists the marker strings of each style, in the order they are
// tried. A style is found only when all three markers are tokens.
var fimStyles = []struct {
	style                  string
	prefix, suffix, middle string
}{
	{"qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
	{"starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
	{"codellama", "▁<PRE>", "▁<SUF>", "▁<MID>"},
	{"codellama", "<PRE>", "<SUF>", "<MID>"},
	{"deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"},
	{"mistral", "[PREFIX]", "[SUFFIX]", ""},
}

// FIM returns the fill-in-the-middle markers the vocabulary declares, and
// false when it has no complete set of them.
func (t *Tokenizer) FIM() (FIM, bool) {
	for _, s := range fimStyles {
		p, ok1 := t.TokenID(s.prefix)
		x, ok2 := t.TokenID(s.suffix)
		m, ok3 := int32(-1), true
		if s.middle != "" {
			m, ok3 = t.TokenID(s.middle)
		}
		if ok1 && ok2 && ok3 {
			return FIM{Style: s.style, Prefix: p, Suffix: x, Middle: m, SuffixFirst: s.middle == ""}, true
		}
	}
	return FIM{}, false
}

// Prompt assembles the ids of a fill-in-the-middle prompt from the encoded
// prefix and suffix: prefix marker, prefix, suffix marker, suffix, middle
// marker (with SuffixFirst: suffix marker, suffix, prefix marker, prefix).
// The model's answer is the text that goes between them. A
// beginning-of-sequence token, where the model wants one, is the caller's
// to add.
func (f FIM) Prompt(prefix, suffix []int32) []int32 {
	ids := make([]int32, 0, len(prefix)+len(suffix)+3)
	if f.SuffixFirst {
		ids = append(ids, f.Suffix)
		ids = append(ids, suffix...)
		ids = append(ids, f.Prefix)
		return append(ids, prefix...)
	}
	ids = append(ids, f.Prefix)
	ids = append(ids, prefix...)
	ids = append(ids, f.Suffix)
	ids = append(ids, suffix...)
	return append(ids, f.Middle)
}
