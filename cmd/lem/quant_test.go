package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestQuantCmd writes a GGUF file and an MLX pack with lem quant, inspects
// the GGUF file, and generates from it: greedy decoding of a fixture
// converted to F16 reproduces the reference run.
func TestQuantCmd(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	tmp := t.TempDir()
	path := filepath.Join(tmp, "llama.f16.gguf")
	out, err := execLemIn(t, "", "quant", dir, "--gguf", "f16", "-o", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "wrote "+path) || !strings.Contains(out, "→") {
		t.Errorf("summary: %q", out)
	}
	out, err = execLemIn(t, "", "inspect", path)
	if err != nil || !strings.Contains(out, "llama") || !strings.Contains(out, "F16") {
		t.Errorf("inspect: %q, %v", out, err)
	}

	var ref struct {
		GreedyPrompt []int32 `json:"greedy_prompt"`
		GreedyIDs    []int32 `json:"greedy_ids"`
	}
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	ids := make([]string, len(ref.GreedyPrompt))
	for i, id := range ref.GreedyPrompt {
		ids[i] = itoa(id)
	}
	out, err = execLemIn(t, "", "generate", path, "--prompt-ids", strings.Join(ids, ","),
		"--temperature", "0", "--max-tokens", "24", "--ignore-eos", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got generateOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, ref.GreedyIDs) {
		t.Errorf("greedy from GGUF: %v, want %v", got.IDs, ref.GreedyIDs)
	}

	mlx := filepath.Join(tmp, "mlx")
	out, err = execLemIn(t, "", "quant", dir, "--bits", "4", "--group-size", "32", "-o", mlx)
	if err != nil || !strings.Contains(out, "4-bit MLX, group 32") {
		t.Errorf("mlx: %q, %v", out, err)
	}
}

func TestQuantCmdErrors(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quant", dir, "--gguf", "q8_0"}, "-o OUT is required"},
		{[]string{"quant", dir, "-o", out}, "exactly one of"},
		{[]string{"quant", dir, "--gguf", "q8_0", "--bits", "4", "-o", out}, "exactly one of"},
		{[]string{"quant", dir, "--gguf", "iq2_xxs", "-o", out}, "unknown GGUF type"},
		{[]string{"quant", dir, "--bits", "3", "-o", out}, "2, 4 or 8"},
	} {
		_, err := execLemIn(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
}

// TestQuantByName quantizes models named as lem run names them, and
// removes one quantization of a folder of GGUF files with lem rm NAME:QUANT.
func TestQuantByName(t *testing.T) {
	root := t.TempDir()
	models := filepath.Join(root, "models")
	t.Setenv("LEM_MODELS", models)
	t.Setenv("HF_HUB_CACHE", filepath.Join(root, "hub"))
	if _, err := execLem(t, "synth", "--like", "tiny", "--seed", "3", "-o", filepath.Join(models, "mine")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(models, "packs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"q8_0", "f16"} {
		out := filepath.Join(models, "packs", "mine-"+strings.ToUpper(typ)+".gguf")
		if got, err := execLem(t, "quant", "mine", "--gguf", typ, "-o", out); err != nil || !strings.Contains(got, "wrote "+out) {
			t.Fatalf("quant mine --gguf %s: %v\n%s", typ, err, got)
		}
	}
	// A GGUF quantization named by its tag is a source too.
	if _, err := execLem(t, "quant", "packs:F16", "--gguf", "q8_0", "-o", filepath.Join(root, "again.gguf")); err != nil {
		t.Fatalf("quant packs:F16: %v", err)
	}
	if _, err := execLem(t, "quant", "org/absent", "--gguf", "q8_0", "-o", filepath.Join(root, "x.gguf")); err == nil || !strings.Contains(err.Error(), "lem pull") {
		t.Errorf("quant of a missing name: %v", err)
	}
	if out, err := execLem(t, "rm", "-f", "packs:Q8_0"); err != nil || !strings.Contains(out, "removed packs:Q8_0") {
		t.Fatalf("rm packs:Q8_0: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(models, "packs", "mine-Q8_0.gguf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the Q8_0 file after rm: %v", err)
	}
	if _, err := execLem(t, "inspect", "packs:F16"); err != nil {
		t.Errorf("the F16 file after rm of Q8_0: %v", err)
	}
}
