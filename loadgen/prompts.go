package loadgen

import (
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// words are common short English words. In the vocabularies of current
// models (Llama 3, Qwen 2, Mistral, Gemma) each, with its leading space,
// is one token, so a prompt of N words is about N tokens; smaller
// vocabularies split them further. The report gives the server's own
// count (usage.prompt_tokens) where it reports one.
var words = strings.Fields(`the of and to in is was for on that with as by at from his
her are be this had not but were which have one you all they she there when more
can time said some two into out has him them what would see now way only its then
could than other new first day how also made like after back water over down year
work long where most little make great people just old right man good know state
world under last city many much before never well again name part same small place
end find while home found still life high each take three every came house through
may between west both order week going light line land early best river
song word story group tree night north south king open road book family point`)

// Prompts returns n prompts of about tokens tokens each (one word per
// token, see words). The first round(shared × tokens) words are the same
// in every prompt; the rest are drawn for each prompt.
func Prompts(rng *rand.Rand, n, tokens int, shared float64) []string {
	prefixWords := int(math.Round(shared * float64(tokens)))
	prefix := make([]string, prefixWords)
	for i := range prefix {
		prefix[i] = words[rng.IntN(len(words))]
	}
	out := make([]string, n)
	for i := range out {
		w := append(make([]string, 0, tokens), prefix...)
		for len(w) < tokens {
			w = append(w, words[rng.IntN(len(words))])
		}
		out[i] = strings.Join(w, " ")
	}
	return out
}

// Gaps returns the waits before each of n requests: none before the first,
// then 1/rate each (Fixed) or exponentially distributed with mean 1/rate
// (Poisson). A rate of 0 gives no waits.
func Gaps(rng *rand.Rand, n int, rate float64, arrival string) []time.Duration {
	gaps := make([]time.Duration, n)
	if rate <= 0 {
		return gaps
	}
	for i := 1; i < n; i++ {
		s := 1 / rate
		if arrival == Poisson {
			s = rng.ExpFloat64() / rate
		}
		gaps[i] = time.Duration(s * float64(time.Second))
	}
	return gaps
}
