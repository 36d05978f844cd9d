package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sampleTensors returns one tensor of every dtype with awkward values. The
// same tensors are checked by testdata/check_reference.py; keep the two in
// step.
func sampleTensors() []Tensor {
	le := binary.LittleEndian
	var f64, f32, f16, bf16, i8, i16, u16, i32, u32, i64, u64 []byte
	for i := range 6 {
		f64 = le.AppendUint64(f64, math.Float64bits(float64(i)*0.25-0.5))
		f32 = le.AppendUint32(f32, math.Float32bits(float32(i)*1.5-3))
	}
	for _, h := range []uint16{0x0000, 0x3c00, 0xc000, 0x3800, 0x7bff} { // 0 1 -2 0.5 65504
		f16 = le.AppendUint16(f16, h)
	}
	for _, h := range []uint16{0x3f80, 0xbfc0, 0x4049, 0x4380} { // 1 -1.5 3.140625 256
		bf16 = le.AppendUint16(bf16, h)
	}
	for _, v := range []int8{-128, -1, 0, 127} {
		i8 = append(i8, byte(v))
	}
	for _, v := range []int16{-32768, 0, 32767} {
		i16 = le.AppendUint16(i16, uint16(v))
	}
	for _, v := range []uint16{0, 65535} {
		u16 = le.AppendUint16(u16, v)
	}
	for _, v := range []int32{math.MinInt32, 7, math.MaxInt32} {
		i32 = le.AppendUint32(i32, uint32(v))
	}
	for _, v := range []uint32{0, math.MaxUint32} {
		u32 = le.AppendUint32(u32, v)
	}
	for _, v := range []int64{math.MinInt64, math.MaxInt64} {
		i64 = le.AppendUint64(i64, uint64(v))
	}
	for _, v := range []uint64{0, math.MaxUint64} {
		u64 = le.AppendUint64(u64, v)
	}
	return []Tensor{
		{Name: "f64", DType: F64, Shape: []int{2, 3}, Data: f64},
		{Name: "f32", DType: F32, Shape: []int{2, 3}, Data: f32},
		{Name: "f16", DType: F16, Shape: []int{5}, Data: f16},
		{Name: "bf16", DType: BF16, Shape: []int{2, 2}, Data: bf16},
		{Name: "f8_e4m3", DType: F8E4M3, Shape: []int{4}, Data: []byte{0x38, 0xb8, 0x7e, 0x01}},
		{Name: "f8_e5m2", DType: F8E5M2, Shape: []int{4}, Data: []byte{0x3c, 0xbc, 0x7b, 0x01}},
		{Name: "i8", DType: I8, Shape: []int{4}, Data: i8},
		{Name: "u8", DType: U8, Shape: []int{3}, Data: []byte{0, 1, 255}},
		{Name: "i16", DType: I16, Shape: []int{3}, Data: i16},
		{Name: "u16", DType: U16, Shape: []int{2}, Data: u16},
		{Name: "i32", DType: I32, Shape: []int{3}, Data: i32},
		{Name: "u32", DType: U32, Shape: []int{2}, Data: u32},
		{Name: "i64", DType: I64, Shape: []int{2}, Data: i64},
		{Name: "u64", DType: U64, Shape: []int{2}, Data: u64},
		{Name: "bool", DType: Bool, Shape: []int{3}, Data: []byte{1, 0, 1}},
		{Name: "scalar", DType: F32, Shape: []int{}, Data: le.AppendUint32(nil, math.Float32bits(42))},
		{Name: "empty", DType: F32, Shape: []int{0, 4}, Data: []byte{}},
		{Name: `name with "quotes" / ü <&>`, DType: F32, Shape: []int{1}, Data: le.AppendUint32(nil, math.Float32bits(7))},
	}
}

// sampleValues holds the values of sampleTensors as Float32s returns them.
var sampleValues = map[string][]float64{
	"f64":     {-0.5, -0.25, 0, 0.25, 0.5, 0.75},
	"f32":     {-3, -1.5, 0, 1.5, 3, 4.5},
	"f16":     {0, 1, -2, 0.5, 65504},
	"bf16":    {1, -1.5, 3.140625, 256},
	"f8_e4m3": {1, -1, 448, 0x1p-9},
	"f8_e5m2": {1, -1, 57344, 0x1p-16},
	"i8":      {-128, -1, 0, 127},
	"u8":      {0, 1, 255},
	"i16":     {-32768, 0, 32767},
	"u16":     {0, 65535},
	"i32":     {math.MinInt32, 7, math.MaxInt32},
	"u32":     {0, math.MaxUint32},
	"i64":     {math.MinInt64, math.MaxInt64},
	"u64":     {0, math.MaxUint64},
	"bool":    {1, 0, 1},
	"scalar":  {42},
	"empty":   {},
}

var sampleMetadata = map[string]string{"format": "pt", "lem": "test <&> \"quoted\""}

func TestWriteRoundTrip(t *testing.T) {
	in := sampleTensors()
	var buf bytes.Buffer
	if err := Write(&buf, in, sampleMetadata); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	if !bytes.HasPrefix(b[8:], []byte(`{"__metadata__":{"format":"pt","lem":"test <&> \"quoted\""},"f64":{`)) {
		t.Errorf("header starts %q, want __metadata__ first, unescaped <&>", b[8:80])
	}
	f, err := Parse("roundtrip", b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tn := range in {
		names = append(names, tn.Name)
	}
	if got := f.Names(); !slices.Equal(got, names) {
		t.Errorf("Names = %q, want %q", got, names)
	}
	for _, want := range in {
		got, ok := f.Tensor(want.Name)
		if !ok {
			t.Fatalf("%q missing", want.Name)
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%q = %s %v % x, want %s %v % x", want.Name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
	}
	for k, v := range sampleMetadata {
		if f.Metadata()[k] != v {
			t.Errorf("metadata %q = %q, want %q", k, f.Metadata()[k], v)
		}
	}
	// Data lies contiguously after the header, in the order given.
	off := 8 + int(n)
	for _, tn := range in {
		if !bytes.Equal(b[off:off+len(tn.Data)], tn.Data) {
			t.Errorf("%q not at offset %d", tn.Name, off)
		}
		off += len(tn.Data)
	}
	if off != len(b) {
		t.Errorf("file is %d bytes, want %d", len(b), off)
	}
}

func TestWriteExactBytes(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		md      map[string]string
		header  string
	}{
		{
			name:    "no metadata",
			tensors: []Tensor{{Name: "a", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}},
			header:  `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}` + "  ",
		},
		{
			name: "metadata and two tensors",
			tensors: []Tensor{
				{Name: "w", DType: BF16, Shape: []int{2, 1}, Data: make([]byte, 4)},
				{Name: "b", DType: I64, Shape: []int{}, Data: make([]byte, 8)},
			},
			md:     map[string]string{"z": "1", "format": "pt"},
			header: `{"__metadata__":{"format":"pt","z":"1"},"w":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]},"b":{"dtype":"I64","shape":[],"data_offsets":[4,12]}}` + "   ",
		},
		{
			name:   "nothing",
			header: "{}      ",
		},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if err := Write(&buf, tt.tensors, tt.md); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		want := rawFile(tt.header, nil)
		for _, tn := range tt.tensors {
			want = append(want, tn.Data...)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, buf.Bytes(), want)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	ok := Tensor{Name: "ok", DType: U8, Shape: []int{1}, Data: []byte{1}}
	tests := []struct {
		name    string
		tensors []Tensor
		md      map[string]string
		want    string
	}{
		{"duplicate", []Tensor{ok, ok}, nil, `duplicate tensor "ok"`},
		{"no name", []Tensor{{DType: U8, Shape: []int{0}}}, nil, "tensor 0 has no name"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{0}}}, nil, "reserved"},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F4", Shape: []int{1}, Data: []byte{0}}}, nil, `tensor "x": unknown dtype "F4"`},
		{"short data", []Tensor{{Name: "x", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil, `tensor "x": 4 bytes of data`},
		{"negative dim", []Tensor{{Name: "x", DType: F32, Shape: []int{-2}}}, nil, `tensor "x": invalid shape`},
		{"bad UTF-8 name", []Tensor{{Name: "\xff", DType: U8, Shape: []int{0}}}, nil, "not valid UTF-8"},
		{"bad UTF-8 metadata", nil, map[string]string{"k": "\xff"}, `metadata "k"`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		err := Write(&buf, tt.tensors, tt.md)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Write error = %v, want one containing %q", tt.name, err, tt.want)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: Write wrote %d bytes before failing validation", tt.name, buf.Len())
		}
	}
}

type failWriter struct{ after int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	if err := WriteFile(path, sampleTensors(), sampleMetadata); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Names()) != len(sampleTensors()) {
		t.Errorf("read back %d tensors, want %d", len(f.Names()), len(sampleTensors()))
	}
	f.Close()

	// A failed write leaves neither the file nor a temporary behind.
	bad := filepath.Join(dir, "bad.safetensors")
	if err := WriteFile(bad, []Tensor{{Name: "x", DType: "F4"}}, nil); err == nil {
		t.Fatal("WriteFile with a bad tensor succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want 1", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir.safetensors"), nil, nil); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	for after := range 4 {
		err := Write(&failWriter{after: after}, sampleTensors()[:2], nil)
		if err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("Write failing after %d writes: error %v", after, err)
		}
	}
}

// TestWriteForReference writes the sample tensors for
// testdata/check_reference.py, which reads them with the reference
// safetensors library:
//
//	LEM_WRITE_SAFETENSORS=/tmp/lem.safetensors go test -run TestWriteForReference ./safetensors/
//	python3 safetensors/testdata/check_reference.py /tmp/lem.safetensors
//
// Without the variable it writes to a temporary directory and reads back.
func TestWriteForReference(t *testing.T) {
	path := os.Getenv("LEM_WRITE_SAFETENSORS")
	if path == "" {
		path = filepath.Join(t.TempDir(), "reference-check.safetensors")
	}
	if err := WriteFile(path, sampleTensors(), sampleMetadata); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, want := range sampleValues {
		tn, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		got, err := tn.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != float32(want[i]) {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	t.Logf("wrote %s", path)
}
