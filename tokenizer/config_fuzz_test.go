package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// FuzzApplyConfig fuzzes tokenizer_config.json over a small byte-level
// tokenizer: what it accepts leaves BOS and EOS inside the vocabulary (or
// -1), and encoding with special tokens then adds exactly the BOS and EOS
// the config asks for.
func FuzzApplyConfig(f *testing.F) {
	for _, s := range []string{
		`{"add_bos_token":true,"add_eos_token":false,"bos_token":"<|end|>","eos_token":{"content":"<|end|>","special":true}}`,
		`{"add_bos_token":false,"add_eos_token":true,"bos_token":null,"eos_token":"<think>"}`,
		`{"tokenizer_class":"LlamaTokenizerFast","legacy":false,"add_prefix_space":true,"bos_token":"he"}`,
		`{"bos_token":"nope","eos_token":5}`, `{"add_bos_token":"yes"}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	if root := fixtures.Root(); root != "" {
		paths, _ := filepath.Glob(filepath.Join(root, "tokenizers", "*", "tokenizer_config.json"))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec := byteLevelSpec()
		if err := applyConfig(&spec, data); err != nil {
			return
		}
		tok, err := New(spec)
		if err != nil {
			return
		}
		n := int32(tok.VocabSize())
		for _, id := range []int32{tok.BOS(), tok.EOS()} {
			if id < -1 || id >= n {
				t.Fatalf("special id %d outside [-1, %d)", id, n)
			}
		}
		ids := tok.Encode("hi there", true)
		plain := tok.Encode("hi there", false)
		want := len(plain)
		if spec.AddBOS && tok.BOS() >= 0 {
			want++
			if ids[0] != tok.BOS() {
				t.Fatalf("add_bos_token: %v does not start with BOS %d", ids, tok.BOS())
			}
		}
		if spec.AddEOS && tok.EOS() >= 0 {
			want++
			if ids[len(ids)-1] != tok.EOS() {
				t.Fatalf("add_eos_token: %v does not end with EOS %d", ids, tok.EOS())
			}
		}
		if !spec.AddBOS && !spec.AddEOS && len(spec.Prefix) == 0 && len(spec.Suffix) == 0 && len(ids) != want {
			t.Fatalf("no special tokens asked for, got %v for %v", ids, plain)
		}
		if strings.Contains(tok.Decode(plain, false), "\ufffd") {
			t.Fatalf("plain text does not decode back: %v", plain)
		}
	})
}
