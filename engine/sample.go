package engine

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
)

// SampleParams chooses how the next token is picked from the logits.
type SampleParams struct {
	// Temperature divides the logits; 0 picks the most likely token (greedy).
	Temperature float32
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probabilities
	// sum to at least TopP (0 or 1: all).
	TopP float32
	// MinP drops tokens less likely than MinP times the most likely one.
	MinP float32
	// RepetitionPenalty divides positive (multiplies negative) logits of
	// tokens seen in the last PenaltyWindow tokens (1 or 0: off).
	RepetitionPenalty float32
	// PresencePenalty is subtracted once from tokens seen; FrequencyPenalty
	// once per occurrence (OpenAI semantics).
	PresencePenalty, FrequencyPenalty float32
	// PenaltyWindow is how many recent tokens the penalties look at
	// (0: all of them).
	PenaltyWindow int
	// Seed makes sampling reproducible when HasSeed is set.
	Seed    uint64
	HasSeed bool
	// LogitBias is added to the logits of the given token ids.
	LogitBias map[int32]float32
}

// Greedy reports whether sampling is deterministic argmax.
func (p *SampleParams) Greedy() bool { return p.Temperature <= 0 || p.TopK == 1 }

// Sampler picks tokens according to SampleParams. It reuses its buffers, so
// a steady-state Sample call allocates nothing.
type Sampler struct {
	p      SampleParams
	rng    *rand.Rand
	cands  []candidate
	counts map[int32]int
	top    candHeap
}

type candidate struct {
	id    int32
	logit float32
}

// NewSampler returns a sampler for the parameters.
func NewSampler(p SampleParams) *Sampler {
	seed := p.Seed
	if !p.HasSeed {
		seed = rand.Uint64()
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), counts: map[int32]int{}}
}

// Sample returns the next token given the logits of the last position and
// the tokens so far (for penalties). It modifies logits.
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	p := &s.p
	for id, bias := range p.LogitBias {
		if int(id) < len(logits) && id >= 0 {
			logits[id] += bias
		}
	}
	s.penalise(logits, history)
	if p.Greedy() {
		return argmax(logits)
	}
	return s.finish(s.candidates(logits))
}

// finish samples from the candidates that survive top-k, sorted by
// descending logit; it overwrites their logits with probabilities.
func (s *Sampler) finish(c []candidate) int32 {
	p := &s.p
	// Softmax at temperature.
	inv := 1 / p.Temperature
	mx := c[0].logit
	var sum float64
	for i := range c {
		e := math.Exp(float64((c[i].logit - mx) * inv))
		c[i].logit = float32(e)
		sum += e
	}
	for i := range c {
		c[i].logit /= float32(sum)
	}
	// Top-p then min-p over probabilities sorted descending.
	keep := len(c)
	if p.TopP > 0 && p.TopP < 1 {
		var cum float32
		for i := range c {
			cum += c[i].logit
			if cum >= p.TopP {
				keep = i + 1
				break
			}
		}
	}
	if p.MinP > 0 {
		floor := p.MinP * c[0].logit
		for i := 1; i < keep; i++ {
			if c[i].logit < floor {
				keep = i
				break
			}
		}
	}
	c = c[:keep]
	var total float32
	for _, x := range c {
		total += x.logit
	}
	r := s.rng.Float32() * total
	for _, x := range c {
		r -= x.logit
		if r <= 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// candidates returns the tokens that survive top-k, sorted by descending
// logit.
func (s *Sampler) candidates(logits []float32) []candidate {
	k := s.p.TopK
	if k <= 0 || k >= len(logits) {
		s.cands = s.cands[:0]
		for i, l := range logits {
			s.cands = append(s.cands, candidate{int32(i), l})
		}
		slices.SortFunc(s.cands, func(a, b candidate) int {
			switch {
			case a.logit > b.logit:
				return -1
			case a.logit < b.logit:
				return 1
			}
			return int(a.id - b.id)
		})
		return s.cands
	}
	// A min-heap of the k best seen so far.
	h := s.top[:0]
	for i, l := range logits {
		if len(h) < k {
			h = append(h, candidate{int32(i), l})
			if len(h) == k {
				heap.Init(&h)
			}
		} else if l > h[0].logit {
			h[0] = candidate{int32(i), l}
			heap.Fix(&h, 0)
		}
	}
	s.top = h
	s.cands = append(s.cands[:0], h...)
	slices.SortFunc(s.cands, func(a, b candidate) int {
		switch {
		case a.logit > b.logit:
			return -1
		case a.logit < b.logit:
			return 1
		}
		return int(a.id - b.id)
	})
	return s.cands
}

type candHeap []candidate

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].logit < h[j].logit }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// penalise applies repetition, presence and frequency penalties.
func (s *Sampler) penalise(logits []float32, history []int32) {
	p := &s.p
	rep := p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1
	if !rep && p.PresencePenalty == 0 && p.FrequencyPenalty == 0 {
		return
	}
	if p.PenaltyWindow > 0 && len(history) > p.PenaltyWindow {
		history = history[len(history)-p.PenaltyWindow:]
	}
	clear(s.counts)
	for _, t := range history {
		s.counts[t]++
	}
	for t, n := range s.counts {
		if t < 0 || int(t) >= len(logits) {
			continue
		}
		l := logits[t]
		if rep {
			if l > 0 {
				l /= p.RepetitionPenalty
			} else {
				l *= p.RepetitionPenalty
			}
		}
		l -= p.PresencePenalty + float32(n)*p.FrequencyPenalty
		logits[t] = l
	}
}

// argmax returns the index of the largest value (the first on ties).
func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}
