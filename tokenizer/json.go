package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxFileSize bounds what Load reads (and what a gzipped file may expand
// to).
const maxFileSize = 1 << 30

// Load reads a tokenizer.json file. A name ending in .gz, or gzip content,
// is decompressed.
func Load(path string) (*Tokenizer, error) {
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// LoadDir reads a model directory's tokenizer.json (or tokenizer.json.gz)
// and, when present, its tokenizer_config.json, which may set
// add_bos_token, add_eos_token, bos_token and eos_token, and selects the
// behaviour transformers gives some tokenizer classes (LlamaTokenizer's
// Metaspace pre-tokenization).
func LoadDir(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		if _, err2 := os.Stat(path + ".gz"); err2 == nil {
			path += ".gz"
		}
	}
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfgData, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := applyConfig(spec, cfgData); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("read tokenizer config: %w", err)
	}
	t, err := New(*spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func readMaybeGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open tokenizer: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	var head [2]byte
	n, _ := io.ReadFull(f, head[:])
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return data, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, err
	}
	return New(*spec)
}

// JSON shapes of tokenizer.json.

type jsonAdded struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// jsonModel is tokenizer.json's model; the vocabulary and merges are read
// by the scanner.
type jsonModel struct {
	Type                    string   `json:"type"`
	UnkToken                *string  `json:"unk_token"`
	UnkID                   *int64   `json:"unk_id"`
	FuseUnk                 bool     `json:"fuse_unk"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	Dropout                 *float64 `json:"dropout"`
	MaxInputCharsPerWord    *int64   `json:"max_input_chars_per_word"`

	vocabShape byte     // '{' (BPE), '[' (Unigram) or 0 (absent or null)
	vocab      []string // BPE tokens by id
	uniVocab   []uniEntry
	merges     [][2]string
	hasMerges  bool
}

type uniEntry struct {
	tok   string
	score float64
}

func truncate(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

// jsonStep is any normalizer, pre-tokenizer, decoder or post-processor
// object; each reads the fields it needs.
type jsonStep struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Processors    []json.RawMessage `json:"processors"`

	Pattern *struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content          *string `json:"content"`
	Prepend          *string `json:"prepend"`
	StripLeft        bool    `json:"strip_left"`
	StripRight       bool    `json:"strip_right"`
	Behavior         string  `json:"behavior"`
	Invert           bool    `json:"invert"`
	AddPrefixSpace   *bool   `json:"add_prefix_space"`
	UseRegex         *bool   `json:"use_regex"`
	Replacement      *string `json:"replacement"`
	PrependScheme    *string `json:"prepend_scheme"`
	Split            *bool   `json:"split"`
	IndividualDigits bool    `json:"individual_digits"`
	Delimiter        *string `json:"delimiter"`
	Start            int     `json:"start"`
	Stop             int     `json:"stop"`

	Single        []jsonTemplatePiece `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
	Sep []json.RawMessage `json:"sep"`
	Cls []json.RawMessage `json:"cls"`

	PrecompiledCharsmap *string `json:"precompiled_charsmap"`

	CleanText          *bool               `json:"clean_text"`
	HandleChineseChars *bool               `json:"handle_chinese_chars"`
	StripAccents       *bool               `json:"strip_accents"`
	Lowercase          *bool               `json:"lowercase"`
	Prefix             *string             `json:"prefix"`
	Cleanup            *bool               `json:"cleanup"`
	Pair               []jsonTemplatePiece `json:"pair"`
}

type jsonTemplatePiece struct {
	SpecialToken *struct {
		ID     string `json:"id"`
		TypeID int32  `json:"type_id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID     string `json:"id"`
		TypeID int32  `json:"type_id"`
	} `json:"Sequence"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func parseStep(raw json.RawMessage, what string) (*jsonStep, error) {
	var s jsonStep
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &s, nil
}

// ParseSpec parses the contents of a tokenizer.json file into a Spec
// without building the tokenizer.
func ParseSpec(data []byte) (*Spec, error) {
	s := &jsonScanner{data: string(data)}
	var (
		model                                        *jsonModel
		added                                        []jsonAdded
		normalizer, preTokenizer, postProcessor, dec json.RawMessage
	)
	err := s.object(func(key string) error {
		if key == "model" {
			m, err := parseModelJSON(s)
			if err != nil {
				return fmt.Errorf("model: %w", err)
			}
			model = m
			return nil
		}
		raw, err := s.raw()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		switch key {
		case "added_tokens":
			if err := json.Unmarshal([]byte(raw), &added); err != nil {
				return fmt.Errorf("added_tokens: %w", err)
			}
		case "normalizer":
			normalizer = json.RawMessage(raw)
		case "pre_tokenizer":
			preTokenizer = json.RawMessage(raw)
		case "post_processor":
			postProcessor = json.RawMessage(raw)
		case "decoder":
			dec = json.RawMessage(raw)
		}
		return nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if model == nil {
		return nil, errors.New("tokenizer.json: no model")
	}
	spec := &Spec{Unk: -1, BOS: -1, EOS: -1}
	if err := buildModel(spec, model); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	for i, a := range added {
		if a.ID == nil {
			return nil, fmt.Errorf("added_tokens[%d] %q: no id", i, a.Content)
		}
		if *a.ID < 0 || *a.ID > 1<<31-1 {
			return nil, fmt.Errorf("added_tokens[%d] %q: id %d out of range", i, a.Content, *a.ID)
		}
		spec.Added = append(spec.Added, AddedToken{
			ID: int32(*a.ID), Content: a.Content, Special: a.Special,
			SingleWord: a.SingleWord, LStrip: a.LStrip, RStrip: a.RStrip, Normalized: a.Normalized,
		})
	}
	if !isNull(normalizer) {
		if err := parseNormalizer(spec, normalizer, 0); err != nil {
			return nil, fmt.Errorf("normalizer: %w", err)
		}
	}
	if !isNull(preTokenizer) {
		if err := parsePreTokenizer(spec, preTokenizer, 0); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
	}
	if !isNull(dec) {
		if err := parseDecoder(spec, dec, 0); err != nil {
			return nil, fmt.Errorf("decoder: %w", err)
		}
	}
	if !isNull(postProcessor) {
		if err := parsePostProcessor(spec, postProcessor, 0); err != nil {
			return nil, fmt.Errorf("post_processor: %w", err)
		}
	}
	return spec, nil
}

// parseModelJSON reads the model object: vocabulary and merges with the
// scanner, the other fields with encoding/json.
func parseModelJSON(s *jsonScanner) (*jsonModel, error) {
	m := &jsonModel{}
	err := s.object(func(key string) error {
		switch key {
		case "vocab":
			switch s.peek() {
			case '{':
				m.vocabShape = '{'
				n := 0
				return s.object(func(tok string) error {
					id, err := s.integer()
					if err != nil {
						return fmt.Errorf("vocab %q: %w", tok, err)
					}
					n++
					if id < 0 || id >= int64(2*n+1024) {
						return fmt.Errorf("vocab: token %q has id %d, out of range for %d tokens", tok, id, n)
					}
					for int(id) >= len(m.vocab) {
						m.vocab = append(m.vocab, "")
					}
					if m.vocab[id] != "" || tok == "" {
						return fmt.Errorf("vocab: id %d used by %q and %q", id, m.vocab[id], tok)
					}
					m.vocab[id] = tok
					return nil
				})
			case '[':
				m.vocabShape = '['
				return s.array(func(i int) error {
					var e uniEntry
					n := 0
					err := s.array(func(k int) error {
						n++
						var err error
						switch k {
						case 0:
							e.tok, err = s.str()
						case 1:
							e.score, err = s.float()
						default:
							err = s.errorf("want [piece, score]")
						}
						return err
					})
					if err == nil && n != 2 {
						err = s.errorf("want [piece, score]")
					}
					if err != nil {
						return fmt.Errorf("vocab[%d]: %w", i, err)
					}
					m.uniVocab = append(m.uniVocab, e)
					return nil
				})
			}
			return s.literal("null")
		case "merges":
			if s.peek() == 'n' {
				return s.literal("null")
			}
			m.hasMerges = true
			return s.array(func(i int) error {
				mg, err := parseMerge(s)
				if err != nil {
					return fmt.Errorf("merges[%d]: %w", i, err)
				}
				m.merges = append(m.merges, mg)
				return nil
			})
		}
		raw, err := s.raw()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		var dst any
		switch key {
		case "type":
			dst = &m.Type
		case "unk_token":
			dst = &m.UnkToken
		case "unk_id":
			dst = &m.UnkID
		case "fuse_unk":
			dst = &m.FuseUnk
		case "byte_fallback":
			dst = &m.ByteFallback
		case "ignore_merges":
			dst = &m.IgnoreMerges
		case "continuing_subword_prefix":
			dst = &m.ContinuingSubwordPrefix
		case "end_of_word_suffix":
			dst = &m.EndOfWordSuffix
		case "dropout":
			dst = &m.Dropout
		case "max_input_chars_per_word":
			dst = &m.MaxInputCharsPerWord
		default:
			return nil
		}
		if err := json.Unmarshal([]byte(raw), dst); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	return m, err
}

// parseMerge reads a merge written "a b" or ["a", "b"].
func parseMerge(s *jsonScanner) ([2]string, error) {
	if s.peek() == '"' {
		v, err := s.str()
		if err != nil {
			return [2]string{}, err
		}
		a, b, ok := strings.Cut(v, " ")
		if !ok || strings.Contains(b, " ") {
			return [2]string{}, fmt.Errorf("merge %q is not two tokens separated by a space", v)
		}
		return [2]string{a, b}, nil
	}
	var mg [2]string
	n := 0
	err := s.array(func(k int) error {
		if k > 1 {
			return s.errorf("want two tokens")
		}
		v, err := s.str()
		mg[k] = v
		n++
		return err
	})
	if err == nil && n != 2 {
		err = s.errorf("want two tokens, got %d", n)
	}
	return mg, err
}

// arena copies strings into one allocation, so the tokenizer does not keep
// the whole file alive through substrings.
func arena(strs []string) {
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	buf := make([]byte, 0, n)
	for _, s := range strs {
		buf = append(buf, s...)
	}
	all := string(buf)
	off := 0
	for i, s := range strs {
		strs[i] = all[off : off+len(s)]
		off += len(s)
	}
}

func buildModel(spec *Spec, m *jsonModel) error {
	typ := m.Type
	if typ == "" {
		// Old files leave the type out; the vocabulary's shape and the
		// fields that only one model has tell.
		switch {
		case m.vocabShape == '[':
			typ = "Unigram"
		case m.hasMerges:
			typ = "BPE"
		case m.vocabShape == '{' && (m.ContinuingSubwordPrefix != nil || m.MaxInputCharsPerWord != nil):
			typ = "WordPiece"
		}
	}
	switch typ {
	case "BPE":
		if m.vocabShape == '[' {
			return errors.New("BPE vocab is a list")
		}
		spec.Model = ModelBPE
		spec.Vocab = m.vocab
		arena(spec.Vocab)
		spec.Merges = m.merges
		spec.FuseUnk = m.FuseUnk
		spec.ByteFallback = m.ByteFallback
		spec.IgnoreMerges = m.IgnoreMerges
		spec.ContinuingSubwordPrefix = str(m.ContinuingSubwordPrefix)
		spec.EndOfWordSuffix = str(m.EndOfWordSuffix)
		if m.UnkToken != nil {
			spec.Unk = -1
			for id, tok := range spec.Vocab {
				if tok == *m.UnkToken {
					spec.Unk = int32(id)
					break
				}
			}
			if spec.Unk < 0 {
				return fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
			}
		}
		return nil
	case "WordPiece":
		if m.vocabShape == '[' {
			return errors.New("WordPiece vocab is a list")
		}
		spec.Model = ModelWordPiece
		spec.Vocab = m.vocab
		arena(spec.Vocab)
		spec.ContinuingSubwordPrefix = "##"
		if m.ContinuingSubwordPrefix != nil {
			spec.ContinuingSubwordPrefix = *m.ContinuingSubwordPrefix
		}
		spec.MaxInputCharsPerWord = 100
		if m.MaxInputCharsPerWord != nil {
			if *m.MaxInputCharsPerWord <= 0 || *m.MaxInputCharsPerWord > 1<<30 {
				return fmt.Errorf("max_input_chars_per_word %d out of range", *m.MaxInputCharsPerWord)
			}
			spec.MaxInputCharsPerWord = int(*m.MaxInputCharsPerWord)
		}
		unk := "[UNK]"
		if m.UnkToken != nil {
			unk = *m.UnkToken
		}
		for id, tok := range spec.Vocab {
			if tok == unk {
				spec.Unk = int32(id)
				break
			}
		}
		if spec.Unk < 0 {
			return fmt.Errorf("unk_token %q is not in the vocabulary", unk)
		}
		return nil
	case "Unigram":
		if m.vocabShape == '{' {
			return errors.New("Unigram vocab is an object")
		}
		spec.Model = ModelUnigram
		spec.Vocab = make([]string, len(m.uniVocab))
		spec.Scores = make([]float32, len(m.uniVocab))
		for i, e := range m.uniVocab {
			spec.Vocab[i], spec.Scores[i] = e.tok, float32(e.score)
		}
		arena(spec.Vocab)
		spec.FuseUnk = true
		spec.ByteFallback = m.ByteFallback
		if m.UnkID != nil {
			if *m.UnkID < 0 || *m.UnkID >= int64(len(m.uniVocab)) {
				return fmt.Errorf("unk_id %d out of range [0, %d)", *m.UnkID, len(m.uniVocab))
			}
			spec.Unk = int32(*m.UnkID)
		}
		return nil
	case "":
		return errors.New("model type missing")
	}
	return fmt.Errorf("unsupported model type %q", typ)
}

const maxDepth = 16

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func parseNormalizer(spec *Spec, raw json.RawMessage, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	s, err := parseStep(raw, "normalizer")
	if err != nil {
		return err
	}
	n := Normalizer{Kind: NormalizerKind(s.Type)}
	switch n.Kind {
	case "Sequence":
		for i, r := range s.Normalizers {
			if err := parseNormalizer(spec, r, depth+1); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
		return nil
	case NormNFC, NormNFD, NormNFKC, NormNFKD, NormLowercase, NormStripAccents:
	case NormReplace:
		if s.Pattern == nil {
			return errors.New("Replace: no pattern")
		}
		n.Pattern, n.Regex, n.Content = str(s.Pattern.String), str(s.Pattern.Regex), str(s.Content)
	case NormPrepend:
		n.Content = str(s.Prepend)
	case NormStrip:
		n.Left, n.Right = s.StripLeft, s.StripRight
	case "Precompiled":
		if s.PrecompiledCharsmap == nil || *s.PrecompiledCharsmap == "" {
			return nil // an empty charsmap changes nothing
		}
		cm, err := base64.StdEncoding.DecodeString(*s.PrecompiledCharsmap)
		if err != nil {
			return fmt.Errorf("Precompiled: charsmap: %w", err)
		}
		n.Kind, n.Charsmap = NormPrecompiled, cm
	case NormBert:
		flag := func(p *bool, def bool) bool {
			if p == nil {
				return def
			}
			return *p
		}
		n.CleanText = flag(s.CleanText, true)
		n.HandleChineseChars = flag(s.HandleChineseChars, true)
		n.Lowercase = flag(s.Lowercase, true)
		// strip_accents null follows lowercase.
		n.StripAccents = flag(s.StripAccents, n.Lowercase)
	default:
		return fmt.Errorf("unsupported normalizer %q", s.Type)
	}
	spec.Normalizers = append(spec.Normalizers, n)
	return nil
}

func parsePreTokenizer(spec *Spec, raw json.RawMessage, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	s, err := parseStep(raw, "pre-tokenizer")
	if err != nil {
		return err
	}
	p := PreTokenizer{Kind: PreTokenizerKind(s.Type), Behavior: SplitBehavior(s.Behavior), Invert: s.Invert}
	switch p.Kind {
	case "Sequence":
		for i, r := range s.Pretokenizers {
			if err := parsePreTokenizer(spec, r, depth+1); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
		return nil
	case PreSplit:
		if s.Pattern == nil {
			return errors.New("Split: no pattern")
		}
		p.Pattern, p.Regex = str(s.Pattern.String), str(s.Pattern.Regex)
	case PreByteLevel:
		p.AddPrefixSpace = s.AddPrefixSpace == nil || *s.AddPrefixSpace
		p.UseRegex = s.UseRegex == nil || *s.UseRegex
	case PreMetaspace:
		p.Replacement = str(s.Replacement)
		p.Prepend = metaspaceScheme(s)
		p.Split = s.Split == nil || *s.Split
	case PreDigits:
		p.IndividualDigits = s.IndividualDigits
	case PrePunctuation:
	case PreWhitespace, PreWhitespaceSplit, PreBert:
	case PreCharDelimiter:
		p.Pattern = str(s.Delimiter)
	default:
		return fmt.Errorf("unsupported pre-tokenizer %q", s.Type)
	}
	spec.PreTokenizers = append(spec.PreTokenizers, p)
	return nil
}

// metaspaceScheme reads prepend_scheme, or the older add_prefix_space.
func metaspaceScheme(s *jsonStep) PrependScheme {
	if s.PrependScheme != nil {
		return PrependScheme(*s.PrependScheme)
	}
	if s.AddPrefixSpace != nil && !*s.AddPrefixSpace {
		return PrependNever
	}
	return PrependAlways
}

func parseDecoder(spec *Spec, raw json.RawMessage, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	s, err := parseStep(raw, "decoder")
	if err != nil {
		return err
	}
	d := Decoder{Kind: DecoderKind(s.Type)}
	switch d.Kind {
	case "Sequence":
		for i, r := range s.Decoders {
			if err := parseDecoder(spec, r, depth+1); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
		return nil
	case DecByteLevel, DecByteFallback, DecFuse:
	case DecReplace:
		if s.Pattern == nil || s.Pattern.String == nil {
			return errors.New("Replace: only string patterns are supported")
		}
		d.Pattern, d.Content = *s.Pattern.String, str(s.Content)
	case DecStrip:
		d.Content, d.Start, d.Stop = str(s.Content), s.Start, s.Stop
	case DecMetaspace:
		d.Replacement = str(s.Replacement)
		d.Prepend = metaspaceScheme(s)
	case DecWordPiece:
		d.Prefix = "##"
		if s.Prefix != nil {
			d.Prefix = *s.Prefix
		}
		d.Cleanup = s.Cleanup == nil || *s.Cleanup
	default:
		return fmt.Errorf("unsupported decoder %q", s.Type)
	}
	spec.Decoders = append(spec.Decoders, d)
	return nil
}

func parsePostProcessor(spec *Spec, raw json.RawMessage, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	s, err := parseStep(raw, "post-processor")
	if err != nil {
		return err
	}
	switch s.Type {
	case "Sequence":
		for i, r := range s.Processors {
			if err := parsePostProcessor(spec, r, depth+1); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
	case "ByteLevel":
		// Only offsets change.
	case "TemplateProcessing":
		var prefix, suffix []int32
		seen := false
		for i, p := range s.Single {
			switch {
			case p.Sequence != nil:
				seen = true
			case p.SpecialToken != nil:
				st, ok := s.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("TemplateProcessing: single[%d]: special token %q not defined", i, p.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id > 1<<31-1 {
						return fmt.Errorf("TemplateProcessing: special token %q: id %d out of range", p.SpecialToken.ID, id)
					}
					if seen {
						suffix = append(suffix, int32(id))
					} else {
						prefix = append(prefix, int32(id))
					}
				}
			}
		}
		setTemplate(spec, prefix, suffix)
		single, err := templatePieces(s, s.Single, "single")
		if err != nil {
			return err
		}
		pair, err := templatePieces(s, s.Pair, "pair")
		if err != nil {
			return err
		}
		spec.Single, spec.Pair = single, pair
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenPair(s.Cls)
		if err != nil {
			return fmt.Errorf("%s: cls: %w", s.Type, err)
		}
		sep, err := tokenPair(s.Sep)
		if err != nil {
			return fmt.Errorf("%s: sep: %w", s.Type, err)
		}
		setTemplate(spec, []int32{cls}, []int32{sep})
		// BERT gives the second text and its separator type 1; RoBERTa
		// puts two separators between the texts and uses type 0 throughout.
		c, e := []int32{cls}, []int32{sep}
		spec.Single = []TemplatePiece{{Seq: -1, IDs: c}, {Seq: 0}, {Seq: -1, IDs: e}}
		if s.Type == "BertProcessing" {
			spec.Pair = []TemplatePiece{{Seq: -1, IDs: c}, {Seq: 0}, {Seq: -1, IDs: e}, {Seq: 1, TypeID: 1}, {Seq: -1, IDs: e, TypeID: 1}}
		} else {
			spec.Pair = []TemplatePiece{{Seq: -1, IDs: c}, {Seq: 0}, {Seq: -1, IDs: e}, {Seq: -1, IDs: e}, {Seq: 1}, {Seq: -1, IDs: e}}
		}
	default:
		return fmt.Errorf("unsupported post-processor %q", s.Type)
	}
	return nil
}

// templatePieces converts a TemplateProcessing template; nil for an absent
// one.
func templatePieces(s *jsonStep, tmpl []jsonTemplatePiece, what string) ([]TemplatePiece, error) {
	if len(tmpl) == 0 {
		return nil, nil
	}
	out := make([]TemplatePiece, 0, len(tmpl))
	for i, p := range tmpl {
		switch {
		case p.Sequence != nil:
			seq := 0
			switch p.Sequence.ID {
			case "A":
			case "B":
				seq = 1
			default:
				return nil, fmt.Errorf("TemplateProcessing: %s[%d]: unknown sequence %q", what, i, p.Sequence.ID)
			}
			out = append(out, TemplatePiece{Seq: seq, TypeID: p.Sequence.TypeID})
		case p.SpecialToken != nil:
			st, ok := s.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("TemplateProcessing: %s[%d]: special token %q not defined", what, i, p.SpecialToken.ID)
			}
			ids := make([]int32, 0, len(st.IDs))
			for _, id := range st.IDs {
				if id < 0 || id > 1<<31-1 {
					return nil, fmt.Errorf("TemplateProcessing: special token %q: id %d out of range", p.SpecialToken.ID, id)
				}
				ids = append(ids, int32(id))
			}
			out = append(out, TemplatePiece{Seq: -1, IDs: ids, TypeID: p.SpecialToken.TypeID})
		default:
			return nil, fmt.Errorf("TemplateProcessing: %s[%d]: neither a sequence nor a special token", what, i)
		}
	}
	return out, nil
}

// setTemplate records a post-processor's special tokens; a single leading
// or trailing token also names BOS or EOS.
func setTemplate(spec *Spec, prefix, suffix []int32) {
	spec.Prefix, spec.Suffix = prefix, suffix
	if spec.Prefix == nil {
		spec.Prefix = []int32{}
	}
	if len(prefix) == 1 {
		spec.BOS, spec.AddBOS = prefix[0], true
	}
	if len(suffix) == 1 {
		spec.EOS, spec.AddEOS = suffix[0], true
	}
}

// tokenPair reads a ["token", id] pair.
func tokenPair(raw []json.RawMessage) (int32, error) {
	if len(raw) != 2 {
		return 0, fmt.Errorf("want [token, id], got %d elements", len(raw))
	}
	var id int64
	if err := json.Unmarshal(raw[1], &id); err != nil {
		return 0, err
	}
	if id < 0 || id > 1<<31-1 {
		return 0, fmt.Errorf("id %d out of range", id)
	}
	return int32(id), nil
}

// jsonConfig is the part of tokenizer_config.json the tokenizer uses.
type jsonConfig struct {
	AddBOSToken    *bool           `json:"add_bos_token"`
	AddEOSToken    *bool           `json:"add_eos_token"`
	BOSToken       json.RawMessage `json:"bos_token"`
	EOSToken       json.RawMessage `json:"eos_token"`
	TokenizerClass string          `json:"tokenizer_class"`
	Legacy         *bool           `json:"legacy"`
	AddPrefixSpace *bool           `json:"add_prefix_space"`
}

// configToken reads a token given as a string, as {"content": ...}, or as
// null (ok and absent: "").
func configToken(raw json.RawMessage) (tok string, present bool, err error) {
	if len(raw) == 0 {
		return "", false, nil
	}
	if isNull(raw) {
		return "", true, nil
	}
	if err := json.Unmarshal(raw, &tok); err == nil {
		return tok, true, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", false, fmt.Errorf("token %s: %w", truncate(raw), err)
	}
	return obj.Content, true, nil
}

// applyConfig folds tokenizer_config.json into spec.
func applyConfig(spec *Spec, data []byte) error {
	var c jsonConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("parse tokenizer config: %w", err)
	}
	lookup := func(tok string) int32 {
		for _, a := range spec.Added {
			if a.Content == tok {
				return a.ID
			}
		}
		for id, s := range spec.Vocab {
			if s == tok {
				return int32(id)
			}
		}
		return -1
	}
	for _, f := range []struct {
		raw json.RawMessage
		id  *int32
	}{{c.BOSToken, &spec.BOS}, {c.EOSToken, &spec.EOS}} {
		tok, present, err := configToken(f.raw)
		if err != nil {
			return err
		}
		if present {
			*f.id = -1
			if tok != "" {
				*f.id = lookup(tok)
			}
		}
	}
	if c.AddBOSToken != nil || c.AddEOSToken != nil {
		// The config decides, as transformers rebuilds the post-processor
		// from these flags.
		addBOS := len(spec.Prefix) > 0 && spec.Prefix[0] == spec.BOS
		addEOS := len(spec.Suffix) > 0 && spec.Suffix[len(spec.Suffix)-1] == spec.EOS
		if c.AddBOSToken != nil {
			addBOS = *c.AddBOSToken
		}
		if c.AddEOSToken != nil {
			addEOS = *c.AddEOSToken
		}
		spec.AddBOS, spec.AddEOS = addBOS, addEOS
		spec.Prefix, spec.Suffix = nil, nil
	}
	switch c.TokenizerClass {
	case "LlamaTokenizer", "LlamaTokenizerFast":
		applyLlamaClass(spec, c)
	}
	return nil
}

// applyLlamaClass gives a SentencePiece-style Llama vocabulary the pipeline
// transformers' LlamaTokenizer builds, whatever tokenizer.json says: no
// normalizer, Metaspace pre-tokenization without splitting, and a decoder
// that strips the prefix space. Byte-level vocabularies that declare the
// class are left alone.
func applyLlamaClass(spec *Spec, c jsonConfig) {
	for _, p := range spec.PreTokenizers {
		if p.Kind == PreByteLevel {
			return
		}
	}
	for _, d := range spec.Decoders {
		if d.Kind == DecByteLevel {
			return
		}
	}
	prefixSpace := c.AddPrefixSpace == nil || *c.AddPrefixSpace
	scheme := PrependNever
	if prefixSpace {
		scheme = PrependFirst
		if c.Legacy != nil && *c.Legacy {
			scheme = PrependAlways
		}
	}
	spec.Normalizers = nil
	spec.PreTokenizers = []PreTokenizer{{Kind: PreMetaspace, Replacement: "▁", Prepend: scheme}}
	spec.Decoders = []Decoder{
		{Kind: DecReplace, Pattern: "▁", Content: " "},
		{Kind: DecByteFallback},
		{Kind: DecFuse},
	}
	if prefixSpace {
		spec.Decoders = append(spec.Decoders, Decoder{Kind: DecStrip, Content: " ", Start: 1})
	}
}
