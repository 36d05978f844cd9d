package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// Write writes tensors and metadata to w in the safetensors format, as the
// reference implementation lays it out: the 8-byte little-endian header
// length, then the JSON header (the __metadata__ object first, its keys
// sorted, omitted when metadata is empty; then one entry per tensor, in the
// order given) padded with spaces to a multiple of 8 bytes, then the
// tensors' data back to back in the order given.
//
// Every tensor must have a unique, non-empty name other than
// "__metadata__", a known dtype, and exactly the data its shape needs.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, err := encodeHeader(tensors, metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	if _, err := w.Write(n[:]); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	if _, err := w.Write(header); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// encodeHeader returns the padded JSON header.
func encodeHeader(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	if len(metadata) > 0 {
		writeString(&b, metadataKey)
		b.WriteString(":{")
		for i, k := range sortedKeys(metadata) {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return nil, fmt.Errorf("safetensors: write: metadata %q: not valid UTF-8", k)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(&b, k)
			b.WriteByte(':')
			writeString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	offset := uint64(0)
	for i, t := range tensors {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("safetensors: write: tensor %d has no name", i)
		case t.Name == metadataKey:
			return nil, fmt.Errorf("safetensors: write: tensor %d: the name %q is reserved", i, metadataKey)
		case seen[t.Name]:
			return nil, fmt.Errorf("safetensors: write: duplicate tensor %q", t.Name)
		case !utf8.ValidString(t.Name):
			return nil, fmt.Errorf("safetensors: write: tensor name %q is not valid UTF-8", t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("safetensors: write: %w", err)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		writeString(&b, t.Name)
		b.WriteString(`:{"dtype":`)
		writeString(&b, string(t.DType))
		b.WriteString(`,"shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		end := offset + uint64(len(t.Data))
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: write: header of %d bytes exceeds the limit of %d", b.Len(), MaxHeaderSize)
	}
	return b.Bytes(), nil
}

// writeString writes s as a JSON string without escaping <, > and &.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // cannot fail for a string
	b.Truncate(b.Len() - 1) // drop the newline Encode appends
}

// WriteFile writes tensors and metadata to the named file (see Write). It
// writes to a temporary file in the same directory and renames it into
// place, so a failed write never leaves a partial file under path.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err := Write(w, tensors, metadata); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
