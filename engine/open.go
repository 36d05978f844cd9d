package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/tokenizer"
)

// Model is a runnable model: the network on a backend with its tokenizer,
// chat templates and generation defaults.
type Model struct {
	Name      string
	Net       model.Model
	Backend   compute.Backend
	Tokenizer *tokenizer.Tokenizer // nil when the model ships none
	Templates *chat.Set            // nil when the model ships no chat template
	GenConfig *model.GenerationConfig
	// StopIDs end generation: the tokenizer's EOS, generation_config's eos
	// ids and the chat template's end-of-turn token.
	StopIDs []int32
	// Embedding is how the model's hidden states become embeddings: from
	// its sentence-transformers files or GGUF pooling type, else
	// DefaultEmbedConfig.
	Embedding EmbedConfig
	// Context is the context of sessions and scheduled sequences that ask
	// for none (0: the model's context length, at most DefaultContext).
	// lem sets it to what PlanMemory chose.
	Context int

	loaded *model.Loaded
}

// Options configure Open.
type Options struct {
	// Backend runs the model. It is required: the caller chooses the
	// device (package compute/device turns a --device spec into one).
	Backend compute.Backend
	// NoMmap reads the weight files into memory (transparent huge pages
	// where the kernel allows) instead of mapping them: slower to start,
	// faster to decode on the CPU (lem's --no-mmap).
	NoMmap bool
	// DequantizeToF32 widens the block-quantized tensors of a GGUF file to
	// F32 at load, for a backend that cannot compute with them natively
	// (see model.GGUFOptions). It multiplies their memory by up to eight.
	DequantizeToF32 bool
	// Progress, when set, is told how loading goes, in bytes of the
	// weights: with NoMmap those read into memory, else those handed to
	// the backend. done never decreases and the last call has done equal
	// to total.
	Progress func(done, total int64)
}

// errNoBackend is the error of Open and OpenTiny without Options.Backend.
var errNoBackend = errors.New("engine: no backend: Options.Backend is nil (package compute/device opens one)")

// Open loads the model at path: a Hugging Face model directory, or a GGUF
// file (the first part, for a split model) with its tokenizer and chat
// templates from the file's metadata.
func Open(path string, opts Options) (*Model, error) {
	b := opts.Backend
	if b == nil {
		return nil, errNoBackend
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return openGGUF(path, b, opts)
	}
	loaded, err := model.OpenDirWith(path, b, model.OpenOptions{NoMmap: opts.NoMmap, Progress: opts.Progress})
	if errors.Is(err, model.ErrEncoder) {
		return nil, fmt.Errorf("%w (engine.OpenEncoder loads it)", err)
	}
	if err != nil {
		return nil, err
	}
	m := &Model{Name: path, Net: loaded, Backend: b, loaded: loaded}
	// A model without a tokenizer still runs on token ids.
	if m.Tokenizer, err = tokenizer.LoadDir(path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			loaded.Close()
			return nil, err
		}
		m.Tokenizer = nil
	}
	if m.Templates, err = chat.LoadDir(path, chat.Options{}); err != nil && !errors.Is(err, chat.ErrNoTemplate) {
		loaded.Close()
		return nil, err
	}
	if m.GenConfig, err = model.LoadGenerationConfig(path); err != nil {
		loaded.Close()
		return nil, err
	}
	if m.Embedding, err = LoadEmbedConfig(path); err != nil {
		loaded.Close()
		return nil, err
	}
	m.StopIDs = stopIDs(m)
	return m, nil
}

// openGGUF loads a GGUF model file.
func openGGUF(path string, b compute.Backend, opts Options) (*Model, error) {
	var (
		read      func(int64)
		readTotal int64
		progress  = opts.Progress
	)
	if opts.NoMmap && progress != nil {
		// Reading the files into memory is the progress (see
		// model.OpenOptions).
		read, readTotal = model.ReadProgress(progress, gguf.SplitFiles(path))
		progress = nil
	}
	f, err := gguf.OpenWith(path, gguf.OpenOptions{NoMmap: opts.NoMmap, Read: read})
	if err != nil {
		return nil, err
	}
	loaded, err := model.LoadGGUF(f, b, model.GGUFOptions{DequantizeToF32: opts.DequantizeToF32, Progress: progress})
	if errors.Is(err, model.ErrEncoder) {
		f.Close()
		return nil, fmt.Errorf("%w (engine.OpenEncoder loads it)", err)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if read != nil {
		opts.Progress(readTotal, readTotal)
	}
	m := &Model{Name: path, Net: loaded, Backend: b, loaded: loaded, GenConfig: &model.GenerationConfig{}, Embedding: ggufEmbedConfig(f)}
	// A model without a vocabulary still runs on token ids.
	if _, ok := f.Value("tokenizer.ggml.model"); ok {
		if m.Tokenizer, err = tokenizer.FromGGUF(f); err != nil {
			loaded.Close()
			return nil, err
		}
	}
	if m.Templates, err = chat.FromGGUF(f); err != nil && !errors.Is(err, chat.ErrNoTemplate) {
		loaded.Close()
		return nil, err
	}
	m.StopIDs = stopIDs(m)
	return m, nil
}

// Close releases the model's files.
func (m *Model) Close() error { return m.loaded.Close() }

// WeightReads accounts what the model reads of its weights per decoded
// token.
func (m *Model) WeightReads() model.WeightReads { return m.loaded.Reads }

// DefaultContext bounds the context of a session when none is asked for, so
// that models trained on 128k tokens don't reserve caches that large.
const DefaultContext = 8192

// NewSession starts a sequence of up to ctx positions (0: DefaultLength).
func (m *Model) NewSession(ctx int) *Session {
	if ctx <= 0 {
		ctx = m.DefaultLength()
	}
	return NewSession(m.Net, m.Backend, ctx)
}

// DefaultLength is the context of a sequence that asks for none: Context
// when set, else the model's context length, at most DefaultContext.
func (m *Model) DefaultLength() int {
	if m.Context > 0 {
		return m.Context
	}
	return min(m.ContextLength(), DefaultContext)
}

// ContextLength is the model's trained context length.
func (m *Model) ContextLength() int {
	n := m.Net.Config().MaxPositionEmbeddings
	if n <= 0 {
		n = 4096
	}
	return n
}

// endOfTurn lists the special tokens chat templates close a turn with.
// "<|call|>" closes a Harmony (gpt-oss) turn that calls a tool.
var endOfTurn = []string{"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|eom_id|>", "<|return|>", "<|call|>", "<|endoftext|>", "</s>"}

// endsTurn reports whether the special token tok ends the turn of a
// model whose chat template has the source src. In the Harmony format
// (gpt-oss), "<|end|>" ends one message of a turn, such as its reasoning,
// and the turn goes on.
func endsTurn(tok, src string) bool {
	if !strings.Contains(src, tok) {
		return false
	}
	return tok != "<|end|>" || !strings.Contains(src, "<|channel|>")
}

// stopIDs collects the ids that end generation.
func stopIDs(m *Model) []int32 {
	var ids []int32
	addID := func(id int32) {
		if id >= 0 && int(id) < m.Net.Config().VocabSize && !contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if m.Tokenizer != nil {
		addID(m.Tokenizer.EOS())
	}
	for _, id := range m.Net.Config().EOSTokenIDs {
		addID(int32(id))
	}
	if m.GenConfig != nil {
		for _, id := range m.GenConfig.EOSTokenIDs {
			addID(int32(id))
		}
	}
	if m.Templates != nil && m.Tokenizer != nil {
		if t := m.Templates.Default(); t != nil {
			for _, tok := range endOfTurn {
				if id, ok := m.Tokenizer.TokenID(tok); ok && endsTurn(tok, t.Source()) {
					addID(id)
				}
			}
		}
	}
	return ids
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
