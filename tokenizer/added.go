package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// segment is a stretch of input: plain text (tok < 0) or an added token.
type segment struct {
	start, end int
	tok        int32 // index into addedMatcher.toks, or -1
}

// addedMatcher finds added tokens in text: leftmost match first, the longest
// one where several start at the same place. It is a byte trie.
type addedMatcher struct {
	root  [256]int32 // child of the root per first byte, 0 when none
	nodes []trieNode // nodes[0] is the root
	toks  []AddedToken
}

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into toks of the token ending here, or -1
}

type trieEdge struct {
	b     byte
	child int32
}

func newAddedMatcher(toks []AddedToken, content func(AddedToken) string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{tok: -1}}}
	for _, t := range toks {
		s := content(t)
		if s == "" {
			continue
		}
		k := int32(len(m.toks))
		m.toks = append(m.toks, t)
		n := int32(0)
		for i := 0; i < len(s); i++ {
			n = m.child(n, s[i], true)
		}
		m.nodes[n].tok = k // a repeated content keeps the last token
	}
	if len(m.toks) == 0 {
		return nil
	}
	return m
}

func (m *addedMatcher) child(n int32, b byte, add bool) int32 {
	if n == 0 {
		if c := m.root[b]; c != 0 || !add {
			return c
		}
	} else {
		for _, e := range m.nodes[n].edges {
			if e.b == b {
				return e.child
			}
		}
		if !add {
			return 0
		}
	}
	c := int32(len(m.nodes))
	m.nodes = append(m.nodes, trieNode{tok: -1})
	if n == 0 {
		m.root[b] = c
	} else {
		m.nodes[n].edges = append(m.nodes[n].edges, trieEdge{b, c})
	}
	return c
}

// longestAt returns the end and token index of the longest token starting
// at s[i], or tok -1.
func (m *addedMatcher) longestAt(s string, i int) (end int, tok int32) {
	tok = -1
	n := m.root[s[i]]
	for j := i + 1; n != 0; j++ {
		if t := m.nodes[n].tok; t >= 0 {
			end, tok = j, t
		}
		if j >= len(s) {
			break
		}
		n = m.child(n, s[j], false)
	}
	return end, tok
}

func isWordEnd(s string) bool {
	r, w := utf8.DecodeLastRuneInString(s)
	return w > 0 && isWordChar(r)
}

func isWordStart(s string) bool {
	r, w := utf8.DecodeRuneInString(s)
	return w > 0 && isWordChar(r)
}

// split appends the segments of s to dst.
func (m *addedMatcher) split(dst []segment, s string) []segment {
	done := 0 // end of the last segment emitted
	for i := 0; i < len(s); {
		if m.root[s[i]] == 0 {
			i++
			continue
		}
		end, k := m.longestAt(s, i)
		if k < 0 {
			i++
			continue
		}
		t := &m.toks[k]
		start, stop := i, end
		if t.SingleWord && (start > 0 && isWordEnd(s[:start]) || stop < len(s) && isWordStart(s[stop:])) {
			i = end // the match is consumed without being used
			continue
		}
		if t.LStrip {
			for start > done {
				r, w := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if t.RStrip {
			for stop < len(s) {
				r, w := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += w
			}
		}
		if done < start {
			dst = append(dst, segment{done, start, -1})
		}
		dst = append(dst, segment{start, stop, k})
		done, i = stop, stop
	}
	if done < len(s) {
		dst = append(dst, segment{done, len(s), -1})
	}
	return dst
}
