package tokenizer

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/lem-engine/lem/internal/fixtures"
)

// smallJSON is a complete byte-level tokenizer.json in miniature.
const smallJSON = `{
  "version": "1.0",
  "added_tokens": [
    {"id": 12, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
  ]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [12], "tokens": ["<|end|>"]}}},
  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5, "abc": 6, "\u00e9": 7, "Ã": 8, "©": 9, "Ã©": 10, "\"": 11},
    "merges": [["a", "b"], ["Ġ", "ab"], ["ab", "c"], ["Ã", "©"]]}
}`

func TestParseSmall(t *testing.T) {
	tok, err := Parse([]byte(smallJSON))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in      string
		special bool
		want    []int32
	}{
		{"ab abc", false, []int32{4, 5, 2}},
		{"abc", true, []int32{12, 6}},
		{"é", false, []int32{10}},
		{"e\u0301", false, nil}, // NFC makes it é: but no "e" in the vocabulary
		{"ab<|end|>", false, []int32{4, 12}},
	}
	for _, tt := range tests {
		got := tok.Encode(tt.in, tt.special)
		if tt.in == "e\u0301" {
			if want := tok.Encode("é", false); !slices.Equal(got, want) {
				t.Errorf("NFC: got %v, want %v", got, want)
			}
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %v, want %v", tt.in, got, tt.want)
		}
	}
	if tok.BOS() != 12 || tok.EOS() != -1 || !tok.AddsBOS() || tok.VocabSize() != 13 {
		t.Errorf("BOS %d EOS %d adds %v size %d", tok.BOS(), tok.EOS(), tok.AddsBOS(), tok.VocabSize())
	}
	if id, ok := tok.TokenID("Ġab"); !ok || id != 5 || tok.Token(5) != "Ġab" || tok.Token(99) != "" {
		t.Errorf("TokenID/Token wrong")
	}

	// Merges written as "a b" strings give the same tokenizer.
	alt := strings.Replace(smallJSON, `[["a", "b"], ["Ġ", "ab"], ["ab", "c"], ["Ã", "©"]]`, `["a b", "Ġ ab", "ab c", "Ã ©"]`, 1)
	tok2, err := Parse([]byte(alt))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("ab abc é", false); !slices.Equal(got, tok.Encode("ab abc é", false)) {
		t.Errorf("string merges differ: %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(smallJSON, old) {
			t.Fatalf("test bug: %q not in smallJSON", old)
		}
		return strings.Replace(smallJSON, old, new, 1)
	}
	tests := []struct {
		name, json, want string
	}{
		{"empty", "", "unexpected end"},
		{"not an object", "[]", "want '{'"},
		{"truncated", smallJSON[:len(smallJSON)/2], "offset"},
		{"trailing data", smallJSON + "x", "after the top-level value"},
		{"no model", `{"added_tokens": []}`, "no model"},
		{"unknown model", replace(`"type": "BPE"`, `"type": "WordLevel"`), "unsupported model type"},
		{"merge out of vocab", replace(`["a", "b"]`, `["a", "zz"]`), `"zz" is not in the vocabulary`},
		{"merge result out of vocab", replace(`["ab", "c"]`, `["c", "c"]`), `"cc" is not in the vocabulary`},
		{"bad merge string", replace(`["a", "b"]`, `"a b c"`), "two tokens"},
		{"bad merge pair", replace(`["a", "b"]`, `["a"]`), "two tokens"},
		{"negative id", replace(`"a": 0`, `"a": -1`), "out of range"},
		{"huge id", replace(`"a": 0`, `"a": 99999999999`), "out of range"},
		{"fractional id", replace(`"a": 0`, `"a": 0.5`), "integer"},
		{"duplicate id", replace(`"b": 1`, `"b": 0`), "used by"},
		{"added without id", replace(`"id": 12, `, ``), "no id"},
		{"added id sparse", replace(`"id": 12, `, `"id": 100000, `), "too sparse"},
		{"unknown normalizer", replace(`{"type": "NFC"}`, `{"type": "Bogus"}`), "unsupported normalizer"},
		{"unknown pre-tokenizer", replace(`{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
  ]}`, `{"type": "Bogus"}]}`), "unsupported pre-tokenizer"},
		{"bad regex", replace(`"Regex": "(?i:`, `"Regex": "((?i:`), "regex"},
		{"unknown behavior", replace(`"behavior": "Isolated"`, `"behavior": "Sideways"`), "unknown behavior"},
		{"unknown decoder", replace(`"decoder": {"type": "ByteLevel"`, `"decoder": {"type": "Bogus"`), "unsupported decoder"},
		{"unknown post-processor", replace(`{"type": "TemplateProcessing"`, `{"type": "Bogus"`), "unsupported post-processor"},
		{"template undefined token", replace(`{"SpecialToken": {"id": "<|end|>", "type_id": 0}}`, `{"SpecialToken": {"id": "<x>", "type_id": 0}}`), "not defined"},
		{"bad escape", replace(`"a": 0`, `"a\q": 0`), "bad escape"},
		{"control char", replace(`"a": 0`, "\"a\x01\": 0"), "control character"},
		{"unk not in vocab", replace(`"unk_token": null`, `"unk_token": "<unk>"`), "unk_token"},
		{"deep nesting", `{"x": ` + strings.Repeat("[", 10000), "nested too deeply"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.json))
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.want)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(plain, []byte(smallJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(smallJSON))
	zw.Close()
	gz := filepath.Join(dir, "other.json.gz")
	if err := os.WriteFile(gz, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{plain, gz} {
		tok, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%s): %v", p, err)
		}
		if got := tok.Encode("abc", false); !slices.Equal(got, []int32{6}) {
			t.Errorf("Load(%s): %v", p, got)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("Load of a missing file: no error")
	}
	bad := filepath.Join(dir, "bad.json.gz")
	os.WriteFile(bad, append([]byte{0x1f, 0x8b}, "not gzip"...), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("Load of broken gzip: %v", err)
	}

	// tokenizer_config.json overrides the post-processor and names EOS.
	cfgs := []struct {
		cfg         string
		bos, eos    int32
		withSpecial []int32
	}{
		{`{}`, 12, -1, []int32{12, 6}},
		{`{"add_bos_token": false, "eos_token": "<|end|>"}`, 12, 12, []int32{6}},
		{`{"add_eos_token": true, "eos_token": {"content": "abc"}}`, 12, 6, []int32{12, 6, 6}},
		{`{"bos_token": null}`, -1, -1, []int32{12, 6}},
	}
	for _, c := range cfgs {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(c.cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := LoadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", c.cfg, err)
		}
		if tok.BOS() != c.bos || tok.EOS() != c.eos {
			t.Errorf("%s: BOS %d EOS %d, want %d %d", c.cfg, tok.BOS(), tok.EOS(), c.bos, c.eos)
		}
		if got := tok.Encode("abc", true); !slices.Equal(got, c.withSpecial) {
			t.Errorf("%s: Encode(abc, true) = %v, want %v", c.cfg, got, c.withSpecial)
		}
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"add_bos_token": "yes"}`), 0o644)
	if _, err := LoadDir(dir); err == nil {
		t.Error("bad config: no error")
	}
}

// TestLlamaClass shows the difference the LlamaTokenizer class makes:
// tokenizer.json alone prepends "▁" to every stretch of text.
func TestLlamaClass(t *testing.T) {
	spec := fixtureSpec(t, "llama2")
	tok, err := New(*spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(" ", false); !slices.Equal(got, []int32{259}) { // "▁▁"
		t.Errorf("tokenizer.json alone: %v", got)
	}
	if got := loadFixture(t, "llama2").Encode(" ", false); !slices.Equal(got, []int32{28705}) { // "▁"
		t.Errorf("with LlamaTokenizer class: %v", got)
	}
}

func TestFixtureSpecialIDs(t *testing.T) {
	tests := []struct {
		name     string
		bos, eos string
		addsBOS  bool
	}{
		{"qwen3", "", "<|im_end|>", false},
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", false},
		{"llama2", "<s>", "</s>", true},
		{"gemma3", "<bos>", "<end_of_turn>", true},
	}
	for _, tt := range tests {
		tok := loadFixture(t, tt.name)
		id := func(s string) int32 {
			if s == "" {
				return -1
			}
			i, ok := tok.TokenID(s)
			if !ok {
				t.Fatalf("%s: no %q", tt.name, s)
			}
			return i
		}
		if tok.BOS() != id(tt.bos) || tok.EOS() != id(tt.eos) || tok.AddsBOS() != tt.addsBOS {
			t.Errorf("%s: BOS %d EOS %d adds %v", tt.name, tok.BOS(), tok.EOS(), tok.AddsBOS())
		}
		if !tok.IsSpecial(tok.EOS()) {
			t.Errorf("%s: EOS not special", tt.name)
		}
	}
	if got := loadFixture(t, "qwen3").VocabSize(); got != 151669 {
		t.Errorf("qwen3 VocabSize = %d", got)
	}
}

// TestConcurrentEncode runs many goroutines on one tokenizer (run with
// -race).
func TestConcurrentEncode(t *testing.T) {
	tok := loadFixture(t, "qwen3")
	ref := loadReference(t, "qwen3")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 3 {
				for i, c := range ref.Cases {
					if (i+g+k)%2 == 0 {
						continue
					}
					if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
						t.Errorf("goroutine %d case %d: mismatch", g, i)
						return
					}
					if got := tok.Decode(c.IDs, false); got != c.Decoded {
						t.Errorf("goroutine %d case %d: decode mismatch", g, i)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(smallJSON))
	f.Add([]byte(strings.Replace(smallJSON, `[["a", "b"], ["Ġ", "ab"], ["ab", "c"], ["Ã", "©"]]`, `["a b", "Ġ ab"]`, 1)))
	f.Add([]byte(`{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["▁a", -1.5], ["b", -2]]},
		"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
		"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
		"decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 1, "content": "<s>", "special": true, "lstrip": true, "rstrip": true, "single_word": true}]}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a(?=b)"}, "behavior": "MergedWithNext", "invert": true}}`))
	f.Add([]byte(`{"model": null}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"\ud800": 0, "\u00e9\n": 1}, "merges": [] }, "post_processor": {"type": "RobertaProcessing", "sep": ["a", 0], "cls": ["a", 0]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "a b", "ab<s> \u00e9\n", "\xff\xfe", strings.Repeat("ab", 40)} {
			for _, special := range []bool{false, true} {
				ids := tok.Encode(s, special)
				tok.Decode(ids, false)
				tok.Decode(ids, true)
				st := tok.NewStream()
				for _, id := range ids {
					st.Next(id)
				}
				st.Flush()
			}
		}
	})
}

// FuzzEncode checks the byte-level round trip: decode(encode(s)) == s for
// valid UTF-8 (NFC-normalized for the chat model, whose pipeline applies
// NFC), and that streaming gives the same text.
func FuzzEncode(f *testing.F) {
	for _, s := range scannerInputs {
		f.Add(s)
	}
	f.Add("<|end|><think>x</think><|im_end|>")
	f.Add(strings.Repeat("a", 300))
	toy, err := New(byteLevelSpec())
	if err != nil {
		f.Fatal(err)
	}
	toks := []*Tokenizer{toy}
	if fixtures.Root() != "" {
		chat, err := LoadDir(fixtures.Dir(f, "chat-model"))
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, chat)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for k, tok := range toks {
			ids := tok.Encode(s, false)
			got := tok.Decode(ids, false)
			want := s
			if k == 1 {
				want = norm.NFC.String(s)
			}
			if !utf8.ValidString(s) {
				continue
			}
			if got != want {
				t.Fatalf("tokenizer %d: decode(encode(%q)) = %q (ids %v)", k, s, got, ids)
			}
			st := tok.NewStream()
			var streamed string
			for _, id := range ids {
				streamed += st.Next(id)
			}
			if streamed += st.Flush(); streamed != got {
				t.Fatalf("tokenizer %d: stream %q, decode %q", k, streamed, got)
			}
		}
	})
}
