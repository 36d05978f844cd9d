package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func preTokenize(t *testing.T, steps []PreTokenizer, text string) []string {
	t.Helper()
	pre, _, err := compilePreTokenizers(steps)
	if err != nil {
		t.Fatal(err)
	}
	sc := new(scratch)
	pieces := []piece{{text, true}}
	for _, p := range pre {
		var out []piece
		for _, pc := range pieces {
			out = p.pretokenize(out, pc, sc)
		}
		pieces = out
	}
	var got []string
	for _, p := range pieces {
		got = append(got, p.text)
	}
	return got
}

func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		behavior SplitBehavior
		invert   bool
		want     []string
	}{
		{SplitRemoved, false, []string{"the", "final", "countdown"}},
		{SplitIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{SplitMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{SplitMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{SplitContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{SplitRemoved, true, []string{"-", "-", "-"}},
		{SplitIsolated, true, []string{"the", "-", "final", "-", "-", "countdown"}},
	}
	for _, tt := range tests {
		got := preTokenize(t, []PreTokenizer{{Kind: PreSplit, Pattern: "-", Behavior: tt.behavior, Invert: tt.invert}}, "the-final--countdown")
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s invert=%v: got %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
		// The same through the regex path.
		got = preTokenize(t, []PreTokenizer{{Kind: PreSplit, Regex: "-", Behavior: tt.behavior, Invert: tt.invert}}, "the-final--countdown")
		if !slices.Equal(got, tt.want) {
			t.Errorf("regex %s invert=%v: got %q, want %q", tt.behavior, tt.invert, got, tt.want)
		}
	}
}

func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		name  string
		steps []PreTokenizer
		in    string
		want  []string
	}{
		{"metaspace always", []PreTokenizer{{Kind: PreMetaspace, Split: true}}, "Hey  friend", []string{"▁Hey", "▁", "▁friend"}},
		{"metaspace no split", []PreTokenizer{{Kind: PreMetaspace}}, "Hey friend", []string{"▁Hey▁friend"}},
		{"metaspace never", []PreTokenizer{{Kind: PreMetaspace, Prepend: PrependNever, Split: true}}, "Hey friend", []string{"Hey", "▁friend"}},
		{"metaspace first", []PreTokenizer{{Kind: PreSplit, Pattern: "|", Behavior: SplitRemoved}, {Kind: PreMetaspace, Prepend: PrependFirst}}, "a|b", []string{"▁a", "b"}},
		{"digits", []PreTokenizer{{Kind: PreDigits}}, "a123b4", []string{"a", "123", "b", "4"}},
		{"digits individual", []PreTokenizer{{Kind: PreDigits, IndividualDigits: true}}, "a12", []string{"a", "1", "2"}},
		{"punctuation", []PreTokenizer{{Kind: PrePunctuation}}, "Hey, you!?", []string{"Hey", ",", " you", "!", "?"}},
		{"whitespace", []PreTokenizer{{Kind: PreWhitespace}}, "Hey man!! How's  it", []string{"Hey", "man", "!!", "How", "'", "s", "it"}},
		{"whitespace split", []PreTokenizer{{Kind: PreWhitespaceSplit}}, " a  b\tc ", []string{"a", "b", "c"}},
		{"bert", []PreTokenizer{{Kind: PreBert}}, "Hey, you!", []string{"Hey", ",", "you", "!"}},
		{"char delimiter", []PreTokenizer{{Kind: PreCharDelimiter, Pattern: "x"}}, "axbxxc", []string{"a", "b", "c"}},
		{"byte level", []PreTokenizer{{Kind: PreByteLevel, AddPrefixSpace: true, UseRegex: true}, {Kind: PreDigits}}, "Hello world", []string{"ĠHello", "Ġworld"}},
		{"byte level no prefix", []PreTokenizer{{Kind: PreByteLevel, UseRegex: true}, {Kind: PreDigits}}, "é 1", []string{"Ã©", "Ġ", "1"}},
	}
	for _, tt := range tests {
		if got := preTokenize(t, tt.steps, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNormalizers(t *testing.T) {
	tests := []struct {
		n        Normalizer
		in, want string
	}{
		{Normalizer{Kind: NormNFC}, "e\u0301", "é"},
		{Normalizer{Kind: NormNFD}, "é", "e\u0301"},
		{Normalizer{Kind: NormNFKC}, "ﬁ１", "fi1"},
		{Normalizer{Kind: NormNFKD}, "ﬁé", "fie\u0301"},
		{Normalizer{Kind: NormLowercase}, "HeLLo İ ΣΑ", "hello i\u0307 σα"},
		{Normalizer{Kind: NormReplace, Pattern: " ", Content: "▁"}, "a b  c", "a▁b▁▁c"},
		{Normalizer{Kind: NormReplace, Regex: ` {2,}`, Content: " "}, "a b   c", "a b c"},
		{Normalizer{Kind: NormPrepend, Content: "▁"}, "a", "▁a"},
		{Normalizer{Kind: NormPrepend, Content: "▁"}, "", ""},
		{Normalizer{Kind: NormStrip, Left: true, Right: true}, " \ta b\n ", "a b"},
		{Normalizer{Kind: NormStrip, Right: true}, " a ", " a"},
		{Normalizer{Kind: NormStripAccents}, "e\u0301a\u0308", "ea"},
	}
	for _, tt := range tests {
		n, err := compileNormalizer(tt.n)
		if err != nil {
			t.Fatal(err)
		}
		if got := n.normalize(tt.in); got != tt.want {
			t.Errorf("%s %q: got %q, want %q", tt.n.Kind, tt.in, got, tt.want)
		}
	}
}

func TestDecoders(t *testing.T) {
	tests := []struct {
		name   string
		steps  []Decoder
		tokens []string
		want   string
	}{
		{"byte level", []Decoder{{Kind: DecByteLevel}}, []string{"ĠHello", "Ġw", "Ã©"}, " Hello wé"},
		{"byte level lossy", []Decoder{{Kind: DecByteLevel}}, []string{"âĤ", "A"}, "\uFFFDA"},        // E2 82 41: one replacement
		{"byte level bad lead", []Decoder{{Kind: DecByteLevel}}, []string{"Ģ", "Ģ"}, "\uFFFD\uFFFD"}, // Ģ is byte 0x80
		{"byte level foreign", []Decoder{{Kind: DecByteLevel}}, []string{"<|x|>", "日本"}, "<|x|>日本"},
		{"byte fallback", []Decoder{{Kind: DecByteFallback}, {Kind: DecFuse}}, []string{"a", "<0xE2>", "<0x82>", "<0xAC>", "b"}, "a€b"},
		{"byte fallback invalid", []Decoder{{Kind: DecByteFallback}, {Kind: DecFuse}}, []string{"<0xE2>", "<0x82>", "x", "<0x41>"}, "\uFFFD\uFFFDxA"},
		{"spm", []Decoder{{Kind: DecReplace, Pattern: "▁", Content: " "}, {Kind: DecByteFallback}, {Kind: DecFuse}, {Kind: DecStrip, Content: " ", Start: 1}}, []string{"▁Hey", "▁", "▁you"}, "Hey  you"},
		{"strip both", []Decoder{{Kind: DecStrip, Content: "x", Start: 2, Stop: 1}}, []string{"xxxaxx", "x"}, "xax"},
		{"metaspace", []Decoder{{Kind: DecMetaspace}}, []string{"▁Hey", "▁friend"}, "Hey friend"},
		{"metaspace never", []Decoder{{Kind: DecMetaspace, Prepend: PrependNever}}, []string{"▁Hey", "▁friend"}, " Hey friend"},
	}
	for _, tt := range tests {
		toks := slices.Clone(tt.tokens)
		for _, d := range tt.steps {
			c, err := compileDecoder(d)
			if err != nil {
				t.Fatal(err)
			}
			toks = c.decodeChain(toks)
		}
		if got := strings.Join(toks, ""); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"abc", "abc"},
		{"\xe2\x82\xac", "€"},
		{"\xe2\x82A", "\uFFFDA"},
		{"\xe2\x82", "\uFFFD"},
		{"\x80\x80", "\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: E D then A0 is out of range
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"a\xffb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		if got := lossyString([]byte(tt.in)); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// byteLevelSpec is a small GPT-2-style byte-level tokenizer.
func byteLevelSpec() Spec {
	var vocab []string
	for b := 0; b < 256; b++ {
		vocab = append(vocab, byteToStr[b])
	}
	merges := [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "Ġ"}, {"e", "r"}}
	for _, m := range merges {
		vocab = append(vocab, m[0]+m[1])
	}
	return Spec{
		Model:  ModelBPE,
		Vocab:  vocab,
		Merges: merges,
		Unk:    -1,
		Added: []AddedToken{
			{ID: int32(len(vocab)), Content: "<|end|>", Special: true},
			{ID: int32(len(vocab) + 1), Content: "<think>"},
		},
		PreTokenizers: []PreTokenizer{{Kind: PreSplit, Regex: PatternLlama3, Behavior: SplitIsolated}, {Kind: PreByteLevel}},
		Decoders:      []Decoder{{Kind: DecByteLevel}},
		BOS:           -1,
		EOS:           int32(len(vocab)),
	}
}

func TestAddedTokens(t *testing.T) {
	vocab := []string{"<unk>", "a", "b", "c", " ", "x", "y", "<", ">"}
	added := func(flags AddedToken) []AddedToken {
		flags.ID, flags.Content = int32(len(vocab)), "<ab>"
		longer := AddedToken{ID: int32(len(vocab) + 1), Content: "<ab><c>", Special: true}
		return []AddedToken{flags, longer}
	}
	tests := []struct {
		name  string
		flags AddedToken
		in    string
		want  []string
	}{
		{"plain", AddedToken{}, "a<ab>b", []string{"a", "<ab>", "b"}},
		{"longest", AddedToken{}, "a<ab><c>b", []string{"a", "<ab><c>", "b"}},
		{"single word inside", AddedToken{SingleWord: true}, "a<ab>b", []string{"a", "<", "a", "b", ">", "b"}},
		{"single word alone", AddedToken{SingleWord: true}, "x <ab> y", []string{"x", " ", "<ab>", " ", "y"}},
		{"lstrip", AddedToken{LStrip: true}, "x  <ab> y", []string{"x", "<ab>", " ", "y"}},
		{"rstrip", AddedToken{RStrip: true}, "x  <ab>  y", []string{"x", " ", " ", "<ab>", "y"}},
	}
	for _, tt := range tests {
		tok := toy(t, Spec{Vocab: vocab, Unk: 0, Added: added(tt.flags)})
		if got := tokens(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("%s %q: got %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}

	// Normalized added tokens are matched after normalization.
	tok := toy(t, Spec{
		Vocab: vocab, Unk: 0,
		Normalizers: []Normalizer{{Kind: NormLowercase}},
		Added:       []AddedToken{{ID: int32(len(vocab)), Content: "XY", Normalized: true}},
	})
	if got := tokens(tok, tok.Encode("aXyb", false)); !slices.Equal(got, []string{"a", "XY", "b"}) {
		t.Errorf("normalized: got %q", got)
	}

	// EncodePlain leaves special tokens as text.
	bl, err := New(byteLevelSpec())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := bl.TokenID("<|end|>")
	think, _ := bl.TokenID("<think>")
	if got := bl.Encode("<|end|><think>", false); !slices.Equal(got, []int32{end, think}) {
		t.Errorf("Encode: got %v", got)
	}
	got := bl.EncodePlain("<|end|><think>", false)
	if slices.Contains(got, end) || got[len(got)-1] != think {
		t.Errorf("EncodePlain: got %v", tokens(bl, got))
	}
	if s := bl.Decode(got, false); s != "<|end|><think>" {
		t.Errorf("EncodePlain round trip: %q", s)
	}
	if !bl.IsSpecial(end) || bl.IsSpecial(think) {
		t.Errorf("IsSpecial wrong")
	}
	if s := bl.Decode([]int32{end, think, 999999, -1}, true); s != "<think>" {
		t.Errorf("skip special: %q", s)
	}
}

func TestStreamHoldsBack(t *testing.T) {
	bl, err := New(byteLevelSpec())
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int32 {
		i, ok := bl.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	// "€" is E2 82 AC, three byte-level tokens.
	s := bl.NewStream()
	steps := []struct {
		id   int32
		want string
	}{
		{id("a"), "a"},
		{id("â"), ""},
		{id("Ĥ"), ""},
		{id("¬"), "€"},
		{id("Ġthe"), " the"},
		{id("â"), ""},
	}
	for i, st := range steps {
		if got := s.Next(st.id); got != st.want {
			t.Errorf("step %d: got %q, want %q", i, got, st.want)
		}
	}
	if got := s.Flush(); got != "\uFFFD" {
		t.Errorf("flush: got %q", got)
	}

	// Byte fallback: a group is held until it ends, because a later byte
	// can turn the whole group into replacement characters.
	vocab := []string{"<unk>", "▁a", "b"}
	for b := 0; b < 256; b++ {
		vocab = append(vocab, fmt.Sprintf("<0x%02X>", b))
	}
	spm := toy(t, Spec{Vocab: vocab, Unk: 0, ByteFallback: true, Decoders: []Decoder{
		{Kind: DecReplace, Pattern: "▁", Content: " "}, {Kind: DecByteFallback}, {Kind: DecFuse}, {Kind: DecStrip, Content: " ", Start: 1},
	}})
	for _, ids := range [][]int32{
		{1, 3 + 0x41, 3 + 0x80, 2}, // "A" then a lone continuation: both become U+FFFD
		{1, 3 + 0xE2, 3 + 0x82, 3 + 0xAC, 1},
		{3 + 0xE2, 3 + 0x82, 1, 3 + 0xE2},
		{1, 1, 2},
	} {
		st := spm.NewStream()
		var got string
		for _, id := range ids {
			got += st.Next(id)
		}
		got += st.Flush()
		if want := spm.Decode(ids, false); got != want {
			t.Errorf("%v: stream %q, decode %q", ids, got, want)
		}
	}
}
