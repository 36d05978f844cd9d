package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleKV returns metadata of every value type, including nested arrays
// and empty ones.
func sampleKV() []KV {
	return []KV{
		{"general.architecture", String("llama")},
		{"general.name", String("tiny ünïcode model")},
		{"test.uint8", Uint8(250)},
		{"test.int8", Int8(-7)},
		{"test.uint16", Uint16(65000)},
		{"test.int16", Int16(-32000)},
		{"test.uint32", Uint32(4_000_000_000)},
		{"test.int32", Int32(-2_000_000_000)},
		{"test.float32", Float32(1e-5)},
		{"test.bool.true", Bool(true)},
		{"test.bool.false", Bool(false)},
		{"test.string.empty", String("")},
		{"test.uint64", Uint64(math.MaxUint64)},
		{"test.int64", Int64(math.MinInt64)},
		{"test.float64", Float64(-2.5e300)},
		{"test.array.uint8", Array([]uint8{0, 1, 255})},
		{"test.array.int8", Array([]int8{-128, 0, 127})},
		{"test.array.uint16", Array([]uint16{1, 65535})},
		{"test.array.int16", Array([]int16{-1, 300})},
		{"test.array.uint32", Array([]uint32{7, 1 << 31})},
		{"test.array.int32", Array([]int32{-5, 5, 1 << 30})},
		{"test.array.float32", Array([]float32{0.5, -1, float32(math.Inf(1))})},
		{"test.array.bool", Array([]bool{true, false, true})},
		{"tokenizer.ggml.tokens", Array([]string{"<s>", "</s>", "", "héllo", "▁the"})},
		{"test.array.uint64", Array([]uint64{math.MaxUint64, 0})},
		{"test.array.int64", Array([]int64{math.MinInt64, 42})},
		{"test.array.float64", Array([]float64{math.Pi, math.SmallestNonzeroFloat64})},
		{"test.array.empty", Array([]int32{})},
		{"test.array.nested", Array([]Value{
			Array([]int32{1, 2, 3}),
			Array([]string{"a", "bc"}),
			Array([]Value{Array([]float64{1.5}), Array([]bool{})}),
			Array([]Value{}),
		})},
	}
}

type sampleTensor struct {
	name string
	typ  Type
	dims []int64
}

func sampleTensors() []sampleTensor {
	return []sampleTensor{
		{"token_embd.weight", F16, []int64{8, 3}},
		{"blk.0.attn_norm.weight", F32, []int64{7}}, // 28 bytes: needs padding
		{"blk.0.attn_q.weight", Q4_0, []int64{64, 2}},
		{"blk.0.ffn_down.weight", Q4_K, []int64{256, 2, 1}},
		{"blk.0.ffn_up.weight", Q8_0, []int64{32, 1, 2, 1}},
		{"blk.0.exp.weight", MXFP4, []int64{32, 3}},
		{"output.weight", BF16, []int64{5, 2}},
		{"rope_freqs", I32, []int64{3}},
		{"empty", F32, []int64{0, 4}},
		{"scalar", F32, nil},
	}
}

// tensorBytes returns deterministic contents for a tensor of the given size.
func tensorBytes(seed, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + 1)
	}
	return b
}

// sampleWriter returns a Writer holding sampleKV and sampleTensors with the
// given alignment (0 for the default, leaving general.alignment unset).
func sampleWriter(t testing.TB, align int) *Writer {
	t.Helper()
	w := NewWriter()
	if align != 0 {
		if err := w.SetAlignment(align); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range sampleKV() {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range sampleTensors() {
		size, err := tensorSize(st.typ, st.dims)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(st.name, st.typ, st.dims, tensorBytes(i, int(size))); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func encode(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

func sampleFile(t testing.TB, align int) []byte {
	return encode(t, sampleWriter(t, align))
}

// rewrite writes f back out with a Writer.
func rewrite(t testing.TB, f *File) ([]byte, error) {
	t.Helper()
	w := NewWriter()
	for _, kv := range f.KV {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, f.TensorData(ti)); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []int{0, 32, 64, 1, 4096} {
		t.Run(fmt.Sprint("align", align), func(t *testing.T) {
			data := sampleFile(t, align)
			f, err := Parse("sample.gguf", data)
			if err != nil {
				t.Fatal(err)
			}
			wantAlign := align
			if align == 0 {
				wantAlign = DefaultAlignment
			}
			if f.Version != 3 || f.Alignment != wantAlign {
				t.Errorf("Version, Alignment = %d, %d; want 3, %d", f.Version, f.Alignment, wantAlign)
			}
			if f.DataOffset%int64(wantAlign) != 0 {
				t.Errorf("DataOffset %d is not aligned to %d", f.DataOffset, wantAlign)
			}

			wantKV := sampleKV()
			if align != 0 {
				wantKV = append([]KV{{KeyAlignment, Uint32(uint32(align))}}, wantKV...)
			}
			if !reflect.DeepEqual(f.KV, wantKV) {
				t.Errorf("KV mismatch:\n got %v\nwant %v", f.KV, wantKV)
			}
			for _, kv := range wantKV {
				got, ok := f.Value(kv.Key)
				if !ok || !reflect.DeepEqual(got, kv.Value) {
					t.Errorf("Value(%s) = %v, %v; want %v", kv.Key, got, ok, kv.Value)
				}
			}

			sts := sampleTensors()
			if len(f.Tensors) != len(sts) {
				t.Fatalf("got %d tensors, want %d", len(f.Tensors), len(sts))
			}
			var params int64
			for i, st := range sts {
				ti, got, ok := f.Tensor(st.name)
				if !ok {
					t.Fatalf("tensor %s missing", st.name)
				}
				if ti.Name != st.name || ti.Type != st.typ || len(ti.Dims) != len(st.dims) {
					t.Errorf("tensor %d = %+v, want %+v", i, ti, st)
				}
				for j := range st.dims {
					if ti.Dims[j] != st.dims[j] {
						t.Errorf("tensor %s dims = %v, want %v", st.name, ti.Dims, st.dims)
					}
				}
				if ti.Offset%uint64(wantAlign) != 0 {
					t.Errorf("tensor %s offset %d is not aligned", st.name, ti.Offset)
				}
				if want := tensorBytes(i, int(ti.Size())); !bytes.Equal(got, want) {
					t.Errorf("tensor %s data = %x, want %x", st.name, got, want)
				}
				if cap(got) != len(got) {
					t.Errorf("tensor %s data has capacity %d beyond its length %d", st.name, cap(got), len(got))
				}
				params += ti.Elements()
			}
			if got := f.ParamCount(); got != params {
				t.Errorf("ParamCount() = %d, want %d", got, params)
			}
			if int64(len(data))-f.DataOffset < f.DataSize() {
				t.Errorf("DataSize() = %d exceeds the data section", f.DataSize())
			}

			again, err := rewrite(t, f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, data) {
				t.Errorf("write→read→write changed the bytes (%d vs %d bytes)", len(again), len(data))
			}
		})
	}
}

func TestGetters(t *testing.T) {
	f, err := Parse("sample.gguf", sampleFile(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Architecture(); got != "llama" {
		t.Errorf("Architecture() = %q", got)
	}
	if got, ok := f.String("general.name"); !ok || got != "tiny ünïcode model" {
		t.Errorf("String = %q, %v", got, ok)
	}
	if _, ok := f.String("test.uint8"); ok {
		t.Error("String accepted a uint8")
	}
	uints := []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"test.uint8", 250, true},
		{"test.uint16", 65000, true},
		{"test.uint32", 4_000_000_000, true},
		{"test.uint64", math.MaxUint64, true},
		{"test.int8", 0, false}, // negative
		{"test.float32", 0, false},
		{"missing", 0, false},
	}
	for _, tt := range uints {
		if got, ok := f.Uint(tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Uint(%s) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	ints := []struct {
		key  string
		want int64
		ok   bool
	}{
		{"test.int8", -7, true},
		{"test.int16", -32000, true},
		{"test.int32", -2_000_000_000, true},
		{"test.int64", math.MinInt64, true},
		{"test.uint32", 4_000_000_000, true},
		{"test.uint64", 0, false}, // too large
		{"general.name", 0, false},
	}
	for _, tt := range ints {
		if got, ok := f.Int(tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Int(%s) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	floats := []struct {
		key  string
		want float64
		ok   bool
	}{
		{"test.float32", float64(float32(1e-5)), true},
		{"test.float64", -2.5e300, true},
		{"test.int8", -7, true},
		{"test.bool.true", 0, false},
	}
	for _, tt := range floats {
		if got, ok := f.Float(tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Float(%s) = %g, %v; want %g, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	if got, ok := f.Bool("test.bool.true"); !got || !ok {
		t.Errorf("Bool(true key) = %v, %v", got, ok)
	}
	if got, ok := f.Bool("test.bool.false"); got || !ok {
		t.Errorf("Bool(false key) = %v, %v", got, ok)
	}
	if _, ok := f.Bool("test.uint8"); ok {
		t.Error("Bool accepted a uint8")
	}
	if got, ok := f.Strings("tokenizer.ggml.tokens"); !ok || !reflect.DeepEqual(got, []string{"<s>", "</s>", "", "héllo", "▁the"}) {
		t.Errorf("Strings = %q, %v", got, ok)
	}
	if got, ok := f.Float32s("test.array.float32"); !ok || len(got) != 3 || got[0] != 0.5 {
		t.Errorf("Float32s = %v, %v", got, ok)
	}
	if got, ok := f.Int32s("test.array.int32"); !ok || !reflect.DeepEqual(got, []int32{-5, 5, 1 << 30}) {
		t.Errorf("Int32s = %v, %v", got, ok)
	}
	if _, ok := f.Int32s("test.array.uint32"); ok {
		t.Error("Int32s accepted a uint32 array")
	}
	if _, ok := f.Strings("general.name"); ok {
		t.Error("Strings accepted a string")
	}
	v, _ := f.Value("test.array.nested")
	if v.Type() != ValueArray || v.Elem() != ValueArray || v.Len() != 4 {
		t.Errorf("nested: type %s elem %s len %d", v.Type(), v.Elem(), v.Len())
	}
	inner := v.Index(2).Index(0)
	if got, ok := ArrayOf[float64](inner); !ok || !reflect.DeepEqual(got, []float64{1.5}) {
		t.Errorf("nested [2][0] = %v, %v", got, ok)
	}
	if got, ok := v.Index(0).Ints(); !ok || !reflect.DeepEqual(got, []int64{1, 2, 3}) {
		t.Errorf("Ints() = %v, %v", got, ok)
	}
	if _, ok := v.Index(1).Ints(); ok {
		t.Error("Ints accepted a string array")
	}
}

func TestValueString(t *testing.T) {
	tests := []struct {
		v    Value
		want string
	}{
		{Uint8(3), "3"},
		{Int64(-9), "-9"},
		{Float32(0.1), "0.1"},
		{Bool(true), "true"},
		{String("a\"b"), `"a\"b"`},
		{Array([]string{"x", "y"}), `["x", "y"]`},
		{Array([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), "[1, 2, 3, 4, 5, 6, 7, 8, … (10 int32)]"},
		{Array([]Value{Array([]bool{true})}), "[[true]]"},
		{Value{}, "0"},
	}
	for _, tt := range tests {
		if got := tt.v.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestVersion2 reads a version 2 file, which has the same layout as version
// 3 for little-endian data.
func TestVersion2(t *testing.T) {
	data := sampleFile(t, 0)
	binary.LittleEndian.PutUint32(data[4:], 2)
	f, err := Parse("v2.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.Tensors) != len(sampleTensors()) {
		t.Errorf("Version %d, %d tensors", f.Version, len(f.Tensors))
	}
}

func TestNoTensors(t *testing.T) {
	w := NewWriter()
	if err := w.SetKV("general.architecture", String("x")); err != nil {
		t.Fatal(err)
	}
	data := encode(t, w)
	f, err := Parse("kv.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 0 || f.Architecture() != "x" || f.ParamCount() != 0 {
		t.Errorf("got %+v", f)
	}
	if _, _, ok := f.Tensor("x"); ok {
		t.Error("Tensor found a tensor in an empty file")
	}
}

// TestTruncated cuts a valid file at every offset up to the end of its
// header, and inside every tensor's data: each must fail cleanly, naming the
// file and what was being read.
func TestTruncated(t *testing.T) {
	data := sampleFile(t, 64)
	f, err := Parse("full.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	var cuts []int
	for n := 0; n < int(f.DataOffset); n++ {
		cuts = append(cuts, n)
	}
	for _, ti := range f.Tensors {
		if size := ti.Size(); size > 0 {
			start := int(f.DataOffset) + int(ti.Offset)
			cuts = append(cuts, start, start+int(size)/2, start+int(size)-1)
		}
	}
	for _, n := range cuts {
		_, err := Parse("cut.gguf", data[:n])
		if err == nil {
			t.Errorf("cut at %d: no error", n)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "gguf: cut.gguf: ") {
			t.Errorf("cut at %d: error %q does not name the file", n, msg)
		}
		if !errors.Is(err, ErrTruncated) || !strings.Contains(msg, "unexpected end of file") {
			t.Errorf("cut at %d: error %q is not about a truncated file", n, msg)
		}
		if n > 24 && !strings.Contains(msg, "key ") && !strings.Contains(msg, "tensor ") {
			t.Errorf("cut at %d: error %q does not say which key or tensor", n, msg)
		}
	}
}

func TestTruncatedMessage(t *testing.T) {
	w := NewWriter()
	for _, kv := range []KV{
		{"general.architecture", String("llama")},
		{"a", Uint32(1)},
		{"b", Uint32(2)},
		{"tokenizer.ggml.tokens", Array([]string{"alpha", "beta", "gamma"})},
	} {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	data := encode(t, w)
	_, err := Parse("model.gguf", data[:len(data)-2])
	want := "gguf: model.gguf: reading key 3 (tokenizer.ggml.tokens) of type array: element 2: at offset "
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), ": unexpected end of file") {
		t.Errorf("error = %v\nwant %s…: unexpected end of file", err, want)
	}
}

// raw builds GGUF bytes by hand, for inputs the Writer refuses to make.
type raw struct{ b []byte }

func (r *raw) u8(v uint8) *raw   { r.b = append(r.b, v); return r }
func (r *raw) u32(v uint32) *raw { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }
func (r *raw) pad(n int) *raw {
	for len(r.b)%n != 0 {
		r.b = append(r.b, 0)
	}
	return r
}
func (r *raw) zeros(n int) *raw { r.b = append(r.b, make([]byte, n)...); return r }

// head starts a version 3 file with the given counts.
func head(nTensors, nKV uint64) *raw {
	r := &raw{b: []byte("GGUF")}
	return r.u32(3).u64(nTensors).u64(nKV)
}

// tinfo appends a tensor info.
func (r *raw) tinfo(name string, typ uint32, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(typ).u64(off)
}

func TestCorrupt(t *testing.T) {
	nested := head(0, 1).str("deep").u32(uint32(ValueArray))
	for range maxNesting {
		nested.u32(uint32(ValueArray)).u64(1)
	}
	nested.u32(uint32(ValueUint8)).u64(0)

	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "reading magic: unexpected end of file"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), `not a GGUF file: magic is "GGML"`},
		{"version 1", (&raw{b: []byte("GGUF")}).u32(1).u32(0).u32(0).b, "GGUF version 1 is not supported"},
		{"version 0", (&raw{b: []byte("GGUF")}).u32(0).u64(0).u64(0).b, "unsupported GGUF version 0"},
		{"version 4", (&raw{b: []byte("GGUF")}).u32(4).u64(0).u64(0).b, "unsupported GGUF version 4"},
		{"big endian", []byte("GGUF\x00\x00\x00\x03" + strings.Repeat("\x00", 16)), "big-endian GGUF files are not supported"},
		{"huge tensor count", head(1<<60, 0).b, "reading tensor 0 name: at offset 24: unexpected end of file (the tensor count claims 1152921504606846976, more than the rest of the file can hold)"},
		{"huge kv count", head(0, 1<<60).b, "reading key 0: at offset 24: unexpected end of file (the key-value count claims 1152921504606846976, more than the rest of the file can hold)"},
		{"huge key length", head(0, 1).u64(1 << 60).b, "reading key 0: at offset 24: string length 1152921504606846976 exceeds"},
		{"empty key", head(0, 1).str("").u32(0).u8(0).b, "key 0 at offset 24 is empty"},
		{"duplicate key", head(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).b, "key 1 (k) at offset 38: duplicate key"},
		{"unknown value type", head(0, 1).str("k").u32(13).b, "reading key 0 (k) type: at offset 33: unknown value type 13"},
		{"unknown element type", head(0, 1).str("k").u32(9).u32(99).u64(0).b, "unknown value type 99"},
		{"huge string", head(0, 1).str("k").u32(8).u64(1 << 60).b, "string length 1152921504606846976 exceeds the remaining 0 bytes"},
		{"huge uint64 array", head(0, 1).str("k").u32(9).u32(10).u64(1 << 60).zeros(64).b, "at offset 41: array of 1152921504606846976 uint64 needs more than the remaining 64 bytes: unexpected end of file"},
		{"huge uint8 array", head(0, 1).str("k").u32(9).u32(0).u64(1 << 62).b, "array of 4611686018427387904 uint8 needs more than the remaining 0 bytes"},
		{"huge string array", head(0, 1).str("k").u32(9).u32(8).u64(1 << 60).zeros(8).b, "element 1: at offset 57: unexpected end of file (the array claims 1152921504606846976, more than the rest of the file can hold)"},
		{"huge array of arrays", head(0, 1).str("k").u32(9).u32(9).u64(1 << 60).zeros(8).b, "element 0: at offset 53: unexpected end of file (the array claims 1152921504606846976"},
		{"string element past end", head(0, 1).str("k").u32(9).u32(8).u64(2).str("ok").u64(100).b, "element 1: at offset 59: string length 100 exceeds"},
		{"bool 2", head(0, 1).str("k").u32(7).u8(2).b, "bool value 2 is neither 0 nor 1"},
		{"bool array 2", head(0, 1).str("k").u32(9).u32(7).u64(2).u8(1).u8(2).b, "element 1 at offset 50: bool value 2"},
		{"nested too deep", nested.b, "arrays nested more than 64 deep"},
		{"alignment not uint32", head(0, 1).str(KeyAlignment).u32(uint32(ValueInt32)).u32(32).b, "key general.alignment must be a uint32, not int32"},
		{"alignment 0", head(0, 1).str(KeyAlignment).u32(uint32(ValueUint32)).u32(0).b, "key general.alignment is 0, not a power of two"},
		{"alignment 48", head(0, 1).str(KeyAlignment).u32(uint32(ValueUint32)).u32(48).b, "key general.alignment is 48, not a power of two"},
		{"five dims", head(1, 0).tinfo("t", 0, 0, 1, 1, 1, 1, 1).b, "tensor 0 (t): 5 dimensions at offset 33, more than 4"},
		{"huge dim", head(1, 0).tinfo("t", 0, 0, 1<<63).b, "tensor 0 (t): dimension 0 at offset 37 is too large"},
		{"unknown type", head(1, 0).tinfo("blk.0.w", 99, 0, 32).pad(32).zeros(512).b, "tensor 0 (blk.0.w) at offset 51: unknown tensor type id 99"},
		{"removed type", head(1, 0).tinfo("blk.0.w", 31, 0, 32).pad(32).zeros(512).b, "tensor type 31 (Q4_0_4_4) has been removed"},
		{"partial block", head(1, 0).tinfo("w", uint32(Q4_0), 0, 33).b, "row of 33 elements is not a whole number of 32-element Q4_0 blocks"},
		{"size overflow", head(1, 0).tinfo("w", uint32(F32), 0, 1<<40, 1<<40).b, "overflows 64-bit sizes"},
		{"element overflow", head(1, 0).tinfo("w", uint32(Q2_K), 0, 256, 1<<28, 1<<28).b, "overflows 64-bit sizes"},
		{"duplicate tensor", head(2, 0).tinfo("w", 0, 0, 4).tinfo("w", 0, 32, 4).pad(32).zeros(64).b, "tensor 1 (w) at offset 57: duplicate tensor name"},
		{"misaligned", head(1, 0).tinfo("w", 0, 16, 4).pad(32).zeros(64).b, "tensor 0 (w): data offset 16 is not a multiple of the alignment 32"},
		{"past end", head(1, 0).tinfo("w", 0, 0, 16).pad(32).zeros(32).b, "tensor 0 (w): data at offset 64+0, 64 bytes, extends past the end of the file (96 bytes)"},
		{"huge offset", head(1, 0).tinfo("w", 0, 1<<63, 4).pad(32).zeros(32).b, "extends past the end of the file"},
		{"overlap", head(2, 0).tinfo("a", 0, 0, 16).tinfo("b", 0, 32, 8).pad(32).zeros(96).b, "tensor 1 (b) data [128, 160) overlaps tensor 0 (a) data [96, 160)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.gguf", tt.data)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), "gguf: bad.gguf: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestOverlapAllowsEmpty checks that zero-size tensors may share an offset
// with others, and that adjacent tensors are fine.
func TestOverlapAllowsEmpty(t *testing.T) {
	data := head(3, 0).tinfo("a", 0, 0, 8).tinfo("e", 0, 0, 0).tinfo("b", 0, 32, 8).pad(32).zeros(64).b
	if _, err := Parse("ok.gguf", data); err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	data := sampleFile(t, 0)
	name := filepath.Join(t.TempDir(), "model.gguf")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Parse(name, data)
	if !reflect.DeepEqual(f.KV, want.KV) || !reflect.DeepEqual(f.Tensors, want.Tensors) {
		t.Error("Open and Parse disagree")
	}
	_, got, ok := f.Tensor("blk.0.attn_q.weight")
	_, exp, _ := want.Tensor("blk.0.attn_q.weight")
	if !ok || !bytes.Equal(got, exp) {
		t.Error("tensor data differs")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Architecture() != "llama" {
		t.Error("metadata lost after Close")
	}
	if _, d, _ := f.Tensor("blk.0.attn_q.weight"); d != nil {
		t.Error("tensor data available after Close")
	}

	if _, err := Open(filepath.Join(t.TempDir(), "missing.gguf")); err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Errorf("Open of a missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(bad, data[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Open of a truncated file: %v", err)
	}
}

func TestNestingLimit(t *testing.T) {
	deep := Array([]uint8{1})
	for range maxNesting - 1 {
		deep = Array([]Value{deep})
	}
	w := NewWriter()
	if err := w.SetKV("deep", deep); err != nil {
		t.Fatalf("%d levels: %v", maxNesting, err)
	}
	f, err := Parse("deep.gguf", encode(t, w))
	if err != nil {
		t.Fatalf("%d levels: %v", maxNesting, err)
	}
	if v, _ := f.Value("deep"); !reflect.DeepEqual(v, deep) {
		t.Error("deep value changed")
	}
	if err := w.SetKV("deeper", Array([]Value{deep})); err == nil || !strings.Contains(err.Error(), "nested more than 64 deep") {
		t.Errorf("%d levels: %v", maxNesting+1, err)
	}
}

func TestTensorDataBounds(t *testing.T) {
	f, err := Parse("sample.gguf", sampleFile(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range []TensorInfo{
		{Name: "x", Type: F32, Dims: []int64{1 << 40}},
		{Name: "x", Type: F32, Dims: []int64{1}, Offset: 1 << 63},
		{Name: "x", Type: F32, Dims: []int64{1}, Split: 3},
		{Name: "x", Type: Type(99), Dims: []int64{1}},
	} {
		if d := f.TensorData(ti); d != nil {
			t.Errorf("TensorData(%+v) = %d bytes, want nil", ti, len(d))
		}
	}
}
