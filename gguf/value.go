package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ValueType is the type tag of a metadata value, as stored in the file.
type ValueType uint32

// The metadata value types.
const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	ValueUint8:   "uint8",
	ValueInt8:    "int8",
	ValueUint16:  "uint16",
	ValueInt16:   "int16",
	ValueUint32:  "uint32",
	ValueInt32:   "int32",
	ValueFloat32: "float32",
	ValueBool:    "bool",
	ValueString:  "string",
	ValueArray:   "array",
	ValueUint64:  "uint64",
	ValueInt64:   "int64",
	ValueFloat64: "float64",
}

// String returns the type's name, such as "uint32" or "array".
func (t ValueType) String() string {
	if int64(t) < int64(len(valueTypeNames)) {
		return valueTypeNames[t]
	}
	return "ValueType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

func (t ValueType) valid() bool { return int64(t) < int64(len(valueTypeNames)) }

// size returns the encoded size of a fixed-size value type, or 0 for string
// and array.
func (t ValueType) size() int {
	switch t {
	case ValueUint8, ValueInt8, ValueBool:
		return 1
	case ValueUint16, ValueInt16:
		return 2
	case ValueUint32, ValueInt32, ValueFloat32:
		return 4
	case ValueUint64, ValueInt64, ValueFloat64:
		return 8
	}
	return 0
}

// minSize returns the fewest bytes one encoded value of type t can take.
func (t ValueType) minSize() int {
	switch t {
	case ValueString:
		return 8 // length
	case ValueArray:
		return 4 + 8 // element type and count
	}
	return t.size()
}

// Value is one metadata value: a scalar, a string or an array. Arrays hold
// elements of one type; an array of arrays holds Values that are themselves
// arrays, each with its own element type. A Value keeps the exact type it was
// read or built with, so writing it back reproduces the same bytes.
//
// The zero Value is the uint8 0. Values are immutable; slices returned by the
// array accessors are shared and must not be modified.
type Value struct {
	typ  ValueType
	elem ValueType // element type of an array
	bits uint64    // integers, float bits and bools
	str  string
	arr  any // []uint8 … []float64, []bool, []string or []Value
}

// Uint8 returns a uint8 value.
func Uint8(v uint8) Value { return Value{typ: ValueUint8, bits: uint64(v)} }

// Int8 returns an int8 value.
func Int8(v int8) Value { return Value{typ: ValueInt8, bits: uint64(v)} }

// Uint16 returns a uint16 value.
func Uint16(v uint16) Value { return Value{typ: ValueUint16, bits: uint64(v)} }

// Int16 returns an int16 value.
func Int16(v int16) Value { return Value{typ: ValueInt16, bits: uint64(v)} }

// Uint32 returns a uint32 value.
func Uint32(v uint32) Value { return Value{typ: ValueUint32, bits: uint64(v)} }

// Int32 returns an int32 value.
func Int32(v int32) Value { return Value{typ: ValueInt32, bits: uint64(v)} }

// Uint64 returns a uint64 value.
func Uint64(v uint64) Value { return Value{typ: ValueUint64, bits: v} }

// Int64 returns an int64 value.
func Int64(v int64) Value { return Value{typ: ValueInt64, bits: uint64(v)} }

// Float32 returns a float32 value.
func Float32(v float32) Value { return Value{typ: ValueFloat32, bits: uint64(math.Float32bits(v))} }

// Float64 returns a float64 value.
func Float64(v float64) Value { return Value{typ: ValueFloat64, bits: math.Float64bits(v)} }

// Bool returns a bool value.
func Bool(v bool) Value {
	if v {
		return Value{typ: ValueBool, bits: 1}
	}
	return Value{typ: ValueBool}
}

// String returns a string value.
func String(v string) Value { return Value{typ: ValueString, str: v} }

// Elem is the set of Go element types an array Value can hold. []Value holds
// an array of arrays: each of its elements must itself be an array.
type Elem interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64 | Value
}

// Array returns an array value holding elems, which it keeps (not a copy).
func Array[E Elem](elems []E) Value {
	if elems == nil {
		elems = []E{}
	}
	return Value{typ: ValueArray, elem: elemType(elems), arr: elems}
}

func elemType(a any) ValueType {
	switch a.(type) {
	case []uint8:
		return ValueUint8
	case []int8:
		return ValueInt8
	case []uint16:
		return ValueUint16
	case []int16:
		return ValueInt16
	case []uint32:
		return ValueUint32
	case []int32:
		return ValueInt32
	case []float32:
		return ValueFloat32
	case []bool:
		return ValueBool
	case []string:
		return ValueString
	case []uint64:
		return ValueUint64
	case []int64:
		return ValueInt64
	case []float64:
		return ValueFloat64
	case []Value:
		return ValueArray
	}
	panic("gguf: unreachable array element type")
}

// ArrayOf returns the elements of an array value whose element type is E,
// and false when v is not an array of E. The slice is shared, not copied.
func ArrayOf[E Elem](v Value) ([]E, bool) {
	s, ok := v.arr.([]E)
	return s, ok && v.typ == ValueArray
}

// Type returns the value's type.
func (v Value) Type() ValueType { return v.typ }

// Elem returns the element type of an array value. It is meaningless for
// other values.
func (v Value) Elem() ValueType { return v.elem }

// Len returns the number of elements of an array value, the length in bytes
// of a string, and 1 for other values.
func (v Value) Len() int {
	switch v.typ {
	case ValueArray:
		return arrayLen(v.arr)
	case ValueString:
		return len(v.str)
	}
	return 1
}

func arrayLen(a any) int {
	switch s := a.(type) {
	case []uint8:
		return len(s)
	case []int8:
		return len(s)
	case []uint16:
		return len(s)
	case []int16:
		return len(s)
	case []uint32:
		return len(s)
	case []int32:
		return len(s)
	case []float32:
		return len(s)
	case []bool:
		return len(s)
	case []string:
		return len(s)
	case []uint64:
		return len(s)
	case []int64:
		return len(s)
	case []float64:
		return len(s)
	case []Value:
		return len(s)
	}
	return 0
}

// isSigned reports whether t is a signed integer type.
func isSigned(t ValueType) bool {
	return t == ValueInt8 || t == ValueInt16 || t == ValueInt32 || t == ValueInt64
}

func isInteger(t ValueType) bool {
	switch t {
	case ValueUint8, ValueInt8, ValueUint16, ValueInt16, ValueUint32, ValueInt32, ValueUint64, ValueInt64:
		return true
	}
	return false
}

// Uint returns the value of any integer type as a uint64. It returns false for
// other types and for negative values.
func (v Value) Uint() (uint64, bool) {
	if !isInteger(v.typ) {
		return 0, false
	}
	if isSigned(v.typ) && int64(v.bits) < 0 {
		return 0, false
	}
	return v.bits, true
}

// Int returns the value of any integer type as an int64. It returns false for
// other types and for uint64 values above math.MaxInt64.
func (v Value) Int() (int64, bool) {
	if !isInteger(v.typ) {
		return 0, false
	}
	if v.typ == ValueUint64 && v.bits > math.MaxInt64 {
		return 0, false
	}
	return int64(v.bits), true
}

// Float returns a float32 or float64 value as a float64. Integer values are
// converted too; other types give false.
func (v Value) Float() (float64, bool) {
	switch {
	case v.typ == ValueFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), true
	case v.typ == ValueFloat64:
		return math.Float64frombits(v.bits), true
	case v.typ == ValueUint64:
		return float64(v.bits), true
	case isInteger(v.typ):
		return float64(int64(v.bits)), true
	}
	return 0, false
}

// Bool returns a bool value, and false as its second result for other types.
func (v Value) Bool() (bool, bool) {
	if v.typ != ValueBool {
		return false, false
	}
	return v.bits != 0, true
}

// Str returns a string value, and false for other types.
func (v Value) Str() (string, bool) {
	return v.str, v.typ == ValueString
}

// Ints returns an array of any integer type converted to int64s (a new slice),
// and false for other values or when a uint64 element exceeds math.MaxInt64.
func (v Value) Ints() ([]int64, bool) {
	if v.typ != ValueArray {
		return nil, false
	}
	switch s := v.arr.(type) {
	case []uint8:
		return convert(s), true
	case []int8:
		return convert(s), true
	case []uint16:
		return convert(s), true
	case []int16:
		return convert(s), true
	case []uint32:
		return convert(s), true
	case []int32:
		return convert(s), true
	case []int64:
		return append([]int64(nil), s...), true
	case []uint64:
		out := make([]int64, len(s))
		for i, x := range s {
			if x > math.MaxInt64 {
				return nil, false
			}
			out[i] = int64(x)
		}
		return out, true
	}
	return nil, false
}

func convert[E uint8 | int8 | uint16 | int16 | uint32 | int32](s []E) []int64 {
	out := make([]int64, len(s))
	for i, x := range s {
		out[i] = int64(x)
	}
	return out
}

// String formats the value for people: numbers and bools as Go prints them,
// strings quoted, arrays in brackets. Arrays longer than 8 elements are cut
// short with the total length appended.
func (v Value) String() string {
	var b strings.Builder
	v.format(&b)
	return b.String()
}

func (v Value) format(b *strings.Builder) {
	switch v.typ {
	case ValueString:
		b.WriteString(strconv.Quote(v.str))
	case ValueBool:
		b.WriteString(strconv.FormatBool(v.bits != 0))
	case ValueFloat32:
		b.WriteString(strconv.FormatFloat(float64(math.Float32frombits(uint32(v.bits))), 'g', -1, 32))
	case ValueFloat64:
		b.WriteString(strconv.FormatFloat(math.Float64frombits(v.bits), 'g', -1, 64))
	case ValueUint8, ValueUint16, ValueUint32, ValueUint64:
		b.WriteString(strconv.FormatUint(v.bits, 10))
	case ValueInt8, ValueInt16, ValueInt32, ValueInt64:
		b.WriteString(strconv.FormatInt(int64(v.bits), 10))
	case ValueArray:
		const show = 8
		n := arrayLen(v.arr)
		b.WriteByte('[')
		for i := 0; i < n && i < show; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			v.index(i).format(b)
		}
		if n > show {
			fmt.Fprintf(b, ", … (%d %s)", n, v.elem)
		}
		b.WriteByte(']')
	default:
		fmt.Fprintf(b, "<%s>", v.typ)
	}
}

// index returns element i of an array value as a Value.
func (v Value) index(i int) Value {
	switch s := v.arr.(type) {
	case []uint8:
		return Uint8(s[i])
	case []int8:
		return Int8(s[i])
	case []uint16:
		return Uint16(s[i])
	case []int16:
		return Int16(s[i])
	case []uint32:
		return Uint32(s[i])
	case []int32:
		return Int32(s[i])
	case []float32:
		return Float32(s[i])
	case []bool:
		return Bool(s[i])
	case []string:
		return String(s[i])
	case []uint64:
		return Uint64(s[i])
	case []int64:
		return Int64(s[i])
	case []float64:
		return Float64(s[i])
	case []Value:
		return s[i]
	}
	return Value{}
}

// Index returns element i of an array value as a Value. It panics when v is
// not an array or i is out of range, like indexing a slice.
func (v Value) Index(i int) Value {
	if v.typ != ValueArray {
		panic("gguf: Index of a " + v.typ.String() + " value")
	}
	if i < 0 || i >= arrayLen(v.arr) {
		panic(fmt.Sprintf("gguf: index %d out of range for array of length %d", i, arrayLen(v.arr)))
	}
	return v.index(i)
}
