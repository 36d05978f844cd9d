package constrain

// The JSON automaton: a pushdown automaton over bytes whose stack (one bit
// per open container: object or array) fits in a word, so that a state is a
// small value that is cheap to copy, compare and use as a map key.

// MaxDepth is the deepest nesting of objects and arrays the automaton
// accepts, the top-level object included.
const MaxDepth = 64

// mode is what the automaton expects next.
type mode uint8

const (
	mStart      mode = iota // leading white space, then '{'
	mObjFirst               // after '{': a key or '}'
	mKey                    // after ',' in an object: a key
	mColon                  // after a key: ':'
	mValue                  // after ':' or ',' in an array: a value
	mArrFirst               // after '[': a value or ']'
	mAfter                  // after a value in a container: ',' or the closing bracket
	mStr                    // inside a string
	mStrEsc                 // after '\' in a string
	mStrHex                 // in \uXXXX (sub: digits read)
	mStrUTF8                // inside a multi-byte character (sub: bytes left; lo, hi: bounds of the next)
	mLit                    // inside true, false or null (lit, sub: bytes read)
	mNumMinus               // after '-'
	mNumZero                // after a leading 0
	mNumInt                 // in the integer digits
	mNumDot                 // after '.'
	mNumFrac                // in the fraction digits
	mNumExp                 // after 'e' or 'E'
	mNumExpSign             // after the exponent's sign
	mNumExpDig              // in the exponent digits
	mDone                   // the top-level object has closed: only white space
)

// state is a state of the automaton. The zero value is the start.
type state struct {
	stack  uint64 // bit d-1 set: the container at depth d is an object
	depth  uint8  // open containers
	mode   mode
	sub    uint8
	lit    uint8 // which literal (mLit)
	key    bool  // the string being read is a key
	lo, hi byte  // mStrUTF8: bounds of the next byte
}

// literals are the keywords values may be.
var literals = [...]string{"true", "false", "null"}

// isWS reports JSON white space.
func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// inObject reports whether the innermost open container is an object.
func (s *state) inObject() bool { return s.stack>>(s.depth-1)&1 == 1 }

// push opens a container.
func (s *state) push(object bool) bool {
	if s.depth >= MaxDepth {
		return false
	}
	if object {
		s.stack |= 1 << s.depth
		s.mode = mObjFirst
	} else {
		s.stack &^= 1 << s.depth
		s.mode = mArrFirst
	}
	s.depth++
	return true
}

// pop closes the innermost container with c ('}' or ']').
func (s *state) pop(c byte) bool {
	if s.depth == 0 || (c == '}') != s.inObject() {
		return false
	}
	s.depth--
	s.stack &^= 1 << s.depth
	if s.depth == 0 {
		s.mode = mDone
	} else {
		s.mode = mAfter
	}
	return true
}

// endValue moves past a value that has ended.
func (s *state) endValue() { s.mode = mAfter }

// startValue begins the value that c starts.
func (s *state) startValue(c byte) bool {
	switch {
	case c == '{':
		return s.push(true)
	case c == '[':
		return s.push(false)
	case c == '"':
		s.mode, s.key = mStr, false
	case c == '-':
		s.mode = mNumMinus
	case c == '0':
		s.mode = mNumZero
	case c >= '1' && c <= '9':
		s.mode = mNumInt
	case c == 't':
		s.mode, s.lit, s.sub = mLit, 0, 1
	case c == 'f':
		s.mode, s.lit, s.sub = mLit, 1, 1
	case c == 'n':
		s.mode, s.lit, s.sub = mLit, 2, 1
	default:
		return false
	}
	return true
}

// after handles a byte that follows a complete value inside a container.
func (s *state) after(c byte) bool {
	switch {
	case isWS(c):
		s.mode = mAfter
	case c == ',':
		if s.inObject() {
			s.mode = mKey
		} else {
			s.mode = mValue
		}
	case c == '}' || c == ']':
		return s.pop(c)
	default:
		return false
	}
	return true
}

// step advances the automaton by one byte and reports whether the text
// read so far is still a prefix of a JSON object. On false the state is
// unspecified.
func (s *state) step(c byte) bool {
	switch s.mode {
	case mStr:
		switch {
		case c == '"':
			if s.key {
				s.mode = mColon
			} else {
				s.mode = mAfter
			}
		case c == '\\':
			s.mode = mStrEsc
		case c < 0x20:
			return false
		case c < 0x80:
		case c >= 0xC2 && c <= 0xDF:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 1, 0x80, 0xBF
		case c == 0xE0:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 2, 0xA0, 0xBF
		case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 2, 0x80, 0xBF
		case c == 0xED: // no surrogates
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 2, 0x80, 0x9F
		case c == 0xF0:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 3, 0x90, 0xBF
		case c >= 0xF1 && c <= 0xF3:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 3, 0x80, 0xBF
		case c == 0xF4:
			s.mode, s.sub, s.lo, s.hi = mStrUTF8, 3, 0x80, 0x8F
		default:
			return false
		}
		return true
	case mStrUTF8:
		if c < s.lo || c > s.hi {
			return false
		}
		s.sub--
		s.lo, s.hi = 0x80, 0xBF
		if s.sub == 0 {
			s.mode, s.lo, s.hi = mStr, 0, 0
		}
		return true
	case mStrEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.mode = mStr
		case 'u':
			s.mode, s.sub = mStrHex, 0
		default:
			return false
		}
		return true
	case mStrHex:
		if !isHex(c) {
			return false
		}
		s.sub++
		if s.sub == 4 {
			s.mode, s.sub = mStr, 0
		}
		return true
	case mLit:
		w := literals[s.lit]
		if c != w[s.sub] {
			return false
		}
		s.sub++
		if int(s.sub) == len(w) {
			s.sub, s.lit = 0, 0
			s.endValue()
		}
		return true
	case mStart:
		if isWS(c) {
			return true
		}
		return c == '{' && s.push(true)
	case mObjFirst:
		switch {
		case isWS(c):
		case c == '"':
			s.mode, s.key = mStr, true
		case c == '}':
			return s.pop(c)
		default:
			return false
		}
		return true
	case mKey:
		switch {
		case isWS(c):
		case c == '"':
			s.mode, s.key = mStr, true
		default:
			return false
		}
		return true
	case mColon:
		switch {
		case isWS(c):
		case c == ':':
			s.mode, s.key = mValue, false
		default:
			return false
		}
		return true
	case mValue:
		if isWS(c) {
			return true
		}
		return s.startValue(c)
	case mArrFirst:
		if isWS(c) {
			return true
		}
		if c == ']' {
			return s.pop(c)
		}
		return s.startValue(c)
	case mAfter:
		return s.after(c)
	case mNumMinus:
		switch {
		case c == '0':
			s.mode = mNumZero
		case c >= '1' && c <= '9':
			s.mode = mNumInt
		default:
			return false
		}
		return true
	case mNumZero, mNumInt, mNumFrac:
		switch {
		case c >= '0' && c <= '9' && s.mode != mNumZero:
		case c == '.' && s.mode != mNumFrac:
			s.mode = mNumDot
		case c == 'e' || c == 'E':
			s.mode = mNumExp
		default:
			return s.after(c)
		}
		return true
	case mNumDot:
		if c < '0' || c > '9' {
			return false
		}
		s.mode = mNumFrac
		return true
	case mNumExp:
		switch {
		case c == '+' || c == '-':
			s.mode = mNumExpSign
		case c >= '0' && c <= '9':
			s.mode = mNumExpDig
		default:
			return false
		}
		return true
	case mNumExpSign:
		if c < '0' || c > '9' {
			return false
		}
		s.mode = mNumExpDig
		return true
	case mNumExpDig:
		if c >= '0' && c <= '9' {
			return true
		}
		return s.after(c)
	case mDone:
		return isWS(c)
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// CheckJSON reports whether b is a prefix of a JSON object (optionally
// preceded by white space and followed by white space) whose containers
// nest at most MaxDepth deep, and whether it is a complete one: the
// top-level object has closed.
func CheckJSON(b []byte) (prefix, complete bool) {
	var s state
	for _, c := range b {
		if !s.step(c) {
			return false, false
		}
	}
	return true, s.mode == mDone
}
