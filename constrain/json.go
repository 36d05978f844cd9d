// Package constrain restricts what a model may generate, token by token
// (constrained decoding). JSON builds, once per tokenizer, the table that
// makes the output one JSON object, as OpenAI's response_format
// {"type": "json_object"} and Ollama's format "json" ask; each generation
// then takes its own state from New, which satisfies engine.Constraint.
//
// The constraint works on bytes: a pushdown automaton over the bytes of
// JSON (strings with escapes and multi-byte UTF-8, numbers, true, false,
// null, objects and arrays nested up to MaxDepth deep) is walked over a
// trie of the tokens' bytes, so tokens that share a prefix share the work
// and a prefix the automaton rejects prunes every token below it. The set
// of tokens allowed in each automaton state is cached in the table, shared
// by all generations.
//
// Grammar generalises it for output in phases: optional reasoning between
// the model's thinking markers (with a token budget after which the end
// marker is forced, or none at all), then a body that is a JSON value a
// Schema accepts (CompileSchema: OpenAI's response_format json_schema,
// Ollama's format schema), tool calls in a model family's syntax with
// arguments held to each tool's parameters schema (tool_choice required
// or a named function), free text that never holds a marker (tool_choice
// none), or free text. A Vocab holds the per-tokenizer table; Compile
// makes a Grammar of a Spec, and each generation takes its own State from
// New.
package constrain

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/lem-engine/lem/tokenizer"
)

// maxCacheBytes bounds the memory of a table's cache of allowed-token sets.
const maxCacheBytes = 64 << 20

// JSONConstraint is the per-tokenizer table of the JSON constraint: the
// bytes of every token, arranged in a trie, and a cache of the tokens
// allowed in each automaton state. It is safe for concurrent use.
type JSONConstraint struct {
	toks  [][]byte // bytes by token id; nil: never allowed
	trie  *trie    // all tokens with bytes
	words int      // length of an allowed-token bit set

	// Inside a string, most tokens are plain text: printable characters
	// other than '"' and '\\', whole and valid in UTF-8. Such a token
	// leaves the automaton in the state it found, so in a string the
	// allowed set is plain plus what the trie of the other tokens allows.
	plain    []uint64 // bit set of the plain tokens
	notPlain *trie

	mu       sync.Mutex
	cache    map[state][]uint64
	cacheMax int
}

// JSON builds the JSON constraint's table for a tokenizer. It decodes every
// token once (a fraction of a second for a 150k vocabulary). Special tokens
// are never allowed, except stop tokens once the object is complete (see
// New).
func JSON(tok *tokenizer.Tokenizer) (*JSONConstraint, error) {
	if tok == nil {
		return nil, errors.New("constrain: nil tokenizer")
	}
	toks := tokenBytes(tok)
	j := &JSONConstraint{
		toks:  toks,
		trie:  buildTrie(toks),
		words: (len(toks) + 63) / 64,
		cache: make(map[state][]uint64),
	}
	j.plain = make([]uint64, j.words)
	other := make([][]byte, len(toks))
	for id, b := range toks {
		if plainString(b) {
			j.plain[id>>6] |= 1 << (id & 63)
		} else {
			other[id] = b
		}
	}
	j.notPlain = buildTrie(other)
	j.cacheMax = max(16, maxCacheBytes/(8*max(j.words, 1)))
	start := j.allowed(state{}, nil, make([]state, j.trie.maxLen+1))
	if !slices.ContainsFunc(start, func(w uint64) bool { return w != 0 }) {
		return nil, errors.New("constrain: no token of the vocabulary can start a JSON object")
	}
	return j, nil
}

// VocabSize returns the number of token ids the table covers.
func (j *JSONConstraint) VocabSize() int { return len(j.toks) }

// New returns the state of one generation. stopIDs are the tokens that end
// generation (the model's end-of-turn tokens); they are allowed only once
// the object is complete, and then nothing else is.
func (j *JSONConstraint) New(stopIDs []int32) *JSONState {
	return &JSONState{
		j:     j,
		stops: slices.Clone(stopIDs),
		walk:  make([]state, j.trie.maxLen+1),
	}
}

// allowed returns the set of tokens allowed in state s, from the cache or
// computed into a new bit set (into scratch, when given and the cache is
// full). The result must not be modified.
func (j *JSONConstraint) allowed(s state, scratch []uint64, walk []state) []uint64 {
	j.mu.Lock()
	bits, ok := j.cache[s]
	full := len(j.cache) >= j.cacheMax
	j.mu.Unlock()
	if ok {
		return bits
	}
	if full && scratch != nil {
		bits = scratch
		clear(bits)
	} else {
		bits = make([]uint64, j.words)
	}
	j.compute(s, bits, walk)
	if !full {
		j.mu.Lock()
		if len(j.cache) < j.cacheMax {
			j.cache[s] = bits
		}
		j.mu.Unlock()
	}
	return bits
}

// compute sets the bits of the tokens allowed in state s; bits starts
// clear.
func (j *JSONConstraint) compute(s state, bits []uint64, walk []state) {
	if s.mode == mStr {
		copy(bits, j.plain)
		j.notPlain.walk(s, bits, walk)
		return
	}
	j.trie.walk(s, bits, walk)
}

// walk sets the bits of the tokens whose bytes the automaton accepts from
// state s. walk holds a state per trie depth.
func (t *trie) walk(s state, bits []uint64, walk []state) {
	walk[0] = s
	nodes := t.nodes
	for i := 0; i < len(nodes); {
		n := &nodes[i]
		x := walk[n.depth-1]
		if !x.step(n.b) {
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

// plainString reports whether b is plain text inside a JSON string: no
// control characters, quotes or backslashes, and whole, valid UTF-8.
func plainString(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}

// JSONState is the JSON constraint of one generation. It implements the
// engine's Constraint interface. It is not safe for concurrent use.
type JSONState struct {
	j     *JSONConstraint
	s     state
	stops []int32
	err   error

	walk    []state
	scratch []uint64
}

var negInf = float32(math.Inf(-1))

// Mask sets the logits of the tokens that may not come next to -Inf: those
// whose bytes would make the text not a prefix of a JSON object, special
// tokens, and ids beyond the vocabulary. Once the object is complete (or
// after a rejected token) only the stop tokens remain.
func (c *JSONState) Mask(logits []float32) {
	if c.err != nil || c.s.mode == mDone && len(c.stops) > 0 {
		c.onlyStops(logits)
		return
	}
	if c.scratch == nil {
		c.scratch = make([]uint64, c.j.words)
	}
	bits := c.j.allowed(c.s, c.scratch, c.walk)
	n := min(len(logits), len(bits)*64)
	for w := 0; w*64 < n; w++ {
		word := bits[w]
		if word == ^uint64(0) {
			continue
		}
		lo, hi := w*64, min(w*64+64, n)
		if word == 0 {
			for i := lo; i < hi; i++ {
				logits[i] = negInf
			}
			continue
		}
		for i := lo; i < hi; i++ {
			if word&(1<<(i-lo)) == 0 {
				logits[i] = negInf
			}
		}
	}
	for i := n; i < len(logits); i++ {
		logits[i] = negInf
	}
	for _, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			logits[id] = negInf
		}
	}
}

// onlyStops masks everything but the stop tokens.
func (c *JSONState) onlyStops(logits []float32) {
	keep := make([]float32, len(c.stops))
	for k, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			keep[k] = logits[id]
		}
	}
	for i := range logits {
		logits[i] = negInf
	}
	for k, id := range c.stops {
		if id >= 0 && int(id) < len(logits) {
			logits[id] = keep[k]
		}
	}
}

// Accept advances the constraint past the chosen token. A token the
// constraint does not allow (one Mask would have masked) ends the output:
// Done then reports true and Err says why.
func (c *JSONState) Accept(id int32) {
	if c.err != nil {
		return
	}
	if c.s.mode == mDone && slices.Contains(c.stops, id) {
		return
	}
	if id < 0 || int(id) >= len(c.j.toks) || c.j.toks[id] == nil || slices.Contains(c.stops, id) {
		c.err = fmt.Errorf("constrain: token %d is not allowed in JSON output", id)
		return
	}
	s := c.s
	for _, b := range c.j.toks[id] {
		if !s.step(b) {
			c.err = fmt.Errorf("constrain: token %d (%q) does not continue the JSON output", id, c.j.toks[id])
			return
		}
	}
	c.s = s
}

// Done reports whether the top-level object has closed (or a token the
// constraint does not allow was accepted).
func (c *JSONState) Done() bool { return c.s.mode == mDone || c.err != nil }

// Err reports a token accepted against the constraint, or nil.
func (c *JSONState) Err() error { return c.err }
