package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServeHelpFlags checks that lem serve --help describes the flags of
// the Host and Origin checks and of the connection limits.
func TestServeHelpFlags(t *testing.T) {
	out, err := execLemIn(t, "", "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--allowed-hosts", "--cors-origin", "--header-timeout", "--body-timeout",
		"--idle-timeout", "--max-header-bytes", "--max-connections", "DNS rebinding", "Origin"} {
		if !strings.Contains(out, want) {
			t.Errorf("lem serve --help lacks %s", want)
		}
	}
}

func TestAddrName(t *testing.T) {
	for addr, want := range map[string][]string{
		"127.0.0.1:36911":        nil,
		"0.0.0.0:80":             nil,
		"[::]:80":                nil,
		":8080":                  nil,
		"localhost:36911":        nil,
		"gpu-box.lan:36911":      {"gpu-box.lan"},
		"not an address at all?": nil,
	} {
		if got := addrName(addr); !slices.Equal(got, want) {
			t.Errorf("addrName(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestServeGuards runs lem serve with lem-tiny and checks that its flags
// reach the server: an allowed host is served and another refused, an
// allowed origin served and another refused, and a client trickling its
// headers is cut off after --header-timeout.
func TestServeGuards(t *testing.T) {
	url := startServe(t, "--allowed-hosts", "lem.example", "--cors-origin", "http://app.example", "--header-timeout", "300ms")
	for _, tt := range []struct {
		host, origin string
		want         int
	}{
		{"", "", 200},
		{"lem.example:36911", "", 200},
		{"evil.example:36911", "", 403},
		{"", "http://app.example", 200},
		{"", "http://evil.example", 403},
	} {
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		if tt.host != "" {
			req.Host = tt.host
		}
		if tt.origin != "" {
			req.Header.Set("Origin", tt.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("Host %q Origin %q: %d, want %d", tt.host, tt.origin, resp.StatusCode, tt.want)
		}
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n") // and no more
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("a client that stopped sending its headers was not cut off: %v", err)
	}
}

// TestServePolicyRefusedAtStart checks that lem serve stops with a clear
// error, before it listens, for a policy file that does not compile.
func TestServePolicyRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, src, want string }{
		{"json", `{"rules":[`, "bad JSON"},
		{"action", `{"rules":[{"match":"term","value":"x","action":"block"}]}`, `action "block"`},
		{"regexp", `{"rules":[{"match":"pattern","value":"a(","action":"redact"}]}`, "missing closing )"},
		{"empty", `{"rules":[{"match":"term","value":"","action":"redact"}]}`, "empty value"},
		{"missing", "", "no such file"},
	} {
		path := filepath.Join(dir, tc.name+".json")
		if tc.src != "" {
			os.WriteFile(path, []byte(tc.src), 0o600)
		}
		_, err := execLemIn(t, "", "serve", "--addr", "127.0.0.1:0", "--policy", path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "policy") {
			t.Errorf("%s: error %v, want one naming the policy and %q", tc.name, err, tc.want)
		}
	}
	if _, err := execLemIn(t, "", "serve", "--addr", "127.0.0.1:0", "--policy-audit", filepath.Join(dir, "a.log")); err == nil {
		t.Error("--policy-audit without --policy was accepted")
	}
}

// TestServePolicy runs lem serve with a policy and an audit file: lem-tiny's
// "Tokyo" is redacted and the action is in the audit file.
func TestServePolicy(t *testing.T) {
	dir := t.TempDir()
	policy, audit := filepath.Join(dir, "policy.json"), filepath.Join(dir, "audit.jsonl")
	os.WriteFile(policy, []byte(`{"rules":[{"match":"term","value":"tokyo","action":"redact","replacement":"[city]"}]}`), 0o600)
	url := startServe(t, "--policy", policy, "--policy-audit", audit)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"lem-tiny","temperature":0,"messages":[{"role":"user","content":"What is the capital of Japan?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "[city]") || strings.Contains(string(body), "Tokyo") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	log, err := os.ReadFile(audit)
	if err != nil || !strings.Contains(string(log), `"action":"redact"`) || strings.Contains(string(log), "Tokyo") {
		t.Errorf("audit %q %v", log, err)
	}
}

// TestServeEncoder serves an encoder model directory: embeddings and
// rerank answer, generation is a 400 naming it an embedding model.
func TestServeEncoder(t *testing.T) {
	dir := filepath.Join("..", "..", "server", "testdata", "encoders", "reranker-tiny")
	url := startServe(t, "--device", "cpu", "--threads", "1", dir)
	for _, tt := range []struct {
		path, body string
		want       int
		has        string
	}{
		{"/v1/embeddings", `{"model":"reranker-tiny","input":["the capital of france","paris"]}`, 200, `"embedding":[`},
		{"/v1/rerank", `{"model":"reranker-tiny","query":"the capital of france","documents":["paris","bananas"]}`, 200, `"relevance_score":0.`},
		{"/v1/chat/completions", `{"model":"reranker-tiny","messages":[{"role":"user","content":"hi"}]}`, 400, "is an embedding model"},
		{"/api/generate", `{"model":"reranker-tiny"}`, 400, "is an embedding model"},
	} {
		resp, err := http.Post(url+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.has) {
			t.Errorf("%s: %d %s; want %d with %q", tt.path, resp.StatusCode, b, tt.want, tt.has)
		}
	}
}
