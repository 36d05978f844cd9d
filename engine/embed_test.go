package engine

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/safetensors"
)

// readF32 reads a tensor of a safetensors file as float32.
func readF32(t *testing.T, path, name string) []float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("%s: no tensor %s", path, name)
	}
	v, err := x.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEmbedMatchesReference checks the pooled hidden states of the
// scheduler against the reference implementation's logits: the llama
// fixture's logits are the final hidden states times lm_head, so the last
// row's, the first row's and (by linearity) the mean of every row's hidden
// states, times lm_head, are the reference's logits of the last row, the
// first row and their mean over the rows. The input runs in chunks of 16
// under a step budget of 24 rows, beside other inputs.
func TestEmbedMatchesReference(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	m := openFixture(t, "llama")
	s := newSched(t, m, SchedulerOptions{Parallel: 4, Chunk: 16, BatchTokens: 24})
	ref := archref.Load(t, dir)
	ids, logits := ref.InputIDs, ref.Logits
	head := readF32(t, filepath.Join(dir, "model.safetensors"), "lm_head.weight")
	cfg := m.Net.Config()
	vocab, hid := cfg.VocabSize, cfg.HiddenSize
	n := len(ids)
	want := map[Pooling][]float64{
		PoolLast:  make([]float64, vocab),
		PoolFirst: make([]float64, vocab),
		PoolMean:  make([]float64, vocab),
	}
	for v := range vocab {
		want[PoolLast][v] = float64(logits[(n-1)*vocab+v])
		want[PoolFirst][v] = float64(logits[v])
		for r := range n {
			want[PoolMean][v] += float64(logits[r*vocab+v]) / float64(n)
		}
	}
	for _, pool := range []Pooling{PoolLast, PoolFirst, PoolMean} {
		t.Run(pool.String(), func(t *testing.T) {
			inputs := [][]int32{testPrompt(7, 1, vocab), ids, testPrompt(30, 2, vocab), {5}}
			out, err := s.Embed(context.Background(), inputs, pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(inputs) {
				t.Fatalf("%d embeddings for %d inputs", len(out), len(inputs))
			}
			h := out[1]
			if len(h) != hid {
				t.Fatalf("embedding of %d values, want the hidden size %d", len(h), hid)
			}
			worst := 0.0
			for v := range vocab {
				var dot float64
				for c := range hid {
					dot += float64(h[c]) * float64(head[v*hid+c])
				}
				worst = max(worst, math.Abs(dot-want[pool][v]))
			}
			if worst > 2e-3 {
				t.Errorf("pooled hidden states × lm_head differ from the reference's logits by %g", worst)
			}
			// Each alone gives the same as in the batch.
			for i, in := range inputs {
				one, err := s.Embed(context.Background(), [][]int32{in}, pool)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(one[0], out[i]); d > 1e-4 {
					t.Errorf("input %d alone differs from in the batch by %g", i, d)
				}
			}
		})
	}
}

// maxDiff returns the largest absolute difference of a and b.
func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestEmbedFamilies runs Embed on every family of the scheduler tests
// (their heads differ: dense, Gemma's, the recurrent ones'): the
// embeddings are finite, of the hidden size, and the same alone as in a
// batch.
func TestEmbedFamilies(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			s := newSched(t, m, SchedulerOptions{Parallel: 3, Chunk: 16, BatchTokens: 32})
			vocab := m.Net.Config().VocabSize
			inputs := [][]int32{testPrompt(20, 1, vocab), testPrompt(3, 2, vocab), testPrompt(40, 3, vocab)}
			out, err := s.Embed(context.Background(), inputs, PoolMean)
			if err != nil {
				t.Fatal(err)
			}
			for i, in := range inputs {
				if len(out[i]) != m.Net.Config().HiddenSize {
					t.Fatalf("input %d: %d values", i, len(out[i]))
				}
				for _, x := range out[i] {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("input %d: non-finite value", i)
					}
				}
				one, err := s.Embed(context.Background(), [][]int32{in}, PoolMean)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(one[0], out[i]); d > 1e-3 {
					t.Errorf("input %d alone differs from in the batch by %g", i, d)
				}
			}
		})
	}
}

func TestEmbedErrors(t *testing.T) {
	m := openFixture(t, "llama")
	s := newSched(t, m, SchedulerOptions{Parallel: 2, Context: 64})
	ctx := context.Background()
	if _, err := s.Embed(ctx, nil, PoolLast); err == nil {
		t.Error("no inputs: no error")
	}
	if _, err := s.Embed(ctx, [][]int32{{1}, {}}, PoolLast); err == nil {
		t.Error("an empty input: no error")
	}
	if _, err := s.Embed(ctx, [][]int32{make([]int32, 100)}, PoolLast); err == nil {
		t.Error("an input longer than the context: no error")
	}
	if _, err := s.Embed(ctx, [][]int32{{1, 100000}}, PoolLast); err == nil {
		t.Error("a token out of the vocabulary: no error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Embed(cctx, [][]int32{{1, 2}}, PoolLast); err == nil {
		t.Error("a cancelled context: no error")
	}
}

func TestLastLogitsMatchesReference(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	m := openFixture(t, "llama")
	s := newSched(t, m, SchedulerOptions{Parallel: 2})
	ref := archref.Load(t, dir)
	ids, logits := ref.InputIDs, ref.Logits
	vocab := m.Net.Config().VocabSize
	pick := []int32{3, 17, int32(vocab - 1)}
	out, err := s.LastLogits(context.Background(), [][]int32{ids[:10], ids}, pick)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{10, len(ids)} {
		for j, id := range pick {
			if d := math.Abs(float64(out[i][j] - logits[(n-1)*vocab+int(id)])); d > 2e-3 {
				t.Errorf("input %d, token %d: logit %g, reference %g", i, id, out[i][j], logits[(n-1)*vocab+int(id)])
			}
		}
	}
}

func TestLoadEmbedConfig(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  EmbedConfig
		err   bool
	}{
		{"none", nil, DefaultEmbedConfig, false},
		{"qwen3-embedding", map[string]string{
			"modules.json":          `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`,
			"1_Pooling/config.json": `{"word_embedding_dimension":1024,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":false,"pooling_mode_lasttoken":true}`,
		}, EmbedConfig{Pooling: PoolLast, Normalize: true, Declared: true}, false},
		{"mean, not normalised", map[string]string{
			"modules.json":          `[{"path":"","type":"sentence_transformers.models.Transformer"},{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`,
			"1_Pooling/config.json": `{"pooling_mode_mean_tokens":true}`,
		}, EmbedConfig{Pooling: PoolMean, Declared: true}, false},
		{"cls", map[string]string{
			"modules.json":          `[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]`,
			"1_Pooling/config.json": `{"pooling_mode":"cls"}`,
		}, EmbedConfig{Pooling: PoolFirst, Normalize: true, Declared: true}, false},
		{"max is refused", map[string]string{
			"modules.json":          `[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`,
			"1_Pooling/config.json": `{"pooling_mode_max_tokens":true}`,
		}, EmbedConfig{}, true},
		{"bad json", map[string]string{"modules.json": `{`}, EmbedConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				p := filepath.Join(dir, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LoadEmbedConfig(dir)
			if (err != nil) != tt.err {
				t.Fatalf("error %v, want error %v", err, tt.err)
			}
			if !tt.err && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestFinishEmbedding(t *testing.T) {
	v := FinishEmbedding([]float32{3, 4, 12}, 2, true)
	if len(v) != 2 || math.Abs(float64(v[0])-0.6) > 1e-6 || math.Abs(float64(v[1])-0.8) > 1e-6 {
		t.Errorf("truncated to 2 and renormalised: %v, want [0.6 0.8]", v)
	}
	v = FinishEmbedding([]float32{3, 4}, 0, false)
	if v[0] != 3 || v[1] != 4 {
		t.Errorf("unchanged without normalisation: %v", v)
	}
}

// BenchmarkEmbed embeds 32 inputs of 512 tokens in one call on the CPU
// (the batch size and length of the project's embedding figures): the
// chat-model fixture, or the model at $LEM_BENCH_EMBED_MODEL (a model
// directory or GGUF file). It reports inputs/s and tokens/s.
func BenchmarkEmbed(b *testing.B) {
	path := os.Getenv("LEM_BENCH_EMBED_MODEL")
	if path == "" {
		path = fixtures.Dir(b, "chat-model")
	}
	m, err := Open(path, Options{Backend: cpu.New(0)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	s, err := m.NewScheduler(SchedulerOptions{Parallel: 32, Context: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	const n, length = 32, 512
	vocab := m.Net.Config().VocabSize
	inputs := make([][]int32, n)
	iter := 0
	for b.Loop() {
		// New inputs each time: none is served from the prefix cache.
		b.StopTimer()
		for i := range inputs {
			inputs[i] = testPrompt(length, iter*n+i, vocab)
		}
		iter++
		b.StartTimer()
		if _, err := s.Embed(context.Background(), inputs, m.Embedding.Pooling); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(n*b.N)/sec, "inputs/s")
	b.ReportMetric(float64(n*length*b.N)/sec, "tokens/s")
}
