package gguf

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, align := range []int{0, 64} {
		data := sampleFile(f, align)
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(data[:200])
	}
	w := NewWriter()
	if err := w.SetKV("tokenizer.ggml.tokens", Array([]string{"a", "b", "c"})); err != nil {
		f.Fatal(err)
	}
	if err := w.AddTensor("t", Q8_0, []int64{32}, make([]byte, 34)); err != nil {
		f.Fatal(err)
	}
	small := encode(f, w)
	f.Add(small)
	v1 := bytes.Clone(small)
	binary.LittleEndian.PutUint32(v1[4:], 1)
	f.Add(v1)
	f.Add(head(1<<60, 1<<60).b)
	f.Add(head(0, 1).str("k").u32(9).u32(9).u64(3).u32(0).u64(1).u8(7).u32(8).u64(0).u32(9).u64(0).b)
	f.Add(head(2, 0).tinfo("a", 0, 0, 16).tinfo("b", 0, 32, 8).pad(32).zeros(96).b)
	f.Add([]byte("GGUF"))

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.gguf", data)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors {
			if _, d, ok := file.Tensor(ti.Name); !ok || int64(len(d)) != ti.Size() {
				t.Fatalf("tensor %s: %d bytes, want %d", ti.Name, len(d), ti.Size())
			}
		}
		_ = file.ParamCount()
		for _, kv := range file.KV {
			_ = kv.Value.String()
		}
		// What parses must write back, and writing is then stable.
		once, err := rewrite(t, file)
		if err != nil {
			return // e.g. a tensor name longer than the Writer allows
		}
		again, err := Parse("rewritten.gguf", once)
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		twice, err := rewrite(t, again)
		if err != nil {
			t.Fatalf("rewriting again: %v", err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatal("write→read→write changed the bytes")
		}
	})
}
