package constrain

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/lem-engine/lem/tokenizer"
)

// This file holds the grammar constraint: output in phases, each held to
// its own automaton over bytes. An optional reasoning phase comes first
// (between the model's thinking markers, with a token budget after which
// the end marker is forced), then the body: a JSON value a Schema accepts,
// tool calls in a model family's syntax with arguments held to each
// tool's schema, free text that never holds a given marker, or free text.

// Vocab is a tokenizer's table for grammar constraints: the bytes of every
// token, in a trie, and the text of the special tokens, which are allowed
// only where their whole text is a marker the grammar expects (such as
// <think> or <tool_call>, which some vocabularies hold as special tokens).
// Build it once per tokenizer; it is safe for concurrent use.
type Vocab struct {
	toks       [][]byte // bytes by token id; nil: special, or never allowed
	trie       *trie
	words      int
	plain      []uint64 // plain text inside a JSON string (see JSONConstraint)
	notPlain   *trie
	plainChars int // the most characters of a plain token
	specials   []special

	mu      sync.Mutex
	split   [256]*byteSplit
	plainTo [256][]uint64 // plain tokens of up to n characters, built on first use
}

// plainUpTo returns the bit set of the plain tokens of up to n characters.
func (v *Vocab) plainUpTo(n int) []uint64 {
	if n >= v.plainChars || n >= len(v.plainTo) {
		return v.plain
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if b := v.plainTo[n]; b != nil {
		return b
	}
	b := make([]uint64, v.words)
	for id, t := range v.toks {
		if v.plain[id>>6]&(1<<(id&63)) != 0 && utf8.RuneCount(t) <= n {
			b[id>>6] |= 1 << (id & 63)
		}
	}
	v.plainTo[n] = b
	return b
}

// special is a special token and its text.
type special struct {
	id   int32
	text []byte
}

// byteSplit divides the tokens by whether their bytes hold one byte.
type byteSplit struct {
	without []uint64 // bit set of the tokens without it
	with    *trie    // the tokens with it
}

// NewVocab builds the table of a tokenizer's vocabulary.
func NewVocab(tok *tokenizer.Tokenizer) (*Vocab, error) {
	if tok == nil {
		return nil, errors.New("constrain: nil tokenizer")
	}
	toks := tokenBytes(tok)
	v := &Vocab{toks: toks, trie: buildTrie(toks), words: (len(toks) + 63) / 64}
	v.plain = make([]uint64, v.words)
	other := make([][]byte, len(toks))
	for id, b := range toks {
		if plainString(b) {
			v.plain[id>>6] |= 1 << (id & 63)
			v.plainChars = max(v.plainChars, utf8.RuneCount(b))
		} else {
			other[id] = b
		}
	}
	v.notPlain = buildTrie(other)
	for id := range toks {
		id := int32(id)
		if !tok.IsSpecial(id) {
			continue
		}
		if text := tok.Decode([]int32{id}, false); text != "" {
			v.specials = append(v.specials, special{id: id, text: []byte(text)})
		}
	}
	return v, nil
}

// VocabSize returns the number of token ids the table covers.
func (v *Vocab) VocabSize() int { return len(v.toks) }

// tokenFor returns the token whose bytes are text, preferring a special
// token, or -1.
func (v *Vocab) tokenFor(text string) int32 {
	if text == "" {
		return -1
	}
	for _, sp := range v.specials {
		if string(sp.text) == text {
			return sp.id
		}
	}
	for id, b := range v.toks {
		if string(b) == text {
			return int32(id)
		}
	}
	return -1
}

// bytesOf returns a token's bytes and whether it is a special token.
func (v *Vocab) bytesOf(id int32) ([]byte, bool) {
	if id < 0 || int(id) >= len(v.toks) {
		return nil, false
	}
	if b := v.toks[id]; b != nil {
		return b, false
	}
	i, ok := slices.BinarySearchFunc(v.specials, id, func(s special, id int32) int { return int(s.id - id) })
	if !ok {
		return nil, false
	}
	return v.specials[i].text, true
}

// splitOn returns the split of the tokens on byte c, built on first use.
func (v *Vocab) splitOn(c byte) *byteSplit {
	v.mu.Lock()
	defer v.mu.Unlock()
	if sp := v.split[c]; sp != nil {
		return sp
	}
	sp := &byteSplit{without: make([]uint64, v.words)}
	with := make([][]byte, len(v.toks))
	for id, b := range v.toks {
		switch {
		case b == nil:
		case bytes.IndexByte(b, c) >= 0:
			with[id] = b
		default:
			sp.without[id>>6] |= 1 << (id & 63)
		}
	}
	sp.with = buildTrie(with)
	v.split[c] = sp
	return sp
}

// CallSyntax is how a model family writes tool calls. One call is written
// Call, the function's name (as inside a JSON string), Mid, the arguments
// object, Suffix; several are separated by Sep; all of them are enclosed
// in Open and Close. For Hermes-style models (Qwen, Hermes):
//
//	CallSyntax{Call: "<tool_call>\n{\"name\": \"", Mid: "\", \"arguments\": ", Suffix: "}\n</tool_call>"}
//
// An empty Suffix ends a call with its arguments, as in the Harmony format
// of the gpt-oss models, where the stop token <|call|> follows them:
//
//	CallSyntax{Call: "<|channel|>commentary to=functions.", Mid: " <|constrain|>json<|message|>"}
type CallSyntax struct {
	Open, Call, Mid, Suffix, Sep, Close string
}

// ToolCalls is a body of tool calls.
type ToolCalls struct {
	Syntax CallSyntax
	// Tools are the functions that may be called, with the schemas of
	// their arguments (nil: any object).
	Tools []Tool
	// Multiple lets the model make more than one call.
	Multiple bool
}

// Tool is a function that may be called.
type Tool struct {
	Name   string
	Params *Schema
}

// Spec describes the output a Grammar allows: an optional reasoning
// phase, then the body. The body is Schema, Tools or Forbid, whichever is
// set, or free text when none is.
type Spec struct {
	// ThinkStart and ThinkEnd are the model's reasoning markers, such as
	// "<think>" and "</think>"; empty: the output has no reasoning phase.
	// Output that begins (after white space) with ThinkStart reasons until
	// ThinkEnd, then the body follows.
	ThinkStart, ThinkEnd string
	// InReasoning says that the prompt ended inside reasoning: the output
	// begins in it.
	InReasoning bool
	// NoThinking forbids reasoning: the output begins with an empty
	// reasoning block (ThinkStart, at once ThinkEnd), as templates write
	// when thinking is off, or, when it begins inside reasoning
	// (InReasoning), with ThinkEnd.
	NoThinking bool
	// ThinkBudget, when positive, is the number of reasoning tokens after
	// which ThinkEnd is forced.
	ThinkBudget int
	// ThinkEndCommit, when positive, is how many bytes of ThinkEnd commit
	// the output to it: once they are written in reasoning, the rest of
	// ThinkEnd must follow, and reasoning cannot hold them otherwise. The
	// Harmony format's reasoning ends with "<|end|><|start|>assistant",
	// and any "<|" in it would end a message: it commits at 2.
	ThinkEndCommit int

	// Prefix is text the body must begin with (after any reasoning),
	// such as the Harmony format's "<|channel|>final<|message|>" before a
	// JSON value.
	Prefix string

	// Schema holds the body to one JSON value.
	Schema *Schema
	// Tools holds the body to tool calls.
	Tools *ToolCalls
	// Forbid keeps a marker (such as "<tool_call>") out of a body of free
	// text.
	Forbid string
}

// Grammar is a compiled Spec over a Vocab: the table every generation of
// the spec shares. It is safe for concurrent use.
type Grammar struct {
	v        *Vocab
	spec     Spec
	thinkEnd kmp
	forbid   kmp
	init     gstate

	first, more, suffix, closing *litSet
	prefix                       *litSet
	params                       []*node

	// startTok and endTok are the tokens that are ThinkStart and
	// ThinkEnd whole (-1: none); a forced marker takes them, so that the
	// model sees its own marker.
	startTok, endTok int32
}

// Compile compiles a spec for the vocabulary.
func (v *Vocab) Compile(spec Spec) (*Grammar, error) {
	g := &Grammar{v: v, spec: spec}
	set := 0
	for _, b := range []bool{spec.Schema != nil, spec.Tools != nil, spec.Forbid != ""} {
		if b {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("constrain: a spec sets more than one of Schema, Tools and Forbid")
	}
	if (spec.ThinkStart == "") != (spec.ThinkEnd == "") {
		return nil, errors.New("constrain: a spec sets one reasoning marker without the other")
	}
	if len(spec.ThinkStart) > 255 || len(spec.ThinkEnd) > 255 || len(spec.Forbid) > 255 {
		return nil, errors.New("constrain: a marker longer than 255 bytes")
	}
	if spec.ThinkEndCommit < 0 || spec.ThinkEndCommit > len(spec.ThinkEnd) {
		return nil, fmt.Errorf("constrain: ThinkEndCommit %d is outside ThinkEnd's %d bytes", spec.ThinkEndCommit, len(spec.ThinkEnd))
	}
	g.thinkEnd = newKMP(spec.ThinkEnd)
	g.startTok, g.endTok = v.tokenFor(spec.ThinkStart), v.tokenFor(spec.ThinkEnd)
	g.forbid = newKMP(spec.Forbid)
	s := &g.init
	if spec.Tools != nil {
		if err := g.compileTools(spec.Tools); err != nil {
			return nil, err
		}
	}
	if spec.Prefix != "" {
		var err error
		if g.prefix, err = newLitSet(false, false, litAlt{text: []byte(spec.Prefix), act: actBody}); err != nil {
			return nil, err
		}
		g.enter(s, g.prefix)
	} else {
		g.startBody(s)
	}
	switch {
	case spec.ThinkEnd == "":
		s.th = thOff
	case spec.InReasoning:
		s.th, s.forced = thIn, spec.NoThinking
	case spec.NoThinking:
		// An empty reasoning block, as templates write when thinking
		// is off.
		s.th, s.dead, s.empty = thMaybe, true, true
	default:
		s.th = thMaybe
	}
	return g, nil
}

// Literal actions: what comes after a literal of the tool-call syntax.
const (
	actArgs      uint8 = iota // a tool's arguments
	actAfterCall              // the end of a call
	actEnd                    // the end of the output
	actBody                   // the end of Spec.Prefix: the body proper
)

// litSet is a choice between literals, sorted, none a prefix of another.
type litSet struct {
	texts  [][]byte
	acts   []uint8
	tools  []int // actArgs: the tool
	lead   bool  // white space may come first
	accept bool  // the output may end before it
}

func newLitSet(lead, accept bool, alts ...litAlt) (*litSet, error) {
	slices.SortFunc(alts, func(a, b litAlt) int { return bytes.Compare(a.text, b.text) })
	ls := &litSet{lead: lead, accept: accept}
	for i, a := range alts {
		if len(a.text) == 0 {
			return nil, errors.New("constrain: an empty literal in the tool-call syntax")
		}
		if i > 0 && bytes.HasPrefix(a.text, alts[i-1].text) {
			return nil, fmt.Errorf("constrain: the tool-call syntax is ambiguous: %q begins with %q", a.text, alts[i-1].text)
		}
		ls.texts = append(ls.texts, a.text)
		ls.acts = append(ls.acts, a.act)
		ls.tools = append(ls.tools, a.tool)
	}
	return ls, nil
}

type litAlt struct {
	text []byte
	act  uint8
	tool int
}

// compileTools builds the literal sets of a body of tool calls.
func (g *Grammar) compileTools(tc *ToolCalls) error {
	if len(tc.Tools) == 0 {
		return errors.New("constrain: tool calls without tools")
	}
	sx := tc.Syntax
	if sx.Call+sx.Mid == "" {
		return errors.New("constrain: the tool-call syntax needs Call or Mid")
	}
	seen := map[string]bool{}
	var first, more []litAlt
	for _, t := range tc.Tools {
		if t.Name == "" || seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		params := anyObject
		if t.Params != nil {
			params = t.Params.root
		}
		i := len(g.params)
		g.params = append(g.params, params)
		name := encodeJSON(t.Name)
		name = name[1 : len(name)-1]
		call := sx.Call + string(name) + sx.Mid
		first = append(first, litAlt{text: []byte(sx.Open + call), act: actArgs, tool: i})
		more = append(more, litAlt{text: []byte(sx.Sep + call), act: actArgs, tool: i})
	}
	var err error
	if g.first, err = newLitSet(true, false, first...); err != nil {
		return err
	}
	if sx.Suffix != "" {
		if g.suffix, err = newLitSet(false, false, litAlt{text: []byte(sx.Suffix), act: actAfterCall}); err != nil {
			return err
		}
	}
	if sx.Close != "" {
		if g.closing, err = newLitSet(false, false, litAlt{text: []byte(sx.Close), act: actEnd}); err != nil {
			return err
		}
	}
	if tc.Multiple {
		if sx.Close != "" {
			more = append(more, litAlt{text: []byte(sx.Close), act: actEnd})
		}
		if g.more, err = newLitSet(sx.Sep == "", sx.Close == "", more...); err != nil {
			return err
		}
	}
	return nil
}

// kmp matches a marker in a stream of bytes.
type kmp struct {
	s    string
	fail []uint8
}

func newKMP(s string) kmp {
	k := kmp{s: s, fail: make([]uint8, len(s))}
	for i, j := 1, 0; i < len(s); i++ {
		for j > 0 && s[i] != s[j] {
			j = int(k.fail[j-1])
		}
		if s[i] == s[j] {
			j++
		}
		k.fail[i] = uint8(j)
	}
	return k
}

// next returns the bytes of the marker matched after c, given m before.
func (k *kmp) next(m uint8, c byte) uint8 {
	for m > 0 && (int(m) == len(k.s) || k.s[m] != c) {
		m = k.fail[m-1]
	}
	if int(m) < len(k.s) && k.s[m] == c {
		m++
	}
	return m
}

// thinkMode is the state of the reasoning phase.
type thinkMode uint8

const (
	thOff   thinkMode = iota // no reasoning (any more): the body
	thMaybe                  // reasoning may open: ThinkStart is matched beside the body
	thIn                     // in reasoning, until ThinkEnd
)

// bphase is the state of the body.
type bphase uint8

const (
	bFree   bphase = iota // free text
	bForbid               // free text without the marker
	bValue                // a JSON value
	bLit                  // a literal of the tool-call syntax
	bArgs                 // a call's arguments
	bEnd                  // nothing more
)

// gstate is a state of the grammar.
type gstate struct {
	th     thinkMode
	tk     uint8 // thMaybe: bytes of ThinkStart matched
	lw     uint8 // thMaybe: white space before ThinkStart
	tm     uint8 // thIn: bytes of ThinkEnd matched
	forced bool  // thIn: ThinkEnd must come now
	dead   bool  // thMaybe: the body can no longer begin here
	empty  bool  // thMaybe: reasoning must open and close at once

	phase  bphase
	fm     uint8 // bForbid: bytes of the marker matched
	ws     uint8 // bLit: white space before the literal
	set    *litSet
	lo, hi uint16 // bLit: candidates
	off    uint16 // bLit: bytes matched
	v      vstate // bValue, bArgs
}

// step advances the grammar by one byte. marker says that the byte
// belongs to a special token, which may only be a marker: the text of
// reasoning, JSON and free white space take none.
func (g *Grammar) step(s *gstate, c byte, marker bool) bool {
	switch s.th {
	case thMaybe:
		ts := g.spec.ThinkStart
		okT := false
		if c == ts[s.tk] {
			s.tk++
			okT = true
		} else if s.tk == 0 && isWS(c) && !marker && s.lw < maxWS {
			s.lw++
			okT = true
		}
		okB := false
		if !s.dead {
			if okB = g.stepBody(s, c, marker); !okB {
				s.dead = true
			}
		}
		if okT && int(s.tk) == len(ts) {
			s.th, s.tm, s.forced = thIn, 0, s.empty
			g.resetBody(s)
			return true
		}
		if !okT {
			s.th = thOff
		}
		return okT || okB
	case thIn:
		te := g.spec.ThinkEnd
		if c == te[s.tm] {
			s.tm++
			if int(s.tm) == len(te) {
				s.th, s.forced = thOff, false
			}
			return true
		}
		if s.forced || marker || g.spec.ThinkEndCommit > 0 && int(s.tm) >= g.spec.ThinkEndCommit {
			return false
		}
		s.tm = g.thinkEnd.next(s.tm, c)
		return true
	}
	return g.stepBody(s, c, marker)
}

// resetBody puts the body back at its start.
func (g *Grammar) resetBody(s *gstate) {
	th, tm, forced := s.th, s.tm, s.forced
	*s = g.init
	s.th, s.tm, s.forced = th, tm, forced
}

// stepBody advances the body by one byte.
func (g *Grammar) stepBody(s *gstate, c byte, marker bool) bool {
	switch s.phase {
	case bFree:
		return true
	case bForbid:
		s.fm = g.forbid.next(s.fm, c)
		return int(s.fm) < len(g.forbid.s)
	case bValue:
		return !marker && s.v.step(c)
	case bArgs:
		if marker || !s.v.step(c) {
			return false
		}
		if s.v.mode == vDone {
			if g.suffix != nil {
				g.enter(s, g.suffix)
			} else {
				g.act(s, actAfterCall, 0)
			}
		}
		return true
	case bLit:
		if s.off == 0 && s.set.lead && isWS(c) {
			if marker || s.ws >= maxWS {
				return false
			}
			s.ws++
			return true
		}
		lo, hi := narrow(s.set.texts, s.lo, s.hi, s.off, c)
		if lo == hi {
			return false
		}
		s.lo, s.hi, s.off = lo, hi, s.off+1
		if hi-lo == 1 && len(s.set.texts[lo]) == int(s.off) {
			g.act(s, s.set.acts[lo], s.set.tools[lo])
		}
		return true
	}
	return false
}

// startBody puts the body at its start, past any Prefix.
func (g *Grammar) startBody(s *gstate) {
	switch spec := &g.spec; {
	case spec.Schema != nil:
		s.phase, s.set, s.v = bValue, nil, newValue(spec.Schema.root)
	case spec.Tools != nil:
		g.enter(s, g.first)
	case spec.Forbid != "":
		s.phase, s.set, s.fm = bForbid, nil, 0
	default:
		s.phase, s.set = bFree, nil
	}
}

// enter begins a literal set.
func (g *Grammar) enter(s *gstate, ls *litSet) {
	s.phase, s.set, s.lo, s.hi, s.off, s.ws = bLit, ls, 0, uint16(len(ls.texts)), 0, 0
}

// act moves past a literal of the tool-call syntax.
func (g *Grammar) act(s *gstate, act uint8, tool int) {
	switch act {
	case actArgs:
		s.phase, s.set, s.v = bArgs, nil, newValue(g.params[tool])
	case actAfterCall:
		switch {
		case g.more != nil:
			g.enter(s, g.more)
		case g.closing != nil:
			g.enter(s, g.closing)
		default:
			s.phase, s.set = bEnd, nil
		}
	case actEnd:
		s.phase, s.set = bEnd, nil
	case actBody:
		g.startBody(s)
	}
}

// accepting reports whether the output may end in state s.
func (g *Grammar) accepting(s *gstate) bool {
	switch s.th {
	case thIn:
		return !s.forced && (s.phase == bFree || s.phase == bForbid)
	case thMaybe:
		return !s.dead && g.bodyAccepting(s)
	}
	return g.bodyAccepting(s)
}

func (g *Grammar) bodyAccepting(s *gstate) bool {
	switch s.phase {
	case bFree, bForbid, bEnd:
		return true
	case bValue:
		return s.v.complete()
	case bLit:
		return s.set.accept && s.off == 0
	}
	return false
}

// final reports whether nothing may follow state s.
func (g *Grammar) final(s *gstate) bool {
	if s.th != thOff {
		return false
	}
	return s.phase == bEnd || s.phase == bValue && s.v.mode == vDone
}

// keepByte returns a byte such that tokens without it leave state s as it
// is, when there is one.
func (g *Grammar) keepByte(s *gstate) (byte, bool) {
	switch {
	case s.th == thIn && !s.forced && s.tm == 0:
		return g.spec.ThinkEnd[0], true
	case s.th == thOff && s.phase == bForbid && s.fm == 0:
		return g.forbid.s[0], true
	}
	return 0, false
}

// freeString reports whether state s is inside a JSON string that takes
// plain tokens (of up to room characters; -1: any) as they come: one that
// takes any text, or one whose only bound is a maximum length.
func (g *Grammar) freeString(s *gstate) (room int, ok bool) {
	if s.th != thOff || s.phase != bValue && s.phase != bArgs {
		return 0, false
	}
	if s.v.freeString() {
		return -1, true
	}
	return s.v.lengthRoom()
}

// allowed sets the bits of the tokens allowed in state s; bits starts
// clear.
func (g *Grammar) allowed(s *gstate, bits []uint64, walk []gstate) {
	v := g.v
	if room, ok := g.freeString(s); ok {
		if room < 0 {
			copy(bits, v.plain)
		} else {
			copy(bits, v.plainUpTo(room))
		}
		g.walk(v.notPlain, s, bits, walk)
	} else if c, ok := g.keepByte(s); ok {
		sp := v.splitOn(c)
		copy(bits, sp.without)
		g.walk(sp.with, s, bits, walk)
	} else {
		g.walk(v.trie, s, bits, walk)
	}
	for _, sp := range v.specials {
		x := *s
		ok := true
		for _, c := range sp.text {
			if !g.step(&x, c, true) {
				ok = false
				break
			}
		}
		if ok {
			bits[sp.id>>6] |= 1 << (sp.id & 63)
		}
	}
}

// walk sets the bits of the tokens of t whose bytes the grammar accepts
// from state s. walk holds a state per trie depth.
func (g *Grammar) walk(t *trie, s *gstate, bits []uint64, walk []gstate) {
	walk[0] = *s
	nodes := t.nodes
	for i := 0; i < len(nodes); {
		n := &nodes[i]
		x := walk[n.depth-1]
		if !g.step(&x, n.b, false) {
			i = int(n.end)
			continue
		}
		walk[n.depth] = x
		for _, id := range t.ids[n.ids : n.ids+uint32(n.nids)] {
			bits[id>>6] |= 1 << (id & 63)
		}
		i++
	}
}

// New returns the state of one generation. stopIDs are the tokens that end
// generation; they are allowed only where the output may end.
func (g *Grammar) New(stopIDs []int32) *State {
	return &State{g: g, s: g.init, stops: slices.Clone(stopIDs)}
}

// State is a grammar constraint of one generation. It implements the
// engine's Constraint interface. It is not safe for concurrent use.
type State struct {
	g      *Grammar
	s      gstate
	stops  []int32
	err    error
	thinks int // reasoning tokens accepted

	walk []gstate
	bits []uint64
	keep []float32
}

// Mask sets the logits of the tokens that may not come next to -Inf. Where
// the output may end, the stop tokens keep theirs; once it must end, or
// after a rejected token, only they remain.
func (c *State) Mask(logits []float32) {
	g := c.g
	if b := g.spec.ThinkBudget; b > 0 && c.s.th == thIn && c.thinks >= b {
		c.s.forced = true
	}
	if c.err != nil || g.final(&c.s) {
		c.onlyStops(logits)
		return
	}
	if c.s.th == thOff && c.s.phase == bFree {
		return
	}
	if c.bits == nil {
		c.bits = make([]uint64, g.v.words)
		c.walk = make([]gstate, g.v.trie.maxLen+1)
	}
	clear(c.bits)
	switch {
	case c.s.th == thIn && c.s.forced && c.s.tm == 0 && g.endTok >= 0:
		c.bits[g.endTok>>6] |= 1 << (g.endTok & 63)
	case c.s.th == thMaybe && c.s.empty && c.s.tk == 0 && g.startTok >= 0:
		c.bits[g.startTok>>6] |= 1 << (g.startTok & 63)
	default:
		g.allowed(&c.s, c.bits, c.walk)
	}
	accept := g.accepting(&c.s)
	c.keep = c.keep[:0]
	for _, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			c.keep = append(c.keep, logits[id])
		}
	}
	bits := c.bits
	n := min(len(logits), len(bits)*64)
	for w := 0; w*64 < n; w++ {
		word := bits[w]
		if word == ^uint64(0) {
			continue
		}
		lo, hi := w*64, min(w*64+64, n)
		for i := lo; i < hi; i++ {
			if word&(1<<(i-lo)) == 0 {
				logits[i] = negInf
			}
		}
	}
	for i := n; i < len(logits); i++ {
		logits[i] = negInf
	}
	k := 0
	for _, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			if accept {
				logits[id] = c.keep[k]
			} else {
				logits[id] = negInf
			}
			k++
		}
	}
}

// onlyStops masks everything but the stop tokens.
func (c *State) onlyStops(logits []float32) {
	c.keep = c.keep[:0]
	for _, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			c.keep = append(c.keep, logits[id])
		}
	}
	for i := range logits {
		logits[i] = negInf
	}
	k := 0
	for _, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			logits[id] = c.keep[k]
			k++
		}
	}
}

// Accept advances the constraint past the chosen token. A token the
// constraint does not allow ends the output: Done then reports true and
// Err says why.
func (c *State) Accept(id int32) {
	if c.err != nil {
		return
	}
	b, marker := c.g.v.bytesOf(id)
	if b == nil {
		c.err = fmt.Errorf("constrain: token %d is not allowed here", id)
		return
	}
	thinking := c.s.th == thIn
	x := c.s
	for _, ch := range b {
		if !c.g.step(&x, ch, marker) {
			c.err = fmt.Errorf("constrain: token %d (%q) is not allowed here", id, b)
			return
		}
	}
	c.s = x
	if thinking {
		c.thinks++
	}
}

// Done reports whether the output is complete (or a token the constraint
// does not allow was accepted).
func (c *State) Done() bool { return c.err != nil || c.g.final(&c.s) }

// Err reports a token accepted against the constraint, or nil.
func (c *State) Err() error { return c.err }

// Reasoning reports whether the output is inside reasoning.
func (c *State) Reasoning() bool { return c.s.th == thIn }
