package tokenizer

import "github.com/lem-engine/lem/gguf"

// ggufGemma4 fills the parts of a "gemma4" vocabulary, the form llama.cpp's
// converter gives Gemma 4's tokenizer, and returns the default for adding
// BOS (true: the converter also writes add_bos_token true). It is BPE over
// the raw text with every space spelled "▁" (no byte-level alphabet, no
// split into words), merging by the ranks of tokenizer.ggml.merges as a
// tokenizer.json BPE model does; characters missing from the vocabulary are
// spelled as <0xXX> byte tokens, and unknown runs fuse. With
// tokenizer.ggml.add_space_prefix (the converter writes false) a "▁" is put
// in front of the text.
func ggufGemma4(f *gguf.File, spec *Spec) (addBOS bool, err error) {
	if spec.Merges, err = ggufMerges(f); err != nil {
		return false, err
	}
	spec.ByteFallback = true
	spec.FuseUnk = true
	prefix := false
	if _, err := ggufBool(f, ggufKeyAddSpacePrefix, &prefix); err != nil {
		return false, err
	}
	if prefix {
		spec.Normalizers = append(spec.Normalizers, Normalizer{Kind: NormPrepend, Content: "▁"})
	}
	spec.Normalizers = append(spec.Normalizers, Normalizer{Kind: NormReplace, Pattern: " ", Content: "▁"})
	spec.Decoders = []Decoder{
		{Kind: DecReplace, Pattern: "▁", Content: " "},
		{Kind: DecByteFallback},
		{Kind: DecFuse},
	}
	if prefix {
		spec.Decoders = append(spec.Decoders, Decoder{Kind: DecStrip, Content: " ", Start: 1})
	}
	return true, nil
}
