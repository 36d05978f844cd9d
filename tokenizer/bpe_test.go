package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// toy builds a character-level tokenizer from a vocabulary list.
func toy(t testing.TB, spec Spec) *Tokenizer {
	t.Helper()
	if spec.Model == 0 {
		spec.Model = ModelBPE
	}
	if spec.Unk == 0 && spec.Vocab[0] != "<unk>" {
		spec.Unk = -1
	}
	if spec.BOS == 0 {
		spec.BOS = -1
	}
	if spec.EOS == 0 {
		spec.EOS = -1
	}
	tok, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func tokens(tok *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tok.Token(id)
	}
	return out
}

func TestBPETieBreak(t *testing.T) {
	tok := toy(t, Spec{
		Vocab:  []string{"a", "aa", "aaa", "aaaa", "b", "ab"},
		Merges: [][2]string{{"a", "a"}, {"aa", "aa"}, {"aa", "a"}, {"a", "b"}},
	})
	tests := []struct {
		in   string
		want []string
	}{
		{"aaaaa", []string{"aaaa", "a"}},
		{"aaa", []string{"aaa"}},
		{"aab", []string{"aa", "b"}},
		{"abab", []string{"ab", "ab"}},
		{strings.Repeat("a", 300), slices.Repeat([]string{"aaaa"}, 75)},
		{strings.Repeat("a", 301), append(slices.Repeat([]string{"aaaa"}, 75), "a")},
		{strings.Repeat("a", 302), append(slices.Repeat([]string{"aaaa"}, 75), "aa")},
	}
	for _, tt := range tests {
		if got := tokens(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestMergeHeapMatchesSmall checks the two merge loops against each other.
func TestMergeHeapMatchesSmall(t *testing.T) {
	vocab := []string{"a", "b", "c"}
	var merges [][2]string
	r := rand.New(rand.NewPCG(3, 4))
	for len(merges) < 60 {
		a, b := vocab[r.IntN(len(vocab))], vocab[r.IntN(len(vocab))]
		if len(a)+len(b) > 6 || slices.Contains(vocab, a+b) {
			continue
		}
		vocab = append(vocab, a+b)
		merges = append(merges, [2]string{a, b})
	}
	tok := toy(t, Spec{Vocab: vocab, Merges: merges})
	m := tok.model.(*bpeModel)
	sc := new(scratch)
	for range 2000 {
		n := 1 + r.IntN(120)
		var b strings.Builder
		for range n {
			b.WriteByte("abc"[r.IntN(3)])
		}
		w := b.String()
		small := m.mergeSmall(m.initial(nil, w), sc)
		small = slices.Clone(small)
		heap := m.mergeHeap(m.initial(nil, w), sc)
		if !slices.Equal(small, heap) {
			t.Fatalf("%q: small %v, heap %v", w, small, heap)
		}
	}
}

func TestBPEUnknownAndFallback(t *testing.T) {
	vocab := []string{"<unk>", "a", "b", "ab", "▁"}
	for b := 0; b < 256; b++ {
		vocab = append(vocab, fmt.Sprintf("<0x%02X>", b))
	}
	base := Spec{Vocab: vocab, Merges: [][2]string{{"a", "b"}}, Unk: 0}
	tests := []struct {
		name        string
		fallback    bool
		fuse        bool
		in          string
		want        []string
		unkDisabled bool
	}{
		{"unk", false, false, "aé€b", []string{"a", "<unk>", "<unk>", "b"}, false},
		{"fused unk", false, true, "aé€b", []string{"a", "<unk>", "b"}, false},
		{"byte fallback", true, true, "aéb", []string{"a", "<0xC3>", "<0xA9>", "b"}, false},
		{"dropped", false, false, "aéb", []string{"ab"}, true}, // a and b meet once é is gone
		{"merge", false, false, "abab", []string{"ab", "ab"}, false},
	}
	for _, tt := range tests {
		spec := base
		spec.ByteFallback, spec.FuseUnk = tt.fallback, tt.fuse
		if tt.unkDisabled {
			spec.Unk = -1
		}
		tok := toy(t, spec)
		if got := tokens(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestBPEIgnoreMerges(t *testing.T) {
	spec := Spec{Vocab: []string{"a", "b", "c", "ab", "abc"}, Merges: [][2]string{{"a", "b"}}}
	if got := tokens(toy(t, spec), toy(t, spec).Encode("abc", false)); !slices.Equal(got, []string{"ab", "c"}) {
		t.Errorf("merges: got %q", got)
	}
	spec.IgnoreMerges = true
	tok := toy(t, spec)
	if got := tokens(tok, tok.Encode("abc", false)); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("ignore_merges: got %q", got)
	}
}

// TestBPEScores covers SentencePiece BPE driven by scores (GGUF "llama"
// vocabularies have no merges).
func TestBPEScores(t *testing.T) {
	vocab := []string{"<unk>", "a", "b", "c", "ab", "bc", "abc", "▁", "▁a"}
	tests := []struct {
		name   string
		scores map[string]float32
		types  map[string]TokenType
		in     string
		want   []string
	}{
		{"bc first", map[string]float32{"ab": -2, "bc": -1, "abc": -3}, nil, "abc", []string{"abc"}},
		{"ab first, no abc path", map[string]float32{"ab": -1, "bc": -2, "abc": -3}, nil, "abc", []string{"abc"}},
		{"abc unused", map[string]float32{"ab": -1, "bc": -2, "abc": -3}, map[string]TokenType{"abc": TokenUnused}, "abc", []string{"ab", "c"}},
		{"tie leftmost", map[string]float32{"ab": -1, "bc": -1}, map[string]TokenType{"abc": TokenControl}, "abc", []string{"ab", "c"}},
		{"unknown char", map[string]float32{"ab": -1}, nil, "axb", []string{"a", "<unk>", "b"}},
		{"metaspace", map[string]float32{"▁a": -1, "ab": -2}, nil, "▁ab", []string{"▁a", "b"}},
	}
	for _, tt := range tests {
		scores := make([]float32, len(vocab))
		types := make([]TokenType, len(vocab))
		for i, v := range vocab {
			scores[i] = -100
			if s, ok := tt.scores[v]; ok {
				scores[i] = s
			}
			types[i] = TokenNormal
			if ty, ok := tt.types[v]; ok {
				types[i] = ty
			}
		}
		types[0] = TokenUnknown
		tok := toy(t, Spec{Vocab: vocab, Scores: scores, Types: types, Unk: 0})
		if got := tokens(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestBPEScoresAgreeWithMerges: on Llama 2's vocabulary, whose merge order
// follows the ids, score-driven merging with score = -id gives the
// reference ids. Llama 2's whitespace-run pieces were added with scores out
// of id order, so texts with space runs are left out.
func TestBPEScoresAgreeWithMerges(t *testing.T) {
	spec := fixtureSpec(t, "llama2")
	spec.Merges = nil
	spec.Scores = make([]float32, len(spec.Vocab))
	for i := range spec.Scores {
		spec.Scores[i] = -float32(i)
	}
	spec.Normalizers = nil
	spec.PreTokenizers = []PreTokenizer{{Kind: PreMetaspace, Prepend: PrependAlways}}
	tok, err := New(*spec)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range loadReference(t, "llama2").Cases {
		if strings.Contains(c.Text, "  ") {
			continue
		}
		n++
		if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
			t.Errorf("%q:\n got %v\nwant %v", c.Text, got, c.IDs)
		}
	}
	if n < 60 {
		t.Fatalf("only %d cases compared", n)
	}
}

func TestUnigram(t *testing.T) {
	vocab := []string{"<unk>", "a", "b", "c", "ab", "bc", "abc", "▁", "<0x78>"}
	scores := []float32{0, -3, -3, -3, -2, -2, -6, -1, -4}
	tok := toy(t, Spec{Model: ModelUnigram, Vocab: vocab, Scores: scores, Unk: 0, FuseUnk: true})
	tests := []struct {
		in   string
		want []string
	}{
		{"abc", []string{"a", "bc"}}, // a+bc and ab+c tie: the first found wins
		{"ab", []string{"ab"}},
		{"xyzab", []string{"<unk>", "ab"}},
	}
	for _, tt := range tests {
		if got := tokens(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
	tok = toy(t, Spec{Model: ModelUnigram, Vocab: vocab, Scores: scores, Unk: 0, FuseUnk: true, ByteFallback: true})
	if got := tokens(tok, tok.Encode("xab", false)); !slices.Equal(got, []string{"<0x78>", "ab"}) {
		t.Errorf("byte fallback: got %q", got)
	}
}
