package chat

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// FuzzParseTokenizerConfig fuzzes the chat templates and special tokens
// read from tokenizer_config.json: what it accepts writes back as a config
// that reads the same.
func FuzzParseTokenizerConfig(f *testing.F) {
	for _, s := range []string{
		`{"chat_template":"{{ messages[0].content }}","bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"pad_token":null}`,
		`{"chat_template":[{"name":"default","template":"a"},{"name":"tool_use","template":"b"}],"unk_token":"<unk>"}`,
		`{"chat_template":[{"name":"","template":"a"}]}`, `{"chat_template":[{"name":"x","template":"a"},{"name":"x","template":"b"}]}`,
		`{"chat_template":5}`, `{"eos_token":{"content":5}}`, `{"eos_token":[]}`, `[]`, `null`, `{}`,
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
		sources, special := map[string]string{}, map[string]string{}
		if err := parseTokenizerConfig(data, sources, special); err != nil {
			return
		}
		out := map[string]any{}
		for k, v := range special {
			out[k] = v
		}
		var list []map[string]string
		for name, src := range sources {
			list = append(list, map[string]string{"name": name, "template": src})
		}
		if list != nil {
			out["chat_template"] = list
		}
		again, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		sources2, special2 := map[string]string{}, map[string]string{}
		if err := parseTokenizerConfig(again, sources2, special2); err != nil {
			t.Fatalf("%s written back as %s: %v", data, again, err)
		}
		if !maps.Equal(sources, sources2) || !maps.Equal(special, special2) {
			t.Fatalf("%s written back as %s reads %v %v, first %v %v", data, again, sources2, special2, sources, special)
		}
	})
}
