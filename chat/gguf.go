package chat

import (
	"fmt"
	"strings"

	"github.com/lem-engine/lem/gguf"
)

// FromGGUF reads the chat templates stored in a GGUF file's metadata:
// tokenizer.chat_template (the default) and tokenizer.chat_template.NAME
// variants, given the BOS and EOS token texts from tokenizer.ggml.*. A file
// without templates gives ErrNoTemplate.
func FromGGUF(f *gguf.File) (*Set, error) {
	sources := map[string]string{}
	for _, kv := range f.KV {
		if kv.Key == "tokenizer.chat_template" {
			sources[DefaultName], _ = f.String(kv.Key)
		} else if name, ok := strings.CutPrefix(kv.Key, "tokenizer.chat_template."); ok {
			sources[name], _ = f.String(kv.Key)
		}
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("%s: %w", f.Name, ErrNoTemplate)
	}
	special := map[string]string{}
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	for key, id := range map[string]string{"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id"} {
		if v, ok := f.Uint(id); ok && v < uint64(len(tokens)) {
			special[key] = tokens[v]
		}
	}
	return NewSet(sources, Options{SpecialTokens: special})
}
