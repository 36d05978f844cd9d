package model

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
)

// readEncoderRef reads a fixture's reference (three inputs) and pairs its
// ids and token type ids as the encoder's inputs.
func readEncoderRef(t *testing.T, dir string) (*archref.EncoderReference, []EncoderInput) {
	t.Helper()
	ref := archref.LoadEncoder(t, dir)
	if len(ref.IDs) != 3 {
		t.Fatalf("%s: %d reference inputs, want 3", dir, len(ref.IDs))
	}
	inputs := make([]EncoderInput, len(ref.IDs))
	for i := range inputs {
		inputs[i] = EncoderInput{IDs: ref.IDs[i], TypeIDs: ref.TypeIDs[i]}
	}
	return ref, inputs
}

// compareVec checks got against want: cosine ≥ 0.9999 and every value
// within tol.
func compareVec(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var dot, ng, nw, worst float64
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		dot += g * w
		ng += g * g
		nw += w * w
		worst = max(worst, math.Abs(g-w))
	}
	cos := dot / math.Sqrt(ng*nw)
	if !(cos >= 0.9999) || !(worst <= tol) {
		return fmt.Errorf("cosine %.6f, max abs difference %.2g", cos, worst)
	}
	return nil
}

func TestEncoderReferences(t *testing.T) {
	for _, fx := range archref.Encoders {
		t.Run(fx.Name, func(t *testing.T) {
			dir := filepath.Join("testdata", "encoders", fx.Name)
			ref, inputs := readEncoderRef(t, dir)
			enc, err := OpenEncoderDir(dir, cpu.New(2))
			if err != nil {
				t.Fatal(err)
			}
			defer enc.Close()
			if got := enc.Labels(); got != fx.Labels {
				t.Errorf("Labels() = %d, want %d", got, fx.Labels)
			}
			out, err := enc.Encode(inputs)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(inputs) {
				t.Fatalf("%d outputs for %d inputs", len(out), len(inputs))
			}
			for i := range out {
				if err := compareVec(out[i].Hidden, ref.Hidden[i], 1e-3); err != nil {
					t.Errorf("input %d hidden states: %v", i, err)
				}
				if fx.Labels > 0 {
					if err := compareVec(out[i].Logits, ref.Logits[i], 1e-3); err != nil {
						t.Errorf("input %d logits %v, want %v: %v", i, out[i].Logits, ref.Logits[i], err)
					}
				} else if out[i].Logits != nil {
					t.Errorf("input %d: logits %v from a model without a head", i, out[i].Logits)
				}
			}
			// Each input alone gives what it gave in the batch.
			for i, in := range inputs {
				one, err := enc.Encode([]EncoderInput{in})
				if err != nil {
					t.Fatal(err)
				}
				if err := compareVec(one[0].Hidden, out[i].Hidden, 1e-5); err != nil {
					t.Errorf("input %d alone vs batched: %v", i, err)
				}
				for j := range one[0].Logits {
					if d := math.Abs(float64(one[0].Logits[j] - out[i].Logits[j])); d > 1e-5 {
						t.Errorf("input %d alone: logit %d differs by %g from the batch", i, j, d)
					}
				}
			}
		})
	}
}

// copyFixture copies a fixture directory so that a test can damage it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", "encoders", name)
	for _, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestEncoderBadInput(t *testing.T) {
	b := cpu.New(1)
	enc, err := OpenEncoderDir(filepath.Join("testdata", "encoders", "bert"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	for _, tc := range []struct {
		name   string
		inputs []EncoderInput
		want   string
	}{
		{"id above vocab", []EncoderInput{{IDs: []int32{101, 300}}}, "id 300 outside the vocabulary"},
		{"negative id", []EncoderInput{{IDs: []int32{-1}}}, "id -1 outside the vocabulary"},
		{"empty", []EncoderInput{{IDs: []int32{5}}, {}}, "input 1 is empty"},
		{"too long", []EncoderInput{{IDs: make([]int32, 65)}}, "65 tokens, more than the 64"},
		{"type out of range", []EncoderInput{{IDs: []int32{5, 6}, TypeIDs: []int32{0, 2}}}, "type id 2 outside [0, 2)"},
		{"type count", []EncoderInput{{IDs: []int32{5, 6}, TypeIDs: []int32{0}}}, "1 token type ids for 2 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := enc.Encode(tc.inputs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Encode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	mb, err := OpenEncoderDir(filepath.Join("testdata", "encoders", "modernbert"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	if _, err := mb.Encode([]EncoderInput{{IDs: []int32{1, 2}, TypeIDs: []int32{0, 1}}}); err == nil || !strings.Contains(err.Error(), "type id 1 outside [0, 1)") {
		t.Errorf("ModernBERT with token types: %v", err)
	}
}

func TestEncoderBadFiles(t *testing.T) {
	b := cpu.New(1)
	edit := func(name string, f func(dir string)) string {
		dir := copyFixture(t, name)
		f(dir)
		return dir
	}
	rewrite := func(file, old, new string) func(string) {
		return func(dir string) {
			p := filepath.Join(dir, file)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			s := strings.Replace(string(data), old, new, 1)
			if s == string(data) {
				t.Fatalf("%s has no %q", file, old)
			}
			if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		dir  string
		want string
	}{
		{"unknown model_type", edit("bert", rewrite("config.json", `"model_type": "bert"`, `"model_type": "bert-next"`)), `unsupported model_type "bert-next"`},
		{"decoder type", edit("bert", rewrite("config.json", `"model_type": "bert"`, `"model_type": "llama"`)), "is a decoder model"},
		{"missing tensor", edit("bert", rewrite("model.safetensors", "encoder.layer.1.output.dense.weight", "encoder.layer.1.output.dense.weighx")), "tensor encoder.layer.1.output.dense.weight is missing"},
		{"missing head tensor", edit("modernbert-cls", rewrite("model.safetensors", "head.norm.weight", "head.norm.weighx")), "tensor head.norm.weight is missing"},
		{"truncated file", edit("xlm-roberta", func(dir string) {
			p := filepath.Join(dir, "model.safetensors")
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-1000); err != nil {
				t.Fatal(err)
			}
		}), "model.safetensors"},
		{"relative positions", edit("bert", rewrite("config.json", `"model_type": "bert"`, `"model_type": "bert", "position_embedding_type": "relative_key"`)), `position_embedding_type "relative_key"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := OpenEncoderDir(tc.dir, b)
			if err == nil {
				enc.Close()
				t.Fatalf("OpenEncoderDir succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("OpenEncoderDir: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A decoder caller that opens an encoder gets ErrEncoder, not a panic.
func TestOpenDirEncoder(t *testing.T) {
	_, err := OpenDir(filepath.Join("testdata", "encoders", "modernbert"), cpu.New(1))
	if !errors.Is(err, ErrEncoder) {
		t.Fatalf("OpenDir of an encoder: %v, want ErrEncoder", err)
	}
}
