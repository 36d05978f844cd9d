package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lem-engine/lem/hub"
)

const commit = "0123456789abcdef0123456789abcdef01234567"

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// cacheRepo writes repository id into the hub cache as the Hugging Face
// tools do: blobs, snapshot links to them, refs/main.
func cacheRepo(t *testing.T, cache, id string, files map[string]string) string {
	t.Helper()
	dir := hub.RepoDir(cache, id)
	snap := filepath.Join(dir, "snapshots", commit)
	for name, data := range files {
		blob := filepath.Join(dir, "blobs", "blob-"+strings.NewReplacer("/", "_", ".", "_").Replace(name))
		write(t, blob, data)
		link := filepath.Join(snap, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(link), 0o755)
		rel, _ := filepath.Rel(filepath.Dir(link), blob)
		if err := os.Symlink(rel, link); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "refs", "main"), commit)
	return snap
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Models: filepath.Join(root, "models"), Hub: filepath.Join(root, "hub")}
	write(t, filepath.Join(d.Models, "llama.gguf"), "GGUF")
	write(t, filepath.Join(d.Models, "qwen", "config.json"), "{}")
	write(t, filepath.Join(d.Models, "gemma", "gemma-Q4_K_M.gguf"), "GGUF")
	write(t, filepath.Join(d.Models, "gemma", "gemma-Q8_0.gguf"), "GGUF")
	// A path that is also a hub name: the path wins.
	write(t, filepath.Join(root, "org", "model", "config.json"), "{}")
	st := cacheRepo(t, d.Hub, "org/model", map[string]string{"config.json": "{}", "model.safetensors": "w"})
	gg := cacheRepo(t, d.Hub, "org/model-GGUF", map[string]string{
		"README.md": "r", "model-Q4_K_M.gguf": "a", "model-Q8_0.gguf": "b",
		"Q6_K/model-Q6_K-00001-of-00002.gguf": "c", "Q6_K/model-Q6_K-00002-of-00002.gguf": "d",
	})
	many := cacheRepo(t, d.Hub, "org/many", map[string]string{"m-Q5_K_M.gguf": "a", "m-Q8_0.gguf": "b"})
	one := cacheRepo(t, d.Hub, "org/one", map[string]string{"weights.gguf": "a"})
	t.Chdir(root)
	for _, tt := range []struct {
		name, want string
		err        []string // parts of the error
	}{
		{name: "org/model", want: "org/model"}, // the relative path
		{name: filepath.Join(d.Models, "llama.gguf"), want: filepath.Join(d.Models, "llama.gguf")},
		{name: "llama", want: filepath.Join(d.Models, "llama.gguf")},
		{name: "llama.gguf", want: filepath.Join(d.Models, "llama.gguf")},
		{name: "qwen", want: filepath.Join(d.Models, "qwen")},
		{name: "gemma", want: filepath.Join(d.Models, "gemma", "gemma-Q4_K_M.gguf")},
		{name: "gemma:q8_0", want: filepath.Join(d.Models, "gemma", "gemma-Q8_0.gguf")},
		{name: "llama:Q4_K_M", err: []string{"one file"}},
		{name: "org/model-GGUF", want: filepath.Join(gg, "model-Q4_K_M.gguf")},
		{name: "org/model-GGUF:Q8_0", want: filepath.Join(gg, "model-Q8_0.gguf")},
		{name: "org/model-GGUF:Q6_K", want: filepath.Join(gg, "Q6_K", "model-Q6_K-00001-of-00002.gguf")},
		{name: "org/model-GGUF:model-Q8_0.gguf", want: filepath.Join(gg, "model-Q8_0.gguf")},
		{name: "org/model-GGUF:IQ2_XS", err: []string{"IQ2_XS", "Q4_K_M, Q6_K, Q8_0"}},
		{name: "org/many", err: []string{"several GGUF", "Q5_K_M, Q8_0", ":QUANT"}},
		{name: "org/one", want: filepath.Join(one, "weights.gguf")},
		{name: "org/many:Q5_K_M", want: filepath.Join(many, "m-Q5_K_M.gguf")},
		{name: "nothing", err: []string{`"nothing" not found`, "the path nothing", d.Models, "LEM_MODELS", "lem pull"}},
		{name: "org/absent", err: []string{"the path org/absent", d.Hub, "HF_HUB_CACHE"}},
		{name: "", err: []string{"empty"}},
	} {
		got, err := Resolve(tt.name, d)
		if tt.err != nil {
			if err == nil {
				t.Errorf("Resolve(%q) = %s, want an error", tt.name, got)
				continue
			}
			for _, part := range tt.err {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("Resolve(%q): error %q lacks %q", tt.name, err, part)
				}
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	// Without the relative path, org/model is the hub cache's.
	t.Chdir(t.TempDir())
	if got, err := Resolve("org/model", d); err != nil || got != st {
		t.Errorf("Resolve(org/model) from elsewhere = %q, %v; want %q", got, err, st)
	}
	var nf *NotFoundError
	if _, err := Resolve("org/absent", d); !errors.As(err, &nf) || len(nf.Looked) != 2 {
		t.Errorf("not-found error %v looked at %v", err, nf)
	}
}

func TestListRemove(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Models: filepath.Join(root, "models"), Hub: filepath.Join(root, "hub")}
	write(t, filepath.Join(d.Models, "llama-Q5_K_M.gguf"), "GGUF1234")
	write(t, filepath.Join(d.Models, "qwen", "config.json"), `{"torch_dtype":"bfloat16"}`)
	write(t, filepath.Join(d.Models, "notes.txt"), "not a model")
	cacheRepo(t, d.Hub, "org/model", map[string]string{"config.json": `{"torch_dtype":"float16"}`, "model.safetensors": "weights"})
	cacheRepo(t, d.Hub, "org/model-GGUF", map[string]string{"m-Q4_K_M.gguf": "aaaa", "m-Q8_0.gguf": "bbbbbbbb"})
	got, err := List(d)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"llama-Q5_K_M models 8 gguf Q5_K_M",
		"qwen models 26 safetensors BF16",
		"org/model hub 32 safetensors F16",
		"org/model-GGUF:Q4_K_M hub 4 gguf Q4_K_M",
		"org/model-GGUF:Q8_0 hub 8 gguf Q8_0",
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, strings.Join([]string{e.Name, e.Where, itoa(e.Size), e.Format, e.Quant}, " "))
		if p, err := Resolve(e.Name, d); err != nil || p != e.Path {
			t.Errorf("%s lists path %s but resolves to %s, %v", e.Name, e.Path, p, err)
		}
		if e.Modified.IsZero() {
			t.Errorf("%s: no modification time", e.Name)
		}
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("List:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	for _, tt := range []struct{ name, where string }{{"qwen", "models"}, {"llama-Q5_K_M", "models"}, {"org/model-GGUF", "hub"}} {
		tg, err := Find(tt.name, d)
		if err != nil || tg.Where != tt.where {
			t.Fatalf("Find(%q) = %+v, %v", tt.name, tg, err)
		}
		if err := Remove(tg); err != nil {
			t.Fatal(err)
		}
		if _, err := Resolve(tt.name, d); err == nil {
			t.Errorf("%s resolves after removal", tt.name)
		}
	}
	if _, err := Find("org/model-GGUF:Q8_0", d); err == nil {
		t.Error("Find found a quantization of a removed repository")
	}
	if _, err := Find("absent", d); err == nil || !strings.Contains(err.Error(), d.Models) {
		t.Errorf("Find(absent): %v", err)
	}
	if got, _ := List(d); len(got) != 1 || got[0].Name != "org/model" {
		t.Errorf("after removals List = %+v", got)
	}
}

// TestRemoveQuant removes one quantization of a GGUF repository in the
// hub cache: its files and the blobs no snapshot links to any more go, the
// other quantizations and shared blobs stay.
func TestRemoveQuant(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Models: filepath.Join(root, "models"), Hub: filepath.Join(root, "hub")}
	snap := cacheRepo(t, d.Hub, "org/m-GGUF", map[string]string{
		"m-Q4_K_M.gguf":                   "aaaa",
		"Q8_0/m-Q8_0-00001-of-00002.gguf": "bbbbbbbb",
		"Q8_0/m-Q8_0-00002-of-00002.gguf": "cccccccc",
		"README.md":                       "readme",
	})
	repo := hub.RepoDir(d.Hub, "org/m-GGUF")
	// A second snapshot still links to the first part of Q8_0: that blob stays.
	old := filepath.Join(repo, "snapshots", "old")
	os.MkdirAll(filepath.Join(old, "Q8_0"), 0o755)
	if err := os.Symlink(filepath.Join("..", "..", "..", "blobs", "blob-Q8_0_m-Q8_0-00001-of-00002_gguf"), filepath.Join(old, "Q8_0", "m-Q8_0-00001-of-00002.gguf")); err != nil {
		t.Fatal(err)
	}
	// A models directory folder of GGUF files takes NAME:QUANT too.
	write(t, filepath.Join(d.Models, "local", "x-Q4_0.gguf"), "dd")
	write(t, filepath.Join(d.Models, "local", "x-Q6_K.gguf"), "eee")

	tg, err := Find("org/m-GGUF:q8_0", d)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Where != "hub" || len(tg.Files) != 2 || tg.Size != 16 {
		t.Fatalf("Find = %+v", tg)
	}
	if err := Remove(tg); err != nil {
		t.Fatal(err)
	}
	files, _ := hub.SnapshotFiles(snap)
	if got := strings.Join(files, " "); got != "README.md m-Q4_K_M.gguf" {
		t.Errorf("snapshot after removal: %s", got)
	}
	blobs, _ := os.ReadDir(filepath.Join(repo, "blobs"))
	var names []string
	for _, b := range blobs {
		names = append(names, b.Name())
	}
	if got := strings.Join(names, " "); got != "blob-Q8_0_m-Q8_0-00001-of-00002_gguf blob-README_md blob-m-Q4_K_M_gguf" {
		t.Errorf("blobs after removal: %s", got)
	}
	if _, err := Resolve("org/m-GGUF:Q4_K_M", d); err != nil {
		t.Errorf("the other quantization: %v", err)
	}
	if _, err := Resolve("org/m-GGUF:Q8_0", d); err == nil {
		t.Error("the removed quantization still resolves")
	}

	tg, err = Find("local:Q4_0", d)
	if err != nil || tg.Where != "models" || len(tg.Files) != 1 {
		t.Fatalf("Find(local:Q4_0) = %+v, %v", tg, err)
	}
	if err := Remove(tg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Models, "local", "x-Q6_K.gguf")); err != nil {
		t.Errorf("the other file of the folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Models, "local", "x-Q4_0.gguf")); err == nil {
		t.Error("x-Q4_0.gguf is still there")
	}

	for _, bad := range []string{"org/m-GGUF:", "org/m-GGUF:Q2_K", "local:Q2_K"} {
		if _, err := Find(bad, d); err == nil {
			t.Errorf("Find(%q) succeeded", bad)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
