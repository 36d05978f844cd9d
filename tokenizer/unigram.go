package tokenizer

import (
	"fmt"
	"math"
)

// unigramModel is SentencePiece's unigram model: the segmentation with the
// highest total score, found by dynamic programming over the characters.
type unigramModel struct {
	vocab    map[string]int32
	scores   []float32
	unk      int32
	unkScore float64
	maxLen   int // longest piece in bytes

	byteLevel   bool
	hasFallback bool
	fallback    [256]int32
	fuseUnk     bool
	cache       *wordCache
}

type latticeNode struct {
	score float64
	start int32 // -1: not reached
	id    int32
}

func newUnigram(spec *Spec, vocab map[string]int32, byteLevel bool) (*unigramModel, error) {
	if len(spec.Scores) < len(spec.Vocab) {
		return nil, fmt.Errorf("%d scores for %d pieces", len(spec.Scores), len(spec.Vocab))
	}
	m := &unigramModel{
		vocab:     vocab,
		scores:    spec.Scores,
		unk:       spec.Unk,
		byteLevel: byteLevel,
		fuseUnk:   spec.FuseUnk,
		cache:     newWordCache(1 << 17),
	}
	minScore := math.Inf(1)
	for id, s := range spec.Vocab {
		if len(s) > m.maxLen {
			m.maxLen = len(s)
		}
		if f := float64(spec.Scores[id]); f < minScore {
			minScore = f
		}
	}
	if math.IsInf(minScore, 1) {
		minScore = 0
	}
	m.unkScore = minScore - 10
	for b := range m.fallback {
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
	return m, nil
}

func (m *unigramModel) encode(dst []int32, word string, sc *scratch) []int32 {
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	key := word
	if m.byteLevel {
		word = byteLevelEncode(word)
	}
	dst = m.viterbi(dst, word, sc)
	if cacheable {
		m.cache.put(key, dst[n:])
	}
	return dst
}

func (m *unigramModel) viterbi(dst []int32, s string, sc *scratch) []int32 {
	if s == "" {
		return dst
	}
	lat := sc.lattice[:0]
	for i := 0; i <= len(s); i++ {
		lat = append(lat, latticeNode{start: -1})
	}
	lat[0].start = 0
	for i := 0; i < len(s); {
		_, w := runeAt(s, i)
		if lat[i].start < 0 && i > 0 {
			i += w
			continue
		}
		base := lat[i].score
		single := false
		for j := i + 1; j <= len(s) && j-i <= m.maxLen; j++ {
			id, ok := m.vocab[s[i:j]]
			if !ok {
				continue
			}
			if j-i == w {
				single = true
			}
			c := base + float64(m.scores[id])
			if lat[j].start < 0 || c > lat[j].score {
				lat[j] = latticeNode{c, int32(i), id}
			}
		}
		if !single {
			j := i + w
			c := base + m.unkScore
			if lat[j].start < 0 || c > lat[j].score {
				lat[j] = latticeNode{c, int32(i), m.unk}
			}
		}
		i += w
	}
	sc.lattice = lat
	// Walk back, fusing runs of unknown pieces.
	type part struct {
		start, end int
		id         int32
	}
	var parts []part
	for end := len(s); end > 0; {
		nd := lat[end]
		start := int(nd.start)
		if nd.id == m.unk && m.fuseUnk && m.unk >= 0 && len(parts) > 0 && parts[len(parts)-1].id == m.unk && parts[len(parts)-1].start == end {
			parts[len(parts)-1].start = start
		} else {
			parts = append(parts, part{start, end, nd.id})
		}
		end = start
	}
	for k := len(parts) - 1; k >= 0; k-- {
		p := parts[k]
		if p.id != m.unk || m.unk < 0 {
			if p.id >= 0 {
				dst = append(dst, p.id)
			}
			continue
		}
		text := s[p.start:p.end]
		if id, ok := m.vocab[text]; ok {
			dst = append(dst, id)
			continue
		}
		if m.hasFallback {
			ok := true
			for i := 0; i < len(text); i++ {
				ok = ok && m.fallback[text[i]] >= 0
			}
			if ok {
				for i := 0; i < len(text); i++ {
					dst = append(dst, m.fallback[text[i]])
				}
				continue
			}
		}
		dst = append(dst, m.unk)
	}
	return dst
}
