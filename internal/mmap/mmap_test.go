package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestOpen(t *testing.T) {
	want := bytes.Repeat([]byte("lem weights "), 100_000)
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, noMmap := range []string{"", "1"} {
		t.Setenv("LEM_NO_MMAP", noMmap)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Data, want) {
			t.Errorf("LEM_NO_MMAP=%q: data differs", noMmap)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("opening a missing file succeeded")
	}
}
