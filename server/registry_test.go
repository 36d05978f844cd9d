package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

// copyChatModel copies the chat-model fixture to dir.
func copyChatModel(t *testing.T, dir string) string {
	t.Helper()
	src := fixtures.Dir(t, "chat-model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func openCPU(path string) (*engine.Model, error) {
	return engine.Open(path, engine.Options{Backend: cpu.New(0)})
}

const testAdminKey = "admin-secret"

// newRegistryServer serves the models of rc over a real listener.
func newRegistryServer(t *testing.T, cfg Config, rc RegistryConfig) (*httptest.Server, *Server) {
	t.Helper()
	rc.Open = openCPU
	if rc.AdminKey == "" {
		rc.AdminKey = testAdminKey
	}
	for i := range rc.Models {
		if rc.Models[i].Options.KVBytes == 0 {
			rc.Models[i].Options.KVBytes = 1 << 20
		}
	}
	s, err := NewRegistry(cfg, rc)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return ts, s
}

// call sends a JSON request and returns the status and body.
func regCall(t *testing.T, method, url, key string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func regChat(model string) map[string]any {
	return map[string]any{"model": model, "max_tokens": 3, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": "Hi"}}}
}

// psNames returns the names /api/ps lists.
func psNames(t *testing.T, base string) []string {
	t.Helper()
	return listedNames(t, base, "/api/ps")
}

// listedNames returns the names of the models the list at path (/api/tags,
// /api/ps) holds.
func listedNames(t *testing.T, base, path string) []string {
	t.Helper()
	code, data := regCall(t, "GET", base+path, "", nil)
	if code != 200 {
		t.Fatalf("%s: %d %s", path, code, data)
	}
	var l olModelList
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range l.Models {
		out = append(out, m.Name)
	}
	return out
}

func adminModelsOf(t *testing.T, base string) map[string]ModelState {
	t.Helper()
	code, data := regCall(t, "GET", base+"/v1/admin/status", testAdminKey, nil)
	if code != 200 {
		t.Fatalf("/v1/admin/status: %d %s", code, data)
	}
	var l adminModels
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]ModelState{}
	for _, m := range l.Models {
		out[m.Name] = m
	}
	return out
}

func TestRegistryLoadOnFirstUse(t *testing.T) {
	dir := t.TempDir()
	a, b := copyChatModel(t, filepath.Join(dir, "a")), copyChatModel(t, filepath.Join(dir, "b"))
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a}, {Name: "b", Path: b}}})
	if got := psNames(t, ts.URL); len(got) != 0 {
		t.Fatalf("/api/ps before any request = %v, want none", got)
	}
	code, data := regCall(t, "GET", ts.URL+"/api/tags", "", nil)
	if code != 200 || !strings.Contains(string(data), `"a:latest"`) || !strings.Contains(string(data), `"b:latest"`) {
		t.Fatalf("/api/tags = %d %s, want both models", code, data)
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("a")); code != 200 {
		t.Fatalf("chat a: %d %s", code, data)
	}
	if got := psNames(t, ts.URL); fmt.Sprint(got) != "[a:latest]" {
		t.Fatalf("/api/ps after a request to a = %v", got)
	}
	code, data = regCall(t, "GET", ts.URL+"/v1/models", "", nil)
	var list struct{ Data []map[string]any }
	json.Unmarshal(data, &list)
	if code != 200 || len(list.Data) != 2 || list.Data[0]["loaded"] != true || list.Data[1]["loaded"] != false {
		t.Fatalf("/v1/models = %d %s, want a loaded and b not", code, data)
	}
	st := adminModelsOf(t, ts.URL)
	if st["a"].ExpiresAt == nil || time.Until(*st["a"].ExpiresAt) < time.Minute || st["a"].Bytes <= 0 || st["a"].KV == nil {
		t.Errorf("status of a = %+v, want loaded with the default keep_alive, bytes and KV", st["a"])
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("c")); code != 404 {
		t.Errorf("unknown model: %d %s, want 404", code, data)
	}
}

func TestRegistryLRUUnderMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	a, b := copyChatModel(t, filepath.Join(dir, "a")), copyChatModel(t, filepath.Join(dir, "b"))
	one := describeStore(a).size + 1<<20
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{MemoryLimit: one + one/2,
		Models: []ModelSpec{{Name: "a", Path: a}, {Name: "b", Path: b}}})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				name := []string{"a", "b"}[(c+i)%2]
				if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat(name)); code != 200 {
					errs <- fmt.Sprintf("client %d request %d to %s: %d %s", c, i, name, code, data)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := psNames(t, ts.URL); len(got) != 1 {
		t.Errorf("/api/ps = %v, want one model under a limit that fits one", got)
	}
	// A model larger than the limit is refused with a clear error.
	ts2, _ := newRegistryServer(t, Config{}, RegistryConfig{MemoryLimit: one / 2, Models: []ModelSpec{{Name: "a", Path: a}}})
	code, data := regCall(t, "POST", ts2.URL+"/v1/chat/completions", "", regChat("a"))
	if code != http.StatusInsufficientStorage || !strings.Contains(string(data), "memory limit") {
		t.Errorf("over the limit: %d %s", code, data)
	}
}

func TestRegistryKeepAlive(t *testing.T) {
	dir := t.TempDir()
	a := copyChatModel(t, filepath.Join(dir, "a"))
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a}, {Name: "b", Path: a}}})
	body := func(keep any) map[string]any {
		return map[string]any{"model": "a", "stream": false, "keep_alive": keep, "options": map[string]any{"num_predict": 2},
			"messages": []map[string]string{{"role": "user", "content": "Hi"}}}
	}
	for _, keep := range []any{0, "0s"} {
		if code, data := regCall(t, "POST", ts.URL+"/api/chat", "", body(keep)); code != 200 {
			t.Fatalf("keep_alive %v: %d %s", keep, code, data)
		}
		if got := psNames(t, ts.URL); len(got) != 0 {
			t.Errorf("keep_alive %v: /api/ps = %v after the request, want none", keep, got)
		}
	}
	if code, data := regCall(t, "POST", ts.URL+"/api/chat", "", body(-1)); code != 200 {
		t.Fatalf("keep_alive -1: %d %s", code, data)
	}
	if st := adminModelsOf(t, ts.URL)["a"]; !st.Loaded || st.ExpiresAt != nil {
		t.Errorf("keep_alive -1: %+v, want loaded with no expiry", st)
	}
	if code, data := regCall(t, "POST", ts.URL+"/api/chat", "", body("300ms")); code != 200 {
		t.Fatalf("keep_alive 300ms: %d %s", code, data)
	}
	if st := adminModelsOf(t, ts.URL)["a"]; st.ExpiresAt == nil {
		t.Errorf("keep_alive 300ms: %+v, want an expiry", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(psNames(t, ts.URL)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("keep_alive 300ms: still loaded after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, data := regCall(t, "POST", ts.URL+"/api/chat", "", body("soon")); code != 400 || !strings.Contains(string(data), "keep_alive") {
		t.Errorf("bad keep_alive: %d %s", code, data)
	}
}

func TestRegistryLoadFailureIsNotCached(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "late")
	os.MkdirAll(bad, 0o755)
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "late", Path: bad}, {Name: "x", Path: bad}}})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("late"))
			if code != 500 || !strings.Contains(string(data), "loading the model") {
				t.Errorf("load failure: %d %s, want 500 naming the load", code, data)
			}
		}()
	}
	wg.Wait()
	copyChatModel(t, bad)
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("late")); code != 200 {
		t.Errorf("after the files arrived: %d %s", code, data)
	}
}

func TestAdminKeySeparation(t *testing.T) {
	a := copyChatModel(t, filepath.Join(t.TempDir(), "a"))
	ts, _ := newRegistryServer(t, Config{APIKey: "user-key"}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a}}})
	for _, key := range []string{"", "user-key", "wrong"} {
		if code, data := regCall(t, "GET", ts.URL+"/v1/admin/models", key, nil); code != 401 {
			t.Errorf("admin with key %q: %d %s, want 401", key, code, data)
		}
	}
	if code, data := regCall(t, "GET", ts.URL+"/v1/admin/models", testAdminKey, nil); code != 200 {
		t.Errorf("admin with the admin key: %d %s", code, data)
	}
	if code, _ := regCall(t, "POST", ts.URL+"/v1/chat/completions", testAdminKey, regChat("a")); code != 401 {
		t.Errorf("inference with the admin key: %d, want 401", code)
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "user-key", regChat("a")); code != 200 {
		t.Errorf("inference with the API key: %d %s", code, data)
	}
	// Without an admin key the admin API is closed.
	s, err := NewRegistry(Config{}, RegistryConfig{Open: openCPU, Models: []ModelSpec{{Name: "a", Path: a}}})
	if err != nil {
		t.Fatal(err)
	}
	ts2 := httptest.NewServer(s.Handler())
	defer func() { ts2.Close(); s.Close() }()
	if code, _ := regCall(t, "GET", ts2.URL+"/v1/admin/models", "", nil); code != 401 {
		t.Errorf("admin with no admin key configured: %d, want 401", code)
	}
}

func TestAdminPathGate(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	copyChatModel(t, filepath.Join(root, "inside"))
	copyChatModel(t, filepath.Join(outside, "elsewhere"))
	if err := os.Symlink(filepath.Join(outside, "elsewhere"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(root, "inside")
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Roots: []string{root}, Models: []ModelSpec{{Name: "a", Path: a}}})
	for _, tc := range []struct{ name, path string }{
		{"dotdot", "../" + filepath.Base(outside) + "/elsewhere"},
		{"dotdot inside", "inside/../inside"},
		{"absolute outside", filepath.Join(outside, "elsewhere")},
		{"symlink out", "link"},
		{"absolute symlink out", filepath.Join(root, "link")},
	} {
		code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/load", testAdminKey, map[string]string{"model": "x", "path": tc.path})
		if code != 403 || !strings.Contains(string(data), root) {
			t.Errorf("%s (%s): %d %s, want 403 naming the root", tc.name, tc.path, code, data)
		}
	}
	code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/load", testAdminKey, map[string]string{"model": "x", "path": "inside"})
	if code != 200 || !strings.Contains(string(data), `"loaded":true`) {
		t.Fatalf("load inside the root: %d %s", code, data)
	}
	if got := psNames(t, ts.URL); fmt.Sprint(got) != "[x:latest]" {
		t.Errorf("/api/ps after an admin load = %v", got)
	}
	// Pin, then unload and load by name.
	if code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/pin", testAdminKey, map[string]string{"model": "x"}); code != 200 || !strings.Contains(string(data), `"pinned":true`) {
		t.Errorf("pin: %d %s", code, data)
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/unload", testAdminKey, map[string]string{"model": "x"}); code != 200 || !strings.Contains(string(data), `"state":"unloaded"`) {
		t.Errorf("unload: %d %s", code, data)
	}
}

func TestAdminPinSurvivesKeepAliveZero(t *testing.T) {
	a := copyChatModel(t, filepath.Join(t.TempDir(), "a"))
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a}, {Name: "b", Path: a}}})
	if code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/load", testAdminKey, map[string]string{"model": "a"}); code != 200 {
		t.Fatalf("load: %d %s", code, data)
	}
	regCall(t, "POST", ts.URL+"/v1/admin/models/pin", testAdminKey, map[string]string{"model": "a"})
	code, data := regCall(t, "POST", ts.URL+"/api/generate", "", map[string]any{"model": "a", "keep_alive": 0, "stream": false, "prompt": "Hi", "options": map[string]any{"num_predict": 2}})
	if code != 200 {
		t.Fatalf("generate: %d %s", code, data)
	}
	if got := psNames(t, ts.URL); len(got) != 1 {
		t.Errorf("a pinned model unloaded by keep_alive 0: /api/ps = %v", got)
	}
}

func TestAdminReloadDuringStream(t *testing.T) {
	a := copyChatModel(t, filepath.Join(t.TempDir(), "a"))
	// A stream of a thousand tokens (a cache with room for them), no
	// drafts (which run the model's loops many tokens a step): it
	// outlasts the reload many times over.
	long := ModelOptions{Context: 2048, KVBytes: 64 << 20, Draft: -1}
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a, Options: long}, {Name: "b", Path: a}}})
	body, _ := json.Marshal(map[string]any{"model": "a", "stream": true, "max_tokens": 1000, "temperature": 0, "ignore_eos": true,
		"messages": []map[string]string{{"role": "user", "content": "Tell a story"}}})
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	// Wait for the first token's frame: the model is generating.
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream before reload: %v", err)
		}
		if strings.Contains(line, `"content"`) {
			break
		}
	}
	// Replace the model's chat template on disk, then reload.
	tpl := filepath.Join(a, "chat_template.jinja")
	old, _ := os.ReadFile(tpl)
	os.WriteFile(tpl, append([]byte("{#- reloaded -#}"), old...), 0o644)
	code, data := regCall(t, "POST", ts.URL+"/v1/admin/reload", testAdminKey, map[string]string{"model": "a"})
	if code != 200 {
		t.Fatalf("reload: %d %s", code, data)
	}
	if st := adminModelsOf(t, ts.URL)["a"]; !st.Loaded || st.Retired != 1 {
		t.Errorf("during the stream after reload: %+v, want the new load and the old one retired", st)
	}
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "[DONE]") || strings.Contains(string(rest), `"error"`) {
		t.Fatalf("the stream did not finish on the old weights: %v %s", err, rest)
	}
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for adminModelsOf(t, ts.URL)["a"].Retired != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the old load was not freed after its stream ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, data = regCall(t, "POST", ts.URL+"/api/show", "", map[string]string{"model": "a"})
	if code != 200 || !strings.Contains(string(data), "reloaded") {
		t.Errorf("after reload /api/show = %d, want the new template", code)
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("a")); code != 200 {
		t.Errorf("chat after reload: %d %s", code, data)
	}
}
