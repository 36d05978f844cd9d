package tokenizer

// ModelKind names the algorithm that turns one pre-token into vocabulary ids.
type ModelKind int

const (
	// ModelBPE is byte-pair encoding. When Spec.Merges is non-empty the
	// merges are applied by rank, lowest first, the leftmost pair winning a
	// tie (GPT-2, Llama 3, Qwen, and the SentencePiece vocabularies that
	// tokenizer.json stores with merges). When Merges is empty and
	// Spec.Scores is set, the adjacent pair whose concatenation is a
	// vocabulary entry with the highest score is merged first, again leftmost
	// on a tie: SentencePiece BPE as GGUF "llama" vocabularies store it.
	ModelBPE ModelKind = iota + 1
	// ModelUnigram is SentencePiece's unigram model: the segmentation whose
	// pieces have the highest total score (Spec.Scores, log probabilities).
	ModelUnigram
	// ModelWordPiece is BERT's WordPiece: each word is split greedily into
	// the longest vocabulary entries from its start, the pieces after the
	// first spelled with Spec.ContinuingSubwordPrefix ("##"); a word with a
	// part that matches nothing, or longer than Spec.MaxInputCharsPerWord
	// characters, becomes the unknown token.
	ModelWordPiece
)

// String returns the name tokenizer.json uses for the model.
func (k ModelKind) String() string {
	switch k {
	case ModelBPE:
		return "BPE"
	case ModelUnigram:
		return "Unigram"
	case ModelWordPiece:
		return "WordPiece"
	}
	return "unknown"
}

// TokenType classifies a vocabulary entry. The values are those of GGUF's
// tokenizer.ggml.token_type array.
type TokenType int32

// Token types.
const (
	TokenUndefined   TokenType = 0
	TokenNormal      TokenType = 1
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3 // special: BOS, EOS, chat markers
	TokenUserDefined TokenType = 4 // matched in the text before the model runs
	TokenUnused      TokenType = 5
	TokenByte        TokenType = 6 // a <0xXX> byte-fallback token
)

// AddedToken is a token matched literally in the input before normalization
// and the model run, as tokenizer.json's added_tokens describe it.
type AddedToken struct {
	ID      int32
	Content string
	// Special tokens are dropped by Decode when skipSpecial is set, and are
	// not matched by EncodePlain.
	Special bool
	// SingleWord matches the token only when it is not inside a word.
	SingleWord bool
	// LStrip and RStrip make the match swallow the whitespace before and
	// after it.
	LStrip, RStrip bool
	// Normalized tokens are matched in the normalized text instead of the
	// raw input (and their content is normalized first).
	Normalized bool
}

// NormalizerKind names a normalization step.
type NormalizerKind string

// Normalization steps.
const (
	NormNFC          NormalizerKind = "NFC"
	NormNFD          NormalizerKind = "NFD"
	NormNFKC         NormalizerKind = "NFKC"
	NormNFKD         NormalizerKind = "NFKD"
	NormLowercase    NormalizerKind = "Lowercase"
	NormReplace      NormalizerKind = "Replace"      // Pattern or Regex → Content
	NormPrepend      NormalizerKind = "Prepend"      // Content before non-empty text
	NormStrip        NormalizerKind = "Strip"        // whitespace at Left and/or Right
	NormStripAccents NormalizerKind = "StripAccents" // drop combining marks
	// NormBert is BERT's normalizer: CleanText, HandleChineseChars,
	// StripAccents and Lowercase select its steps, applied in that order.
	NormBert NormalizerKind = "BertNormalizer"
	// NormPrecompiled is SentencePiece's normalization rules, compiled into
	// Charsmap (a double-array trie and the replacement strings).
	NormPrecompiled NormalizerKind = "Precompiled"
)

// Normalizer is one normalization step, applied to each stretch of text
// between added tokens.
type Normalizer struct {
	Kind NormalizerKind
	// Pattern is the literal text Replace replaces.
	Pattern string
	// Regex, when set instead of Pattern, is the expression Replace replaces.
	Regex string
	// Content is Replace's replacement or Prepend's prefix.
	Content string
	// Left and Right select the ends Strip strips.
	Left, Right bool
	// CleanText, HandleChineseChars, StripAccents and Lowercase are
	// BertNormalizer's options: drop control characters and map whitespace
	// to spaces, put spaces around CJK ideographs, drop accents after NFD,
	// lowercase.
	CleanText, HandleChineseChars, StripAccents, Lowercase bool
	// Charsmap is Precompiled's compiled rules (precompiled_charsmap,
	// decoded from base64).
	Charsmap []byte
}

// PreTokenizerKind names a pre-tokenization step.
type PreTokenizerKind string

// Pre-tokenization steps.
const (
	PreSplit           PreTokenizerKind = "Split"
	PreByteLevel       PreTokenizerKind = "ByteLevel"
	PreMetaspace       PreTokenizerKind = "Metaspace"
	PreDigits          PreTokenizerKind = "Digits"
	PrePunctuation     PreTokenizerKind = "Punctuation"
	PreWhitespace      PreTokenizerKind = "Whitespace"      // \w+|[^\w\s]+, whitespace dropped
	PreWhitespaceSplit PreTokenizerKind = "WhitespaceSplit" // split on whitespace, dropped
	PreBert            PreTokenizerKind = "BertPreTokenizer"
	PreCharDelimiter   PreTokenizerKind = "CharDelimiterSplit"
)

// SplitBehavior says what a splitting step does with the delimiters it finds.
// The values are spelled as in tokenizer.json.
type SplitBehavior string

// Split behaviours.
const (
	SplitRemoved            SplitBehavior = "Removed"
	SplitIsolated           SplitBehavior = "Isolated"
	SplitMergedWithPrevious SplitBehavior = "MergedWithPrevious"
	SplitMergedWithNext     SplitBehavior = "MergedWithNext"
	SplitContiguous         SplitBehavior = "Contiguous"
)

// PrependScheme says when Metaspace puts its replacement character in front
// of a piece that does not start with one.
type PrependScheme string

// Prepend schemes.
const (
	PrependAlways PrependScheme = "always"
	PrependFirst  PrependScheme = "first" // only at the very start of the input
	PrependNever  PrependScheme = "never"
)

// Split expressions that run natively, without a regular-expression engine.
// They are written exactly as tokenizer.json files spell them.
const (
	// PatternGPT2 is GPT-2's split, also the one ByteLevel uses with
	// UseRegex.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// PatternLlama3 is Llama 3's split (digits in groups of up to three).
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternQwen2 is Qwen 2 and 3's split (one digit per piece).
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// PreTokenizer is one pre-tokenization step: it splits the normalized text
// into pieces (and may rewrite them) before the model sees each piece.
type PreTokenizer struct {
	Kind PreTokenizerKind
	// Pattern is the literal delimiter of Split, or the character of
	// CharDelimiterSplit.
	Pattern string
	// Regex, when set instead of Pattern, is Split's expression. The
	// Pattern* constants run natively; other expressions use a backtracking
	// engine.
	Regex string
	// Behavior is what Split and Punctuation do with delimiters; empty means
	// Isolated for Punctuation.
	Behavior SplitBehavior
	// Invert makes Split treat the matches as the pieces and the text between
	// them as the delimiters.
	Invert bool
	// AddPrefixSpace makes ByteLevel put a space before a piece that does not
	// start with one.
	AddPrefixSpace bool
	// UseRegex makes ByteLevel split with PatternGPT2 first.
	UseRegex bool
	// Replacement is Metaspace's stand-in for a space; empty means "▁".
	Replacement string
	// Prepend is Metaspace's prepend scheme; empty means PrependAlways.
	Prepend PrependScheme
	// Split makes Metaspace also split before each replacement character.
	Split bool
	// IndividualDigits makes Digits isolate every digit instead of every run
	// of digits.
	IndividualDigits bool
}

// DecoderKind names a decoding step.
type DecoderKind string

// Decoding steps.
const (
	DecByteLevel    DecoderKind = "ByteLevel"
	DecReplace      DecoderKind = "Replace"
	DecByteFallback DecoderKind = "ByteFallback"
	DecFuse         DecoderKind = "Fuse"
	DecStrip        DecoderKind = "Strip"
	DecMetaspace    DecoderKind = "Metaspace"
	// DecWordPiece joins WordPiece tokens: Prefix ("##") glues a token to
	// the one before, other tokens get a space before them; Cleanup then
	// removes the spaces before punctuation and contractions.
	DecWordPiece DecoderKind = "WordPiece"
)

// Decoder is one decoding step; the steps turn the token strings of the ids
// into text.
type Decoder struct {
	Kind DecoderKind
	// Pattern and Content: Replace replaces Pattern with Content in each
	// token. Strip removes the character Content.
	Pattern, Content string
	// Start and Stop are how many Content characters Strip may remove from
	// the start and the end of each token.
	Start, Stop int
	// Replacement and Prepend configure Metaspace as for the pre-tokenizer.
	Replacement string
	Prepend     PrependScheme
	// Prefix and Cleanup configure WordPiece.
	Prefix  string
	Cleanup bool
}

// TemplatePiece is one element of a post-processor's template: either one
// of the input sequences (Seq 0 for the first text, 1 for the second) or
// special token ids (Seq -1), with the token type id its tokens get.
type TemplatePiece struct {
	Seq    int
	IDs    []int32
	TypeID int32
}

// Spec describes a tokenizer completely. The tokenizer.json loader fills one;
// other loaders (GGUF metadata) fill one the same way and call New.
//
// Ids that may be absent (Unk, BOS, EOS) use -1 for "none".
type Spec struct {
	// Model is the segmentation algorithm.
	Model ModelKind
	// Vocab holds the model's token strings, indexed by id, in the model's
	// own alphabet: byte-level characters ("Ġ" for a space) for byte-level
	// BPE, "▁" for a space in SentencePiece vocabularies. Empty strings mark
	// unused ids.
	Vocab []string
	// Scores, indexed by id: Unigram log probabilities, or SentencePiece BPE
	// merge priorities when Merges is empty.
	Scores []float32
	// Types, indexed by id, is optional. Control tokens count as special;
	// score-based BPE merges only into normal and user-defined tokens.
	Types []TokenType
	// Merges, in rank order (first = applied first), as pairs of token
	// strings.
	Merges [][2]string
	// Unk is the unknown token's id, or -1.
	Unk int32
	// ByteFallback spells characters missing from the vocabulary as <0xXX>
	// byte tokens instead of Unk.
	ByteFallback bool
	// FuseUnk merges consecutive unknown characters into one Unk.
	FuseUnk bool
	// IgnoreMerges makes BPE emit a whole pre-token directly when it is a
	// vocabulary entry (Llama 3).
	IgnoreMerges bool
	// ContinuingSubwordPrefix and EndOfWordSuffix are BPE's word-piece
	// markers; both are usually empty.
	ContinuingSubwordPrefix, EndOfWordSuffix string

	// Added are the tokens matched in the text before the model runs.
	// Their ids may lie beyond Vocab.
	Added []AddedToken

	// Normalizers, PreTokenizers and Decoders are the pipeline, in order.
	Normalizers   []Normalizer
	PreTokenizers []PreTokenizer
	Decoders      []Decoder

	// BOS and EOS are the sequence markers, or -1.
	BOS, EOS int32
	// AddBOS and AddEOS add BOS and EOS around the ids when Encode is asked
	// for special tokens.
	AddBOS, AddEOS bool
	// Prefix and Suffix, when either is non-nil, replace AddBOS and AddEOS:
	// they are the ids Encode adds before and after the text's ids when asked
	// for special tokens (a TemplateProcessing post-processor).
	Prefix, Suffix []int32
	// Single and Pair, when non-nil, are the post-processor's templates for
	// one text and for a pair of texts (EncodeSpecial, EncodePair).
	Single, Pair []TemplatePiece
	// MaxInputCharsPerWord is WordPiece's limit on a word's length in
	// characters; 0 means 100.
	MaxInputCharsPerWord int
}
