package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// referenceCase is one entry of a fixture's reference.json.
type referenceCase struct {
	Text           string  `json:"text"`
	IDs            []int32 `json:"ids"`
	IDsWithSpecial []int32 `json:"ids_with_special"`
	Decoded        string  `json:"decoded"`
}

type reference struct {
	Tokenizer string          `json:"tokenizer"`
	Cases     []referenceCase `json:"cases"`
}

var fixtureTokenizers = []string{"qwen3", "llama3", "llama2", "gemma3"}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadFixture loads a fixture tokenizer once per test binary.
func loadFixture(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	dir := fixtures.Dir(tb, "tokenizers", name)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[name]; ok {
		return t
	}
	t, err := LoadDir(dir)
	if err != nil {
		tb.Fatalf("LoadDir(%s): %v", dir, err)
	}
	loaded[name] = t
	return t
}

// fixtureSpec parses a fixture's tokenizer.json.
func fixtureSpec(tb testing.TB, name string) *Spec {
	tb.Helper()
	data, err := readMaybeGzip(filepath.Join(fixtures.Dir(tb, "tokenizers", name), "tokenizer.json.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		tb.Fatal(err)
	}
	return spec
}

func loadReference(tb testing.TB, name string) reference {
	tb.Helper()
	dir := fixtures.Dir(tb, "tokenizers", name)
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		tb.Fatalf("parse reference.json: %v", err)
	}
	return ref
}

func TestConformance(t *testing.T) {
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			ref := loadReference(t, name)
			if len(ref.Cases) == 0 {
				t.Fatal("no cases")
			}
			pass := 0
			for i, c := range ref.Cases {
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
			t.Logf("%s: %d/%d cases exact", name, pass, len(ref.Cases))
		})
	}
}

// TestStreamConformance feeds every fixture case's ids one at a time and
// checks that the deltas add up to the full decode.
func TestStreamConformance(t *testing.T) {
	for _, name := range fixtureTokenizers {
		t.Run(name, func(t *testing.T) {
			tok := loadFixture(t, name)
			ref := loadReference(t, name)
			for i, c := range ref.Cases {
				for _, ids := range [][]int32{c.IDs, c.IDsWithSpecial} {
					for _, skip := range []bool{false, true} {
						s := tok.NewStream()
						s.SkipSpecial = skip
						var got string
						for _, id := range ids {
							got += s.Next(id)
						}
						got += s.Flush()
						if want := tok.Decode(ids, skip); got != want {
							t.Errorf("case %d %q skip=%v: stream %q, decode %q", i, c.Text, skip, got, want)
						}
					}
				}
			}
		})
	}
}

type chatReference struct {
	Cases []struct {
		Prompt     string  `json:"prompt"`
		PromptIDs  []int32 `json:"prompt_ids"`
		GreedyIDs  []int32 `json:"greedy_ids"`
		GreedyText string  `json:"greedy_text"`
	} `json:"cases"`
}

func TestChatModelTokenizer(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref chatReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) == 0 {
		t.Fatal("no cases")
	}
	for i, c := range ref.Cases {
		if got := tok.Encode(c.Prompt, true); !slices.Equal(got, c.PromptIDs) {
			t.Errorf("case %d: Encode(prompt)\n got %v\nwant %v", i, got, c.PromptIDs)
		}
		if got := tok.Decode(c.GreedyIDs, false); got != c.GreedyText {
			t.Errorf("case %d: Decode(greedy) = %q, want %q", i, got, c.GreedyText)
		}
		s := tok.NewStream()
		var got string
		for _, id := range c.GreedyIDs {
			got += s.Next(id)
		}
		if got += s.Flush(); got != c.GreedyText {
			t.Errorf("case %d: stream = %q, want %q", i, got, c.GreedyText)
		}
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || tok.EOS() != id {
		t.Errorf("EOS = %d, want <|im_end|> (%d, %v)", tok.EOS(), id, ok)
	}
}
