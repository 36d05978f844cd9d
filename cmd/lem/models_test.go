package main

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serveHubDir answers the hub's protocol for repository repo with the
// files of dir (small files, served without redirect: the hub package's
// tests cover redirects, LFS and resumes).
func serveHubDir(t *testing.T, repo, dir string) *httptest.Server {
	t.Helper()
	const commit = "fedcba9876543210fedcba9876543210fedcba98"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/api/models/"+repo+"/revision/main":
			json.NewEncoder(w).Encode(map[string]string{"sha": commit})
		case p == "/api/models/"+repo+"/tree/"+commit:
			var list []map[string]any
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				h := sha1.New()
				fmt.Fprintf(h, "blob %d\x00", len(b))
				h.Write(b)
				list = append(list, map[string]any{"type": "file", "path": e.Name(), "size": len(b), "oid": hex.EncodeToString(h.Sum(nil))})
			}
			json.NewEncoder(w).Encode(list)
		case strings.HasPrefix(p, "/"+repo+"/resolve/"+commit+"/"):
			http.ServeFile(w, r, filepath.Join(dir, strings.TrimPrefix(p, "/"+repo+"/resolve/"+commit+"/")))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestModelsByName pulls a model from a hub over HTTP, runs it by its hub
// name and by a models directory name, lists and removes it.
func TestModelsByName(t *testing.T) {
	root := t.TempDir()
	t.Setenv("LEM_MODELS", filepath.Join(root, "models"))
	t.Setenv("HF_HUB_CACHE", filepath.Join(root, "hub"))
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", filepath.Join(root, "hf"))
	src := filepath.Join(root, "src")
	if _, err := execLem(t, "synth", "--like", "tiny", "--seed", "5", "-o", src); err != nil {
		t.Fatal(err)
	}
	if _, err := execLem(t, "generate", "org/tiny", "--prompt-ids", "1,2,3"); err == nil || !strings.Contains(err.Error(), "lem pull") {
		t.Fatalf("generate of a missing name: %v", err)
	}
	t.Setenv("HF_ENDPOINT", serveHubDir(t, "org/tiny", src).URL)
	out, err := execLem(t, "pull", "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "run it with: lem run org/tiny") {
		t.Errorf("pull output:\n%s", out)
	}
	want, err := execLem(t, "generate", src, "--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0")
	if err != nil {
		t.Fatal(err)
	}
	got, err := execLem(t, "generate", "org/tiny", "--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0")
	if err != nil || got != want {
		t.Errorf("generate org/tiny = %q, %v; want %q (the model at its source)", got, err, want)
	}
	if err := os.Rename(src, filepath.Join(root, "models", "mine")); err != nil {
		os.MkdirAll(filepath.Join(root, "models"), 0o755)
		if err := os.Rename(src, filepath.Join(root, "models", "mine")); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := execLem(t, "generate", "mine", "--prompt-ids", "1,2,3", "--max-tokens", "4", "--temperature", "0"); err != nil || got != want {
		t.Errorf("generate mine = %q, %v; want %q", got, err, want)
	}
	if out, err := execLem(t, "inspect", "mine"); err != nil || !strings.Contains(out, "qwen3") {
		t.Errorf("inspect mine: %v\n%s", err, out)
	}
	out, err = execLem(t, "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"NAME", "mine", "org/tiny", "safetensors", "models", "hub"} {
		if !strings.Contains(out, w) {
			t.Errorf("list lacks %q:\n%s", w, out)
		}
	}
	if out, err := execLemIn(t, "n\n", "rm", "org/tiny"); err != nil || !strings.Contains(out, "kept org/tiny") {
		t.Errorf("rm answered no: %v\n%s", err, out)
	}
	if _, err := execLem(t, "inspect", "org/tiny"); err != nil {
		t.Errorf("org/tiny gone after rm answered no: %v", err)
	}
	if out, err := execLemIn(t, "y\n", "rm", "org/tiny"); err != nil || !strings.Contains(out, "removed org/tiny") {
		t.Errorf("rm answered yes: %v\n%s", err, out)
	}
	if _, err := execLem(t, "rm", "-f", "mine"); err != nil {
		t.Error(err)
	}
	if out, _ := execLem(t, "list"); strings.Contains(out, "mine") || strings.Contains(out, "org/tiny") {
		t.Errorf("list after rm:\n%s", out)
	}
	if _, err := execLem(t, "rm", "-f", "mine"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("rm of a missing name: %v", err)
	}
}

// TestPs asks a running lem serve what it has loaded.
func TestPs(t *testing.T) {
	url := startServe(t, "--ctx", "512", "--device", "cpu")
	out, err := execLem(t, "ps", "--url", url)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("ps:\n%s", out)
	}
	for _, w := range []string{"NAME", "SIZE", "DEVICE", "CONTEXT"} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("ps header lacks %s: %s", w, lines[0])
		}
	}
	f := strings.Fields(lines[1])
	if !strings.HasPrefix(f[0], "lem-tiny") || f[len(f)-1] != "512" || !strings.Contains(lines[1], "CPU") {
		t.Errorf("ps row: %s", lines[1])
	}
	if _, err := execLem(t, "ps", "--url", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "lem serve running") {
		t.Errorf("ps without a server: %v", err)
	}
}
