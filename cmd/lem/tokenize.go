package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/tokenizer"
)

func newTokenizeCmd() *cobra.Command {
	var special, decode bool
	cmd := &cobra.Command{
		Use:   "tokenize PATH (TEXT... | -)",
		Short: "Encode text to token ids, or decode ids to text",
		Long: `Tokenize encodes each TEXT with the tokenizer of the model at PATH (a Hugging
Face model directory, a tokenizer.json file, or a GGUF file) and prints one
JSON array of ids per TEXT. With "-" it reads JSON-encoded strings from
standard input, one per line, and writes one JSON array per line.

With --decode the direction reverses: each argument (or input line) is a JSON
array of ids, and the output is one JSON string per array.`,
		Example: `  lem tokenize ../shared/fixtures/chat-model "Hello, world"
  lem tokenize --special model-dir "Hello"
  echo '"Hello"' | lem tokenize model.gguf -
  lem tokenize --decode model-dir '[9707, 11, 1879]'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := loadTokenizer(args[0])
			if err != nil {
				return err
			}
			one := func(line []byte, w io.Writer) error {
				var out any
				if decode {
					var ids []int32
					if err := json.Unmarshal(line, &ids); err != nil {
						return fmt.Errorf("decode: input %q is not a JSON array of ids: %w", line, err)
					}
					for _, id := range ids {
						if id < 0 || int(id) >= tok.VocabSize() {
							return fmt.Errorf("decode: token id %d out of range [0, %d)", id, tok.VocabSize())
						}
					}
					out = tok.Decode(ids, false)
				} else {
					var text string
					if err := json.Unmarshal(line, &text); err != nil {
						return fmt.Errorf("input line %q is not a JSON string: %w", line, err)
					}
					out = nonNil(tok.Encode(text, special))
				}
				return writeJSONLine(w, out)
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			if len(args) == 2 && args[1] == "-" {
				sc := bufio.NewScanner(cmd.InOrStdin())
				sc.Buffer(make([]byte, 1<<20), 1<<30)
				for sc.Scan() {
					if len(sc.Bytes()) == 0 {
						continue
					}
					if err := one(sc.Bytes(), w); err != nil {
						return err
					}
				}
				return sc.Err()
			}
			for _, a := range args[1:] {
				line := []byte(a)
				if !decode {
					line, _ = json.Marshal(a)
				}
				if err := one(line, w); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&special, "special", false, "add the tokenizer's default special tokens (such as BOS)")
	cmd.Flags().BoolVar(&decode, "decode", false, "decode JSON arrays of ids to JSON strings")
	return cmd
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// writeJSONLine writes v as one line of JSON without HTML escaping.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// loadTokenizer opens the tokenizer of a model directory, a tokenizer.json
// file or a GGUF file.
func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Tokenizer()
}
