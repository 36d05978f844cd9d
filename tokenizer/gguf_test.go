package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
)

// ggufKV is one metadata entry of a test file.
type ggufKV struct {
	key string
	val gguf.Value
}

// ggufParse writes kvs as a GGUF file in memory and parses it back.
func ggufParse(tb testing.TB, kvs []ggufKV) *gguf.File {
	tb.Helper()
	w := gguf.NewWriter()
	for _, kv := range kvs {
		if err := w.SetKV(kv.key, kv.val); err != nil {
			tb.Fatalf("SetKV(%s): %v", kv.key, err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse("test.gguf", buf.Bytes())
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// ggufFixture says how llama.cpp's converter (convert_hf_to_gguf.py) writes
// the tokenizer of one fixture model.
type ggufFixture struct {
	name  string
	arch  string // general.architecture
	model string // tokenizer.ggml.model
	pre   string // tokenizer.ggml.pre; "" writes none
	// padTo is the model's config.json vocab_size: the converter pads the
	// token list to it with "[PADn]" tokens of type unused.
	padTo int
	// noSpacePrefix writes tokenizer.ggml.add_space_prefix = false, as the
	// Gemma converters do.
	noSpacePrefix bool
	// addBOS, when set, is written as tokenizer.ggml.add_bos_token where the
	// converter would find no add_bos_token (see llama3 below).
	addBOS *bool
}

var ggufFixtures = []ggufFixture{
	{name: "qwen3", arch: "qwen3", model: "gpt2", pre: "qwen2", padTo: 151936},
	// The fixture's tokenizer.json has a ByteLevel post-processor and its
	// tokenizer_config.json no add_bos_token, so the converter writes no
	// add_bos_token and llama.cpp's "llama-bpe" default (add BOS) would
	// apply; the reference, made by transformers from these files, adds
	// none. Meta's own Llama 3 files do add BOS, and their GGUF conversions
	// say so; this one says false to match the reference.
	{name: "llama3", arch: "llama", model: "gpt2", pre: "llama-bpe", addBOS: new(false)},
	{name: "llama2", arch: "llama", model: "llama"},
	{name: "gemma3", arch: "gemma3", model: "llama", padTo: 262208, noSpacePrefix: true},
}

// ggufConfig is the part of tokenizer_config.json the converter reads.
type ggufConfig struct {
	AddBOS   *bool           `json:"add_bos_token"`
	AddEOS   *bool           `json:"add_eos_token"`
	BOSToken json.RawMessage `json:"bos_token"`
	EOSToken json.RawMessage `json:"eos_token"`
	UnkToken json.RawMessage `json:"unk_token"`
	PadToken json.RawMessage `json:"pad_token"`
}

// ggufConfigToken reads a token given as a string or {"content": …}; "" for
// null or absent.
func ggufConfigToken(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

// ggufLooksSpecial is the converter's rule for added tokens that are not
// marked special but are control tokens all the same.
func ggufLooksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") ||
		strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

func ggufIsByteToken(s string) bool {
	return len(s) == 6 && strings.HasPrefix(s, "<0x") && strings.HasSuffix(s, ">")
}

// ggufFixtureFile builds the GGUF metadata llama.cpp's converter writes for
// a fixture tokenizer, from its tokenizer.json and tokenizer_config.json.
func ggufFixtureFile(tb testing.TB, fx ggufFixture) *gguf.File {
	tb.Helper()
	dir := fixtures.Dir(tb, "tokenizers", fx.name)
	data, err := readMaybeGzip(filepath.Join(dir, "tokenizer.json.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	hf, err := ParseSpec(data)
	if err != nil {
		tb.Fatal(err)
	}
	var cfg ggufConfig
	if data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		tb.Fatal(err)
	} else if err := json.Unmarshal(data, &cfg); err != nil {
		tb.Fatal(err)
	}
	unkText := ggufConfigToken(cfg.UnkToken)

	n := max(len(hf.Vocab), fx.padTo)
	added := map[int32]AddedToken{}
	for _, a := range hf.Added {
		added[a.ID] = a
		n = max(n, int(a.ID)+1)
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	for id := range n {
		a, isAdded := added[int32(id)]
		switch {
		case isAdded && fx.model == "llama" && a.Content == unkText:
			tokens[id], types[id] = a.Content, int32(TokenUnknown)
		case isAdded && (a.Special || ggufLooksSpecial(a.Content)):
			tokens[id], types[id] = a.Content, int32(TokenControl)
		case isAdded:
			// The converter writes user-defined tokens with real spaces,
			// to be matched in the raw text.
			tokens[id], types[id] = strings.ReplaceAll(a.Content, "▁", " "), int32(TokenUserDefined)
		case id < len(hf.Vocab) && hf.Vocab[id] != "":
			tokens[id], types[id] = hf.Vocab[id], int32(TokenNormal)
			if fx.model == "llama" && ggufIsByteToken(hf.Vocab[id]) {
				types[id] = int32(TokenByte)
			}
		default:
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), int32(TokenUnused)
		}
	}

	kvs := []ggufKV{
		{"general.architecture", gguf.String(fx.arch)},
		{ggufKeyModel, gguf.String(fx.model)},
	}
	if fx.pre != "" {
		kvs = append(kvs, ggufKV{ggufKeyPre, gguf.String(fx.pre)})
	}
	kvs = append(kvs, ggufKV{ggufKeyTokens, gguf.Array(tokens)})
	switch fx.model {
	case "gpt2":
		merges := make([]string, len(hf.Merges))
		for i, m := range hf.Merges {
			merges[i] = m[0] + " " + m[1]
		}
		kvs = append(kvs, ggufKV{ggufKeyTypes, gguf.Array(types)}, ggufKV{ggufKeyMerges, gguf.Array(merges)})
	case "llama":
		// The converter copies the scores from tokenizer.model, which the
		// fixtures lack. tokenizer.json's merges of a SentencePiece BPE
		// model are its pieces' splits sorted by the merged piece's score,
		// so minus the rank of the first merge that makes a piece orders
		// the pieces as their SentencePiece scores do. Pieces no merge
		// makes (characters, bytes, control tokens) get the lowest score:
		// no pair of symbols forms them.
		rank := make(map[string]int, len(hf.Merges))
		for r, m := range hf.Merges {
			if _, ok := rank[m[0]+m[1]]; !ok {
				rank[m[0]+m[1]] = r
			}
		}
		scores := make([]float32, n)
		for id, tok := range tokens {
			scores[id] = -float32(len(hf.Merges))
			if r, ok := rank[tok]; ok {
				scores[id] = -float32(r)
			}
		}
		kvs = append(kvs, ggufKV{ggufKeyScores, gguf.Array(scores)}, ggufKV{ggufKeyTypes, gguf.Array(types)})
		if fx.noSpacePrefix {
			kvs = append(kvs, ggufKV{ggufKeyAddSpacePrefix, gguf.Bool(false)})
		}
	}

	find := func(s string) (uint32, bool) {
		if s == "" {
			return 0, false
		}
		i := slices.Index(tokens, s)
		return uint32(i), i >= 0
	}
	for _, sp := range []struct {
		key string
		raw json.RawMessage
	}{{ggufKeyBOS, cfg.BOSToken}, {ggufKeyEOS, cfg.EOSToken}, {ggufKeyUnk, cfg.UnkToken}, {ggufKeyPad, cfg.PadToken}} {
		if id, ok := find(ggufConfigToken(sp.raw)); ok {
			kvs = append(kvs, ggufKV{sp.key, gguf.Uint32(id)})
		}
	}
	if cfg.AddBOS != nil {
		kvs = append(kvs, ggufKV{ggufKeyAddBOS, gguf.Bool(*cfg.AddBOS)})
	} else if fx.addBOS != nil {
		kvs = append(kvs, ggufKV{ggufKeyAddBOS, gguf.Bool(*fx.addBOS)})
	}
	if cfg.AddEOS != nil {
		kvs = append(kvs, ggufKV{ggufKeyAddEOS, gguf.Bool(*cfg.AddEOS)})
	}
	return ggufParse(tb, kvs)
}

// ggufReferenceCases reads a fixture's reference.json.
func ggufReferenceCases(tb testing.TB, name string) []struct {
	Text           string  `json:"text"`
	IDs            []int32 `json:"ids"`
	IDsWithSpecial []int32 `json:"ids_with_special"`
	Decoded        string  `json:"decoded"`
} {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures.Dir(tb, "tokenizers", name), "reference.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Text           string  `json:"text"`
			IDs            []int32 `json:"ids"`
			IDsWithSpecial []int32 `json:"ids_with_special"`
			Decoded        string  `json:"decoded"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		tb.Fatalf("parse reference.json: %v", err)
	}
	if len(ref.Cases) == 0 {
		tb.Fatal("reference.json: no cases")
	}
	return ref.Cases
}

// TestGGUFConformance converts each fixture tokenizer to GGUF metadata as
// llama.cpp's converter would and checks that FromGGUF reproduces the
// reference encodings and decodings, and the encodings of the ordinary
// texts of testdata/ordinary.
func TestGGUFConformance(t *testing.T) {
	for _, fx := range ggufFixtures {
		t.Run(fx.name, func(t *testing.T) {
			tok, err := FromGGUF(ggufFixtureFile(t, fx))
			if err != nil {
				t.Fatal(err)
			}
			cases := ggufReferenceCases(t, fx.name)
			pass := 0
			for i, c := range cases {
				ok := true
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("case %d %q: Encode(false)\n got %v\nwant %v", i, c.Text, got, c.IDs)
					ok = false
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("case %d %q: Encode(true)\n got %v\nwant %v", i, c.Text, got, c.IDsWithSpecial)
					ok = false
				}
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("case %d %q: Decode = %q, want %q", i, c.Text, got, c.Decoded)
					ok = false
				}
				if ok {
					pass++
				}
			}
			t.Logf("%s from GGUF: %d/%d cases exact", fx.name, pass, len(cases))
			for _, c := range loadOrdinary(t, fx.name).Cases {
				data, err := os.ReadFile(filepath.Join("testdata", "ordinary", c.File))
				if err != nil {
					t.Fatal(err)
				}
				if d := idsDiff(tok, tok.Encode(string(data), false), c.IDs); d != "" {
					t.Errorf("%s: Encode(false): %s", c.File, d)
				}
				if d := idsDiff(tok, tok.Encode(string(data), true), c.IDsWithSpecial); d != "" {
					t.Errorf("%s: Encode(true): %s", c.File, d)
				}
			}
		})
	}
}

// ggufToySPM is the metadata of a small SentencePiece ("llama") vocabulary.
func ggufToySPM() []ggufKV {
	tokens := []string{"<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "<0xA9>", "▁", "a", "b", "c", "ab", "bc", "▁ab", "<tool>", "[PAD14]"}
	types := []int32{2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 4, 5}
	scores := []float32{0, 0, 0, 0, 0, 0, -10, -10, -10, -10, -2, -1, -3, 0, 0}
	return []ggufKV{
		{"general.architecture", gguf.String("llama")},
		{ggufKeyModel, gguf.String("llama")},
		{ggufKeyTokens, gguf.Array(tokens)},
		{ggufKeyScores, gguf.Array(scores)},
		{ggufKeyTypes, gguf.Array(types)},
	}
}

// ggufToyBPE is the metadata of a small byte-level BPE ("gpt2")
// vocabulary: the 256 byte characters, a few merges, a control token and a
// user-defined one.
func ggufToyBPE(pre string) []ggufKV {
	var tokens []string
	var types []int32
	for b := range 256 {
		tokens = append(tokens, byteToStr[b])
		types = append(types, int32(TokenNormal))
	}
	merged := []string{"12", "123", "d'", byteToStr[0xC3] + byteToStr[0xA9]}
	tokens = append(tokens, merged...)
	tokens = append(tokens, "<|end|>", "<think>")
	types = append(types, 1, 1, 1, 1, int32(TokenControl), int32(TokenUserDefined))
	merges := []string{"1 2", "12 3", "d '", byteToStr[0xC3] + " " + byteToStr[0xA9]}
	kvs := []ggufKV{
		{"general.architecture", gguf.String("gpt2")},
		{ggufKeyModel, gguf.String("gpt2")},
		{ggufKeyTokens, gguf.Array(tokens)},
		{ggufKeyTypes, gguf.Array(types)},
		{ggufKeyMerges, gguf.Array(merges)},
		{ggufKeyEOS, gguf.Uint32(uint32(len(tokens) - 2))},
	}
	if pre != "" {
		kvs = append(kvs, ggufKV{ggufKeyPre, gguf.String(pre)})
	}
	return kvs
}

// ggufWith returns kvs with key set to v (replaced, or added at the end).
func ggufWith(kvs []ggufKV, key string, v gguf.Value) []ggufKV {
	out := slices.Clone(kvs)
	for i := range out {
		if out[i].key == key {
			out[i].val = v
			return out
		}
	}
	return append(out, ggufKV{key, v})
}

// ggufWithout returns kvs without key.
func ggufWithout(kvs []ggufKV, key string) []ggufKV {
	return slices.DeleteFunc(slices.Clone(kvs), func(kv ggufKV) bool { return kv.key == key })
}

func ggufTokenStrings(tok *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tok.Token(id)
	}
	return out
}

func TestGGUFSentencePiece(t *testing.T) {
	tok, err := FromGGUF(ggufParse(t, ggufToySPM()))
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 1 || tok.EOS() != 2 || !tok.AddsBOS() {
		t.Errorf("BOS %d, EOS %d, AddsBOS %v: want llama.cpp's defaults 1, 2, true", tok.BOS(), tok.EOS(), tok.AddsBOS())
	}
	if !tok.IsSpecial(1) || !tok.IsSpecial(0) || tok.IsSpecial(13) || tok.IsSpecial(7) {
		t.Errorf("IsSpecial: control and unknown tokens are special, user-defined and normal ones are not")
	}
	tests := []struct {
		name, in   string
		addSpecial bool
		want       []string
	}{
		{"space prefix and merges", "ab", false, []string{"▁ab"}},
		{"best score first", "abc", false, []string{"▁", "a", "bc"}},
		{"leading space not doubled", " ab", false, []string{"▁ab"}},
		{"byte fallback", "é", false, []string{"▁", "<0xC3>", "<0xA9>"}},
		{"newline byte", "\n", false, []string{"▁", "<0x0A>"}},
		{"unknown without byte token", "x", false, []string{"▁", "<unk>"}},
		{"BOS", "ab", true, []string{"<s>", "▁ab"}},
		{"control token in text", "<s>ab</s>", false, []string{"<s>", "▁ab", "</s>"}},
		{"user-defined token in text", "a<tool>b", false, []string{"▁", "a", "<tool>", "▁", "b"}},
		{"unused token not matched, unknowns fused", "[PAD14]", false, []string{"▁", "<unk>"}},
		{"empty", "", false, nil},
	}
	for _, tt := range tests {
		got := ggufTokenStrings(tok, tok.Encode(tt.in, tt.addSpecial))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Encode(%q, %v) = %q, want %q", tt.name, tt.in, tt.addSpecial, got, tt.want)
		}
	}
	decodes := []struct {
		ids         []int32
		skipSpecial bool
		want        string
	}{
		{[]int32{12, 6, 8}, false, "ab b"},
		{[]int32{1, 12, 13, 4, 5, 2}, false, "<s> ab<tool>é</s>"}, // only the text's first space is stripped
		{[]int32{1, 12, 13, 4, 5, 2}, true, "ab<tool>é"},
		{[]int32{-1, 99, 12}, false, "ab"},
	}
	for _, d := range decodes {
		if got := tok.Decode(d.ids, d.skipSpecial); got != d.want {
			t.Errorf("Decode(%v, %v) = %q, want %q", d.ids, d.skipSpecial, got, d.want)
		}
	}

	// Without the space prefix (Gemma), and with the flags and ids set.
	kvs := ggufWith(ggufToySPM(), ggufKeyAddSpacePrefix, gguf.Bool(false))
	kvs = ggufWith(kvs, ggufKeyAddBOS, gguf.Bool(false))
	kvs = ggufWith(kvs, ggufKeyAddEOS, gguf.Bool(true))
	kvs = ggufWith(kvs, ggufKeyEOS, gguf.Int32(13))
	tok, err = FromGGUF(ggufParse(t, kvs))
	if err != nil {
		t.Fatal(err)
	}
	if got := ggufTokenStrings(tok, tok.Encode("ab ab", true)); !slices.Equal(got, []string{"ab", "▁ab", "<tool>"}) {
		t.Errorf("no space prefix, EOS added: got %q", got)
	}
	if got := tok.Decode(tok.Encode(" ab", false), false); got != " ab" {
		t.Errorf("no space prefix: decode = %q, want %q", got, " ab")
	}
}

func TestGGUFPreTokenizers(t *testing.T) {
	decomposed := "e\u0301" // NFC: é, bytes C3 A9
	nfcTok := byteToStr[0xC3] + byteToStr[0xA9]
	tests := []struct {
		pre, in string
		want    []string
	}{
		{"gpt-2", "123", []string{"123"}},
		{"gpt-2", "d's", []string{"d", "'", "s"}},
		{"", "123", []string{"123"}},
		{"llama-bpe", "1234", []string{"123", "4"}},
		{"llama-bpe", "d's", []string{"d", "'", "s"}},
		{"qwen2", "123", []string{"1", "2", "3"}},
		{"qwen2", decomposed, []string{nfcTok}},
		{"llama-bpe", decomposed, []string{"e", byteToStr[0xCC], byteToStr[0x81]}},
		{"smollm", "123", []string{"1", "2", "3"}},
		{"gpt-4o", "d's", []string{"d'", "s"}},
		{"gpt-4o", "1234", []string{"123", "4"}},
		{"qwen2", "a<think>b<|end|>", []string{"a", "<think>", "b", "<|end|>"}},
	}
	for _, tt := range tests {
		tok, err := FromGGUF(ggufParse(t, ggufToyBPE(tt.pre)))
		if err != nil {
			t.Fatalf("pre %q: %v", tt.pre, err)
		}
		if got := ggufTokenStrings(tok, tok.Encode(tt.in, false)); !slices.Equal(got, tt.want) {
			t.Errorf("pre %q: Encode(%q) = %q, want %q", tt.pre, tt.in, got, tt.want)
		}
	}

	// Every supported name builds, and round-trips text.
	const text = "Hello, World's 1234!\n\n  x\t<think> ünï 😀<|end|>"
	for _, pre := range GGUFPreNames() {
		tok, err := FromGGUF(ggufParse(t, ggufToyBPE(pre)))
		if err != nil {
			t.Errorf("pre %q: %v", pre, err)
			continue
		}
		if got := tok.Decode(tok.Encode(text, true), false); got != text {
			t.Errorf("pre %q: round trip = %q", pre, got)
		}
		if !tok.IsSpecial(tok.EOS()) || tok.EOS() != 256+4 {
			t.Errorf("pre %q: EOS %d", pre, tok.EOS())
		}
		if tok.AddsBOS() {
			t.Errorf("pre %q: adds BOS without a BOS id", pre)
		}
	}

	// add_bos_token defaults to llama.cpp's choice for the pre name.
	for pre, want := range map[string]bool{"llama-bpe": true, "llama3": true, "pixtral": true, "qwen2": false, "gpt-2": false, "gpt-4o": false} {
		kvs := ggufWith(ggufToyBPE(pre), ggufKeyBOS, gguf.Uint32(256+4))
		tok, err := FromGGUF(ggufParse(t, kvs))
		if err != nil {
			t.Fatal(err)
		}
		if tok.AddsBOS() != want {
			t.Errorf("pre %q: AddsBOS = %v, want %v", pre, tok.AddsBOS(), want)
		}
		tok, err = FromGGUF(ggufParse(t, ggufWith(kvs, ggufKeyAddBOS, gguf.Bool(!want))))
		if err != nil {
			t.Fatal(err)
		}
		if tok.AddsBOS() == want {
			t.Errorf("pre %q: %s = %v not obeyed", pre, ggufKeyAddBOS, !want)
		}
	}
}

func TestGGUFErrors(t *testing.T) {
	spm, bpe := ggufToySPM(), ggufToyBPE("qwen2")
	tests := []struct {
		name string
		kvs  []ggufKV
		want []string // substrings of the error
	}{
		{"no tokenizer", ggufWithout(spm, ggufKeyModel), []string{ggufKeyModel, "missing"}},
		{"model not a string", ggufWith(spm, ggufKeyModel, gguf.Uint32(1)), []string{ggufKeyModel, "want a string"}},
		{"no vocabulary", ggufWith(spm, ggufKeyModel, gguf.String("no_vocab")), []string{ggufKeyModel, "no vocabulary"}},
		{"unknown model", ggufWith(spm, ggufKeyModel, gguf.String("rwkv")), []string{ggufKeyModel, `"rwkv"`, "gpt2, llama"}},
		{"charsmap not bytes", ggufWith(ggufWith(spm, ggufKeyModel, gguf.String("t5")), ggufKeyCharsmap, gguf.String("x")), []string{ggufKeyCharsmap, "array of bytes"}},
		{"charsmap too short", ggufWith(ggufWith(spm, ggufKeyModel, gguf.String("t5")), ggufKeyCharsmap, gguf.Array([]uint8{1})), []string{ggufKeyCharsmap, "too short"}},
		{"remove_extra_whitespaces not a bool", ggufWith(ggufWith(spm, ggufKeyModel, gguf.String("t5")), ggufKeyRemoveSpaces, gguf.Uint32(1)), []string{ggufKeyRemoveSpaces, "want a bool"}},
		{"missing tokens", ggufWithout(spm, ggufKeyTokens), []string{ggufKeyTokens, "missing"}},
		{"tokens not strings", ggufWith(spm, ggufKeyTokens, gguf.Array([]int32{1, 2})), []string{ggufKeyTokens, "array of int32"}},
		{"empty tokens", ggufWith(spm, ggufKeyTokens, gguf.Array([]string{})), []string{ggufKeyTokens, "empty"}},
		{"short scores", ggufWith(spm, ggufKeyScores, gguf.Array([]float32{0, 1})), []string{ggufKeyScores, "2 entries for 15 tokens"}},
		{"scores not floats", ggufWith(spm, ggufKeyScores, gguf.Array([]string{"x"})), []string{ggufKeyScores, "array of string"}},
		{"long token types", ggufWith(bpe, ggufKeyTypes, gguf.Array(make([]int32, 300))), []string{ggufKeyTypes, "300 entries for 262 tokens"}},
		{"token types not integers", ggufWith(spm, ggufKeyTypes, gguf.Array(make([]float32, 15))), []string{ggufKeyTypes, "array of float32"}},
		{"bad token type", ggufWith(spm, ggufKeyTypes, gguf.Array([]int32{2, 3, 3, 6, 6, 6, 1, 1, 1, 9, 1, 1, 1, 4, 5})), []string{ggufKeyTypes + "[9]", "unknown token type 9"}},
		{"missing merges", ggufWithout(bpe, ggufKeyMerges), []string{ggufKeyMerges, "missing"}},
		{"merge without space", ggufWith(bpe, ggufKeyMerges, gguf.Array([]string{"1 2", "123"})), []string{ggufKeyMerges + "[1]", `"123"`}},
		{"merge with empty right part", ggufWith(bpe, ggufKeyMerges, gguf.Array([]string{"1 "})), []string{ggufKeyMerges + "[0]"}},
		{"merge of unknown tokens", ggufWith(bpe, ggufKeyMerges, gguf.Array([]string{"12 4"})), []string{"merge 0", `"124" is not in the vocabulary`}},
		{"unknown pre", ggufWith(bpe, ggufKeyPre, gguf.String("klingon")), []string{ggufKeyPre, `"klingon"`, "llama-bpe", "qwen2"}},
		{"BOS out of range", ggufWith(spm, ggufKeyBOS, gguf.Uint32(15)), []string{ggufKeyBOS, "token id 15 out of range [0, 15)"}},
		{"negative EOS", ggufWith(spm, ggufKeyEOS, gguf.Int32(-2)), []string{ggufKeyEOS, "token id -2"}},
		{"EOS not an integer", ggufWith(spm, ggufKeyEOS, gguf.String("</s>")), []string{ggufKeyEOS, "want an integer, got string"}},
		{"unknown id out of range", ggufWith(bpe, ggufKeyUnk, gguf.Uint64(1<<40)), []string{ggufKeyUnk, "out of range"}},
		{"padding id out of range", ggufWith(spm, ggufKeyPad, gguf.Uint32(99)), []string{ggufKeyPad, "out of range"}},
		{"add_bos_token not a bool", ggufWith(spm, ggufKeyAddBOS, gguf.Uint8(1)), []string{ggufKeyAddBOS, "want a bool, got uint8"}},
		{"add_bos_token without BOS", ggufWith(bpe, ggufKeyAddBOS, gguf.Bool(true)), []string{ggufKeyAddBOS, "no BOS"}},
		{"add_eos_token without EOS", ggufWith(ggufWithout(bpe, ggufKeyEOS), ggufKeyAddEOS, gguf.Bool(true)), []string{ggufKeyAddEOS, "no EOS"}},
		{"add_space_prefix not a bool", ggufWith(spm, ggufKeyAddSpacePrefix, gguf.String("yes")), []string{ggufKeyAddSpacePrefix, "want a bool"}},
	}
	for _, tt := range tests {
		tok, err := FromGGUF(ggufParse(t, tt.kvs))
		if err == nil {
			t.Errorf("%s: no error (tokenizer of %d tokens)", tt.name, tok.VocabSize())
			continue
		}
		for _, w := range append(tt.want, "test.gguf") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
	}

	// -1 means none, for any id key.
	tok, err := FromGGUF(ggufParse(t, ggufWith(ggufWith(spm, ggufKeyBOS, gguf.Int32(-1)), ggufKeyAddBOS, gguf.Bool(false))))
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != -1 || tok.AddsBOS() {
		t.Errorf("bos_token_id -1: BOS %d, AddsBOS %v", tok.BOS(), tok.AddsBOS())
	}
}

// Bits of FuzzFromGGUF's flags: which keys fuzzGGUFTokenizer writes, their
// boolean values, and the ways it spoils a file.
const (
	fuzzAlphabet    = 1 << iota // the 256 byte tokens before the listed ones
	fuzzTypes                   // write tokenizer.ggml.token_type
	fuzzScores                  // write tokenizer.ggml.scores
	fuzzBOS                     // write bos_token_id
	fuzzEOS                     // write eos_token_id
	fuzzUnk                     // write unknown_token_id
	fuzzPad                     // write padding_token_id
	fuzzAddBOS                  // write add_bos_token …
	fuzzAddBOSValue             // … as true
	fuzzAddEOS                  // write add_eos_token …
	fuzzAddEOSValue             // … as true
	fuzzPrefix                  // write add_space_prefix …
	fuzzPrefixValue             // … as true
	fuzzShortTypes              // drop the last token type
	fuzzNaNScore                // make the first score NaN
	fuzzNoMerges                // leave tokenizer.ggml.merges out
)

// fuzzModels are the tokenizer.ggml.model values FuzzFromGGUF picks from:
// the three FromGGUF reads and two it refuses.
var fuzzModels = []string{"gpt2", "llama", "gemma4", "no_vocab", "bert"}

// fuzzGGUFTokenizer writes the tokenizer metadata FuzzFromGGUF's arguments
// describe as a GGUF file. model picks from fuzzModels and pre from
// GGUFPreNames, then none, then an unknown name. The vocabulary is the 256
// byte tokens (with fuzzAlphabet: byte-level characters for gpt2, <0xXX>
// tokens of type byte otherwise), then the lines of tokens, then, for gpt2
// and gemma4, the concatenation of each merge's two parts that is not in
// it yet, so that most merges are valid. types[i] and int8(scores[i]) are
// the type and score of the i-th listed token (other tokens: normal, 0).
// merges is written line by line as tokenizer.ggml.merges. The ids
// written for bos, eos, unk and pad are read
// from v%(n+3) for a vocabulary of n tokens: 0 is -1 (none), 1 is -2 and 2
// is n (both out of range), and 3 on are the ids 0 to n-1, so that the
// edges are as near as a small step of the fuzzer's; ids holds them.
func fuzzGGUFTokenizer(model, pre uint8, tokens string, types, scores []byte, merges string, bos, eos, unk, pad, flags uint16) (data []byte, ids [4]int32) {
	var vocab []string
	var tys []int32
	if flags&fuzzAlphabet != 0 {
		for b := range 256 {
			if fuzzModels[int(model)%len(fuzzModels)] == "gpt2" {
				vocab, tys = append(vocab, byteToStr[b]), append(tys, int32(TokenNormal))
			} else {
				vocab, tys = append(vocab, fmt.Sprintf("<0x%02X>", b)), append(tys, int32(TokenByte))
			}
		}
	}
	listed := len(vocab)
	if tokens != "" {
		for i, s := range strings.Split(tokens, "\n") {
			ty := int32(TokenNormal)
			if i < len(types) {
				ty = int32(types[i] % 8) // 7 is no type: an error
			}
			vocab, tys = append(vocab, s), append(tys, ty)
		}
	}
	name := fuzzModels[int(model)%len(fuzzModels)]
	var mergeLines []string
	if merges != "" {
		mergeLines = strings.Split(merges, "\n")
	}
	if name == "gpt2" || name == "gemma4" {
		for _, m := range mergeLines {
			if l, r, ok := strings.Cut(m, " "); ok && !slices.Contains(vocab, l+r) {
				vocab, tys = append(vocab, l+r), append(tys, int32(TokenNormal))
			}
		}
	}
	sc := make([]float32, len(vocab))
	for i := range sc {
		if j := i - listed; j >= 0 && j < len(scores) {
			sc[i] = float32(int8(scores[j]))
		}
	}
	if flags&fuzzNaNScore != 0 && len(sc) > 0 {
		sc[0] = float32(math.NaN())
	}
	if flags&fuzzShortTypes != 0 && len(tys) > 0 {
		tys = tys[:len(tys)-1]
	}

	for i, v := range []uint16{bos, eos, unk, pad} {
		switch k := int32(int(v) % (len(vocab) + 3)); k {
		case 0:
			ids[i] = -1
		case 1:
			ids[i] = -2
		case 2:
			ids[i] = int32(len(vocab))
		default:
			ids[i] = k - 3
		}
	}
	w := gguf.NewWriter()
	set := func(key string, v gguf.Value) bool { return w.SetKV(key, v) == nil }
	ok := set("general.architecture", gguf.String("llama")) && set(ggufKeyModel, gguf.String(name)) &&
		set(ggufKeyTokens, gguf.Array(vocab))
	names := GGUFPreNames()
	if p := int(pre) % (len(names) + 2); p < len(names) {
		ok = ok && set(ggufKeyPre, gguf.String(names[p]))
	} else if p == len(names)+1 {
		ok = ok && set(ggufKeyPre, gguf.String("klingon"))
	}
	if flags&fuzzTypes != 0 {
		ok = ok && set(ggufKeyTypes, gguf.Array(tys))
	}
	if flags&fuzzScores != 0 {
		ok = ok && set(ggufKeyScores, gguf.Array(sc))
	}
	if flags&fuzzNoMerges == 0 {
		ok = ok && set(ggufKeyMerges, gguf.Array(append([]string{}, mergeLines...)))
	}
	for _, id := range []struct {
		bit uint16
		key string
		v   int32
	}{{fuzzBOS, ggufKeyBOS, ids[0]}, {fuzzEOS, ggufKeyEOS, ids[1]}, {fuzzUnk, ggufKeyUnk, ids[2]}, {fuzzPad, ggufKeyPad, ids[3]}} {
		if flags&id.bit != 0 {
			ok = ok && set(id.key, gguf.Int32(id.v))
		}
	}
	for _, b := range []struct {
		bit, val uint16
		key      string
	}{{fuzzAddBOS, fuzzAddBOSValue, ggufKeyAddBOS}, {fuzzAddEOS, fuzzAddEOSValue, ggufKeyAddEOS}, {fuzzPrefix, fuzzPrefixValue, ggufKeyAddSpacePrefix}} {
		if flags&b.bit != 0 {
			ok = ok && set(b.key, gguf.Bool(flags&b.val != 0))
		}
	}
	var buf bytes.Buffer
	if !ok {
		return nil, ids
	}
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, ids
	}
	return buf.Bytes(), ids
}

// FuzzFromGGUF checks that FromGGUF refuses bad tokenizer metadata with an
// error naming the file and a tokenizer.ggml key, and that a tokenizer it
// builds keeps the special ids the file gives, encodes every text to ids of
// its vocabulary (BOS and EOS where it says it adds them), and, as a
// byte-level BPE vocabulary holding every byte, decodes them back to the
// text. It fuzzes the metadata (fuzzGGUFTokenizer) rather than a file's
// bytes: package gguf's FuzzParse covers the byte format, and a file of a
// few KB as one []byte input would spend CI's seconds in the fuzzer's
// quadratic minimization.
func FuzzFromGGUF(f *testing.F) {
	type seed struct {
		model, pre         uint8
		tokens             string
		types, scores      []byte
		merges             string
		bos, eos, unk, pad uint16
		flags              uint16
		text               string
	}
	preIndex := func(name string) uint8 { return uint8(slices.Index(GGUFPreNames(), name)) }
	neg := func(v ...int8) []byte {
		b := make([]byte, len(v))
		for i, x := range v {
			b[i] = byte(x)
		}
		return b
	}
	const text = "a<s>b é 123 d's<tool> Hello, World!\n<|end|><think>"
	// The toy vocabularies of the tests above: ggufToySPM, and ggufToyBPE
	// with the llama-bpe, gpt-4o and qwen2 splits.
	spm := seed{model: 1, tokens: "<unk>\n<s>\n</s>\n<0x0A>\n<0xC3>\n<0xA9>\n▁\na\nb\nc\nab\nbc\n▁ab\n<tool>\n[PAD14]",
		types: []byte{2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 4, 5}, scores: neg(0, 0, 0, 0, 0, 0, -10, -10, -10, -10, -2, -1, -3, 0, 0),
		flags: fuzzTypes | fuzzScores, text: text}
	bpe := seed{model: 0, tokens: "12\n123\nd'\n" + byteToStr[0xC3] + byteToStr[0xA9] + "\n<|end|>\n<think>",
		types: []byte{1, 1, 1, 1, 3, 4}, merges: "1 2\n12 3\nd '\n" + byteToStr[0xC3] + " " + byteToStr[0xA9],
		eos: 3 + 256 + 4, flags: fuzzAlphabet | fuzzTypes | fuzzEOS, text: text}
	seeds := []seed{spm, bpe, bpe, bpe}
	seeds[1].pre, seeds[2].pre, seeds[3].pre = preIndex("llama-bpe"), preIndex("gpt-4o"), preIndex("qwen2")
	// SentencePiece with every byte, ids and flags set; Gemma 4's form.
	full := spm
	full.flags |= fuzzAlphabet | fuzzBOS | fuzzEOS | fuzzUnk | fuzzPad | fuzzAddBOS | fuzzAddEOS | fuzzAddEOSValue | fuzzPrefix
	full.bos, full.eos, full.unk, full.pad = 3+256+1, 3+256+2, 3+256, 3+256
	gemma4 := seed{model: 2, tokens: "<pad>\n<eos>\n<bos>\n▁\na\nb\n<turn>", types: []byte{3, 3, 3, 1, 1, 1, 4},
		merges: "▁ a\na b", bos: 3 + 256 + 2, eos: 3 + 256 + 1, flags: fuzzAlphabet | fuzzTypes | fuzzBOS | fuzzEOS, text: "ab ab<turn>ç"}
	// The small SentencePiece vocabulary with its ids written.
	ids := spm
	ids.flags |= fuzzBOS | fuzzEOS | fuzzUnk | fuzzPad | fuzzAddBOS | fuzzAddBOSValue
	ids.bos, ids.eos, ids.unk, ids.pad = 3+1, 3+2, 3+0, 3+0
	seeds = append(seeds, full, gemma4, ids)
	for _, s := range seeds {
		data, _ := fuzzGGUFTokenizer(s.model, s.pre, s.tokens, s.types, s.scores, s.merges, s.bos, s.eos, s.unk, s.pad, s.flags)
		if data == nil {
			f.Fatalf("seed %+v: not written", s)
		}
		// Every seed is a tokenizer FromGGUF accepts, so that mutations
		// start from the paths past the checks.
		g, err := gguf.Parse("seed.gguf", data)
		if err == nil {
			_, err = FromGGUF(g)
		}
		if err != nil {
			f.Fatalf("seed %+v: %v", s, err)
		}
		f.Add(s.model, s.pre, s.tokens, s.types, s.scores, s.merges, s.bos, s.eos, s.unk, s.pad, s.flags, s.text)
	}
	f.Fuzz(func(t *testing.T, model, pre uint8, tokens string, types, scores []byte, merges string, bos, eos, unk, pad, flags uint16, text string) {
		data, ids := fuzzGGUFTokenizer(model, pre, tokens, types, scores, merges, bos, eos, unk, pad, flags)
		if data == nil {
			return
		}
		g, err := gguf.Parse("fuzz.gguf", data)
		if err != nil {
			t.Fatalf("a written file does not parse: %v", err)
		}
		tok, err := FromGGUF(g)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.gguf: tokenizer.ggml") {
				t.Fatalf("error does not name the file and a key: %v", err)
			}
			return
		}
		name := fuzzModels[int(model)%len(fuzzModels)]
		n := int32(tok.VocabSize())
		spec, err := SpecFromGGUF(g)
		if err != nil {
			t.Fatalf("FromGGUF accepts what SpecFromGGUF refuses: %v", err)
		}
		// The special ids are the file's (-1: none) or llama.cpp's
		// defaults, and inside the vocabulary.
		for _, id := range []struct {
			what        string
			bit         uint16
			v, got, def int32
		}{{"BOS", fuzzBOS, ids[0], tok.BOS(), 1}, {"EOS", fuzzEOS, ids[1], tok.EOS(), 2}, {"unknown", fuzzUnk, ids[2], spec.Unk, 0}, {"padding", fuzzPad, ids[3], -1, -1}} {
			if flags&id.bit != 0 && id.v != -1 && (id.v < 0 || id.v >= n) {
				t.Fatalf("accepted %s id %d for a vocabulary of %d", id.what, id.v, n)
			}
			if id.what == "padding" {
				continue // not kept
			}
			want := int32(-1)
			switch {
			case flags&id.bit != 0:
				want = id.v
			case name == "llama" && id.def < n:
				want = id.def
			case name == "bert" && id.what == "unknown" && n > 100:
				want = 100 // [UNK] of BERT's vocabularies, as llama.cpp defaults
			}
			if id.got != want {
				t.Fatalf("%s id %d, want %d", id.what, id.got, want)
			}
		}
		plain := tok.Encode(text, false)
		for _, id := range plain {
			if id < 0 || id >= n {
				t.Fatalf("Encode(%q) = %v: id %d outside the vocabulary of %d", text, plain, id, n)
			}
		}
		if name == "bert" {
			// A BERT vocabulary wraps the text in its template's [CLS]
			// and [SEP] (ids of the file or llama.cpp's defaults).
			got := tok.Encode(text, true)
			if len(got) != len(plain)+2 || !slices.Equal(got[1:len(got)-1], plain) || got[0] < 0 || got[0] >= n || got[len(got)-1] < 0 || got[len(got)-1] >= n {
				t.Fatalf("Encode(%q, true) = %v, want [CLS] %v [SEP]", text, got, plain)
			}
			return
		}
		// Encoding with special tokens adds BOS and EOS as the file says.
		if flags&fuzzAddBOS != 0 && tok.AddsBOS() != (flags&fuzzAddBOSValue != 0) {
			t.Fatalf("AddsBOS %v, but %s is %v", tok.AddsBOS(), ggufKeyAddBOS, flags&fuzzAddBOSValue != 0)
		}
		var want []int32
		if tok.AddsBOS() {
			want = append(want, tok.BOS())
		}
		want = append(want, plain...)
		if flags&fuzzAddEOS != 0 && flags&fuzzAddEOSValue != 0 {
			want = append(want, tok.EOS())
		}
		if got := tok.Encode(text, true); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q, true) = %v, want %v", text, got, want)
		}
		got := tok.Decode(plain, false)
		if name == "gpt2" && flags&fuzzAlphabet != 0 && utf8.ValidString(text) && norm.NFC.IsNormalString(text) && got != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}

// BenchmarkFromGGUF measures building a fixture tokenizer from GGUF
// metadata, beside building it from the same tokenizer.json (already read)
// as the baseline.
func BenchmarkFromGGUF(b *testing.B) {
	for _, fx := range ggufFixtures {
		f := ggufFixtureFile(b, fx)
		data, err := readMaybeGzip(filepath.Join(fixtures.Dir(b, "tokenizers", fx.name), "tokenizer.json.gz"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fx.name+"/gguf", func(b *testing.B) {
			for b.Loop() {
				if _, err := FromGGUF(f); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fx.name+"/json", func(b *testing.B) {
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
