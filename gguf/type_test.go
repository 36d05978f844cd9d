package gguf

import (
	"strings"
	"testing"
)

// The ids, block sizes and block byte sizes below are the ggml facts
// (ggml.h's enum ggml_type and the block structs of ggml-common.h), written
// out as plain numbers so that a slip in the table's arithmetic shows up.
func TestTypeTable(t *testing.T) {
	tests := []struct {
		typ   Type
		id    uint32
		name  string
		block int
		bytes int
	}{
		{F32, 0, "F32", 1, 4},
		{F16, 1, "F16", 1, 2},
		{Q4_0, 2, "Q4_0", 32, 18},
		{Q4_1, 3, "Q4_1", 32, 20},
		{Q5_0, 6, "Q5_0", 32, 22},
		{Q5_1, 7, "Q5_1", 32, 24},
		{Q8_0, 8, "Q8_0", 32, 34},
		{Q8_1, 9, "Q8_1", 32, 36},
		{Q2_K, 10, "Q2_K", 256, 84},
		{Q3_K, 11, "Q3_K", 256, 110},
		{Q4_K, 12, "Q4_K", 256, 144},
		{Q5_K, 13, "Q5_K", 256, 176},
		{Q6_K, 14, "Q6_K", 256, 210},
		{Q8_K, 15, "Q8_K", 256, 292},
		{IQ2_XXS, 16, "IQ2_XXS", 256, 66},
		{IQ2_XS, 17, "IQ2_XS", 256, 74},
		{IQ3_XXS, 18, "IQ3_XXS", 256, 98},
		{IQ1_S, 19, "IQ1_S", 256, 50},
		{IQ4_NL, 20, "IQ4_NL", 32, 18},
		{IQ3_S, 21, "IQ3_S", 256, 110},
		{IQ2_S, 22, "IQ2_S", 256, 82},
		{IQ4_XS, 23, "IQ4_XS", 256, 136},
		{I8, 24, "I8", 1, 1},
		{I16, 25, "I16", 1, 2},
		{I32, 26, "I32", 1, 4},
		{I64, 27, "I64", 1, 8},
		{F64, 28, "F64", 1, 8},
		{IQ1_M, 29, "IQ1_M", 256, 56},
		{BF16, 30, "BF16", 1, 2},
		{TQ1_0, 34, "TQ1_0", 256, 54},
		{TQ2_0, 35, "TQ2_0", 256, 66},
		{MXFP4, 39, "MXFP4", 32, 17},
		{NVFP4, 40, "NVFP4", 64, 36},
		{Q1_0, 41, "Q1_0", 128, 18},
		{Q2_0, 42, "Q2_0", 64, 18},
	}
	seen := map[uint32]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen[tt.id] = true
			if uint32(tt.typ) != tt.id {
				t.Errorf("id = %d, want %d", uint32(tt.typ), tt.id)
			}
			if got := tt.typ.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if got := tt.typ.BlockSize(); got != tt.block {
				t.Errorf("BlockSize() = %d, want %d", got, tt.block)
			}
			if got := tt.typ.BytesPerBlock(); got != tt.bytes {
				t.Errorf("BytesPerBlock() = %d, want %d", got, tt.bytes)
			}
			if got, err := tt.typ.RowBytes(4 * tt.block); err != nil || got != 4*tt.bytes {
				t.Errorf("RowBytes(%d) = %d, %v; want %d", 4*tt.block, got, err, 4*tt.bytes)
			}
			if tt.block > 1 {
				if _, err := tt.typ.RowBytes(tt.block + 1); err == nil {
					t.Errorf("RowBytes(%d) succeeded, want an error", tt.block+1)
				}
			}
			if got, err := ParseType(strings.ToLower(tt.name)); err != nil || got != tt.typ {
				t.Errorf("ParseType(%q) = %v, %v", strings.ToLower(tt.name), got, err)
			}
		})
	}
	// Every id below the end of the table is either a type above or removed.
	for id := range uint32(len(typeInfos)) {
		if !seen[id] && !Type(id).info().removed {
			t.Errorf("id %d is neither tested nor removed", id)
		}
	}
}

func TestRemovedAndUnknownTypes(t *testing.T) {
	tests := []struct {
		id   uint32
		name string
		want string
	}{
		{4, "Q4_2", "removed"},
		{5, "Q4_3", "removed"},
		{31, "Q4_0_4_4", "removed"},
		{32, "Q4_0_4_8", "removed"},
		{33, "Q4_0_8_8", "removed"},
		{36, "IQ4_NL_4_4", "removed"},
		{37, "IQ4_NL_4_8", "removed"},
		{38, "IQ4_NL_8_8", "removed"},
		{43, "Type(43)", "unknown tensor type id 43"},
		{1 << 31, "Type(2147483648)", "unknown tensor type id 2147483648"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := Type(tt.id)
			if got := typ.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if typ.BlockSize() != 0 || typ.BytesPerBlock() != 0 {
				t.Errorf("BlockSize, BytesPerBlock = %d, %d; want 0, 0", typ.BlockSize(), typ.BytesPerBlock())
			}
			_, err := typ.RowBytes(256)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RowBytes error = %v, want one containing %q", err, tt.want)
			}
			if _, err := ParseType(tt.name); err == nil {
				t.Errorf("ParseType(%q) succeeded", tt.name)
			}
		})
	}
}

func TestRowBytes(t *testing.T) {
	tests := []struct {
		typ     Type
		n       int
		want    int
		wantErr bool
	}{
		{F32, 0, 0, false},
		{F32, 7, 28, false},
		{Q4_K, 4096, 16 * 144, false},
		{Q4_K, 4000, 0, true},
		{Q8_0, 32, 34, false},
		{Q8_0, -32, 0, true},
		{F64, 1 << 62, 0, true}, // overflows int
	}
	for _, tt := range tests {
		got, err := tt.typ.RowBytes(tt.n)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%v.RowBytes(%d) = %d, %v; want %d, error %v", tt.typ, tt.n, got, err, tt.want, tt.wantErr)
		}
	}
}
