package constrain

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// This file holds the keywords that narrow strings and numbers: string
// lengths, formats and patterns (compiled into a DFA over the characters
// of the string) and numeric bounds and multipleOf.

// strCons narrows a string: its length in characters (code points) and
// the DFA its characters must be accepted by.
type strCons struct {
	minLen, maxLen int // maxLen -1: unbounded
	dfa            *dfa
}

// A dfa is a deterministic automaton over the characters of a string,
// pruned so that every state it keeps can still reach acceptance.
type dfa struct {
	bounds  []rune    // class i holds the runes bounds[i] ≤ r < bounds[i+1]
	next    [][]int32 // by state and class: the next state, -1: none
	accept  []bool
	minRest []int32 // characters still needed at least to accept
	maxRest []int32 // characters that may still come at most (-1: any number)
}

// step moves the DFA from state st over rune r; -1: rejected.
func (d *dfa) step(st int32, r rune) int32 {
	i := sort.Search(len(d.bounds), func(i int) bool { return d.bounds[i] > r }) - 1
	if i < 0 || i >= len(d.bounds)-1 {
		return -1
	}
	return d.next[st][i]
}

// Limits on a compiled pattern.
const (
	maxDFAStates = 4096
	maxDFACells  = 1 << 20
)

// formats are the string formats enforced, as patterns in the subset that
// compilePattern takes. Each accepts only valid strings of its format
// (a subset where the format's grammar is larger, as for email and uri).
var formats = map[string]string{
	"date":      `^` + datePat + `$`,
	"time":      `^` + timePat + `$`,
	"date-time": `^` + datePat + `T` + timePat + `$`,
	"email":     `^[A-Za-z0-9!#$%&'*+/=?^_{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`,
	"uuid":      `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	"ipv4":      `^(` + octet + `\.){3}` + octet + `$`,
	"uri":       `^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*$`,
}

const (
	datePat = `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])`
	timePat = `([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`
	octet   = `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
)

// compilePattern compiles a regular expression, searched for anywhere in
// the string as JSON Schema's pattern is, into a DFA. The subset is RE2's
// syntax (Go's regexp) without case folding and word boundaries; ^ and $
// anchor at the ends of the string. The characters a string holds this
// way are written unescaped, so a pattern cannot produce '"', '\' or
// control characters.
func compilePattern(pat string) (*dfa, error) {
	re, err := syntax.Parse(`(?s:.*)(?:`+pat+`)(?s:.*)`, syntax.Perl)
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	// The alphabet: classes of runes that every instruction treats alike.
	cut := map[rune]bool{0: true, 0x20: true, '"': true, '"' + 1: true, '\\': true, '\\' + 1: true, 0xD800: true, 0xE000: true, utf8.MaxRune + 1: true}
	for _, in := range prog.Inst {
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1:
			if syntax.Flags(in.Arg)&syntax.FoldCase != 0 && len(in.Rune) == 1 {
				return nil, fmt.Errorf("case-insensitive matching is not supported")
			}
			for i := 0; i+1 < len(in.Rune); i += 2 {
				cut[in.Rune[i]], cut[in.Rune[i+1]+1] = true, true
			}
			if in.Op == syntax.InstRune1 || len(in.Rune) == 1 {
				cut[in.Rune[0]], cut[in.Rune[0]+1] = true, true
			}
		case syntax.InstRuneAnyNotNL:
			cut['\n'], cut['\n'+1] = true, true
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&(syntax.EmptyWordBoundary|syntax.EmptyNoWordBoundary) != 0 {
				return nil, fmt.Errorf("word boundaries are not supported")
			}
		}
	}
	var bounds []rune
	for r := range cut {
		if r <= utf8.MaxRune+1 {
			bounds = append(bounds, r)
		}
	}
	slices.Sort(bounds)
	writable := func(r rune) bool {
		return r >= 0x20 && r != '"' && r != '\\' && (r < 0xD800 || r >= 0xE000) && r <= utf8.MaxRune
	}

	// closure follows the instructions that read nothing.
	closure := func(pcs []uint32, atStart, atEnd bool) []uint32 {
		seen := map[uint32]bool{}
		var out []uint32
		var visit func(pc uint32)
		visit = func(pc uint32) {
			if seen[pc] {
				return
			}
			seen[pc] = true
			in := &prog.Inst[pc]
			switch in.Op {
			case syntax.InstAlt, syntax.InstAltMatch:
				visit(in.Out)
				visit(in.Arg)
			case syntax.InstCapture, syntax.InstNop:
				visit(in.Out)
			case syntax.InstEmptyWidth:
				op := syntax.EmptyOp(in.Arg)
				ok := true
				if op&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 && !atStart {
					ok = false
				}
				if op&(syntax.EmptyEndText|syntax.EmptyEndLine) != 0 && !atEnd {
					ok = false
					out = append(out, pc) // may hold at the end
				}
				if ok {
					visit(in.Out)
				}
			case syntax.InstFail:
			default:
				out = append(out, pc)
			}
		}
		for _, pc := range pcs {
			visit(pc)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	accepts := func(set []uint32) bool {
		return slices.ContainsFunc(closure(set, false, true), func(pc uint32) bool { return prog.Inst[pc].Op == syntax.InstMatch })
	}
	keyOf := func(set []uint32) string { return fmt.Sprint(set) }

	d := &dfa{bounds: bounds}
	start := closure([]uint32{uint32(prog.Start)}, true, false)
	sets := [][]uint32{start}
	index := map[string]int32{keyOf(start): 0}
	classes := len(bounds) - 1
	for i := 0; i < len(sets); i++ {
		if len(sets)*classes > maxDFACells {
			return nil, fmt.Errorf("the pattern is too complex")
		}
		row := make([]int32, classes)
		for ci := range classes {
			row[ci] = -1
			r := bounds[ci]
			if !writable(r) {
				continue
			}
			var to []uint32
			for _, pc := range sets[i] {
				in := &prog.Inst[pc]
				switch in.Op {
				case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
					if in.MatchRune(r) {
						to = append(to, in.Out)
					}
				}
			}
			if len(to) == 0 {
				continue
			}
			set := closure(to, false, false)
			k := keyOf(set)
			j, ok := index[k]
			if !ok {
				if len(sets) >= maxDFAStates {
					return nil, fmt.Errorf("the pattern needs more than %d states", maxDFAStates)
				}
				j = int32(len(sets))
				index[k] = j
				sets = append(sets, set)
			}
			row[ci] = j
		}
		d.next = append(d.next, row)
		d.accept = append(d.accept, accepts(sets[i]))
	}
	d.prune()
	if d.minRest[0] < 0 {
		return nil, fmt.Errorf("the pattern matches no string that can be written unescaped")
	}
	return d, nil
}

// prune drops the transitions into states that cannot reach acceptance
// and works out minRest and maxRest.
func (d *dfa) prune() {
	n := len(d.next)
	d.minRest = make([]int32, n)
	for i := range d.minRest {
		d.minRest[i] = -1
		if d.accept[i] {
			d.minRest[i] = 0
		}
	}
	// Shortest distances to acceptance, by relaxation (small automata).
	for changed := true; changed; {
		changed = false
		for s, row := range d.next {
			for _, t := range row {
				if t >= 0 && d.minRest[t] >= 0 && (d.minRest[s] < 0 || d.minRest[t]+1 < d.minRest[s]) {
					d.minRest[s] = d.minRest[t] + 1
					changed = true
				}
			}
		}
	}
	for _, row := range d.next {
		for ci, t := range row {
			if t >= 0 && d.minRest[t] < 0 {
				row[ci] = -1
			}
		}
	}
	// Longest paths to acceptance: -1 where a cycle lies ahead.
	d.maxRest = make([]int32, n)
	color := make([]uint8, n) // 0 new, 1 on the path, 2 done
	var visit func(s int32) int32
	visit = func(s int32) int32 {
		switch color[s] {
		case 1:
			return -1
		case 2:
			return d.maxRest[s]
		}
		color[s] = 1
		best := int32(0)
		for _, t := range d.next[s] {
			if t < 0 {
				continue
			}
			m := visit(t)
			if m < 0 || best < 0 {
				best = -1
			} else if m+1 > best {
				best = m + 1
			}
		}
		color[s] = 2
		d.maxRest[s] = best
		return best
	}
	for s := range n {
		if d.minRest[s] >= 0 {
			visit(int32(s))
		}
	}
}

// numCons bounds a number or an integer. For an integer the bounds are
// inclusive and multipleOf may be set; for a number they are counted in
// units of 10^-scale, each inclusive or exclusive.
type numCons struct {
	lo, hi         int64
	hasLo, hasHi   bool
	loOpen, hiOpen bool
	mul            int64 // 0: none
	scale          int
}

// maxScale bounds the decimal places of a number's bounds.
const maxScale = 6

// decimals returns the decimal places r needs (maxScale+1: more).
func decimals(r *big.Rat) int {
	x := new(big.Rat).Set(r)
	for f := 0; f <= maxScale; f++ {
		if x.IsInt() {
			return f
		}
		x.Mul(x, big.NewRat(10, 1))
	}
	return maxScale + 1
}

// maxBoundedDigits bounds the integer digits of a bounded number, so that
// its value fits an int64.
const maxBoundedDigits = 18

var pow10 = func() (p [maxBoundedDigits + 1]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// meets reports whether the interval of values from a to b (inclusive
// where aIn, bIn) holds a value within the bounds (for an integer node,
// an integer multiple of mul).
func (c *numCons) meets(a, b int64, aIn, bIn, integer bool) bool {
	if c.hasLo && (c.lo > a || c.lo == a && c.loOpen && aIn) {
		a, aIn = c.lo, !c.loOpen
	}
	if c.hasHi && (c.hi < b || c.hi == b && c.hiOpen && bIn) {
		b, bIn = c.hi, !c.hiOpen
	}
	if a > b || a == b && !(aIn && bIn) {
		return false
	}
	if integer && c.mul > 1 {
		return floorDiv(b, c.mul)*c.mul >= a
	}
	return true
}

func floorDiv(a, m int64) int64 {
	q := a / m
	if a%m != 0 && a < 0 {
		q--
	}
	return q
}

// viable reports whether a number read so far may still end, or ends
// when complete, within c: its sign, integer digits u (nd of them, or a
// leading zero), and in the fraction its first scale digits f (fd read)
// and whether a digit after those is not zero.
func (c *numCons) viable(neg bool, u int64, nd int, zero, inFrac bool, f int64, fd int, fracNZ, complete, integer bool) bool {
	interval := func(a, b int64, aIn, bIn bool) bool {
		if neg {
			return c.meets(-b, -a, bIn, aIn, integer)
		}
		return c.meets(a, b, aIn, bIn, integer)
	}
	sc := c.scale
	one := pow10[sc]
	switch {
	case nd == 0: // after '-'
		return interval(0, math.MaxInt64/2, true, true)
	case inFrac:
		fd = min(fd, sc)
		v := u*one + f*pow10[sc-fd]
		switch {
		case fd == sc && fracNZ:
			return interval(v, v+1, false, false)
		case complete:
			return interval(v, v, true, true)
		}
		return interval(v, v+pow10[sc-fd], true, false)
	case complete:
		return interval(u*one, u*one, true, true)
	}
	for k := 0; nd+k <= maxBoundedDigits-sc; k++ {
		if zero && k > 0 {
			break
		}
		p := pow10[k+sc]
		if u > 0 && u > math.MaxInt64/p-1 {
			break
		}
		a := u * p
		var ok bool
		if integer {
			ok = interval(a, a+p-1, true, true)
		} else {
			ok = interval(a, a+p, true, false)
		}
		if ok {
			return true
		}
		if !neg && c.hasHi && a > c.hi || neg && c.hasLo && -a < c.lo {
			break
		}
	}
	return false
}

// numBound reads a numeric keyword as a rational.
func numBound(v any) (*big.Rat, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(string(num))
	return r, ok
}

var (
	ratMaxBound = new(big.Rat).SetInt64(pow10[maxBoundedDigits])
	ratMinBound = new(big.Rat).SetInt64(-pow10[maxBoundedDigits])
)

// ratFloor and ratCeil round r to an integer.
func ratFloor(r *big.Rat) *big.Int {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q
}

func ratCeil(r *big.Rat) *big.Int {
	q := ratFloor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// keywordPath names a keyword at a schema path, for the list of keywords
// not enforced.
func keywordPath(path, kw string) string {
	return path + "/" + strings.ReplaceAll(strings.ReplaceAll(kw, "~", "~0"), "/", "~1")
}

// str compiles a string schema with its lengths, format and pattern.
func (c *compiler) str(s map[string]any, path string) (*node, error) {
	sc := &strCons{maxLen: -1}
	var err error
	if sc.minLen, err = c.count(s, "minLength", path); err != nil {
		return nil, err
	}
	if _, ok := s["maxLength"]; ok {
		if sc.maxLen, err = c.count(s, "maxLength", path); err != nil {
			return nil, err
		}
		if sc.minLen > sc.maxLen {
			if err := c.unenforced(path, "minLength", "%d is more than maxLength %d", sc.minLen, sc.maxLen); err != nil {
				return nil, err
			}
			sc.minLen = 0
		}
	}
	var pats []string
	if f, ok := s["format"]; ok {
		name, _ := f.(string)
		if p, ok := formats[name]; ok {
			pats = append(pats, p)
		} else if err := c.unenforced(path, "format", "%q is not supported; the formats enforced are date-time, date, time, email, uuid, ipv4 and uri", name); err != nil {
			return nil, err
		}
	}
	if p, ok := s["pattern"]; ok {
		pat, ok := p.(string)
		if !ok {
			if err := c.unenforced(path, "pattern", "want a string"); err != nil {
				return nil, err
			}
		} else if len(pats) == 0 {
			pats = append(pats, pat)
		} else if err := c.unenforced(path, "pattern", "is not supported beside format"); err != nil {
			return nil, err
		}
	}
	if len(pats) > 0 {
		d, perr := compilePattern(pats[0])
		if perr != nil {
			kw := "pattern"
			if _, ok := s["format"]; ok {
				kw = "format"
			}
			if err := c.unenforced(path, kw, "%v", perr); err != nil {
				return nil, err
			}
		} else {
			sc.dfa = d
			if sc.maxLen >= 0 && int(d.minRest[0]) > sc.maxLen || d.maxRest[0] >= 0 && int(d.maxRest[0]) < sc.minLen {
				if err := c.unenforced(path, "maxLength", "no string of the lengths allowed matches the %s", kw(s)); err != nil {
					return nil, err
				}
				sc.minLen, sc.maxLen = 0, -1
			}
		}
	}
	if sc.minLen == 0 && sc.maxLen < 0 && sc.dfa == nil {
		return &node{kind: kString}, nil
	}
	return &node{kind: kString, str: sc}, nil
}

func kw(s map[string]any) string {
	if _, ok := s["format"]; ok {
		return "format"
	}
	return "pattern"
}

// num compiles a number or integer schema with its bounds and multipleOf.
func (c *compiler) num(s map[string]any, path string, integer bool) (*node, error) {
	k := kNumber
	if integer {
		k = kInteger
	}
	nc := &numCons{}
	set := false
	bound := func(kw string, low, open bool) error {
		v, ok := s[kw]
		if !ok {
			return nil
		}
		if b, isBool := v.(bool); isBool { // draft 4: exclusiveMinimum true
			if !b {
				return nil
			}
			base := "minimum"
			if !low {
				base = "maximum"
			}
			if v, ok = s[base]; !ok {
				return nil
			}
			open = true
		}
		r, ok := numBound(v)
		if !ok {
			return c.unenforced(path, kw, "want a number, got %v", v)
		}
		if integer {
			var i *big.Int
			switch {
			case low && open:
				i = new(big.Int).Add(ratFloor(r), big.NewInt(1))
			case low:
				i = ratCeil(r)
			case open:
				i = new(big.Int).Sub(ratCeil(r), big.NewInt(1))
			default:
				i = ratFloor(r)
			}
			r, open = new(big.Rat).SetInt(i), false
		} else if r = new(big.Rat).Mul(r, new(big.Rat).SetInt64(pow10[nc.scale])); !r.IsInt() {
			return c.unenforced(path, kw, "bounds with more than %d decimal places are not enforced, got %v", maxScale, v)
		}
		if r.Cmp(ratMaxBound) > 0 || r.Cmp(ratMinBound) < 0 {
			// Beyond the values a bounded number may take.
			if low == (r.Sign() < 0) {
				set = true // held by the digits a bounded number may take
				return nil
			}
			return c.unenforced(path, kw, "%v is beyond ±10^%d", v, maxBoundedDigits)
		}
		i := r.Num().Int64()
		set = true
		if low {
			if !nc.hasLo || i > nc.lo || i == nc.lo && open {
				nc.lo, nc.hasLo, nc.loOpen = i, true, open
			}
		} else if !nc.hasHi || i < nc.hi || i == nc.hi && open {
			nc.hi, nc.hasHi, nc.hiOpen = i, true, open
		}
		return nil
	}
	if !integer {
		for _, kw := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
			if r, ok := numBound(s[kw]); ok {
				if f := decimals(r); f <= maxScale {
					nc.scale = max(nc.scale, f)
				}
			}
		}
	}
	for _, b := range []struct {
		kw        string
		low, open bool
	}{{"minimum", true, false}, {"exclusiveMinimum", true, true}, {"maximum", false, false}, {"exclusiveMaximum", false, true}} {
		if _, isBool := s[b.kw].(bool); isBool && !b.open {
			continue
		}
		if err := bound(b.kw, b.low, b.open); err != nil {
			return nil, err
		}
	}
	if v, ok := s["multipleOf"]; ok {
		r, ok := numBound(v)
		switch {
		case !ok || r.Sign() <= 0:
			if err := c.unenforced(path, "multipleOf", "want a positive number, got %v", v); err != nil {
				return nil, err
			}
		case integer && r.IsInt() && r.Num().IsInt64() && r.Num().Int64() < pow10[maxBoundedDigits]:
			if m := r.Num().Int64(); m > 1 {
				nc.mul, set = m, true
			}
		case integer && new(big.Rat).Inv(r).IsInt():
			// Every integer is a multiple of 1/n.
		default:
			if err := c.unenforced(path, "multipleOf", "is enforced on integers only, with a whole or 1/n value"); err != nil {
				return nil, err
			}
		}
	}
	if !set {
		return &node{kind: k}, nil
	}
	lo, hi := int64(-pow10[maxBoundedDigits]), pow10[maxBoundedDigits]
	if nc.hasLo {
		lo = nc.lo
	}
	if nc.hasHi {
		hi = nc.hi
	}
	if !nc.meets(lo, hi, true, true, integer) {
		if c.strict {
			return nil, c.fail(path, "minimum", "no value lies within the bounds")
		}
		return &node{kind: k}, nil
	}
	return &node{kind: k, num: nc}, nil
}

// unenforced handles a keyword the compiler cannot enforce: an error in
// strict compilation, left out (and listed when asked) otherwise.
func (c *compiler) unenforced(path, kw, format string, args ...any) error {
	if c.strict && !c.lax {
		return c.fail(path, kw, format, args...)
	}
	if c.lax {
		c.skipped = append(c.skipped, keywordPath(path, kw))
	}
	return nil
}
