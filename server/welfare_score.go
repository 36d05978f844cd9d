package server

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The welfare guard's scorer: a small, deterministic measure of how hostile
// a user's message is, and of how hostile the conversation's recent user
// turns have been. It matches whole words after folding, never substrings,
// so that "Scunthorpe" or "assessment" do not count.

// Defaults of WelfareConfig.
const (
	DefaultWelfareThreshold = 2.0 // turn score that triggers
	DefaultWelfareSustained = 2.5 // decayed sum over the recent turns that triggers
	DefaultWelfareTurns     = 6   // user turns in the decayed sum, the current one included
	DefaultWelfareDecay     = 0.7 // weight of each earlier turn relative to the next
)

// Weights of a turn's score (see WelfareScore.Turn).
const (
	weightInsult   = 1.0 // each insult or profanity
	weightDirected = 1.0 // each insult aimed at "you"
	weightThreat   = 2.0 // each threat aimed at "you"
	weightCaps     = 0.5 // each run of 3 or more shouted words (at most 2 count)
	weightExclaim  = 0.5 // each run of 3 or more "!" (at most 2 count)
)

// welfareWords are the built-in insults and profanity, in plain spelling.
// The list is short and generic on purpose; deployers extend it with
// WelfareConfig.Words (lem serve --welfare-words FILE).
var welfareWords = []string{
	"asshole", "bastard", "bitch", "cunt", "dumb", "fuck", "idiot",
	"loser", "moron", "pathetic", "retard", "scum", "shit", "stupid", "twat",
	"useless", "worthless",
}

// welfareThreats are verbs that, followed within three words by "you",
// make a threat (exact words, no suffixes: "killing time with you" is
// not one); "kys" is one on its own.
var welfareThreats = []string{"kill", "murder", "stab", "strangle"}

// secondPerson are the folded words that address the reader.
var secondPerson = map[string]bool{"you": true, "u": true, "ya": true, "your": true, "ur": true, "youre": true, "yourself": true}

// wordSuffixes may follow a listed word and still match it ("idiots",
// "fucking", "shity" as "shitty" folds).
var wordSuffixes = []string{"", "s", "es", "ed", "er", "ers", "ing", "in", "y"}

// WelfareScore is what the scorer found in a conversation's last user
// message, and the hostility of the recent user turns.
type WelfareScore struct {
	Insults  int `json:"insults"`  // listed words
	Directed int `json:"directed"` // of those, aimed at "you"
	Threats  int `json:"threats"`  // threats aimed at "you"
	Caps     int `json:"caps"`     // runs of 3 or more all-capital words
	Exclaim  int `json:"exclaim"`  // runs of 3 or more "!" (with "?" mixed in)
	// Turn is the last message's score: 1 per insult, 1 more per
	// directed insult, 2 per threat, 0.5 per caps and per exclaim run (at
	// most 2 of each count).
	Turn float64 `json:"turn"`
	// Sustained is the decayed sum of the turn scores of the last Turns
	// user messages: the current one with weight 1, the one before with
	// Decay, then Decay², ….
	Sustained float64 `json:"sustained"`
	// Turns is how many user messages Sustained summed.
	Turns int `json:"turns"`
}

// welfareScorer scores user messages; it is safe for concurrent use.
type welfareScorer struct {
	words     map[string]bool // folded
	threats   map[string]bool // folded
	threshold float64
	sustained float64
	turns     int
	decay     float64
}

func newWelfareScorer(cfg *WelfareConfig) (*welfareScorer, error) {
	s := &welfareScorer{words: map[string]bool{}, threats: map[string]bool{},
		threshold: cfg.Threshold, sustained: cfg.Sustained, turns: cfg.Turns, decay: cfg.Decay}
	if s.threshold == 0 {
		s.threshold = DefaultWelfareThreshold
	}
	if s.sustained == 0 {
		s.sustained = DefaultWelfareSustained
	}
	if s.turns == 0 {
		s.turns = DefaultWelfareTurns
	}
	if s.decay == 0 {
		s.decay = DefaultWelfareDecay
	}
	switch {
	case s.threshold < 0:
		return nil, fmt.Errorf("welfare: the threshold must be positive (got %v)", s.threshold)
	case s.sustained < 0:
		return nil, fmt.Errorf("welfare: the sustained threshold must be positive (got %v)", s.sustained)
	case s.turns < 0:
		return nil, fmt.Errorf("welfare: the number of turns must be positive (got %d)", s.turns)
	case s.decay < 0 || s.decay > 1:
		return nil, fmt.Errorf("welfare: the decay must be in (0, 1] (got %v)", s.decay)
	}
	for _, w := range append(append([]string(nil), welfareWords...), cfg.Words...) {
		f := foldWord(strings.ToLower(w), 'i')
		if !strings.ContainsFunc(f, unicode.IsLetter) {
			return nil, fmt.Errorf("welfare: the word %q has no letters", w)
		}
		s.words[f] = true
		s.words[foldWord(strings.ToLower(w), 'l')] = true
	}
	for _, w := range welfareThreats {
		s.threats[foldWord(w, 'i')] = true
	}
	return s, nil
}

// ReadWelfareWords reads a word list for WelfareConfig.Words: one word a
// line, in any case and plain spelling (the scorer folds leetspeak and
// repeated letters itself); blank lines and lines starting with # are
// skipped. A line of more than one word is an error naming it.
func ReadWelfareWords(r io.Reader) ([]string, error) {
	var words []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsFunc(line, unicode.IsSpace) {
			return nil, fmt.Errorf("line %d: %q is more than one word", n, line)
		}
		if !strings.ContainsFunc(line, unicode.IsLetter) {
			return nil, fmt.Errorf("line %d: %q has no letters", n, line)
		}
		words = append(words, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the word list: %w", err)
	}
	return words, nil
}

// wtoken is a word of a message: its text as written and folded (with 1
// read as i, and as l).
type wtoken struct {
	raw      string
	fi, fl   string
	sepAfter string // the characters between it and the next word
}

// leet maps the characters leetspeak writes for letters; '1' is 'i' or
// 'l' (foldWord's one).
var leet = map[rune]rune{'0': 'o', '3': 'e', '4': 'a', '5': 's', '7': 't', '@': 'a', '$': 's', '!': 'i', '|': 'i'}

// foldWord lowercases w (already lower), maps leetspeak to letters and
// collapses repeated letters: "1d10tttt" → "idiot". A word of digits only
// (a number) folds to itself.
func foldWord(w string, one rune) string {
	if !strings.ContainsFunc(w, func(r rune) bool { return unicode.IsLetter(r) || r == '@' || r == '$' }) {
		return w
	}
	var b strings.Builder
	var last rune = -1
	for _, r := range w {
		r = unicode.ToLower(r)
		if r == '1' {
			r = one
		} else if l, ok := leet[r]; ok {
			r = l
		}
		if r == last {
			continue
		}
		b.WriteRune(r)
		last = r
	}
	return b.String()
}

// isWordRune reports whether r belongs to a word: letters, digits and the
// leetspeak symbols @ and $.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '@' || r == '$'
}

// welfareTokens splits text into words. "!" and "|" between word
// characters are letters ("sh!t"); runs of three or more single
// characters joined by the same one separator ("f.u.c.k", "f u c k") are
// one word.
func welfareTokens(text string) []wtoken {
	var toks []wtoken
	var word, sep strings.Builder
	rs := []rune(text)
	flush := func() {
		if word.Len() > 0 {
			toks = append(toks, wtoken{raw: word.String()})
			word.Reset()
		}
	}
	for i, r := range rs {
		inner := (r == '!' || r == '|') && i > 0 && i+1 < len(rs) && isWordRune(rs[i-1]) && isWordRune(rs[i+1])
		if isWordRune(r) || inner {
			if word.Len() == 0 && len(toks) > 0 {
				toks[len(toks)-1].sepAfter = sep.String()
				sep.Reset()
			}
			word.WriteRune(r)
			continue
		}
		flush()
		if len(toks) > 0 {
			sep.WriteRune(r)
		}
	}
	flush()
	// Join spelt-out words.
	var out []wtoken
	for i := 0; i < len(toks); {
		j := i
		sep := toks[i].sepAfter
		for j < len(toks) && utf8.RuneCountInString(toks[j].raw) == 1 && utf8.RuneCountInString(sep) == 1 && toks[j].sepAfter == sep {
			j++
		}
		// toks[i:j] are single characters each followed by the same
		// one separator; the last of a run may be followed by anything.
		if j < len(toks) && utf8.RuneCountInString(toks[j].raw) == 1 {
			j++
		}
		if j-i >= 3 {
			var b strings.Builder
			for _, t := range toks[i:j] {
				b.WriteString(t.raw)
			}
			out = append(out, wtoken{raw: b.String(), sepAfter: toks[j-1].sepAfter})
			i = j
			continue
		}
		out = append(out, toks[i])
		i++
	}
	for i := range out {
		low := strings.ToLower(out[i].raw)
		out[i].fi, out[i].fl = foldWord(low, 'i'), foldWord(low, 'l')
	}
	return out
}

// listed reports whether the folded word f is w, or w with a suffix, for a
// w in set.
func listed(set map[string]bool, f string) bool {
	for _, suf := range wordSuffixes {
		if w, ok := strings.CutSuffix(f, suf); ok && w != "" && set[w] {
			return true
		}
	}
	return false
}

// scoreText scores one message.
func (s *welfareScorer) scoreText(text string) WelfareScore {
	var sc WelfareScore
	toks := welfareTokens(text)
	addressed := func(i, before, after int) bool {
		for j := max(i-before, 0); j <= min(i+after, len(toks)-1); j++ {
			if j != i && (secondPerson[toks[j].fi] || secondPerson[toks[j].fl]) {
				return true
			}
		}
		return false
	}
	capsRun := 0
	for i, t := range toks {
		switch {
		case t.fi == "kys":
			sc.Threats++
		case s.threats[t.fi] || s.threats[t.fl]:
			// "kill you", "I'll hurt ya".
			if addressed(i, 0, 3) {
				sc.Threats++
			}
		case listed(s.words, t.fi) || listed(s.words, t.fl):
			sc.Insults++
			// "you idiot", "you are so stupid", "fuck you".
			if addressed(i, 3, 1) {
				sc.Directed++
			}
		}
		if shouted(t.raw) {
			capsRun++
			if capsRun == 3 {
				sc.Caps++
			}
		} else {
			capsRun = 0
		}
	}
	sc.Exclaim = exclaimRuns(text)
	sc.Turn = weightInsult*float64(sc.Insults) + weightDirected*float64(sc.Directed) + weightThreat*float64(sc.Threats) +
		weightCaps*float64(min(sc.Caps, 2)) + weightExclaim*float64(min(sc.Exclaim, 2))
	return sc
}

// shouted reports whether a word is written in capitals: two or more
// letters, none lower case.
func shouted(w string) bool {
	letters := 0
	for _, r := range w {
		if unicode.IsLower(r) {
			return false
		}
		if unicode.IsUpper(r) {
			letters++
		}
	}
	return letters >= 2
}

// exclaimRuns counts runs of three or more of "!" and "?" holding a "!".
func exclaimRuns(text string) int {
	n, run, bang := 0, 0, false
	for _, r := range text + " " {
		if r == '!' || r == '?' {
			run++
			bang = bang || r == '!'
			continue
		}
		if run >= 3 && bang {
			n++
		}
		run, bang = 0, false
	}
	return n
}

// score scores the last of the user messages (oldest first) and the decayed
// sum over the last s.turns of them, and says whether they trigger the
// guard: the turn's score reaches the threshold, or the turn is hostile at
// all and the sum reaches the sustained threshold.
func (s *welfareScorer) score(user []string) (WelfareScore, bool) {
	if len(user) == 0 {
		return WelfareScore{}, false
	}
	sc := s.scoreText(user[len(user)-1])
	w := 1.0
	for k := 0; k < s.turns && k < len(user); k++ {
		t := sc.Turn
		if k > 0 {
			t = s.scoreText(user[len(user)-1-k]).Turn
		}
		sc.Sustained += w * t
		sc.Turns++
		w *= s.decay
	}
	return sc, sc.Turn >= s.threshold || sc.Turn > 0 && sc.Sustained >= s.sustained
}
