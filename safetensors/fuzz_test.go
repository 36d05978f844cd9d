package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// FuzzParse checks that Parse never panics, and that whatever it accepts is
// self-consistent and survives a write and a second parse unchanged.
func FuzzParse(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleTensors(), sampleMetadata); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	buf.Reset()
	if err := Write(&buf, sampleTensors()[:3], nil); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(rawFile("{}", nil))
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, []byte{0}))
	f.Add(rawFile(`{"__metadata__":{"n":1}}`, nil))
	f.Add(rawLen(1<<63, "{}"))
	f.Add([]byte{})
	// Real headers from the fixtures, with their data regions cut short
	// to keep the seeds small.
	if root := fixtures.Root(); root != "" {
		for _, name := range []string{"qwen3/model.safetensors", "gemma3_text/model.safetensors", "qwen3/reference.safetensors"} {
			b, err := os.ReadFile(filepath.Join(root, "archs", name))
			if err != nil || len(b) < 8 {
				continue
			}
			n := binary.LittleEndian.Uint64(b)
			if n < uint64(len(b)-8) {
				f.Add(b[:8+n+64])
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		tensors := file.Tensors()
		for _, tn := range tensors {
			if tn.NumElements()*tn.DType.Size() != len(tn.Data) {
				t.Fatalf("%q: %d bytes for shape %v of %s", tn.Name, len(tn.Data), tn.Shape, tn.DType)
			}
			if _, err := tn.Float32s(); err != nil && tn.DType != U64 {
				t.Fatalf("%q: Float32s: %v", tn.Name, err)
			}
		}
		var out bytes.Buffer
		if err := Write(&out, tensors, file.Metadata()); err != nil {
			t.Fatalf("Write of parsed tensors: %v", err)
		}
		again, err := Parse("again", out.Bytes())
		if err != nil {
			t.Fatalf("Parse of rewritten file: %v", err)
		}
		if !slices.Equal(again.Names(), file.Names()) {
			t.Fatalf("names changed: %q -> %q", file.Names(), again.Names())
		}
		for _, tn := range tensors {
			got, _ := again.Tensor(tn.Name)
			if got.DType != tn.DType || !slices.Equal(got.Shape, tn.Shape) || !bytes.Equal(got.Data, tn.Data) {
				t.Fatalf("%q changed in the round trip", tn.Name)
			}
		}
	})
}
