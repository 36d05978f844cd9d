package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// corpus builds about size bytes of text from testdata/<kind>.txt,
// deterministically: lines are drawn at random and about one word in ten is
// replaced by a made-up word, so that the word cache does not see only
// repeats.
func corpus(tb testing.TB, kind string, size int) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", kind+".txt"))
	if err != nil {
		tb.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	syllables := []string{"ka", "lo", "ri", "men", "tu", "sha", "vel", "or", "qui", "dan", "pe", "zor", "ith", "ba"}
	r := rand.New(rand.NewPCG(1, uint64(len(kind))))
	var b strings.Builder
	for b.Len() < size {
		words := strings.Split(lines[r.IntN(len(lines))], " ")
		for i, w := range words {
			if w != "" && r.IntN(10) == 0 {
				var m strings.Builder
				for k := 1 + r.IntN(3); k > 0; k-- {
					m.WriteString(syllables[r.IntN(len(syllables))])
				}
				if r.IntN(4) == 0 {
					m.WriteString(strings.Repeat("7", r.IntN(4)))
				}
				words[i] = m.String()
			}
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// resetCache empties the model's word cache (for cold-cache benchmarks).
func resetCache(t *Tokenizer) {
	switch m := t.model.(type) {
	case *bpeModel:
		m.cache = newWordCache(len(m.cache.slots))
	case *unigramModel:
		m.cache = newWordCache(len(m.cache.slots))
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"qwen3", "gemma3", "llama3", "llama2"} {
		for _, kind := range []string{"prose", "code"} {
			text := corpus(b, kind, 100_000)
			b.Run(name+"/"+kind, func(b *testing.B) {
				tok := loadFixture(b, name)
				tok.Encode(text, false) // warm the word cache
				b.SetBytes(int64(len(text)))
				b.ResetTimer()
				for b.Loop() {
					tok.Encode(text, false)
				}
			})
			b.Run(name+"/"+kind+"/cold", func(b *testing.B) {
				tok := loadFixture(b, name)
				b.SetBytes(int64(len(text)))
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					resetCache(tok)
					b.StartTimer()
					tok.Encode(text, false)
				}
			})
		}
	}
}

// BenchmarkEncodeParallel encodes from all procs at once on one tokenizer.
func BenchmarkEncodeParallel(b *testing.B) {
	tok := loadFixture(b, "qwen3")
	text := corpus(b, "prose", 100_000)
	tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text, false)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"qwen3", "gemma3"} {
		b.Run(name, func(b *testing.B) {
			tok := loadFixture(b, name)
			text := corpus(b, "prose", 100_000)
			ids := tok.Encode(text, false)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.Decode(ids, false)
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	for _, name := range []string{"qwen3", "gemma3"} {
		b.Run(name, func(b *testing.B) {
			tok := loadFixture(b, name)
			text := corpus(b, "prose", 20_000)
			ids := tok.Encode(text, false)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				s := tok.NewStream()
				for _, id := range ids {
					s.Next(id)
				}
				s.Flush()
			}
		})
	}
}

// BenchmarkLoad parses tokenizer.json (already decompressed) and builds the
// tokenizer.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"qwen3", "llama3", "gemma3"} {
		b.Run(name, func(b *testing.B) {
			data, err := readMaybeGzip(filepath.Join(fixtures.Dir(b, "tokenizers", name), "tokenizer.json.gz"))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
