package gguf

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestStream writes the sample model tensor by tensor and checks that the
// bytes match a one-shot WriteTo.
func TestStream(t *testing.T) {
	for _, align := range []int{0, 64} {
		want := sampleFile(t, align)

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
		sts := sampleTensors()
		for _, st := range sts {
			if err := w.AddTensorInfo(st.name, st.typ, st.dims); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.WriteTo(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "has no data") {
			t.Errorf("WriteTo without data: %v", err)
		}
		var buf bytes.Buffer
		if err := w.WriteHeader(&buf); err != nil {
			t.Fatal(err)
		}
		if err := w.SetKV("late", Uint8(1)); err == nil {
			t.Error("SetKV after WriteHeader succeeded")
		}
		if err := w.AddTensorInfo("late", F32, []int64{1}); err == nil {
			t.Error("AddTensorInfo after WriteHeader succeeded")
		}
		if err := w.WriteTensorData(sts[1].name, nil); err == nil || !strings.Contains(err.Error(), "comes next") {
			t.Errorf("out-of-order WriteTensorData: %v", err)
		}
		for i, st := range sts {
			size, _ := tensorSize(st.typ, st.dims)
			if err := w.WriteTensorData(st.name, make([]byte, size+1)); err == nil {
				t.Errorf("tensor %s: wrong-sized data accepted", st.name)
			}
			if i == len(sts)-1 {
				if err := w.Finish(); err == nil {
					t.Error("Finish before the last tensor succeeded")
				}
			}
			if err := w.WriteTensorData(st.name, tensorBytes(i, int(size))); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensorData("extra", nil); err == nil {
			t.Error("WriteTensorData after the last tensor succeeded")
		}
		if w.Written() != int64(buf.Len()) {
			t.Errorf("Written() = %d, wrote %d", w.Written(), buf.Len())
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("align %d: streamed file differs from WriteTo's", align)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"empty key", w.SetKV("", Uint8(1)), "empty key"},
		{"alignment type", w.SetKV(KeyAlignment, Uint64(64)), "must be a uint32 power of two"},
		{"alignment value", w.SetKV(KeyAlignment, Uint32(24)), "must be a uint32 power of two"},
		{"SetAlignment", w.SetAlignment(0), "not a power of two"},
		{"SetAlignment too big", w.SetAlignment(1 << 33), "not a power of two that fits a uint32"},
		{"array of scalars", w.SetKV("k", Array([]Value{Uint8(1)})), "element 0 of an array of arrays is a uint8"},
		{"long name", w.AddTensor(strings.Repeat("x", 64), F32, []int64{1}, make([]byte, 4)), "longer than 63"},
		{"unknown type", w.AddTensor("t", Type(99), []int64{1}, nil), "tensor t: unknown tensor type id 99"},
		{"removed type", w.AddTensor("t", Type(36), []int64{32}, nil), "IQ4_NL_4_4"},
		{"five dims", w.AddTensor("t", F32, []int64{1, 1, 1, 1, 1}, nil), "5 dimensions"},
		{"negative dim", w.AddTensor("t", F32, []int64{-1}, nil), "dimension 0 is negative"},
		{"partial block", w.AddTensor("t", Q8_0, []int64{16}, make([]byte, 17)), "not a whole number of 32-element Q8_0 blocks"},
		{"data size", w.AddTensor("t", F32, []int64{2}, make([]byte, 4)), "4 bytes of data, want 8"},
		{"WriteTensorData first", w.WriteTensorData("t", nil), "before WriteHeader"},
		{"Finish first", w.Finish(), "before WriteHeader"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, tt.err, tt.want)
		}
	}
	if err := w.AddTensor("t", F32, []int64{1}, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("t", F32, []int64{1}, make([]byte, 4)); err == nil || !strings.Contains(err.Error(), "duplicate tensor t") {
		t.Errorf("duplicate tensor: %v", err)
	}
	// A failed SetKV leaves the alignment as it was.
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("w.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != DefaultAlignment || len(f.KV) != 0 {
		t.Errorf("Alignment %d, KV %v", f.Alignment, f.KV)
	}
}

func TestSetKVReplaces(t *testing.T) {
	w := NewWriter()
	for _, kv := range []KV{{"a", Uint8(1)}, {"b", String("x")}, {"a", Int64(-1)}} {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SetAlignment(128); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("t", F32, []int64{3}, make([]byte, 12)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("w.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// A 133-byte header padded to 256, then 12 bytes of data padded to 128.
	if f.DataOffset != 256 || buf.Len() != 384 {
		t.Errorf("DataOffset %d, file size %d; want 256, 384", f.DataOffset, buf.Len())
	}
	keys := []string{}
	for _, kv := range f.KV {
		keys = append(keys, kv.Key)
	}
	if strings.Join(keys, ",") != "a,b,general.alignment" || f.Alignment != 128 {
		t.Errorf("keys %v, alignment %d", keys, f.Alignment)
	}
	if v, _ := f.Int("a"); v != -1 {
		t.Errorf("a = %d, want -1", v)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n := f.n
		f.n = 0
		return n, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriteError(t *testing.T) {
	w := sampleWriter(t, 0)
	for _, limit := range []int{0, 100, 2000} {
		n, err := w.WriteTo(&failWriter{n: limit})
		if err == nil || !strings.Contains(err.Error(), "disk full") || n != int64(limit) {
			t.Errorf("limit %d: WriteTo = %d, %v", limit, n, err)
		}
	}
}
