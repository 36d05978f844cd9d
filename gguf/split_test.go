package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSplit writes the sample tensors over count files named
// dir/model-0000N-of-0000C.gguf, the metadata in the first, and returns the
// prefix. edit may change a part's Writer before it is written.
func writeSplit(t *testing.T, count int, edit func(no int, w *Writer)) string {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "model")
	sts := sampleTensors()
	for no := range count {
		w := NewWriter()
		if no == 0 {
			for _, kv := range sampleKV() {
				if err := w.SetKV(kv.Key, kv.Value); err != nil {
					t.Fatal(err)
				}
			}
		}
		must(t, w.SetKV(KeySplitNo, Uint16(uint16(no))))
		must(t, w.SetKV(KeySplitCount, Uint16(uint16(count))))
		must(t, w.SetKV(KeySplitTensors, Int32(int32(len(sts)))))
		for i, st := range sts {
			if i%count != no {
				continue
			}
			size, _ := tensorSize(st.typ, st.dims)
			must(t, w.AddTensor(st.name, st.typ, st.dims, tensorBytes(i, int(size))))
		}
		if edit != nil {
			edit(no, w)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(SplitPath(prefix, no, count), buf.Bytes(), 0o644))
	}
	return prefix
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSplit(t *testing.T) {
	prefix := writeSplit(t, 3, nil)
	if got := SplitPath(prefix, 1, 3); got != prefix+"-00002-of-00003.gguf" {
		t.Errorf("SplitPath = %s", got)
	}
	for _, no := range []int{0, 2} {
		f, err := Open(SplitPath(prefix, no, 3))
		if err != nil {
			t.Fatal(err)
		}
		if f.Name != SplitPath(prefix, 0, 3) || f.Architecture() != "llama" {
			t.Errorf("Name %s, architecture %q", f.Name, f.Architecture())
		}
		sts := sampleTensors()
		if len(f.Tensors) != len(sts) {
			t.Fatalf("%d tensors, want %d", len(f.Tensors), len(sts))
		}
		for i, st := range sts {
			ti, data, ok := f.Tensor(st.name)
			if !ok {
				t.Fatalf("tensor %s missing", st.name)
			}
			if ti.Split != i%3 {
				t.Errorf("tensor %s in split %d, want %d", st.name, ti.Split, i%3)
			}
			if !bytes.Equal(data, tensorBytes(i, int(ti.Size()))) {
				t.Errorf("tensor %s data differs", st.name)
			}
		}
		must(t, f.Close())
	}
}

func TestSplitErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) string // returns the file to open
		want  string
	}{
		{"missing part", func(t *testing.T) string {
			prefix := writeSplit(t, 3, nil)
			must(t, os.Remove(SplitPath(prefix, 1, 3)))
			return SplitPath(prefix, 0, 3)
		}, "opening file 2 of split model"},
		{"wrong split.no", func(t *testing.T) string {
			prefix := writeSplit(t, 2, func(no int, w *Writer) {
				if no == 1 {
					must(t, w.SetKV(KeySplitNo, Uint16(0)))
				}
			})
			return SplitPath(prefix, 0, 2)
		}, "has split.no 0, want 1"},
		{"wrong split.count", func(t *testing.T) string {
			prefix := writeSplit(t, 2, func(no int, w *Writer) {
				if no == 1 {
					must(t, w.SetKV(KeySplitCount, Uint16(5)))
				}
			})
			return SplitPath(prefix, 0, 2)
		}, "split.count is 5, want 2"},
		{"tensor count", func(t *testing.T) string {
			prefix := writeSplit(t, 2, func(no int, w *Writer) {
				must(t, w.SetKV(KeySplitTensors, Int32(3)))
			})
			return SplitPath(prefix, 0, 2)
		}, "split.tensors.count is 3 but the 2 files hold 10 tensors"},
		{"duplicate tensor", func(t *testing.T) string {
			prefix := writeSplit(t, 2, func(no int, w *Writer) {
				must(t, w.AddTensor("dup", F32, []int64{1}, make([]byte, 4)))
			})
			return SplitPath(prefix, 0, 2)
		}, "tensor dup is also in file 1"},
		{"bad name", func(t *testing.T) string {
			prefix := writeSplit(t, 2, nil)
			name := filepath.Join(filepath.Dir(prefix), "renamed.gguf")
			must(t, os.Rename(SplitPath(prefix, 0, 2), name))
			return name
		}, "split.count is 2 but the name does not end in -NNNNN-of-00002.gguf"},
		{"name count", func(t *testing.T) string {
			prefix := writeSplit(t, 2, nil)
			name := SplitPath(prefix, 0, 4)
			must(t, os.Rename(SplitPath(prefix, 0, 2), name))
			return name
		}, "split.count is 2 but the name says 4 files"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Open(tt.setup(t))
			if err == nil {
				f.Close()
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestSplitNoMmap(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		t.Skipf("no file mappings to look at: %v", err)
	}
	prefix := writeSplit(t, 2, nil)
	mapsFile := func(path string) bool {
		raw, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
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
	for _, noMmap := range []bool{false, true} {
		f, err := OpenWith(SplitPath(prefix, 0, 2), OpenOptions{NoMmap: noMmap})
		if err != nil {
			t.Fatal(err)
		}
		for no := range 2 {
			if mapped := mapsFile(SplitPath(prefix, no, 2)); mapped == noMmap {
				t.Errorf("NoMmap %v: part %d mapped: %v", noMmap, no+1, mapped)
			}
		}
		for i, st := range sampleTensors() {
			ti, data, ok := f.Tensor(st.name)
			if !ok || !bytes.Equal(data, tensorBytes(i, int(ti.Size()))) {
				t.Errorf("NoMmap %v: tensor %s missing or different", noMmap, st.name)
			}
		}
		must(t, f.Close())
	}
}
