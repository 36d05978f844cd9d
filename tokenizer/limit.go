package tokenizer

import "fmt"

// MaxTokenBytes returns a bound on the bytes of input text that one token
// of an encoding stands for, so that a text of n bytes encodes to at least
// n / MaxTokenBytes() tokens (the special tokens Encode adds aside). It is
// 0 when the tokenizer has no such bound: when a step can make text
// vanish (a Strip, StripAccents or regular-expression Replace normalizer,
// a pre-tokenizer that removes delimiters, added tokens that swallow the
// whitespace around them) or one unknown token can stand for a run of
// characters.
//
// The bound is loose: it is the longest vocabulary entry or added token in
// bytes, times how much the normalizers can shrink text.
func (t *Tokenizer) MaxTokenBytes() int { return t.maxTokenBytes }

// maxTokenBytes computes MaxTokenBytes for a tokenizer built from spec.
func maxTokenBytes(spec *Spec) int {
	longest := 4 // an unknown character stands for at most 4 bytes
	for _, s := range spec.Vocab {
		longest = max(longest, len(s))
	}
	for _, a := range spec.Added {
		if a.LStrip || a.RStrip {
			return 0
		}
		longest = max(longest, len(a.Content))
	}

	// Characters missing from the vocabulary: spelled with byte tokens,
	// or one unknown token each, but never dropped or fused.
	byteLevel := false
	for _, p := range spec.PreTokenizers {
		byteLevel = byteLevel || p.Kind == PreByteLevel
	}
	covered := func(name func(b int) string) bool {
		have := make(map[string]bool, len(spec.Vocab))
		for _, s := range spec.Vocab {
			have[s] = true
		}
		for b := range 256 {
			if !have[name(b)] {
				return false
			}
		}
		return true
	}
	switch {
	case spec.Unk >= 0 && !spec.FuseUnk:
	case byteLevel && spec.Model == ModelBPE && covered(func(b int) string { return byteToStr[b] }):
	case spec.ByteFallback && covered(func(b int) string { return fmt.Sprintf("<0x%02X>", b) }):
	default:
		return 0
	}

	// How much the normalizers can shrink text: NFKC maps a 4-byte
	// character to a 1-byte one at most, lowercasing a 3-byte one (the
	// Kelvin sign) to a 1-byte one, and composition merges at least 3
	// bytes into at least 2.
	shrink := 1
	for _, n := range spec.Normalizers {
		switch n.Kind {
		case NormNFC, NormNFD, NormNFKC, NormNFKD:
			shrink *= 4
		case NormLowercase:
			shrink *= 3
		case NormPrepend:
		case NormReplace:
			if n.Regex != "" || n.Content == "" {
				return 0
			}
			shrink *= max(1, (len(n.Pattern)+len(n.Content)-1)/len(n.Content))
		default: // Strip, StripAccents
			return 0
		}
	}
	for _, p := range spec.PreTokenizers {
		switch {
		case p.Kind == PreWhitespace, p.Kind == PreWhitespaceSplit, p.Kind == PreBert, p.Kind == PreCharDelimiter:
			return 0
		case p.Behavior == SplitRemoved:
			return 0
		}
	}
	return longest * shrink
}
