package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/tokenizer"
)

// source is a model on disk as the CLI's read-only verbs see it: a Hugging
// Face directory, a lone tokenizer.json, or a GGUF file.
type source struct {
	path string
	dir  string     // Hugging Face directory, or ""
	gg   *gguf.File // GGUF file, or nil
}

// openSource recognises what name holds: a path, or a model name (see
// resolveModel).
func openSource(name string) (*source, error) {
	path, err := resolveModel(name)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return &source{path: path, dir: path}, nil
	}
	if isGGUF(path) {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		return &source{path: path, gg: f}, nil
	}
	base := filepath.Base(path)
	if strings.HasPrefix(base, "tokenizer") && (strings.HasSuffix(base, ".json") || strings.HasSuffix(base, ".json.gz")) {
		return &source{path: path}, nil
	}
	return nil, fmt.Errorf("%s: not a model directory, GGUF file or tokenizer.json", path)
}

// isGGUF reports whether the file starts with the GGUF magic.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	n, _ := f.Read(magic[:])
	return n == 4 && string(magic[:]) == "GGUF"
}

func (s *source) Close() error {
	if s.gg != nil {
		return s.gg.Close()
	}
	return nil
}

// Tokenizer loads the model's tokenizer.
func (s *source) Tokenizer() (*tokenizer.Tokenizer, error) {
	switch {
	case s.gg != nil:
		return tokenizer.FromGGUF(s.gg)
	case s.dir != "":
		return tokenizer.LoadDir(s.dir)
	default:
		return tokenizer.Load(s.path)
	}
}

// Templates loads the model's chat templates.
func (s *source) Templates() (*chat.Set, error) {
	switch {
	case s.gg != nil:
		return ggufTemplates(s.gg)
	case s.dir != "":
		return chat.LoadDir(s.dir, chat.Options{})
	default:
		return chat.LoadDir(filepath.Dir(s.path), chat.Options{})
	}
}

// ggufTemplates reads the chat templates of a GGUF file (see
// chat.FromGGUF).
func ggufTemplates(f *gguf.File) (*chat.Set, error) { return chat.FromGGUF(f) }
