package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/safetensors"
)

// TestOpenProgress loads a safetensors fixture and a GGUF file made of it,
// mapped and read into memory, and checks what Options.Progress hears:
// totals of the weights' bytes (the tensors handed to the backend, or the
// files read), done never decreasing, and a last call at the total.
func TestOpenProgress(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	ggufPath := filepath.Join(t.TempDir(), "llama.Q8_0.gguf")
	if _, err := convert.ToGGUF(dir, ggufPath, convert.GGUFOptions{Type: "q8_0"}); err != nil {
		t.Fatal(err)
	}

	st, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var stBytes int64
	for _, name := range st.Names() {
		tt, _ := st.Tensor(name)
		stBytes += int64(len(tt.Data))
	}
	st.Close()
	g, err := gguf.Open(ggufPath)
	if err != nil {
		t.Fatal(err)
	}
	var ggBytes int64
	for _, tt := range g.Tensors {
		ggBytes += tt.Size()
	}
	g.Close()
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}

	for _, tc := range []struct {
		name   string
		path   string
		noMmap bool
		total  int64
	}{
		{"safetensors", dir, false, stBytes},
		{"safetensors no-mmap", dir, true, size(filepath.Join(dir, "model.safetensors"))},
		{"gguf", ggufPath, false, ggBytes},
		{"gguf no-mmap", ggufPath, true, size(ggufPath)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type call struct{ done, total int64 }
			var calls []call
			m, err := Open(tc.path, Options{Backend: cpu.New(1), NoMmap: tc.noMmap, Progress: func(done, total int64) {
				calls = append(calls, call{done, total})
			}})
			if err != nil {
				t.Fatal(err)
			}
			m.Close()
			if len(calls) < 2 {
				t.Fatalf("%d progress calls: %v", len(calls), calls)
			}
			between := false
			for i, c := range calls {
				if c.total != tc.total {
					t.Fatalf("call %d: total %d, want %d", i, c.total, tc.total)
				}
				if c.done < 0 || c.done > c.total || i > 0 && c.done < calls[i-1].done {
					t.Fatalf("call %d: done %d after %d of %d", i, c.done, calls[max(i-1, 0)].done, c.total)
				}
				between = between || c.done > 0 && c.done < c.total
			}
			if calls[0].done != 0 || calls[len(calls)-1].done != tc.total {
				t.Errorf("first call %v, last %v; want 0 and %d", calls[0], calls[len(calls)-1], tc.total)
			}
			if !tc.noMmap && !between {
				t.Errorf("no call between 0 and the total: %v", calls)
			}
		})
	}
}
