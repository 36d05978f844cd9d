package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/tiny"
)

// modelStore describes the files a model was loaded from, as Ollama's
// listings report them.
type modelStore struct {
	size   int64  // bytes of the model's files
	digest string // SHA-256 of its weights, in hex
	gguf   bool
	quant  string // a GGUF file's type, as gguf.File.FileType names it
}

// store returns the description of the model's files, read on first use.
func (m *Model) store() modelStore {
	m.storeOnce.Do(func() { m.storeInfo = describeStore(m.eng.Name) })
	return m.storeInfo
}

// fullDigestBytes bounds the weights hashed whole; larger weights are
// hashed by samples (see digestFiles), so that a listing never reads
// gigabytes.
var fullDigestBytes int64 = 256 << 20

// describeStore describes the model loaded from path: a GGUF file, a
// Hugging Face directory (the size of its regular files; the digest of
// its weight files), or lem-tiny's embedded weights.
func describeStore(path string) modelStore {
	st, err := os.Stat(path)
	if err != nil {
		if path == tiny.Name {
			w := tiny.Weights()
			sum := sha256.Sum256(w)
			return modelStore{size: int64(len(w)), digest: hex.EncodeToString(sum[:])}
		}
		return modelStore{}
	}
	if !st.IsDir() {
		s := modelStore{size: st.Size(), gguf: true, digest: digestFiles([]string{path})}
		if f, err := gguf.Open(path); err == nil {
			s.quant = f.FileType()
			f.Close()
		}
		return s
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return modelStore{}
	}
	var s modelStore
	var weights, all []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		s.size += info.Size()
		p := filepath.Join(path, e.Name())
		all = append(all, p)
		switch filepath.Ext(e.Name()) {
		case ".safetensors", ".gguf", ".bin":
			weights = append(weights, p)
		}
	}
	if len(weights) == 0 {
		weights = all
	}
	slices.Sort(weights)
	s.digest = digestFiles(weights)
	return s
}

// digestFiles returns the SHA-256 of the files' contents, one after the
// other; of one file, the file's own digest. When they hold more than
// fullDigestBytes, it hashes instead each file's name, size and 64 pieces
// of 64 KiB spread evenly from its start to its end.
func digestFiles(paths []string) string {
	var total int64
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			total += st.Size()
		}
	}
	h := sha256.New()
	for _, p := range paths {
		if err := hashFile(h, p, total > fullDigestBytes); err != nil {
			return ""
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashFile(h hash.Hash, path string, sampled bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !sampled {
		_, err = io.Copy(h, f)
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	const pieces, piece = 64, 64 << 10
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(path), st.Size())
	buf := make([]byte, piece)
	span := max(st.Size()-piece, 0)
	for i := range int64(pieces) {
		n, err := f.ReadAt(buf, span*i/(pieces-1))
		if err != nil && err != io.EOF {
			return err
		}
		h.Write(buf[:n])
	}
	return nil
}
