package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/convert"
)

var rerankQuery = "what is the capital of france?"
var rerankDocs = []string{"paris is the capital of france.", "bananas", "the cat sat on the mat"}

// rerank posts the query and documents to url's /v1/rerank and returns the
// relevance score of each document, by index.
func rerank(t *testing.T, url, model string) []float64 {
	t.Helper()
	docs, _ := json.Marshal(rerankDocs)
	body := fmt.Sprintf(`{"model":%q,"query":%q,"documents":%s}`, model, rerankQuery, docs)
	resp, err := http.Post(url+"/v1/rerank", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s/v1/rerank: %d %s", url, resp.StatusCode, raw)
	}
	var v struct {
		Results []struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if len(v.Results) != len(rerankDocs) {
		t.Fatalf("%d results for %d documents: %s", len(v.Results), len(rerankDocs), raw)
	}
	scores := make([]float64, len(rerankDocs))
	for _, r := range v.Results {
		scores[r.Index] = r.Score
	}
	return scores
}

// TestServeRerankerGGUF serves a cross-encoder converted to GGUF (its head
// as llama.cpp's cls and cls.output tensors): /v1/rerank answers with the
// scores the model directory gets. With LEM_LLAMA_SERVER set, llama.cpp's
// llama-server --reranking must load the same file and rank alike.
func TestServeRerankerGGUF(t *testing.T) {
	dir := filepath.Join("..", "..", "server", "testdata", "encoders", "reranker-tiny")
	path := filepath.Join(t.TempDir(), "reranker.gguf")
	if _, err := convert.ToGGUF(dir, path, convert.GGUFOptions{Type: "f32", Threads: 1}); err != nil {
		t.Fatal(err)
	}
	want := rerank(t, startServe(t, "--device", "cpu", "--threads", "1", dir), "reranker-tiny")
	got := rerank(t, startServe(t, "--device", "cpu", "--threads", "1", path), "reranker")
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-5 {
			t.Errorf("document %d: GGUF relevance %g, directory %g", i, got[i], want[i])
		}
	}
	bin := os.Getenv("LEM_LLAMA_SERVER")
	if bin == "" {
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-m", path, "--reranking", "--port", fmt.Sprint(port), "--host", "127.0.0.1", "-t", "1")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(bin))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("llama-server did not become healthy")
		}
		time.Sleep(200 * time.Millisecond)
	}
	ref := rerank(t, url, "reranker")
	for i := range want {
		// llama-server answers the head's logit; lem its sigmoid.
		s := 1 / (1 + math.Exp(-ref[i]))
		t.Logf("document %d: lem %.6f, llama-server %.6f (logit %.6f)", i, got[i], s, ref[i])
		if math.Abs(s-got[i]) > 1e-3 {
			t.Errorf("document %d: lem %g, llama-server sigmoid(%g) = %g", i, got[i], ref[i], s)
		}
	}
}
