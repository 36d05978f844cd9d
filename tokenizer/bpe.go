package tokenizer

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"unicode/utf8"
)

const (
	noRank = math.MaxInt32
	// smallWord is the symbol count up to which merging scans the pairs
	// directly instead of keeping a heap.
	smallWord = 48
)

type mergeVal struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeModel is byte-pair encoding over vocabulary ids.
type bpeModel struct {
	vocab map[string]int32
	// merges maps a pair of ids to its rank and merged id (rank mode).
	merges map[uint64]mergeVal
	// scores and mergeable drive score mode (no merges).
	scores    []float32
	mergeable []bool
	useScores bool

	// byteLevel: pieces arrive as raw bytes and each byte stands for the
	// id of its byte-level character.
	byteLevel bool
	byteIDs   [256]int32
	// fallback holds the ids of the <0xXX> tokens.
	fallback     [256]int32
	hasFallback  bool
	unk          int32
	fuseUnk      bool
	ignoreMerges bool
	prefix       string // continuing-subword prefix
	suffix       string // end-of-word suffix

	// safeSplit allows cutting a piece before a run of "▁" whose preceding
	// character is a vocabulary entry not in spanBefore: no vocabulary
	// entry crosses such a boundary, so merges cannot either, and the cut
	// changes nothing but makes the pieces cacheable.
	safeSplit  bool
	spanBefore map[rune]bool
	cutASCII   [128]bool // ASCII characters before which a piece may be cut

	// asciiIDs holds the ids of the one-character ASCII tokens, -1 if
	// absent (character mode).
	asciiIDs [128]int32

	cache *wordCache
}

const metaspace = '▁'

func newBPE(spec *Spec, vocab map[string]int32, byteLevel bool) (*bpeModel, error) {
	m := &bpeModel{
		vocab:        vocab,
		byteLevel:    byteLevel,
		unk:          spec.Unk,
		fuseUnk:      spec.FuseUnk,
		ignoreMerges: spec.IgnoreMerges,
		prefix:       spec.ContinuingSubwordPrefix,
		suffix:       spec.EndOfWordSuffix,
		cache:        newWordCache(1 << 17),
	}
	for c := range m.asciiIDs {
		m.asciiIDs[c] = -1
		if id, ok := vocab[string(rune(c))]; ok {
			m.asciiIDs[c] = id
		}
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := vocab[byteToStr[b]]; ok {
			m.byteIDs[b] = id
		}
		m.fallback[b] = -1
	}
	if spec.ByteFallback {
		m.hasFallback = true
		for b := 0; b < 256; b++ {
			if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
				m.fallback[b] = id
			}
		}
	}
	switch {
	case len(spec.Merges) > 0:
		res, err := resolveMerges(spec.Merges, vocab, m.prefix)
		if err != nil {
			return nil, err
		}
		m.merges = make(map[uint64]mergeVal, len(res))
		for _, r := range res {
			// A repeated pair keeps its last rank, as the reference does.
			m.merges[r.key] = r.val
		}
	case len(spec.Scores) > 0:
		m.useScores = true
		m.scores = spec.Scores
		m.mergeable = make([]bool, len(spec.Vocab))
		for id := range spec.Vocab {
			t := TokenNormal
			if id < len(spec.Types) {
				t = spec.Types[id]
			}
			m.mergeable[id] = id < len(spec.Scores) && (t == TokenNormal || t == TokenUserDefined || t == TokenUndefined)
		}
	}
	if !byteLevel && !m.ignoreMerges && m.prefix == "" && m.suffix == "" {
		if _, ok := vocab[string(metaspace)]; ok {
			m.safeSplit = true
			m.spanBefore = map[rune]bool{}
			for tok := range vocab {
				prev := rune(-1)
				for _, r := range tok {
					if r == metaspace && prev >= 0 && prev != metaspace {
						m.spanBefore[prev] = true
					}
					prev = r
				}
			}
			for c := range m.cutASCII {
				m.cutASCII[c] = m.asciiIDs[c] >= 0 && !m.spanBefore[rune(c)]
			}
		}
	}
	return m, nil
}

type resolvedMerge struct {
	key uint64
	val mergeVal
}

// resolveMerges looks up the ids of every merge, spread over the CPUs: the
// lookups dominate loading a large vocabulary.
func resolveMerges(merges [][2]string, vocab map[string]int32, prefix string) ([]resolvedMerge, error) {
	out := make([]resolvedMerge, len(merges))
	workers := min(runtime.GOMAXPROCS(0), 8, len(merges)/8192+1)
	errs := make([]error, workers)
	chunk := (len(merges) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, len(merges))
		wg.Go(func() {
			var buf []byte
			for rank := lo; rank < hi; rank++ {
				mg := merges[rank]
				a, ok := vocab[mg[0]]
				if !ok {
					errs[w] = fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, mg[0], mg[1], mg[0])
					return
				}
				b, ok := vocab[mg[1]]
				if !ok {
					errs[w] = fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, mg[0], mg[1], mg[1])
					return
				}
				right := mg[1]
				if prefix != "" {
					right = strings.TrimPrefix(right, prefix)
				}
				buf = append(append(buf[:0], mg[0]...), right...)
				id, ok := vocab[string(buf)]
				if !ok {
					errs[w] = fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, mg[0], mg[1], buf)
					return
				}
				out[rank] = resolvedMerge{pairKey(a, b), mergeVal{int32(rank), id}}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (m *bpeModel) pair(a, b int32) (int32, int32) {
	if v, ok := m.merges[pairKey(a, b)]; ok {
		return v.rank, v.id
	}
	return noRank, -1
}

// encode appends the ids of one pre-token.
func (m *bpeModel) encode(dst []int32, word string, sc *scratch) []int32 {
	if !m.safeSplit {
		return m.encodeWord(dst, word, sc)
	}
	// "▁" is E2 96 81: find each one and look at the character before it.
	start := 0
	for i := 1; i+2 < len(word); i++ {
		if word[i] != 0xE2 || word[i+1] != 0x96 || word[i+2] != 0x81 {
			continue
		}
		if c := word[i-1]; c < 0x80 {
			if !m.cutASCII[c] {
				continue
			}
		} else {
			r, w := utf8.DecodeLastRuneInString(word[:i])
			if r == metaspace || m.spanBefore[r] {
				continue
			}
			if _, ok := m.vocab[word[i-w:i]]; !ok {
				continue
			}
		}
		if i > start {
			dst = m.encodeWord(dst, word[start:i], sc)
			start = i
			if sc.full(dst) {
				return dst
			}
		}
	}
	return m.encodeWord(dst, word[start:], sc)
}

const maxCachedWord = 64

func (m *bpeModel) encodeWord(dst []int32, word string, sc *scratch) []int32 {
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	dst = m.tokenize(dst, word, sc)
	if cacheable {
		m.cache.put(word, dst[n:])
	}
	return dst
}

func (m *bpeModel) tokenize(dst []int32, word string, sc *scratch) []int32 {
	if m.useScores {
		if m.byteLevel {
			word = byteLevelEncode(word)
		}
		return m.mergeScores(dst, word, sc)
	}
	if m.ignoreMerges {
		if m.byteLevel {
			buf := sc.buf[:0]
			for i := 0; i < len(word); i++ {
				buf = append(buf, byteToStr[word[i]]...)
			}
			sc.buf = buf
			if id, ok := m.vocab[string(buf)]; ok {
				return append(dst, id)
			}
		} else if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	ids := m.initial(sc.ids[:0], word)
	if len(ids) > smallWord {
		ids = m.mergeHeap(ids, sc)
	} else {
		ids = m.mergeSmall(ids, sc)
	}
	sc.ids = ids
	return append(dst, ids...)
}

// initial returns the starting symbols of word: one per byte (byte level) or
// per character, with byte fallback and unknown handling.
func (m *bpeModel) initial(ids []int32, word string) []int32 {
	lastUnk := false
	addUnknown := func(s string) {
		if m.hasFallback {
			ok := true
			for i := 0; i < len(s); i++ {
				if m.fallback[s[i]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				for i := 0; i < len(s); i++ {
					ids = append(ids, m.fallback[s[i]])
				}
				lastUnk = false
				return
			}
		}
		if m.unk < 0 {
			return // no unknown token: the character is dropped
		}
		if m.fuseUnk && lastUnk {
			return
		}
		ids = append(ids, m.unk)
		lastUnk = true
	}
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			if id := m.byteIDs[word[i]]; id >= 0 {
				ids = append(ids, id)
				lastUnk = false
			} else {
				addUnknown(byteToStr[word[i]])
			}
		}
		return ids
	}
	for i := 0; i < len(word); {
		if c := word[i]; c < 0x80 && m.prefix == "" && m.suffix == "" {
			if id := m.asciiIDs[c]; id >= 0 {
				ids = append(ids, id)
				lastUnk = false
				i++
				continue
			}
		}
		_, w := runeAt(word, i)
		s := word[i : i+w]
		if m.prefix != "" && i > 0 || m.suffix != "" && i+w == len(word) {
			key := s
			if i > 0 {
				key = m.prefix + key
			}
			if i+w == len(word) {
				key += m.suffix
			}
			if id, ok := m.vocab[key]; ok {
				ids = append(ids, id)
				lastUnk = false
				i += w
				continue
			}
		} else if id, ok := m.vocab[s]; ok {
			ids = append(ids, id)
			lastUnk = false
			i += w
			continue
		}
		addUnknown(s)
		i += w
	}
	return ids
}

// mergeSmall merges by rank with a direct scan of the pairs: the pair of
// lowest rank, leftmost on a tie, until none is left.
func (m *bpeModel) mergeSmall(ids []int32, sc *scratch) []int32 {
	if len(ids) < 2 {
		return ids
	}
	ranks, next := sc.ranks[:0], sc.next[:0]
	for i := 0; i+1 < len(ids); i++ {
		r, id := m.pair(ids[i], ids[i+1])
		ranks = append(ranks, r)
		next = append(next, id)
	}
	for {
		best, bestRank := -1, int32(noRank)
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		ids[best] = next[best]
		ids = append(ids[:best+1], ids[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		next = append(next[:best], next[best+1:]...)
		if best > 0 {
			ranks[best-1], next[best-1] = m.pair(ids[best-1], ids[best])
		}
		if best < len(ids)-1 {
			ranks[best], next[best] = m.pair(ids[best], ids[best+1])
		}
	}
	sc.ranks, sc.next = ranks, next
	return ids
}

// heapEntry is a candidate merge of the symbol at pos with its right
// neighbour: by rank (rank mode) or by score (score mode), then leftmost.
type heapEntry struct {
	pri         float32 // rank, or minus the score
	pos         int32
	left, right int32 // rank mode: the ids; score mode: right symbol, end offset
}

func (a heapEntry) less(b heapEntry) bool {
	if a.pri != b.pri {
		return a.pri < b.pri
	}
	return a.pos < b.pos
}

type entryHeap []heapEntry

func (h *entryHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *entryHeap) pop() heapEntry {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && s[r].less(s[l]) {
			c = r
		}
		if !s[c].less(s[i]) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*h = s
	return top
}

// mergeHeap merges by rank like mergeSmall, in O(n log n) for long words.
// Ranks fit a float32 exactly (below 2^24 merges).
func (m *bpeModel) mergeHeap(ids []int32, sc *scratch) []int32 {
	n := len(ids)
	prev := grow(sc.prev, n)
	next := grow(sc.next, n)
	h := entryHeap(sc.heap[:0])
	for i := 0; i < n; i++ {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	for i := 0; i+1 < n; i++ {
		if r, _ := m.pair(ids[i], ids[i+1]); r != noRank {
			h.push(heapEntry{float32(r), int32(i), ids[i], ids[i+1]})
		}
	}
	for len(h) > 0 {
		e := h.pop()
		p := e.pos
		q := next[p]
		if q < 0 || ids[p] != e.left || ids[q] != e.right || ids[p] < 0 {
			continue
		}
		_, nid := m.pair(e.left, e.right)
		ids[p] = nid
		ids[q] = -1 // dead
		nq := next[q]
		next[p] = nq
		if nq >= 0 {
			prev[nq] = p
		}
		if pp := prev[p]; pp >= 0 {
			if r, _ := m.pair(ids[pp], nid); r != noRank {
				h.push(heapEntry{float32(r), pp, ids[pp], nid})
			}
		}
		if nq >= 0 {
			if r, _ := m.pair(nid, ids[nq]); r != noRank {
				h.push(heapEntry{float32(r), p, nid, ids[nq]})
			}
		}
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	sc.prev, sc.next, sc.heap = prev, next, h
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/4)
	}
	return s[:n]
}

// mergeScores is SentencePiece BPE: repeatedly merge the adjacent pair
// whose concatenation is a mergeable vocabulary entry with the highest
// score (leftmost on a tie), then spell the symbols as ids.
func (m *bpeModel) mergeScores(dst []int32, word string, sc *scratch) []int32 {
	// Symbols are characters at byte offsets starts[i]..ends[i].
	var starts, ends []int32
	for i := 0; i < len(word); {
		_, w := runeAt(word, i)
		starts = append(starts, int32(i))
		ends = append(ends, int32(i+w))
		i += w
	}
	n := len(starts)
	if n == 0 {
		return dst
	}
	prev := grow(sc.prev, n)
	next := grow(sc.next, n)
	for i := 0; i < n; i++ {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
	}
	next[n-1] = -1
	h := entryHeap(sc.heap[:0])
	try := func(p, q int32) {
		id, ok := m.vocab[word[starts[p]:ends[q]]]
		if ok && int(id) < len(m.mergeable) && m.mergeable[id] {
			h.push(heapEntry{-m.scores[id], p, q, ends[q]})
		}
	}
	for i := 0; i+1 < n; i++ {
		try(int32(i), int32(i+1))
	}
	for len(h) > 0 {
		e := h.pop()
		p, q := e.pos, e.left
		if ends[p] < 0 || next[p] != q || ends[q] != e.right {
			continue
		}
		ends[p] = ends[q]
		ends[q] = -1
		nq := next[q]
		next[p] = nq
		if nq >= 0 {
			prev[nq] = p
		}
		if pp := prev[p]; pp >= 0 {
			try(pp, p)
		}
		if nq >= 0 {
			try(p, nq)
		}
	}
	sc.prev, sc.next, sc.heap = prev, next, h
	lastUnk := false
	for i := int32(0); i >= 0; i = next[i] {
		s := word[starts[i]:ends[i]]
		if id, ok := m.vocab[s]; ok {
			dst = append(dst, id)
			lastUnk = false
			continue
		}
		if m.hasFallback {
			ok := true
			for k := 0; k < len(s); k++ {
				ok = ok && m.fallback[s[k]] >= 0
			}
			if ok {
				for k := 0; k < len(s); k++ {
					dst = append(dst, m.fallback[s[k]])
				}
				lastUnk = false
				continue
			}
		}
		if m.unk >= 0 && !(m.fuseUnk && lastUnk) {
			dst = append(dst, m.unk)
			lastUnk = true
		}
	}
	return dst
}
