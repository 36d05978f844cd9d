package tokenizer

import (
	"slices"
	"testing"
)

// TestFastPathsAgree checks the shortcuts against the plain pipeline on the
// benchmark corpus and the fixture texts: the byte-level mapping deferred to
// the model (byte-level BPE), and the cuts before "▁" (SentencePiece BPE).
func TestFastPathsAgree(t *testing.T) {
	texts := []string{corpus(t, "prose", 20_000), corpus(t, "code", 20_000)}
	for _, name := range fixtureTokenizers {
		for _, c := range loadReference(t, name).Cases {
			texts = append(texts, c.Text)
		}
	}
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			spec := fixtureSpec(t, name)
			fast, err := New(*spec)
			if err != nil {
				t.Fatal(err)
			}
			if fast.model.(*bpeModel).byteLevel {
				// A trailing step that never splits makes the byte-level
				// mapping happen in the pre-tokenizer.
				spec.PreTokenizers = append(spec.PreTokenizers, PreTokenizer{Kind: PreSplit, Pattern: "\x00never\x00"})
			}
			slow, err := New(*spec)
			if err != nil {
				t.Fatal(err)
			}
			m := slow.model.(*bpeModel)
			switch {
			case m.byteLevel:
				t.Fatal("byte-level mapping still deferred")
			case m.safeSplit:
				m.safeSplit = false
			case !fast.model.(*bpeModel).byteLevel:
				t.Fatal("neither shortcut applies")
			}
			for i, s := range texts {
				if a, b := fast.Encode(s, false), slow.Encode(s, false); !slices.Equal(a, b) {
					t.Errorf("text %d %q: fast and plain paths differ\nfast  %v\nplain %v", i, s[:min(len(s), 60)], a, b)
				}
			}
		})
	}
}
