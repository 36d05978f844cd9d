package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a stretch of input text.
type normalizer interface {
	normalize(s string) string
}

type formNormalizer struct{ form norm.Form }

func (n formNormalizer) normalize(s string) string {
	// A quick check avoids the copy in the common case.
	if n.form.IsNormalString(s) {
		return s
	}
	return n.form.String(s)
}

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		// Full lowercase mapping: the only unconditional multi-character
		// lowercase mapping in Unicode is U+0130.
		if r == '\u0130' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

type replaceNormalizer struct {
	pattern string
	re      *regexp2.Regexp
	content string
}

func (n replaceNormalizer) normalize(s string) string {
	if n.re == nil {
		if n.pattern == "" {
			return s
		}
		return strings.ReplaceAll(s, n.pattern, n.content)
	}
	idx, err := n.re.FindAllStringIndex(s, -1)
	if err != nil || len(idx) == 0 {
		return s
	}
	var b strings.Builder
	prev := 0
	for _, m := range idx {
		b.WriteString(s[prev:m[0]])
		b.WriteString(n.content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string) string {
	if strings.IndexFunc(s, isMark) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isMark(r) {
			return -1
		}
		return r
	}, s)
}

func isMark(r rune) bool { return r >= 0x300 && unicode.Is(unicode.Mn, r) }

func compileNormalizer(n Normalizer) (normalizer, error) {
	switch n.Kind {
	case NormNFC:
		return formNormalizer{norm.NFC}, nil
	case NormNFD:
		return formNormalizer{norm.NFD}, nil
	case NormNFKC:
		return formNormalizer{norm.NFKC}, nil
	case NormNFKD:
		return formNormalizer{norm.NFKD}, nil
	case NormLowercase:
		return lowercaseNormalizer{}, nil
	case NormReplace:
		r := replaceNormalizer{pattern: n.Pattern, content: n.Content}
		if n.Regex != "" {
			re, err := compileRegex(n.Regex)
			if err != nil {
				return nil, fmt.Errorf("Replace normalizer: %w", err)
			}
			r.re = re
		}
		return r, nil
	case NormPrepend:
		return prependNormalizer{n.Content}, nil
	case NormStrip:
		return stripNormalizer{n.Left, n.Right}, nil
	case NormStripAccents:
		return stripAccentsNormalizer{}, nil
	case NormBert:
		return bertNormalizer{n.CleanText, n.HandleChineseChars, n.StripAccents, n.Lowercase}, nil
	case NormPrecompiled:
		return newPrecompiled(n.Charsmap)
	}
	return nil, fmt.Errorf("unsupported normalizer %q", n.Kind)
}

// compileRegex compiles an expression that has no native scanner with a
// backtracking engine whose \s, \w, \d and \p classes are Unicode-aware.
func compileRegex(expr string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("compile regex %q: %w", expr, err)
	}
	// A pathological expression from a hostile file must not hang Encode:
	// past the limit the text is left unsplit.
	re.MatchTimeout = 10 * time.Second
	return re, nil
}
