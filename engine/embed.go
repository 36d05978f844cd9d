package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lem-engine/lem/gguf"
)

// Pooling is how the final hidden states of a sequence's tokens become one
// embedding.
type Pooling int

const (
	// PoolLast takes the last token's hidden state: the one token of a
	// causal model that has seen all the others (Qwen3-Embedding style).
	PoolLast Pooling = iota
	// PoolMean averages the hidden states of every token.
	PoolMean
	// PoolFirst takes the first token's (BERT's CLS).
	PoolFirst
)

// String returns the sentence-transformers name of the pooling.
func (p Pooling) String() string {
	switch p {
	case PoolMean:
		return "mean"
	case PoolFirst:
		return "cls"
	}
	return "lasttoken"
}

// EmbedConfig is how a model's hidden states become embeddings.
type EmbedConfig struct {
	Pooling Pooling
	// Normalize scales each embedding to unit L2 norm.
	Normalize bool
	// Declared reports whether the model said so (sentence-transformers
	// files, GGUF pooling type); otherwise the fields hold the default
	// for a decoder model: last-token pooling, normalised, as llama.cpp's
	// server does for a model without a pooling type of its own and as
	// Ollama always normalises.
	Declared bool
}

// DefaultEmbedConfig is the EmbedConfig of a decoder model that declares
// none.
var DefaultEmbedConfig = EmbedConfig{Pooling: PoolLast, Normalize: true}

// LoadEmbedConfig reads the sentence-transformers files of the model
// directory dir: modules.json names the pooling module's folder (its
// config.json says the pooling mode) and whether a Normalize module
// follows. Without modules.json it returns DefaultEmbedConfig.
func LoadEmbedConfig(dir string) (EmbedConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "modules.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return DefaultEmbedConfig, nil
	}
	if err != nil {
		return EmbedConfig{}, fmt.Errorf("reading the sentence-transformers modules: %w", err)
	}
	var mods []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &mods); err != nil {
		return EmbedConfig{}, fmt.Errorf("modules.json: %w", err)
	}
	c := EmbedConfig{Pooling: PoolLast, Declared: true}
	for _, m := range mods {
		switch {
		case strings.HasSuffix(m.Type, ".Normalize"):
			c.Normalize = true
		case strings.HasSuffix(m.Type, ".Pooling"):
			p, err := readPooling(filepath.Join(dir, m.Path, "config.json"))
			if err != nil {
				return EmbedConfig{}, err
			}
			c.Pooling = p
		}
	}
	return c, nil
}

// readPooling reads a sentence-transformers Pooling module's config.
func readPooling(path string) (Pooling, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading the pooling config: %w", err)
	}
	var pc struct {
		Mode  string `json:"pooling_mode"`
		CLS   bool   `json:"pooling_mode_cls_token"`
		Mean  bool   `json:"pooling_mode_mean_tokens"`
		Last  bool   `json:"pooling_mode_lasttoken"`
		Max   bool   `json:"pooling_mode_max_tokens"`
		SqrtN bool   `json:"pooling_mode_mean_sqrt_len_tokens"`
	}
	if err := json.Unmarshal(data, &pc); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case pc.Mode == "lasttoken" || pc.Last:
		return PoolLast, nil
	case pc.Mode == "mean" || pc.Mean:
		return PoolMean, nil
	case pc.Mode == "cls" || pc.CLS:
		return PoolFirst, nil
	}
	return 0, fmt.Errorf("%s: pooling mode %q is not supported (want cls, mean or lasttoken)", path, pc.Mode)
}

// ggufEmbedConfig reads llama.cpp's <arch>.pooling_type (1 mean, 2 cls,
// 3 last); llama.cpp normalises pooled embeddings by default.
func ggufEmbedConfig(f *gguf.File) EmbedConfig {
	arch, _ := f.String("general.architecture")
	v, ok := f.Uint(arch + ".pooling_type")
	if !ok {
		return DefaultEmbedConfig
	}
	switch v {
	case 1:
		return EmbedConfig{Pooling: PoolMean, Normalize: true, Declared: true}
	case 2, 4: // 4: rank, a cross-encoder's head reading the first token
		return EmbedConfig{Pooling: PoolFirst, Normalize: true, Declared: true}
	case 3:
		return EmbedConfig{Pooling: PoolLast, Normalize: true, Declared: true}
	}
	return DefaultEmbedConfig
}

// Embedder is a source of pooled final hidden states: a decoder model's
// Scheduler is one, and an encoder model can be another. Embed returns one
// vector of EmbedDim floats per input (pooled, not normalised: see
// FinishEmbedding), running the inputs batched; the context's end cancels
// it.
type Embedder interface {
	Embed(ctx context.Context, inputs [][]int32, pool Pooling) ([][]float32, error)
	EmbedDim() int
}

// Scorer scores token sequences directly, one relevance logit each: a
// cross-encoder reranker's classifier.
type Scorer interface {
	Score(ctx context.Context, inputs [][]int32) ([]float32, error)
}

// FinishEmbedding truncates v to dims values when dims > 0 (Matryoshka
// embeddings) and then scales it to unit L2 norm when normalize is set
// (always after truncation). It works in place and returns v[:dims].
func FinishEmbedding(v []float32, dims int, normalize bool) []float32 {
	if dims > 0 && dims < len(v) {
		v = v[:dims]
	}
	if normalize {
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		if ss > 0 {
			inv := float32(1 / math.Sqrt(ss))
			for i := range v {
				v[i] *= inv
			}
		}
	}
	return v
}

// Scheduler implements Embedder.
var _ Embedder = (*Scheduler)(nil)

// EmbedDim returns the size of the model's hidden states.
func (s *Scheduler) EmbedDim() int { return s.hidden }

// Embed runs each input as a sequence of the scheduler, in the batches
// it runs with any other sequences (a long input over several steps, in
// chunks under the step's token budget), and returns each input's final
// hidden states (after the final norm) pooled by pool, not normalised.
// The output head is not run for them.
func (s *Scheduler) Embed(ctx context.Context, inputs [][]int32, pool Pooling) ([][]float32, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("embed: no inputs")
	}
	for i, in := range inputs {
		if len(in) == 0 {
			return nil, fmt.Errorf("embed: input %d is empty", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	qs := make([]*sequence, len(inputs))
	for i, in := range inputs {
		q := newSequence(slices.Clone(in), false)
		q.need, q.embed, q.pool = false, true, pool
		qs[i] = q
	}
	defer func() {
		for _, q := range qs {
			s.leave(q)
		}
	}()
	for i, q := range qs {
		if err := s.submit(q); err != nil {
			return nil, fmt.Errorf("embed: input %d: %w", i, err)
		}
	}
	out := make([][]float32, len(qs))
	for i, q := range qs {
		if err := s.wait(ctx, q); err != nil {
			return nil, fmt.Errorf("embed: input %d: %w", i, err)
		}
		s.mu.Lock()
		out[i] = q.vec
		s.mu.Unlock()
	}
	return out, nil
}

// LastLogits returns the logits of the last position of each input (the
// distribution of the token after it), running the inputs batched as
// sequences of the scheduler. Only the entries ids name are kept, in that
// order, so that what comes back is len(ids) floats per input.
func (s *Scheduler) LastLogits(ctx context.Context, inputs [][]int32, ids []int32) ([][]float32, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("last logits: no inputs")
	}
	for _, id := range ids {
		if id < 0 || int(id) >= s.vocab {
			return nil, fmt.Errorf("last logits: token id %d out of range [0, %d)", id, s.vocab)
		}
	}
	for i, in := range inputs {
		if len(in) == 0 {
			return nil, fmt.Errorf("last logits: input %d is empty", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	qs := make([]*sequence, len(inputs))
	for i, in := range inputs {
		qs[i] = newSequence(slices.Clone(in), false)
	}
	defer func() {
		for _, q := range qs {
			s.leave(q)
		}
	}()
	for i, q := range qs {
		if err := s.submit(q); err != nil {
			return nil, fmt.Errorf("last logits: input %d: %w", i, err)
		}
	}
	out := make([][]float32, len(qs))
	for i, q := range qs {
		if err := s.wait(ctx, q); err != nil {
			return nil, fmt.Errorf("last logits: input %d: %w", i, err)
		}
		s.mu.Lock()
		row := make([]float32, len(ids))
		for j, id := range ids {
			row[j] = q.host[id]
		}
		q.gone = true // nothing follows: free its blocks at once
		s.poke()
		s.mu.Unlock()
		out[i] = row
	}
	return out, nil
}
