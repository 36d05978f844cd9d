package constrain

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/tokenizer"
)

// chatModelStop is the chat model's <|im_end|>.
const chatModelStop = 2

var (
	tokOnce  sync.Map // fixture path -> *tokenizer.Tokenizer
	jsonOnce sync.Map // fixture path -> *JSONConstraint
)

// loadTokenizer loads a fixture tokenizer: a model directory or a
// tokenizer.json(.gz) below tokenizers/.
func loadTokenizer(tb testing.TB, elem ...string) *tokenizer.Tokenizer {
	tb.Helper()
	path := fixtures.Dir(tb, elem...)
	if v, ok := tokOnce.Load(path); ok {
		return v.(*tokenizer.Tokenizer)
	}
	var tok *tokenizer.Tokenizer
	var err error
	if elem[0] == "tokenizers" {
		tok, err = tokenizer.Load(filepath.Join(path, "tokenizer.json.gz"))
	} else {
		tok, err = tokenizer.LoadDir(path)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tokOnce.Store(path, tok)
	return tok
}

func loadJSON(tb testing.TB, elem ...string) (*tokenizer.Tokenizer, *JSONConstraint) {
	tb.Helper()
	tok := loadTokenizer(tb, elem...)
	key := strings.Join(elem, "/")
	if v, ok := jsonOnce.Load(key); ok {
		return tok, v.(*JSONConstraint)
	}
	j, err := JSON(tok)
	if err != nil {
		tb.Fatal(err)
	}
	jsonOnce.Store(key, j)
	return tok, j
}

// TestTokenBytes checks the bytes found for each token against the
// tokenizer's own decoding of whole texts.
func TestTokenBytes(t *testing.T) {
	texts := []string{
		`{"name": "get_weather", "arguments": {"city": "Paris"}}`,
		"Héllo wörld — naïve café, 日本語のテキスト, emoji 😀👍🏽 and \u00a0nbsp.",
		"  leading spaces\n\ttabs\r\n and {\"json\": [1, 2.5e-3]} \\u00e9",
		"Привет, мир! مرحبا بالعالم",
	}
	for _, elem := range [][]string{
		{"chat-model"},
		{"tokenizers", "qwen3"},
		{"tokenizers", "llama3"},
		{"tokenizers", "llama2"},
		{"tokenizers", "gemma3"},
	} {
		t.Run(strings.Join(elem, "/"), func(t *testing.T) {
			tok, j := loadJSON(t, elem...)
			missing := 0
			for id, b := range j.toks {
				if b == nil && !tok.IsSpecial(int32(id)) && tok.Token(int32(id)) != "" {
					missing++
				}
			}
			t.Logf("%d tokens, %d trie nodes, longest %d bytes, %d ordinary tokens without bytes",
				len(j.toks), len(j.trie.nodes), j.trie.maxLen, missing)
			if missing > 0 {
				t.Errorf("%d ordinary tokens without bytes", missing)
			}
			for _, text := range texts {
				ids := tok.Encode(text, false)
				var got []byte
				for _, id := range ids {
					got = append(got, j.toks[id]...)
				}
				want := tok.Decode(ids, false)
				// SentencePiece tokenizers add a leading space that
				// decoding removes.
				if g := string(got); g != want && g != " "+want {
					t.Errorf("bytes of %q:\n got %q\nwant %q", text, got, want)
				}
			}
		})
	}
}

// TestMaskMatchesAutomaton checks the trie walk against stepping every
// token's bytes on its own, in the states a few texts pass through.
func TestMaskMatchesAutomaton(t *testing.T) {
	_, j := loadJSON(t, "chat-model")
	text := " {\"ké\": [1, -0.5e+3, true, {\"x\": \"a\\u00e9\xc3\xa9😀\"}], \"n\": null, \"f\": 0}"
	c := j.New([]int32{chatModelStop})
	logits := make([]float32, len(j.toks)+5)
	var s state
	for i := 0; i <= len(text); i++ {
		c.s = s
		for k := range logits {
			logits[k] = 0
		}
		c.Mask(logits)
		for id := range logits {
			want := false
			if id < len(j.toks) && j.toks[id] != nil && id != chatModelStop {
				x := s
				want = true
				for _, b := range j.toks[id] {
					if !x.step(b) {
						want = false
						break
					}
				}
			}
			if s.mode == mDone {
				want = id == chatModelStop
			}
			if got := !math.IsInf(float64(logits[id]), -1); got != want {
				t.Fatalf("after %q: token %d (%q) allowed = %v, want %v", text[:i], id, j.toks[min(id, len(j.toks)-1)], got, want)
			}
		}
		if i < len(text) && !s.step(text[i]) {
			t.Fatalf("text rejected at %d", i)
		}
	}
}

// TestJSONRandomSampling samples many sequences from random logits under
// the constraint and checks that each one parses.
func TestJSONRandomSampling(t *testing.T) {
	tok, j := loadJSON(t, "chat-model")
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, tok.VocabSize())
	runs := 300
	if testing.Short() {
		runs = 50
	}
	for run := range runs {
		c := j.New([]int32{chatModelStop})
		var ids []int32
		// Sample freely for a while, then head for the end of the object
		// by the shortest way.
		free := rng.IntN(200)
		stopped := false
		for step := 0; step < 5000; step++ {
			for k := range logits {
				logits[k] = float32(rng.NormFloat64() * 3)
			}
			c.Mask(logits)
			var id int32
			if step < free || c.Done() {
				id = sample(rng, logits)
			} else {
				id = closest(rng, j, c.s, logits)
			}
			if id < 0 {
				t.Fatalf("run %d: no token allowed after %q", run, tok.Decode(ids, false))
			}
			if id == chatModelStop {
				stopped = true
				break
			}
			c.Accept(id)
			if err := c.Err(); err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			ids = append(ids, id)
		}
		if !stopped || !c.Done() {
			t.Fatalf("run %d: not finished after %d tokens: %q", run, len(ids), tok.Decode(ids, false))
		}
		text := tok.Decode(ids, false)
		// Raw values: numbers such as 1e999 are valid JSON that a float64
		// cannot hold.
		var v map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("run %d: %q: %v", run, text, err)
		}
	}
}

// sample draws a token from softmax(logits); -1 when all are masked.
func sample(rng *rand.Rand, logits []float32) int32 {
	mx := float32(math.Inf(-1))
	for _, x := range logits {
		mx = max(mx, x)
	}
	if math.IsInf(float64(mx), -1) {
		return -1
	}
	var sum float64
	for _, x := range logits {
		sum += math.Exp(float64(x - mx))
	}
	r := rng.Float64() * sum
	last := int32(-1)
	for i, x := range logits {
		if math.IsInf(float64(x), -1) {
			continue
		}
		last = int32(i)
		r -= math.Exp(float64(x - mx))
		if r <= 0 {
			break
		}
	}
	return last
}

// closest picks, among the allowed tokens, one that leaves the fewest bytes
// to write before the object is complete (ties broken at random).
func closest(rng *rand.Rand, j *JSONConstraint, s state, logits []float32) int32 {
	best, bestD, n := int32(-1), math.MaxInt, 0
	for id, x := range logits {
		if math.IsInf(float64(x), -1) || id >= len(j.toks) || j.toks[id] == nil {
			continue
		}
		t := s
		for _, b := range j.toks[id] {
			t.step(b)
		}
		d := remaining(t)
		switch {
		case d < bestD:
			best, bestD, n = int32(id), d, 1
		case d == bestD:
			n++
			if rng.IntN(n) == 0 {
				best = int32(id)
			}
		}
	}
	return best
}

// remaining returns the fewest bytes that complete the object from s.
func remaining(s state) int {
	d := int(s.depth)
	switch s.mode {
	case mStart:
		return 2
	case mDone:
		return 0
	case mObjFirst, mArrFirst, mAfter, mNumZero, mNumInt, mNumFrac, mNumExpDig:
		return d
	case mKey:
		return d + 4 // "":0
	case mColon:
		return d + 2 // :0
	case mValue, mNumMinus, mNumDot, mNumExp, mNumExpSign:
		return d + 1
	case mLit:
		return d + len(literals[s.lit]) - int(s.sub)
	}
	str := d + 1 // the closing quote
	if s.key {
		str += 2 // :0
	}
	switch s.mode {
	case mStrEsc:
		return str + 1
	case mStrHex:
		return str + 4 - int(s.sub)
	case mStrUTF8:
		return str + int(s.sub)
	}
	return str
}

// TestJSONStops checks that stop tokens are allowed only once the object is
// complete, and then alone.
func TestJSONStops(t *testing.T) {
	tok, j := loadJSON(t, "chat-model")
	c := j.New([]int32{chatModelStop})
	logits := make([]float32, tok.VocabSize())
	for _, id := range tok.Encode(`{"a": [1]}`, false) {
		clear(logits)
		c.Mask(logits)
		if !math.IsInf(float64(logits[chatModelStop]), -1) {
			t.Fatal("stop allowed before the object is complete")
		}
		if math.IsInf(float64(logits[id]), -1) {
			t.Fatalf("token %d (%q) masked", id, tok.Token(id))
		}
		if c.Done() {
			t.Fatal("done too early")
		}
		c.Accept(id)
	}
	if !c.Done() || c.Err() != nil {
		t.Fatalf("Done = %v, Err = %v", c.Done(), c.Err())
	}
	for k := range logits {
		logits[k] = 1
	}
	c.Mask(logits)
	for id, x := range logits {
		if allowed := !math.IsInf(float64(x), -1); allowed != (id == chatModelStop) {
			t.Fatalf("done: token %d allowed = %v", id, allowed)
		}
	}
	if logits[chatModelStop] != 1 {
		t.Errorf("stop logit changed to %v", logits[chatModelStop])
	}
	c.Accept(chatModelStop)
	if c.Err() != nil {
		t.Errorf("accepting the stop: %v", c.Err())
	}
}

// TestJSONAcceptRejected checks that a token the constraint rejects ends
// the output with an error rather than corrupting the state.
func TestJSONAcceptRejected(t *testing.T) {
	tok, j := loadJSON(t, "chat-model")
	for _, tc := range []struct {
		name string
		ids  []int32
	}{
		{"text first", tok.Encode("hello", false)},
		{"special", []int32{chatModelStop}},
		{"out of range", []int32{-1}},
		{"beyond vocabulary", []int32{int32(tok.VocabSize())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := j.New([]int32{chatModelStop})
			for _, id := range tc.ids {
				c.Accept(id)
			}
			if c.Err() == nil || !c.Done() {
				t.Fatalf("Err = %v, Done = %v", c.Err(), c.Done())
			}
			logits := make([]float32, tok.VocabSize())
			c.Mask(logits)
			if math.IsInf(float64(logits[chatModelStop]), -1) {
				t.Error("stop masked after an error")
			}
		})
	}
}

func TestJSONNilTokenizer(t *testing.T) {
	if _, err := JSON(nil); err == nil {
		t.Error("no error")
	}
}

// TestJSONShortLogits checks logits shorter and longer than the vocabulary.
func TestJSONShortLogits(t *testing.T) {
	tok, j := loadJSON(t, "chat-model")
	c := j.New(nil)
	c.Mask(make([]float32, 10))
	long := make([]float32, tok.VocabSize()+100)
	c.Mask(long)
	for i := tok.VocabSize(); i < len(long); i++ {
		if !math.IsInf(float64(long[i]), -1) {
			t.Fatalf("id %d beyond the vocabulary allowed", i)
		}
	}
	brace, ok := tok.TokenID("{")
	if !ok || math.IsInf(float64(long[brace]), -1) {
		t.Fatalf("'{' (%d, %v) masked at the start", brace, ok)
	}
}

// BenchmarkJSONMask masks the qwen3 vocabulary (151k tokens) in typical
// states. walk computes the allowed set (the cache's miss path); naive steps
// every token's bytes on its own, the baseline; cached is Mask with the
// state's set in the cache; fill writes -Inf over the logits, the floor.
func BenchmarkJSONMask(b *testing.B) {
	tok, j := loadJSON(b, "tokenizers", "qwen3")
	states := []struct {
		name, prefix string
	}{
		{"start", ""},
		{"key", `{"`},
		{"string", `{"name": "Par`},
		{"after_value", `{"a": 1, "b": [true`},
		{"number", `{"a": -12`},
		{"value", `{"a": `},
		{"utf8", "{\"a\": \"\xe6\x97"},
		{"escape", `{"a": "\`},
	}
	logits := make([]float32, tok.VocabSize())
	walk := make([]state, j.trie.maxLen+1)
	bits := make([]uint64, j.words)
	for _, st := range states {
		var s state
		for i := 0; i < len(st.prefix); i++ {
			if !s.step(st.prefix[i]) {
				b.Fatalf("bad prefix %q", st.prefix)
			}
		}
		b.Run(st.name+"/walk", func(b *testing.B) {
			for b.Loop() {
				clear(bits)
				j.compute(s, bits, walk)
			}
		})
		b.Run(st.name+"/naive", func(b *testing.B) {
			for b.Loop() {
				clear(bits)
				for id, tb := range j.toks {
					if tb == nil {
						continue
					}
					x := s
					ok := true
					for _, c := range tb {
						if !x.step(c) {
							ok = false
							break
						}
					}
					if ok {
						bits[id>>6] |= 1 << (id & 63)
					}
				}
			}
		})
		b.Run(st.name+"/cached", func(b *testing.B) {
			c := j.New([]int32{151645})
			c.s = s
			c.Mask(logits)
			for b.Loop() {
				c.Mask(logits)
			}
		})
	}
	b.Run("fill", func(b *testing.B) {
		for b.Loop() {
			for i := range logits {
				logits[i] = negInf
			}
		}
	})
}

// BenchmarkJSONBuild builds the qwen3 table.
func BenchmarkJSONBuild(b *testing.B) {
	tok := loadTokenizer(b, "tokenizers", "qwen3")
	for b.Loop() {
		if _, err := JSON(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// TestJSONConcurrent runs generations on one table at once (run with
// -race): the cache is shared.
func TestJSONConcurrent(t *testing.T) {
	tok, j := loadJSON(t, "chat-model")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			logits := make([]float32, tok.VocabSize())
			c := j.New([]int32{chatModelStop})
			for range 300 {
				for k := range logits {
					logits[k] = float32(rng.NormFloat64())
				}
				c.Mask(logits)
				id := sample(rng, logits)
				if id < 0 || id == chatModelStop {
					return
				}
				c.Accept(id)
				if c.Err() != nil {
					t.Error(c.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
}
