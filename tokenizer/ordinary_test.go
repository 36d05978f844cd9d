package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ordinaryReference is a testdata/ordinary/<name>.json file: the encodings
// of the texts beside it by Hugging Face's tokenizers library (see
// generate.js there).
type ordinaryReference struct {
	Tokenizer string `json:"tokenizer"`
	Library   string `json:"library"`
	Cases     []struct {
		File           string  `json:"file"`
		IDs            []int32 `json:"ids"`
		IDsWithSpecial []int32 `json:"ids_with_special"`
		Decoded        string  `json:"decoded"`
	} `json:"cases"`
}

// loadOrdinary reads the reference encodings of the texts of testdata/ordinary
// for the fixture tokenizer name.
func loadOrdinary(tb testing.TB, name string) ordinaryReference {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "ordinary", name+".json"))
	if err != nil {
		tb.Fatal(err)
	}
	var ref ordinaryReference
	if err := json.Unmarshal(data, &ref); err != nil {
		tb.Fatalf("parse %s.json: %v", name, err)
	}
	if ref.Tokenizer != name || len(ref.Cases) == 0 {
		tb.Fatalf("%s.json: tokenizer %q with %d cases", name, ref.Tokenizer, len(ref.Cases))
	}
	return ref
}

// idsDiff describes where got first differs from want, with the tokens
// around it, or returns "" when they are equal.
func idsDiff(tok *Tokenizer, got, want []int32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i == len(got) && i == len(want) {
		return ""
	}
	from := max(0, i-3)
	show := func(ids []int32) string {
		to := min(len(ids), i+5)
		if from >= to {
			return "(end)"
		}
		s := ""
		for _, id := range ids[from:to] {
			s += fmt.Sprintf(" %d%q", id, tok.Decode([]int32{id}, false))
		}
		return s
	}
	return fmt.Sprintf("%d ids, want %d; first difference at %d:\n got%s\nwant%s", len(got), len(want), i, show(got), show(want))
}

// TestOrdinaryText encodes a few KB of ordinary prose (several languages
// and scripts) and code with every fixture tokenizer and wants exactly the
// ids of Hugging Face's tokenizers library, with and without special
// tokens, and its decoding.
func TestOrdinaryText(t *testing.T) {
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			ref := loadOrdinary(t, name)
			for _, c := range ref.Cases {
				data, err := os.ReadFile(filepath.Join("testdata", "ordinary", c.File))
				if err != nil {
					t.Fatal(err)
				}
				text := string(data)
				if d := idsDiff(tok, tok.Encode(text, false), c.IDs); d != "" {
					t.Errorf("%s: Encode(false): %s", c.File, d)
				}
				if d := idsDiff(tok, tok.Encode(text, true), c.IDsWithSpecial); d != "" {
					t.Errorf("%s: Encode(true): %s", c.File, d)
				}
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("%s: Decode differs from the reference's decoding", c.File)
				}
			}
		})
	}
}
