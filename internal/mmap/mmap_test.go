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

func TestRelease(t *testing.T) {
	name := filepath.Join(t.TempDir(), "w")
	want := make([]byte, 5*os.Getpagesize()+123)
	for i := range want {
		want[i] = byte(i*7 + 1)
	}
	if err := os.WriteFile(name, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !Release(f.Data[100 : len(f.Data)-50]) {
		t.Fatal("Release of a file mapping released nothing")
	}
	if !bytes.Equal(f.Data, want) {
		t.Fatal("released pages read back wrong")
	}
	heap := make([]byte, 3*os.Getpagesize())
	heap[len(heap)/2] = 9
	if Release(heap) || heap[len(heap)/2] != 9 {
		t.Fatal("Release touched memory outside a file mapping")
	}
}
