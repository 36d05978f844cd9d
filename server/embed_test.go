package server

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// newTinyEmbedServer serves lem-tiny as "tiny" on a loopback port.
func newTinyEmbedServer(t *testing.T) *httptest.Server {
	t.Helper()
	e, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	_, ts := serveModels(t, Config{}, mustModel(t, "tiny", e, ModelOptions{Context: 128}))
	return ts
}

// floats converts a decoded JSON array of numbers.
func floats(t *testing.T, v any) []float64 {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("want an array of numbers, got %T", v)
	}
	out := make([]float64, len(a))
	for i, x := range a {
		out[i] = x.(float64)
	}
	return out
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

func cosine(a, b []float64) float64 {
	var d float64
	for i := range a {
		d += a[i] * b[i]
	}
	return d / norm(a) / norm(b)
}

// oaEmbed posts to /v1/embeddings and returns the embeddings.
func oaEmbed(t *testing.T, base, body string) ([][]float64, map[string]any) {
	t.Helper()
	code, v, raw := post(t, base+"/v1/embeddings", body)
	if code != 200 {
		t.Fatalf("%s: status %d: %s", body, code, raw)
	}
	var out [][]float64
	for i, d := range v["data"].([]any) {
		d := d.(map[string]any)
		if int(d["index"].(float64)) != i || d["object"] != "embedding" {
			t.Fatalf("data[%d]: %v", i, d)
		}
		out = append(out, floats(t, d["embedding"]))
	}
	return out, v
}

func TestEmbeddingsOpenAI(t *testing.T) {
	for _, tc := range []struct {
		name string
		base func(*testing.T) string
		id   string
		dim  int
	}{
		{"chat-model", func(t *testing.T) string { _, ts := newTestServer(t, Config{}); return ts.URL }, "chat", 256},
		{"lem-tiny", func(t *testing.T) string { return newTinyEmbedServer(t).URL }, "tiny", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base(t)
			modelOf := func(*testing.T, string) string { return tc.id }
			texts := []string{"The cat sat on the mat.", "hello", "A longer sentence about the weather in the mountains today.", "hello"}
			in := `["` + strings.Join(texts, `","`) + `"]`
			batch, v := oaEmbed(t, base, `{"model":"`+modelOf(t, base)+`","input":`+in+`}`)
			if len(batch) != len(texts) {
				t.Fatalf("%d embeddings for %d inputs", len(batch), len(texts))
			}
			dim := len(batch[0])
			if tc.dim > 0 && dim != tc.dim {
				t.Errorf("%d dimensions, want %d", dim, tc.dim)
			}
			usage := v["usage"].(map[string]any)
			if usage["prompt_tokens"].(float64) < float64(len(texts)) || usage["total_tokens"] != usage["prompt_tokens"] {
				t.Errorf("usage %v", usage)
			}
			for i, e := range batch {
				if d := math.Abs(norm(e) - 1); d > 1e-4 {
					t.Errorf("input %d: norm %g, want 1", i, norm(e))
				}
			}
			if c := cosine(batch[1], batch[3]); c < 1-1e-6 {
				t.Errorf("the same text twice: cosine %g", c)
			}
			if c := cosine(batch[0], batch[1]); c > 0.99999 {
				t.Errorf("different texts give the same embedding (cosine %g)", c)
			}
			// Each alone equals its embedding in the batch, and a second
			// request gives the same (deterministic).
			for i, text := range texts {
				one, _ := oaEmbed(t, base, fmt.Sprintf(`{"model":%q,"input":%q}`, modelOf(t, base), text))
				if c := cosine(one[0], batch[i]); c < 1-1e-5 {
					t.Errorf("input %d alone: cosine %g with the batch's", i, c)
				}
			}
			// base64: little-endian float32 of the same values.
			code, b64, raw := post(t, base+"/v1/embeddings", `{"model":"`+modelOf(t, base)+`","input":`+in+`,"encoding_format":"base64"}`)
			if code != 200 {
				t.Fatalf("base64: %d %s", code, raw)
			}
			for i, d := range b64["data"].([]any) {
				s := d.(map[string]any)["embedding"].(string)
				buf, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				if len(buf) != 4*dim {
					t.Fatalf("base64 of %d bytes, want %d", len(buf), 4*dim)
				}
				for j := range dim {
					x := float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:])))
					if math.Abs(x-batch[i][j]) > 1e-5 {
						t.Fatalf("input %d value %d: base64 %g, float %g", i, j, x, batch[i][j])
					}
				}
			}
			// dimensions: the first values, renormalised.
			k := dim / 4
			cut, _ := oaEmbed(t, base, fmt.Sprintf(`{"model":%q,"input":%q,"dimensions":%d}`, modelOf(t, base), texts[0], k))
			if len(cut[0]) != k {
				t.Fatalf("dimensions %d: got %d", k, len(cut[0]))
			}
			n := norm(batch[0][:k])
			for j := range k {
				if math.Abs(cut[0][j]-batch[0][j]/n) > 1e-5 {
					t.Fatalf("dimensions: value %d is %g, want %g", j, cut[0][j], batch[0][j]/n)
				}
			}
			// Token ids as input.
			ids, _ := oaEmbed(t, base, fmt.Sprintf(`{"model":%q,"input":[[1,2,3],[4,5]]}`, modelOf(t, base)))
			if len(ids) != 2 || len(ids[0]) != dim {
				t.Errorf("token-id input: %d embeddings", len(ids))
			}
		})
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	long := strings.Repeat("word ", 20000)
	for _, tc := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/embeddings", `{"model":"chat","input":""}`, 400, "input"},
		{"/v1/embeddings", `{"model":"chat","input":[]}`, 400, "input"},
		{"/v1/embeddings", `{"model":"chat"}`, 400, "input"},
		{"/v1/embeddings", `{"model":"chat","input":["a",""]}`, 400, "input[1]"},
		{"/v1/embeddings", `{"model":"chat","input":"a","dimensions":257}`, 400, "256"},
		{"/v1/embeddings", `{"model":"chat","input":"a","dimensions":0}`, 400, "dimensions"},
		{"/v1/embeddings", `{"model":"chat","input":"a","encoding_format":"hex"}`, 400, "encoding_format"},
		{"/v1/embeddings", `{"model":"chat","input":[[1,999999]]}`, 400, "vocabulary"},
		{"/v1/embeddings", `{"model":"chat","input":"` + long + `"}`, 400, "context length"},
		{"/v1/embeddings", `{"model":"chat","input":[` + strings.Repeat(`"a",`, maxEmbedInputs) + `"a"]}`, 400, "2048"},
		{"/api/embed", `{"model":"chat","input":"` + long + `","truncate":false}`, 400, "context length"},
		{"/api/embed", `{"model":"chat","input":["a",""]}`, 400, "input"},
		{"/v1/rerank", `{"model":"chat","query":"q","documents":[]}`, 400, "documents"},
		{"/v1/rerank", `{"model":"chat","query":"","documents":["a"]}`, 400, "query"},
		{"/v1/rerank", `{"model":"chat","query":"q","documents":["a"],"top_n":0}`, 400, "top_n"},
		{"/v1/score", `{"model":"chat","text_1":["a","b"],"text_2":["a","b","c"]}`, 400, "text_1"},
	} {
		code, _, raw := post(t, ts.URL+tc.path, tc.body)
		if code != tc.code || !strings.Contains(raw, tc.want) {
			b := tc.body
			if len(b) > 80 {
				b = b[:80] + "…"
			}
			t.Errorf("%s %s: %d %s; want %d naming %q", tc.path, b, code, raw, tc.code, tc.want)
		}
	}
}

func TestEmbeddingsOllama(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	_, v := oaEmbed(t, ts.URL, `{"model":"chat","input":["Why is the sky blue?","hello"]}`)
	want := v["data"].([]any)
	code, o, raw := post(t, ts.URL+"/api/embed", `{"model":"chat","input":["Why is the sky blue?","hello"],"keep_alive":"5m"}`)
	if code != 200 {
		t.Fatalf("/api/embed: %d %s", code, raw)
	}
	embs := o["embeddings"].([]any)
	if len(embs) != 2 || o["prompt_eval_count"].(float64) < 2 || o["total_duration"].(float64) <= 0 || o["model"] != "chat:latest" {
		t.Fatalf("/api/embed: %s", raw)
	}
	for i := range embs {
		if c := cosine(floats(t, embs[i]), floats(t, want[i].(map[string]any)["embedding"])); c < 1-1e-6 {
			t.Errorf("/api/embed input %d differs from /v1/embeddings (cosine %g)", i, c)
		}
	}
	// A string input, truncated to the context by default.
	long := strings.Repeat("word ", 20000)
	code, o, raw = post(t, ts.URL+"/api/embed", `{"model":"chat","input":"`+long+`"}`)
	if code != 200 || len(o["embeddings"].([]any)) != 1 {
		t.Fatalf("/api/embed of a long input: %d %.200s", code, raw)
	}
	// dimensions.
	code, o, raw = post(t, ts.URL+"/api/embed", `{"model":"chat","input":"hello","dimensions":8}`)
	if code != 200 || len(o["embeddings"].([]any)[0].([]any)) != 8 {
		t.Fatalf("/api/embed dimensions: %d %.200s", code, raw)
	}
	// No input: no embeddings, as Ollama answers a client loading a model.
	code, o, raw = post(t, ts.URL+"/api/embed", `{"model":"chat"}`)
	if code != 200 || len(o["embeddings"].([]any)) != 0 {
		t.Fatalf("/api/embed without input: %d %s", code, raw)
	}
	// The older route.
	code, o, raw = post(t, ts.URL+"/api/embeddings", `{"model":"chat","prompt":"hello"}`)
	if code != 200 {
		t.Fatalf("/api/embeddings: %d %s", code, raw)
	}
	if c := cosine(floats(t, o["embedding"]), floats(t, want[1].(map[string]any)["embedding"])); c < 1-1e-6 {
		t.Errorf("/api/embeddings differs from /v1/embeddings (cosine %g)", c)
	}
	if got := metricValue(t, ts.URL, `lem_embedding_inputs_total{model="chat"}`); got < 6 {
		t.Errorf("lem_embedding_inputs_total %g, want at least 6", got)
	}
}

func TestRerankByCosine(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	query := "What is the capital of France?"
	docs := []string{"Paris is the capital of France.", "Bananas are yellow.", "The Eiffel Tower is in Paris.", "What is the capital of France?"}
	in := `["` + strings.Join(append([]string{query}, docs...), `","`) + `"]`
	embs, _ := oaEmbed(t, ts.URL, `{"model":"chat","input":`+in+`}`)
	want := make([]float64, len(docs))
	for i := range docs {
		want[i] = cosine(embs[0], embs[i+1])
	}
	code, v, raw := post(t, ts.URL+"/v1/rerank", `{"model":"chat","query":"`+query+`","documents":["`+docs[0]+`",{"text":"`+docs[1]+`"},"`+docs[2]+`","`+docs[3]+`"],"top_n":3,"return_documents":true}`)
	if code != 200 {
		t.Fatalf("/v1/rerank: %d %s", code, raw)
	}
	res := v["results"].([]any)
	if len(res) != 3 {
		t.Fatalf("top_n 3: %d results", len(res))
	}
	prev := math.Inf(1)
	for _, r := range res {
		r := r.(map[string]any)
		i := int(r["index"].(float64))
		s := r["relevance_score"].(float64)
		if math.Abs(s-want[i]) > 1e-4 {
			t.Errorf("document %d: score %g, cosine of embeddings %g", i, s, want[i])
		}
		if s > prev {
			t.Errorf("results not sorted by score: %s", raw)
		}
		prev = s
		if r["document"].(map[string]any)["text"] != docs[i] {
			t.Errorf("document %d: %v", i, r["document"])
		}
	}
	if first := int(res[0].(map[string]any)["index"].(float64)); first != 3 {
		t.Errorf("the query itself is not the best match: %s", raw)
	}
	// /v1/score: one text_1 against the documents, and pair by pair.
	code, v, raw = post(t, ts.URL+"/v1/score", `{"model":"chat","text_1":"`+query+`","text_2":["`+strings.Join(docs, `","`)+`"]}`)
	if code != 200 {
		t.Fatalf("/v1/score: %d %s", code, raw)
	}
	for i, d := range v["data"].([]any) {
		d := d.(map[string]any)
		if int(d["index"].(float64)) != i || math.Abs(d["score"].(float64)-want[i]) > 1e-4 {
			t.Errorf("/v1/score data[%d] = %v, want score %g", i, d, want[i])
		}
	}
	code, v, raw = post(t, ts.URL+"/v1/score", `{"model":"chat","text_1":["`+docs[0]+`","`+query+`"],"text_2":["`+docs[2]+`","`+docs[0]+`"]}`)
	if code != 200 {
		t.Fatalf("/v1/score pairs: %d %s", code, raw)
	}
	if s := v["data"].([]any)[1].(map[string]any)["score"].(float64); math.Abs(s-want[0]) > 1e-4 {
		t.Errorf("/v1/score pair 1: %g, want %g", s, want[0])
	}
	if s := v["data"].([]any)[0].(map[string]any)["score"].(float64); math.Abs(s-cosine(embs[1], embs[3])) > 1e-4 {
		t.Errorf("/v1/score pair 0: %g, want %g", s, cosine(embs[1], embs[3]))
	}
}
