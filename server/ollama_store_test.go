package server

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/tiny"
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestDescribeStore(t *testing.T) {
	// A GGUF file of type Q4_K_M (general.file_type 15).
	dir := t.TempDir()
	w := gguf.NewWriter()
	if err := w.SetKV("general.architecture", gguf.String("llama")); err != nil {
		t.Fatal(err)
	}
	if err := w.SetKV("general.file_type", gguf.Uint32(15)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("token_embd.weight", gguf.F32, []int64{4}, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	ggufPath := filepath.Join(dir, "m.gguf")
	f, err := os.Create(ggufPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ggufData, _ := os.ReadFile(ggufPath)

	chatDir := fixtures.Dir(t, "chat-model")
	weights, err := os.ReadFile(filepath.Join(chatDir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var dirSize int64
	entries, _ := os.ReadDir(chatDir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			dirSize += info.Size()
		}
	}

	for _, tt := range []struct {
		path string
		want modelStore
	}{
		{tiny.Name, modelStore{size: int64(len(tiny.Weights())), digest: sha256Hex(tiny.Weights())}},
		{chatDir, modelStore{size: dirSize, digest: sha256Hex(weights)}},
		{ggufPath, modelStore{size: int64(len(ggufData)), digest: sha256Hex(ggufData), gguf: true, quant: "Q4_K_M"}},
		{filepath.Join(dir, "missing"), modelStore{}},
	} {
		if got := describeStore(tt.path); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.path, got, tt.want)
		}
	}
	if len(tiny.Weights()) < 1<<20 {
		t.Fatalf("lem-tiny's weights are %d bytes", len(tiny.Weights()))
	}
}

// TestDigestSampled checks the digest of weights too large to hash whole:
// it sees a change inside a sampled piece and the file's size.
func TestDigestSampled(t *testing.T) {
	defer func(n int64) { fullDigestBytes = n }(fullDigestBytes)
	fullDigestBytes = 1 << 20
	dir := t.TempDir()
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := filepath.Join(dir, "model.safetensors")
	digest := func(b []byte) string {
		t.Helper()
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return digestFiles([]string{path})
	}
	base := digest(data)
	if len(base) != 64 || base == sha256Hex(data) {
		t.Fatalf("digest %q", base)
	}
	if again := digest(data); again != base {
		t.Errorf("digest changed: %s, %s", base, again)
	}
	changed := append([]byte(nil), data...)
	changed[len(changed)-1]++ // the last byte is in the last piece
	if digest(changed) == base {
		t.Error("a change at the end left the digest as it was")
	}
	if digest(data[:len(data)-1]) == base {
		t.Error("a shorter file has the same digest")
	}
}
