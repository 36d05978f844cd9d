// Package gguf reads and writes GGUF files, the model file format of
// llama.cpp and ggml.
//
// A GGUF file holds a header (magic "GGUF", a version, counts), ordered
// key-value metadata, tensor infos (name, shape, ggml type, offset) and then,
// from an aligned data section, the tensors' raw bytes. Versions 2 and 3 are
// read; files are written as version 3. All numbers are little-endian.
//
// Open memory-maps a file (or every file of a split model) and exposes
// tensor data as slices of the mapping, without copying. Metadata is copied
// out of the mapping, so values stay valid after Close; tensor slices don't.
//
// Writer builds a file from metadata and tensors, either in one WriteTo call
// or streamed, writing the header first and then one tensor at a time.
package gguf

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/lem-engine/lem/internal/mmap"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// Version is the GGUF version Writer produces.
const Version = 3

// DefaultAlignment is the data alignment used when a file has no
// general.alignment key.
const DefaultAlignment = 32

// MaxDims is the most dimensions a tensor may have.
const MaxDims = 4

// Keys this package interprets.
const (
	KeyAlignment    = "general.alignment"
	KeyArchitecture = "general.architecture"
	KeySplitNo      = "split.no"
	KeySplitCount   = "split.count"
	KeySplitTensors = "split.tensors.count"
)

// KV is one metadata key-value pair.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor.
type TensorInfo struct {
	Name string
	Type Type
	// Dims holds the extent of each dimension, innermost (contiguous) first,
	// as ggml orders them: a weight matrix of n rows of k columns is [k, n].
	Dims []int64
	// Offset is the byte offset of the tensor's data from the start of its
	// file's data section.
	Offset uint64
	// Split is the index of the file of a split model that holds the data; 0
	// for a single file.
	Split int
}

// Elements returns the number of elements of the tensor, the product of its
// dimensions (1 for a tensor with no dimensions).
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size returns the size of the tensor's data in bytes, or -1 when its type is
// unknown, its rows are not whole blocks or the size overflows. Tensors of a
// parsed File always have a valid size.
func (t TensorInfo) Size() int64 {
	n, err := tensorSize(t.Type, t.Dims)
	if err != nil {
		return -1
	}
	return n
}

// tensorSize returns the size in bytes of a tensor of the given type and
// shape, checking the type, the shape and every product for overflow.
func tensorSize(typ Type, dims []int64) (int64, error) {
	if err := typ.check(); err != nil {
		return 0, err
	}
	if len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, more than %d", len(dims), MaxDims)
	}
	for i, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
	}
	row := int64(1)
	if len(dims) > 0 {
		row = dims[0]
	}
	ti := typ.info()
	if row%int64(ti.block) != 0 {
		return 0, fmt.Errorf("row of %d elements is not a whole number of %d-element %s blocks", row, ti.block, typ)
	}
	size := uint64(row / int64(ti.block))
	hi, size := bits.Mul64(size, uint64(ti.bytes))
	for i := 1; i < len(dims) && hi == 0; i++ {
		hi, size = bits.Mul64(size, uint64(dims[i]))
	}
	// The element count must fit too, since callers multiply it out.
	elems := uint64(1)
	ehi := uint64(0)
	for i := 0; i < len(dims) && ehi == 0; i++ {
		ehi, elems = bits.Mul64(elems, uint64(dims[i]))
	}
	if hi != 0 || size > math.MaxInt64 || ehi != 0 || elems > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v of %s overflows 64-bit sizes", dims, typ)
	}
	return int64(size), nil
}

// part is one file of a model: its bytes and where its data section starts.
type part struct {
	name       string
	data       []byte
	dataOffset int64
	m          *mmap.File
}

// File is a parsed GGUF file, or the union of the files of a split model.
type File struct {
	// Name is the file name given to Open or Parse (of the first file of a
	// split model).
	Name    string
	Version uint32
	// Alignment is the data alignment in bytes, from general.alignment or
	// DefaultAlignment.
	Alignment int
	// KV holds the metadata in file order (of the first file of a split
	// model).
	KV []KV
	// Tensors holds the tensor infos in file order (of all files, in order,
	// for a split model).
	Tensors []TensorInfo
	// DataOffset is the absolute offset of the data section (in the first
	// file of a split model).
	DataOffset int64

	parts   []part
	kvIndex map[string]int
	tIndex  map[string]int
}

// Parse parses the GGUF file held in data; name is used in error messages.
// Tensor data returned by the File aliases data; metadata does not.
func Parse(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", name, err)
	}
	return f, nil
}

func parse(name string, data []byte) (*File, error) {
	d := &decoder{data: data}
	if len(data) < 4 {
		return nil, fmt.Errorf("reading magic: %w", ErrTruncated)
	}
	if string(data[:4]) != Magic {
		return nil, fmt.Errorf("not a GGUF file: magic is %q, want %q", data[:4], Magic)
	}
	d.off = 4
	version, err := d.u32()
	if err != nil {
		return nil, fmt.Errorf("reading version: %w", err)
	}
	switch {
	case version == 1:
		return nil, errors.New("GGUF version 1 is not supported (only versions 2 and 3); convert the model again")
	case version != 0 && version&0xffff == 0:
		return nil, fmt.Errorf("version %#x looks byte-swapped: big-endian GGUF files are not supported", version)
	case version != 2 && version != 3:
		return nil, fmt.Errorf("unsupported GGUF version %d (only versions 2 and 3)", version)
	}
	// Each tensor info takes at least a name length, n_dims, a type and an
	// offset; each key-value pair a key length, a type and one byte.
	nTensors, tHint, err := d.count(8 + 4 + 4 + 8)
	if err != nil {
		return nil, fmt.Errorf("reading tensor count: %w", err)
	}
	nKV, kvHint, err := d.count(8 + 4 + 1)
	if err != nil {
		return nil, fmt.Errorf("reading key-value count: %w", err)
	}

	f := &File{
		Name:      name,
		Version:   version,
		Alignment: DefaultAlignment,
		KV:        make([]KV, 0, kvHint),
		kvIndex:   make(map[string]int, kvHint),
	}
	for i := uint64(0); i < nKV; i++ {
		if err := f.readKV(d, i); err != nil {
			return nil, overclaim(err, nKV, kvHint, "the key-value count")
		}
	}
	if i, ok := f.kvIndex[KeyAlignment]; ok {
		v := f.KV[i].Value
		if v.Type() != ValueUint32 {
			return nil, fmt.Errorf("key %s must be a uint32, not %s", KeyAlignment, v.Type())
		}
		a := v.bits
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("key %s is %d, not a power of two", KeyAlignment, a)
		}
		f.Alignment = int(a)
	}

	f.Tensors = make([]TensorInfo, 0, tHint)
	f.tIndex = make(map[string]int, tHint)
	for i := uint64(0); i < nTensors; i++ {
		if err := f.readTensorInfo(d, i); err != nil {
			return nil, overclaim(err, nTensors, tHint, "the tensor count")
		}
	}

	align := int64(f.Alignment)
	f.DataOffset = (int64(d.off) + align - 1) / align * align
	f.parts = []part{{name: name, data: data, dataOffset: f.DataOffset}}
	if err := f.checkTensors(0); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) readKV(d *decoder, i uint64) error {
	start := d.off
	key, err := d.str()
	if err != nil {
		return fmt.Errorf("reading key %d: %w", i, err)
	}
	if key == "" {
		return fmt.Errorf("key %d at offset %d is empty", i, start)
	}
	if _, dup := f.kvIndex[key]; dup {
		return fmt.Errorf("key %d (%s) at offset %d: duplicate key", i, key, start)
	}
	t, err := d.valueType()
	if err != nil {
		return fmt.Errorf("reading key %d (%s) type: %w", i, key, err)
	}
	v, err := d.value(t, 0)
	if err != nil {
		return fmt.Errorf("reading key %d (%s) of type %s: %w", i, key, t, err)
	}
	f.kvIndex[key] = len(f.KV)
	f.KV = append(f.KV, KV{Key: key, Value: v})
	return nil
}

func (f *File) readTensorInfo(d *decoder, i uint64) error {
	start := d.off
	name, err := d.str()
	if err != nil {
		return fmt.Errorf("reading tensor %d name: %w", i, err)
	}
	if _, dup := f.tIndex[name]; dup {
		return fmt.Errorf("tensor %d (%s) at offset %d: duplicate tensor name", i, name, start)
	}
	where := func(what string) string {
		return fmt.Sprintf("tensor %d (%s): %s at offset %d", i, name, what, d.off)
	}
	at := d.off
	nDims, err := d.u32()
	if err != nil {
		return fmt.Errorf("reading %s: %w", where("dimension count"), err)
	}
	if nDims > MaxDims {
		return fmt.Errorf("tensor %d (%s): %d dimensions at offset %d, more than %d", i, name, nDims, at, MaxDims)
	}
	dims := make([]int64, nDims)
	for j := range dims {
		at := d.off
		x, err := d.u64()
		if err != nil {
			return fmt.Errorf("reading %s: %w", where(fmt.Sprintf("dimension %d", j)), err)
		}
		if x > math.MaxInt64 {
			return fmt.Errorf("tensor %d (%s): dimension %d at offset %d is too large (%d)", i, name, j, at, x)
		}
		dims[j] = int64(x)
	}
	at = d.off
	typ, err := d.u32()
	if err != nil {
		return fmt.Errorf("reading %s: %w", where("type"), err)
	}
	if _, err := tensorSize(Type(typ), dims); err != nil {
		return fmt.Errorf("tensor %d (%s) at offset %d: %w", i, name, at, err)
	}
	off, err := d.u64()
	if err != nil {
		return fmt.Errorf("reading %s: %w", where("data offset"), err)
	}
	f.tIndex[name] = len(f.Tensors)
	f.Tensors = append(f.Tensors, TensorInfo{Name: name, Type: Type(typ), Dims: dims, Offset: off})
	return nil
}

// checkTensors checks that every tensor of part p is aligned, lies inside
// the file and overlaps no other.
func (f *File) checkTensors(p int) error {
	pt := f.parts[p]
	type span struct {
		i          int
		start, end int64
	}
	var spans []span
	fileSize := int64(len(pt.data))
	for i, t := range f.Tensors {
		if t.Split != p {
			continue
		}
		if t.Offset%uint64(f.Alignment) != 0 {
			return fmt.Errorf("tensor %d (%s): data offset %d is not a multiple of the alignment %d", i, t.Name, t.Offset, f.Alignment)
		}
		size := t.Size() // valid: checked while reading the info
		if t.Offset > uint64(fileSize) || int64(t.Offset) > fileSize-pt.dataOffset-size {
			return fmt.Errorf("tensor %d (%s): data at offset %d+%d, %d bytes, extends past the end of the file (%d bytes): %w",
				i, t.Name, pt.dataOffset, t.Offset, size, fileSize, ErrTruncated)
		}
		if size > 0 {
			start := pt.dataOffset + int64(t.Offset)
			spans = append(spans, span{i, start, start + size})
		}
	}
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.i, b.i))
	})
	for k := 1; k < len(spans); k++ {
		a, b := spans[k-1], spans[k]
		if b.start < a.end {
			return fmt.Errorf("tensor %d (%s) data [%d, %d) overlaps tensor %d (%s) data [%d, %d)",
				b.i, f.Tensors[b.i].Name, b.start, b.end, a.i, f.Tensors[a.i].Name, a.start, a.end)
		}
	}
	return nil
}

// Open memory-maps and parses the named GGUF file. When the file is the
// part of a split model (its split.count is above 1 and its name ends in
// -NNNNN-of-NNNNN.gguf), every part is opened and the File presents their
// tensors as one set. Close the File to unmap it.
func Open(name string) (*File, error) { return OpenWith(name, OpenOptions{}) }

// OpenOptions configure OpenWith.
type OpenOptions struct {
	// NoMmap reads the file, or every file of a split model, into memory
	// (transparent huge pages where the kernel allows) instead of mapping
	// it: slower to start, faster to stream on the CPU.
	NoMmap bool
	// Read, when set, is told of the bytes NoMmap's reading adds as it
	// goes (see mmap.Options).
	Read func(n int64)
}

// OpenWith is Open with options.
func OpenWith(name string, opts OpenOptions) (*File, error) {
	f, err := openOne(name, opts)
	if err != nil {
		return nil, err
	}
	if c, ok := f.Uint(KeySplitCount); ok && c > 1 {
		return openSplit(f, c, opts)
	}
	return f, nil
}

func openOne(name string, opts OpenOptions) (*File, error) {
	m, err := mmap.OpenWith(name, mmap.Options{NoMmap: opts.NoMmap, Read: opts.Read})
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(name, m.Data)
	if err != nil {
		m.Close()
		return nil, err
	}
	f.parts[0].m = m
	return f, nil
}

// Close unmaps the file or files. Tensor data slices must not be used after
// Close; metadata stays valid.
func (f *File) Close() error {
	var errs []error
	for i := range f.parts {
		if m := f.parts[i].m; m != nil {
			errs = append(errs, m.Close())
			f.parts[i].m = nil
		}
		f.parts[i].data = nil
	}
	return errors.Join(errs...)
}

// Tensor returns the info and data of the named tensor. The data is a slice
// of the file's bytes (of the memory mapping, for Open), not a copy.
func (f *File) Tensor(name string) (TensorInfo, []byte, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return TensorInfo{}, nil, false
	}
	t := f.Tensors[i]
	return t, f.TensorData(t), true
}

// TensorData returns the data of a tensor of f, as a slice of the file's
// bytes. It returns nil once f is closed, and for a TensorInfo whose data
// does not lie inside the file.
func (f *File) TensorData(t TensorInfo) []byte {
	if t.Split < 0 || t.Split >= len(f.parts) {
		return nil
	}
	pt := f.parts[t.Split]
	size := t.Size()
	avail := int64(len(pt.data)) - pt.dataOffset
	if pt.data == nil || size < 0 || t.Offset > uint64(max(avail, 0)) || int64(t.Offset) > avail-size {
		return nil
	}
	start := pt.dataOffset + int64(t.Offset)
	end := start + size
	return pt.data[start:end:end]
}

// Value returns the value of key.
func (f *File) Value(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// String returns the value of key when it is a string.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Value(key)
	return v.Str()
}

// Uint returns the value of key when it is an integer of any type with a
// non-negative value.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.Value(key)
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// Int returns the value of key when it is an integer of any type that fits
// an int64.
func (f *File) Int(key string) (int64, bool) {
	v, ok := f.Value(key)
	if !ok {
		return 0, false
	}
	return v.Int()
}

// Float returns the value of key when it is a float or an integer.
func (f *File) Float(key string) (float64, bool) {
	v, ok := f.Value(key)
	if !ok {
		return 0, false
	}
	return v.Float()
}

// Bool returns the value of key when it is a bool.
func (f *File) Bool(key string) (bool, bool) {
	v, ok := f.Value(key)
	if !ok {
		return false, false
	}
	return v.Bool()
}

// Strings returns the value of key when it is an array of strings. The slice
// is shared and must not be modified.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Value(key)
	return ArrayOf[string](v)
}

// Float32s returns the value of key when it is an array of float32s. The
// slice is shared and must not be modified.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Value(key)
	return ArrayOf[float32](v)
}

// Int32s returns the value of key when it is an array of int32s. The slice is
// shared and must not be modified.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, _ := f.Value(key)
	return ArrayOf[int32](v)
}

// Architecture returns general.architecture, or "" when it is absent.
func (f *File) Architecture() string {
	s, _ := f.String(KeyArchitecture)
	return s
}

// ParamCount returns the total number of tensor elements.
func (f *File) ParamCount() int64 {
	var n int64
	for _, t := range f.Tensors {
		n += t.Elements()
	}
	return n
}

// DataSize returns the total size in bytes of the tensors' data.
func (f *File) DataSize() int64 {
	var n int64
	for _, t := range f.Tensors {
		n += t.Size()
	}
	return n
}
