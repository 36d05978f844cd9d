package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/fixtures"
)

// rawFile builds a safetensors file from a literal header and data region.
func rawFile(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// rawLen builds a file whose header length field is n, whatever follows.
func rawLen(n uint64, rest string) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, n)
	return append(b, rest...)
}

func archDirs(t *testing.T) []string {
	t.Helper()
	root := fixtures.Dir(t, "archs")
	dirs, err := filepath.Glob(filepath.Join(root, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixture architectures under %s (%v)", root, err)
	}
	return dirs
}

func TestFixtures(t *testing.T) {
	for _, dir := range archDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var cfg struct {
				VocabSize int `json:"vocab_size"`
			}
			raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}

			for _, name := range []string{"model.safetensors", "reference.safetensors"} {
				path := filepath.Join(dir, name)
				f, err := Open(path)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer f.Close()
				if len(f.Names()) == 0 {
					t.Fatalf("%s: no tensors", name)
				}
				for _, tn := range f.Tensors() {
					vals, err := tn.Float32s()
					if err != nil {
						t.Fatalf("%s: %s: Float32s: %v", name, tn.Name, err)
					}
					if len(vals) != tn.NumElements() {
						t.Fatalf("%s: %s: %d values, want %d", name, tn.Name, len(vals), tn.NumElements())
					}
					if name == "model.safetensors" && tn.DType != BF16 {
						t.Errorf("%s: %s: dtype %s, want BF16", name, tn.Name, tn.DType)
					}
				}
				// Writing what we read must give back the reference
				// library's bytes exactly.
				var buf bytes.Buffer
				if err := Write(&buf, f.Tensors(), f.Metadata()); err != nil {
					t.Fatalf("%s: Write: %v", name, err)
				}
				orig, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), orig) {
					n := binary.LittleEndian.Uint64(orig)
					t.Errorf("%s: rewritten file differs from the original\n got header %q\nwant header %q", name, buf.Bytes()[8:min(8+int(n), buf.Len())], orig[8:8+n])
				}
			}

			ref, err := Open(filepath.Join(dir, "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			ids, ok := ref.Tensor("input_ids")
			if !ok || ids.DType != I32 || !slices.Equal(ids.Shape, []int{40}) {
				t.Fatalf("input_ids = %s %v (found %v), want I32 [40]", ids.DType, ids.Shape, ok)
			}
			iv, err := ids.Int64s()
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range iv {
				if id < 0 || id >= int64(cfg.VocabSize) {
					t.Errorf("input_ids[%d] = %d, outside the vocabulary of %d", i, id, cfg.VocabSize)
				}
			}
			logits, ok := ref.Tensor("logits")
			if !ok || logits.DType != F32 || !slices.Equal(logits.Shape, []int{40, cfg.VocabSize}) {
				t.Fatalf("logits = %s %v (found %v), want F32 [40 %d]", logits.DType, logits.Shape, ok, cfg.VocabSize)
			}

			d, err := OpenDir(dir)
			if err != nil {
				t.Fatalf("OpenDir: %v", err)
			}
			defer d.Close()
			m, err := Open(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !slices.Equal(d.Names(), m.Names()) {
				t.Errorf("OpenDir names differ from the file's")
			}
			if d.Metadata()["format"] != "pt" {
				t.Errorf("metadata = %v, want format=pt", d.Metadata())
			}
		})
	}
}

func TestParseValid(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	tests := []struct {
		name   string
		file   []byte
		names  []string
		shapes [][]int
		md     map[string]string
	}{
		{
			name: "empty header",
			file: rawFile("{}", nil),
		},
		{
			name:   "file order follows offsets, not header order",
			file:   rawFile(`{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32(1, 2)),
			names:  []string{"a", "b"},
			shapes: [][]int{{1}, {1}},
		},
		{
			name:   "scalar, empty tensor, padding and metadata",
			file:   rawFile(`{"__metadata__":{"format":"pt"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]}}    `, f32(5)),
			names:  []string{"s", "e"},
			shapes: [][]int{{}, {0, 3}},
			md:     map[string]string{"format": "pt"},
		},
		{
			name:   "gap between tensors and trailing bytes are tolerated",
			file:   rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, []byte{1, 2, 0, 0, 3, 4, 9, 9}),
			names:  []string{"a", "b"},
			shapes: [][]int{{2}, {2}},
		},
		{
			name:   "null metadata and unknown entry fields",
			file:   rawFile(`{"__metadata__":null,"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8],"extra":true}}`, make([]byte, 8)),
			names:  []string{"a"},
			shapes: [][]int{{1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("x.safetensors", tt.file)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := f.Names(); !slices.Equal(got, tt.names) {
				t.Errorf("Names = %q, want %q", got, tt.names)
			}
			for i, n := range tt.names {
				tn, ok := f.Tensor(n)
				if !ok {
					t.Fatalf("Tensor(%q) not found", n)
				}
				if !slices.Equal(tn.Shape, tt.shapes[i]) {
					t.Errorf("%s: shape %v, want %v", n, tn.Shape, tt.shapes[i])
				}
			}
			if len(tt.md) != len(f.Metadata()) {
				t.Errorf("Metadata = %v, want %v", f.Metadata(), tt.md)
			}
			for k, v := range tt.md {
				if f.Metadata()[k] != v {
					t.Errorf("Metadata[%q] = %q, want %q", k, f.Metadata()[k], v)
				}
			}
			if _, ok := f.Tensor("missing"); ok {
				t.Errorf("Tensor(missing) found")
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tensorA := func(entry string) string { return `{"a":` + entry + `}` }
	tests := []struct {
		name   string
		file   []byte
		tensor string // tensor the error must name, if any
		want   string
	}{
		{"empty file", nil, "", "shorter than the 8-byte header length"},
		{"seven bytes", []byte{1, 2, 3, 4, 5, 6, 7}, "", "shorter than the 8-byte header length"},
		{"zero header length", rawLen(0, "{}"), "", "header length 0 at offset 0 is too short"},
		{"huge header length", rawLen(1<<63, "{}"), "", "exceeds the limit"},
		{"header just over the limit", rawLen(MaxHeaderSize+1, "{}"), "", "exceeds the limit"},
		{"header length past end", rawLen(3, "{}"), "", "runs past the end of the 10-byte file"},
		{"header length cuts JSON", rawLen(5, `{"a":{}}`), "a", "header JSON ends early, at offset 13"},
		{"header not an object", rawFile(`[1,2]`, nil), "", "does not start with '{'"},
		{"JSON ends early", rawFile(`{"a":`, nil), "a", "header JSON ends early"},
		{"invalid JSON", rawFile(`{"a" 1}`, nil), "a", "expected colon after object key"},
		{"invalid JSON value", rawFile(`{"a":{"dtype":}}`, nil), "a", "bad header entry"},
		{"unclosed object", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`, nil), "", "header JSON"},
		{"trailing garbage", rawFile(`{} x`, nil), "", "unexpected data after the object"},
		{"invalid UTF-8", rawFile("{\"\xff\":1}", nil), "", "not valid UTF-8"},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), "", `duplicate header key "a"`},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, nil), "", "__metadata__ must map strings to strings"},
		{"entry not an object", rawFile(tensorA(`5`), nil), "a", "bad header entry"},
		{"unknown dtype", rawFile(tensorA(`{"dtype":"F4","shape":[1],"data_offsets":[0,1]}`), []byte{0}), "a", `unknown dtype "F4"`},
		{"missing dtype", rawFile(tensorA(`{"shape":[1],"data_offsets":[0,1]}`), []byte{0}), "a", `missing "dtype"`},
		{"missing shape", rawFile(tensorA(`{"dtype":"U8","data_offsets":[0,1]}`), []byte{0}), "a", `missing "shape"`},
		{"missing offsets", rawFile(tensorA(`{"dtype":"U8","shape":[1]}`), []byte{0}), "a", `missing "data_offsets"`},
		{"three offsets", rawFile(tensorA(`{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}`), []byte{0, 0}), "a", "data_offsets has 3 values"},
		{"negative dimension", rawFile(tensorA(`{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}`), []byte{0}), "a", "bad header entry"},
		{"fractional offset", rawFile(tensorA(`{"dtype":"U8","shape":[1],"data_offsets":[0,0.5]}`), []byte{0}), "a", "bad header entry"},
		{"shape overflow", rawFile(tensorA(`{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}`), []byte{0}), "a", "overflows"},
		{"begin after end", rawFile(tensorA(`{"dtype":"U8","shape":[1],"data_offsets":[2,1]}`), []byte{0, 0}), "a", "begin after end"},
		{"end beyond data", rawFile(tensorA(`{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`), make([]byte, 7)), "a", "end beyond the 7-byte data region"},
		{"size mismatch", rawFile(tensorA(`{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}`), make([]byte, 8)), "a", "hold 8 bytes, but shape [2 2] of F32 needs 16"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), "b", `overlap tensor "a", which ends at 8`},
		{"identical ranges", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}`, make([]byte, 2)), "", "overlap tensor"},
		{"empty name", rawFile(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), "", "empty tensor name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const name = "bad/file.safetensors"
			f, err := Parse(name, tt.file)
			if err == nil {
				t.Fatalf("Parse succeeded with %d tensors, want error containing %q", len(f.Names()), tt.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is %T, want *FormatError", err, err)
			}
			if fe.File != name || !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not name the file", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if tt.tensor != "" && fe.Tensor != tt.tensor {
				t.Errorf("error names tensor %q, want %q (%v)", fe.Tensor, tt.tensor, err)
			}
		})
	}
}

// TestTruncated cuts a valid file at many lengths: every cut must be an
// error naming the file, never a panic or a silently short tensor.
func TestTruncated(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, sampleTensors(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"sample.safetensors": buf.Bytes()}
	if root := fixtures.Root(); root != "" {
		p := filepath.Join(root, "archs", "qwen3", "reference.safetensors")
		if b, err := os.ReadFile(p); err == nil {
			files[p] = b
		}
	}
	for name, full := range files {
		step := 1
		if len(full) > 4096 {
			step = 97
		}
		cuts := []int{}
		for n := 0; n < len(full); n += step {
			cuts = append(cuts, n)
		}
		cuts = append(cuts, len(full)-1)
		for _, n := range cuts {
			_, err := Parse(name, full[:n])
			if err == nil {
				t.Fatalf("%s cut to %d of %d bytes: Parse succeeded", name, n, len(full))
			}
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("%s cut to %d bytes: error %q does not name the file", name, n, err)
			}
		}
		if _, err := Parse(name, full); err != nil {
			t.Fatalf("%s: uncut: %v", name, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.safetensors")
	if _, err := Open(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Open(missing) = %v, want error naming %s", err, missing)
	}
	empty := filepath.Join(dir, "empty.safetensors")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("Open(empty) = %v, want error naming %s", err, empty)
	}
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, rawLen(1000, "{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Open(bad) = %v, want error naming %s", err, bad)
	}
}

func TestDTypeSize(t *testing.T) {
	want := map[DType]int{
		Bool: 1, U8: 1, I8: 1, F8E4M3: 1, F8E5M2: 1, F8E8M0: 1,
		I16: 2, U16: 2, F16: 2, BF16: 2,
		I32: 4, U32: 4, F32: 4,
		I64: 8, U64: 8, F64: 8,
		"F4": 0, "": 0, "f32": 0,
	}
	for d, n := range want {
		if got := d.Size(); got != n {
			t.Errorf("%q.Size() = %d, want %d", d, got, n)
		}
	}
	if len(DTypes) != 16 {
		t.Errorf("DTypes has %d entries, want 16", len(DTypes))
	}
	for _, d := range DTypes {
		if d.Size() == 0 {
			t.Errorf("DTypes lists %s with size 0", d)
		}
	}
}

func TestConversions(t *testing.T) {
	for _, tn := range sampleTensors() {
		want, ok := sampleValues[tn.Name]
		if !ok {
			continue
		}
		got, err := tn.Float32s()
		if err != nil {
			t.Errorf("%s: Float32s: %v", tn.Name, err)
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d values, want %d", tn.Name, len(got), len(want))
			continue
		}
		for i := range got {
			if got[i] != float32(want[i]) {
				t.Errorf("%s[%d] = %v, want %v", tn.Name, i, got[i], want[i])
			}
		}
	}
	bad := []Tensor{
		{Name: "short", DType: F32, Shape: []int{2}, Data: make([]byte, 7)},
		{Name: "unknown", DType: "F4", Shape: []int{1}, Data: make([]byte, 1)},
		{Name: "negative", DType: U8, Shape: []int{-1}, Data: nil},
	}
	for _, tn := range bad {
		if _, err := tn.Float32s(); err == nil || !strings.Contains(err.Error(), tn.Name) {
			t.Errorf("%s: Float32s error = %v, want one naming the tensor", tn.Name, err)
		}
	}
	if _, err := (Tensor{Name: "f", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}).Int64s(); err == nil {
		t.Errorf("Int64s of F32 succeeded")
	}
	big := Tensor{Name: "big", DType: U64, Shape: []int{1}, Data: []byte{0, 0, 0, 0, 0, 0, 0, 0x80}}
	if _, err := big.Int64s(); err == nil {
		t.Errorf("Int64s of U64 1<<63 succeeded")
	}
}
