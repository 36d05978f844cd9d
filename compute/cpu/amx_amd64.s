//go:build amd64 && !purego

#include "textflag.h"

// The AMX instructions, which the Go assembler does not know, are written
// as bytes (VEX encodings from the Intel SDM); each line's comment gives
// the instruction.

// DQARGS loads the arguments of a dequantizer: dst to DI, codes to SI, the
// permutation to Z31 and the 16 rows' scales, widened, to Z29.
#define DQARGS \
	MOVQ dst+0(FP), DI \
	MOVQ codes+8(FP), SI \
	MOVQ scales+16(FP), AX \
	MOVQ perm+24(FP), BX \
	VMOVDQU64 (BX), Z31 \
	VCVTPH2PS (AX), Z29

// func amxTileBF16(a *amxArgs)
//
// For each of a.pairs pairs of weight groups, C (32 activation rows × 32
// weight rows, float32, row stride ldc bytes; pair p's at byte 128p) =
// A · B over chunks chunks of 32 elements, where A is two tiles of 16
// activation rows of bf16 (row stride lda bytes, chunk c at byte 64c) and
// B two groups of 16 weight rows in the VNNI layout of amxDequant (chunk c
// of a group at byte 1024c, the groups one after another: bnext =
// 1024·chunks bytes apart).
TEXT ·amxTileBF16(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	MOVQ 0(DI), R11  // the tile configuration
	// LDTILECFG (R11)
	BYTE $0xC4; BYTE $0xC2; BYTE $0x78; BYTE $0x49; BYTE $0x03
	MOVQ 16(DI), DX  // lda
	MOVQ 24(DI), BX  // B, first group
	MOVQ 32(DI), R9
	ADDQ BX, R9      // B, second group
	MOVQ 48(DI), AX  // C
	MOVQ 56(DI), R12 // ldc
	MOVQ R12, R11
	SHLQ $4, R11
	ADDQ AX, R11     // C, rows 16-31
	MOVQ 64(DI), R13 // pairs
	MOVQ $64, CX

pair:
	MOVQ 8(DI), SI   // A, rows 0-15
	MOVQ DX, R8
	SHLQ $4, R8
	ADDQ SI, R8      // A, rows 16-31
	MOVQ 40(DI), R10 // chunks
	// TILEZERO TMM0 .. TMM3
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8

chunk:
	// TILELOADD TMM4, (SI)(DX*1)
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x16
	// TILELOADD TMM6, (BX)(CX*1)
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x0B
	// TILELOADD TMM7, (R9)(CX*1)
	BYTE $0xC4; BYTE $0xC2; BYTE $0x7B; BYTE $0x4B; BYTE $0x3C; BYTE $0x09
	// TDPBF16PS TMM0, TMM4, TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4
	// TILELOADD TMM5, (R8)(DX*1)
	BYTE $0xC4; BYTE $0xC2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x10
	// TDPBF16PS TMM1, TMM4, TMM7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xCC
	// TDPBF16PS TMM2, TMM5, TMM6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xD5
	// TDPBF16PS TMM3, TMM5, TMM7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xDD
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $1024, BX
	ADDQ $1024, R9
	DECQ R10
	JNZ chunk

	// TILESTORED (AX)(R12*1), TMM0
	BYTE $0xC4; BYTE $0xA2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x20
	// TILESTORED 64(AX)(R12*1), TMM1
	BYTE $0xC4; BYTE $0xA2; BYTE $0x7A; BYTE $0x4B; BYTE $0x4C; BYTE $0x20; BYTE $0x40
	// TILESTORED (R11)(R12*1), TMM2
	BYTE $0xC4; BYTE $0x82; BYTE $0x7A; BYTE $0x4B; BYTE $0x14; BYTE $0x23
	// TILESTORED 64(R11)(R12*1), TMM3
	BYTE $0xC4; BYTE $0x82; BYTE $0x7A; BYTE $0x4B; BYTE $0x5C; BYTE $0x23; BYTE $0x40
	// The next pair: its first group follows this pair's second.
	MOVQ R9, BX
	MOVQ 32(DI), R9
	ADDQ BX, R9
	ADDQ $128, AX
	ADDQ $128, R11
	DECQ R13
	JNZ pair
	// TILERELEASE
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0
	RET

// func amxCvtBF16(dst *uint16, src *float32, n int)
//
// dst[i] = src[i] rounded to bf16 (to nearest even), n a multiple of 32.
TEXT ·amxCvtBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ cvtdone
cvtloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	// VCVTNZ3PS2BF16 Z0, Z1, Z2 (Z2 words 0-15 from Z0, 16-31 from Z1)
	BYTE $0x62; BYTE $0xF2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xD0
	VMOVDQU64 Z2, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	DECQ CX
	JNZ cvtloop
cvtdone:
	VZEROUPPER
	RET

// PAIRS writes two rows of a B tile: the products of the int32 lanes in
// Z1..Z4 (elements 4j..4j+3 of the 16 weight rows) with the rows' scales
// in Z29, rounded to bf16, as pairs (Z1, Z2) at off(DI) and (Z3, Z4) at
// off+64(DI). Z31 holds the permutation that interleaves the two halves of
// a VCVTNZ3PS2BF16 result. The conversions are bytes (the assembler does
// not know them): VCVTNZ3PS2BF16 Z1, Z2, Z5 and VCVTNZ3PS2BF16 Z3, Z4, Z6.
#define PAIRS(off) \
	VCVTDQ2PS Z1, Z1 \
	VCVTDQ2PS Z2, Z2 \
	VCVTDQ2PS Z3, Z3 \
	VCVTDQ2PS Z4, Z4 \
	VMULPS Z29, Z1, Z1 \
	VMULPS Z29, Z2, Z2 \
	VMULPS Z29, Z3, Z3 \
	VMULPS Z29, Z4, Z4 \
	BYTE $0x62; BYTE $0xF2; BYTE $0x6F; BYTE $0x48; BYTE $0x72; BYTE $0xE9 \
	VPERMW Z5, Z31, Z5 \
	BYTE $0x62; BYTE $0xF2; BYTE $0x5F; BYTE $0x48; BYTE $0x72; BYTE $0xF3 \
	VPERMW Z6, Z31, Z6 \
	VMOVDQU64 Z5, off(DI) \
	VMOVDQU64 Z6, off+64(DI)

// func amxDqQ8_0(dst, codes, scales *byte, perm *uint16)
//
// Dequantizes one Q8_0 block of a packed group (its 512 code bytes and 16
// float16 scales) to the 16 rows of a bf16 B tile.
TEXT ·amxDqQ8_0(SB), NOSPLIT, $0-32
	DQARGS
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z30
	MOVQ $8, CX
q8loop:
	VPXORD (SI), Z30, Z0
	VPSLLD $24, Z0, Z1
	VPSRAD $24, Z1, Z1
	VPSLLD $16, Z0, Z2
	VPSRAD $24, Z2, Z2
	VPSLLD $8, Z0, Z3
	VPSRAD $24, Z3, Z3
	VPSRAD $24, Z0, Z4
	PAIRS(0)
	ADDQ $64, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q8loop
	VZEROUPPER
	RET

// NIBBLES splits the lanes of V (4 nibbles of 4 weight rows' elements each,
// 0..15) into Z1..Z4 as int32 values minus 8.
#define NIBBLES(V) \
	VPANDD Z27, V, Z1 \
	VPSRLD $8, V, Z2 \
	VPANDD Z27, Z2, Z2 \
	VPSRLD $16, V, Z3 \
	VPANDD Z27, Z3, Z3 \
	VPSRLD $24, V, Z4 \
	VPSUBD Z28, Z1, Z1 \
	VPSUBD Z28, Z2, Z2 \
	VPSUBD Z28, Z3, Z3 \
	VPSUBD Z28, Z4, Z4

// func amxDqQ4_0(dst, codes, scales *byte, perm *uint16)
//
// Dequantizes one Q4_0 block of a packed group (its 256 code bytes and 16
// float16 scales) to the 16 rows of a bf16 B tile.
TEXT ·amxDqQ4_0(SB), NOSPLIT, $0-32
	DQARGS
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z30
	MOVL $0xff, AX
	VPBROADCASTD AX, Z27
	MOVL $8, AX
	VPBROADCASTD AX, Z28
	MOVQ $4, CX
q4loop:
	VMOVDQU64 (SI), Z0
	VPANDD Z30, Z0, Z7
	VPSRLD $4, Z0, Z8
	VPANDD Z30, Z8, Z8
	NIBBLES(Z7)
	PAIRS(0)
	NIBBLES(Z8)
	PAIRS(512)
	ADDQ $64, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q4loop
	VZEROUPPER
	RET
