package convert

import (
	"bytes"
	"errors"
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
	for _, typ := range []string{"f16", "q8_0"} {
		path := filepath.Join(t.TempDir(), "bge-"+typ+".gguf")
		if _, err := ToGGUF(bgeTiny, path, GGUFOptions{Type: typ, Threads: 1}); err != nil {
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
