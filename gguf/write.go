package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxNameLen is the longest tensor name, in bytes, that Writer accepts:
// ggml keeps names in 64-byte buffers with a terminating zero.
const MaxNameLen = 63

// Writer builds a GGUF version 3 file. Add metadata with SetKV and tensors
// with AddTensor, then call WriteTo. To write a model larger than memory,
// declare tensors with AddTensorInfo, call WriteHeader, then WriteTensorData
// once per tensor in the order they were added, and finally Finish.
//
// Tensor data is padded with zeros to the alignment, as is the header. The
// alignment is DefaultAlignment unless set with SetAlignment (or by setting
// general.alignment, a uint32).
type Writer struct {
	kv        []KV
	kvIndex   map[string]int
	tensors   []wtensor
	tIndex    map[string]int
	alignment int
	s         *stream // set by WriteHeader
}

type wtensor struct {
	info TensorInfo
	size int64
	data []byte // nil until given, for tensors added by AddTensorInfo
}

// stream is the state of one file being written.
type stream struct {
	w    *Writer
	out  io.Writer
	n    int64
	next int // index of the tensor whose data comes next
	err  error
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{
		kvIndex:   make(map[string]int),
		tIndex:    make(map[string]int),
		alignment: DefaultAlignment,
	}
}

var errHeaderWritten = errors.New("gguf: header already written")

// SetKV sets key to v. A key already set keeps its place and takes the new
// value; a new key goes after the others. Setting general.alignment sets
// the alignment, and it must then be a uint32 power of two.
func (w *Writer) SetKV(key string, v Value) error {
	if w.s != nil {
		return errHeaderWritten
	}
	if key == "" {
		return errors.New("gguf: empty key")
	}
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("gguf: key %s: %w", key, err)
	}
	if key == KeyAlignment {
		a, ok := v.Uint()
		if v.Type() != ValueUint32 || !ok || a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf: key %s must be a uint32 power of two, not %s %v", key, v.Type(), v)
		}
		w.alignment = int(a)
	}
	if i, ok := w.kvIndex[key]; ok {
		w.kv[i].Value = v
		return nil
	}
	w.kvIndex[key] = len(w.kv)
	w.kv = append(w.kv, KV{Key: key, Value: v})
	return nil
}

// checkValue reports whether v can be encoded: built by this package's
// constructors, arrays of arrays holding only arrays, nested at most
// maxNesting deep.
func checkValue(v Value, depth int) error {
	if !v.typ.valid() {
		return fmt.Errorf("invalid value type %d", v.typ)
	}
	if v.typ != ValueArray {
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested more than %d deep", maxNesting)
	}
	if v.arr == nil || elemType(v.arr) != v.elem {
		return errors.New("malformed array value")
	}
	if vs, ok := v.arr.([]Value); ok {
		for i, e := range vs {
			if e.typ != ValueArray {
				return fmt.Errorf("element %d of an array of arrays is a %s", i, e.typ)
			}
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	return nil
}

// SetAlignment sets the data alignment, a power of two, by setting
// general.alignment.
func (w *Writer) SetAlignment(n int) error {
	if n <= 0 || n&(n-1) != 0 || n > math.MaxUint32 {
		return fmt.Errorf("gguf: alignment %d is not a power of two that fits a uint32", n)
	}
	return w.SetKV(KeyAlignment, Uint32(uint32(n)))
}

// AddTensor adds a tensor with its data, which must be exactly the size its
// type and dims call for. Writer keeps data (not a copy) until it is written.
func (w *Writer) AddTensor(name string, typ Type, dims []int64, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return w.addTensor(name, typ, dims, data)
}

// AddTensorInfo adds a tensor whose data will be given to WriteTensorData
// after WriteHeader.
func (w *Writer) AddTensorInfo(name string, typ Type, dims []int64) error {
	return w.addTensor(name, typ, dims, nil)
}

func (w *Writer) addTensor(name string, typ Type, dims []int64, data []byte) error {
	if w.s != nil {
		return errHeaderWritten
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("gguf: tensor name %s is %d bytes, longer than %d", name, len(name), MaxNameLen)
	}
	if _, dup := w.tIndex[name]; dup {
		return fmt.Errorf("gguf: duplicate tensor %s", name)
	}
	size, err := tensorSize(typ, dims)
	if err != nil {
		return fmt.Errorf("gguf: tensor %s: %w", name, err)
	}
	if data != nil && int64(len(data)) != size {
		return fmt.Errorf("gguf: tensor %s: %d bytes of data, want %d for %s %v", name, len(data), size, typ, dims)
	}
	w.tIndex[name] = len(w.tensors)
	w.tensors = append(w.tensors, wtensor{
		info: TensorInfo{Name: name, Type: typ, Dims: append([]int64{}, dims...)},
		size: size,
		data: data,
	})
	return nil
}

// header encodes the header, tensor infos included, giving each tensor its
// offset in the data section. The padding that follows is not included.
func (w *Writer) header() ([]byte, error) {
	b := make([]byte, 0, w.headerSize())
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(w.tensors)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(w.kv)))
	for _, kv := range w.kv {
		b = appendString(b, kv.Key)
		b = binary.LittleEndian.AppendUint32(b, uint32(kv.Value.typ))
		b = appendValue(b, kv.Value)
	}
	align := uint64(w.alignment)
	var off uint64
	for i := range w.tensors {
		t := &w.tensors[i]
		t.info.Offset = off
		off += (uint64(t.size) + align - 1) / align * align
		if off > math.MaxInt64 {
			return nil, fmt.Errorf("gguf: tensor %s: data section exceeds 2^63 bytes", t.info.Name)
		}
		b = appendString(b, t.info.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.info.Dims)))
		for _, d := range t.info.Dims {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t.info.Type))
		b = binary.LittleEndian.AppendUint64(b, t.info.Offset)
	}
	return b, nil
}

// headerSize returns the size of the encoded header, padding included.
func (w *Writer) headerSize() int {
	n := 4 + 4 + 8 + 8
	for _, kv := range w.kv {
		n += 8 + len(kv.Key) + 4 + valueSize(kv.Value)
	}
	for _, t := range w.tensors {
		n += 8 + len(t.info.Name) + 4 + 8*len(t.info.Dims) + 4 + 8
	}
	return n
}

// valueSize returns the encoded size of v, without its type tag.
func valueSize(v Value) int {
	switch v.typ {
	case ValueString:
		return 8 + len(v.str)
	case ValueArray:
		n := 4 + 8
		switch s := v.arr.(type) {
		case []string:
			for _, x := range s {
				n += 8 + len(x)
			}
		case []Value:
			for _, x := range s {
				n += valueSize(x)
			}
		default:
			n += arrayLen(v.arr) * v.elem.size()
		}
		return n
	}
	return v.typ.size()
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue appends the encoding of v, without its type tag.
func appendValue(b []byte, v Value) []byte {
	le := binary.LittleEndian
	switch v.typ {
	case ValueString:
		return appendString(b, v.str)
	case ValueArray:
		b = le.AppendUint32(b, uint32(v.elem))
		b = le.AppendUint64(b, uint64(arrayLen(v.arr)))
		return appendElems(b, v.arr)
	}
	switch v.typ.size() {
	case 1:
		return append(b, byte(v.bits))
	case 2:
		return le.AppendUint16(b, uint16(v.bits))
	case 4:
		return le.AppendUint32(b, uint32(v.bits))
	}
	return le.AppendUint64(b, v.bits)
}

// appendElems appends the elements of an array.
func appendElems(b []byte, a any) []byte {
	le := binary.LittleEndian
	switch s := a.(type) {
	case []uint8:
		return append(b, s...)
	case []int8:
		for _, x := range s {
			b = append(b, byte(x))
		}
	case []uint16:
		for _, x := range s {
			b = le.AppendUint16(b, x)
		}
	case []int16:
		for _, x := range s {
			b = le.AppendUint16(b, uint16(x))
		}
	case []uint32:
		for _, x := range s {
			b = le.AppendUint32(b, x)
		}
	case []int32:
		for _, x := range s {
			b = le.AppendUint32(b, uint32(x))
		}
	case []float32:
		for _, x := range s {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	case []bool:
		for _, x := range s {
			if x {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case []string:
		for _, x := range s {
			b = appendString(b, x)
		}
	case []uint64:
		for _, x := range s {
			b = le.AppendUint64(b, x)
		}
	case []int64:
		for _, x := range s {
			b = le.AppendUint64(b, uint64(x))
		}
	case []float64:
		for _, x := range s {
			b = le.AppendUint64(b, math.Float64bits(x))
		}
	case []Value:
		for _, x := range s {
			b = appendValue(b, x)
		}
	}
	return b
}

// WriteTo writes the whole file to out. Every tensor must have its data
// (added with AddTensor). WriteTo can be called more than once.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.s != nil {
		return 0, errHeaderWritten
	}
	for _, t := range w.tensors {
		if t.data == nil {
			return 0, fmt.Errorf("gguf: tensor %s has no data (added by AddTensorInfo; use WriteHeader and WriteTensorData)", t.info.Name)
		}
	}
	s, err := w.begin(out)
	if err != nil {
		return s.n, err
	}
	for _, t := range w.tensors {
		if err := s.tensorData(t.info.Name, t.data); err != nil {
			return s.n, err
		}
	}
	return s.n, s.finish()
}

// WriteHeader writes the header and tensor infos to out; the data of each
// tensor must then follow through WriteTensorData, in order, and Finish.
// No metadata or tensors can be added afterwards.
func (w *Writer) WriteHeader(out io.Writer) error {
	if w.s != nil {
		return errHeaderWritten
	}
	s, err := w.begin(out)
	w.s = s
	return err
}

// WriteTensorData writes the data of the named tensor, which must be the
// next one in the order tensors were added, and its padding.
func (w *Writer) WriteTensorData(name string, data []byte) error {
	if w.s == nil {
		return errors.New("gguf: WriteTensorData before WriteHeader")
	}
	return w.s.tensorData(name, data)
}

// Finish checks that the data of every tensor has been written. It does not
// close the underlying writer.
func (w *Writer) Finish() error {
	if w.s == nil {
		return errors.New("gguf: Finish before WriteHeader")
	}
	return w.s.finish()
}

// Written returns the number of bytes written so far by WriteHeader and
// WriteTensorData.
func (w *Writer) Written() int64 {
	if w.s == nil {
		return 0
	}
	return w.s.n
}

func (w *Writer) begin(out io.Writer) (*stream, error) {
	s := &stream{w: w, out: out}
	h, err := w.header()
	if err != nil {
		s.err = err
		return s, err
	}
	if err := s.write(h); err != nil {
		return s, err
	}
	if len(w.tensors) > 0 {
		return s, s.pad()
	}
	return s, nil
}

// pad writes zeros up to the next multiple of the alignment.
func (s *stream) pad() error {
	align := int64(s.w.alignment)
	for pad := (align - s.n%align) % align; pad > 0; {
		n := min(pad, int64(len(zeros)))
		if err := s.write(zeros[:n]); err != nil {
			return err
		}
		pad -= n
	}
	return nil
}

func (s *stream) write(p []byte) error {
	if s.err != nil {
		return s.err
	}
	n, err := s.out.Write(p)
	s.n += int64(n)
	if err != nil {
		s.err = fmt.Errorf("gguf: writing at offset %d: %w", s.n, err)
	}
	return s.err
}

var zeros [4096]byte

func (s *stream) tensorData(name string, data []byte) error {
	if s.err != nil {
		return s.err
	}
	ts := s.w.tensors
	if s.next >= len(ts) {
		return fmt.Errorf("gguf: data for tensor %s after all %d tensors were written", name, len(ts))
	}
	t := ts[s.next]
	if name != t.info.Name {
		return fmt.Errorf("gguf: data for tensor %s, but tensor %d (%s) comes next", name, s.next, t.info.Name)
	}
	if int64(len(data)) != t.size {
		return fmt.Errorf("gguf: tensor %s: %d bytes of data, want %d", name, len(data), t.size)
	}
	if err := s.write(data); err != nil {
		return err
	}
	if err := s.pad(); err != nil {
		return err
	}
	s.next++
	return nil
}

func (s *stream) finish() error {
	if s.err != nil {
		return s.err
	}
	if s.next != len(s.w.tensors) {
		return fmt.Errorf("gguf: only %d of %d tensors' data written", s.next, len(s.w.tensors))
	}
	return nil
}
