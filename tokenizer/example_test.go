package tokenizer_test

import (
	"fmt"

	"github.com/lem-engine/lem/tokenizer"
)

// ExampleNew builds a tiny byte-level BPE tokenizer from a Spec, the way a
// loader for another file format would.
func ExampleNew() {
	var vocab []string
	for b := 0; b < 256; b++ {
		// The byte-level alphabet: printable bytes stand for themselves.
		if b >= '!' && b <= '~' {
			vocab = append(vocab, string(rune(b)))
		} else {
			vocab = append(vocab, "") // left out of this example
		}
	}
	vocab[' '] = "Ġ"
	vocab = append(vocab, "Ġw", "or", "Ġwor", "ld", "Ġworld", "<|end|>")
	tok, err := tokenizer.New(tokenizer.Spec{
		Model:  tokenizer.ModelBPE,
		Vocab:  vocab,
		Merges: [][2]string{{"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"}},
		Unk:    -1,
		Added:  []tokenizer.AddedToken{{ID: 261, Content: "<|end|>", Special: true}},
		PreTokenizers: []tokenizer.PreTokenizer{
			{Kind: tokenizer.PreSplit, Regex: tokenizer.PatternLlama3},
			{Kind: tokenizer.PreByteLevel},
		},
		Decoders: []tokenizer.Decoder{{Kind: tokenizer.DecByteLevel}},
		BOS:      -1,
		EOS:      261,
		AddEOS:   true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("hi world", true)
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, false))
	fmt.Printf("%q\n", tok.Decode(ids, true))
	// Output:
	// [104 105 260 261]
	// "hi world<|end|>"
	// "hi world"
}
