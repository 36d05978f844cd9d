package constrain

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lem-engine/lem/tokenizer"
)

// tokenBytes returns the bytes each token id stands for in generated text,
// nil for special tokens and for tokens whose bytes cannot be told (they
// are never allowed).
//
// The tokenizer decodes whole sequences to valid UTF-8, so a token's bytes
// are found as follows: the token is decoded after a plain reference token
// (so that decoders that treat the start of the text specially, by
// stripping a leading space, see it in the middle), and the reference's
// text is cut off. Where that text holds U+FFFD, the token is part of a
// character: its bytes come from its spelling, either a byte-fallback token
// <0xXX> or a byte-level (GPT-2 alphabet) token, unless the spelling holds
// U+FFFD itself.
func tokenBytes(tok *tokenizer.Tokenizer) [][]byte {
	n := tok.VocabSize()
	out := make([][]byte, n)
	ref, refText := referenceToken(tok)
	ids := []int32{ref, 0}
	for id := range n {
		id := int32(id)
		if tok.IsSpecial(id) || tok.Token(id) == "" {
			continue
		}
		var text string
		if ref >= 0 {
			ids[1] = id
			if d := tok.Decode(ids, false); strings.HasPrefix(d, refText) {
				text = d[len(refText):]
			} else {
				text = tok.Decode(ids[1:], false)
			}
		} else {
			text = tok.Decode([]int32{id}, false)
		}
		if !strings.ContainsRune(text, utf8.RuneError) {
			if text != "" {
				out[id] = []byte(text)
			}
			continue
		}
		if b, ok := spelledBytes(tok.Token(id)); ok {
			out[id] = b
		} else if strings.ContainsRune(tok.Token(id), utf8.RuneError) {
			// The vocabulary holds U+FFFD itself.
			out[id] = []byte(text)
		}
	}
	return out
}

// referenceToken finds a token that decodes to one plain ASCII letter,
// whatever comes after it.
func referenceToken(tok *tokenizer.Tokenizer) (int32, string) {
	for _, s := range []string{"a", "x", "0", ".", "!"} {
		id, ok := tok.TokenID(s)
		if !ok || tok.IsSpecial(id) {
			continue
		}
		if tok.Decode([]int32{id}, false) == s && tok.Decode([]int32{id, id}, false) == s+s {
			return id, s
		}
	}
	return -1, ""
}

// spelledBytes returns the bytes a token stands for from its spelling in
// the vocabulary: <0xXX> for a byte-fallback token, or a byte-level token,
// each of whose characters stands for one byte.
func spelledBytes(s string) ([]byte, bool) {
	if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' && isHex(s[3]) && isHex(s[4]) {
		return []byte{hexVal(s[3])<<4 | hexVal(s[4])}, true
	}
	var b []byte
	for _, r := range s {
		c, ok := byteLevelByte(r)
		if !ok {
			return nil, false
		}
		b = append(b, c)
	}
	return b, len(b) > 0
}

func hexVal(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// byteLevelByte maps a character of the byte-level alphabet (GPT-2's) to
// its byte: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF spell
// themselves; the other 68 bytes are spelled, in increasing order, by the
// characters from U+0100 on.
func byteLevelByte(r rune) (byte, bool) {
	if printableByte(r) {
		return byte(r), true
	}
	if r < 0x100 || int(r-0x100) >= len(unprintable) {
		return 0, false
	}
	return unprintable[r-0x100], true
}

// unprintable lists the bytes the byte-level alphabet spells with
// U+0100 onwards, in order.
var unprintable = func() []byte {
	var b []byte
	for c := range 256 {
		if !printableByte(rune(c)) {
			b = append(b, byte(c))
		}
	}
	return b
}()

func printableByte(r rune) bool {
	return r >= '!' && r <= '~' || r >= 0xA1 && r <= 0xAC || r >= 0xAE && r <= 0xFF
}

// trie holds the tokens' bytes as a trie laid out in preorder: the subtree
// of node i is nodes[i:nodes[i].end], so a walk skips a dead subtree by
// jumping to its end.
type trie struct {
	nodes  []trieNode
	ids    []int32 // token ids, grouped by the node they end at
	maxLen int     // longest token, in bytes
}

type trieNode struct {
	end   uint32 // one past the last node of the subtree
	ids   uint32 // the tokens ending here are ids[ids:ids+nids]
	nids  uint16
	depth uint16 // length of the node's byte string; its parent is at depth-1
	b     byte   // the byte on the edge into the node
}

// maxTokenLen bounds the tokens the trie holds; longer ones are never
// allowed.
const maxTokenLen = 1<<16 - 1

// buildTrie builds the trie of the tokens with bytes.
func buildTrie(toks [][]byte) *trie {
	order := make([]int32, 0, len(toks))
	for id, b := range toks {
		if len(b) > 0 && len(b) <= maxTokenLen {
			order = append(order, int32(id))
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := bytes.Compare(toks[a], toks[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	t := &trie{ids: make([]int32, 0, len(order))}
	var open []int // node index at each depth-1 of the current path
	var prev []byte
	for _, id := range order {
		b := toks[id]
		t.maxLen = max(t.maxLen, len(b))
		lcp := 0
		for lcp < len(prev) && lcp < len(b) && prev[lcp] == b[lcp] {
			lcp++
		}
		// Close the nodes below the common prefix.
		for len(open) > lcp {
			t.nodes[open[len(open)-1]].end = uint32(len(t.nodes))
			open = open[:len(open)-1]
		}
		for d := lcp; d < len(b); d++ {
			open = append(open, len(t.nodes))
			t.nodes = append(t.nodes, trieNode{depth: uint16(d + 1), b: b[d], ids: uint32(len(t.ids))})
		}
		last := &t.nodes[open[len(open)-1]]
		if last.nids == 0 {
			last.ids = uint32(len(t.ids))
		}
		t.ids = append(t.ids, id)
		last.nids++
		prev = b
	}
	for _, i := range open {
		t.nodes[i].end = uint32(len(t.nodes))
	}
	return t
}
