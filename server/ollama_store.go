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
	quant  string // a GGUF file's type (general.file_type), as Ollama names it
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
			if ft, ok := f.Uint("general.file_type"); ok {
				s.quant = ggufFileType(ft)
			}
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

// ggufFileTypes names llama.cpp's general.file_type values as Ollama
// reports them in quantization_level.
var ggufFileTypes = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
	37: "TQ2_0", 38: "MXFP4",
}

func ggufFileType(ft uint64) string {
	if s, ok := ggufFileTypes[ft]; ok {
		return s
	}
	return fmt.Sprintf("file type %d", ft)
}
