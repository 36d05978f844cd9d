package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shardedDir writes the sample tensors into two shards and an index, and
// returns the directory.
func shardedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	all := sampleTensors()
	shards := map[string][]Tensor{
		"model-00001-of-00002.safetensors": all[:7],
		"model-00002-of-00002.safetensors": all[7:],
	}
	var index strings.Builder
	index.WriteString(`{"metadata":{"total_size":123},"weight_map":{`)
	first := true
	for shard, ts := range shards {
		if err := WriteFile(filepath.Join(dir, shard), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, tn := range ts {
			if !first {
				index.WriteByte(',')
			}
			first = false
			var b strings.Builder
			writeStringTo(&b, tn.Name)
			index.WriteString(b.String() + `:"` + shard + `"`)
		}
	}
	index.WriteString("}}")
	writeIndex(t, dir, index.String())
	return dir
}

func writeStringTo(b *strings.Builder, s string) {
	var buf = new(strings.Builder)
	buf.WriteString(strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`))
	b.WriteString(`"` + buf.String() + `"`)
}

func writeIndex(t *testing.T, dir, index string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDirSharded(t *testing.T) {
	dir := shardedDir(t)
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var want []string
	for _, tn := range sampleTensors() {
		want = append(want, tn.Name)
	}
	if got := d.Names(); !slices.Equal(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	if len(d.Files()) != 2 {
		t.Errorf("%d files, want 2", len(d.Files()))
	}
	for _, tn := range sampleTensors() {
		got, ok := d.Tensor(tn.Name)
		if !ok || !slices.Equal(got.Data, tn.Data) {
			t.Errorf("Tensor(%q) = %v, %v", tn.Name, got, ok)
		}
	}
	if _, ok := d.Tensor("nope"); ok {
		t.Error("Tensor(nope) found")
	}
	if d.Metadata()["format"] != "pt" {
		t.Errorf("Metadata = %v", d.Metadata())
	}
	if d.Path() != dir {
		t.Errorf("Path = %q, want %q", d.Path(), dir)
	}
}

func TestOpenDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // substrings of the error
	}{
		{
			name:  "empty directory",
			setup: func(t *testing.T, dir string) {},
			want:  []string{"neither model.safetensors nor model.safetensors.index.json"},
		},
		{
			name: "missing shard",
			setup: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
			},
			want: []string{IndexFile, "shard model-00002-of-00002.safetensors", "is missing"},
		},
		{
			name: "tensor missing from its shard",
			setup: func(t *testing.T, dir string) {
				if err := WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), sampleTensors()[8:], nil); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"model-00002-of-00002.safetensors", `tensor "u8"`, "not in this shard"},
		},
		{
			name: "corrupt shard",
			setup: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), []byte("junk"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"model-00001-of-00002.safetensors", "shorter than the 8-byte header length"},
		},
		{
			name:  "index not JSON",
			setup: func(t *testing.T, dir string) { writeIndex(t, dir, "{weight_map") },
			want:  []string{IndexFile, "bad index JSON"},
		},
		{
			name:  "weight_map wrong type",
			setup: func(t *testing.T, dir string) { writeIndex(t, dir, `{"weight_map":{"a":1}}`) },
			want:  []string{IndexFile, "bad index JSON"},
		},
		{
			name:  "no weight_map",
			setup: func(t *testing.T, dir string) { writeIndex(t, dir, `{"metadata":{}}`) },
			want:  []string{IndexFile, `"weight_map" is missing or empty`},
		},
		{
			name:  "shard outside the directory",
			setup: func(t *testing.T, dir string) { writeIndex(t, dir, `{"weight_map":{"a":"../x.safetensors"}}`) },
			want:  []string{IndexFile, `tensor "a"`, "not a file inside the model directory"},
		},
		{
			name:  "absolute shard path",
			setup: func(t *testing.T, dir string) { writeIndex(t, dir, `{"weight_map":{"a":"/etc/passwd"}}`) },
			want:  []string{IndexFile, "not a file inside the model directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dir string
			if tt.name == "empty directory" {
				dir = t.TempDir()
			} else {
				dir = shardedDir(t)
			}
			tt.setup(t, dir)
			d, err := OpenDir(dir)
			if err == nil {
				d.Close()
				t.Fatal("OpenDir succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestOpenDirSingle(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, SingleFile), sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Names()) != len(sampleTensors()) {
		t.Errorf("%d names, want %d", len(d.Names()), len(sampleTensors()))
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, SingleFile), rawLen(99, "{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenDir(bad)
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), filepath.Join(bad, SingleFile)) {
		t.Errorf("OpenDir(corrupt single file) = %v, want a FormatError naming the file", err)
	}
}

// mapsFile reports whether the process maps the file at path, from
// /proc/self/maps.
func mapsFile(t *testing.T, path string) bool {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no file mappings to look at: %v", err)
	}
	path, err = filepath.EvalSymlinks(path)
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

func TestOpenDirNoMmap(t *testing.T) {
	dir := shardedDir(t)
	shards := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	for _, noMmap := range []bool{false, true} {
		d, err := OpenDirWith(dir, OpenOptions{NoMmap: noMmap})
		if err != nil {
			t.Fatal(err)
		}
		for _, shard := range shards {
			if mapped := mapsFile(t, filepath.Join(dir, shard)); mapped == noMmap {
				t.Errorf("NoMmap %v: %s mapped: %v", noMmap, shard, mapped)
			}
		}
		for _, tn := range sampleTensors() {
			if got, ok := d.Tensor(tn.Name); !ok || !slices.Equal(got.Data, tn.Data) {
				t.Errorf("NoMmap %v: Tensor(%q) = %v, %v", noMmap, tn.Name, got, ok)
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
