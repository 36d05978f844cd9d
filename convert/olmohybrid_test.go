package convert

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// TestOlmoHybridFlagsGGUF checks that OLMo Hybrid's two switches survive
// the GGUF round trip: the fixture with linear_allow_neg_eigval false and
// rope_parameters null (the published checkpoints' NoPE) gives logits that
// differ from the fixture's, and its GGUF file gives the same ones.
func TestOlmoHybridFlagsGGUF(t *testing.T) {
	src := fixtures.Dir(t, "archs", "olmo_hybrid")
	ids := archref.Load(t, src).InputIDs
	b := cpu.New(0)
	open := func(dir string) [][]float32 {
		m, err := model.OpenDir(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return runLogits(t, m, b, ids)
	}
	base := open(src)

	for _, tc := range []struct {
		name string
		set  map[string]any
	}{
		{"beta in (0, 1)", map[string]any{"linear_allow_neg_eigval": false}},
		{"no rope", map[string]any{"rope_parameters": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			raw, err := os.ReadFile(filepath.Join(src, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.set {
				cfg[k] = v
			}
			out, _ := json.Marshal(cfg)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
				t.Fatal(err)
			}
			want := open(dir)
			var moved float64
			for i := range want {
				moved = max(moved, archref.MaxDiff(want[i], base[i]))
			}
			if moved < 1e-2 {
				t.Fatalf("switching %v moves the logits by only %.2e", tc.set, moved)
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: "f32"}); err != nil {
				t.Fatal(err)
			}
			m, err := model.OpenGGUF(path, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got := runLogits(t, m, b, ids)
			var worst float64
			for i := range got {
				worst = max(worst, archref.MaxDiff(got[i], want[i]))
			}
			t.Logf("switch moves logits by %.2e; GGUF differs by %.2e", moved, worst)
			if worst > 1e-5 {
				t.Errorf("GGUF logits differ by %.2e from the checkpoint's", worst)
			}
		})
	}
}
