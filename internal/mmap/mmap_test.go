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
	// The environment no longer chooses: LEM_NO_MMAP is the command's
	// default for --no-mmap, which travels as Options.NoMmap.
	t.Setenv("LEM_NO_MMAP", "1")
	for _, tc := range []struct {
		name   string
		open   func() (*File, error)
		mapped bool
	}{
		{"Open", func() (*File, error) { return Open(path) }, true},
		{"OpenWith", func() (*File, error) { return OpenWith(path, Options{}) }, true},
		{"OpenWith NoMmap", func() (*File, error) { return OpenWith(path, Options{NoMmap: true}) }, false},
	} {
		f, err := tc.open()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Data, want) {
			t.Errorf("%s: data differs", tc.name)
		}
		if got := mapped.contains(f.Data); got != tc.mapped {
			t.Errorf("%s: file mapping %v, want %v", tc.name, got, tc.mapped)
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
