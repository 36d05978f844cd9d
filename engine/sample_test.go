package engine

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
)

// The sampler is checked against exact distributions: each case states its
// logits, parameters and token history, and by hand which tokens may be
// drawn; wantDist computes the probability of every token from the
// definitions below, in float64, and the sampler's draws (seeded, so the
// test is deterministic) must fit it by a chi-square test at
// significance sampleAlpha.
//
// The definitions, in the order they apply:
//
//  1. logit_bias is added to the logits of its tokens;
//  2. of the tokens in the last PenaltyWindow of the history (all of it
//     when 0), each has its positive logit divided by RepetitionPenalty and
//     its negative logit multiplied by it, then PresencePenalty subtracted
//     once and FrequencyPenalty once per occurrence;
//  3. temperature 0 or top-k 1: the token of the largest logit, the lowest
//     id among equals, always;
//  4. top-k keeps the K largest logits (ties: the lower ids);
//  5. the kept logits are divided by the temperature and softmaxed;
//  6. top-p keeps the smallest prefix, by descending probability, whose
//     probabilities sum to at least TopP;
//  7. min-p drops the tokens whose probability is below MinP times the
//     largest;
//  8. a token is drawn in proportion to the probabilities left.
//
// This is the order of Hugging Face transformers (repetition penalty, then
// temperature, top-k, top-p, min-p) and vLLM, with OpenAI's presence and
// frequency penalties applied after the repetition penalty as llama.cpp
// does. llama.cpp's default chain applies the temperature last, after
// top-p and min-p; the cases "top-p at temperature 2" and "min-p at
// temperature 2" are where the two orders part.

const (
	sampleDraws = 20000
	// sampleAlpha is the significance of each case's chi-square test: a
	// correct sampler fails a case with this probability for a random seed
	// (the seeds here are fixed, so the test is deterministic).
	sampleAlpha = 1e-4
	// negligible is a probability taken for zero (a logit biased by -100).
	negligible = 1e-12
)

// sampleCase is one distribution test.
type sampleCase struct {
	name    string
	logits  []float32
	p       SampleParams
	history []int32
	// support lists, by hand, the tokens with a non-zero probability.
	support []int32
}

// logits6 has the softmax (at temperature 1) 0.408 0.247 0.166 0.091 0.061
// 0.027, cumulative 0.408 0.655 0.821 0.912 0.973 1, each probability over
// the largest 1 0.607 0.407 0.223 0.150 0.067. At temperature 2 the
// cumulative sums are 0.283 0.503 0.684 0.817 0.927 1 and the ratios 1 0.779
// 0.638 0.472 0.387 0.259; at 0.5, 0.621 0.850 0.952 … and 1 0.368 0.165
// 0.050 ….
var logits6 = []float32{1.5, 1.0, 0.6, 0.0, -0.4, -1.2}

var sampleCases = []sampleCase{
	{name: "temperature 1", logits: logits6, p: SampleParams{Temperature: 1}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "temperature 0.5", logits: logits6, p: SampleParams{Temperature: 0.5}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "temperature 2", logits: logits6, p: SampleParams{Temperature: 2}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "logits in another order", logits: []float32{-0.4, 1.0, -1.2, 1.5, 0.0, 0.6}, p: SampleParams{Temperature: 0.8}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "top-k 3", logits: logits6, p: SampleParams{Temperature: 1, TopK: 3}, support: []int32{0, 1, 2}},
	{name: "top-k 2 unsorted", logits: []float32{0.0, 1.0, -0.4, 1.5, 0.6}, p: SampleParams{Temperature: 1.3, TopK: 2}, support: []int32{1, 3}},
	{name: "top-k 2 of ties", logits: []float32{0.5, 1.0, 1.0, 1.0, 0.2}, p: SampleParams{Temperature: 1, TopK: 2}, support: []int32{1, 2}},
	{name: "top-k of all", logits: logits6, p: SampleParams{Temperature: 1, TopK: 6}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "top-p 0.7", logits: logits6, p: SampleParams{Temperature: 1, TopP: 0.7}, support: []int32{0, 1, 2}},
	{name: "top-p 0.7 at temperature 0.5", logits: logits6, p: SampleParams{Temperature: 0.5, TopP: 0.7}, support: []int32{0, 1}},
	{name: "top-p at temperature 2", logits: logits6, p: SampleParams{Temperature: 2, TopP: 0.7}, support: []int32{0, 1, 2, 3}},
	{name: "top-p 0.95", logits: logits6, p: SampleParams{Temperature: 1, TopP: 0.95}, support: []int32{0, 1, 2, 3, 4}},
	// Four probabilities of exactly 0.25: top-p 0.5 is reached, not
	// passed, by the first two, and the lower ids come first.
	{name: "top-p reached exactly", logits: []float32{1, 1, 1, 1}, p: SampleParams{Temperature: 1, TopP: 0.5}, support: []int32{0, 1}},
	{name: "top-p 1 keeps all", logits: logits6, p: SampleParams{Temperature: 1, TopP: 1}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "min-p 0.3", logits: logits6, p: SampleParams{Temperature: 1, MinP: 0.3}, support: []int32{0, 1, 2}},
	{name: "min-p 0.3 at temperature 0.5", logits: logits6, p: SampleParams{Temperature: 0.5, MinP: 0.3}, support: []int32{0, 1}},
	{name: "min-p at temperature 2", logits: logits6, p: SampleParams{Temperature: 2, MinP: 0.3}, support: []int32{0, 1, 2, 3, 4}},
	{name: "top-k then top-p then min-p", logits: logits6, p: SampleParams{Temperature: 1, TopK: 5, TopP: 0.95, MinP: 0.2}, support: []int32{0, 1, 2, 3}},
	{name: "min-p after top-p", logits: logits6, p: SampleParams{Temperature: 1, TopP: 0.7, MinP: 0.05}, support: []int32{0, 1, 2}},
	// 1.5 → 1.0 and -0.4 → -0.6: token 0 is now as likely as token 1.
	{name: "repetition penalty", logits: logits6, p: SampleParams{Temperature: 1, RepetitionPenalty: 1.5}, history: []int32{0, 4, 0}, support: []int32{0, 1, 2, 3, 4, 5}},
	// Below 1 the penalty favours what was seen.
	{name: "repetition penalty below 1", logits: logits6, p: SampleParams{Temperature: 1, RepetitionPenalty: 0.5}, history: []int32{2, 5}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "presence penalty", logits: logits6, p: SampleParams{Temperature: 1, PresencePenalty: 0.8}, history: []int32{0, 0, 0, 2}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "negative presence penalty", logits: logits6, p: SampleParams{Temperature: 1, PresencePenalty: -0.7}, history: []int32{3, 5}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "frequency penalty", logits: logits6, p: SampleParams{Temperature: 1, FrequencyPenalty: 0.5}, history: []int32{0, 0, 0, 2}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "presence and frequency", logits: logits6, p: SampleParams{Temperature: 1, PresencePenalty: 0.3, FrequencyPenalty: 0.4}, history: []int32{1, 0, 1, 3, 1}, support: []int32{0, 1, 2, 3, 4, 5}},
	// Only the last two tokens (3 and 1) count.
	{name: "penalty window", logits: logits6, p: SampleParams{Temperature: 1, RepetitionPenalty: 2, FrequencyPenalty: 0.5, PenaltyWindow: 2}, history: []int32{0, 0, 0, 3, 1}, support: []int32{0, 1, 2, 3, 4, 5}},
	// Ids outside the vocabulary are ignored.
	{name: "penalised ids out of range", logits: logits6, p: SampleParams{Temperature: 1, PresencePenalty: 1}, history: []int32{-1, 6, 99, 1}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "logit bias", logits: logits6, p: SampleParams{Temperature: 1, LogitBias: map[int32]float32{5: 2.5, 1: -1, 42: 9, -3: 9}}, support: []int32{0, 1, 2, 3, 4, 5}},
	{name: "logit bias bans", logits: logits6, p: SampleParams{Temperature: 1, LogitBias: map[int32]float32{0: -100, 2: -100}}, support: []int32{1, 3, 4, 5}},
	// Bias and penalties come before top-k: token 5 enters the top 3.
	{name: "bias before top-k", logits: logits6, p: SampleParams{Temperature: 1, TopK: 3, LogitBias: map[int32]float32{5: 3}}, support: []int32{0, 1, 5}},
	{name: "penalties before top-k", logits: logits6, p: SampleParams{Temperature: 1, TopK: 3, PresencePenalty: 2}, history: []int32{0}, support: []int32{1, 2, 3}},
	{name: "everything", logits: logits6, p: SampleParams{
		Temperature: 0.7, TopK: 5, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1.2,
		PresencePenalty: 0.2, FrequencyPenalty: 0.1, PenaltyWindow: 4,
		LogitBias: map[int32]float32{4: 1.5},
	}, history: []int32{2, 0, 1, 0, 0}, support: []int32{0, 1, 2, 4}},
}

// wantDist returns the probability of drawing each token, from the
// definitions at the top of this file.
func wantDist(logits []float32, p SampleParams, history []int32) []float64 {
	n := len(logits)
	z := make([]float64, n)
	for i, l := range logits {
		z[i] = float64(l)
	}
	for id, b := range p.LogitBias {
		if id >= 0 && int(id) < n {
			z[id] += float64(b)
		}
	}
	if p.PenaltyWindow > 0 && len(history) > p.PenaltyWindow {
		history = history[len(history)-p.PenaltyWindow:]
	}
	seen := make([]int, n)
	for _, t := range history {
		if t >= 0 && int(t) < n {
			seen[t]++
		}
	}
	for t, c := range seen {
		if c == 0 {
			continue
		}
		if r := float64(p.RepetitionPenalty); r != 0 && r != 1 {
			if z[t] > 0 {
				z[t] /= r
			} else {
				z[t] *= r
			}
		}
		z[t] -= float64(p.PresencePenalty) + float64(c)*float64(p.FrequencyPenalty)
	}
	// Token ids by descending logit, the lower id first among equals.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return z[order[a]] > z[order[b]] })
	dist := make([]float64, n)
	if p.Temperature <= 0 || p.TopK == 1 {
		dist[order[0]] = 1
		return dist
	}
	if p.TopK > 0 && p.TopK < n {
		order = order[:p.TopK]
	}
	prob := make([]float64, len(order))
	var sum float64
	for i, t := range order {
		prob[i] = math.Exp((z[t] - z[order[0]]) / float64(p.Temperature))
		sum += prob[i]
	}
	for i := range prob {
		prob[i] /= sum
	}
	keep := len(order)
	if p.TopP > 0 && p.TopP < 1 {
		var cum float64
		for i := range prob {
			cum += prob[i]
			if cum >= float64(p.TopP) {
				keep = i + 1
				break
			}
		}
	}
	if p.MinP > 0 {
		for i := 1; i < keep; i++ {
			if prob[i] < float64(p.MinP)*prob[0] {
				keep = i
				break
			}
		}
	}
	sum = 0
	for _, q := range prob[:keep] {
		sum += q
	}
	for i, t := range order[:keep] {
		dist[t] = prob[i] / sum
	}
	return dist
}

// chiSquareSF returns P(X ≥ x) for X chi-square distributed with df ≥ 1
// degrees of freedom, from the closed forms
// Q(x; 1) = erfc(√(x/2)), Q(x; 2) = e^(−x/2) and
// Q(x; k+2) = Q(x; k) + (x/2)^(k/2) e^(−x/2) / Γ(k/2 + 1).
func chiSquareSF(x float64, df int) float64 {
	if x <= 0 {
		return 1
	}
	k, q := 2, math.Exp(-x/2)
	if df%2 == 1 {
		k, q = 1, math.Erfc(math.Sqrt(x/2))
	}
	for ; k < df; k += 2 {
		h := float64(k) / 2
		q += math.Exp(h*math.Log(x/2) - x/2 - lgamma(h+1))
	}
	return q
}

func lgamma(x float64) float64 {
	v, _ := math.Lgamma(x)
	return v
}

// TestChiSquareSF checks chiSquareSF against printed tables of critical
// values.
func TestChiSquareSF(t *testing.T) {
	for _, tc := range []struct {
		x     float64
		df    int
		alpha float64
	}{
		{3.841, 1, 0.05}, {5.991, 2, 0.05}, {7.815, 3, 0.05}, {11.070, 5, 0.05}, {18.307, 10, 0.05},
		{6.635, 1, 0.01}, {13.277, 4, 0.01}, {16.812, 6, 0.01},
		{10.828, 1, 0.001}, {20.515, 5, 0.001}, {29.588, 10, 0.001},
		{15.137, 1, 1e-4}, {18.421, 2, 1e-4}, {21.108, 3, 1e-4}, {23.513, 4, 1e-4}, {25.745, 5, 1e-4},
	} {
		if got := chiSquareSF(tc.x, tc.df); math.Abs(got-tc.alpha) > 0.002*tc.alpha {
			t.Errorf("chiSquareSF(%v, %d) = %.6g, want %g", tc.x, tc.df, got, tc.alpha)
		}
	}
}

// checkDraws tests counts, drawn from n samples, against want: no draw of
// a token of negligible probability, and a chi-square test at sampleAlpha over
// the tokens, those expected fewer than 5 times pooled.
func checkDraws(t *testing.T, counts []int, want []float64, n int) {
	t.Helper()
	for id, c := range counts {
		if c > 0 && want[id] < negligible {
			t.Errorf("token %d drawn %d times; its probability is 0", id, c)
		}
	}
	var stat float64
	bins := 0
	var restObs, restExp float64
	for id, q := range want {
		if q < negligible {
			continue
		}
		obs, exp := float64(counts[id]), q*float64(n)
		if exp < 5 {
			restObs += obs
			restExp += exp
			continue
		}
		stat += (obs - exp) * (obs - exp) / exp
		bins++
	}
	if restExp > 0 {
		stat += (restObs - restExp) * (restObs - restExp) / restExp
		bins++
	}
	if bins < 2 {
		return
	}
	if pv := chiSquareSF(stat, bins-1); pv < sampleAlpha {
		var b strings.Builder
		for id, q := range want {
			fmt.Fprintf(&b, "\n  token %d: drawn %5d, expected %8.1f", id, counts[id], q*float64(n))
		}
		t.Errorf("chi-square %.1f with %d degrees of freedom: p = %.3g < %g%s", stat, bins-1, pv, sampleAlpha, b.String())
	}
}

// checkSupport checks that want gives a probability to exactly the tokens
// the case names.
func checkSupport(t *testing.T, want []float64, support []int32) {
	t.Helper()
	var got []int32
	for id, q := range want {
		if q >= negligible {
			got = append(got, int32(id))
		}
	}
	if !slices.Equal(got, support) {
		t.Fatalf("reference distribution %v gives a probability to %v, the case says %v", want, got, support)
	}
}

// TestSampleDistribution draws from Sampler.Sample and compares the draws
// with the exact distributions.
func TestSampleDistribution(t *testing.T) {
	for i, tc := range sampleCases {
		t.Run(tc.name, func(t *testing.T) {
			want := wantDist(tc.logits, tc.p, tc.history)
			checkSupport(t, want, tc.support)
			p := tc.p
			p.Seed, p.HasSeed = uint64(1000+i), true
			s := NewSampler(p)
			buf := make([]float32, len(tc.logits))
			history := slices.Clone(tc.history)
			counts := make([]int, len(tc.logits))
			for range sampleDraws {
				copy(buf, tc.logits)
				id := s.Sample(buf, history)
				if id < 0 || int(id) >= len(counts) {
					t.Fatalf("Sample = %d, outside the vocabulary of %d", id, len(counts))
				}
				counts[id]++
			}
			if !slices.Equal(history, tc.history) {
				t.Errorf("Sample changed the history: %v, was %v", history, tc.history)
			}
			checkDraws(t, counts, want, sampleDraws)
		})
	}
}

// backendCandidates returns what the CPU backend's TopK picks from logits,
// as appendTop builds it.
func backendCandidates(b *cpu.Backend, logits []float32, k int) []candidate {
	x := b.Alloc(compute.F32, 1, len(logits))
	b.Upload(x, logits)
	dst := b.Alloc(compute.F32, 1, 2*k)
	b.TopK(dst, x, k)
	host := make([]float32, 2*k)
	b.Read(host, dst)
	c := make([]candidate, k)
	for i := range k {
		c[i] = candidate{id: int32(host[k+i]), logit: host[i]}
	}
	return c
}

// TestSampleTopDistribution checks the path where the backend picks the
// top-k candidates (pickK, TopK, sampleTop): for every case that path
// takes, the draws must fit the same exact distribution.
func TestSampleTopDistribution(t *testing.T) {
	b := cpu.New(1)
	// A vocabulary of 600 with the logits of logits6 scattered in it and
	// the rest far below, so that TopK works through several blocks.
	wide := make([]float32, 600)
	for i := range wide {
		wide[i] = -20 - float32(i%7)
	}
	for i, l := range logits6 {
		wide[97*i+13] = l
	}
	cases := slices.Clone(sampleCases)
	cases = append(cases,
		sampleCase{name: "wide top-k 4", logits: wide, p: SampleParams{Temperature: 0.9, TopK: 4}, support: []int32{13, 110, 207, 304}},
		sampleCase{name: "wide top-k 6 top-p min-p", logits: wide, p: SampleParams{Temperature: 1.2, TopK: 6, TopP: 0.9, MinP: 0.15}, support: []int32{13, 110, 207, 304, 401}},
	)
	ran := 0
	for i, tc := range cases {
		req := Request{Sample: tc.p}
		k := pickK(b, &req, len(tc.logits))
		if k == 0 {
			continue
		}
		ran++
		t.Run(tc.name, func(t *testing.T) {
			if want := min(tc.p.TopK, len(tc.logits)); tc.p.Greedy() && k != 1 || !tc.p.Greedy() && k != want {
				t.Fatalf("pickK = %d for top-k %d", k, tc.p.TopK)
			}
			want := wantDist(tc.logits, tc.p, tc.history)
			checkSupport(t, want, tc.support)
			picked := backendCandidates(b, tc.logits, k)
			p := tc.p
			p.Seed, p.HasSeed = uint64(2000+i), true
			s := NewSampler(p)
			c := make([]candidate, k)
			counts := make([]int, len(tc.logits))
			for range sampleDraws {
				copy(c, picked)
				counts[s.sampleTop(c)]++
			}
			checkDraws(t, counts, want, sampleDraws)
		})
	}
	if ran < 5 {
		t.Errorf("only %d cases take the backend's top-k path", ran)
	}
}

// TestSampleGreedy checks that temperature 0 and top-k 1 always return the
// largest logit after biases and penalties, the lowest id among equals,
// on both paths.
func TestSampleGreedy(t *testing.T) {
	b := cpu.New(1)
	for _, tc := range []struct {
		name    string
		logits  []float32
		p       SampleParams
		history []int32
		want    int32
	}{
		{"temperature 0", logits6, SampleParams{}, nil, 0},
		{"negative temperature", []float32{0.1, 0.3, 0.2}, SampleParams{Temperature: -1}, nil, 1},
		{"top-k 1", []float32{-3, -1, -2, -1.5}, SampleParams{Temperature: 1.5, TopK: 1}, nil, 1},
		{"top-k 1 ignores top-p and min-p", logits6, SampleParams{Temperature: 5, TopK: 1, TopP: 0.1, MinP: 0.9}, nil, 0},
		{"ties: the lowest id", []float32{0.5, 2, 1, 2, 2}, SampleParams{}, nil, 1},
		{"ties with top-k 1", []float32{0.5, 2, 1, 2, 2}, SampleParams{Temperature: 1, TopK: 1}, nil, 1},
		{"logit bias moves the argmax", logits6, SampleParams{LogitBias: map[int32]float32{3: 1.6}}, nil, 3},
		{"repetition penalty moves the argmax", logits6, SampleParams{RepetitionPenalty: 2}, []int32{0}, 1},
		{"presence penalty moves the argmax", logits6, SampleParams{PresencePenalty: 1}, []int32{0, 1}, 2},
		{"frequency penalty moves the argmax", logits6, SampleParams{FrequencyPenalty: 0.3}, []int32{0, 0}, 1},
		{"negative frequency penalty", logits6, SampleParams{FrequencyPenalty: -0.4}, []int32{3, 3, 3, 3}, 3},
		{"penalty window forgets", logits6, SampleParams{PresencePenalty: 5, PenaltyWindow: 1}, []int32{0, 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := wantDist(tc.logits, tc.p, tc.history); d[tc.want] != 1 {
				t.Fatalf("reference distribution %v, want all on %d", d, tc.want)
			}
			for seed := range uint64(50) {
				p := tc.p
				p.Seed, p.HasSeed = seed, true
				buf := slices.Clone(tc.logits)
				if got := NewSampler(p).Sample(buf, tc.history); got != tc.want {
					t.Fatalf("seed %d: Sample = %d, want %d", seed, got, tc.want)
				}
			}
			req := Request{Sample: tc.p}
			if k := pickK(b, &req, len(tc.logits)); k > 0 {
				if k != 1 {
					t.Fatalf("pickK = %d for a greedy request", k)
				}
				if got := NewSampler(tc.p).sampleTop(backendCandidates(b, tc.logits, k)); got != tc.want {
					t.Errorf("sampleTop = %d, want %d", got, tc.want)
				}
			}
		})
	}
}

// TestSampleSeed checks that a seed makes the draws reproducible and that
// different seeds draw differently.
func TestSampleSeed(t *testing.T) {
	draw := func(seed uint64) []int32 {
		s := NewSampler(SampleParams{Temperature: 1, Seed: seed, HasSeed: true})
		var ids []int32
		for range 64 {
			ids = append(ids, s.Sample(slices.Clone(logits6), nil))
		}
		return ids
	}
	if a, b := draw(7), draw(7); !slices.Equal(a, b) {
		t.Errorf("seed 7 drew %v, then %v", a, b)
	}
	if a, b := draw(7), draw(8); slices.Equal(a, b) {
		t.Errorf("seeds 7 and 8 drew the same %v", a)
	}
}
