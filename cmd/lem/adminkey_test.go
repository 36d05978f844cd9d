package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The generated admin key goes to lem's data directory, not next to a
// models directory that LEM_MODELS puts elsewhere.
func TestAdminKeyInDataDir(t *testing.T) {
	data, models := t.TempDir(), filepath.Join(t.TempDir(), "shared", "models")
	t.Setenv("XDG_DATA_HOME", data)
	t.Setenv("LEM_MODELS", models)
	key, err := newAdminKey(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(data, "lem", "admin-key")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the admin key is not in the data directory: %v", err)
	}
	if strings.TrimSpace(string(b)) != key {
		t.Errorf("%s holds %q, want %q", path, b, key)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(models), "admin-key")); err == nil {
		t.Error("the admin key was written next to LEM_MODELS")
	}
}
