package safetensors

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzOpenDirIndex fuzzes model.safetensors.index.json over a directory
// holding two real shards. What OpenDir accepts lists exactly the tensors
// of the index's weight_map, each found in a shard inside the directory;
// what it refuses is an error naming a file of the directory.
func FuzzOpenDirIndex(f *testing.F) {
	dir := f.TempDir()
	all := sampleTensors()
	for name, tensors := range map[string][]Tensor{
		"model-00001-of-00002.safetensors": all[:2],
		"model-00002-of-00002.safetensors": all[2:4],
	} {
		var b bytes.Buffer
		if err := Write(&b, tensors, nil); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		f.Fatal(err)
	}
	wm := map[string]string{}
	for i, tn := range all[:4] {
		wm[tn.Name] = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i/2]
	}
	full, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 100}, "weight_map": wm})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte(`{"weight_map":{"` + all[0].Name + `":"model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"` + all[0].Name + `":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"x":"../model-00001-of-00002.safetensors","y":"/etc/passwd"}}`))
	f.Add([]byte(`{"weight_map":{"x":"config.json","y":"sub","z":"missing.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Add([]byte(`{"weight_map":null,"metadata":[]}`))
	f.Add([]byte(`[]`))
	index := filepath.Join(dir, IndexFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(index, data, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := OpenDir(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error does not name a file of %s: %v", dir, err)
			}
			return
		}
		defer d.Close()
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			t.Fatalf("accepted an index encoding/json refuses: %v", err)
		}
		names := d.Names()
		sorted := slices.Sorted(slices.Values(names))
		want := slices.Sorted(func(yield func(string) bool) {
			for k := range idx.WeightMap {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(sorted, want) {
			t.Fatalf("tensors %q, weight_map lists %q", sorted, want)
		}
		for _, n := range names {
			tn, ok := d.Tensor(n)
			if !ok || tn.NumElements()*tn.DType.Size() != len(tn.Data) {
				t.Fatalf("tensor %q: found %v, %d bytes", n, ok, len(tn.Data))
			}
		}
		for _, sf := range d.Files() {
			if rel, err := filepath.Rel(dir, sf.Name()); err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("opened %s, outside %s", sf.Name(), dir)
			}
		}
	})
}
