package tokenizer

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/lem-engine/lem/gguf"
)

// GGUF metadata keys of the tokenizer, as llama.cpp writes them.
const (
	ggufKeyModel          = "tokenizer.ggml.model"
	ggufKeyPre            = "tokenizer.ggml.pre"
	ggufKeyTokens         = "tokenizer.ggml.tokens"
	ggufKeyScores         = "tokenizer.ggml.scores"
	ggufKeyTypes          = "tokenizer.ggml.token_type"
	ggufKeyMerges         = "tokenizer.ggml.merges"
	ggufKeyBOS            = "tokenizer.ggml.bos_token_id"
	ggufKeyEOS            = "tokenizer.ggml.eos_token_id"
	ggufKeyUnk            = "tokenizer.ggml.unknown_token_id"
	ggufKeyPad            = "tokenizer.ggml.padding_token_id"
	ggufKeyAddBOS         = "tokenizer.ggml.add_bos_token"
	ggufKeyAddEOS         = "tokenizer.ggml.add_eos_token"
	ggufKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
)

// PatternGPT4o is the split of o200k-style vocabularies (GPT-4o's, Llama
// 4's), which GGUF files name "gpt-4o" or "llama4". Unlike the Pattern*
// constants of spec.go it runs on the backtracking engine.
const PatternGPT4o = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// ggufPreset is the pipeline a byte-level BPE vocabulary gets from its
// tokenizer.ggml.pre name.
type ggufPreset struct {
	// split is the expression applied before the byte-level mapping, or ""
	// for GPT-2's split (done by the ByteLevel step itself).
	split string
	// digits isolates every digit before GPT-2's split (StarCoder, SmolLM).
	digits bool
	// nfc normalizes the text to NFC first, as the vocabulary's own
	// tokenizer.json does (Qwen).
	nfc bool
	// ignoreMerges emits a pre-token that is a vocabulary entry directly.
	ignoreMerges bool
	// addBOS is llama.cpp's default for tokenizer.ggml.add_bos_token.
	addBOS bool
}

// ggufPresets maps the tokenizer.ggml.pre names llama.cpp's converter writes
// to the split each one stands for. Names llama.cpp treats alike share an
// entry.
var ggufPresets = func() map[string]ggufPreset {
	m := map[string]ggufPreset{}
	add := func(p ggufPreset, names ...string) {
		for _, n := range names {
			m[n] = p
		}
	}
	add(ggufPreset{}, "default", "gpt-2", "phi-2", "mpt", "olmo", "jais")
	add(ggufPreset{split: PatternLlama3, ignoreMerges: true, addBOS: true},
		"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2")
	add(ggufPreset{split: PatternLlama3}, "dbrx", "smaug-bpe")
	add(ggufPreset{split: PatternQwen2, nfc: true}, "qwen2", "deepseek-r1-qwen")
	add(ggufPreset{split: PatternQwen2}, "stablelm2", "megrez")
	add(ggufPreset{digits: true}, "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b")
	add(ggufPreset{split: PatternGPT4o}, "gpt-4o", "llama4")
	return m
}()

// GGUFPreNames returns the tokenizer.ggml.pre values FromGGUF supports,
// sorted.
func GGUFPreNames() []string {
	names := make([]string, 0, len(ggufPresets))
	for n := range ggufPresets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FromGGUF builds the tokenizer stored in a GGUF file's metadata, so that a
// GGUF file needs nothing beside it. See SpecFromGGUF for what is read.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	spec, err := SpecFromGGUF(f)
	if err != nil {
		return nil, err
	}
	t, err := New(*spec)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer.ggml metadata: %w", f.Name, err)
	}
	return t, nil
}

// SpecFromGGUF reads the tokenizer.ggml.* metadata of a GGUF file into a
// Spec, as llama.cpp interprets it:
//
//   - tokenizer.ggml.model "gpt2" is byte-level BPE: tokens, merges ("a b"
//     strings, in rank order) and token types; tokenizer.ggml.pre picks the
//     split (see GGUFPreNames); "qwen2" also normalizes the text to NFC, as
//     Qwen's tokenizer.json does. A missing pre key, and "default", get
//     GPT-2's split: llama.cpp's own "default" is a makeshift chain that it
//     warns degrades quality, and files too old to name their split are
//     GPT-2-style vocabularies. An unknown name is an error rather than a
//     silently wrong split.
//   - "llama" is SentencePiece BPE: tokens, scores and token types, no
//     merges. The adjacent pair whose concatenation is the vocabulary entry
//     with the highest score merges first; characters left without a token
//     are spelled as <0xXX> byte tokens; spaces become "▁". With
//     tokenizer.ggml.add_space_prefix (default true) a "▁" is put in front
//     of each stretch of text between added tokens that does not already
//     start with a space. llama.cpp adds one even then (" Hello" →
//     "▁▁Hello"); FromGGUF follows Hugging Face's Llama and Gemma tokenizers
//     (" Hello" → "▁Hello"), so a GGUF file and its model's tokenizer.json
//     give the same ids. Missing scores count as 0, as in llama.cpp.
//   - "gemma4" (Gemma 4's vocabulary) is SentencePiece-style BPE ranked by
//     merges, not scores: see ggufGemma4.
//   - Token types (tokenizer.ggml.token_type, optional): 1 normal, 2
//     unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Control and
//     unknown tokens become special added tokens and user-defined ones plain
//     added tokens, matched in the raw text before the model runs; unused
//     and byte tokens are never matched in the text.
//   - tokenizer.ggml.bos_token_id, eos_token_id, unknown_token_id and
//     padding_token_id must be ids of the vocabulary (-1 means none). When
//     absent, "llama" vocabularies default to BOS 1, EOS 2 and unknown 0, as
//     llama.cpp does; "gpt2" ones have none. tokenizer.ggml.add_bos_token
//     and add_eos_token default to llama.cpp's choice: BOS for "llama" and
//     for the Llama 3 family of pre names, nothing otherwise.
//
// The padding id is checked but not kept: Spec has no field for it.
// "bert" (WordPiece) is read by ggufWordPiece and "t5" (SentencePiece
// Unigram) by ggufUnigram. Other tokenizer models ("rwkv", "no_vocab" …)
// are errors.
func SpecFromGGUF(f *gguf.File) (*Spec, error) {
	spec, err := specFromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	return spec, nil
}

func specFromGGUF(f *gguf.File) (*Spec, error) {
	model, ok, err := ggufString(f, ggufKeyModel)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: missing: the file holds no tokenizer", ggufKeyModel)
	}
	switch model {
	case "gpt2", "llama", "gemma4", "bert", "t5":
	case "no_vocab", "none":
		return nil, fmt.Errorf("%s is %q: the file holds no vocabulary", ggufKeyModel, model)
	default:
		return nil, fmt.Errorf("%s: unsupported tokenizer model %q (supported: gpt2, llama, gemma4, bert, t5)", ggufKeyModel, model)
	}

	tokens, err := ggufTokens(f)
	if err != nil {
		return nil, err
	}
	n := len(tokens)
	types, err := ggufTypes(f, n)
	if err != nil {
		return nil, err
	}
	spec := &Spec{
		Model: ModelBPE,
		Vocab: tokens,
		Types: types,
		Unk:   -1, BOS: -1, EOS: -1,
	}
	for id, ty := range types {
		s := tokens[id]
		if s == "" {
			continue
		}
		switch ty {
		case TokenControl, TokenUnknown:
			spec.Added = append(spec.Added, AddedToken{ID: int32(id), Content: s, Special: true})
		case TokenUserDefined:
			spec.Added = append(spec.Added, AddedToken{ID: int32(id), Content: s})
		}
	}

	var addBOS bool
	switch model {
	case "gpt2":
		if addBOS, err = ggufBPE(f, spec); err != nil {
			return nil, err
		}
	case "llama":
		if addBOS, err = ggufSentencePiece(f, spec); err != nil {
			return nil, err
		}
	case "gemma4":
		if addBOS, err = ggufGemma4(f, spec); err != nil {
			return nil, err
		}
	case "bert":
		ggufWordPiece(spec)
	case "t5":
		if err := ggufUnigram(f, spec); err != nil {
			return nil, err
		}
	}

	for _, s := range []struct {
		key string
		id  *int32
	}{{ggufKeyBOS, &spec.BOS}, {ggufKeyEOS, &spec.EOS}, {ggufKeyUnk, &spec.Unk}} {
		if *s.id, err = ggufID(f, s.key, *s.id, n); err != nil {
			return nil, err
		}
	}
	if _, err := ggufID(f, ggufKeyPad, -1, n); err != nil {
		return nil, err
	}

	addBOSSet, err := ggufBool(f, ggufKeyAddBOS, &addBOS)
	if err != nil {
		return nil, err
	}
	addEOS := model == "t5" // llama.cpp's default for Unigram vocabularies
	addEOSSet, err := ggufBool(f, ggufKeyAddEOS, &addEOS)
	if err != nil {
		return nil, err
	}
	if addBOSSet && addBOS && spec.BOS < 0 {
		return nil, fmt.Errorf("%s is true but there is no BOS token (%s)", ggufKeyAddBOS, ggufKeyBOS)
	}
	if addEOSSet && addEOS && spec.EOS < 0 {
		return nil, fmt.Errorf("%s is true but there is no EOS token (%s)", ggufKeyAddEOS, ggufKeyEOS)
	}
	spec.AddBOS, spec.AddEOS = addBOS, addEOS
	switch model {
	case "bert":
		if err := ggufBertTemplate(f, spec, n); err != nil {
			return nil, err
		}
	case "t5":
		if err := ggufUnigramTemplate(f, spec, n); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// GGUF keys of a WordPiece vocabulary's markers ("seperator" is llama.cpp's
// spelling).
const (
	ggufKeyCLS = "tokenizer.ggml.cls_token_id"
	ggufKeySEP = "tokenizer.ggml.seperator_token_id"
)

// ggufWordPiece fills the WordPiece parts of spec from a "bert"
// vocabulary. llama.cpp stores it in phantom-space spelling: a piece that
// starts a word has "▁" in front, a continuation piece is bare (it was
// "##piece"), control tokens are as they are. The text is normalized and
// split as BERT's tokenizer does (lowercased, accents stripped, CJK
// characters and punctuation apart), which is what llama.cpp does too.
// The unknown token defaults to id 100, as in llama.cpp.
func ggufWordPiece(spec *Spec) {
	spec.Model = ModelWordPiece
	spec.ContinuingSubwordPrefix = "##"
	for id, s := range spec.Vocab {
		switch spec.Types[id] {
		case TokenControl, TokenUnknown, TokenUnused, TokenUserDefined:
			continue
		}
		if rest, ok := strings.CutPrefix(s, "▁"); ok {
			spec.Vocab[id] = rest
		} else if s != "" {
			spec.Vocab[id] = "##" + s
		}
	}
	spec.Normalizers = []Normalizer{{Kind: NormBert, CleanText: true, HandleChineseChars: true, StripAccents: true, Lowercase: true}}
	spec.PreTokenizers = []PreTokenizer{{Kind: PreBert}}
	spec.Decoders = []Decoder{{Kind: DecWordPiece, Prefix: "##", Cleanup: true}}
	if len(spec.Vocab) > 100 {
		spec.Unk = 100
	}
}

// ggufBertTemplate sets the [CLS] text [SEP] (and [CLS] a [SEP] b [SEP])
// templates of a "bert" vocabulary: [CLS] is cls_token_id, else the BOS
// token, else id 101; [SEP] is seperator_token_id, else id 102. With
// add_eos_token the pair is RoBERTa's: [CLS] a EOS [SEP] b EOS.
func ggufBertTemplate(f *gguf.File, spec *Spec, n int) error {
	def := int32(-1)
	switch {
	case spec.BOS >= 0:
		def = spec.BOS
	case n > 101:
		def = 101
	}
	cls, err := ggufID(f, ggufKeyCLS, def, n)
	if err != nil {
		return err
	}
	def = -1
	if n > 102 {
		def = 102
	}
	sep, err := ggufID(f, ggufKeySEP, def, n)
	if err != nil {
		return err
	}
	if cls < 0 {
		return fmt.Errorf("%s: missing, and no %s: a bert vocabulary needs a [CLS] token", ggufKeyCLS, ggufKeyBOS)
	}
	if sep < 0 {
		return fmt.Errorf("%s: missing: a bert vocabulary needs a [SEP] token", ggufKeySEP)
	}
	addEOS := spec.AddEOS && spec.EOS >= 0
	spec.AddBOS, spec.AddEOS = false, false
	spec.Prefix, spec.Suffix = []int32{cls}, []int32{sep}
	spec.Single = []TemplatePiece{{Seq: -1, IDs: []int32{cls}}, {Seq: 0}, {Seq: -1, IDs: []int32{sep}}}
	spec.Pair = []TemplatePiece{{Seq: -1, IDs: []int32{cls}}, {Seq: 0}, {Seq: -1, IDs: []int32{sep}},
		{Seq: 1, TypeID: 1}, {Seq: -1, IDs: []int32{sep}, TypeID: 1}}
	if addEOS {
		// RoBERTa's form, as llama.cpp puts a pair when EOS is added:
		// [CLS] a EOS [SEP] b EOS, every token of type 0.
		eos := spec.EOS
		spec.Pair = []TemplatePiece{{Seq: -1, IDs: []int32{cls}}, {Seq: 0}, {Seq: -1, IDs: []int32{eos}},
			{Seq: -1, IDs: []int32{sep}}, {Seq: 1}, {Seq: -1, IDs: []int32{eos}}}
	}
	return nil
}

// GGUF keys of a SentencePiece Unigram ("t5") vocabulary.
const (
	ggufKeyCharsmap     = "tokenizer.ggml.precompiled_charsmap"
	ggufKeyRemoveSpaces = "tokenizer.ggml.remove_extra_whitespaces"
	ggufKeyAddSEP       = "tokenizer.ggml.add_sep_token"
)

// ggufUnigram fills the Unigram parts of spec from a "t5" vocabulary (the
// SentencePiece Unigram model of T5 and of XLM-RoBERTa: bge-m3,
// multilingual-e5), as Hugging Face's tokenizer.json of XLM-RoBERTa
// spells the same pipeline: the precompiled charsmap normalizer
// (tokenizer.ggml.precompiled_charsmap, when present), then, with
// remove_extra_whitespaces (default true), trailing spaces stripped and
// runs of spaces made one "▁"; Metaspace with a "▁" in front when
// add_space_prefix (default true); pieces scored by tokenizer.ggml.scores.
// The ids default as in llama.cpp: EOS 1, unknown 2.
func ggufUnigram(f *gguf.File, spec *Spec) error {
	n := len(spec.Vocab)
	scores, err := ggufScores(f, n)
	if err != nil {
		return err
	}
	spec.Model = ModelUnigram
	spec.Scores = scores
	if n > 2 {
		spec.EOS, spec.Unk = 1, 2
	}
	if v, ok := f.Value(ggufKeyCharsmap); ok {
		cm, ok := gguf.ArrayOf[uint8](v)
		if !ok {
			if s, isInt8 := gguf.ArrayOf[int8](v); isInt8 {
				cm = make([]byte, len(s))
				for i, x := range s {
					cm[i] = byte(x)
				}
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("%s: want an array of bytes, got %s", ggufKeyCharsmap, describe(v))
		}
		if len(cm) < 4 {
			return fmt.Errorf("%s: %d bytes, too short for its header", ggufKeyCharsmap, len(cm))
		}
		spec.Normalizers = append(spec.Normalizers, Normalizer{Kind: NormPrecompiled, Charsmap: slices.Clone(cm)})
	}
	clean := true
	if _, err := ggufBool(f, ggufKeyRemoveSpaces, &clean); err != nil {
		return err
	}
	if clean {
		spec.Normalizers = append(spec.Normalizers,
			Normalizer{Kind: NormStrip, Right: true},
			Normalizer{Kind: NormReplace, Regex: " {2,}", Content: "▁"})
	}
	prefix := true
	if _, err := ggufBool(f, ggufKeyAddSpacePrefix, &prefix); err != nil {
		return err
	}
	scheme := PrependNever
	if prefix {
		scheme = PrependAlways
	}
	spec.PreTokenizers = []PreTokenizer{{Kind: PreMetaspace, Replacement: "▁", Prepend: scheme, Split: true}}
	spec.Decoders = []Decoder{{Kind: DecMetaspace, Replacement: "▁", Prepend: scheme}}
	return nil
}

// ggufUnigramTemplate sets the <s> text </s> template of a "t5" vocabulary
// that adds both BOS and EOS, and its pair template: <s> a </s> b </s>, or
// <s> a </s></s> b </s> with tokenizer.ggml.add_sep_token (the separator
// being seperator_token_id, else EOS), as llama.cpp puts a rerank pair.
func ggufUnigramTemplate(f *gguf.File, spec *Spec, n int) error {
	if !spec.AddBOS || !spec.AddEOS {
		return nil
	}
	addSEP := false
	if _, err := ggufBool(f, ggufKeyAddSEP, &addSEP); err != nil {
		return err
	}
	sep, err := ggufID(f, ggufKeySEP, spec.EOS, n)
	if err != nil {
		return err
	}
	bos, eos := spec.BOS, spec.EOS
	spec.AddBOS, spec.AddEOS = false, false
	spec.Prefix, spec.Suffix = []int32{bos}, []int32{eos}
	spec.Single = []TemplatePiece{{Seq: -1, IDs: []int32{bos}}, {Seq: 0}, {Seq: -1, IDs: []int32{eos}}}
	spec.Pair = []TemplatePiece{{Seq: -1, IDs: []int32{bos}}, {Seq: 0}, {Seq: -1, IDs: []int32{eos}}}
	if addSEP && sep >= 0 {
		spec.Pair = append(spec.Pair, TemplatePiece{Seq: -1, IDs: []int32{sep}})
	}
	spec.Pair = append(spec.Pair, TemplatePiece{Seq: 1}, TemplatePiece{Seq: -1, IDs: []int32{eos}})
	return nil
}

// ggufBPE fills the byte-level BPE parts of spec and returns the default
// for adding BOS.
func ggufBPE(f *gguf.File, spec *Spec) (addBOS bool, err error) {
	pre, ok, err := ggufString(f, ggufKeyPre)
	if err != nil {
		return false, err
	}
	if !ok || pre == "" {
		pre = "default"
	}
	p, ok := ggufPresets[pre]
	if !ok {
		return false, fmt.Errorf("%s: unsupported pre-tokenizer %q (supported: %s)",
			ggufKeyPre, pre, strings.Join(GGUFPreNames(), ", "))
	}
	spec.Merges, err = ggufMerges(f)
	if err != nil {
		return false, err
	}
	spec.IgnoreMerges = p.ignoreMerges
	if p.nfc {
		spec.Normalizers = []Normalizer{{Kind: NormNFC}}
	}
	switch {
	case p.split != "":
		spec.PreTokenizers = []PreTokenizer{
			{Kind: PreSplit, Regex: p.split, Behavior: SplitIsolated},
			{Kind: PreByteLevel},
		}
	case p.digits:
		spec.PreTokenizers = []PreTokenizer{
			{Kind: PreDigits, IndividualDigits: true},
			{Kind: PreByteLevel, UseRegex: true},
		}
	default:
		spec.PreTokenizers = []PreTokenizer{{Kind: PreByteLevel, UseRegex: true}}
	}
	spec.Decoders = []Decoder{{Kind: DecByteLevel}}
	return p.addBOS, nil
}

// ggufSentencePiece fills the SentencePiece parts of spec and returns the
// default for adding BOS.
func ggufSentencePiece(f *gguf.File, spec *Spec) (addBOS bool, err error) {
	n := len(spec.Vocab)
	scores, err := ggufScores(f, n)
	if err != nil {
		return false, err
	}
	spec.Scores = scores
	spec.ByteFallback = true
	spec.FuseUnk = true
	for _, d := range []struct {
		id *int32
		v  int32
	}{{&spec.Unk, 0}, {&spec.BOS, 1}, {&spec.EOS, 2}} {
		if int(d.v) < n {
			*d.id = d.v
		}
	}
	prefix := true
	if _, err := ggufBool(f, ggufKeyAddSpacePrefix, &prefix); err != nil {
		return false, err
	}
	scheme := PrependNever
	if prefix {
		scheme = PrependAlways
	}
	spec.PreTokenizers = []PreTokenizer{{Kind: PreMetaspace, Replacement: "▁", Prepend: scheme}}
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

// ggufTokens reads tokenizer.ggml.tokens (a copy of the slice).
func ggufTokens(f *gguf.File) ([]string, error) {
	v, ok := f.Value(ggufKeyTokens)
	if !ok {
		return nil, fmt.Errorf("%s: missing", ggufKeyTokens)
	}
	tokens, ok := gguf.ArrayOf[string](v)
	if !ok {
		return nil, fmt.Errorf("%s: want an array of strings, got %s", ggufKeyTokens, describe(v))
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s: empty", ggufKeyTokens)
	}
	if len(tokens) > math.MaxInt32 {
		return nil, fmt.Errorf("%s: %d tokens, more than token ids can number", ggufKeyTokens, len(tokens))
	}
	return slices.Clone(tokens), nil
}

// ggufTypes reads tokenizer.ggml.token_type; absent, every token is
// normal.
func ggufTypes(f *gguf.File, n int) ([]TokenType, error) {
	types := make([]TokenType, n)
	v, ok := f.Value(ggufKeyTypes)
	if !ok {
		for i := range types {
			types[i] = TokenNormal
		}
		return types, nil
	}
	raw, ok := v.Ints()
	if !ok {
		return nil, fmt.Errorf("%s: want an array of integers, got %s", ggufKeyTypes, describe(v))
	}
	if len(raw) != n {
		return nil, fmt.Errorf("%s: %d entries for %d tokens", ggufKeyTypes, len(raw), n)
	}
	for i, t := range raw {
		if t < int64(TokenUndefined) || t > int64(TokenByte) {
			return nil, fmt.Errorf("%s[%d]: unknown token type %d", ggufKeyTypes, i, t)
		}
		types[i] = TokenType(t)
	}
	return types, nil
}

// ggufScores reads tokenizer.ggml.scores; absent, every score is 0.
func ggufScores(f *gguf.File, n int) ([]float32, error) {
	v, ok := f.Value(ggufKeyScores)
	if !ok {
		return make([]float32, n), nil
	}
	scores, ok := gguf.ArrayOf[float32](v)
	if !ok {
		return nil, fmt.Errorf("%s: want an array of float32s, got %s", ggufKeyScores, describe(v))
	}
	if len(scores) != n {
		return nil, fmt.Errorf("%s: %d entries for %d tokens", ggufKeyScores, len(scores), n)
	}
	for i, s := range scores {
		if math.IsNaN(float64(s)) {
			return nil, fmt.Errorf("%s[%d]: NaN", ggufKeyScores, i)
		}
	}
	return slices.Clone(scores), nil
}

// ggufMerges reads tokenizer.ggml.merges: "left right" strings. The two
// parts are split at the first space after the first byte, so a left part
// that is itself a space survives.
func ggufMerges(f *gguf.File) ([][2]string, error) {
	v, ok := f.Value(ggufKeyMerges)
	if !ok {
		return nil, fmt.Errorf("%s: missing (a gpt2 tokenizer needs its merges)", ggufKeyMerges)
	}
	raw, ok := gguf.ArrayOf[string](v)
	if !ok {
		return nil, fmt.Errorf("%s: want an array of strings, got %s", ggufKeyMerges, describe(v))
	}
	merges := make([][2]string, len(raw))
	for i, m := range raw {
		k := -1
		if len(m) > 1 {
			k = strings.IndexByte(m[1:], ' ')
		}
		if k < 0 || k+2 >= len(m) {
			return nil, fmt.Errorf("%s[%d] %q: want two tokens separated by a space", ggufKeyMerges, i, m)
		}
		merges[i] = [2]string{m[:k+1], m[k+2:]}
	}
	return merges, nil
}

// ggufID reads a token id key: def when absent, -1 for a stored -1.
func ggufID(f *gguf.File, key string, def int32, n int) (int32, error) {
	v, ok := f.Value(key)
	if !ok {
		return def, nil
	}
	id, ok := v.Int()
	if !ok {
		return 0, fmt.Errorf("%s: want an integer, got %s", key, describe(v))
	}
	if id == -1 {
		return -1, nil
	}
	if id < 0 || id >= int64(n) {
		return 0, fmt.Errorf("%s: token id %d out of range [0, %d)", key, id, n)
	}
	return int32(id), nil
}

// ggufString reads a string key; ok is false when it is absent.
func ggufString(f *gguf.File, key string) (s string, ok bool, err error) {
	v, ok := f.Value(key)
	if !ok {
		return "", false, nil
	}
	s, ok = v.Str()
	if !ok {
		return "", false, fmt.Errorf("%s: want a string, got %s", key, describe(v))
	}
	return s, true, nil
}

// ggufBool sets *dst from a bool key and reports whether it was present.
func ggufBool(f *gguf.File, key string, dst *bool) (bool, error) {
	v, ok := f.Value(key)
	if !ok {
		return false, nil
	}
	b, ok := v.Bool()
	if !ok {
		return false, fmt.Errorf("%s: want a bool, got %s", key, describe(v))
	}
	*dst = b
	return true, nil
}

// describe names a value's type for error messages.
func describe(v gguf.Value) string {
	if v.Type() == gguf.ValueArray {
		return fmt.Sprintf("an array of %s", v.Elem())
	}
	return v.Type().String()
}
