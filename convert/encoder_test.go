package convert

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
)

var bgeTiny = filepath.Join("..", "server", "testdata", "encoders", "bge-tiny")

var encoderTexts = []string{"hello world", "the cat sat on the mat", "a"}

// encoderEmbeddings tokenizes the texts with the model's own tokenizer and
// returns their ids and pooled, normalised embeddings.
func encoderEmbeddings(t *testing.T, path string) ([][]int32, [][]float32) {
	t.Helper()
	e, err := engine.OpenEncoder(path, engine.Options{Backend: cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Embedding.Pooling != engine.PoolFirst {
		t.Fatalf("%s: pooling %v, want CLS (first token)", path, e.Embedding.Pooling)
	}
	var ids [][]int32
	var ins []model.EncoderInput
	for _, s := range encoderTexts {
		x, _ := e.Tokenizer.EncodeSpecial(s)
		ids = append(ids, x)
		ins = append(ins, model.EncoderInput{IDs: x})
	}
	out, err := e.Net.Encode(ins)
	if err != nil {
		t.Fatal(err)
	}
	hid := e.Net.Config().HiddenSize
	var embs [][]float32
	for _, o := range out {
		v := append([]float32(nil), o.Hidden[:hid]...)
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		for i := range v {
			v[i] /= float32(math.Sqrt(n))
		}
		embs = append(embs, v)
	}
	return ids, embs
}

func cosine(a, b []float32) (cos, maxAbs float64) {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
		maxAbs = max(maxAbs, math.Abs(float64(a[i]-b[i])))
	}
	return ab / math.Sqrt(aa*bb), maxAbs
}

// TestEncoderGGUF converts a BGE-style BERT directory to GGUF files and
// checks that they tokenize alike and embed as the directory does.
func TestEncoderGGUF(t *testing.T) {
	wantIDs, want := encoderEmbeddings(t, bgeTiny)
	for _, tc := range []struct {
		typ    string
		cos    float64
		maxAbs float64
	}{
		{"f32", 0.999999, 1e-5}, // the bf16 checkpoint's values exactly
		{"bf16", 0.999999, 1e-5},
		{"f16", 0.999999, 1e-4},
		{"q8_0", 0.9995, 0.02},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bge-"+tc.typ+".gguf")
			if _, err := ToGGUF(bgeTiny, path, GGUFOptions{Type: tc.typ, Threads: 1}); err != nil {
				t.Fatal(err)
			}
			ids, got := encoderEmbeddings(t, path)
			for i := range want {
				if !slices.Equal(ids[i], wantIDs[i]) {
					t.Errorf("%q: GGUF tokens %v, directory %v", encoderTexts[i], ids[i], wantIDs[i])
				}
				c, m := cosine(got[i], want[i])
				if c < tc.cos || m > tc.maxAbs {
					t.Errorf("%q: cosine %.7f, max abs %.2g against the directory (want ≥ %g, ≤ %g)", encoderTexts[i], c, m, tc.cos, tc.maxAbs)
				}
			}
			if _, err := engine.Open(path, engine.Options{Backend: cpu.New(1)}); !errors.Is(err, model.ErrEncoder) || !strings.Contains(err.Error(), "OpenEncoder") {
				t.Errorf("engine.Open of an encoder GGUF: %v, want model.ErrEncoder naming OpenEncoder", err)
			}
			if !model.IsEncoderPath(path) {
				t.Error("IsEncoderPath is false for the file")
			}
		})
	}
}

// rewrite copies a GGUF file, changing its metadata and tensors.
func rewrite(t *testing.T, src, dst string, kv func(k string, v gguf.Value) (gguf.Value, bool), tensor func(ti gguf.TensorInfo) (gguf.TensorInfo, bool)) {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, x := range f.KV {
		if x.Key == "general.alignment" {
			continue
		}
		if v, keep := kv(x.Key, x.Value); keep {
			if err := w.SetKV(x.Key, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ti := range f.Tensors {
		data := f.TensorData(ti)
		nt, keep := tensor(ti)
		if !keep {
			continue
		}
		if nt.Dims[0] != ti.Dims[0] || len(nt.Dims) != len(ti.Dims) {
			data = make([]byte, len(data)/int(ti.Dims[0])*int(nt.Dims[0]))
		}
		if err := w.AddTensor(nt.Name, nt.Type, nt.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEncoderGGUFBad checks that broken encoder files give errors naming
// what is wrong.
func TestEncoderGGUFBad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	if _, err := ToGGUF(bgeTiny, good, GGUFOptions{Type: "f32", Threads: 1}); err != nil {
		t.Fatal(err)
	}
	keepKV := func(k string, v gguf.Value) (gguf.Value, bool) { return v, true }
	keepT := func(ti gguf.TensorInfo) (gguf.TensorInfo, bool) { return ti, true }
	for _, tc := range []struct {
		name   string
		kv     func(string, gguf.Value) (gguf.Value, bool)
		tensor func(gguf.TensorInfo) (gguf.TensorInfo, bool)
		want   string
	}{
		{"missing tensor", keepKV, func(ti gguf.TensorInfo) (gguf.TensorInfo, bool) { return ti, ti.Name != "blk.1.attn_k.weight" }, "encoder.layer.1.attention.self.key.weight is missing"},
		{"wrong shape", keepKV, func(ti gguf.TensorInfo) (gguf.TensorInfo, bool) {
			if ti.Name == "blk.0.ffn_up.weight" {
				ti.Dims = []int64{16, ti.Dims[1]}
			}
			return ti, true
		}, "encoder.layer.0.intermediate.dense.weight has shape"},
		{"unknown tensor", keepKV, func(ti gguf.TensorInfo) (gguf.TensorInfo, bool) {
			if ti.Name == "blk.0.ffn_up.bias" {
				ti.Name = "blk.0.ffn_gate_inp.bias"
			}
			return ti, true
		}, "tensors not part of a bert model: blk.0.ffn_gate_inp.bias"},
		{"unknown tokenizer model", func(k string, v gguf.Value) (gguf.Value, bool) {
			if k == "tokenizer.ggml.model" {
				return gguf.String("wordpiece2"), true
			}
			return v, true
		}, keepT, `unsupported tokenizer model "wordpiece2"`},
		{"missing key", func(k string, v gguf.Value) (gguf.Value, bool) { return v, k != "bert.attention.head_count" }, keepT, "missing key bert.attention.head_count"},
		{"causal", func(k string, v gguf.Value) (gguf.Value, bool) {
			if k == "bert.attention.causal" {
				return gguf.Bool(true), true
			}
			return v, true
		}, keepT, "bert.attention.causal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".gguf")
			rewrite(t, good, path, tc.kv, tc.tensor)
			_, err := engine.OpenEncoder(path, engine.Options{Backend: cpu.New(1)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenEncoder: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestEncoderGGUFLlamaServer checks lem's BERT GGUF file against llama.cpp:
// llama-server --embeddings --pooling cls must load it and give the
// embeddings lem gives. It runs when LEM_LLAMA_SERVER names the binary.
func TestEncoderGGUFLlamaServer(t *testing.T) {
	bin := os.Getenv("LEM_LLAMA_SERVER")
	if bin == "" {
		t.Skip("LEM_LLAMA_SERVER is not set")
	}
	script, _ := filepath.Abs(filepath.Join("..", "scripts", "llamaembed.py"))
	for _, tc := range []struct{ name, dir, typ string }{
		{"bge", bgeTiny, "f16"}, {"bge", bgeTiny, "q8_0"},
		{"xlmr", xlmrUnigramDir(t), "f16"}, {"xlmr", xlmrUnigramDir(t), "q8_0"},
	} {
		typ := tc.name + "-" + tc.typ
		path := filepath.Join(t.TempDir(), typ+".gguf")
		if _, err := ToGGUF(tc.dir, path, GGUFOptions{Type: tc.typ, Threads: 1}); err != nil {
			t.Fatal(err)
		}
		_, embs := encoderEmbeddings(t, path)
		args := append([]string{script, "--server", bin, "--model", path}, encoderTexts...)
		ref, err := exec.Command("python3", args...).Output()
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		lines := strings.Split(strings.TrimSpace(string(ref)), "\n")
		if len(lines) != len(encoderTexts) {
			t.Fatalf("llama-server gave %d embeddings, want %d:\n%s", len(lines), len(encoderTexts), ref)
		}
		for i, ln := range lines {
			var v []float32
			for _, f := range strings.Fields(ln) {
				x, err := strconv.ParseFloat(f, 64)
				if err != nil {
					t.Fatal(err)
				}
				v = append(v, float32(x))
			}
			c, m := cosine(v, embs[i])
			t.Logf("%s %q: cosine %.6f, max abs %.2g", typ, encoderTexts[i], c, m)
			if c < 0.999 {
				t.Errorf("%s %q: cosine %.6f against llama-server, want ≥ 0.999", typ, encoderTexts[i], c)
			}
		}
	}
}

// xlmrUnigramDir returns a directory holding the xlm-roberta fixture model
// with CLS pooling (as bge-m3) and a SentencePiece Unigram tokenizer in
// XLM-RoBERTa's pipeline whose vocabulary fits its 300 embeddings: the
// first 300 pieces of tokenizer/testdata/encoders/xlmr-xlnet-spiece.json.gz
// with their scores, and its real precompiled charsmap.
func xlmrUnigramDir(t *testing.T) string {
	t.Helper()
	return unigramDir(t, filepath.Join("..", "model", "testdata", "encoders", "xlm-roberta"), true)
}

// unigramDir copies the model of src (config.json and model.safetensors)
// into a directory with the Unigram tokenizer of xlmrUnigramDir, and with
// CLS pooling when cls is set.
func unigramDir(t *testing.T, src string, cls bool) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"modules.json":          `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`,
		"1_Pooling/config.json": `{"word_embedding_dimension":32,"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false}`,
	}
	if !cls {
		files = nil
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(filepath.Join("..", "tokenizer", "testdata", "encoders", "xlmr-xlnet-spiece.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var tj map[string]any
	if err := json.Unmarshal(data, &tj); err != nil {
		t.Fatal(err)
	}
	m := tj["model"].(map[string]any)
	vocab := m["vocab"].([]any)[:300]
	seen := map[string]bool{}
	for i, e := range vocab {
		// xlnet's pieces repeat <pad> (id 6); llama.cpp needs each once.
		piece := e.([]any)[0].(string)
		if seen[piece] {
			vocab[i] = []any{"<unused" + strconv.Itoa(i) + ">", e.([]any)[1]}
		}
		seen[piece] = true
	}
	m["vocab"] = vocab
	var added []any
	for _, a := range tj["added_tokens"].([]any) {
		if a.(map[string]any)["id"].(float64) < 300 {
			added = append(added, a)
		}
	}
	tj["added_tokens"] = added
	out, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEncoderGGUFXLMRoberta converts an XLM-RoBERTa directory with a
// Unigram tokenizer (bge-m3, multilingual-e5) to GGUF files in llama.cpp's
// layout (architecture bert, the position table without its padding_idx +
// 1 unused rows, tokenizer model t5 with scores and the charsmap) and
// checks that they tokenize alike and embed as the directory does.
func TestEncoderGGUFXLMRoberta(t *testing.T) {
	dir := xlmrUnigramDir(t)
	wantIDs, want := encoderEmbeddings(t, dir)
	unk := 0
	for _, ids := range wantIDs {
		for _, id := range ids {
			if id == 3 {
				unk++
			}
		}
	}
	if unk > 3 {
		t.Fatalf("the test vocabulary spells the texts with %d unknown tokens: %v", unk, wantIDs)
	}
	for _, tc := range []struct {
		typ    string
		cos    float64
		maxAbs float64
	}{
		{"f32", 0.999999, 1e-5},
		{"f16", 0.999999, 1e-4},
		{"q8_0", 0.9995, 0.02},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "xlmr-"+tc.typ+".gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: tc.typ, Threads: 1}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if a := f.Architecture(); a != "bert" {
				t.Errorf("architecture %q, want bert", a)
			}
			if v, _ := f.Value("tokenizer.ggml.model"); v.String() != `"t5"` && v.String() != "t5" {
				t.Errorf("tokenizer.ggml.model %v, want t5", v)
			}
			if v, ok := f.Value("tokenizer.ggml.precompiled_charsmap"); !ok || v.Len() < 1000 {
				t.Errorf("tokenizer.ggml.precompiled_charsmap: %v entries", v.Len())
			}
			if n, _ := f.Uint("bert.context_length"); n != 62 {
				t.Errorf("bert.context_length %d, want 62 (64 positions less padding_idx + 1)", n)
			}
			if ti, _, ok := f.Tensor("position_embd.weight"); !ok || ti.Dims[1] != 62 {
				t.Errorf("position_embd.weight: %v, want 62 rows", ti.Dims)
			}
			f.Close()
			ids, got := encoderEmbeddings(t, path)
			for i := range want {
				if !slices.Equal(ids[i], wantIDs[i]) {
					t.Errorf("%q: GGUF tokens %v, directory %v", encoderTexts[i], ids[i], wantIDs[i])
				}
				c, m := cosine(got[i], want[i])
				if c < tc.cos || m > tc.maxAbs {
					t.Errorf("%q: cosine %.7f, max abs %.2g against the directory (want ≥ %g, ≤ %g)", encoderTexts[i], c, m, tc.cos, tc.maxAbs)
				}
			}
		})
	}
}

var rerankPairs = [][2]string{
	{"what is the capital of france?", "paris is the capital of france."},
	{"what is the capital of france?", "the cat sat on the mat"},
	{"a", "b"},
}

// rerankScores tokenizes the pairs with the model's own tokenizer and
// returns their ids and the head's logits.
func rerankScores(t *testing.T, path string) ([][]int32, [][]float32) {
	t.Helper()
	e, err := engine.OpenEncoder(path, engine.Options{Backend: cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Net.Labels() == 0 {
		t.Fatalf("%s: no classification head", path)
	}
	var ids [][]int32
	var ins []model.EncoderInput
	for _, p := range rerankPairs {
		x, types := e.Tokenizer.EncodePair(p[0], p[1])
		ids = append(ids, x)
		ins = append(ins, model.EncoderInput{IDs: x, TypeIDs: types})
	}
	out, err := e.Net.Encode(ins)
	if err != nil {
		t.Fatal(err)
	}
	var logits [][]float32
	for _, o := range out {
		logits = append(logits, o.Logits)
	}
	return ids, logits
}

// TestEncoderGGUFReranker converts XLM-RoBERTa cross-encoders (bge-reranker
// style, with the base model under "roberta.") to GGUF files holding the
// head as llama.cpp stores it (cls, cls.output, pooling_type rank) and
// checks that pairs tokenize alike and score as in the directory: with its
// WordPiece tokenizer and with a Unigram one.
func TestEncoderGGUFReranker(t *testing.T) {
	reranker := filepath.Join("..", "server", "testdata", "encoders", "reranker-tiny")
	// BERT's head (pooler and a 3-label classifier) with bge-tiny's
	// tokenizer.
	bertCls := t.TempDir()
	for _, f := range []string{"../model/testdata/encoders/bert-cls/config.json", "../model/testdata/encoders/bert-cls/model.safetensors", "../server/testdata/encoders/bge-tiny/tokenizer.json"} {
		data, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bertCls, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, dir string
	}{
		{"wordpiece", reranker},
		{"unigram", unigramDir(t, reranker, false)},
		{"bert", bertCls},
	} {
		wantIDs, want := rerankScores(t, tc.dir)
		for _, q := range []struct {
			typ string
			tol float64
		}{{"f32", 1e-5}, {"f16", 1e-3}, {"q8_0", 0.05}} {
			t.Run(tc.name+"-"+q.typ, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "reranker.gguf")
				if _, err := ToGGUF(tc.dir, path, GGUFOptions{Type: q.typ, Threads: 1}); err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if n, _ := f.Uint("bert.pooling_type"); n != model.GGUFPoolRank {
					t.Errorf("bert.pooling_type %d, want %d (rank)", n, model.GGUFPoolRank)
				}
				for _, name := range []string{"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"} {
					if _, _, ok := f.Tensor(name); !ok {
						t.Errorf("tensor %s missing", name)
					}
				}
				// As llama.cpp's converter: every label list but
				// transformers' default pair is written.
				if v, ok := f.Value("bert.classifier.output_labels"); !ok || v.Len() != len(want[0]) {
					t.Errorf("bert.classifier.output_labels: %v (present %v), want %d labels", v, ok, len(want[0]))
				}
				f.Close()
				ids, got := rerankScores(t, path)
				for i := range want {
					if !slices.Equal(ids[i], wantIDs[i]) {
						t.Errorf("%q: GGUF tokens %v, directory %v", rerankPairs[i], ids[i], wantIDs[i])
					}
					if len(got[i]) != len(want[i]) {
						t.Fatalf("%d logits, directory %d", len(got[i]), len(want[i]))
					}
					for j := range want[i] {
						if d := math.Abs(float64(got[i][j] - want[i][j])); d > q.tol {
							t.Errorf("%q: logit %d %g, directory %g", rerankPairs[i], j, got[i][j], want[i][j])
						}
					}
				}
			})
		}
	}
}
