package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const testCommit = "0123456789abcdef0123456789abcdef01234567"

// fakeFile is a file of the fake hub.
type fakeFile struct {
	data []byte
	lfs  bool
}

// fakeHub speaks the hub's protocol for one repository: the revision and
// tree APIs, and resolve, which answers small files itself and redirects
// LFS files to a second server, the content store, on another port.
type fakeHub struct {
	hub, cdn *httptest.Server
	repo     string
	files    map[string]fakeFile
	gated    string // token the repository needs; "" for none

	mu       sync.Mutex
	cdnAuth  []string // Authorization headers the content store saw
	ranges   []string // Range headers the content store saw
	cutAfter int      // the content store breaks the next body after this many bytes (0: no)
	corrupt  bool     // the content store flips a byte of every body
}

func gitSHA1(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func newFakeHub(t *testing.T, repo string, files map[string]fakeFile) *fakeHub {
	f := &fakeHub{repo: repo, files: files}
	f.cdn = httptest.NewServer(http.HandlerFunc(f.serveCDN))
	f.hub = httptest.NewServer(http.HandlerFunc(f.serveHub))
	t.Cleanup(f.hub.Close)
	t.Cleanup(f.cdn.Close)
	return f
}

func (f *fakeHub) authorized(r *http.Request) bool {
	return f.gated == "" || r.Header.Get("Authorization") == "Bearer "+f.gated
}

func (f *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(r) {
		w.Header().Set("X-Error-Message", "Access to model "+f.repo+" is restricted.")
		http.Error(w, `{"error":"Access restricted"}`, http.StatusUnauthorized)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/api/models/"+f.repo+"/revision/main":
		json.NewEncoder(w).Encode(map[string]any{"id": f.repo, "sha": testCommit})
	case p == "/api/models/"+f.repo+"/tree/"+testCommit:
		var list []map[string]any
		for name, ff := range f.files {
			e := map[string]any{"type": "file", "path": name, "size": len(ff.data), "oid": gitSHA1(ff.data)}
			if ff.lfs {
				e["lfs"] = map[string]any{"oid": sha(ff.data), "size": len(ff.data), "pointerSize": 130}
			}
			list = append(list, e)
		}
		list = append(list, map[string]any{"type": "directory", "path": "1_Pooling", "size": 0, "oid": "x"})
		json.NewEncoder(w).Encode(list)
	case strings.HasPrefix(p, "/"+f.repo+"/resolve/"+testCommit+"/"):
		name := strings.TrimPrefix(p, "/"+f.repo+"/resolve/"+testCommit+"/")
		ff, ok := f.files[name]
		if !ok {
			http.Error(w, "Entry not found", http.StatusNotFound)
			return
		}
		w.Header().Set("X-Repo-Commit", testCommit)
		if ff.lfs {
			w.Header().Set("X-Linked-Etag", `"`+sha(ff.data)+`"`)
			w.Header().Set("X-Linked-Size", strconv.Itoa(len(ff.data)))
			w.Header().Set("ETag", `"`+gitSHA1([]byte("pointer"))+`"`)
			http.Redirect(w, r, f.cdn.URL+"/blobs/"+sha(ff.data)+"?signed=1", http.StatusFound)
			return
		}
		w.Header().Set("ETag", `"`+gitSHA1(ff.data)+`"`)
		w.Write(ff.data)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.cdnAuth = append(f.cdnAuth, r.Header.Get("Authorization"))
	f.ranges = append(f.ranges, r.Header.Get("Range"))
	cut, corrupt := f.cutAfter, f.corrupt
	f.cutAfter = 0
	f.mu.Unlock()
	var data []byte
	for _, ff := range f.files {
		if "/blobs/"+sha(ff.data) == r.URL.Path {
			data = ff.data
		}
	}
	if data == nil || r.URL.Query().Get("signed") != "1" {
		http.NotFound(w, r)
		return
	}
	if corrupt {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
		fmt.Sscanf(rg, "bytes=%d-", &start)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	body := data[start:]
	if cut > 0 {
		w.Write(body[:cut])
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Write(body)
}

func weights(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func safetensorsRepo() map[string]fakeFile {
	return map[string]fakeFile{
		"config.json":                  {data: []byte(`{"model_type":"qwen3","torch_dtype":"bfloat16"}`)},
		"tokenizer.json":               {data: []byte(`{"model":{}}`)},
		"tokenizer_config.json":        {data: []byte(`{}`)},
		"generation_config.json":       {data: []byte(`{}`)},
		"model.safetensors":            {data: weights(300_000), lfs: true},
		"modules.json":                 {data: []byte(`[]`)},
		"1_Pooling/config.json":        {data: []byte(`{"pooling_mode_mean_tokens":true}`)},
		"README.md":                    {data: []byte("# readme")},
		"onnx/model.onnx":              {data: weights(1000), lfs: true},
		"original/consolidated.00.pth": {data: weights(1000), lfs: true},
	}
}

func (f *fakeHub) client(t *testing.T, token string) *Client {
	return &Client{Endpoint: f.hub.URL, Token: token, Cache: t.TempDir()}
}

func TestPullSafetensors(t *testing.T) {
	f := newFakeHub(t, "org/model", safetensorsRepo())
	f.gated = "hf_secret"
	c := f.client(t, "hf_secret")
	var progressed int64
	c.Progress = func(p Progress) { progressed = max(progressed, p.Done) }
	res, err := c.Pull(context.Background(), "org/model", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != testCommit || res.Path != res.Snapshot {
		t.Errorf("pulled %+v", res)
	}
	if progressed != 300_000 {
		t.Errorf("progress reached %d bytes, want 300000", progressed)
	}
	want := []string{"1_Pooling/config.json", "config.json", "generation_config.json", "model.safetensors", "modules.json", "tokenizer.json", "tokenizer_config.json"}
	got, err := SnapshotFiles(res.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("snapshot holds %v, want %v", got, want)
	}
	// The layout the Hugging Face tools write: refs/main, relative links
	// into blobs named by etag.
	dir := RepoDir(c.Cache, "org/model")
	if ref, _ := os.ReadFile(filepath.Join(dir, "refs", "main")); string(ref) != testCommit {
		t.Errorf("refs/main = %q", ref)
	}
	for name, ff := range safetensorsRepo() {
		if !strings.Contains(strings.Join(want, ","), name) {
			continue
		}
		link := filepath.Join(res.Snapshot, name)
		target, err := os.Readlink(link)
		if err != nil || filepath.IsAbs(target) {
			t.Errorf("%s: link %q, %v", name, target, err)
			continue
		}
		etag := gitSHA1(ff.data)
		if ff.lfs {
			etag = sha(ff.data)
		}
		if filepath.Base(target) != etag {
			t.Errorf("%s links to %s, want blob %s", name, target, etag)
		}
		if b, err := os.ReadFile(link); err != nil || string(b) != string(ff.data) {
			t.Errorf("%s: contents differ (%v)", name, err)
		}
	}
	for i, a := range f.cdnAuth {
		if a != "" {
			t.Errorf("content store request %d carried Authorization %q", i, a)
		}
	}
	if len(f.cdnAuth) != 1 {
		t.Errorf("content store saw %d requests, want 1 (the weights)", len(f.cdnAuth))
	}
	repos, err := List(c.Cache)
	if err != nil || len(repos) != 1 || repos[0].ID != "org/model" || repos[0].Size < 300_000 {
		t.Errorf("List = %+v, %v", repos, err)
	}
	// A second pull finds everything there and fetches nothing.
	if _, err := c.Pull(context.Background(), "org/model", "", ""); err != nil {
		t.Fatal(err)
	}
	if len(f.cdnAuth) != 1 {
		t.Errorf("second pull fetched again: %d content store requests", len(f.cdnAuth))
	}
}

func TestPullGatedWithoutToken(t *testing.T) {
	f := newFakeHub(t, "org/gated", safetensorsRepo())
	f.gated = "hf_secret"
	_, err := f.client(t, "").Pull(context.Background(), "org/gated", "", "")
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Fatalf("pull of a gated repository without a token: %v", err)
	}
	_, err = f.client(t, "hf_wrong").Pull(context.Background(), "org/gated", "", "")
	if err == nil || strings.Contains(err.Error(), "hf_wrong") {
		t.Fatalf("pull with a wrong token: %v (must fail without printing the token)", err)
	}
}

func TestPullResume(t *testing.T) {
	f := newFakeHub(t, "org/model", safetensorsRepo())
	c := f.client(t, "")
	f.cutAfter = 100_000
	_, err := c.Pull(context.Background(), "org/model", "", "")
	if err == nil {
		t.Fatal("pull survived a broken connection")
	}
	part := filepath.Join(RepoDir(c.Cache, "org/model"), "blobs", sha(weights(300_000))+".incomplete")
	st, err := os.Stat(part)
	if err != nil || st.Size() != 100_000 {
		t.Fatalf("after the break: %v, %v", st, err)
	}
	res, err := c.Pull(context.Background(), "org/model", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if f.ranges[len(f.ranges)-1] != "bytes=100000-" {
		t.Errorf("second pull asked for %q, want bytes=100000-", f.ranges[len(f.ranges)-1])
	}
	b, err := os.ReadFile(filepath.Join(res.Snapshot, "model.safetensors"))
	if err != nil || string(b) != string(weights(300_000)) {
		t.Errorf("resumed file differs (%v)", err)
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Errorf("the .incomplete file stayed: %v", err)
	}
}

func TestPullCorrupt(t *testing.T) {
	f := newFakeHub(t, "org/model", safetensorsRepo())
	c := f.client(t, "")
	f.corrupt = true
	_, err := c.Pull(context.Background(), "org/model", "", "")
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("pull of a corrupted file: %v", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(RepoDir(c.Cache, "org/model"), "blobs"))
	for _, b := range blobs {
		if b.Name() == sha(weights(300_000)) || strings.HasSuffix(b.Name(), ".incomplete") {
			t.Errorf("corrupted download left %s in the cache", b.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(RepoDir(c.Cache, "org/model"), "snapshots", testCommit, "model.safetensors")); err == nil {
		t.Error("corrupted weights linked into the snapshot")
	}
}

func TestPullGGUF(t *testing.T) {
	files := map[string]fakeFile{
		"README.md":                           {data: []byte("# readme")},
		"Model-Q4_K_M.gguf":                   {data: weights(5000), lfs: true},
		"Model-Q8_0.gguf":                     {data: weights(7000), lfs: true},
		"Q6_K/Model-Q6_K-00001-of-00002.gguf": {data: weights(3000), lfs: true},
		"Q6_K/Model-Q6_K-00002-of-00002.gguf": {data: weights(3001), lfs: true},
		"mmproj-F16.gguf":                     {data: weights(100), lfs: true},
	}
	f := newFakeHub(t, "org/model-GGUF", files)
	for _, tt := range []struct {
		sel   string
		want  []string
		quant string
		err   string
	}{
		{"", []string{"Model-Q4_K_M.gguf"}, "Q4_K_M", ""},
		{"q8_0", []string{"Model-Q8_0.gguf"}, "Q8_0", ""},
		{"Q6_K", []string{"Q6_K/Model-Q6_K-00001-of-00002.gguf", "Q6_K/Model-Q6_K-00002-of-00002.gguf"}, "Q6_K", ""},
		{"Model-Q8_0.gguf", []string{"Model-Q8_0.gguf"}, "Q8_0", ""},
		{"Q2_K", nil, "", "Q4_K_M, Q6_K, Q8_0"},
	} {
		c := f.client(t, "")
		res, err := c.Pull(context.Background(), "org/model-GGUF", tt.sel, "")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want one listing %s", tt.sel, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.sel, err)
			continue
		}
		var got []string
		for _, f := range res.Files {
			got = append(got, f.Path)
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") || res.Quant != tt.quant ||
			res.Path != filepath.Join(res.Snapshot, filepath.FromSlash(tt.want[0])) {
			t.Errorf("%q: fetched %v quant %s path %s, want %v %s", tt.sel, got, res.Quant, res.Path, tt.want, tt.quant)
		}
	}
}
