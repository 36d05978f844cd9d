package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/safetensors"
	"github.com/lem-engine/lem/tiny"
)

// TestOpenTiny runs every reference case of the chat model on the embedded
// copy, and checks that it loads as the fixture directory does.
func TestOpenTiny(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := OpenTiny(Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Name != tiny.Name {
		t.Errorf("name %q, want %q", m.Name, tiny.Name)
	}
	checkChatCases(t, m, loadChatCases(t, dir))

	ref, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if !slices.Equal(m.StopIDs, ref.StopIDs) {
		t.Errorf("stop ids %v, the fixture directory gives %v", m.StopIDs, ref.StopIDs)
	}
	if m.Tokenizer.BOS() != ref.Tokenizer.BOS() || m.Tokenizer.EOS() != ref.Tokenizer.EOS() {
		t.Errorf("BOS, EOS = %d, %d; the fixture directory gives %d, %d",
			m.Tokenizer.BOS(), m.Tokenizer.EOS(), ref.Tokenizer.BOS(), ref.Tokenizer.EOS())
	}
	if m.ContextLength() != ref.ContextLength() {
		t.Errorf("context %d, want %d", m.ContextLength(), ref.ContextLength())
	}
}

// TestTinyFiles checks that the embedded files are the fixture model's,
// byte for byte, and that tiny.Parameters counts its weights.
func TestTinyFiles(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	for name, data := range map[string]string{
		"model.safetensors":      string(tiny.Weights()),
		"config.json":            tiny.Config,
		"generation_config.json": tiny.GenerationConfig,
		"tokenizer.json":         tiny.Tokenizer,
		"tokenizer_config.json":  tiny.TokenizerConfig,
	} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if data != string(want) {
			t.Errorf("embedded %s differs from %s", name, filepath.Join(dir, name))
		}
	}
	f, err := safetensors.Parse("model.safetensors", tiny.Weights())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tt := range f.Tensors() {
		n += tt.NumElements()
	}
	if n != tiny.Parameters {
		t.Errorf("tiny.Parameters = %d, the weights hold %d", tiny.Parameters, n)
	}
}

// TestOpenTinyInPlace checks that loading uses the embedded weights where
// they lie: the heap grows by far less than their 10 MB.
func TestOpenTinyInPlace(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, err := OpenTiny(Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	defer m.Close()
	allocated := after.TotalAlloc - before.TotalAlloc
	if weights := uint64(len(tiny.Weights())); allocated > weights/4 {
		t.Errorf("OpenTiny allocated %d bytes for %d bytes of weights", allocated, weights)
	}
	t.Logf("OpenTiny allocated %d bytes", allocated)
}

// BenchmarkOpenTiny measures startup on the embedded model: loading it,
// and loading it and decoding the first token of a chat prompt.
func BenchmarkOpenTiny(b *testing.B) {
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			m, err := OpenTiny(Options{Backend: cpu.New(0)})
			if err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
	b.Run("first-token", func(b *testing.B) {
		for b.Loop() {
			m, err := OpenTiny(Options{Backend: cpu.New(0)})
			if err != nil {
				b.Fatal(err)
			}
			ids := m.Tokenizer.Encode("<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n", false)
			if _, err := m.Generate(b.Context(), m.NewSession(0), Request{Prompt: ids, MaxTokens: 1}, nil); err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
	})
}
