package compat

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/server"
	"github.com/lem-engine/lem/tiny"
)

// startEncoderServer serves the encoder fixture ../server/testdata/encoders/name
// (BERT, XLM-RoBERTa or ModernBERT weights with a small WordPiece
// tokenizer) on a loopback port, as `lem serve DIR` does.
func startEncoderServer(t *testing.T, name string) string {
	t.Helper()
	e, err := engine.OpenEncoder(filepath.Join("..", "server", "testdata", "encoders", name), engine.Options{Backend: cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	m, err := server.NewEncoderModel(name, e, server.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, m)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func cosine64(a, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func norm64(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

// embedServers are the models the embedding tests run on: decoders
// (lem-tiny, the chat fixture) and encoders (BGE-style CLS pooling,
// e5-style mean pooling).
func embedServers(t *testing.T) []struct{ name, base string } {
	tinyBase, _ := startTinyServer(t, server.Config{})
	chatBase, _ := startServer(t, server.Config{})
	return []struct{ name, base string }{
		{tiny.Name, tinyBase},
		{"chat-model", chatBase},
		{"bge-tiny", startEncoderServer(t, "bge-tiny")},
		{"e5-tiny", startEncoderServer(t, "e5-tiny")},
	}
}

func TestOpenAIEmbeddings(t *testing.T) {
	texts := []string{"What is the capital of France?", "Paris is the capital of France.", "the cat sat on the mat"}
	for _, sv := range embedServers(t) {
		t.Run(sv.name, func(t *testing.T) {
			c := newClient(sv.base)
			ctx := context.Background()
			res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: sv.name,
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Data) != len(texts) || res.Usage.PromptTokens < int64(len(texts)) || res.Object != "list" {
				t.Fatalf("response %+v", res)
			}
			dim := len(res.Data[0].Embedding)
			for i, d := range res.Data {
				if d.Index != int64(i) || len(d.Embedding) != dim || math.Abs(norm64(d.Embedding)-1) > 1e-4 {
					t.Errorf("data[%d]: index %d, %d values, norm %g", i, d.Index, len(d.Embedding), norm64(d.Embedding))
				}
			}
			if cosine64(res.Data[0].Embedding, res.Data[1].Embedding) > 1-1e-6 {
				t.Error("two different texts have the same embedding")
			}

			// base64: the little-endian float32 bytes of the same vectors.
			b64, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model:          sv.name,
				Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
				EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range b64.Data {
				var s string
				if err := json.Unmarshal([]byte(d.JSON.Embedding.Raw()), &s); err != nil {
					t.Fatalf("data[%d] base64: %v (%.100s)", i, err, d.JSON.Embedding.Raw())
				}
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(raw) != 4*dim {
					t.Fatalf("data[%d]: %d bytes, %v; want %d", i, len(raw), err, 4*dim)
				}
				v := make([]float64, dim)
				for j := range v {
					v[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])))
				}
				if c := cosine64(v, res.Data[i].Embedding); c < 1-1e-6 {
					t.Errorf("data[%d]: base64 and float differ (cosine %g)", i, c)
				}
			}

			// dimensions: the first values, normalised again.
			cut, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model:      sv.name,
				Input:      openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[0])},
				Dimensions: openai.Int(8),
			})
			if err != nil {
				t.Fatal(err)
			}
			if v := cut.Data[0].Embedding; len(v) != 8 || math.Abs(norm64(v)-1) > 1e-4 || cosine64(v, res.Data[0].Embedding[:8]) < 1-1e-5 {
				t.Errorf("dimensions 8: %v", v)
			}
			if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
				Model: sv.name, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Dimensions: openai.Int(int64(dim + 1)),
			}); err == nil || !strings.Contains(err.Error(), "400") {
				t.Errorf("dimensions over the size: %v", err)
			}
		})
	}
}

func TestOllamaEmbed(t *testing.T) {
	texts := []string{"Why is the sky blue?", "the sky is blue"}
	for _, sv := range embedServers(t) {
		t.Run(sv.name, func(t *testing.T) {
			c := newOllama(t, sv.base, "")
			ctx := context.Background()
			res, err := c.Embed(ctx, &api.EmbedRequest{Model: sv.name, Input: texts})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Embeddings) != 2 || res.PromptEvalCount < 2 || res.TotalDuration <= 0 {
				t.Fatalf("Embed: %+v", res)
			}
			one, err := c.Embeddings(ctx, &api.EmbeddingRequest{Model: sv.name, Prompt: texts[1]})
			if err != nil {
				t.Fatal(err)
			}
			a := make([]float64, len(res.Embeddings[1]))
			for i, x := range res.Embeddings[1] {
				a[i] = float64(x)
			}
			if c := cosine64(a, one.Embedding); c < 1-1e-5 {
				t.Errorf("/api/embeddings and /api/embed differ: cosine %g", c)
			}
			cut, err := c.Embed(ctx, &api.EmbedRequest{Model: sv.name, Input: texts[0], Dimensions: 4})
			if err != nil || len(cut.Embeddings) != 1 || len(cut.Embeddings[0]) != 4 {
				t.Errorf("Embed dimensions 4: %+v %v", cut, err)
			}
		})
	}
}

// TestEncoderServed checks what Ollama's and OpenAI's clients see of an
// encoder model: listed, an embedding model in /api/show, and a clear
// error for generation.
func TestEncoderServed(t *testing.T) {
	base := startEncoderServer(t, "bge-tiny")
	ctx := context.Background()
	ol := newOllama(t, base, "")
	show, err := ol.Show(ctx, &api.ShowRequest{Model: "bge-tiny"})
	if err != nil {
		t.Fatal(err)
	}
	if len(show.Capabilities) != 1 || show.Capabilities[0] != "embedding" {
		t.Errorf("capabilities %v, want [embedding]", show.Capabilities)
	}
	list, err := ol.List(ctx)
	if err != nil || len(list.Models) != 1 || list.Models[0].Name != "bge-tiny:latest" {
		t.Errorf("List: %+v %v", list, err)
	}
	err = ol.Chat(ctx, &api.ChatRequest{Model: "bge-tiny", Messages: []api.Message{olUser("hi")}}, func(api.ChatResponse) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "is an embedding model") {
		t.Errorf("Ollama chat: %v", err)
	}
	oa := newClient(base)
	models, err := oa.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "bge-tiny" {
		t.Errorf("Models.List: %+v %v", models, err)
	}
	_, err = oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "bge-tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "is an embedding model") {
		t.Errorf("OpenAI chat: %v", err)
	}
}

// rerankHTTP posts a Cohere/Jina-shaped rerank request (there is no
// official Go SDK for it) and returns the scores by document index, in
// the order the server ranked them.
func rerankHTTP(t *testing.T, base, model, query string, docs []string, topN int) (order []int, scores map[int]float64) {
	t.Helper()
	req := map[string]any{"model": model, "query": query, "documents": docs}
	if topN > 0 {
		req["top_n"] = topN
	}
	body, _ := json.Marshal(req)
	resp, err := http.Post(base+"/v1/rerank", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Results []struct {
			Index          int     `json:"index"`
			RelevanceScore float64 `json:"relevance_score"`
		} `json:"results"`
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/rerank: %d %s", resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.Usage.TotalTokens <= 0 {
		t.Errorf("usage: %s", raw)
	}
	scores = map[int]float64{}
	for _, r := range out.Results {
		order = append(order, r.Index)
		scores[r.Index] = r.RelevanceScore
	}
	return order, scores
}

func TestRerank(t *testing.T) {
	query := "What is the capital of France?"
	docs := []string{"Bananas are yellow.", "Paris is the capital of France.", "the cat sat on the mat", "What is the capital of France?"}
	for _, name := range []string{"reranker-tiny", "modernbert-reranker-tiny", "e5-tiny"} {
		t.Run(name, func(t *testing.T) {
			base := startEncoderServer(t, name)
			order, scores := rerankHTTP(t, base, name, query, docs, 0)
			if len(order) != len(docs) {
				t.Fatalf("%d results for %d documents", len(order), len(docs))
			}
			if !slices.IsSortedFunc(order, func(a, b int) int {
				switch {
				case scores[a] > scores[b]:
					return -1
				case scores[a] < scores[b]:
					return 1
				}
				return 0
			}) {
				t.Errorf("results not sorted by relevance: %v %v", order, scores)
			}
			for i, s := range scores {
				// A cross-encoder's relevance is a sigmoid in (0, 1); an
				// embedding model's a cosine in [-1, 1].
				if s <= -1 || s >= 1 || (name != "e5-tiny" && s <= 0) {
					t.Errorf("document %d: relevance %g out of range", i, s)
				}
			}
			if name == "e5-tiny" && order[0] != 3 {
				t.Errorf("by cosine, the query itself ranks first: %v %v", order, scores)
			}
			top, topScores := rerankHTTP(t, base, name, query, docs, 2)
			if len(top) != 2 || !slices.Equal(top, order[:2]) || topScores[top[0]] != scores[top[0]] {
				t.Errorf("top_n 2: %v, want %v", top, order[:2])
			}
		})
	}
}
