package convert

import (
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/tokenizer"
)

// Token types of tokenizer.ggml.token_type.
const (
	tokNormal      = int32(tokenizer.TokenNormal)
	tokUnknown     = int32(tokenizer.TokenUnknown)
	tokControl     = int32(tokenizer.TokenControl)
	tokUserDefined = int32(tokenizer.TokenUserDefined)
	tokUnused      = int32(tokenizer.TokenUnused)
	tokByte        = int32(tokenizer.TokenByte)
)

// errNoTokenizer marks a model directory without tokenizer.json.
var errNoTokenizer = errors.New("no tokenizer.json")

// readTokenizerJSON reads dir/tokenizer.json or tokenizer.json.gz.
func readTokenizerJSON(dir string) ([]byte, error) {
	path := filepath.Join(dir, "tokenizer.json")
	f, err := os.Open(path)
	gz := false
	if errors.Is(err, fs.ErrNotExist) {
		path += ".gz"
		f, err = os.Open(path)
		gz = true
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoTokenizer
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		r = zr
	}
	return io.ReadAll(io.LimitReader(r, 1<<30))
}

// TokenizerKV returns the tokenizer.ggml.* and tokenizer.chat_template*
// metadata of a Hugging Face model directory, as llama.cpp's converter
// writes them, for a model of vocabSize embeddings: the token strings (in
// the vocabulary's own alphabet, padded with unused [PADn] tokens up to
// vocabSize), their types, the merges of a byte-level BPE vocabulary
// ("gpt2", with the tokenizer.ggml.pre name of its split) or the scores of
// a SentencePiece one ("llama", scores ranking the merges), the special
// token ids, add_bos_token, and the chat templates. A directory without
// tokenizer.json returns no keys and no error.
func TokenizerKV(dir string, vocabSize int, cfg *model.Config) ([]gguf.KV, error) {
	data, err := readTokenizerJSON(dir)
	if errors.Is(err, errNoTokenizer) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	spec, err := tokenizer.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	kv, err := specKV(spec, tok, vocabSize, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", dir, err)
	}
	set, err := chat.LoadDir(dir, chat.Options{})
	switch {
	case err == nil:
		for _, name := range set.Names() {
			key := "tokenizer.chat_template"
			if name != chat.DefaultName {
				key += "." + name
			}
			kv = append(kv, gguf.KV{Key: key, Value: gguf.String(set.Lookup(name).Source())})
		}
	case !errors.Is(err, chat.ErrNoTemplate):
		return nil, err
	}
	return kv, nil
}

// specKV builds the tokenizer.ggml keys of a parsed tokenizer.
func specKV(spec *tokenizer.Spec, tok *tokenizer.Tokenizer, vocabSize int, cfg *model.Config) ([]gguf.KV, error) {
	if spec.Model == tokenizer.ModelWordPiece {
		return wordPieceKV(spec, vocabSize, cfg)
	}
	if spec.Model == tokenizer.ModelUnigram {
		return unigramKV(spec, vocabSize, cfg)
	}
	if spec.Model != tokenizer.ModelBPE {
		return nil, fmt.Errorf("%s vocabularies have no GGUF form lem writes (only BPE)", spec.Model)
	}
	byteLevel := slices.ContainsFunc(spec.Decoders, func(d tokenizer.Decoder) bool { return d.Kind == tokenizer.DecByteLevel })
	if !byteLevel && !spec.ByteFallback {
		return nil, errors.New("a BPE vocabulary that is neither byte-level nor SentencePiece-style (byte fallback) has no GGUF form")
	}
	n := max(vocabSize, len(spec.Vocab))
	for _, a := range spec.Added {
		n = max(n, int(a.ID)+1)
	}
	if vocabSize > 0 && n > vocabSize {
		return nil, fmt.Errorf("the tokenizer has %d tokens, more than the model's %d embeddings", n, vocabSize)
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	for i := range tokens {
		if i < len(spec.Vocab) && spec.Vocab[i] != "" {
			tokens[i] = spec.Vocab[i]
			types[i] = tokNormal
			if !byteLevel && isByteToken(tokens[i]) {
				types[i] = tokByte
			}
		} else {
			tokens[i] = fmt.Sprintf("[PAD%d]", i)
			types[i] = tokUnused
		}
	}
	if spec.Unk >= 0 && int(spec.Unk) < n {
		types[spec.Unk] = tokUnknown
	}
	for _, a := range spec.Added {
		tokens[a.ID] = a.Content
		if a.Special {
			types[a.ID] = tokControl
		} else {
			types[a.ID] = tokUserDefined
		}
	}
	kv := []gguf.KV{}
	add := func(key string, v gguf.Value) { kv = append(kv, gguf.KV{Key: key, Value: v}) }
	if byteLevel {
		pre, err := preName(spec)
		if err != nil {
			return nil, err
		}
		merges := make([]string, len(spec.Merges))
		for i, m := range spec.Merges {
			merges[i] = m[0] + " " + m[1]
		}
		add("tokenizer.ggml.model", gguf.String("gpt2"))
		add("tokenizer.ggml.pre", gguf.String(pre))
		add("tokenizer.ggml.tokens", gguf.Array(tokens))
		add("tokenizer.ggml.token_type", gguf.Array(types))
		add("tokenizer.ggml.merges", gguf.Array(merges))
	} else if cfg != nil && cfg.ModelType == "gemma4_text" {
		// Gemma 4: llama.cpp's converter writes its own vocabulary type,
		// ranked by the merges.
		merges := make([]string, len(spec.Merges))
		for i, m := range spec.Merges {
			merges[i] = m[0] + " " + m[1]
		}
		add("tokenizer.ggml.model", gguf.String("gemma4"))
		add("tokenizer.ggml.tokens", gguf.Array(tokens))
		add("tokenizer.ggml.scores", gguf.Array(mergeScores(spec, tokens)))
		add("tokenizer.ggml.token_type", gguf.Array(types))
		add("tokenizer.ggml.merges", gguf.Array(merges))
		add("tokenizer.ggml.add_space_prefix", gguf.Bool(addsSpacePrefix(spec)))
	} else {
		add("tokenizer.ggml.model", gguf.String("llama"))
		add("tokenizer.ggml.pre", gguf.String("default"))
		add("tokenizer.ggml.tokens", gguf.Array(tokens))
		add("tokenizer.ggml.scores", gguf.Array(mergeScores(spec, tokens)))
		add("tokenizer.ggml.token_type", gguf.Array(types))
		add("tokenizer.ggml.add_space_prefix", gguf.Bool(addsSpacePrefix(spec)))
	}
	id := func(key string, v int32) {
		if v >= 0 && int(v) < n {
			add(key, gguf.Uint32(uint32(v)))
		}
	}
	eos := tok.EOS()
	if eos < 0 && cfg != nil && len(cfg.EOSTokenIDs) > 0 {
		eos = int32(cfg.EOSTokenIDs[0])
	}
	id("tokenizer.ggml.bos_token_id", tok.BOS())
	id("tokenizer.ggml.eos_token_id", eos)
	id("tokenizer.ggml.unknown_token_id", spec.Unk)
	if cfg != nil && cfg.PadTokenID != nil {
		id("tokenizer.ggml.padding_token_id", int32(*cfg.PadTokenID))
	}
	add("tokenizer.ggml.add_bos_token", gguf.Bool(tok.AddsBOS()))
	add("tokenizer.ggml.add_eos_token", gguf.Bool(spec.AddEOS))
	return kv, nil
}

// isByteToken reports whether s is a byte-fallback token <0xXX>.
func isByteToken(s string) bool {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return false
	}
	for _, c := range s[3:5] {
		if !strings.ContainsRune("0123456789ABCDEF", c) {
			return false
		}
	}
	return true
}

// preName returns the tokenizer.ggml.pre name of a byte-level BPE
// vocabulary's split.
func preName(spec *tokenizer.Spec) (string, error) {
	var split string
	digits := false
	for _, p := range spec.PreTokenizers {
		switch p.Kind {
		case tokenizer.PreSplit:
			split = p.Regex
		case tokenizer.PreDigits:
			digits = p.IndividualDigits
		}
	}
	switch {
	case split == tokenizer.PatternLlama3:
		return "llama-bpe", nil
	case split == tokenizer.PatternQwen2:
		return "qwen2", nil
	case split == tokenizer.PatternGPT4o:
		return "gpt-4o", nil
	case split == "" && digits:
		return "smollm", nil
	case split == "":
		return "gpt-2", nil
	}
	return "", fmt.Errorf("the pre-tokenizer split %q has no tokenizer.ggml.pre name llama.cpp knows", split)
}

// mergeScores ranks a SentencePiece-style vocabulary's tokens for
// score-based merging: the token a merge produces scores minus the merge's
// rank, so merges apply in rank order; other tokens score below every
// merge.
func mergeScores(spec *tokenizer.Spec, tokens []string) []float32 {
	id := make(map[string]int, len(tokens))
	for i, t := range tokens {
		if _, dup := id[t]; !dup {
			id[t] = i
		}
	}
	scores := make([]float32, len(tokens))
	low := -float32(len(spec.Merges) + 1)
	for i := range scores {
		scores[i] = low
	}
	for rank, m := range spec.Merges {
		if i, ok := id[m[0]+m[1]]; ok && scores[i] == low {
			scores[i] = -float32(rank)
		}
	}
	return scores
}

// addsSpacePrefix reports whether a SentencePiece-style tokenizer puts "▁"
// in front of the text.
func addsSpacePrefix(spec *tokenizer.Spec) bool {
	for _, n := range spec.Normalizers {
		if n.Kind == tokenizer.NormPrepend && n.Content == "▁" {
			return true
		}
	}
	for _, p := range spec.PreTokenizers {
		if p.Kind == tokenizer.PreMetaspace && p.Prepend != tokenizer.PrependNever {
			return true
		}
	}
	return false
}

// wordPieceKV builds the tokenizer.ggml keys of a WordPiece (BERT)
// vocabulary as llama.cpp's converter writes them: model "bert", the
// tokens in its phantom-space spelling (a word-initial piece gets "▁" in
// front, a continuation loses its "##", control tokens stay as they are),
// padded with unused [PADn] tokens up to vocabSize, and the [CLS], [SEP],
// unknown, padding and mask ids. The text is put between [CLS] and [SEP];
// a pair template of RoBERTa's form also gets EOS (see below).
func wordPieceKV(spec *tokenizer.Spec, vocabSize int, cfg *model.Config) ([]gguf.KV, error) {
	n := max(vocabSize, len(spec.Vocab))
	for _, a := range spec.Added {
		n = max(n, int(a.ID)+1)
	}
	if vocabSize > 0 && n > vocabSize {
		return nil, fmt.Errorf("the tokenizer has %d tokens, more than the model's %d embeddings", n, vocabSize)
	}
	if len(spec.Single) == 0 {
		return nil, errors.New("a WordPiece vocabulary without a [CLS] … [SEP] post-processor has no GGUF form")
	}
	first, last := spec.Single[0], spec.Single[len(spec.Single)-1]
	if first.Seq != -1 || last.Seq != -1 || len(first.IDs) != 1 || len(last.IDs) != 1 || len(spec.Single) != 3 {
		return nil, errors.New("a WordPiece post-processor other than [CLS] text [SEP] has no GGUF form")
	}
	prefix := cmp.Or(spec.ContinuingSubwordPrefix, "##")
	tokens := make([]string, n)
	types := make([]int32, n)
	control := map[int32]bool{}
	for _, a := range spec.Added {
		if a.Special {
			control[a.ID] = true
		}
	}
	for i := range tokens {
		id := int32(i)
		switch {
		case i < len(spec.Vocab) && spec.Vocab[i] != "" && control[id]:
			tokens[i], types[i] = spec.Vocab[i], tokControl
		case i < len(spec.Vocab) && spec.Vocab[i] != "":
			if rest, ok := strings.CutPrefix(spec.Vocab[i], prefix); ok && rest != "" {
				tokens[i] = rest
			} else {
				tokens[i] = "\u2581" + spec.Vocab[i]
			}
			types[i] = tokNormal
		default:
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
		}
	}
	mask := int32(-1)
	for _, a := range spec.Added {
		if a.ID >= 0 && int(a.ID) < n && (int(a.ID) >= len(spec.Vocab) || spec.Vocab[a.ID] == "") {
			tokens[a.ID] = a.Content
			types[a.ID] = tokControl
		}
		if a.Content == "[MASK]" {
			mask = a.ID
		}
	}
	if spec.Unk >= 0 && int(spec.Unk) < n {
		types[spec.Unk] = tokUnknown
	}
	kv := []gguf.KV{}
	add := func(key string, v gguf.Value) { kv = append(kv, gguf.KV{Key: key, Value: v}) }
	id := func(key string, v int32) {
		if v >= 0 && int(v) < n {
			add(key, gguf.Uint32(uint32(v)))
		}
	}
	add("tokenizer.ggml.model", gguf.String("bert"))
	add("tokenizer.ggml.pre", gguf.String("default"))
	add("tokenizer.ggml.tokens", gguf.Array(tokens))
	add("tokenizer.ggml.token_type", gguf.Array(types))
	cls, sep := first.IDs[0], last.IDs[0]
	id("tokenizer.ggml.bos_token_id", cls)
	id("tokenizer.ggml.cls_token_id", cls)
	id("tokenizer.ggml.seperator_token_id", sep) // llama.cpp's spelling
	id("tokenizer.ggml.unknown_token_id", spec.Unk)
	id("tokenizer.ggml.mask_token_id", mask)
	if cfg != nil && cfg.PadTokenID != nil {
		id("tokenizer.ggml.padding_token_id", int32(*cfg.PadTokenID))
	}
	// RoBERTa's pair template (<s> a </s></s> b </s>) is told by an EOS
	// that is added: llama.cpp then puts a pair as BOS a EOS SEP b EOS
	// (a single text stays [CLS] text [SEP]).
	double := pairHasDoubleSep(spec.Pair)
	if double {
		id("tokenizer.ggml.eos_token_id", sep)
	}
	add("tokenizer.ggml.add_bos_token", gguf.Bool(true))
	add("tokenizer.ggml.add_sep_token", gguf.Bool(true))
	add("tokenizer.ggml.add_eos_token", gguf.Bool(double))
	return kv, nil
}

// unigramKV builds the tokenizer.ggml keys of a SentencePiece Unigram
// vocabulary (XLM-RoBERTa's: bge-m3, multilingual-e5) as llama.cpp's
// converter writes them: model "t5", the pieces with their scores and
// types (padded with unused [PADn] tokens scored -10000 up to vocabSize),
// add_space_prefix from the Metaspace pre-tokenizer, remove_extra_whitespaces,
// the Precompiled normalizer's charsmap as a byte array, and the special
// token ids of the <s> text </s> post-processor.
func unigramKV(spec *tokenizer.Spec, vocabSize int, cfg *model.Config) ([]gguf.KV, error) {
	n := max(vocabSize, len(spec.Vocab))
	for _, a := range spec.Added {
		n = max(n, int(a.ID)+1)
	}
	if vocabSize > 0 && n > vocabSize {
		return nil, fmt.Errorf("the tokenizer has %d tokens, more than the model's %d embeddings", n, vocabSize)
	}
	if spec.ByteFallback {
		return nil, errors.New("a Unigram vocabulary with byte fallback has no GGUF form lem writes")
	}
	var charsmap []byte
	for _, nm := range spec.Normalizers {
		switch nm.Kind {
		case tokenizer.NormPrecompiled:
			charsmap = nm.Charsmap
		case tokenizer.NormStrip, tokenizer.NormReplace:
			// SentencePiece's whitespace clean-up (remove_extra_whitespaces).
		default:
			return nil, fmt.Errorf("a Unigram vocabulary with a %s normalizer has no GGUF form", nm.Kind)
		}
	}
	prefix := false
	for _, p := range spec.PreTokenizers {
		if p.Kind != tokenizer.PreMetaspace {
			return nil, fmt.Errorf("a Unigram vocabulary with a %s pre-tokenizer has no GGUF form (only Metaspace)", p.Kind)
		}
		prefix = p.Prepend != tokenizer.PrependNever
	}
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range tokens {
		if i < len(spec.Vocab) {
			tokens[i], scores[i], types[i] = spec.Vocab[i], spec.Scores[i], tokNormal
		} else {
			tokens[i], scores[i], types[i] = fmt.Sprintf("[PAD%d]", i), -10000, tokUnused
		}
	}
	mask := int32(-1)
	for _, a := range spec.Added {
		if a.ID < 0 || int(a.ID) >= n {
			continue
		}
		tokens[a.ID] = a.Content
		if int(a.ID) >= len(spec.Vocab) {
			scores[a.ID] = 0
		}
		if a.Special {
			types[a.ID] = tokControl
		} else {
			types[a.ID] = tokUserDefined
		}
		if a.Content == "<mask>" {
			mask = a.ID
		}
	}
	if spec.Unk >= 0 && int(spec.Unk) < n {
		types[spec.Unk] = tokUnknown
	}
	seen := make(map[string]int, n)
	for i, s := range tokens {
		if j, dup := seen[s]; dup {
			return nil, fmt.Errorf("pieces %d and %d are both %q: llama.cpp needs each piece once", j, i, s)
		}
		seen[s] = i
	}
	bos, eos := int32(-1), int32(-1)
	if len(spec.Single) > 0 {
		first, last := spec.Single[0], spec.Single[len(spec.Single)-1]
		if first.Seq == -1 && len(first.IDs) == 1 {
			bos = first.IDs[0]
		}
		if last.Seq == -1 && len(last.IDs) == 1 {
			eos = last.IDs[0]
		}
	}
	kv := []gguf.KV{}
	add := func(key string, v gguf.Value) { kv = append(kv, gguf.KV{Key: key, Value: v}) }
	id := func(key string, v int32) {
		if v >= 0 && int(v) < n {
			add(key, gguf.Uint32(uint32(v)))
		}
	}
	add("tokenizer.ggml.model", gguf.String("t5"))
	add("tokenizer.ggml.pre", gguf.String("default"))
	add("tokenizer.ggml.tokens", gguf.Array(tokens))
	add("tokenizer.ggml.scores", gguf.Array(scores))
	add("tokenizer.ggml.token_type", gguf.Array(types))
	add("tokenizer.ggml.add_space_prefix", gguf.Bool(prefix))
	add("tokenizer.ggml.remove_extra_whitespaces", gguf.Bool(true))
	if len(charsmap) > 0 {
		add("tokenizer.ggml.precompiled_charsmap", gguf.Array(charsmap))
	}
	id("tokenizer.ggml.bos_token_id", bos)
	id("tokenizer.ggml.eos_token_id", eos)
	id("tokenizer.ggml.unknown_token_id", spec.Unk)
	id("tokenizer.ggml.seperator_token_id", eos) // llama.cpp's spelling
	id("tokenizer.ggml.cls_token_id", bos)
	id("tokenizer.ggml.mask_token_id", mask)
	if cfg != nil && cfg.PadTokenID != nil {
		id("tokenizer.ggml.padding_token_id", int32(*cfg.PadTokenID))
	}
	add("tokenizer.ggml.add_bos_token", gguf.Bool(bos >= 0))
	add("tokenizer.ggml.add_eos_token", gguf.Bool(eos >= 0))
	add("tokenizer.ggml.add_sep_token", gguf.Bool(pairHasDoubleSep(spec.Pair)))
	return kv, nil
}

// pairHasDoubleSep reports whether a pair template puts two special tokens
// between the texts (XLM-RoBERTa's <s> a </s></s> b </s>), which llama.cpp
// spells as EOS then SEP when it formats a rerank pair.
func pairHasDoubleSep(pair []tokenizer.TemplatePiece) bool {
	between := 0
	seen := false
	for _, p := range pair {
		switch {
		case p.Seq == 0:
			seen = true
		case p.Seq == 1:
			return between >= 2
		case seen:
			between += len(p.IDs)
		}
	}
	return false
}
