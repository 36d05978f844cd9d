package synth

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
	"github.com/lem-engine/lem/tokenizer"
)

// TestSynthLikeGeometry checks each geometry's parameter count against the
// published figure and that its config.json parses back to the same shape.
func TestSynthLikeGeometry(t *testing.T) {
	tests := []struct {
		like      string
		params    float64 // published, in parameters
		modelType string
		rope      string // rope type of full-attention layers
		sliding   int    // number of sliding-window layers
	}{
		{"llama-3.2-1b", 1.236e9, "llama", "llama3", 0},
		{"llama-3.1-8b", 8.030e9, "llama", "llama3", 0},
		{"qwen2.5-0.5b", 0.494e9, "qwen2", "default", 0},
		{"qwen3-8b", 8.191e9, "qwen3", "default", 0},
		{"gemma-3-1b", 1.000e9, "gemma3_text", "default", 22},
		// Published: 5.1B with the vision and audio encoders (about 0.45B),
		// 2.3B "effective" without the per-layer embedding table.
		{"gemma-4-e2b", 4.63e9, "gemma4_text", "proportional", 28},
		// Qwen3.5-0.8B's text model (the published 0.8B includes the
		// vision encoder): embeddings 248320×1024, 18 DeltaNet layers of
		// 21,555,360 and 6 attention layers of 18,352,640 parameters.
		{"qwen3.5-0.8b", 0.7524e9, "qwen3_5_text", "default", 0},
		// Qwen3-30B-A3B: 30.5B parameters. gpt-oss-20b: 20.9B (the model
		// card's 21B).
		{"qwen3-30b-a3b", 30.53e9, "qwen3_moe", "default", 0},
		{"gpt-oss-20b", 20.91e9, "gpt_oss", "yarn", 12},
		// OLMo Hybrid 7B: no published parameter count was at hand; this
		// is the count of transformers' OlmoHybridConfig defaults (24
		// DeltaNet layers of 215,570,172, 8 attention layers of
		// 185,809,920 and two 100352×3840 embedding tables), 7,430,866,848.
		{"olmo-hybrid-7b", 7.4300e9, "olmo_hybrid", "default", 0},
		{"tiny", 3.3e6, "qwen3", "default", 0},
		{"small", 30.68e6, "qwen3", "default", 0},
	}
	if got, want := len(tests), len(Likes()); got != want {
		t.Errorf("test covers %d geometries, Likes has %d", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.like, func(t *testing.T) {
			g, err := Like(tt.like)
			if err != nil {
				t.Fatal(err)
			}
			if p := float64(g.Params()); math.Abs(p-tt.params)/tt.params > 0.01 {
				t.Errorf("Params = %.4g, want %.4g ± 1%%", p, tt.params)
			}
			d, _ := ParseDType("bf16")
			if got, want := g.Bytes(d), 2*g.Params(); got != want {
				t.Errorf("Bytes(bf16) = %d, want %d", got, want)
			}
			data, err := g.Config(d)
			if err != nil {
				t.Fatal(err)
			}
			c, err := model.ParseConfig(data)
			if err != nil {
				t.Fatalf("config.json does not parse: %v\n%s", err, data)
			}
			if c.ModelType != tt.modelType || c.NumHiddenLayers != g.Layers || c.HiddenSize != g.HiddenSize ||
				c.IntermediateSize != g.IntermediateSize || c.NumAttentionHeads != g.Heads ||
				c.NumKeyValueHeads != g.KVHeads || c.HeadDim != g.HeadDim || c.VocabSize != g.VocabSize ||
				c.TieWordEmbeddings != g.Tied || c.MaxPositionEmbeddings != g.MaxPositions || c.RMSNormEps != g.RMSNormEps {
				t.Errorf("config parses to %v, tied %v, ctx %d, eps %g; geometry %+v", c, c.TieWordEmbeddings, c.MaxPositionEmbeddings, c.RMSNormEps, g)
			}
			if m := g.MoE; m != nil && (c.NumExperts != m.Experts || c.NumExpertsPerTok != m.TopK ||
				!m.Stacked && c.MoEIntermediateSize != m.Inter || !c.SparseLayer(0) || !c.SparseLayer(g.Layers-1)) {
				t.Errorf("config parses to %d experts, top %d, width %d; geometry %+v", c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, *m)
			}
			if got := c.Rope(model.FullAttention).Type; got != tt.rope {
				t.Errorf("rope type %q, want %q", got, tt.rope)
			}
			sliding := 0
			for i := range c.NumHiddenLayers {
				if c.LayerType(i) == model.SlidingAttention {
					sliding++
				}
			}
			if sliding != tt.sliding {
				t.Errorf("%d sliding-window layers, want %d", sliding, tt.sliding)
			}
			gen, err := g.GenerationConfig()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := model.ParseGenerationConfig(gen); err != nil {
				t.Errorf("generation_config.json: %v", err)
			}
			names := map[string]bool{}
			for _, s := range g.Tensors() {
				if names[s.Name] {
					t.Errorf("duplicate tensor %s", s.Name)
				}
				names[s.Name] = true
			}
			if _, ok := names["lm_head.weight"]; ok == g.Tied {
				t.Errorf("lm_head present = %v with tie_word_embeddings = %v", ok, g.Tied)
			}
		})
	}
}

// TestSynthBadNames checks that unknown names give errors that list the
// known ones.
func TestSynthBadNames(t *testing.T) {
	tests := []struct {
		like, dtype string
		want        []string
	}{
		{"llama-9", "bf16", []string{`unknown model "llama-9"`, "llama-3.2-1b", "tiny"}},
		{"", "bf16", []string{`unknown model ""`}},
		{"tiny", "q4", []string{`unknown dtype "q4"`, "bf16, f16 or f32"}},
	}
	for _, tt := range tests {
		t.Run(tt.like+"/"+tt.dtype, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Write(dir, Options{Like: tt.like, DType: tt.dtype})
			if err == nil {
				t.Fatal("Write succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a failed Write left %d files", len(entries))
			}
		})
	}
}

// TestSynthTinyGenerates writes the tiny model in each dtype, loads it with
// the engine and generates.
func TestSynthTinyGenerates(t *testing.T) {
	for _, dt := range []string{"bf16", "f16", "f32"} {
		t.Run(dt, func(t *testing.T) {
			dir := t.TempDir()
			res, err := Write(dir, Options{Like: "tiny", DType: dt, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() != res.FileBytes || res.FileBytes < res.Params*int64(res.DType.Size()) {
				t.Errorf("file is %d bytes, Result says %d for %d params", st.Size(), res.FileBytes, res.Params)
			}
			m, err := engine.Open(dir, engine.Options{Backend: cpu.New(2)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got, want := m.Tokenizer.VocabSize(), m.Net.Config().VocabSize; got != want {
				t.Errorf("tokenizer has %d ids, model %d", got, want)
			}
			s := m.NewSession(64)
			logits, err := s.Append(m.Tokenizer.Encode("The engine reads a model.", false))
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("logit %d is %v", i, v)
				}
			}
			if slices.Min(logits) == slices.Max(logits) {
				t.Errorf("all logits equal %v", logits[0])
			}
			res2, err := m.Generate(context.Background(), m.NewSession(64), engine.Request{
				Prompt: []int32{1, 2, 3}, MaxTokens: 8, IgnoreModelStops: true,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res2.IDs) != 8 {
				t.Errorf("generated %d tokens, want 8", len(res2.IDs))
			}
			imEnd, ok := m.Tokenizer.TokenID(ImEnd)
			if !ok || !slices.Contains(m.StopIDs, imEnd) {
				t.Errorf("stop ids %v lack <|im_end|> (%d, %v)", m.StopIDs, imEnd, ok)
			}
		})
	}
}

// TestSynthTinyChat checks the built-in tokenizer and chat template.
func TestSynthTinyChat(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, Options{Like: "tiny"}); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"", "Hello, world!", "The model reads every weight once.", "naïve café 日本 🙂\n\ttabs  and  spaces", "<|im_start|>user\nhi<|im_end|>"} {
		ids := tok.Encode(text, true)
		if got := tok.Decode(ids, false); got != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, got)
		}
	}
	if ids := tok.Encode("the", false); len(ids) != 1 {
		t.Errorf("%q encodes to %d tokens; merges not applied", "the", len(ids))
	}
	if ids := tok.Encode("<|im_end|>", false); len(ids) != 1 || ids[0] != tok.EOS() {
		t.Errorf("<|im_end|> encodes to %v, EOS is %d", ids, tok.EOS())
	}
	set, err := chat.LoadDir(dir, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := set.Default().Render(chat.Input{
		Messages: []chat.Message{
			{Role: "system", Content: chat.Text("Be brief.")},
			{Role: "user", Content: chat.Parts(chat.Part{Type: "text", Text: "Hi"}, chat.Part{Type: "text", Text: " there"})},
		},
		AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
	if out != want {
		t.Errorf("render:\n%q\nwant\n%q", out, want)
	}
}

func TestSynthBuiltinTokenizer(t *testing.T) {
	tests := []struct {
		vocab, size int
	}{
		{259, 259},
		{512, 512},
		{1000, 1000},
		{151936, 151936}, // more than the corpus gives: filler words
	}
	for _, tt := range tests {
		bt, err := NewBuiltinTokenizer(tt.vocab)
		if err != nil {
			t.Fatal(err)
		}
		if tt.size > 0 && bt.Size() != tt.size {
			t.Errorf("vocab %d: tokenizer has %d ids", tt.vocab, bt.Size())
		}
		if bt.Size() > tt.vocab {
			t.Errorf("vocab %d: tokenizer has %d ids, more than the model", tt.vocab, bt.Size())
		}
		data, err := bt.TokenizerJSON()
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.Parse(data)
		if err != nil {
			t.Fatalf("vocab %d: %v", tt.vocab, err)
		}
		if tok.VocabSize() != bt.Size() {
			t.Errorf("vocab %d: parsed tokenizer has %d ids, want %d", tt.vocab, tok.VocabSize(), bt.Size())
		}
		// Every ordinary id decodes to text of its own (what random
		// weights generate is visible), and text never encodes to a
		// filler word.
		last := int32(len(bt.Vocab) - 1)
		if got := tok.Decode([]int32{last}, true); got == "" {
			t.Errorf("vocab %d: id %d decodes to nothing", tt.vocab, last)
		}
		for _, id := range tok.Encode("a capital quick brown fox, qax qbx", false) {
			if w := bt.Vocab[id]; strings.HasPrefix(w, "Ġq") && strings.HasSuffix(w, "x") && len(bt.Merges) < int(id)-255 {
				t.Errorf("vocab %d: text encoded to filler %q", tt.vocab, w)
			}
		}
	}
	if _, err := NewBuiltinTokenizer(100); err == nil {
		t.Error("NewBuiltinTokenizer(100) succeeded")
	}
}

// TestSynthRealTokenizer copies a real tokenizer in and sizes the
// vocabulary to it.
func TestSynthRealTokenizer(t *testing.T) {
	root := fixtures.Dir(t, "tokenizers")
	tests := []struct {
		name, src string
		vocab     int
	}{
		// Qwen 3's 151,669 ids fit the real model's padded 151,936.
		{"qwen dir on qwen geometry", filepath.Join(root, "qwen3"), 151936},
		// Llama 3's tokenizer.json given as a file.
		{"llama3 file", filepath.Join(root, "llama3", "tokenizer.json.gz"), 128256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Like("qwen2.5-0.5b")
			if err != nil {
				t.Fatal(err)
			}
			tok, err := copyTokenizer(t.TempDir(), tt.src)
			if err != nil {
				t.Fatal(err)
			}
			fitTokenizer(g, tok)
			if g.VocabSize != tt.vocab {
				t.Errorf("vocab %d, want %d (tokenizer has %d)", g.VocabSize, tt.vocab, tok.VocabSize())
			}
			if len(g.EOS) == 0 || g.EOS[0] != int(tok.EOS()) {
				t.Errorf("eos ids %v, tokenizer's EOS %d", g.EOS, tok.EOS())
			}
		})
	}

	// End to end on the tiny geometry: its 512 ids grow to the tokenizer's.
	dir := t.TempDir()
	res, err := Write(dir, Options{Like: "tiny", Tokenizer: filepath.Join(root, "qwen3")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Geometry.VocabSize != 151680 {
		t.Errorf("tiny with Qwen 3's tokenizer: vocab %d, want 151680", res.Geometry.VocabSize)
	}
	m, err := engine.Open(dir, engine.Options{Backend: cpu.New(2)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Templates == nil {
		t.Error("the chat template beside the tokenizer was not copied")
	}
	r, err := m.Generate(context.Background(), m.NewSession(32), engine.Request{
		Prompt: m.Tokenizer.Encode("Hello", false), MaxTokens: 2, IgnoreModelStops: true,
	}, nil)
	if err != nil || len(r.IDs) != 2 {
		t.Errorf("generate: %v, %d tokens", err, len(r.IDs))
	}
}

// TestSynthWeightsDeterministic checks the safetensors file: readable, the
// tensors and values the geometry and seed imply, and reproducible.
func TestSynthWeightsDeterministic(t *testing.T) {
	g, _ := Like("tiny")
	d, _ := ParseDType("bf16")
	write := func(seed uint64) []byte {
		var b bytes.Buffer
		if _, err := WriteWeights(&b, g, d, seed, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b, c := write(1), write(1), write(2)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different files")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same file")
	}
	f, err := safetensors.Parse("tiny", a)
	if err != nil {
		t.Fatal(err)
	}
	specs := g.Tensors()
	if got := f.Names(); len(got) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(got), len(specs))
	}
	for _, s := range specs {
		tt, ok := f.Tensor(s.Name)
		if !ok || !slices.Equal(tt.Shape, s.Shape) || tt.DType != safetensors.BF16 {
			t.Fatalf("tensor %s: %v %v, want %v", s.Name, tt.DType, tt.Shape, s.Shape)
		}
		vals, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		switch s.Init {
		case Ones:
			if slices.Min(vals) != 1 || slices.Max(vals) != 1 {
				t.Errorf("%s: not all ones", s.Name)
			}
		case Normal:
			var sum, sq float64
			for _, v := range vals {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			n := float64(len(vals))
			mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
			if len(vals) > 10000 && (math.Abs(mean) > 0.002 || math.Abs(std-WeightStd) > 0.002) {
				t.Errorf("%s: mean %.4f std %.4f, want 0 and %.2f", s.Name, mean, std, WeightStd)
			}
		}
	}
}

// TestSynthGemmaNorms checks that Gemma's norms are stored as zeros (it
// multiplies by 1 + w).
func TestSynthGemmaNorms(t *testing.T) {
	g, _ := Like("gemma-3-1b")
	g.VocabSize, g.Layers, g.IntermediateSize = 300, 1, 64
	d, _ := ParseDType("f32")
	var b bytes.Buffer
	if _, err := WriteWeights(&b, g, d, 1, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Parse("gemma", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.norm.weight", "model.layers.0.pre_feedforward_layernorm.weight", "model.layers.0.self_attn.q_norm.weight"} {
		tt, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		vals, _ := tt.Float32s()
		if slices.Min(vals) != 0 || slices.Max(vals) != 0 {
			t.Errorf("%s: not all zeros", name)
		}
	}
}

type failWriter struct{ left int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

// TestSynthWriteFails checks that a failing writer ends the write with an
// error naming the tensor, without hanging.
func TestSynthWriteFails(t *testing.T) {
	g, _ := Like("tiny")
	d, _ := ParseDType("f32")
	for _, left := range []int{0, 100, 5 << 20} {
		_, err := WriteWeights(&failWriter{left: left}, g, d, 1, nil)
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("after %d bytes: error %v, want disk full", left, err)
		}
	}
}

// TestSynthDirChecks checks that Write refuses a directory holding other
// files, and that a failed Write leaves no partial safetensors file.
func TestSynthDirChecks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, Options{Like: "tiny"}); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("error %v, want one naming notes.txt", err)
	}
	// Writing twice into the same directory is fine.
	dir = t.TempDir()
	for range 2 {
		if _, err := Write(dir, Options{Like: "tiny"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Write(t.TempDir(), Options{Like: "tiny", Tokenizer: filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("a missing tokenizer gave no error")
	}
}

func BenchmarkSynthWeights(b *testing.B) {
	g, _ := Like("qwen2.5-0.5b")
	g.Layers = 2
	d, _ := ParseDType("bf16")
	var n int64
	for b.Loop() {
		n, _ = WriteWeights(discard{}, g, d, 1, nil)
	}
	b.SetBytes(n)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestSynthGemma4 checks the Gemma 4 E2B geometry against its published
// effective size and that a shrunken copy of it loads and runs.
func TestSynthGemma4(t *testing.T) {
	g, _ := Like("gemma-4-e2b")
	table := int64(g.VocabSize) * int64(g.Layers*g.PerLayerInput)
	if eff := float64(g.Params() - table); math.Abs(eff-2.3e9)/2.3e9 > 0.01 {
		t.Errorf("parameters without the per-layer embedding table = %.4g, want 2.3e9 ± 1%%", eff)
	}
	g.VocabSize, g.HiddenSize, g.IntermediateSize = 320, 32, 48
	g.Heads, g.HeadDim, g.GlobalHeadDim, g.PerLayerInput = 2, 8, 16, 4
	dir := t.TempDir()
	if _, err := WriteGeometry(dir, g, Options{DType: "f32", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	b := cpu.New(1)
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := engine.NewSession(m, b, 32)
	s.SetChunk(5)
	logits, err := s.Append([]int32{5, 9, 2, 40, 41, 7, 8, 90, 3, 3, 1, 60})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 30 {
			t.Fatalf("logit %d = %g: not finite or beyond the soft cap", i, v)
		}
	}
}

// TestSynthHybridLoads writes a shrunken qwen3.5-0.8b geometry and runs it
// through the hybrid loader, so that the synthesised tensors are the ones
// the loader reads.
func TestSynthHybridLoads(t *testing.T) {
	g, _ := Like("qwen3.5-0.8b")
	g.VocabSize, g.HiddenSize, g.IntermediateSize, g.Layers = 300, 64, 96, 4
	g.BOS, g.EOS, g.Pad = -1, []int{299}, -1 // inside the smaller vocabulary
	g.Heads, g.KVHeads, g.HeadDim = 2, 1, 32
	g.Linear = &LinearAttention{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4}
	g.Extra["layer_types"] = []string{"linear_attention", "linear_attention", "linear_attention", "full_attention"}
	d, _ := ParseDType("bf16")
	dir := t.TempDir()
	cfg, err := g.Config(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeWeightsFile(filepath.Join(dir, "model.safetensors"), g, d, 3); err != nil {
		t.Fatal(err)
	}
	b := cpu.New(1)
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := engine.NewSession(m, b, 32)
	logits, err := s.Append([]int32{5, 6, 7, 8, 9})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	if slices.Min(logits) == slices.Max(logits) {
		t.Errorf("all logits equal %v", logits[0])
	}
}

// TestSynthMoEActive checks the mixtures of experts' active parameters
// against the published figures.
func TestSynthMoEActive(t *testing.T) {
	tests := []struct {
		like   string
		active float64
		embed  bool // the published figure counts the input embedding table
	}{
		// "3.3B activated", counting the embedding table in full.
		{"qwen3-30b-a3b", 3.35e9, true},
		// "3.6B active parameters", the input embedding left out.
		{"gpt-oss-20b", 3.61e9, false},
	}
	for _, tt := range tests {
		g, _ := Like(tt.like)
		got := float64(g.ActiveParams())
		if tt.embed {
			got += float64(g.VocabSize-1) * float64(g.HiddenSize)
		}
		if math.Abs(got-tt.active)/tt.active > 0.01 {
			t.Errorf("%s: %.4g active parameters, want %.4g ± 1%%", tt.like, got, tt.active)
		}
	}
}

// TestSynthLoadsAndReads writes a shrunken copy of each geometry with
// mechanisms of its own, loads it, checks what the loader accounts as read
// per decoded token against the geometry, and runs a prompt in chunks and
// a decode step.
func TestSynthLoadsAndReads(t *testing.T) {
	tests := []struct {
		like   string
		shrink func(g *Geometry)
	}{
		{"tiny", func(g *Geometry) {}},
		{"qwen3-30b-a3b", func(g *Geometry) {
			g.CutLayers(3)
			g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 96
			g.Heads, g.KVHeads, g.HeadDim = 4, 2, 16
			g.MoE = &MoE{Experts: 8, TopK: 2, Inter: 32}
		}},
		{"gpt-oss-20b", func(g *Geometry) {
			g.CutLayers(4)
			g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 32
			g.Heads, g.KVHeads, g.HeadDim = 4, 2, 16
			g.MoE = &MoE{Experts: 4, TopK: 2, Inter: 32, Stacked: true}
			g.Extra["sliding_window"] = 4
		}},
		{"gemma-4-e2b", func(g *Geometry) {
			g.VocabSize, g.HiddenSize, g.IntermediateSize = 320, 32, 48
			g.Heads, g.HeadDim, g.GlobalHeadDim, g.PerLayerInput = 2, 8, 16, 4
		}},
		{"olmo-hybrid-7b", func(g *Geometry) {
			g.CutLayers(4)
			g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 96
			g.Heads, g.KVHeads, g.HeadDim = 4, 2, 16
			g.EOS, g.Pad = []int{299}, 0
			g.Linear = &LinearAttention{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4}
		}},
		{"qwen3.5-0.8b", func(g *Geometry) {
			g.CutLayers(4)
			g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 96
			g.Heads, g.KVHeads, g.HeadDim = 2, 1, 32
			g.Linear = &LinearAttention{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.like, func(t *testing.T) {
			g, err := Like(tt.like)
			if err != nil {
				t.Fatal(err)
			}
			tt.shrink(g)
			dir := t.TempDir()
			res, err := WriteGeometry(dir, g, Options{DType: "bf16", Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			b := cpu.New(1)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			r := m.Reads
			if r.Bytes != g.Bytes(res.DType) {
				t.Errorf("loaded %d bytes of weights, the file holds %d", r.Bytes, g.Bytes(res.DType))
			}
			if want := g.DecodeBytes(res.DType); r.PerToken != want {
				t.Errorf("reads %d bytes per token, want %d", r.PerToken, want)
			}
			if e := g.MoE; e != nil {
				size := int64(res.DType.Size())
				experts := int64(g.Layers) * e.params(g.HiddenSize) * size
				// Untied: all weights but the embedding rows not looked
				// up and the experts not routed to.
				want := r.Bytes - int64(g.VocabSize-1)*int64(g.HiddenSize)*size - experts*int64(e.Experts-e.TopK)/int64(e.Experts)
				if r.Experts != experts || r.PerToken != want {
					t.Errorf("experts %d bytes, per token %d; want %d and %d", r.Experts, r.PerToken, experts, want)
				}
			} else if r.Experts != 0 || r.ActiveExperts != 0 {
				t.Errorf("a model without experts reads %d of %d expert bytes", r.ActiveExperts, r.Experts)
			}
			s := engine.NewSession(m, b, 32)
			s.SetChunk(5)
			logits, err := s.Append([]int32{5, 9, 2, 40, 41, 7, 8, 90, 3, 3, 1, 60})
			if err == nil {
				logits, err = s.Append([]int32{17})
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("logit %d is %v", i, v)
				}
			}
			if slices.Min(logits) == slices.Max(logits) {
				t.Errorf("all logits equal %v", logits[0])
			}
		})
	}
}

// TestSynthCutLayers checks that a geometry cut to fewer layers keeps its
// layer types in step, and that the cuts that cannot work are refused.
func TestSynthCutLayers(t *testing.T) {
	g, _ := Like("gpt-oss-20b")
	if err := g.CutLayers(3); err != nil {
		t.Fatal(err)
	}
	d, _ := ParseDType("bf16")
	data, err := g.Config(d)
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumHiddenLayers != 3 || len(c.LayerTypes) != 3 || c.LayerType(1) != model.FullAttention {
		t.Errorf("cut to 3 layers: %d layers, types %v", c.NumHiddenLayers, c.LayerTypes)
	}
	for _, tt := range []struct {
		like string
		n    int
	}{{"gpt-oss-20b", 0}, {"gpt-oss-20b", 25}, {"gemma-4-e2b", 10}} {
		g, _ := Like(tt.like)
		if err := g.CutLayers(tt.n); err == nil {
			t.Errorf("%s cut to %d layers: no error", tt.like, tt.n)
		}
	}
}
