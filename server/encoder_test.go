package server

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
)

// newEncoderServer serves the encoder fixture server/testdata/encoders/name
// under its name, and returns the opened encoder for reference numbers.
func newEncoderServer(t *testing.T, name string) (*httptest.Server, *engine.Encoder) {
	t.Helper()
	e, err := engine.OpenEncoder(filepath.Join("testdata", "encoders", name), engine.Options{Backend: cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	m, err := NewEncoderModel(name, e, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ts := serveModels(t, Config{}, m)
	return ts, e
}

// refEmbedding computes text's embedding directly from the encoder: the
// tokenizer's single-text encoding, the pooling given, L2-normalised.
func refEmbedding(t *testing.T, e *engine.Encoder, text string, pool engine.Pooling) []float64 {
	t.Helper()
	ids, types := e.Tokenizer.EncodeSpecial(text)
	out, err := e.Net.Encode([]model.EncoderInput{{IDs: ids, TypeIDs: types}})
	if err != nil {
		t.Fatal(err)
	}
	dim := e.Net.Config().HiddenSize
	h := out[0].Hidden
	v := make([]float64, dim)
	n := len(ids)
	for i := range n {
		if (pool == engine.PoolFirst && i != 0) || (pool == engine.PoolLast && i != n-1) {
			continue
		}
		for j := range dim {
			v[j] += float64(h[i*dim+j])
		}
	}
	s := norm(v)
	for j := range v {
		v[j] /= s
	}
	return v
}

func TestEncoderEmbeddings(t *testing.T) {
	texts := []string{"What is the capital of France?", "Paris is the capital city of France.", "the cat sat on the mat", "blue sky"}
	for _, tc := range []struct {
		name string
		pool engine.Pooling
	}{
		{"bge-tiny", engine.PoolFirst}, // BERT, CLS pooling from 1_Pooling
		{"e5-tiny", engine.PoolMean},   // XLM-RoBERTa, mean pooling
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, e := newEncoderServer(t, tc.name)
			if e.Embedding.Pooling != tc.pool || !e.Embedding.Normalize {
				t.Fatalf("embedding config %+v, want %v pooling, normalised", e.Embedding, tc.pool)
			}
			embs, v := oaEmbed(t, ts.URL, `{"model":"`+tc.name+`","input":`+mustJSON(texts)+`}`)
			if len(embs) != len(texts) {
				t.Fatalf("%d embeddings for %d inputs", len(embs), len(texts))
			}
			if u := v["usage"].(map[string]any); u["prompt_tokens"].(float64) < float64(len(texts)*3) {
				t.Errorf("usage %v", u)
			}
			for i, text := range texts {
				want := refEmbedding(t, e, text, tc.pool)
				if len(embs[i]) != len(want) {
					t.Fatalf("input %d: %d values, want %d", i, len(embs[i]), len(want))
				}
				if c := cosine(embs[i], want); c < 1-1e-5 {
					t.Errorf("input %d: cosine %g to the reference", i, c)
				}
				if n := norm(embs[i]); math.Abs(n-1) > 1e-4 {
					t.Errorf("input %d: norm %g", i, n)
				}
			}
			// The other pooling gives another vector: the configured one is used.
			other := engine.PoolMean
			if tc.pool == engine.PoolMean {
				other = engine.PoolFirst
			}
			if c := cosine(embs[0], refEmbedding(t, e, texts[0], other)); c > 1-1e-4 {
				t.Errorf("the embedding also matches %v pooling (cosine %g): the test cannot tell", other, c)
			}
			// dimensions: the first values, normalised again.
			cut, _ := oaEmbed(t, ts.URL, `{"model":"`+tc.name+`","input":"`+texts[0]+`","dimensions":8}`)
			if len(cut[0]) != 8 || math.Abs(norm(cut[0])-1) > 1e-4 || cosine(cut[0], embs[0][:8]) < 1-1e-5 {
				t.Errorf("dimensions 8: %v", cut[0])
			}
			// Ollama's routes give the same vectors.
			code, o, raw := post(t, ts.URL+"/api/embed", `{"model":"`+tc.name+`","input":`+mustJSON(texts)+`}`)
			if code != 200 {
				t.Fatalf("/api/embed: %d %s", code, raw)
			}
			for i, x := range o["embeddings"].([]any) {
				if c := cosine(floats(t, x), embs[i]); c < 1-1e-6 {
					t.Errorf("/api/embed input %d: cosine %g to /v1/embeddings", i, c)
				}
			}
			code, o, raw = post(t, ts.URL+"/api/embeddings", `{"model":"`+tc.name+`","prompt":"`+texts[1]+`"}`)
			if code != 200 || cosine(floats(t, o["embedding"]), embs[1]) < 1-1e-6 {
				t.Errorf("/api/embeddings: %d %.300s", code, raw)
			}
			// An input over the model's positions: 400 unless truncated.
			long := strings.Repeat("hello ", 200)
			if code, _, raw := post(t, ts.URL+"/v1/embeddings", `{"model":"`+tc.name+`","input":"`+long+`"}`); code != 400 || !strings.Contains(raw, "context") {
				t.Errorf("long input: %d %s", code, raw)
			}
			code, o, raw = post(t, ts.URL+"/api/embed", `{"model":"`+tc.name+`","input":"`+long+`"}`)
			if code != 200 || len(o["embeddings"].([]any)) != 1 {
				t.Fatalf("long input, truncated: %d %.300s", code, raw)
			}
			// Truncated to the positions, the closing special token kept.
			ids, _ := e.Tokenizer.EncodeSpecial(long)
			n := e.Net.MaxTokens()
			ids = append(ids[:n-1:n-1], ids[len(ids)-1])
			out, err := e.Net.Encode([]model.EncoderInput{{IDs: ids}})
			if err != nil {
				t.Fatal(err)
			}
			dim := e.Net.Config().HiddenSize
			want := make([]float64, dim)
			for i := range n {
				if tc.pool == engine.PoolFirst && i > 0 {
					break
				}
				for j := range dim {
					want[j] += float64(out[0].Hidden[i*dim+j])
				}
			}
			if c := cosine(floats(t, o["embeddings"].([]any)[0]), want); c < 1-1e-5 {
				t.Errorf("long input, truncated: cosine %g to the input cut to %d tokens with its closing token", c, n)
			}
		})
	}
}

func TestEncoderRefusesGeneration(t *testing.T) {
	ts, _ := newEncoderServer(t, "bge-tiny")
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"bge-tiny","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"model":"bge-tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"/v1/completions", `{"model":"bge-tiny","prompt":"hi"}`},
		{"/v1/responses", `{"model":"bge-tiny","input":"hi"}`},
		{"/v1/messages", `{"model":"bge-tiny","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"/api/chat", `{"model":"bge-tiny","messages":[{"role":"user","content":"hi"}]}`},
		{"/api/generate", `{"model":"bge-tiny","prompt":"hi"}`},
		{"/api/generate", `{"model":"bge-tiny"}`}, // a client loading the model
		{"/api/chat", `{"model":"bge-tiny","messages":[]}`},
		{"/v1/messages/count_tokens", `{"model":"bge-tiny","messages":[{"role":"user","content":"hi"}]}`},
	} {
		code, _, raw := post(t, ts.URL+tc.path, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(raw, `\"bge-tiny\" is an embedding model`) && !strings.Contains(raw, `"bge-tiny" is an embedding model`) {
			t.Errorf("%s: %d %s; want 400 saying it is an embedding model", tc.path, code, raw)
		}
	}
}

func TestEncoderListed(t *testing.T) {
	ts, _ := newEncoderServer(t, "e5-tiny")
	get := func(path string) string {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if b := get("/v1/models"); !strings.Contains(b, `"id":"e5-tiny"`) {
		t.Errorf("/v1/models: %s", b)
	}
	if b := get("/api/tags"); !strings.Contains(b, `"name":"e5-tiny:latest"`) || !strings.Contains(b, `"family":"xlm-roberta"`) {
		t.Errorf("/api/tags: %s", b)
	}
	get("/api/ps")
	get("/metrics")
	code, v, raw := post(t, ts.URL+"/api/show", `{"model":"e5-tiny"}`)
	if code != 200 {
		t.Fatalf("/api/show: %d %s", code, raw)
	}
	if c := v["capabilities"].([]any); len(c) != 1 || c[0] != "embedding" {
		t.Errorf("/api/show capabilities %v, want [embedding]", c)
	}
	if info := v["model_info"].(map[string]any); info["xlm-roberta.embedding_length"] != 32.0 {
		t.Errorf("/api/show model_info %v", info)
	}
}

func TestCrossEncoderRerank(t *testing.T) {
	query := "What is the capital of France?"
	docs := []string{"Paris is the capital of France.", "bananas", "the cat sat on the mat", "Berlin is the capital of Germany."}
	for _, name := range []string{"reranker-tiny", "modernbert-reranker-tiny"} {
		t.Run(name, func(t *testing.T) {
			ts, e := newEncoderServer(t, name)
			// The reference: sigmoid of the head's relevance logit for the pair.
			want := make([]float64, len(docs))
			for i, d := range docs {
				ids, types := e.Tokenizer.EncodePair(query, d)
				out, err := e.Net.Encode([]model.EncoderInput{{IDs: ids, TypeIDs: types}})
				if err != nil {
					t.Fatal(err)
				}
				l := float64(out[0].Logits[0])
				if len(out[0].Logits) == 2 {
					l = float64(out[0].Logits[1] - out[0].Logits[0])
				}
				want[i] = 1 / (1 + math.Exp(-l))
			}
			code, v, raw := post(t, ts.URL+"/v1/rerank", `{"model":"`+name+`","query":"`+query+`","documents":`+mustJSON(docs)+`,"return_documents":true}`)
			if code != 200 {
				t.Fatalf("/v1/rerank: %d %s", code, raw)
			}
			res := v["results"].([]any)
			if len(res) != len(docs) {
				t.Fatalf("%d results for %d documents", len(res), len(docs))
			}
			prev := math.Inf(1)
			for _, r := range res {
				r := r.(map[string]any)
				i := int(r["index"].(float64))
				s := r["relevance_score"].(float64)
				if math.Abs(s-want[i]) > 1e-5 {
					t.Errorf("document %d: relevance %g, want sigmoid of the logit %g", i, s, want[i])
				}
				if s > prev {
					t.Errorf("results not sorted: %s", raw)
				}
				prev = s
			}
			code, v, raw = post(t, ts.URL+"/v1/score", `{"model":"`+name+`","text_1":"`+query+`","text_2":`+mustJSON(docs)+`}`)
			if code != 200 {
				t.Fatalf("/v1/score: %d %s", code, raw)
			}
			for i, d := range v["data"].([]any) {
				if s := d.(map[string]any)["score"].(float64); math.Abs(s-want[i]) > 1e-5 {
					t.Errorf("/v1/score %d: %g, want %g", i, s, want[i])
				}
			}
			// A document longer than the model's positions is cut to fit.
			long := strings.Repeat("river ", 300)
			if code, v, raw := post(t, ts.URL+"/v1/rerank", `{"model":"`+name+`","query":"`+query+`","documents":["`+long+`"]}`); code != 200 || len(v["results"].([]any)) != 1 {
				t.Errorf("long document: %d %.300s", code, raw)
			}
			// A query that leaves no room is the client's mistake.
			if code, _, raw := post(t, ts.URL+"/v1/rerank", `{"model":"`+name+`","query":"`+long+`","documents":["bananas"]}`); code != 400 {
				t.Errorf("long query: %d %.300s", code, raw)
			}
		})
	}
}
