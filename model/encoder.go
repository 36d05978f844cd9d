package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/lem-engine/lem/compute"
)

// ErrEncoder is wrapped by the error of loading an encoder model (BERT,
// XLM-RoBERTa, ModernBERT) as a decoder: it has no next-token logits, and
// opens with OpenEncoderDir or LoadEncoder instead.
var ErrEncoder = errors.New("encoder model: it computes embeddings and scores, not next tokens")

// EncoderLoadFunc builds an encoder of one architecture from its config and
// tensors.
type EncoderLoadFunc func(cfg *Config, src Source, b compute.Backend) (Encoder, error)

// EncoderInput is one input of an Encoder: a tokenized text, or a pair of
// texts for a cross-encoder, with its special tokens ([CLS] … [SEP],
// <s> … </s>) already in place.
type EncoderInput struct {
	// IDs are the token ids, at least one, each below the vocabulary size.
	IDs []int32
	// TypeIDs are the token type (segment) ids, one per id: 0 for the
	// first text of a pair, 1 for the second. nil means all 0. Families
	// without token types (ModernBERT) accept only nil or zeros.
	TypeIDs []int32
}

// EncoderOutput is what an Encoder computes for one input.
type EncoderOutput struct {
	// Hidden is the last hidden state: len(IDs) rows of Config().HiddenSize
	// values, row-major, after the model's final norm (where it has one).
	// Pool it as the model's sentence-transformers config says: the first
	// row (CLS), the mean of the rows, or the last row; then normalise.
	Hidden []float32
	// Logits are the classification head's Labels() values (a reranker's
	// relevance score is Logits[0]); nil for a model without a head.
	Logits []float32
}

// Encoder is a bidirectional encoder model loaded onto a backend: every
// token of an input attends to every other token of that input (or, in
// ModernBERT's local layers, to those within a window on either side), and
// no state is kept between calls.
type Encoder interface {
	// Config returns the configuration the model was built from.
	Config() *Config
	// Labels returns the number of outputs of the classification head
	// (1 for a reranker), 0 when the model has none.
	Labels() int
	// MaxTokens returns the longest input the position table allows.
	MaxTokens() int
	// Encode runs the inputs in one batched pass and returns one output per
	// input, in order. It fails, computing nothing, when an input is empty,
	// longer than MaxTokens or has an id outside the vocabulary (or token
	// type table). An Encoder is used by one goroutine at a time, like its
	// backend.
	Encode(inputs []EncoderInput) ([]EncoderOutput, error)
}

// LoadEncoder builds the encoder that cfg describes.
func LoadEncoder(cfg *Config, src Source, b compute.Backend) (Encoder, error) {
	a, ok := archByType[cfg.ModelType]
	if !ok {
		return nil, fmt.Errorf("unsupported model_type %q (supported: %v)", cfg.ModelType, Supported())
	}
	if a.Encoder == nil {
		return nil, fmt.Errorf("model_type %q is a decoder model, not an encoder", cfg.ModelType)
	}
	if _, ok := b.(compute.Bidirectional); !ok {
		return nil, fmt.Errorf("%s: backend %s cannot run encoder models (no bidirectional attention)", cfg.ModelType, b.Name())
	}
	return a.Encoder(cfg, src, b)
}

// LoadedEncoder is an encoder with the files it reads from.
type LoadedEncoder struct {
	Encoder
	Dir   string
	close func() error
}

// Close releases the model's files. The model must not be used afterwards.
func (l *LoadedEncoder) Close() error { return l.close() }

// IsEncoder reports whether the model type is a registered encoder family.
func IsEncoder(modelType string) bool {
	a, ok := archByType[modelType]
	return ok && a.Encoder != nil
}

// OpenEncoderDir loads a Hugging Face encoder model directory (config.json
// and safetensors weights, which keep their stored bf16, f16 or f32 type)
// onto a backend.
func OpenEncoderDir(dir string, b compute.Backend) (*LoadedEncoder, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if !IsEncoder(cfg.ModelType) {
		_, err := LoadEncoder(cfg, nil, b)
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	src, err := openSource(dir, cfg, OpenOptions{}, nil)
	if err != nil {
		return nil, err
	}
	e, err := LoadEncoder(cfg, src, b)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &LoadedEncoder{Encoder: e, Dir: dir, close: src.Close}, nil
}

// affine is a projection with an optional bias.
type affine struct{ w, b *compute.Tensor }

func (l *loader) affine(name string, out, in int, bias bool) affine {
	ln := affine{w: l.weight(name+".weight", out, in)}
	if bias || l.has(name+".bias") {
		ln.b = l.vector(name+".bias", out)
	}
	return ln
}

// norm is a LayerNorm with an optional bias.
type norm struct{ w, b *compute.Tensor }

func (l *loader) norm(name string, n int) norm {
	return norm{w: l.vector(name+".weight", n), b: l.optionalVector(name+".bias", n)}
}

// hostLinear is a small projection evaluated on the host (classification
// heads: a few rows per call).
type hostLinear struct {
	w, b    []float32
	out, in int
}

func (l *loader) host(name string, out, in int) hostLinear {
	h := hostLinear{out: out, in: in}
	if l.err != nil {
		return h
	}
	h.w = l.hostVals(name+".weight", out, in)
	if l.has(name + ".bias") {
		h.b = l.hostVals(name+".bias", out)
	}
	return h
}

func (l *loader) hostVals(name string, shape ...int) []float32 {
	if l.err != nil {
		return nil
	}
	s, ok := l.src.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("tensor %s is missing", name)
		return nil
	}
	if len(s.Shape) != len(shape) || shapeLen(s.Shape) != shapeLen(shape) {
		l.err = fmt.Errorf("tensor %s has shape %v, want %v", name, s.Shape, shape)
		return nil
	}
	if rb, err := s.DType.RowBytes(shapeLen(shape)); err != nil || rb != len(s.Data) {
		l.err = fmt.Errorf("tensor %s: %d bytes do not hold %v %s values", name, len(s.Data), shape, s.DType)
		return nil
	}
	v, err := toF32(s)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return v
}

func (h hostLinear) apply(x []float32) []float32 {
	y := make([]float32, h.out)
	for o := range h.out {
		var s float64
		for i, w := range h.w[o*h.in : (o+1)*h.in] {
			s += float64(w) * float64(x[i])
		}
		if h.b != nil {
			s += float64(h.b[o])
		}
		y[o] = float32(s)
	}
	return y
}

// hostActivate applies a Hugging Face activation on the host.
func hostActivate(x []float32, act string) error {
	for i, v := range x {
		f := float64(v)
		switch act {
		case "tanh":
			f = math.Tanh(f)
		case "gelu":
			f = 0.5 * f * (1 + math.Erf(f/math.Sqrt2))
		case "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_tanh":
			f = 0.5 * f * (1 + math.Tanh(0.7978845608028654*(f+0.044715*f*f*f)))
		case "silu", "swish":
			f = f / (1 + math.Exp(-f))
		case "relu":
			f = max(f, 0)
		case "identity", "linear", "":
		default:
			return fmt.Errorf("unsupported activation %q", act)
		}
		x[i] = float32(f)
	}
	return nil
}

// hostLayerNorm normalises x in place.
func hostLayerNorm(x, w, b []float32, eps float64) {
	var mean, vr float64
	for _, v := range x {
		mean += float64(v)
	}
	mean /= float64(len(x))
	for _, v := range x {
		vr += (float64(v) - mean) * (float64(v) - mean)
	}
	inv := 1 / math.Sqrt(vr/float64(len(x))+eps)
	for i, v := range x {
		o := float32((float64(v)-mean)*inv) * w[i]
		if b != nil {
			o += b[i]
		}
		x[i] = o
	}
}

// checkInputs validates a batch against the vocabulary, the token type
// table (types rows; 0: none) and the position table.
func checkInputs(inputs []EncoderInput, vocab, types, maxTokens int) (int, error) {
	total := 0
	for i, in := range inputs {
		n := len(in.IDs)
		switch {
		case n == 0:
			return 0, fmt.Errorf("input %d is empty", i)
		case maxTokens > 0 && n > maxTokens:
			return 0, fmt.Errorf("input %d has %d tokens, more than the %d the model takes", i, n, maxTokens)
		case in.TypeIDs != nil && len(in.TypeIDs) != n:
			return 0, fmt.Errorf("input %d has %d token type ids for %d tokens", i, len(in.TypeIDs), n)
		}
		for j, id := range in.IDs {
			if id < 0 || int(id) >= vocab {
				return 0, fmt.Errorf("input %d: token %d has id %d outside the vocabulary [0, %d)", i, j, id, vocab)
			}
		}
		for j, t := range in.TypeIDs {
			if t < 0 || int(t) >= max(types, 1) {
				return 0, fmt.Errorf("input %d: token %d has type id %d outside [0, %d)", i, j, t, max(types, 1))
			}
		}
		total += n
	}
	return total, nil
}
