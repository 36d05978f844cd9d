package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Type is a ggml tensor type: the storage format of a tensor's elements. The
// numeric values are the ids stored in GGUF tensor infos.
type Type uint32

// The ggml tensor types. Ids 4, 5, 31-33 and 36-38 belonged to types that
// have been removed from the format; files using them are rejected.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q4_2    Type = 4 // removed
	Q4_3    Type = 5 // removed
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	// Ids 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed.
	TQ1_0 Type = 34
	TQ2_0 Type = 35
	// Ids 36-38 (IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8) were removed.
	MXFP4 Type = 39
	NVFP4 Type = 40
	Q1_0  Type = 41
	Q2_0  Type = 42
)

// superBlock is the element count of a k-quant or i-quant super-block.
const superBlock = 256

// typeInfo describes one tensor type: its name, how many elements one block
// holds and how many bytes that block takes. A removed type has a name and
// zero sizes.
type typeInfo struct {
	name    string
	block   int
	bytes   int
	removed bool
}

var typeInfos = [...]typeInfo{
	F32:     {name: "F32", block: 1, bytes: 4},
	F16:     {name: "F16", block: 1, bytes: 2},
	Q4_0:    {name: "Q4_0", block: 32, bytes: 2 + 16},
	Q4_1:    {name: "Q4_1", block: 32, bytes: 2 + 2 + 16},
	Q4_2:    {name: "Q4_2", removed: true},
	Q4_3:    {name: "Q4_3", removed: true},
	Q5_0:    {name: "Q5_0", block: 32, bytes: 2 + 4 + 16},
	Q5_1:    {name: "Q5_1", block: 32, bytes: 2 + 2 + 4 + 16},
	Q8_0:    {name: "Q8_0", block: 32, bytes: 2 + 32},
	Q8_1:    {name: "Q8_1", block: 32, bytes: 2 + 2 + 32},
	Q2_K:    {name: "Q2_K", block: superBlock, bytes: 16 + 64 + 2 + 2},
	Q3_K:    {name: "Q3_K", block: superBlock, bytes: 32 + 64 + 12 + 2},
	Q4_K:    {name: "Q4_K", block: superBlock, bytes: 2 + 2 + 12 + 128},
	Q5_K:    {name: "Q5_K", block: superBlock, bytes: 2 + 2 + 12 + 32 + 128},
	Q6_K:    {name: "Q6_K", block: superBlock, bytes: 128 + 64 + 16 + 2},
	Q8_K:    {name: "Q8_K", block: superBlock, bytes: 4 + 256 + 16*2},
	IQ2_XXS: {name: "IQ2_XXS", block: superBlock, bytes: 2 + 32*2},
	IQ2_XS:  {name: "IQ2_XS", block: superBlock, bytes: 2 + 32*2 + 8},
	IQ3_XXS: {name: "IQ3_XXS", block: superBlock, bytes: 2 + 96},
	IQ1_S:   {name: "IQ1_S", block: superBlock, bytes: 2 + 32 + 8*2},
	IQ4_NL:  {name: "IQ4_NL", block: 32, bytes: 2 + 16},
	IQ3_S:   {name: "IQ3_S", block: superBlock, bytes: 2 + 64 + 8 + 32 + 4},
	IQ2_S:   {name: "IQ2_S", block: superBlock, bytes: 2 + 64 + 8 + 8},
	IQ4_XS:  {name: "IQ4_XS", block: superBlock, bytes: 2 + 2 + 4 + 128},
	I8:      {name: "I8", block: 1, bytes: 1},
	I16:     {name: "I16", block: 1, bytes: 2},
	I32:     {name: "I32", block: 1, bytes: 4},
	I64:     {name: "I64", block: 1, bytes: 8},
	F64:     {name: "F64", block: 1, bytes: 8},
	IQ1_M:   {name: "IQ1_M", block: superBlock, bytes: 32 + 16 + 8},
	BF16:    {name: "BF16", block: 1, bytes: 2},
	31:      {name: "Q4_0_4_4", removed: true},
	32:      {name: "Q4_0_4_8", removed: true},
	33:      {name: "Q4_0_8_8", removed: true},
	TQ1_0:   {name: "TQ1_0", block: superBlock, bytes: 48 + 4 + 2},
	TQ2_0:   {name: "TQ2_0", block: superBlock, bytes: 64 + 2},
	36:      {name: "IQ4_NL_4_4", removed: true},
	37:      {name: "IQ4_NL_4_8", removed: true},
	38:      {name: "IQ4_NL_8_8", removed: true},
	MXFP4:   {name: "MXFP4", block: 32, bytes: 1 + 16},
	NVFP4:   {name: "NVFP4", block: 64, bytes: 4 + 32},
	Q1_0:    {name: "Q1_0", block: 128, bytes: 2 + 16},
	Q2_0:    {name: "Q2_0", block: 64, bytes: 2 + 16},
}

func (t Type) info() typeInfo {
	if int64(t) < int64(len(typeInfos)) {
		return typeInfos[t]
	}
	return typeInfo{}
}

// String returns the type's conventional upper-case name, such as "Q4_K" or
// "BF16", or "Type(N)" for an id this package does not know.
func (t Type) String() string {
	if n := t.info().name; n != "" {
		return n
	}
	return "Type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// BlockSize returns the number of elements one block of the type holds (1
// for plain types such as F32), or 0 for a removed or unknown type.
func (t Type) BlockSize() int { return t.info().block }

// BytesPerBlock returns the size in bytes of one block of the type, or 0 for
// a removed or unknown type.
func (t Type) BytesPerBlock() int { return t.info().bytes }

// RowBytes returns the size in bytes of n consecutive elements of the type.
// It fails when the type is removed or unknown, or when n is negative or not
// a multiple of the block size.
func (t Type) RowBytes(n int) (int, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("gguf: negative element count %d", n)
	}
	ti := t.info()
	if n%ti.block != 0 {
		return 0, fmt.Errorf("gguf: %d elements of %s are not a whole number of %d-element blocks", n, t, ti.block)
	}
	blocks := n / ti.block
	if blocks > math.MaxInt/ti.bytes {
		return 0, fmt.Errorf("gguf: %d elements of %s overflow the byte count", n, t)
	}
	return blocks * ti.bytes, nil
}

// check reports whether t can be used for tensor data.
func (t Type) check() error {
	ti := t.info()
	switch {
	case ti.removed:
		return fmt.Errorf("tensor type %d (%s) has been removed from the GGUF format; convert the model again", uint32(t), ti.name)
	case ti.block == 0:
		return fmt.Errorf("unknown tensor type id %d", uint32(t))
	}
	return nil
}

// ParseType returns the type with the given name, ignoring case (so "q4_k"
// and "Q4_K" both give Q4_K). Removed types are not accepted.
func ParseType(name string) (Type, error) {
	for id, ti := range typeInfos {
		if ti.block != 0 && strings.EqualFold(ti.name, name) {
			return Type(id), nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q", name)
}

// KeyFileType is the key of a model file's type: llama.cpp's LLAMA_FTYPE_*
// number, as FileTypeName names it.
const KeyFileType = "general.file_type"

// fileTypeNames names llama.cpp's general.file_type values as llama.cpp's
// quantizer and Ollama's quantization_level do.
var fileTypeNames = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
	37: "TQ2_0", 38: "MXFP4",
}

// FileTypeName names a general.file_type value ("Q4_K_M" for 15); an
// unknown one is "file type N".
func FileTypeName(ft uint64) string {
	if s, ok := fileTypeNames[ft]; ok {
		return s
	}
	return fmt.Sprintf("file type %d", ft)
}

// FileType names the file's quantization type, the one name lem shows
// everywhere (inspect, bench, the APIs): general.file_type's
// ("Q4_K_M"), or, in a file without it, the type of the tensors that hold
// most of the bytes ("Q8_0"); "" for a file without tensors.
func (f *File) FileType() string {
	if ft, ok := f.Uint(KeyFileType); ok {
		return FileTypeName(ft)
	}
	bytes := map[Type]int64{}
	for _, t := range f.Tensors {
		bytes[t.Type] += t.Size()
	}
	var top Type
	var most int64 = -1
	for typ, n := range bytes {
		if n > most || n == most && typ.String() < top.String() {
			top, most = typ, n
		}
	}
	if most < 0 {
		return ""
	}
	return top.String()
}
