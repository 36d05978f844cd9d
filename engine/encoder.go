package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

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

	loaded *model.LoadedEncoder
}

// OpenEncoder loads the encoder model directory at path (config.json and
// safetensors weights). Open refuses such a directory with an error
// wrapping model.ErrEncoder.
func OpenEncoder(path string, opts Options) (*Encoder, error) {
	if opts.Backend == nil {
		return nil, errNoBackend
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: encoder models load from a Hugging Face model directory, not a file", path)
	}
	loaded, err := model.OpenEncoderDir(path, opts.Backend)
	if err != nil {
		return nil, err
	}
	e := &Encoder{Name: path, Net: loaded, loaded: loaded}
	if e.Tokenizer, err = tokenizer.LoadDir(path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			loaded.Close()
			return nil, err
		}
		e.Tokenizer = nil
	}
	return e, nil
}

// Close releases the model's files.
func (e *Encoder) Close() error { return e.loaded.Close() }
