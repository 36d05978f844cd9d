package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// scanAll splits s with a native scanner.
func scanAll(scan scanFunc, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := scan(s, i)
		if j <= i {
			panic("scanner made no progress")
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// regexAll splits s with the backtracking engine: matches and the text
// between them.
func regexAll(t testing.TB, re *regexp2.Regexp, s string) []string {
	idx, err := re.FindAllStringIndex(s, -1)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	prev := 0
	for _, m := range idx {
		if m[0] > prev {
			out = append(out, s[prev:m[0]])
		}
		if m[1] > m[0] {
			out = append(out, s[m[0]:m[1]])
		}
		prev = m[1]
	}
	if prev < len(s) {
		out = append(out, s[prev:])
	}
	return out
}

func TestScanners(t *testing.T) {
	tests := []struct {
		pattern string
		in      string
		want    []string
	}{
		{PatternGPT2, "Hello world", []string{"Hello", " world"}},
		{PatternGPT2, "I'm  here\n\n", []string{"I", "'m", " ", " here", "\n\n"}},
		{PatternGPT2, "x   y", []string{"x", "  ", " y"}},
		{PatternGPT2, "it's 2024!!", []string{"it", "'s", " 2024", "!!"}},
		{PatternGPT2, "DON'T", []string{"DON", "'", "T"}},
		{PatternLlama3, "DON'T", []string{"DON", "'T"}},
		{PatternLlama3, "1234567", []string{"123", "456", "7"}},
		{PatternQwen2, "1234", []string{"1", "2", "3", "4"}},
		{PatternLlama3, "for (int i", []string{"for", " (", "int", " i"}},
		{PatternLlama3, "}\n\n  x", []string{"}\n\n", " ", " x"}},
		{PatternLlama3, "a \n \n\nb", []string{"a", " \n \n\n", "b"}},
		{PatternLlama3, "\tfmt", []string{"\tfmt"}},
		{PatternLlama3, "'hello", []string{"'hello"}},
		{PatternLlama3, "x  ", []string{"x", "  "}},
		{PatternLlama3, "\u00a0non", []string{"\u00a0non"}},
		{PatternLlama3, "ſ'ſ", []string{"ſ", "'ſ"}},
	}
	for _, tt := range tests {
		got := scanAll(nativeScanner(tt.pattern), tt.in)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%.20s… on %q: got %q, want %q", tt.pattern, tt.in, got, tt.want)
		}
	}
}

// scannerInputs are awkward strings for the differential test.
var scannerInputs = []string{
	"", " ", "  ", "\n", " \n \n\n", "\r\n\r\n", "\t\t x", "a\u00a0\u00a0b",
	"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
	"don't won't CAN'T I'M you'RE they'LL we'VE 'd 'D",
	"def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n",
	"x[i] ^= 0xFF;   \n\t}\n", "٣٤٥ ²³ Ⅻ ½", "trailing   ", "   leading",
	"emoji 👩‍👩‍👧‍👦 🏳️‍🌈 ok", "\u2028\u2029\u3000\u180e\u200b", "?!?\n\n!",
	"   \n", "a'", "'", "''s", "x'\u017f", "日本語のテキストと English が混在",
	"Ünïcödé naïve café", "ﬁ ﬂ ＡＢＣ１２３", "\v\f\x85 end",
}

func TestScannersMatchRegex(t *testing.T) {
	for _, pattern := range []string{PatternGPT2, PatternLlama3, PatternQwen2} {
		re := regexp2.MustCompile(pattern)
		for _, s := range scannerInputs {
			if strings.ContainsRune(s, 'ſ') {
				continue // the engines fold case differently; see TestScanners
			}
			got := scanAll(nativeScanner(pattern), s)
			want := regexAll(t, re, s)
			if !slices.Equal(got, want) {
				t.Errorf("%.20s… on %q:\nnative %q\n regex %q", pattern, s, got, want)
			}
		}
	}
}

func FuzzScanners(f *testing.F) {
	for _, s := range scannerInputs {
		f.Add(s)
	}
	res := map[string]*regexp2.Regexp{}
	for _, p := range []string{PatternGPT2, PatternLlama3, PatternQwen2} {
		res[p] = regexp2.MustCompile(p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for p, re := range res {
			got := scanAll(nativeScanner(p), s)
			if strings.Join(got, "") != s {
				t.Fatalf("pieces %q do not cover %q", got, s)
			}
			if !utf8.ValidString(s) || strings.ContainsRune(s, 'ſ') || strings.ContainsRune(s, 'K') {
				continue
			}
			if want := regexAll(t, re, s); !slices.Equal(got, want) {
				t.Fatalf("%.20s… on %q:\nnative %q\n regex %q", p, s, got, want)
			}
		}
	})
}
