package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// limitTexts are the fixture's reference strings and some prose and code.
func limitTexts(t *testing.T, name string) []string {
	texts := []string{"", corpus(t, "prose", 20_000), corpus(t, "code", 20_000)}
	for _, c := range loadReference(t, name).Cases {
		texts = append(texts, c.Text)
	}
	return texts
}

// TestEncodeLimit checks EncodeLimit and EncodePlainLimit against Encode
// and EncodePlain on the fixture tokenizers: the same ids when they fit
// the limit, otherwise a prefix of them just past the limit.
func TestEncodeLimit(t *testing.T) {
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			for i, s := range limitTexts(t, name) {
				for _, special := range []bool{false, true} {
					for _, plain := range []bool{false, true} {
						encode, limited := tok.Encode, tok.EncodeLimit
						if plain {
							encode, limited = tok.EncodePlain, tok.EncodePlainLimit
						}
						full := encode(s, special)
						n := len(full)
						for _, limit := range []int{0, 1, n / 2, n - 1, n, n + 1, n + 100} {
							if limit < 0 {
								continue
							}
							ids, ok := limited(s, special, limit)
							what := func() string {
								return fmt.Sprintf("text %d, limit %d, special %v, plain %v", i, limit, special, plain)
							}
							switch {
							case ok != (n <= limit):
								t.Fatalf("%s: ok %v for %d tokens", what(), ok, n)
							case ok && !slices.Equal(ids, full):
								t.Fatalf("%s: ids differ from Encode's\n got %v\nwant %v", what(), ids, full)
							case !ok && (len(ids) <= limit || len(ids) > n || !slices.Equal(ids, full[:len(ids)])):
								t.Fatalf("%s: %d ids, want more than %d of the first of Encode's %d", what(), len(ids), limit, n)
							case !ok && i <= 2 && len(ids) > limit+64: // prose and code: short pieces
								t.Fatalf("%s: stopped at %d ids, long after the limit", what(), len(ids))
							}
						}
					}
				}
			}
		})
	}
}

// TestEncodeLimitLongText stops a 4 MB text after a few tokens without
// building its pieces.
func TestEncodeLimitLongText(t *testing.T) {
	text := strings.Repeat(corpus(t, "prose", 20_000), 200)
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			want := tok.Encode(text[:20_000], false)[:100]
			allocs := testing.AllocsPerRun(3, func() {
				ids, ok := tok.EncodeLimit(text, false, 99)
				if ok || len(ids) < 100 || !slices.Equal(ids[:100], want) {
					t.Fatalf("EncodeLimit(99) = %d ids, ok %v", len(ids), ok)
				}
			})
			if allocs > 200 {
				t.Errorf("EncodeLimit of 99 tokens of a 4 MB text made %.0f allocations", allocs)
			}
		})
	}
}

// TestPieceBatches checks that feeding the pipeline a few pieces at a time
// changes nothing.
func TestPieceBatches(t *testing.T) {
	defer func(n int) { pieceBatch = n }(pieceBatch)
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			texts := limitTexts(t, name)
			pieceBatch = 1 << 30
			var want [][]int32
			for _, s := range texts {
				want = append(want, tok.Encode(s, true))
			}
			for _, n := range []int{1, 2, 7, 1024} {
				pieceBatch = n
				for i, s := range texts {
					if got := tok.Encode(s, true); !slices.Equal(got, want[i]) {
						t.Errorf("batches of %d, text %d %q: got %v, want %v", n, i, s[:min(len(s), 40)], got, want[i])
					}
				}
			}
		})
	}
}

// TestMaxTokenBytes checks the bound on the fixture tokenizers, on their
// texts and on runs of their longest tokens, and that it is 0 where a
// step can make text vanish.
func TestMaxTokenBytes(t *testing.T) {
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			m := tok.MaxTokenBytes()
			if m <= 0 {
				t.Fatalf("MaxTokenBytes = %d, want a bound", m)
			}
			texts := limitTexts(t, name)
			// The text of the longest ordinary tokens, repeated, and long
			// runs of spaces and newlines.
			var longest []int32
			for id := range int32(tok.VocabSize()) {
				if !tok.IsSpecial(id) && len(tok.Decode([]int32{id}, false)) >= 12 {
					longest = append(longest, id)
				}
			}
			texts = append(texts, strings.Repeat(tok.Decode(longest, false), 3),
				strings.Repeat(" ", 5000), strings.Repeat("\n", 5000), strings.Repeat("\t \n", 3000))
			for i, s := range texts {
				if n := len(tok.Encode(s, false)); n < len(s)/m {
					t.Errorf("text %d: %d bytes encode to %d tokens, fewer than %d / MaxTokenBytes %d", i, len(s), n, len(s), m)
				}
			}
			t.Logf("%s: MaxTokenBytes %d", name, m)
		})
	}
	base := Spec{Model: ModelBPE, Vocab: []string{"<unk>", "a", "b", "ab"}, Merges: [][2]string{{"a", "b"}}, Unk: 0, BOS: -1, EOS: -1}
	for _, c := range []struct {
		name  string
		edit  func(*Spec)
		bound bool
	}{
		{"plain", func(*Spec) {}, true},
		{"lowercase", func(s *Spec) { s.Normalizers = []Normalizer{{Kind: NormLowercase}} }, true},
		{"strip", func(s *Spec) { s.Normalizers = []Normalizer{{Kind: NormStrip, Left: true}} }, false},
		{"strip accents", func(s *Spec) { s.Normalizers = []Normalizer{{Kind: NormStripAccents}} }, false},
		{"replace with nothing", func(s *Spec) { s.Normalizers = []Normalizer{{Kind: NormReplace, Pattern: "x"}} }, false},
		{"regex replace", func(s *Spec) { s.Normalizers = []Normalizer{{Kind: NormReplace, Regex: "x+", Content: "y"}} }, false},
		{"whitespace split", func(s *Spec) { s.PreTokenizers = []PreTokenizer{{Kind: PreWhitespaceSplit}} }, false},
		{"removed split", func(s *Spec) {
			s.PreTokenizers = []PreTokenizer{{Kind: PreSplit, Pattern: " ", Behavior: SplitRemoved}}
		}, false},
		{"stripping added token", func(s *Spec) { s.Added = []AddedToken{{ID: 4, Content: "<x>", LStrip: true}} }, false},
		{"fused unknowns", func(s *Spec) { s.FuseUnk = true }, false},
		{"no unknown token", func(s *Spec) { s.Unk = -1 }, false},
	} {
		spec := base
		c.edit(&spec)
		tok, err := New(spec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := tok.MaxTokenBytes(); (got > 0) != c.bound {
			t.Errorf("%s: MaxTokenBytes = %d, want a bound: %v", c.name, got, c.bound)
		}
	}
}

// TestScratchCapped checks that a huge input does not leave its buffers in
// the pool.
func TestScratchCapped(t *testing.T) {
	tok := loadFixture(t, "qwen3")
	// Many added tokens make many segments; a long word many symbols.
	text := strings.Repeat("<|im_start|>a", 100_000) + strings.Repeat("\U0001F600", 100_000)
	tok.Encode(text, false)
	sc := tok.pool.Get().(*scratch)
	defer tok.pool.Put(sc)
	for name, n := range map[string]int{"segs": cap(sc.segs), "segs2": cap(sc.segs2), "pieces": cap(sc.pieces), "pieces2": cap(sc.pieces2),
		"matches": cap(sc.matches), "ids": cap(sc.ids), "ranks": cap(sc.ranks), "next": cap(sc.next), "heap": cap(sc.heap), "buf": cap(sc.buf)} {
		if n > maxScratch {
			t.Errorf("the pooled scratch keeps %s with a capacity of %d", name, n)
		}
	}
}
