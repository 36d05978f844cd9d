package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrTruncated is wrapped by errors about a file that ends before the data
// its header describes.
var ErrTruncated = errors.New("unexpected end of file")

// maxNesting bounds how deeply arrays of arrays may nest.
const maxNesting = 64

// decoder reads little-endian GGUF primitives from a byte slice.
type decoder struct {
	data []byte
	off  int
}

func (d *decoder) remaining() int { return len(d.data) - d.off }

// need returns an error unless n more bytes are available.
func (d *decoder) need(n int) error {
	if n < 0 || d.remaining() < n {
		return fmt.Errorf("at offset %d: %w", d.off, ErrTruncated)
	}
	return nil
}

func (d *decoder) u8() (uint8, error) {
	if err := d.need(1); err != nil {
		return 0, err
	}
	v := d.data[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16() (uint16, error) {
	if err := d.need(2); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(d.data[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32() (uint32, error) {
	if err := d.need(4); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(d.data[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) u64() (uint64, error) {
	if err := d.need(8); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(d.data[d.off:])
	d.off += 8
	return v, nil
}

// count reads a uint64 count of items that each take at least minSize
// bytes. Besides the count it returns a capacity hint bounded by what the
// remaining bytes can hold, so that no allocation is ever sized by a corrupt
// count: readers append up to the hint and fail where the data runs out.
func (d *decoder) count(minSize int) (n uint64, hint int, err error) {
	n, err = d.u64()
	if err != nil {
		return 0, 0, err
	}
	return n, int(min(n, uint64(d.remaining()/max(minSize, 1)))), nil
}

// overclaim annotates err, met while reading n items of which only hint can
// fit in the rest of the file, with the count that was claimed.
func overclaim(err error, n uint64, hint int, what string) error {
	if n > uint64(hint) {
		return fmt.Errorf("%w (%s claims %d, more than the rest of the file can hold)", err, what, n)
	}
	return err
}

// bytes reads a length-prefixed byte string without copying it.
func (d *decoder) bytes() ([]byte, error) {
	start := d.off
	n, err := d.u64()
	if err != nil {
		return nil, err
	}
	if n > uint64(d.remaining()) {
		return nil, fmt.Errorf("at offset %d: string length %d exceeds the remaining %d bytes: %w", start, n, d.remaining(), ErrTruncated)
	}
	b := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	return b, nil
}

func (d *decoder) str() (string, error) {
	b, err := d.bytes()
	return string(b), err
}

// valueType reads a value type tag.
func (d *decoder) valueType() (ValueType, error) {
	start := d.off
	t, err := d.u32()
	if err != nil {
		return 0, err
	}
	if !ValueType(t).valid() {
		return 0, fmt.Errorf("at offset %d: unknown value type %d", start, t)
	}
	return ValueType(t), nil
}

// value reads a value of type t.
func (d *decoder) value(t ValueType, depth int) (Value, error) {
	switch t {
	case ValueString:
		s, err := d.str()
		return String(s), err
	case ValueArray:
		return d.array(depth + 1)
	case ValueBool:
		start := d.off
		b, err := d.u8()
		if err != nil {
			return Value{}, err
		}
		if b > 1 {
			return Value{}, fmt.Errorf("at offset %d: bool value %d is neither 0 nor 1", start, b)
		}
		return Bool(b == 1), nil
	}
	// Fixed-size numbers: read the raw bits, then sign-extend signed types
	// so that Value.bits matches what the constructors store.
	var bits uint64
	var err error
	switch t.size() {
	case 1:
		var x uint8
		x, err = d.u8()
		bits = uint64(x)
		if t == ValueInt8 {
			bits = uint64(int8(x))
		}
	case 2:
		var x uint16
		x, err = d.u16()
		bits = uint64(x)
		if t == ValueInt16 {
			bits = uint64(int16(x))
		}
	case 4:
		var x uint32
		x, err = d.u32()
		bits = uint64(x)
		if t == ValueInt32 {
			bits = uint64(int32(x))
		}
	case 8:
		bits, err = d.u64()
	}
	return Value{typ: t, bits: bits}, err
}

// array reads an array's element type, count and elements.
func (d *decoder) array(depth int) (Value, error) {
	if depth > maxNesting {
		return Value{}, fmt.Errorf("at offset %d: arrays nested more than %d deep", d.off, maxNesting)
	}
	et, err := d.valueType()
	if err != nil {
		return Value{}, err
	}
	at := d.off
	n, hint, err := d.count(et.minSize())
	if err != nil {
		return Value{}, err
	}
	v := Value{typ: ValueArray, elem: et}
	switch et {
	case ValueString:
		v.arr, err = d.strings(n, hint)
		return v, overclaim(err, n, hint, "the array")
	case ValueArray:
		vs := make([]Value, 0, hint)
		for i := uint64(0); i < n; i++ {
			e, err := d.array(depth + 1)
			if err != nil {
				return Value{}, overclaim(fmt.Errorf("element %d: %w", i, err), n, hint, "the array")
			}
			vs = append(vs, e)
		}
		v.arr = vs
		return v, nil
	}
	// Fixed-size elements: all must be present.
	size := et.size()
	if n > uint64(d.remaining()/size) {
		return Value{}, fmt.Errorf("at offset %d: array of %d %s needs more than the remaining %d bytes: %w", at, n, et, d.remaining(), ErrTruncated)
	}
	p := d.data[d.off : d.off+int(n)*size]
	if et == ValueBool {
		bs := make([]bool, len(p))
		for i, b := range p {
			if b > 1 {
				return Value{}, fmt.Errorf("element %d at offset %d: bool value %d is neither 0 nor 1", i, d.off+i, b)
			}
			bs[i] = b == 1
		}
		v.arr = bs
	} else {
		v.arr = decodeNumbers(et, int(n), p)
	}
	d.off += len(p)
	return v, nil
}

// decodeNumbers decodes n little-endian numbers of type t from p.
func decodeNumbers(t ValueType, n int, p []byte) any {
	le := binary.LittleEndian
	switch t {
	case ValueUint8:
		return append([]uint8{}, p...)
	case ValueInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(p[i])
		}
		return s
	case ValueUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(p[2*i:])
		}
		return s
	case ValueInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(p[2*i:]))
		}
		return s
	case ValueUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(p[4*i:])
		}
		return s
	case ValueInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(p[4*i:]))
		}
		return s
	case ValueFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(p[4*i:]))
		}
		return s
	case ValueUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(p[8*i:])
		}
		return s
	case ValueInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(p[8*i:]))
		}
		return s
	case ValueFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(p[8*i:]))
		}
		return s
	}
	panic("gguf: unreachable number type")
}

// strings reads n length-prefixed strings, of which at most hint can fit.
// Their bytes are copied into one shared backing string, so a 150k-entry
// vocabulary costs two allocations rather than one per token.
func (d *decoder) strings(n uint64, hint int) ([]string, error) {
	// First pass: validate the lengths and total the bytes. Each string
	// takes at least 8 bytes, so n beyond hint fails here.
	start := d.off
	total := 0
	for i := uint64(0); i < n; i++ {
		b, err := d.bytes()
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		total += len(b)
	}
	end := d.off

	// Second pass: copy every string into one buffer. The lengths have been
	// checked, so they are read without checks.
	le := binary.LittleEndian
	var sb strings.Builder
	sb.Grow(total)
	for off, i := start, 0; i < hint; i++ {
		l := int(le.Uint64(d.data[off:]))
		off += 8
		sb.Write(d.data[off : off+l])
		off += l
	}
	all := sb.String()

	// Third pass: slice the shared string.
	out := make([]string, hint)
	for off, pos, i := start, 0, 0; i < hint; i++ {
		l := int(le.Uint64(d.data[off:]))
		off += 8 + l
		out[i] = all[pos : pos+l]
		pos += l
	}
	d.off = end
	return out, nil
}
