package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// splitPart returns a small file of a model split in count files: part no
// (0-based), with one F32 tensor of two values.
func splitPart(tb testing.TB, no, count uint16, tensors int32, name string) []byte {
	tb.Helper()
	w := NewWriter()
	for _, kv := range []KV{
		{Key: KeySplitNo, Value: Uint16(no)},
		{Key: KeySplitCount, Value: Uint16(count)},
		{Key: KeySplitTensors, Value: Int32(tensors)},
	} {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.AddTensor(name, F32, []int64{2}, []byte{1, 2, 3, 4, 5, 6, 7, byte(no)}); err != nil {
		tb.Fatal(err)
	}
	return encode(tb, w)
}

// FuzzOpenSplit fuzzes the two files of a split model
// (m-00001-of-00002.gguf and m-00002-of-00002.gguf) and opens one of
// them. What Open accepts holds the tensors of both files, each with the
// bytes it has in its own file; what it refuses is an error naming a file.
func FuzzOpenSplit(f *testing.F) {
	dir := f.TempDir()
	first, second := filepath.Join(dir, SplitPath("m", 0, 2)), filepath.Join(dir, SplitPath("m", 1, 2))
	a, b := splitPart(f, 0, 2, 2, "a"), splitPart(f, 1, 2, 2, "b")
	f.Add(a, b, false)
	f.Add(a, b, true)
	f.Add(b, a, false)
	f.Add(a, splitPart(f, 1, 2, 2, "a"), false)
	f.Add(a, splitPart(f, 1, 3, 2, "b"), false)
	f.Add(splitPart(f, 0, 2, 3, "a"), b, true)
	f.Add(splitPart(f, 0, 1, 1, "a"), b, false)
	f.Add(a, []byte("GGUF"), false)
	f.Fuzz(func(t *testing.T, a, b []byte, openSecond bool) {
		if err := os.WriteFile(first, a, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(second, b, 0o644); err != nil {
			t.Fatal(err)
		}
		name := first
		if openSecond {
			name = second
		}
		file, err := Open(name)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error names no file: %v", err)
			}
			return
		}
		defer file.Close()
		parts := map[int][]byte{}
		if c, ok := file.Uint(KeySplitCount); ok && c > 1 {
			parts[0], parts[1] = a, b
		} else {
			parts[0] = map[bool][]byte{false: a, true: b}[openSecond]
		}
		for _, ti := range file.Tensors {
			_, data, ok := file.Tensor(ti.Name)
			if !ok || int64(len(data)) != ti.Size() {
				t.Fatalf("tensor %s: found %v, %d bytes, want %d", ti.Name, ok, len(data), ti.Size())
			}
			own, err := Parse("part", parts[ti.Split])
			if err != nil {
				t.Fatalf("tensor %s of file %d, which does not parse alone: %v", ti.Name, ti.Split+1, err)
			}
			_, want, ok := own.Tensor(ti.Name)
			if !ok || !bytes.Equal(data, want) {
				t.Fatalf("tensor %s: merged bytes differ from those of file %d", ti.Name, ti.Split+1)
			}
		}
	})
}
