// Package synth writes random-weight Hugging Face model directories of
// real geometries (Llama 3, Qwen 2.5, Qwen 3, Gemma 3, and a few-megabyte
// "tiny" model), so that speed and memory can be measured at real sizes
// without downloading weights, and serving can be tested end to end on a
// model with a tokenizer and a chat template.
//
// A directory holds config.json (transformers 5 layout),
// generation_config.json, model.safetensors, and tokenizer.json with
// tokenizer_config.json: a real tokenizer copied in, or a small built-in
// byte-level BPE one with a ChatML template. The weights are streamed to
// disk in bounded memory, so an 8B model is as easy to write as a tiny one.
package synth

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lem-engine/lem/tokenizer"
)

// Options configure Write.
type Options struct {
	Like  string // a name from Likes
	DType string // "bf16" (the default when empty), "f16" or "f32"
	// Tokenizer is a tokenizer.json (optionally gzipped) or a directory
	// holding one, to copy in along with the tokenizer_config.json and
	// chat templates beside it; the model's vocabulary is sized to it.
	// Empty: the built-in tokenizer.
	Tokenizer string
	Seed      uint64
	// Layers, when positive, keeps only the first Layers layers of the
	// geometry (see Geometry.CutLayers).
	Layers int
}

// Result describes a written model.
type Result struct {
	Dir       string
	Geometry  *Geometry // as written, vocabulary and token ids adjusted to the tokenizer
	DType     DType
	Params    int64
	FileBytes int64 // size of model.safetensors
	Elapsed   time.Duration
}

// ownFiles are the files Write creates; a directory holding only these may
// be written over.
var ownFiles = []string{
	"config.json", "generation_config.json", "model.safetensors",
	"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
	"chat_template.json", "special_tokens_map.json",
}

// Write writes a random-weight model to dir, creating it if needed. dir
// must be empty or hold only files that Write writes.
func Write(dir string, opts Options) (*Result, error) {
	g, err := Like(opts.Like)
	if err != nil {
		return nil, err
	}
	if opts.Layers > 0 {
		if err := g.CutLayers(opts.Layers); err != nil {
			return nil, err
		}
	}
	return WriteGeometry(dir, g, opts)
}

// WriteGeometry is Write for a geometry the caller has changed, for example
// a Like result cut to fewer layers or a smaller vocabulary for a
// benchmark. opts.Like is not read; g is updated to what is written.
func WriteGeometry(dir string, g *Geometry, opts Options) (*Result, error) {
	start := time.Now()
	if opts.DType == "" {
		opts.DType = "bf16"
	}
	d, err := ParseDType(opts.DType)
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	if opts.Tokenizer != "" {
		tok, err := copyTokenizer(dir, opts.Tokenizer)
		if err != nil {
			return nil, err
		}
		fitTokenizer(g, tok)
	} else {
		bt, err := NewBuiltinTokenizer(g.VocabSize)
		if err != nil {
			return nil, err
		}
		tj, err := bt.TokenizerJSON()
		if err != nil {
			return nil, err
		}
		tc, err := bt.TokenizerConfig(g.MaxPositions)
		if err != nil {
			return nil, err
		}
		if err := writeFile(dir, "tokenizer.json", tj); err != nil {
			return nil, err
		}
		if err := writeFile(dir, "tokenizer_config.json", tc); err != nil {
			return nil, err
		}
		g.BOS = bt.SpecialID(EndOfText)
		g.EOS = []int{bt.SpecialID(ImEnd), bt.SpecialID(EndOfText)}
		g.Pad = bt.SpecialID(EndOfText)
	}
	cfg, err := g.Config(d)
	if err != nil {
		return nil, err
	}
	if err := writeFile(dir, "config.json", cfg); err != nil {
		return nil, err
	}
	gen, err := g.GenerationConfig()
	if err != nil {
		return nil, err
	}
	if err := writeFile(dir, "generation_config.json", gen); err != nil {
		return nil, err
	}
	n, err := writeWeightsFile(filepath.Join(dir, "model.safetensors"), g, d, opts.Seed)
	if err != nil {
		return nil, err
	}
	return &Result{Dir: dir, Geometry: g, DType: d, Params: g.Params(), FileBytes: n, Elapsed: time.Since(start)}, nil
}

// prepareDir creates dir, or checks that what it holds may be overwritten.
func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for _, e := range entries {
		if !slices.Contains(ownFiles, e.Name()) && !strings.HasPrefix(e.Name(), ".model.safetensors.tmp") {
			return fmt.Errorf("synth: %s is not empty (it holds %s); choose an empty or new directory", dir, e.Name())
		}
	}
	return nil
}

func writeFile(dir, name string, data []byte) error {
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// writeWeightsFile writes model.safetensors through a temporary file, so
// a failed write leaves no partial file under path.
func writeWeightsFile(path string, g *Geometry, d DType, seed uint64) (n int64, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return 0, fmt.Errorf("synth: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	meta := map[string]string{"format": "pt", "lem_synth_like": g.Name, "lem_synth_seed": fmt.Sprint(seed)}
	if n, err = WriteWeights(tmp, g, d, seed, meta); err != nil {
		return 0, fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("synth: %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return 0, fmt.Errorf("synth: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("synth: %w", err)
	}
	return n, nil
}

// besideTokenizer are the files copied from a tokenizer's directory.
var besideTokenizer = []string{"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json"}

// copyTokenizer copies the tokenizer at src (a tokenizer.json, possibly
// gzipped, or a directory holding one) into dir, decompressed, with the
// files beside it, and loads the result.
func copyTokenizer(dir, src string) (*tokenizer.Tokenizer, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("synth: tokenizer: %w", err)
	}
	file, from := src, filepath.Dir(src)
	if st.IsDir() {
		from = src
		file = filepath.Join(src, "tokenizer.json")
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			file += ".gz"
		}
	}
	data, err := readMaybeGzip(file)
	if err != nil {
		return nil, fmt.Errorf("synth: tokenizer: %w", err)
	}
	if err := writeFile(dir, "tokenizer.json", data); err != nil {
		return nil, err
	}
	for _, name := range besideTokenizer {
		data, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("synth: tokenizer: %w", err)
		}
		if err := writeFile(dir, name, data); err != nil {
			return nil, err
		}
	}
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("synth: tokenizer %s: %w", src, err)
	}
	return tok, nil
}

// maxTokenizerFile bounds a tokenizer.json read for copying.
const maxTokenizerFile = 1 << 30

func readMaybeGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenizerFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		if data, err = io.ReadAll(io.LimitReader(zr, maxTokenizerFile+1)); err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
	}
	if len(data) > maxTokenizerFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxTokenizerFile)
	}
	return data, nil
}

// vocabSlack is how far a real model's padded vocabulary may exceed its
// tokenizer's and still be kept.
const vocabSlack = 4096

// fitTokenizer sizes the geometry's vocabulary to the tokenizer's and takes
// the special token ids from it. The geometry's own vocabulary is kept when
// it covers the tokenizer with little to spare (real models pad theirs);
// otherwise the tokenizer's size is rounded up to a multiple of 64.
func fitTokenizer(g *Geometry, tok *tokenizer.Tokenizer) {
	n := tok.VocabSize()
	if g.VocabSize < n || g.VocabSize > n+vocabSlack {
		g.VocabSize = (n + 63) / 64 * 64
	}
	special := func(id int) bool { return id >= 0 && id < n && tok.IsSpecial(int32(id)) }
	var eos []int
	if id := int(tok.EOS()); id >= 0 {
		eos = append(eos, id)
	}
	for _, id := range g.EOS {
		if special(id) && !slices.Contains(eos, id) {
			eos = append(eos, id)
		}
	}
	g.EOS = eos
	g.BOS = int(tok.BOS())
	if !special(g.Pad) {
		g.Pad = -1
	}
}
