package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Byte-level alphabet: every byte is shown as a printable character. The
// printable bytes stand for themselves; the others (control characters,
// space, DEL, NBSP, soft hyphen) map to U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	byteToStr  [256]string
	runeToByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		byteToStr[b] = string(byteToRune[b])
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode spells the bytes of s in the byte-level alphabet.
func byteLevelEncode(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteString(byteToStr[s[i]])
	}
	return b.String()
}

// appendByteLevelDecoded appends the bytes a byte-level token stands for. A
// token with a character outside the alphabet stands for its own UTF-8
// bytes.
func appendByteLevelDecoded(dst []byte, tok string) []byte {
	n := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:n], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// ill-formed subsequence with U+FFFD (the Unicode "maximal subpart"
// practice, as Rust's from_utf8_lossy and Python's errors="replace" do).
func appendLossy(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			dst = append(dst, b[i:i+w]...)
			i += w
			continue
		}
		dst = append(dst, "\uFFFD"...)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// maximalSubpart returns the length of the longest prefix of b (which does
// not start a valid character) that could begin a valid UTF-8 sequence, or
// one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}

func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(appendLossy(make([]byte, 0, len(b)+8), b))
}

// decoderStep transforms the list of token strings.
type decoderStep interface {
	decodeChain(tokens []string) []string
}

type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = appendByteLevelDecoded(buf, t)
	}
	return append(tokens[:0], lossyString(buf))
}

type replaceDecoder struct{ pattern, content string }

func (d replaceDecoder) decodeChain(tokens []string) []string {
	if d.pattern == "" {
		return tokens
	}
	for i, t := range tokens {
		if strings.Contains(t, d.pattern) {
			tokens[i] = strings.ReplaceAll(t, d.pattern, d.content)
		}
	}
	return tokens
}

// byteFallbackValue parses a <0xXX> token.
func byteFallbackValue(t string) (byte, bool) {
	if len(t) != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(t[3])
	lo, ok2 := hexDigit(t[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	if !hasByteToken(tokens) {
		return tokens
	}
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			// One replacement character per byte token, as the reference
			// decoder does.
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := byteFallbackValue(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

func hasByteToken(tokens []string) bool {
	for _, t := range tokens {
		if _, ok := byteFallbackValue(t); ok {
			return true
		}
	}
	return false
}

type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	if len(tokens) <= 1 {
		return tokens
	}
	return append(tokens[:0], strings.Join(tokens, ""))
}

type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	for i, t := range tokens {
		for k := 0; k < d.start; k++ {
			r, w := utf8.DecodeRuneInString(t)
			if w == 0 || r != d.content {
				break
			}
			t = t[w:]
		}
		for k := 0; k < d.stop; k++ {
			r, w := utf8.DecodeLastRuneInString(t)
			if w == 0 || r != d.content {
				break
			}
			t = t[:len(t)-w]
		}
		tokens[i] = t
	}
	return tokens
}

type metaspaceDecoder struct {
	repl      string
	stripHead bool // prepend scheme is not "never"
}

func (d metaspaceDecoder) decodeChain(tokens []string) []string {
	for i, t := range tokens {
		if !strings.Contains(t, d.repl) {
			continue
		}
		if i == 0 && d.stripHead {
			// The reference drops every replacement character of the
			// first token, not only a leading one.
			tokens[i] = strings.ReplaceAll(t, d.repl, "")
		} else {
			tokens[i] = strings.ReplaceAll(t, d.repl, " ")
		}
	}
	return tokens
}

func compileDecoder(d Decoder) (decoderStep, error) {
	switch d.Kind {
	case DecByteLevel:
		return byteLevelDecoder{}, nil
	case DecReplace:
		return replaceDecoder{d.Pattern, d.Content}, nil
	case DecByteFallback:
		return byteFallbackDecoder{}, nil
	case DecFuse:
		return fuseDecoder{}, nil
	case DecStrip:
		r, n := utf8.DecodeRuneInString(d.Content)
		if n == 0 || n != len(d.Content) {
			return nil, fmt.Errorf("Strip decoder: content %q is not one character", d.Content)
		}
		if d.Start < 0 || d.Stop < 0 {
			return nil, fmt.Errorf("Strip decoder: negative start %d or stop %d", d.Start, d.Stop)
		}
		return stripDecoder{r, d.Start, d.Stop}, nil
	case DecMetaspace:
		repl := d.Replacement
		if repl == "" {
			repl = "▁"
		}
		switch d.Prepend {
		case "", PrependAlways, PrependFirst, PrependNever:
		default:
			return nil, fmt.Errorf("Metaspace decoder: unknown prepend scheme %q", d.Prepend)
		}
		return metaspaceDecoder{repl, d.Prepend != PrependNever}, nil
	case DecWordPiece:
		return wordPieceDecoder{d.Prefix, d.Cleanup}, nil
	}
	return nil, fmt.Errorf("unsupported decoder %q", d.Kind)
}
