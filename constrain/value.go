package constrain

import "sort"

// The schema automaton: a pushdown automaton over the bytes of one JSON
// value that a schema (a node) accepts. The innermost open container is
// held in the state itself and the outer ones in an immutable linked list,
// so that a state is a small value, copied freely while the vocabulary's
// trie is walked; opening a container allocates one link.

// vmode is what the value automaton expects next.
type vmode uint8

const (
	vValue      vmode = iota // a value of node n (after white space)
	vObjFirst                // after '{': a key or '}'
	vKey                     // after ',' in an object: a key
	vKeyLit                  // in a declared key (candidates lo..hi)
	vColon                   // after a key: ':'
	vArrFirst                // after '[': an item or ']'
	vAfter                   // after a value in a container: ',' or the closing bracket
	vStr                     // in a string
	vStrEsc                  // after '\' in a string
	vStrHex                  // in \uXXXX (off: digits read)
	vStrUTF8                 // in a multi-byte character (off: bytes left)
	vLit                     // in a literal of n.lits (candidates lo..hi, off bytes read)
	vNumMinus                // after '-'
	vNumZero                 // after a leading 0
	vNumInt                  // in the integer digits (off: digits)
	vNumDot                  // after '.'
	vNumFrac                 // in the fraction digits (off: digits)
	vNumExp                  // after 'e' or 'E'
	vNumExpSign              // after the exponent's sign
	vNumExpDig               // in the exponent digits (off: digits)
	vDone                    // the value is complete: only white space
)

// Limits that keep a model from running on without producing the value.
const (
	maxWS        = 20 // white space between two tokens of JSON
	maxDigits    = 24 // integer or fraction digits of a number
	maxExpDigits = 4
)

// vframe is an open container.
type vframe struct {
	n     *node
	seen  uint64 // object: the declared keys read
	count uint32 // array: the items begun
	prop  int16  // object: the declared key whose value comes next; -1: an undeclared one
}

// vlink holds the containers outside the innermost one.
type vlink struct {
	f  vframe
	up *vlink
}

// vstate is a state of the value automaton.
type vstate struct {
	n      *node  // the node of the value being read
	cur    vframe // the innermost open container (cur.n nil: none)
	up     *vlink
	depth  uint8
	mode   vmode
	key    bool   // vStr: the string is an undeclared key
	ws     uint8  // white space read since the last other byte
	lo, hi uint16 // vLit, vKeyLit: candidates
	off    uint16
	ulo    byte // vStrUTF8: bounds of the next byte
	uhi    byte

	// A string with constraints (n.str): the characters read, the
	// state of its DFA, the character being decoded.
	chars uint32
	ds    int32
	r     rune
	// A number with constraints (n.num): its sign, the value of its
	// integer digits, whether a fraction digit is not zero.
	neg    bool
	fracNZ bool
	u      int64
	f      int64
}

// newValue returns the start state of a value of n.
func newValue(n *node) vstate { return vstate{n: n, mode: vValue} }

// space takes a white-space byte where white space may come.
func (s *vstate) space() bool {
	if s.ws >= maxWS {
		return false
	}
	s.ws++
	return true
}

// end moves past a value that has ended.
func (s *vstate) end() {
	if s.depth == 0 {
		s.mode = vDone
	} else {
		s.mode = vAfter
	}
}

// push opens a container of node n.
func (s *vstate) push(n *node) bool {
	if s.depth >= MaxDepth {
		return false
	}
	if s.cur.n != nil {
		s.up = &vlink{f: s.cur, up: s.up}
	}
	s.cur = vframe{n: n, prop: -1}
	s.depth++
	if n.kind == kObject {
		s.mode = vObjFirst
	} else {
		s.mode = vArrFirst
	}
	return true
}

// pop closes the innermost container.
func (s *vstate) pop() {
	s.depth--
	if s.up != nil {
		s.cur, s.up = s.up.f, s.up.up
	} else {
		s.cur = vframe{}
	}
	s.end()
}

// start begins a value of node n with byte c.
func (s *vstate) start(n *node, c byte) bool {
	if n.kind == kUnion {
		i := n.pick[c]
		if i == 0 {
			return false
		}
		n = n.alts[i-1]
	}
	if n.kind == kAny {
		switch {
		case c == '{':
			n = anyObject
		case c == '[':
			n = anyArray
		case c == '"':
			n = stringNode
		case c == '-' || c >= '0' && c <= '9':
			n = numberNode
		default:
			n = anyLiterals
		}
	}
	s.n = n
	switch n.kind {
	case kObject:
		return c == '{' && s.push(n)
	case kArray:
		return c == '[' && s.push(n)
	case kString:
		if c != '"' {
			return false
		}
		s.mode, s.key = vStr, false
		s.chars, s.ds = 0, 0
		return true
	case kNumber, kInteger:
		s.neg, s.fracNZ, s.u, s.f = false, false, 0, 0
		switch {
		case c == '-':
			s.mode, s.neg = vNumMinus, true
		case c == '0':
			s.mode = vNumZero
		case c >= '1' && c <= '9':
			s.mode, s.off, s.u = vNumInt, 1, int64(c-'0')
		default:
			return false
		}
		return s.numOK(false)
	case kLiteral:
		s.mode, s.lo, s.hi, s.off = vLit, 0, uint16(len(n.lits)), 0
		return s.literal(c)
	}
	return false
}

// narrow keeps the candidates of lits[lo:hi] whose byte at off is c.
func narrow(lits [][]byte, lo, hi, off uint16, c byte) (uint16, uint16) {
	for lo < hi && (len(lits[lo]) <= int(off) || lits[lo][off] < c) {
		lo++
	}
	h := lo
	for h < hi && len(lits[h]) > int(off) && lits[h][off] == c {
		h++
	}
	return lo, h
}

// literal steps a literal value. A literal that may end here (one
// candidate is complete, a longer one goes on: a number) ends when c
// continues none of them.
func (s *vstate) literal(c byte) bool {
	lits := s.n.lits
	lo, hi := narrow(lits, s.lo, s.hi, s.off, c)
	if lo == hi {
		if s.off > 0 && len(lits[s.lo]) == int(s.off) {
			s.end()
			return s.after(c)
		}
		return false
	}
	s.lo, s.hi, s.off = lo, hi, s.off+1
	if hi-lo == 1 && len(lits[lo]) == int(s.off) {
		s.end()
	}
	return true
}

// literalComplete reports whether a literal has been read whole, though a
// longer candidate may go on.
func (s *vstate) literalComplete() bool {
	return s.mode == vLit && s.off > 0 && len(s.n.lits[s.lo]) == int(s.off)
}

// keyStart begins an object key with c.
func (s *vstate) keyStart(c byte) bool {
	if c != '"' {
		return false
	}
	o := s.cur.n
	if len(o.keys) == 0 {
		if !o.open {
			return false
		}
		s.mode, s.key = vStr, true
		return true
	}
	s.mode, s.lo, s.hi, s.off = vKeyLit, 0, uint16(len(o.keys)), 0
	return s.keyByte(c)
}

// keyByte steps a declared key: only keys not yet read remain.
func (s *vstate) keyByte(c byte) bool {
	keys := s.cur.n.keys
	lo, hi := narrow(keys, s.lo, s.hi, s.off, c)
	for lo < hi && s.cur.seen&(1<<lo) != 0 {
		lo++
	}
	for hi > lo && s.cur.seen&(1<<(hi-1)) != 0 {
		hi--
	}
	if lo == hi {
		return false
	}
	s.lo, s.hi, s.off = lo, hi, s.off+1
	if len(keys[lo]) == int(s.off) {
		// Keys end with a quote, so a complete one is the only one left.
		s.cur.prop = int16(lo)
		s.cur.seen |= 1 << lo
		s.mode = vColon
	}
	return true
}

// moreKeys reports whether the object may take another key.
func (s *vstate) moreKeys() bool {
	o := s.cur.n
	if len(o.keys) == 0 {
		return o.open
	}
	return s.cur.seen != 1<<len(o.keys)-1
}

// closable reports whether the innermost container may close now.
func (s *vstate) closable() bool {
	n := s.cur.n
	if n.kind == kObject {
		return s.cur.seen&n.required == n.required
	}
	return int(s.cur.count) >= n.minItems
}

// after handles a byte that follows a complete value inside a container
// (or at the top level).
func (s *vstate) after(c byte) bool {
	if isWS(c) {
		s.mode = vAfter
		if s.depth == 0 {
			s.mode = vDone
		}
		return s.space()
	}
	if s.depth == 0 {
		return false
	}
	s.ws = 0
	n := s.cur.n
	switch c {
	case ',':
		if n.kind == kObject {
			if !s.moreKeys() {
				return false
			}
			s.mode = vKey
			return true
		}
		if n.maxItems < 0 || n.maxItems > 0 && int(s.cur.count) >= n.maxItems {
			return false
		}
		s.cur.count++
		s.mode, s.n = vValue, n.items
		return true
	case '}', ']':
		if (c == '}') != (n.kind == kObject) || !s.closable() {
			return false
		}
		s.pop()
		return true
	}
	return false
}

// step advances the automaton by one byte and reports whether the bytes
// read so far are still a prefix of a value the schema accepts. On false
// the state is unspecified.
func (s *vstate) step(c byte) bool {
	switch s.mode {
	case vStr:
		if !s.key && s.n.str != nil {
			return s.strByte(c)
		}
		switch {
		case c == '"':
			if s.key {
				s.mode, s.cur.prop, s.ws = vColon, -1, 0
			} else {
				s.end()
			}
		case c == '\\':
			s.mode = vStrEsc
		case c < 0x20:
			return false
		case c < 0x80:
		default:
			var ok bool
			if s.off, s.ulo, s.uhi, ok = utf8Lead(c); !ok {
				return false
			}
			s.mode = vStrUTF8
		}
		return true
	case vStrUTF8:
		if c < s.ulo || c > s.uhi {
			return false
		}
		s.off--
		s.ulo, s.uhi = 0x80, 0xBF
		s.r = s.r<<6 | rune(c&0x3F)
		if s.off == 0 {
			s.mode = vStr
			if !s.key && s.n.str != nil {
				return s.char(s.r)
			}
		} else if !s.key && s.n.str != nil {
			return s.partialOK()
		}
		return true
	case vStrEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.mode = vStr
		case 'u':
			s.mode, s.off = vStrHex, 0
		default:
			return false
		}
		return true
	case vStrHex:
		if !isHex(c) {
			return false
		}
		if !s.key && s.n.str != nil {
			// No surrogate escapes where characters are counted: a
			// pair would count as two.
			if s.off == 0 {
				s.r = rune(c | 0x20)
			} else if s.off == 1 && s.r == 'd' && (c >= '8' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f') {
				return false
			}
		}
		s.off++
		if s.off == 4 {
			s.mode = vStr
		}
		return true
	case vLit:
		return s.literal(c)
	case vKeyLit:
		return s.keyByte(c)
	case vValue:
		if isWS(c) {
			return s.space()
		}
		s.ws = 0
		return s.start(s.n, c)
	case vObjFirst, vKey:
		if isWS(c) {
			return s.space()
		}
		s.ws = 0
		if c == '}' && s.mode == vObjFirst {
			if !s.closable() {
				return false
			}
			s.pop()
			return true
		}
		return s.keyStart(c)
	case vColon:
		if isWS(c) {
			return s.space()
		}
		if c != ':' {
			return false
		}
		s.ws = 0
		s.mode, s.n = vValue, s.cur.n.extra
		if p := s.cur.prop; p >= 0 {
			s.n = s.cur.n.props[p]
		}
		if s.n == nil {
			s.n = anyNode
		}
		return true
	case vArrFirst:
		if isWS(c) {
			return s.space()
		}
		s.ws = 0
		n := s.cur.n
		if c == ']' {
			if !s.closable() {
				return false
			}
			s.pop()
			return true
		}
		if n.maxItems < 0 {
			return false
		}
		s.cur.count = 1
		return s.start(n.items, c)
	case vAfter, vDone:
		return s.after(c)
	case vNumMinus:
		switch {
		case c == '0':
			s.mode = vNumZero
		case c >= '1' && c <= '9':
			s.mode, s.off, s.u = vNumInt, 1, int64(c-'0')
		default:
			return false
		}
		return s.numOK(false)
	case vNumZero, vNumInt, vNumFrac:
		switch {
		case c >= '0' && c <= '9' && s.mode != vNumZero:
			if s.off >= maxDigits || s.n.num != nil && s.mode == vNumInt && int(s.off) >= maxBoundedDigits-s.n.num.scale {
				return false
			}
			s.off++
			if s.mode == vNumInt {
				s.u = s.u*10 + int64(c-'0')
			} else {
				s.fracDigit(c)
			}
		case c == '.' && s.mode != vNumFrac && s.n.kind != kInteger:
			s.mode = vNumDot
		case (c == 'e' || c == 'E') && s.n.kind != kInteger && s.n.num == nil:
			s.mode = vNumExp
		default:
			if !s.numOK(true) {
				return false
			}
			s.end()
			return s.after(c)
		}
		return s.numOK(false)
	case vNumDot:
		if c < '0' || c > '9' {
			return false
		}
		s.mode, s.off = vNumFrac, 1
		s.fracDigit(c)
		return s.numOK(false)
	case vNumExp:
		switch {
		case c == '+' || c == '-':
			s.mode = vNumExpSign
		case c >= '0' && c <= '9':
			s.mode, s.off = vNumExpDig, 1
		default:
			return false
		}
		return true
	case vNumExpSign:
		if c < '0' || c > '9' {
			return false
		}
		s.mode, s.off = vNumExpDig, 1
		return true
	case vNumExpDig:
		if c >= '0' && c <= '9' {
			if s.off >= maxExpDigits {
				return false
			}
			s.off++
			return true
		}
		s.end()
		return s.after(c)
	}
	return false
}

// complete reports whether the bytes read are a whole value: it has
// ended, or it is a number or literal that may end here.
func (s *vstate) complete() bool {
	switch s.mode {
	case vDone:
		return true
	case vNumZero, vNumInt, vNumFrac, vNumExpDig:
		return s.depth == 0 && s.numOK(true)
	case vLit:
		return s.depth == 0 && s.literalComplete()
	}
	return false
}

// freeString reports whether the automaton is inside a string that takes
// any text, which plain tokens leave in the same state.
func (s *vstate) freeString() bool {
	return s.mode == vStr && (s.key || s.n == nil || s.n.str == nil)
}

// lengthRoom reports whether the automaton is inside a string whose only
// constraints are on its length, and how many more characters it takes
// (-1: any number). Plain text of up to that many characters goes on,
// whatever the minimum.
func (s *vstate) lengthRoom() (int, bool) {
	if s.mode != vStr || s.key || s.n == nil || s.n.str == nil || s.n.str.dfa != nil {
		return 0, false
	}
	if s.n.str.maxLen < 0 {
		return -1, true
	}
	return s.n.str.maxLen - int(s.chars), true
}

// numOK reports whether a number with constraints read so far may still
// end within them (complete: ends here within them).
func (s *vstate) numOK(complete bool) bool {
	c := s.n.num
	if c == nil {
		return true
	}
	nd := int(s.off)
	switch s.mode {
	case vNumMinus:
		nd = 0
	case vNumZero:
		nd = 1
	}
	inFrac := s.mode == vNumDot || s.mode == vNumFrac
	fd := 0
	if s.mode == vNumFrac {
		fd = int(s.off)
	}
	return c.viable(s.neg, s.u, nd, s.mode == vNumZero, inFrac, s.f, fd, s.fracNZ, complete, s.n.kind == kInteger)
}

// fracDigit takes the fraction digit c, the off-th, of a number.
func (s *vstate) fracDigit(c byte) {
	if s.n.num != nil && int(s.off) <= s.n.num.scale {
		s.f = s.f*10 + int64(c-'0')
	} else if c != '0' {
		s.fracNZ = true
	}
}

// strByte steps a string with constraints.
func (s *vstate) strByte(c byte) bool {
	sc := s.n.str
	switch {
	case c == '"':
		if int(s.chars) < sc.minLen || sc.dfa != nil && !sc.dfa.accept[s.ds] {
			return false
		}
		s.end()
		return true
	case c == '\\':
		if sc.dfa != nil {
			return false // a pattern's characters are written unescaped
		}
		s.mode = vStrEsc
		return s.char(0)
	case c < 0x20:
		return false
	case c < 0x80:
		return s.char(rune(c))
	}
	var ok bool
	if s.off, s.ulo, s.uhi, ok = utf8Lead(c); !ok {
		return false
	}
	s.r = rune(c) & (0x3F >> s.off)
	s.mode = vStrUTF8
	return s.partialOK()
}

// partialOK reports whether the character being decoded in a string with
// constraints may still be one it takes.
func (s *vstate) partialOK() bool {
	sc := s.n.str
	if sc.maxLen >= 0 && int(s.chars) >= sc.maxLen {
		return false
	}
	d := sc.dfa
	if d == nil {
		return true
	}
	// The runes the bytes to come may make: the next one lies within
	// ulo..uhi, the rest are any continuation bytes.
	shift := 6 * uint(s.off-1)
	lo := (s.r<<6 | rune(s.ulo&0x3F)) << shift
	hi := (s.r<<6|rune(s.uhi&0x3F))<<shift | (1<<shift - 1)
	chars := int(s.chars) + 1
	i := sort.Search(len(d.bounds), func(i int) bool { return d.bounds[i] > lo }) - 1
	for ; i >= 0 && i < len(d.bounds)-1 && d.bounds[i] <= hi; i++ {
		t := d.next[s.ds][i]
		if t < 0 {
			continue
		}
		if (sc.maxLen < 0 || chars+int(d.minRest[t]) <= sc.maxLen) && (d.maxRest[t] < 0 || chars+int(d.maxRest[t]) >= sc.minLen) {
			return true
		}
	}
	return false
}

// char takes one character of a string with constraints.
func (s *vstate) char(r rune) bool {
	sc := s.n.str
	s.chars++
	if sc.maxLen >= 0 && int(s.chars) > sc.maxLen {
		return false
	}
	d := sc.dfa
	if d == nil {
		return true
	}
	if s.ds = d.step(s.ds, r); s.ds < 0 {
		return false
	}
	if sc.maxLen >= 0 && int(s.chars)+int(d.minRest[s.ds]) > sc.maxLen {
		return false
	}
	return d.maxRest[s.ds] < 0 || int(s.chars)+int(d.maxRest[s.ds]) >= sc.minLen
}

// utf8Lead reads the first byte of a multi-byte UTF-8 character: the bytes
// that follow and the bounds of the next one.
func utf8Lead(c byte) (rest uint16, lo, hi byte, ok bool) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF, true
	case c == 0xE0:
		return 2, 0xA0, 0xBF, true
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 2, 0x80, 0xBF, true
	case c == 0xED: // no surrogates
		return 2, 0x80, 0x9F, true
	case c == 0xF0:
		return 3, 0x90, 0xBF, true
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF, true
	case c == 0xF4:
		return 3, 0x80, 0x8F, true
	}
	return 0, 0, 0, false
}
