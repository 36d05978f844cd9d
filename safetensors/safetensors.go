// Package safetensors reads and writes the safetensors format used by
// Hugging Face model checkpoints.
//
// A safetensors file is an 8-byte little-endian header length N, then N
// bytes of JSON describing each tensor's dtype, shape and byte range, then
// the tensor data. Readers memory-map the file; a Tensor's Data is a slice
// of that mapping, so loading a model copies nothing until the engine reads
// the weights.
//
// Every header is validated before use: the header length is bounded and
// inside the file, the JSON is well formed, every tensor's byte range lies
// inside the data region and matches its shape and dtype, and no two
// tensors overlap. A malformed file gives a *FormatError naming the file
// and the tensor or offset that is wrong.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"unicode/utf8"

	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/internal/mmap"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes, the same
// bound the reference implementation applies.
const MaxHeaderSize = 100_000_000

// metadataKey is the header key holding the free-form string metadata.
const metadataKey = "__metadata__"

// DType is a tensor element type, spelled as in the file header.
type DType string

// The element types that real checkpoints use.
const (
	Bool   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E4M3 DType = "F8_E4M3" // OCP E4M3 "FN": no infinities, max 448
	F8E5M2 DType = "F8_E5M2"
	F8E8M0 DType = "F8_E8M0" // unsigned power-of-two scale
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	I64    DType = "I64"
	U64    DType = "U64"
	F64    DType = "F64"
)

// DTypes lists every supported element type.
var DTypes = []DType{Bool, U8, I8, F8E4M3, F8E5M2, F8E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64}

// Size returns the size of one element in bytes, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case Bool, U8, I8, F8E4M3, F8E5M2, F8E8M0:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case I64, U64, F64:
		return 8
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case F8E4M3, F8E5M2, F8E8M0, F16, BF16, F32, F64:
		return true
	}
	return false
}

// Tensor is one named tensor. In a tensor read from a file, Data is a slice
// of the file's memory mapping: it must not be modified, and must not be
// used after the file is closed.
type Tensor struct {
	Name  string
	DType DType
	Shape []int // empty for a scalar
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar), or -1 if
// a dimension is negative or the product overflows an int.
func (t Tensor) NumElements() int {
	n, ok := numElements(t.Shape)
	if !ok {
		return -1
	}
	return n
}

func numElements(shape []int) (int, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		n = lo
	}
	return int(n), true
}

// check reports whether the tensor's dtype is known and its data length
// matches its shape.
func (t Tensor) check() error {
	size := t.DType.Size()
	if size == 0 {
		return fmt.Errorf("tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	n, ok := numElements(t.Shape)
	if !ok {
		return fmt.Errorf("tensor %q: invalid shape %v", t.Name, t.Shape)
	}
	hi, want := bits.Mul64(uint64(n), uint64(size))
	if hi != 0 || want != uint64(len(t.Data)) {
		return fmt.Errorf("tensor %q: %d bytes of data, but shape %v of %s needs %d×%d", t.Name, len(t.Data), t.Shape, t.DType, n, size)
	}
	return nil
}

// Float32s returns the tensor's elements converted to float32, whatever the
// stored type: floats exactly (F64 rounded to nearest), integers and BOOL
// by value. It allocates a new slice.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	n := len(t.Data) / t.DType.Size()
	out := make([]float32, n)
	d := t.Data
	le := binary.LittleEndian
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(d[4*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(d[8*i:])))
		}
	case BF16:
		half.BF16sToF32s(out, d)
	case F16:
		half.F16sToF32s(out, d)
	case F8E4M3:
		for i := range out {
			out[i] = half.F8E4M3ToF32(d[i])
		}
	case F8E5M2:
		for i := range out {
			out[i] = half.F8E5M2ToF32(d[i])
		}
	case F8E8M0:
		for i := range out {
			out[i] = half.F8E8M0ToF32(d[i])
		}
	case U64: // not through Int64s, which rejects values above MaxInt64
		for i := range out {
			out[i] = float32(le.Uint64(d[8*i:]))
		}
	default:
		ints, err := t.Int64s()
		if err != nil {
			return nil, err
		}
		for i, v := range ints {
			out[i] = float32(v)
		}
	}
	return out, nil
}

// Int64s returns the elements of an integer or BOOL tensor as int64. U64
// values above math.MaxInt64 are an error. It allocates a new slice.
func (t Tensor) Int64s() ([]int64, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	n := len(t.Data) / t.DType.Size()
	out := make([]int64, n)
	d := t.Data
	le := binary.LittleEndian
	switch t.DType {
	case Bool, U8:
		for i := range out {
			out[i] = int64(d[i])
		}
	case I8:
		for i := range out {
			out[i] = int64(int8(d[i]))
		}
	case I16:
		for i := range out {
			out[i] = int64(int16(le.Uint16(d[2*i:])))
		}
	case U16:
		for i := range out {
			out[i] = int64(le.Uint16(d[2*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(le.Uint32(d[4*i:])))
		}
	case U32:
		for i := range out {
			out[i] = int64(le.Uint32(d[4*i:]))
		}
	case I64:
		for i := range out {
			out[i] = int64(le.Uint64(d[8*i:]))
		}
	case U64:
		for i := range out {
			v := le.Uint64(d[8*i:])
			if v > math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q: element %d is %d, beyond int64", t.Name, i, v)
			}
			out[i] = int64(v)
		}
	default:
		return nil, fmt.Errorf("tensor %q: dtype %s is not an integer type", t.Name, t.DType)
	}
	return out, nil
}

// A FormatError reports a malformed safetensors file or shard index.
type FormatError struct {
	File   string // the file's path or name
	Tensor string // the tensor concerned, if any
	Msg    string
	Err    error // an underlying error, if any
}

func (e *FormatError) Error() string {
	s := "safetensors: " + e.File + ": "
	if e.Tensor != "" {
		s += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

// File is one parsed safetensors file.
type File struct {
	name     string
	mm       *mmap.File // nil when parsed from memory
	tensors  []Tensor   // in data-offset order
	index    map[string]int
	metadata map[string]string
}

// OpenOptions configure OpenWith and OpenDirWith.
type OpenOptions struct {
	// NoMmap reads the files into memory (transparent huge pages where the
	// kernel allows) instead of mapping them: slower to start, faster to
	// stream on the CPU.
	NoMmap bool
	// Read, when set, is told of the bytes NoMmap's reading adds as it
	// goes (see mmap.Options).
	Read func(n int64)
}

// Open memory-maps and parses the safetensors file at path. Close releases
// the mapping.
func Open(path string) (*File, error) { return OpenWith(path, OpenOptions{}) }

// OpenWith is Open with options.
func OpenWith(path string, opts OpenOptions) (*File, error) {
	mm, err := mmap.OpenWith(path, mmap.Options{NoMmap: opts.NoMmap, Read: opts.Read})
	if err != nil {
		return nil, fmt.Errorf("safetensors: open: %w", err)
	}
	f, err := Parse(path, mm.Data)
	if err != nil {
		mm.Close()
		return nil, err
	}
	f.mm = mm
	return f, nil
}

// entry is one tensor's description in the JSON header.
type entry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// Parse parses a complete safetensors file held in data; name is used in
// error messages and by Name. The returned tensors' Data are slices of
// data.
func Parse(name string, data []byte) (*File, error) {
	fail := func(tensor, format string, args ...any) error {
		return &FormatError{File: name, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < 8 {
		return nil, fail("", "file is %d bytes, shorter than the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, fail("", "header length %d at offset 0 exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fail("", "header length %d at offset 0 runs past the end of the %d-byte file", n, len(data))
	}
	if n < 2 {
		return nil, fail("", "header length %d at offset 0 is too short for a JSON object", n)
	}
	header := data[8 : 8+n]
	region := data[8+n:]
	if header[0] != '{' {
		return nil, fail("", "header at offset 8 does not start with '{' (byte %#02x)", header[0])
	}
	if !utf8.Valid(header) {
		return nil, fail("", "header is not valid UTF-8")
	}

	f := &File{name: name, index: make(map[string]int)}
	dec := json.NewDecoder(bytes.NewReader(header))
	if _, err := dec.Token(); err != nil { // the opening '{'
		return nil, &FormatError{File: name, Msg: "header JSON", Err: err}
	}
	seen := make(map[string]bool)
	var placed []placedTensor
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, &FormatError{File: name, Msg: fmt.Sprintf("header JSON near offset %d", 8+dec.InputOffset()), Err: err}
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fail("", "header JSON near offset %d: object key expected", 8+dec.InputOffset())
		}
		if seen[key] {
			return nil, fail("", "duplicate header key %q", key)
		}
		seen[key] = true
		if key == metadataKey {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					return nil, fail("", "header JSON ends early, at offset %d", 8+n)
				}
				return nil, &FormatError{File: name, Msg: metadataKey + " must map strings to strings", Err: err}
			}
			f.metadata = md
			continue
		}
		var e entry
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, &FormatError{File: name, Tensor: key, Msg: fmt.Sprintf("header JSON ends early, at offset %d", 8+n)}
			}
			return nil, &FormatError{File: name, Tensor: key, Msg: "bad header entry", Err: err}
		}
		t, begin, err := makeTensor(key, e, region)
		if err != nil {
			return nil, &FormatError{File: name, Tensor: key, Msg: err.Error()}
		}
		placed = append(placed, placedTensor{t, begin})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, &FormatError{File: name, Msg: "header JSON", Err: err}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail("", "header JSON: unexpected data after the object near offset %d", 8+dec.InputOffset())
	}

	// Order by position in the data region (stable, so header order breaks
	// ties between empty tensors) and reject overlaps.
	slices.SortStableFunc(placed, func(a, b placedTensor) int { return a.begin - b.begin })
	prev, prevEnd := "", 0
	for _, p := range placed {
		if len(p.t.Data) == 0 {
			continue
		}
		if prev != "" && p.begin < prevEnd {
			return nil, fail(p.t.Name, "data_offsets [%d, %d] overlap tensor %q, which ends at %d", p.begin, p.begin+len(p.t.Data), prev, prevEnd)
		}
		prev, prevEnd = p.t.Name, p.begin+len(p.t.Data)
	}
	f.tensors = make([]Tensor, len(placed))
	for i, p := range placed {
		f.tensors[i] = p.t
		f.index[p.t.Name] = i
	}
	return f, nil
}

// placedTensor is a tensor with the offset of its data in the data region.
type placedTensor struct {
	t     Tensor
	begin int
}

// makeTensor validates one header entry against the data region.
func makeTensor(name string, e entry, region []byte) (Tensor, int, error) {
	if name == "" {
		return Tensor{}, 0, errors.New("empty tensor name")
	}
	if e.DType == nil {
		return Tensor{}, 0, errors.New(`missing "dtype"`)
	}
	if e.Shape == nil {
		return Tensor{}, 0, errors.New(`missing "shape"`)
	}
	if e.DataOffsets == nil {
		return Tensor{}, 0, errors.New(`missing "data_offsets"`)
	}
	dt := DType(*e.DType)
	size := dt.Size()
	if size == 0 {
		return Tensor{}, 0, fmt.Errorf("unknown dtype %q", *e.DType)
	}
	shape := make([]int, len(*e.Shape))
	elems := uint64(1)
	for i, d := range *e.Shape {
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt || d > math.MaxInt {
			return Tensor{}, 0, fmt.Errorf("shape %v: element count overflows", *e.Shape)
		}
		elems = lo
		shape[i] = int(d)
	}
	offs := *e.DataOffsets
	if len(offs) != 2 {
		return Tensor{}, 0, fmt.Errorf("data_offsets has %d values, want 2", len(offs))
	}
	begin, end := offs[0], offs[1]
	if begin > end {
		return Tensor{}, 0, fmt.Errorf("data_offsets [%d, %d]: begin after end", begin, end)
	}
	if end > uint64(len(region)) {
		return Tensor{}, 0, fmt.Errorf("data_offsets [%d, %d]: end beyond the %d-byte data region", begin, end, len(region))
	}
	hi, want := bits.Mul64(elems, uint64(size))
	if hi != 0 || want != end-begin {
		return Tensor{}, 0, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but shape %v of %s needs %d", begin, end, end-begin, shape, dt, elems*uint64(size))
	}
	// Cap the slice so appending to it can never reach a neighbour.
	return Tensor{Name: name, DType: dt, Shape: shape, Data: region[begin:end:end]}, int(begin), nil
}

// Name returns the path or name the file was opened with.
func (f *File) Name() string { return f.name }

// Names returns the tensor names in the order their data lies in the file.
func (f *File) Names() []string {
	names := make([]string, len(f.tensors))
	for i, t := range f.tensors {
		names[i] = t.Name
	}
	return names
}

// Tensors returns all tensors in the order their data lies in the file.
// The slice is shared; do not modify it.
func (f *File) Tensors() []Tensor { return f.tensors }

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (Tensor, bool) {
	i, ok := f.index[name]
	if !ok {
		return Tensor{}, false
	}
	return f.tensors[i], true
}

// Metadata returns the header's __metadata__ map (nil when absent). The map
// is shared; do not modify it.
func (f *File) Metadata() map[string]string { return f.metadata }

// Close releases the file's memory mapping, if any. Tensor data must not be
// used afterwards.
func (f *File) Close() error {
	if f == nil || f.mm == nil {
		return nil
	}
	err := f.mm.Close()
	f.mm = nil
	return err
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
