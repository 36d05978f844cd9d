package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// piece is a pre-token: a stretch of normalized text the model encodes on
// its own. first marks a piece that starts at the very start of the input
// (Metaspace's "first" prepend scheme needs it).
type piece struct {
	text  string
	first bool
}

// span is a byte range of a piece, a delimiter (match) or not.
type span struct {
	start, end int
	match      bool
}

// preTokenizer splits (and may rewrite) one piece, appending the results to
// dst.
type preTokenizer interface {
	pretokenize(dst []piece, p piece, sc *scratch) []piece
}

// splitPiece cuts p at matches (ordered, non-overlapping byte ranges) and
// appends the resulting pieces to dst as behavior says, the way the
// reference implementation folds delimiters into their neighbours.
func splitPiece(dst []piece, p piece, matches [][2]int, behavior SplitBehavior, invert bool, sc *scratch) []piece {
	spans := sc.spans[:0]
	prev := 0
	for _, m := range matches {
		if m[0] > prev {
			spans = append(spans, span{prev, m[0], invert})
		}
		spans = append(spans, span{m[0], m[1], !invert})
		prev = m[1]
	}
	if prev < len(p.text) {
		spans = append(spans, span{prev, len(p.text), invert})
	}
	res := sc.folded[:0]
	switch behavior {
	case SplitRemoved:
		for _, s := range spans {
			if !s.match {
				res = append(res, s)
			}
		}
	case SplitMergedWithPrevious:
		prevMatch := false
		for _, s := range spans {
			if s.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].end = s.end
			} else {
				res = append(res, s)
			}
			prevMatch = s.match
		}
	case SplitMergedWithNext:
		prevMatch := false
		for k := len(spans) - 1; k >= 0; k-- {
			s := spans[k]
			if s.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].start = s.start
			} else {
				res = append(res, s)
			}
			prevMatch = s.match
		}
		for i, j := 0, len(res)-1; i < j; i, j = i+1, j-1 {
			res[i], res[j] = res[j], res[i]
		}
	case SplitContiguous:
		prevMatch := false
		for _, s := range spans {
			if s.match == prevMatch && len(res) > 0 {
				res[len(res)-1].end = s.end
			} else {
				res = append(res, s)
			}
			prevMatch = s.match
		}
	default: // SplitIsolated
		res = append(res, spans...)
	}
	for _, s := range res {
		if s.end > s.start {
			dst = append(dst, piece{p.text[s.start:s.end], p.first && s.start == 0})
		}
	}
	sc.spans, sc.folded = spans, res
	return dst
}

// streamer is a pre-tokenizer that can produce the pieces of a long text
// a batch at a time, when streams says so.
type streamer interface {
	streams() bool
	// pretokenizeFrom appends to dst the pieces of p that start at byte i,
	// stopping after n of them, and returns where the next piece starts
	// (len(p.text) at the end).
	pretokenizeFrom(dst []piece, p piece, i, n int) ([]piece, int)
}

// regexSplit is the Split pre-tokenizer with an expression.
type regexSplit struct {
	scan     scanFunc        // native scanner, or nil
	re       *regexp2.Regexp // otherwise
	behavior SplitBehavior
	invert   bool
}

// streams reports whether the fast path applies: a native scanner whose
// matches are the pieces.
func (r *regexSplit) streams() bool {
	return r.scan != nil && r.behavior == SplitIsolated && !r.invert
}

func (r *regexSplit) pretokenizeFrom(dst []piece, p piece, i, n int) ([]piece, int) {
	s := p.text
	for ; i < len(s) && n > 0; n-- {
		j := r.scan(s, i)
		dst = append(dst, piece{s[i:j], p.first && i == 0})
		i = j
	}
	return dst, i
}

func (r *regexSplit) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	s := p.text
	if r.streams() {
		// Fast path: the native patterns match every character, so the
		// matches are the pieces.
		dst, _ = r.pretokenizeFrom(dst, p, 0, len(s))
		return dst
	}
	m := sc.matches[:0]
	if r.scan != nil {
		for i := 0; i < len(s); {
			j := r.scan(s, i)
			m = append(m, [2]int{i, j})
			i = j
		}
	} else {
		idx, err := r.re.FindAllStringIndex(s, -1)
		if err == nil {
			for _, x := range idx {
				if x[1] > x[0] {
					m = append(m, [2]int{x[0], x[1]})
				}
			}
		}
	}
	sc.matches = m
	return splitPiece(dst, p, m, r.behavior, r.invert, sc)
}

// stringSplit is the Split pre-tokenizer with a literal delimiter.
type stringSplit struct {
	pattern  string
	behavior SplitBehavior
	invert   bool
}

func (r *stringSplit) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	s := p.text
	if r.pattern == "" || (!r.invert && !strings.Contains(s, r.pattern)) {
		if r.invert && r.behavior == SplitRemoved {
			return dst
		}
		return append(dst, p)
	}
	m := sc.matches[:0]
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], r.pattern)
		if k < 0 {
			break
		}
		m = append(m, [2]int{i + k, i + k + len(r.pattern)})
		i += k + len(r.pattern)
	}
	sc.matches = m
	return splitPiece(dst, p, m, r.behavior, r.invert, sc)
}

// funcSplit splits at every character for which isDelim holds; with runs,
// a run of such characters is one delimiter.
type funcSplit struct {
	isDelim  func(rune) bool
	runs     bool
	behavior SplitBehavior
	invert   bool
}

func (f *funcSplit) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	s := p.text
	m := sc.matches[:0]
	for i := 0; i < len(s); {
		r, w := runeAt(s, i)
		if !f.isDelim(r) {
			i += w
			continue
		}
		j := i + w
		if f.runs {
			for j < len(s) {
				r2, w2 := runeAt(s, j)
				if !f.isDelim(r2) {
					break
				}
				j += w2
			}
		}
		m = append(m, [2]int{i, j})
		i = j
	}
	sc.matches = m
	if len(m) == 0 && !f.invert {
		return append(dst, p)
	}
	return splitPiece(dst, p, m, f.behavior, f.invert, sc)
}

// whitespacePre is the Whitespace pre-tokenizer: \w+|[^\w\s]+ are the
// pieces, whitespace is dropped.
type whitespacePre struct{}

func isWordChar(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

func (whitespacePre) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	s := p.text
	for i := 0; i < len(s); {
		r, w := runeAt(s, i)
		if unicode.IsSpace(r) {
			i += w
			continue
		}
		word := isWordChar(r)
		j := i + w
		for j < len(s) {
			r2, w2 := runeAt(s, j)
			if unicode.IsSpace(r2) || isWordChar(r2) != word {
				break
			}
			j += w2
		}
		dst = append(dst, piece{s[i:j], p.first && i == 0})
		i = j
	}
	return dst
}

func isPunctuation(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '!' && r <= '/' || r >= ':' && r <= '@' || r >= '[' && r <= '`' || r >= '{' && r <= '~'
	}
	return unicode.IsPunct(r)
}

// byteLevelPre is the ByteLevel pre-tokenizer. When it is the last step the
// byte-to-character mapping is left to the model (deferred), which then
// works on raw bytes.
type byteLevelPre struct {
	addPrefixSpace, useRegex, deferred bool
}

// streams reports whether the pieces can come a batch at a time: with
// the expression, without a prefix space, and with the byte-level mapping
// left to the model.
func (b *byteLevelPre) streams() bool {
	return b.useRegex && !b.addPrefixSpace && b.deferred
}

func (b *byteLevelPre) pretokenizeFrom(dst []piece, p piece, i, n int) ([]piece, int) {
	s := p.text
	for ; i < len(s) && n > 0; n-- {
		j := scanGPT2(s, i)
		dst = append(dst, piece{s[i:j], p.first && i == 0})
		i = j
	}
	return dst, i
}

func (b *byteLevelPre) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	text := p.text
	if b.addPrefixSpace && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	start := len(dst)
	if b.useRegex {
		for i := 0; i < len(text); {
			j := scanGPT2(text, i)
			dst = append(dst, piece{text[i:j], p.first && i == 0})
			i = j
		}
	} else if text != "" {
		dst = append(dst, piece{text, p.first})
	}
	if !b.deferred {
		for k := start; k < len(dst); k++ {
			dst[k].text = byteLevelEncode(dst[k].text)
		}
	}
	return dst
}

// metaspacePre is the Metaspace pre-tokenizer.
type metaspacePre struct {
	repl   string
	scheme PrependScheme
	split  bool
}

func (m *metaspacePre) pretokenize(dst []piece, p piece, sc *scratch) []piece {
	t := p.text
	if strings.IndexByte(t, ' ') >= 0 {
		t = strings.ReplaceAll(t, " ", m.repl)
	}
	if !strings.HasPrefix(t, m.repl) && t != "" {
		if m.scheme == PrependAlways || m.scheme == PrependFirst && p.first {
			t = m.repl + t
		}
	}
	q := piece{t, p.first}
	if !m.split {
		if t == "" {
			return dst
		}
		return append(dst, q)
	}
	ms := sc.matches[:0]
	for i := 0; i < len(t); {
		k := strings.Index(t[i:], m.repl)
		if k < 0 {
			break
		}
		ms = append(ms, [2]int{i + k, i + k + len(m.repl)})
		i += k + len(m.repl)
	}
	sc.matches = ms
	return splitPiece(dst, q, ms, SplitMergedWithNext, false, sc)
}

func compilePreTokenizer(p PreTokenizer, last bool) (preTokenizer, error) {
	behavior := p.Behavior
	switch behavior {
	case "":
		behavior = SplitIsolated
	case SplitRemoved, SplitIsolated, SplitMergedWithPrevious, SplitMergedWithNext, SplitContiguous:
	default:
		return nil, fmt.Errorf("%s pre-tokenizer: unknown behavior %q", p.Kind, p.Behavior)
	}
	switch p.Kind {
	case PreSplit:
		if p.Regex != "" {
			if scan := nativeScanner(p.Regex); scan != nil {
				return &regexSplit{scan: scan, behavior: behavior, invert: p.Invert}, nil
			}
			re, err := compileRegex(p.Regex)
			if err != nil {
				return nil, fmt.Errorf("Split pre-tokenizer: %w", err)
			}
			return &regexSplit{re: re, behavior: behavior, invert: p.Invert}, nil
		}
		return &stringSplit{pattern: p.Pattern, behavior: behavior, invert: p.Invert}, nil
	case PreByteLevel:
		return &byteLevelPre{addPrefixSpace: p.AddPrefixSpace, useRegex: p.UseRegex, deferred: last}, nil
	case PreMetaspace:
		repl := p.Replacement
		if repl == "" {
			repl = "▁"
		}
		scheme := p.Prepend
		switch scheme {
		case "":
			scheme = PrependAlways
		case PrependAlways, PrependFirst, PrependNever:
		default:
			return nil, fmt.Errorf("Metaspace pre-tokenizer: unknown prepend scheme %q", p.Prepend)
		}
		return &metaspacePre{repl: repl, scheme: scheme, split: p.Split}, nil
	case PreDigits:
		if p.IndividualDigits {
			return &funcSplit{isDelim: unicode.IsNumber, behavior: SplitIsolated}, nil
		}
		return &funcSplit{isDelim: unicode.IsNumber, runs: true, behavior: SplitIsolated}, nil
	case PrePunctuation:
		return &funcSplit{isDelim: isPunctuation, behavior: behavior}, nil
	case PreWhitespace:
		return whitespacePre{}, nil
	case PreWhitespaceSplit:
		return &funcSplit{isDelim: unicode.IsSpace, runs: true, behavior: SplitRemoved}, nil
	case PreCharDelimiter:
		r, n := utf8.DecodeRuneInString(p.Pattern)
		if n == 0 || n != len(p.Pattern) {
			return nil, fmt.Errorf("CharDelimiterSplit pre-tokenizer: delimiter %q is not one character", p.Pattern)
		}
		return &funcSplit{isDelim: func(c rune) bool { return c == r }, behavior: SplitRemoved}, nil
	}
	return nil, fmt.Errorf("unsupported pre-tokenizer %q", p.Kind)
}

// compilePreTokenizers compiles the steps; BertPreTokenizer expands to its
// two steps. It reports whether the byte-level mapping is deferred to the
// model.
func compilePreTokenizers(steps []PreTokenizer) ([]preTokenizer, bool, error) {
	var out []preTokenizer
	deferred := false
	for i, p := range steps {
		if p.Kind == PreBert {
			out = append(out,
				&funcSplit{isDelim: unicode.IsSpace, runs: true, behavior: SplitRemoved},
				&funcSplit{isDelim: isPunctuation, behavior: SplitIsolated})
			continue
		}
		last := i == len(steps)-1
		c, err := compilePreTokenizer(p, last)
		if err != nil {
			return nil, false, err
		}
		if p.Kind == PreByteLevel && last {
			deferred = true
			if !p.AddPrefixSpace && !p.UseRegex {
				continue // nothing left for the step to do
			}
		}
		out = append(out, c)
	}
	return out, deferred, nil
}
