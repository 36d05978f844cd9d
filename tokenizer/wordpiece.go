package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPieceModel is BERT's WordPiece: greedy longest match from the start
// of the word, continuation pieces spelled with a prefix.
type wordPieceModel struct {
	vocab    map[string]int32
	unk      int32
	prefix   string
	maxChars int
	maxLen   int // longest vocabulary entry in bytes
}

func newWordPiece(spec *Spec, vocab map[string]int32) (*wordPieceModel, error) {
	if spec.Unk < 0 {
		return nil, errors.New("no unknown token")
	}
	m := &wordPieceModel{vocab: vocab, unk: spec.Unk, prefix: spec.ContinuingSubwordPrefix, maxChars: spec.MaxInputCharsPerWord}
	if m.maxChars <= 0 {
		m.maxChars = 100
	}
	for _, s := range spec.Vocab {
		m.maxLen = max(m.maxLen, len(s))
	}
	return m, nil
}

func (m *wordPieceModel) encode(dst []int32, word string, sc *scratch) []int32 {
	if word == "" {
		return dst
	}
	if utf8.RuneCountInString(word) > m.maxChars {
		return append(dst, m.unk)
	}
	n := len(dst)
	buf := sc.buf[:0]
	for start := 0; start < len(word); {
		end := min(len(word), start+m.maxLen)
		found := int32(-1)
		for end > start {
			for end < len(word) && !utf8.RuneStart(word[end]) {
				end-- // only whole characters
			}
			if end <= start {
				break
			}
			key := word[start:end]
			if start > 0 {
				buf = append(append(buf[:0], m.prefix...), key...)
				key = string(buf)
			}
			if id, ok := m.vocab[key]; ok {
				found = id
				break
			}
			end--
		}
		if found < 0 {
			sc.buf = buf
			return append(dst[:n], m.unk)
		}
		dst = append(dst, found)
		start = end
	}
	sc.buf = buf
	return dst
}

// bertNormalizer is BertNormalizer: clean text, pad CJK ideographs with
// spaces, strip accents, lowercase, in that order.
type bertNormalizer struct {
	clean, chinese, strip, lower bool
}

func (b bertNormalizer) normalize(s string) string {
	if b.clean || b.chinese {
		var sb strings.Builder
		sb.Grow(len(s))
		for _, r := range s {
			if b.clean {
				if r == 0 || r == utf8.RuneError || isBertControl(r) {
					continue
				}
				if isBertSpace(r) {
					r = ' '
				}
			}
			if b.chinese && isCJK(r) {
				sb.WriteByte(' ')
				sb.WriteRune(r)
				sb.WriteByte(' ')
				continue
			}
			sb.WriteRune(r)
		}
		s = sb.String()
	}
	if b.strip {
		s = stripAccentsNormalizer{}.normalize(norm.NFD.String(s))
	}
	if b.lower {
		s = lowercaseNormalizer{}.normalize(s)
	}
	return s
}

func isBertSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.Zs, r)
}

// isBertControl reports the characters clean_text drops: control, format,
// private-use and unassigned ones, except tab and line breaks.
func isBertControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cs)
}

// isCJK reports the CJK ideograph blocks BERT treats as words of their own.
func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

// precompiledNormalizer applies SentencePiece's compiled normalization
// rules: a double-array trie over UTF-8 bytes whose values index
// NUL-terminated replacement strings.
type precompiledNormalizer struct {
	trie []uint32
	repl []byte
}

func newPrecompiled(cm []byte) (*precompiledNormalizer, error) {
	if len(cm) < 4 {
		return nil, errors.New("Precompiled charsmap: too short")
	}
	size := binary.LittleEndian.Uint32(cm)
	if size%4 != 0 || uint64(size) > uint64(len(cm)-4) || size == 0 {
		return nil, fmt.Errorf("Precompiled charsmap: trie size %d invalid for %d bytes", size, len(cm))
	}
	p := &precompiledNormalizer{trie: make([]uint32, size/4), repl: cm[4+size:]}
	for i := range p.trie {
		p.trie[i] = binary.LittleEndian.Uint32(cm[4+4*i:])
	}
	return p, nil
}

// lookup returns the replacement of the shortest prefix of key that has
// one, as the reference does.
func (p *precompiledNormalizer) lookup(key string) (string, bool) {
	offset := func(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }
	pos := offset(p.trie[0])
	for i := 0; i < len(key); i++ {
		c := uint32(key[i])
		if c == 0 {
			break
		}
		pos ^= c
		if int(pos) >= len(p.trie) {
			return "", false
		}
		u := p.trie[pos]
		if u&((1<<31)|0xFF) != c {
			return "", false
		}
		pos ^= offset(u)
		if int(pos) >= len(p.trie) {
			return "", false
		}
		if (u>>8)&1 == 1 {
			v := int(p.trie[pos] & (1<<31 - 1))
			if v >= len(p.repl) {
				return "", false
			}
			end := v
			for end < len(p.repl) && p.repl[end] != 0 {
				end++
			}
			return string(p.repl[v:end]), true
		}
	}
	return "", false
}

func (p *precompiledNormalizer) normalize(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); {
		g := graphemeEnd(s, i)
		cluster := s[i:g]
		if len(cluster) < 6 {
			if r, ok := p.lookup(cluster); ok {
				sb.WriteString(r)
				i = g
				continue
			}
		}
		for _, r := range cluster {
			var b [4]byte
			ch := string(b[:utf8.EncodeRune(b[:], r)])
			if rep, ok := p.lookup(ch); ok {
				sb.WriteString(rep)
			} else {
				sb.WriteString(ch)
			}
		}
		i = g
	}
	return sb.String()
}

// graphemeEnd approximates the end of the extended grapheme cluster that
// starts at i: a character with the combining marks, variation selectors,
// emoji modifiers and zero-width-joined characters that follow it, and
// CR LF.
func graphemeEnd(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	j := i + w
	if r == '\r' {
		if j < len(s) && s[j] == '\n' {
			return j + 1
		}
		return j
	}
	if r == '\n' {
		return j
	}
	for j < len(s) {
		r, w := utf8.DecodeRuneInString(s[j:])
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc), r >= 0xFE00 && r <= 0xFE0F,
			r >= 0x1F3FB && r <= 0x1F3FF, r >= 0xE0020 && r <= 0xE007F:
			j += w
		case r == 0x200D:
			j += w
			if j < len(s) {
				_, w2 := utf8.DecodeRuneInString(s[j:])
				j += w2
			}
		default:
			return j
		}
	}
	return j
}

// wordPieceDecoder joins WordPiece tokens.
type wordPieceDecoder struct {
	prefix  string
	cleanup bool
}

func (d wordPieceDecoder) decodeChain(tokens []string) []string {
	for i, t := range tokens {
		if i > 0 {
			if rest, ok := strings.CutPrefix(t, d.prefix); ok {
				t = rest
			} else {
				t = " " + t
			}
		}
		if d.cleanup {
			t = cleanupSpaces(t)
		}
		tokens[i] = t
	}
	return tokens
}

var cleanupReplacer = strings.NewReplacer(
	" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
	" n't", "n't", " 'm", "'m", " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re")

// cleanupSpaces removes the spaces the tokenization put before
// punctuation and English contractions.
func cleanupSpaces(s string) string { return cleanupReplacer.Replace(s) }
