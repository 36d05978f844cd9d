package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/catalog"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// olChatCounts sends a non-streamed /api/chat and returns the prompt and
// output token counts and the reply.
func olChatCounts(t *testing.T, base, model string, opts map[string]any) (int, int, string) {
	t.Helper()
	body := map[string]any{"model": model, "stream": false, "messages": []map[string]string{{"role": "user", "content": "Hi there"}}}
	if opts != nil {
		body["options"] = opts
	}
	code, data := regCall(t, "POST", base+"/api/chat", "", body)
	if code != 200 {
		t.Fatalf("/api/chat %s: %d %s", model, code, data)
	}
	var r struct {
		PromptEvalCount int `json:"prompt_eval_count"`
		EvalCount       int `json:"eval_count"`
		Message         struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.PromptEvalCount, r.EvalCount, r.Message.Content
}

// tagNames returns the names /api/tags lists.
func tagNames(t *testing.T, base string) []string {
	t.Helper()
	return listedNames(t, base, "/api/tags")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestOllamaCreateCopyDelete(t *testing.T) {
	root := t.TempDir()
	weights := copyChatModel(t, filepath.Join(root, "weights", "chat"))
	modelsDir := filepath.Join(root, "models")
	ts, s := newRegistryServer(t, Config{}, RegistryConfig{
		Models:    []ModelSpec{{Name: "base", Path: weights}},
		Roots:     []string{root},
		ModelsDir: modelsDir,
	})
	const tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
	// Streamed: status lines ending in success.
	code, data := regCall(t, "POST", ts.URL+"/api/create", "", map[string]any{
		"model": "pirate", "from": "weights/chat", "template": tmpl, "system": "You are a pirate.",
		"parameters": map[string]any{"temperature": 0, "num_predict": 3},
	})
	if code != 200 {
		t.Fatalf("/api/create: %d %s", code, data)
	}
	var last map[string]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	lines := 0
	for sc.Scan() {
		lines++
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
	}
	if lines < 2 || last["status"] != "success" {
		t.Fatalf("/api/create streamed %d lines ending %v, want status lines ending in success:\n%s", lines, last, data)
	}
	// A manifest, no copy of the weights.
	files, _ := os.ReadDir(filepath.Join(modelsDir, "pirate"))
	if len(files) != 1 || files[0].Name() != catalog.ManifestFile {
		t.Fatalf("models/pirate holds %v, want only %s", files, catalog.ManifestFile)
	}
	// The catalog resolves and lists it (lem list, lem run).
	if p, err := catalog.Resolve("pirate", catalog.Dirs{Models: modelsDir}); err != nil || p != weights {
		t.Fatalf("catalog.Resolve(pirate) = %q, %v; want %s", p, err, weights)
	}
	if es, err := catalog.List(catalog.Dirs{Models: modelsDir}); err != nil || len(es) != 1 || es[0].Name != "pirate" || es[0].Manifest == nil {
		t.Fatalf("catalog.List = %+v, %v", es, err)
	}
	if got := tagNames(t, ts.URL); !contains(got, "pirate:latest") || !contains(got, "base:latest") {
		t.Fatalf("/api/tags = %v, want base and pirate", got)
	}
	// The template and the system prompt: the chat's prompt is exactly the
	// manifest's template rendered with the system prompt first.
	want := "<system>You are a pirate.<user>Hi there<assistant>"
	code, data = regCall(t, "POST", ts.URL+"/api/generate", "", map[string]any{"model": "base", "prompt": want, "raw": true, "stream": false,
		"options": map[string]any{"num_predict": 1}})
	if code != 200 {
		t.Fatalf("/api/generate: %d %s", code, data)
	}
	var gen struct {
		PromptEvalCount int `json:"prompt_eval_count"`
	}
	json.Unmarshal(data, &gen)
	np, nout, reply := olChatCounts(t, ts.URL, "pirate", nil)
	if np != gen.PromptEvalCount {
		t.Errorf("pirate's chat prompt has %d tokens; %q has %d: the manifest's template or system prompt is not used", np, want, gen.PromptEvalCount)
	}
	baseP, _, _ := olChatCounts(t, ts.URL, "base", map[string]any{"num_predict": 1})
	if baseP == np {
		t.Errorf("base and pirate prompts both have %d tokens", np)
	}
	// num_predict 3 from the parameters; a request's own value wins.
	if nout > 3 || nout == 0 {
		t.Errorf("pirate generated %d tokens, want 1 to 3 (num_predict 3 of the manifest)", nout)
	}
	if _, n1, _ := olChatCounts(t, ts.URL, "pirate", map[string]any{"num_predict": 1}); n1 != 1 {
		t.Errorf("with the request's num_predict 1, pirate generated %d tokens", n1)
	}
	// Temperature 0: the same reply each time.
	if _, _, again := olChatCounts(t, ts.URL, "pirate", nil); again != reply {
		t.Errorf("pirate's replies differ at temperature 0: %q, %q", reply, again)
	}

	// Copy: a manifest with the same settings.
	code, data = regCall(t, "POST", ts.URL+"/api/copy", "", map[string]any{"source": "pirate", "destination": "parrot"})
	if code != 200 {
		t.Fatalf("/api/copy: %d %s", code, data)
	}
	if cp, _, creply := olChatCounts(t, ts.URL, "parrot", nil); cp != np || creply != reply {
		t.Errorf("parrot: %d prompt tokens, reply %q; pirate: %d, %q", cp, creply, np, reply)
	}
	if code, data = regCall(t, "POST", ts.URL+"/api/copy", "", map[string]any{"source": "nosuch", "destination": "x"}); code != 404 {
		t.Errorf("/api/copy of an unknown model: %d %s, want 404", code, data)
	}

	// Delete a loaded model that is busy: it is retired, not refused.
	in, err := s.reg.acquire(context.Background(), "pirate")
	if err != nil {
		t.Fatal(err)
	}
	if code, data = regCall(t, "DELETE", ts.URL+"/api/delete", "", map[string]any{"model": "pirate"}); code != 200 {
		t.Fatalf("/api/delete of a busy model: %d %s", code, data)
	}
	if _, err := os.Stat(filepath.Join(modelsDir, "pirate")); !os.IsNotExist(err) {
		t.Errorf("models/pirate after delete: %v", err)
	}
	if in.closed {
		t.Error("the busy model was closed under its request")
	}
	s.reg.release(in, nil)
	if !in.closed {
		t.Error("the deleted model stayed loaded after its last request")
	}
	// Delete an idle loaded model.
	if code, data = regCall(t, "DELETE", ts.URL+"/api/delete", "", map[string]any{"model": "parrot:latest"}); code != 200 {
		t.Fatalf("/api/delete parrot: %d %s", code, data)
	}
	if got := tagNames(t, ts.URL); len(got) != 1 || got[0] != "base:latest" {
		t.Errorf("/api/tags after the deletes = %v, want base only", got)
	}
	if got := psNames(t, ts.URL); contains(got, "pirate:latest") || contains(got, "parrot:latest") {
		t.Errorf("/api/ps after the deletes = %v", got)
	}
	if _, err := os.Stat(filepath.Join(weights, "config.json")); err != nil {
		t.Errorf("the weights went with the manifests: %v", err)
	}
	// A model given as a path: nothing to delete.
	code, data = regCall(t, "DELETE", ts.URL+"/api/delete", "", map[string]any{"model": "base"})
	if code != 400 || !strings.Contains(string(data), "path") {
		t.Errorf("/api/delete of a path model: %d %s, want 400 naming the path", code, data)
	}
	if code, data = regCall(t, "DELETE", ts.URL+"/api/delete", "", map[string]any{"model": "pirate"}); code != 404 {
		t.Errorf("/api/delete again: %d %s, want 404", code, data)
	}
}

func TestOllamaCreateRefusals(t *testing.T) {
	root := t.TempDir()
	weights := copyChatModel(t, filepath.Join(root, "weights", "chat"))
	outside := copyChatModel(t, filepath.Join(t.TempDir(), "elsewhere"))
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{
		Models: []ModelSpec{{Name: "base", Path: weights}}, Roots: []string{root}, ModelsDir: filepath.Join(root, "models"),
	})
	for _, c := range []struct {
		name string
		body map[string]any
		code int
		says string
	}{
		{"dotdot", map[string]any{"model": "x", "from": "weights/../../etc"}, 403, `it contains`},
		{"absolute elsewhere", map[string]any{"model": "x", "from": outside}, 403, "outside the model roots"},
		{"symlink out", map[string]any{"model": "x", "from": "link"}, 403, "symbolic link"},
		{"missing", map[string]any{"model": "x", "from": "weights/nosuch"}, 404, "no such file"},
		{"not a model", map[string]any{"model": "x", "from": "weights"}, 400, "no model"},
		{"no from", map[string]any{"model": "x"}, 400, "from"},
		{"bad name", map[string]any{"model": "a/b", "from": "weights/chat"}, 400, "must not contain"},
		{"bad parameter", map[string]any{"model": "x", "from": "weights/chat", "parameters": map[string]any{"temperature": "hot"}}, 400, "temperature"},
		{"unknown parameter", map[string]any{"model": "x", "from": "weights/chat", "parameters": map[string]any{"mirostat": 1}}, 400, "unknown parameter"},
		{"bad template", map[string]any{"model": "x", "from": "weights/chat", "template": "{% if %}"}, 400, "template"},
		{"files", map[string]any{"model": "x", "from": "weights/chat", "files": map[string]string{"a.gguf": "sha256:00"}}, 400, "files"},
		{"taken by a path model", map[string]any{"model": "base", "from": "weights/chat"}, 409, "exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, data := regCall(t, "POST", ts.URL+"/api/create", "", c.body)
			if code != c.code || !strings.Contains(string(data), c.says) {
				t.Errorf("%d %s; want %d saying %q", code, data, c.code, c.says)
			}
		})
	}
	// From a served model's name, not streamed.
	code, data := regCall(t, "POST", ts.URL+"/api/create", "", map[string]any{"model": "named", "from": "base", "stream": false})
	if code != 200 || !strings.Contains(string(data), `"success"`) {
		t.Fatalf("/api/create from a name: %d %s", code, data)
	}
}

func TestOllamaShowDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	a := copyChatModel(t, filepath.Join(dir, "a"))
	b := copyChatModel(t, filepath.Join(dir, "b"))
	temp := 0.25
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a,
		Options: ModelOptions{Defaults: ModelDefaults{Temperature: &temp, System: "Be brief."}}}, {Name: "b", Path: b}}})
	code, data := regCall(t, "POST", ts.URL+"/api/show", "", map[string]any{"model": "a"})
	if code != 200 {
		t.Fatalf("/api/show: %d %s", code, data)
	}
	var r struct {
		Template   string         `json:"template"`
		Parameters string         `json:"parameters"`
		System     string         `json:"system"`
		Info       map[string]any `json:"model_info"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Template == "" || r.Info["general.architecture"] == nil || !strings.Contains(r.Parameters, "0.25") || r.System != "Be brief." {
		t.Errorf("/api/show from the files = %s", data)
	}
	if got := psNames(t, ts.URL); len(got) != 0 {
		t.Errorf("/api/ps after /api/show = %v: showing loaded the model", got)
	}
	if code, _ := regCall(t, "POST", ts.URL+"/api/show", "", map[string]any{"model": "nosuch"}); code != 404 {
		t.Errorf("/api/show of an unknown model: %d, want 404", code)
	}
}

func TestRegistrySchedulerMetrics(t *testing.T) {
	dir := t.TempDir()
	a, b := copyChatModel(t, filepath.Join(dir, "a")), copyChatModel(t, filepath.Join(dir, "b"))
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: []ModelSpec{{Name: "a", Path: a}, {Name: "b", Path: b}}})
	for _, m := range []string{"a", "b"} {
		if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat(m)); code != 200 {
			t.Fatalf("chat %s: %d %s", m, code, data)
		}
	}
	metrics := func() string {
		code, data := regCall(t, "GET", ts.URL+"/metrics", "", nil)
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		return string(data)
	}
	m := metrics()
	for _, want := range []string{`lem_sequences_parallel{model="a"}`, `lem_sequences_parallel{model="b"}`,
		`lem_kv_blocks_total{model="a"}`, `lem_prefix_cache_hit_tokens_total{model="b"}`, `lem_sequences_running{model="a"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/admin/models/unload", testAdminKey, map[string]any{"model": "a"}); code != 200 {
		t.Fatalf("unload: %d %s", code, data)
	}
	m = metrics()
	if strings.Contains(m, `lem_sequences_parallel{model="a"}`) || !strings.Contains(m, `lem_sequences_parallel{model="b"}`) {
		t.Errorf("after unloading a, /metrics:\n%s", m)
	}
}

func TestModelsConfigAliasesAndDefaults(t *testing.T) {
	dir := t.TempDir()
	a := copyChatModel(t, filepath.Join(dir, "a"))
	b := copyChatModel(t, filepath.Join(dir, "b"))
	cfgPath := filepath.Join(dir, "lem.json")
	os.WriteFile(cfgPath, []byte(`{
  "aliases": {"fast": "a", "other": "`+b+`"},
  "models": {"fast": {"max_tokens": 2, "temperature": 0.5, "system": "Answer in one word.", "keep_alive": "-1", "context": 512}}
}`), 0o644)
	mc, err := LoadModelsConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	specs, aliases, err := mc.Apply([]ModelSpec{{Name: "a", Path: a}}, func(p string) (string, error) { return p, nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].Name != "other" || aliases["fast"] != "a" || specs[0].KeepAlive >= 0 || specs[0].Options.Context != 512 {
		t.Fatalf("Apply = %+v, %v", specs, aliases)
	}
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{Models: specs, Aliases: aliases})
	chat := func(model string, extra map[string]any) (int, int) {
		body := map[string]any{"model": model, "ignore_eos": true, "messages": []map[string]string{{"role": "user", "content": "Hi"}}}
		for k, v := range extra {
			body[k] = v
		}
		code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", body)
		if code != 200 {
			t.Fatalf("chat %s: %d %s", model, code, data)
		}
		var r struct {
			Usage struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal(data, &r)
		return r.Usage.Prompt, r.Usage.Completion
	}
	p, n := chat("fast", nil)
	if n != 2 {
		t.Errorf("the alias's default max_tokens 2: %d tokens", n)
	}
	if _, n := chat("fast", map[string]any{"max_tokens": 5}); n != 5 {
		t.Errorf("the request's max_tokens 5: %d tokens", n)
	}
	// The system prompt is added unless the request has one.
	pb, _ := chat("other", map[string]any{"max_tokens": 1})
	if p <= pb {
		t.Errorf("prompt with the configured system prompt %d tokens, without %d", p, pb)
	}
	ps, _ := chat("a", map[string]any{"max_tokens": 1, "messages": []map[string]string{{"role": "system", "content": "X"}, {"role": "user", "content": "Hi"}}})
	if ps >= p {
		t.Errorf("a request's own system prompt (%d tokens) did not replace the configured one (%d)", ps, p)
	}
	code, data := regCall(t, "POST", ts.URL+"/api/show", "", map[string]any{"model": "fast"})
	if code != 200 || !strings.Contains(string(data), "0.5") {
		t.Errorf("/api/show fast: %d %s", code, data)
	}
	for _, bad := range []string{`{"models": {"a": {"temperature": -1}}}`, `{"models": {"a": {"keep_alive": "soon"}}}`, `{"nope": 1}`} {
		os.WriteFile(cfgPath, []byte(bad), 0o644)
		if _, err := LoadModelsConfig(cfgPath); err == nil {
			t.Errorf("LoadModelsConfig(%s) = nil error", bad)
		}
	}
	mc = &ModelsConfig{Models: map[string]ModelConfig{"nosuch": {}}}
	if _, _, err := mc.Apply([]ModelSpec{{Name: "a", Path: a}}, nil); err == nil {
		t.Error("settings of an unknown model were accepted")
	}
}

func TestRegistryEncoderModel(t *testing.T) {
	dir := t.TempDir()
	a := copyChatModel(t, filepath.Join(dir, "a"))
	enc, err := filepath.Abs("testdata/encoders/bge-tiny")
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := newRegistryServer(t, Config{}, RegistryConfig{
		Models: []ModelSpec{{Name: "a", Path: a}, {Name: "bge-tiny", Path: enc}},
		OpenEncoder: func(p string) (*engine.Encoder, error) {
			return engine.OpenEncoder(p, engine.Options{Backend: cpu.New(0)})
		},
	})
	code, data := regCall(t, "POST", ts.URL+"/v1/embeddings", "", map[string]any{"model": "bge-tiny", "input": []string{"hello", "world"}})
	if code != 200 {
		t.Fatalf("/v1/embeddings: %d %s", code, data)
	}
	var r oaEmbeddingResponse
	if err := json.Unmarshal(data, &r); err != nil || len(r.Data) != 2 {
		t.Fatalf("/v1/embeddings = %s (%v)", data, err)
	}
	if code, data := regCall(t, "POST", ts.URL+"/api/embed", "", map[string]any{"model": "bge-tiny", "input": "hello"}); code != 200 {
		t.Errorf("/api/embed: %d %s", code, data)
	}
	if code, _ := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("bge-tiny")); code != 400 {
		t.Errorf("chat with the encoder: %d, want 400", code)
	}
	if code, data := regCall(t, "POST", ts.URL+"/v1/chat/completions", "", regChat("a")); code != 200 {
		t.Errorf("chat with a: %d %s", code, data)
	}
	if got := psNames(t, ts.URL); !contains(got, "bge-tiny:latest") {
		t.Errorf("/api/ps = %v", got)
	}
}
