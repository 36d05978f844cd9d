package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes used by the native split scanners. The definitions
// follow the Unicode semantics of the regular expressions they replace:
// \p{L} is any letter, \p{N} any number (Nd, Nl, No), \s the White_Space
// property.
const (
	clsLetter uint8 = 1 << iota
	clsNumber
	clsSpace
	clsNewline // \r or \n (also clsSpace)
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			t[r] = clsLetter
		case r >= '0' && r <= '9':
			t[r] = clsNumber
		case r == '\r' || r == '\n':
			t[r] = clsSpace | clsNewline
		case r == ' ', r >= '\t' && r <= '\f':
			t[r] = clsSpace
		}
	}
	return t
}()

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return 0
}

// runeAt decodes the rune at s[i]. Invalid bytes decode as U+FFFD of width
// one, which classifies as "other".
func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt returns the class and width of the rune at s[i].
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return classOf(r), w
}

// scanFunc returns the end of the match that starts at s[i] (i < len(s)).
// The native patterns match every character, so a match always starts where
// the previous one ended.
type scanFunc func(s string, i int) int

// runOf returns the end of the run of characters starting at i whose class
// has one of the bits in want.
func runOf(s string, i int, want uint8) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b]&want == 0 {
				break
			}
			i++
			continue
		}
		c, w := classAt(s, i)
		if c&want == 0 {
			break
		}
		i += w
	}
	return i
}

// runOther returns the end of the run of characters at i that are neither
// letters, numbers nor whitespace ([^\s\p{L}\p{N}]+).
func runOther(s string, i int) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b] != 0 {
				break
			}
			i++
			continue
		}
		c, w := classAt(s, i)
		if c != 0 {
			break
		}
		i += w
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at s[i] (s[i] == '\”) and
// returns the match length, or 0. With fold the letters match in either
// case, with Unicode simple case folding (so ſ matches s).
func contraction(s string, i int, fold bool) int {
	j := i + 1
	if j >= len(s) {
		return 0
	}
	lower := func(k int) (rune, int) {
		r, w := runeAt(s, k)
		if fold {
			switch {
			case r >= 'A' && r <= 'Z':
				r += 'a' - 'A'
			case r == 'ſ':
				r = 's'
			}
		}
		return r, w
	}
	r, w := lower(j)
	switch r {
	case 's', 't', 'm', 'd':
		return 1 + w
	case 'r', 'v', 'l':
		if j+w >= len(s) {
			return 0
		}
		r2, w2 := lower(j + w)
		if (r == 'r' || r == 'v') && r2 == 'e' || r == 'l' && r2 == 'l' {
			return 1 + w + w2
		}
	}
	return 0
}

// spaceRun handles the trailing whitespace alternatives shared by the
// patterns: \s+(?!\S)|\s+ (and, with newlines, \s*[\r\n]+ before them).
func spaceRun(s string, i int, newlines bool) int {
	j, last, lastNL := i, i, -1
	for j < len(s) {
		c, w := classAt(s, j)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNewline != 0 {
			lastNL = j + w
		}
		last = j
		j += w
	}
	if newlines && lastNL >= 0 {
		return lastNL // \s*[\r\n]+ ends after the last newline of the run
	}
	if j == len(s) || last == i {
		return j // \s+(?!\S) at the end, or a single \s
	}
	return last // \s+(?!\S): leave one space for the next piece
}

// scanGPT2 implements PatternGPT2.
func scanGPT2(s string, i int) int {
	c, _ := classAt(s, i)
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		c2, _ := classAt(s, i+1)
		if c2&clsSpace == 0 {
			start, c = i+1, c2
		}
	}
	switch {
	case c&clsLetter != 0:
		return runOf(s, start, clsLetter)
	case c&clsNumber != 0:
		return runOf(s, start, clsNumber)
	case c == 0:
		return runOther(s, start)
	}
	return spaceRun(s, i, false)
}

// scanLlama3 implements PatternLlama3 (maxDigits 3) and PatternQwen2
// (maxDigits 1).
func scanLlama3(s string, i int, maxDigits int) int {
	c, w := classAt(s, i)
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clsLetter != 0 {
		return runOf(s, i, clsLetter)
	}
	if c&(clsNumber|clsNewline) == 0 && i+w < len(s) {
		if c2, _ := classAt(s, i+w); c2&clsLetter != 0 {
			return runOf(s, i+w, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if c&clsNumber != 0 {
		j := i + w
		for k := 1; k < maxDigits && j < len(s); k++ {
			c2, w2 := classAt(s, j)
			if c2&clsNumber == 0 {
				break
			}
			j += w2
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if c == 0 {
		start = i
	} else if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == 0 {
			start = i + 1
		}
	}
	if start >= 0 {
		j := runOther(s, start)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	return spaceRun(s, i, true)
}

func scanLlama3Digits3(s string, i int) int { return scanLlama3(s, i, 3) }
func scanQwen2(s string, i int) int         { return scanLlama3(s, i, 1) }

// nativeScanner returns the scanner for a split expression that runs
// natively.
func nativeScanner(pattern string) scanFunc {
	switch pattern {
	case PatternGPT2:
		return scanGPT2
	case PatternLlama3:
		return scanLlama3Digits3
	case PatternQwen2:
		return scanQwen2
	}
	return nil
}
