package tokenizer

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads JSON text directly: tokenizer.json files are tens of
// megabytes, mostly vocabulary and merges, which encoding/json decodes an
// order of magnitude slower. Strings without escapes are returned as
// substrings of the input. Every error names the byte offset.
type jsonScanner struct {
	data string
	pos  int
}

const maxNesting = 512

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end of input, want %q", c)
		}
		return s.errorf("unexpected %q, want %q", s.data[s.pos], c)
	}
	s.pos++
	return nil
}

// str reads a string.
func (s *jsonScanner) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	for i := start; i < len(s.data); i++ {
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			v := s.data[start:i]
			if !utf8.ValidString(v) {
				return toValidUTF8(v), nil
			}
			return v, nil
		case c == '\\':
			return s.strSlow(start)
		case c < 0x20:
			s.pos = i
			return "", s.errorf("control character %#x in string", c)
		}
	}
	s.pos = len(s.data)
	return "", s.errorf("unterminated string")
}

// toValidUTF8 replaces invalid bytes as encoding/json does.
func toValidUTF8(v string) string {
	b := make([]byte, 0, len(v)+8)
	for i := 0; i < len(v); {
		r, w := utf8.DecodeRuneInString(v[i:])
		b = utf8.AppendRune(b, r)
		i += w
	}
	return string(b)
}

func (s *jsonScanner) strSlow(start int) (string, error) {
	b := []byte(s.data[start:s.pos])
	i := s.pos
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return toValidUTF8(string(b)), nil
		case c < 0x20:
			s.pos = i
			return "", s.errorf("control character %#x in string", c)
		case c != '\\':
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(s.data) {
			break
		}
		e := s.data[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(s.data, i)
			if !ok {
				s.pos = i
				return "", s.errorf("bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if i+6 <= len(s.data) && s.data[i] == '\\' && s.data[i+1] == 'u' {
					r2, ok = hex4(s.data, i+2)
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			s.pos = i - 1
			return "", s.errorf("bad escape \\%c", e)
		}
	}
	s.pos = len(s.data)
	return "", s.errorf("unterminated string")
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		d, ok := hexDigit(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// number returns the text of a number.
func (s *jsonScanner) number() (string, error) {
	s.ws()
	start := s.pos
	i := s.pos
	if i < len(s.data) && s.data[i] == '-' {
		i++
	}
	digits := i
	for i < len(s.data) && s.data[i] >= '0' && s.data[i] <= '9' {
		i++
	}
	if i == digits || s.data[digits] == '0' && i-digits > 1 {
		return "", s.errorf("bad number")
	}
	if i < len(s.data) && s.data[i] == '.' {
		i++
		d := i
		for i < len(s.data) && s.data[i] >= '0' && s.data[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return "", s.errorf("bad number")
		}
	}
	if i < len(s.data) && (s.data[i] == 'e' || s.data[i] == 'E') {
		i++
		if i < len(s.data) && (s.data[i] == '+' || s.data[i] == '-') {
			i++
		}
		d := i
		for i < len(s.data) && s.data[i] >= '0' && s.data[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return "", s.errorf("bad number")
		}
	}
	s.pos = i
	return s.data[start:i], nil
}

// integer reads an integer that fits an int64.
func (s *jsonScanner) integer() (int64, error) {
	at := s.pos
	t, err := s.number()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		s.pos = at
		return 0, s.errorf("want an integer, got %s", t)
	}
	return v, nil
}

// float reads a number.
func (s *jsonScanner) float() (float64, error) {
	t, err := s.number()
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(t, 64)
}

// object calls member for each key; member must consume the value.
func (s *jsonScanner) object(member func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls elem for each element; elem must consume it.
func (s *jsonScanner) array(elem func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// raw skips one value, checking its syntax, and returns its text.
func (s *jsonScanner) raw() (string, error) {
	s.ws()
	start := s.pos
	if err := s.skip(0); err != nil {
		return "", err
	}
	return s.data[start:s.pos], nil
}

func (s *jsonScanner) skip(depth int) error {
	if depth > maxNesting {
		return s.errorf("nested too deeply")
	}
	switch c := s.peek(); {
	case c == '{':
		return s.object(func(string) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array(func(int) error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.number()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == 0:
		return s.errorf("unexpected end of input")
	default:
		return s.errorf("unexpected %q", c)
	}
}

func (s *jsonScanner) literal(w string) error {
	if len(s.data)-s.pos < len(w) || s.data[s.pos:s.pos+len(w)] != w {
		return s.errorf("bad literal, want %s", w)
	}
	s.pos += len(w)
	return nil
}

// end checks that only whitespace follows.
func (s *jsonScanner) end() error {
	if s.peek() != 0 {
		return s.errorf("data after the top-level value")
	}
	return nil
}
