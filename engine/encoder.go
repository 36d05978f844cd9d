package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/tokenizer"
)

// Encoder is a runnable encoder model (BERT, XLM-RoBERTa, ModernBERT, and
// their cross-encoder rerankers): the network on a backend with its
// tokenizer. Pooling and normalisation of the hidden states are up to the
// caller (see model.EncoderOutput).
type Encoder struct {
	Name      string
	Net       model.Encoder
	Tokenizer *tokenizer.Tokenizer // nil when the model ships none
	Backend   compute.Backend
	// Embedding is how the hidden states become embeddings: from the
	// model's sentence-transformers files, else mean pooling, normalised
	// (sentence-transformers' default for a plain encoder).
	Embedding EmbedConfig

	loaded *model.LoadedEncoder
}

// OpenEncoder loads the encoder model at path: a directory (config.json and
// safetensors weights), or a GGUF file of an encoder architecture ("bert")
// with its tokenizer and pooling type from the metadata. Open refuses
// either with an error wrapping model.ErrEncoder.
func OpenEncoder(path string, opts Options) (*Encoder, error) {
	if opts.Backend == nil {
		return nil, errNoBackend
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return openEncoderGGUF(path, opts)
	}
	loaded, err := model.OpenEncoderDir(path, opts.Backend)
	if err != nil {
		return nil, err
	}
	e := &Encoder{Name: path, Net: loaded, Backend: opts.Backend, loaded: loaded}
	if e.Embedding, err = LoadEmbedConfig(path); err != nil {
		loaded.Close()
		return nil, err
	}
	if !e.Embedding.Declared {
		e.Embedding = EmbedConfig{Pooling: PoolMean, Normalize: true}
	}
	if e.Tokenizer, err = tokenizer.LoadDir(path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			loaded.Close()
			return nil, err
		}
		e.Tokenizer = nil
	}
	return e, nil
}

// openEncoderGGUF loads an encoder GGUF file with the tokenizer of its
// metadata, pooled as its <arch>.pooling_type says (mean pooling when it
// says nothing).
func openEncoderGGUF(path string, opts Options) (*Encoder, error) {
	loaded, f, err := model.OpenEncoderGGUF(path, opts.Backend)
	if err != nil {
		return nil, err
	}
	e := &Encoder{Name: path, Net: loaded, Backend: opts.Backend, loaded: loaded, Embedding: ggufEmbedConfig(f)}
	if !e.Embedding.Declared {
		e.Embedding = EmbedConfig{Pooling: PoolMean, Normalize: true}
	}
	if e.Tokenizer, err = tokenizer.FromGGUF(f); err != nil {
		loaded.Close()
		return nil, err
	}
	return e, nil
}

// Close releases the model's files.
func (e *Encoder) Close() error { return e.loaded.Close() }

// DefaultEncodeTokens is the token budget of one Encode call of an
// EncoderRunner: the inputs of a request go to the encoder in batches of
// at most this many tokens together (an input longer than that alone).
const DefaultEncodeTokens = 16384

// EncoderRunner serves an encoder model's embeddings (Embedder) and, for a
// model with a classification head, its relevance scores (Scorer). The
// inputs of a call run batched, many per Encode call under a token budget;
// calls from several goroutines take turns on the model.
type EncoderRunner struct {
	mu     sync.Mutex
	net    model.Encoder
	budget int
}

// NewEncoderRunner returns a runner of net whose Encode calls hold at most
// budget tokens together (DefaultEncodeTokens when budget ≤ 0).
func NewEncoderRunner(net model.Encoder, budget int) *EncoderRunner {
	if budget <= 0 {
		budget = DefaultEncodeTokens
	}
	return &EncoderRunner{net: net, budget: budget}
}

var (
	_ Embedder = (*EncoderRunner)(nil)
	_ Scorer   = (*EncoderRunner)(nil)
)

// EmbedDim returns the size of the encoder's hidden states.
func (r *EncoderRunner) EmbedDim() int { return r.net.Config().HiddenSize }

// Labels returns the number of outputs of the model's classification head
// (0 without one).
func (r *EncoderRunner) Labels() int { return r.net.Labels() }

// run encodes inputs in batches under the token budget, calling each with
// the outputs of its batch and the index of its first input.
func (r *EncoderRunner) run(ctx context.Context, inputs []model.EncoderInput, each func(first int, outs []model.EncoderOutput) error) error {
	if len(inputs) == 0 {
		return errors.New("encode: no inputs")
	}
	for start := 0; start < len(inputs); {
		end, tokens := start, 0
		for end < len(inputs) && (end == start || tokens+len(inputs[end].IDs) <= r.budget) {
			tokens += len(inputs[end].IDs)
			end++
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		outs, err := r.net.Encode(inputs[start:end])
		r.mu.Unlock()
		if err != nil {
			return fmt.Errorf("encode inputs %d to %d: %w", start, end-1, err)
		}
		if err := each(start, outs); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// Embed returns each input's last hidden states pooled by pool, not
// normalised (see FinishEmbedding).
func (r *EncoderRunner) Embed(ctx context.Context, inputs [][]int32, pool Pooling) ([][]float32, error) {
	in := make([]model.EncoderInput, len(inputs))
	for i, ids := range inputs {
		in[i] = model.EncoderInput{IDs: ids}
	}
	dim := r.EmbedDim()
	out := make([][]float32, len(inputs))
	err := r.run(ctx, in, func(first int, outs []model.EncoderOutput) error {
		for j, o := range outs {
			out[first+j] = poolRows(o.Hidden, dim, pool)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	return out, nil
}

// poolRows pools rows of dim values (row-major) into one vector.
func poolRows(h []float32, dim int, pool Pooling) []float32 {
	n := len(h) / dim
	v := make([]float32, dim)
	switch pool {
	case PoolFirst:
		copy(v, h[:dim])
	case PoolLast:
		copy(v, h[(n-1)*dim:])
	default:
		acc := make([]float64, dim)
		for i := range n {
			for j, x := range h[i*dim : (i+1)*dim] {
				acc[j] += float64(x)
			}
		}
		for j := range v {
			v[j] = float32(acc[j] / float64(n))
		}
	}
	return v
}

// Score returns the relevance logit of each input (token type ids all 0);
// ScorePairs takes the token types of a pair.
func (r *EncoderRunner) Score(ctx context.Context, inputs [][]int32) ([]float32, error) {
	in := make([]model.EncoderInput, len(inputs))
	for i, ids := range inputs {
		in[i] = model.EncoderInput{IDs: ids}
	}
	return r.ScorePairs(ctx, in)
}

// ScorePairs returns the relevance logit of each input, a query and a
// document encoded as a pair (tokenizer.EncodePair): the head's one output
// for a one-label head, and for a two-label head (not relevant, relevant)
// the second output less the first, so that its sigmoid is the softmax
// probability of "relevant". A model with no head or more labels is no
// reranker, and an error.
func (r *EncoderRunner) ScorePairs(ctx context.Context, inputs []model.EncoderInput) ([]float32, error) {
	labels := r.net.Labels()
	if labels < 1 || labels > 2 {
		return nil, fmt.Errorf("score: the model's classification head has %d labels; a reranker has 1 (or 2: not relevant, relevant)", labels)
	}
	out := make([]float32, len(inputs))
	err := r.run(ctx, inputs, func(first int, outs []model.EncoderOutput) error {
		for j, o := range outs {
			if len(o.Logits) != labels {
				return fmt.Errorf("input %d: %d logits from a head of %d labels", first+j, len(o.Logits), labels)
			}
			s := o.Logits[0]
			if labels == 2 {
				s = o.Logits[1] - o.Logits[0]
			}
			out[first+j] = s
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	return out, nil
}
