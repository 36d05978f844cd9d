package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/synth"
)

// mapsFile reports whether the process maps the file at path, from
// /proc/self/maps.
func mapsFile(t *testing.T, path string) bool {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if strings.HasSuffix(strings.TrimRight(line, "\n"), " "+path) {
			return true
		}
	}
	return false
}

// TestOpenNoMmap checks that Options.NoMmap reaches the readers of both
// formats: the weight file is mapped without it and read into memory with
// it, and the model computes the same either way.
func TestOpenNoMmap(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		t.Skip("no /proc/self/maps to see the process's file mappings")
	}
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "tiny")
	if _, err := synth.Write(dir, synth.Options{Like: "tiny"}); err != nil {
		t.Fatal(err)
	}
	ggufPath := filepath.Join(tmp, "tiny.gguf")
	if _, err := convert.ToGGUF(dir, ggufPath, convert.GGUFOptions{Type: "bf16"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, file string }{
		{"safetensors", dir, filepath.Join(dir, "model.safetensors")},
		{"gguf", ggufPath, ggufPath},
	} {
		var ids [2][]int32
		for i, noMmap := range []bool{false, true} {
			m, err := Open(tc.path, Options{Backend: cpu.New(1), NoMmap: noMmap})
			if err != nil {
				t.Fatalf("%s, NoMmap %v: %v", tc.name, noMmap, err)
			}
			if mapped := mapsFile(t, tc.file); mapped == noMmap {
				t.Errorf("%s, NoMmap %v: weight file mapped: %v", tc.name, noMmap, mapped)
			}
			s := m.NewSession(16)
			res, err := m.Generate(context.Background(), s, Request{Prompt: []int32{1, 2, 3}, MaxTokens: 4, IgnoreModelStops: true}, nil)
			if err != nil {
				t.Fatalf("%s, NoMmap %v: %v", tc.name, noMmap, err)
			}
			ids[i] = res.IDs
			s.Close()
			m.Close()
			if mapsFile(t, tc.file) {
				t.Errorf("%s, NoMmap %v: weight file still mapped after Close", tc.name, noMmap)
			}
		}
		if !slices.Equal(ids[0], ids[1]) || len(ids[0]) != 4 {
			t.Errorf("%s: greedy ids %v mapped, %v read into memory", tc.name, ids[0], ids[1])
		}
	}
}
