package tokenizer

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Guard is the character a Quoter inserts into text to keep an added
// token's text in it from being matched as the token: U+FDD0, a Unicode
// noncharacter, which text practically never holds. A Guard that was in the
// text already is doubled, so that nothing of the text is lost.
const Guard = '\uFDD0'

const guardStr = string(Guard)

// A Quoter marks untrusted text (a client's message inside a chat
// template's output, say) so that EncodeQuoted encodes it as plain text
// while the text around it keeps its added tokens. Quoting works on the
// strings before they are put together, whatever puts them together (a
// template engine included), as long as it copies them unchanged.
//
// A Quoter is immutable and safe for concurrent use.
type Quoter struct {
	m *addedMatcher // the guarded tokens, nil when none
}

// NewQuoter returns a Quoter for the added tokens for which guard returns
// true (nil guards them all). Tokens of a single character cannot be
// guarded and are left out. A token matched after normalization is guarded
// where the text holds its content or its normalized content; other
// spellings that normalize to it (another case, under a lowercasing
// normalizer) are not.
func (t *Tokenizer) NewQuoter(guard func(AddedToken) bool) *Quoter {
	var toks []AddedToken
	add := func(a AddedToken, content string) {
		if utf8.RuneCountInString(content) > 1 && !strings.Contains(content, guardStr) {
			a.Content = content
			toks = append(toks, a)
		}
	}
	for _, m := range []*addedMatcher{t.added, t.normAdded} {
		if m == nil {
			continue
		}
		for _, a := range m.toks {
			if guard != nil && !guard(a) {
				continue
			}
			add(a, a.Content)
			if m == t.normAdded {
				if n := t.normalize(a.Content); n != a.Content {
					add(a, n)
				}
			}
		}
	}
	return &Quoter{m: newAddedMatcher(toks, func(a AddedToken) string { return a.Content })}
}

// Quote returns s with every Guard in it doubled and a Guard inserted after
// the first character of every occurrence of a guarded token's text, so
// that none is left whole. Unquote(Quote(s)) is s.
func (q *Quoter) Quote(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is written to b
	for i := 0; i < len(s); {
		c := s[i]
		if c == guardStr[0] && strings.HasPrefix(s[i:], guardStr) {
			if b.Len() == 0 {
				b.Grow(len(s) + 16)
			}
			i += len(guardStr)
			b.WriteString(s[done:i])
			b.WriteString(guardStr)
			done = i
			continue
		}
		if q.m != nil && q.m.root[c] != 0 {
			if end, k := q.m.longestAt(s, i); k >= 0 {
				_, w := utf8.DecodeRuneInString(s[i:])
				if i+w < end {
					if b.Len() == 0 {
						b.Grow(len(s) + 16)
					}
					i += w
					b.WriteString(s[done:i])
					b.WriteString(guardStr)
					done = i
					continue
				}
			}
		}
		i++
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// Unquote returns s without the guards a Quoter inserted, and with the
// doubled ones single again: the text as the model reads it.
func Unquote(s string) string {
	i := strings.Index(s, guardStr)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		s = s[i+len(guardStr):]
		if strings.HasPrefix(s, guardStr) {
			b.WriteString(guardStr)
			s = s[len(guardStr):]
		}
		i = strings.Index(s, guardStr)
	}
	b.WriteString(s)
	return b.String()
}

// EncodeQuoted is Encode for text in which some parts were marked by a
// Quoter: an added token is recognised only where no Guard splits its text,
// so the marked parts are encoded exactly as plain text (their guarded
// tokens as the text they hold), and the guards themselves are removed (the
// doubled ones kept once) before the text is encoded. Text without a Guard
// is encoded as Encode does.
func (t *Tokenizer) EncodeQuoted(text string, addSpecial bool) []int32 {
	ids, _ := t.EncodeQuotedLimit(text, addSpecial, math.MaxInt)
	return ids
}

// EncodeQuotedLimit is EncodeQuoted with EncodeLimit's bound on the number
// of ids.
func (t *Tokenizer) EncodeQuotedLimit(text string, addSpecial bool, limit int) ([]int32, bool) {
	quoted := strings.Contains(text, guardStr)
	return t.encode(text, addSpecial, t.added, t.normAdded, quoted, max(limit, 0))
}
