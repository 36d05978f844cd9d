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
// a VCVTNZ3PS2BF16 result.
#define PAIRS(off) \
	CVT4 \
	MUL4(Z29) \
	STORE2(off)

// CVT4 converts Z1..Z4 from int32 to float32.
#define CVT4 \
	VCVTDQ2PS Z1, Z1 \
	VCVTDQ2PS Z2, Z2 \
	VCVTDQ2PS Z3, Z3 \
	VCVTDQ2PS Z4, Z4

// MUL4 multiplies Z1..Z4 by S.
#define MUL4(S) \
	VMULPS S, Z1, Z1 \
	VMULPS S, Z2, Z2 \
	VMULPS S, Z3, Z3 \
	VMULPS S, Z4, Z4

// STORE2 rounds Z1..Z4 to bf16 and writes them as pairs (Z1, Z2) at
// off(DI) and (Z3, Z4) at off+64(DI), through Z5 and Z6. The conversions
// are bytes (the assembler does not know them): VCVTNZ3PS2BF16 Z1, Z2, Z5
// and VCVTNZ3PS2BF16 Z3, Z4, Z6.
#define STORE2(off) \
	BYTE $0x62; BYTE $0xF2; BYTE $0x6F; BYTE $0x48; BYTE $0x72; BYTE $0xE9 \
	VPERMW Z5, Z31, Z5 \
	BYTE $0x62; BYTE $0xF2; BYTE $0x5F; BYTE $0x48; BYTE $0x72; BYTE $0xF3 \
	VPERMW Z6, Z31, Z6 \
	VMOVDQU64 Z5, off(DI) \
	VMOVDQU64 Z6, off+64(DI)

// BYTES4 splits the lanes of V (4 bytes of 4 weight rows' elements each)
// into Z1..Z4 as int32 values, with Z27 holding 0xff.
#define BYTES4(V) \
	VPANDD Z27, V, Z1 \
	VPSRLD $8, V, Z2 \
	VPANDD Z27, Z2, Z2 \
	VPSRLD $16, V, Z3 \
	VPANDD Z27, Z3, Z3 \
	VPSRLD $24, V, Z4

// SUB4D subtracts the int32 lanes of C from Z1..Z4.
#define SUB4D(C) \
	VPSUBD C, Z1, Z1 \
	VPSUBD C, Z2, Z2 \
	VPSUBD C, Z3, Z3 \
	VPSUBD C, Z4, Z4

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
	BYTES4(V) \
	SUB4D(Z28)

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

// SCLO stores the scale and min of Q4_K sub-block j < 4 (sh = 8j) of the
// 16 rows, times d (Z29) and dmin (Z25), at OFF(SP) and OFF+64(SP).
#define SCLO(sh, OFF) \
	VPSRLD $sh, Z21, Z9 \
	VPANDD Z13, Z9, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VMULPS Z29, Z9, Z9 \
	VMOVUPS Z9, OFF(SP) \
	VPSRLD $sh, Z22, Z10 \
	VPANDD Z13, Z10, Z10 \
	VCVTDQ2PS Z10, Z10 \
	VMULPS Z25, Z10, Z10 \
	VMOVUPS Z10, OFF+64(SP)

// SCHI is SCLO for sub-block j ≥ 4 (sh = 8(j−4), sh2 = sh+2, sh4 = sh+4):
// the low 4 bits from C's byte j−4, the top 2 from A's or B's.
#define SCHI(sh, sh2, sh4, OFF) \
	VPSRLD $sh, Z23, Z9 \
	VPANDD Z14, Z9, Z9 \
	VPSRLD $sh2, Z21, Z19 \
	VPTERNLOGD $0xF8, Z15, Z19, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VMULPS Z29, Z9, Z9 \
	VMOVUPS Z9, OFF(SP) \
	VPSRLD $sh4, Z23, Z10 \
	VPANDD Z14, Z10, Z10 \
	VPSRLD $sh2, Z22, Z19 \
	VPTERNLOGD $0xF8, Z15, Z19, Z10 \
	VCVTDQ2PS Z10, Z10 \
	VMULPS Z25, Z10, Z10 \
	VMOVUPS Z10, OFF+64(SP)

// func amxDqQ4_K(dst, codes, scales *byte, perm *uint16)
//
// Dequantizes one Q4_K super-block of a packed group (codes: its 2304
// bytes; scales: its d, followed by dmin) to the 16 rows of 8 bf16 B
// tiles, as quant does: d·sc·q − dmin·m, rounded after each operation.
// The 8 sub-blocks' scales and mins of the 16 rows go to the frame first.
TEXT ·amxDqQ4_K(SB), 0, $1024-32
	DQARGS
	VCVTPH2PS 32(AX), Z25
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z30
	MOVL $0xff, AX
	VPBROADCASTD AX, Z27
	MOVL $63, AX
	VPBROADCASTD AX, Z13
	MOVL $15, AX
	VPBROADCASTD AX, Z14
	MOVL $0x30, AX
	VPBROADCASTD AX, Z15
	VMOVDQU64 (SI), Z21
	VMOVDQU64 64(SI), Z22
	VMOVDQU64 128(SI), Z23
	SCLO(0, 0)
	SCLO(8, 128)
	SCLO(16, 256)
	SCLO(24, 384)
	SCHI(0, 2, 4, 512)
	SCHI(8, 10, 12, 640)
	SCHI(16, 18, 20, 768)
	SCHI(24, 26, 28, 896)
	ADDQ $256, SI
	XORQ R8, R8
	MOVQ $4, DX
q4kpair:
	VMOVUPS 0(SP)(R8*1), Z9
	VMOVUPS 64(SP)(R8*1), Z10
	VMOVUPS 128(SP)(R8*1), Z11
	VMOVUPS 192(SP)(R8*1), Z12
	MOVQ $8, CX
q4kvec:
	VMOVDQU64 (SI), Z0
	VPANDD Z30, Z0, Z7
	VPSRLD $4, Z0, Z8
	VPANDD Z30, Z8, Z8
	BYTES4(Z7)
	CVT4
	MUL4(Z9)
	VSUBPS Z10, Z1, Z1
	VSUBPS Z10, Z2, Z2
	VSUBPS Z10, Z3, Z3
	VSUBPS Z10, Z4, Z4
	STORE2(0)
	BYTES4(Z8)
	CVT4
	MUL4(Z11)
	VSUBPS Z12, Z1, Z1
	VSUBPS Z12, Z2, Z2
	VSUBPS Z12, Z3, Z3
	VSUBPS Z12, Z4, Z4
	STORE2(1024)
	ADDQ $64, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q4kvec
	ADDQ $1024, DI
	ADDQ $256, R8
	DECQ DX
	JNZ q4kpair
	VZEROUPPER
	RET

// Q6STORE writes quarter q's 4 elements of the 16 rows from the codes in
// Z17, times its scales S, at off(DI).
#define Q6STORE(S, off) \
	BYTES4(Z17) \
	SUB4D(Z26) \
	CVT4 \
	MUL4(S) \
	STORE2(off)

// func amxDqQ6_K(dst, codes, scales *byte, perm *uint16)
//
// Dequantizes one Q6_K super-block of a packed group (codes: its 3328
// bytes; scales: its 16 rows' d) to the 16 rows of 8 bf16 B tiles, as
// quant does: (d·sc)·(q − 32).
TEXT ·amxDqQ6_K(SB), NOSPLIT, $0-32
	DQARGS
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z30
	MOVL $0x3f3f3f3f, AX
	VPBROADCASTD AX, Z28
	MOVL $0xff, AX
	VPBROADCASTD AX, Z27
	MOVL $32, AX
	VPBROADCASTD AX, Z26
	MOVQ $2, R10
q6khalf:
	MOVQ $2, DX
q6kgroup:
	// The scales of the 4 sub-blocks of this half and chunk group.
	VPMOVSXBD 768(SI), Z9
	VPMOVSXBD 784(SI), Z10
	VPMOVSXBD 800(SI), Z11
	VPMOVSXBD 816(SI), Z12
	VCVTDQ2PS Z9, Z9
	VCVTDQ2PS Z10, Z10
	VCVTDQ2PS Z11, Z11
	VCVTDQ2PS Z12, Z12
	VMULPS Z29, Z9, Z9
	VMULPS Z29, Z10, Z10
	VMULPS Z29, Z11, Z11
	VMULPS Z29, Z12, Z12
	MOVQ $4, CX
q6kchunk:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z7
	VMOVDQU64 128(SI), Z8
	// The codes from A, B and C (Z0, Z7, Z8) as q6Mix arranges them.
	VPANDD Z28, Z0, Z17
	Q6STORE(Z9, 0)
	VPANDD Z28, Z7, Z17
	Q6STORE(Z10, 1024)
	VPANDD Z28, Z8, Z17
	Q6STORE(Z11, 2048)
	VPSRLW $2, Z7, Z18
	VPTERNLOGD $0xE4, Z28, Z0, Z18
	VPSRLW $4, Z8, Z17
	VPTERNLOGD $0xE4, Z30, Z18, Z17
	VPSRLW $2, Z17, Z17
	VPANDD Z28, Z17, Z17
	Q6STORE(Z12, 3072)
	ADDQ $192, SI
	ADDQ $128, DI
	DECQ CX
	JNZ q6kchunk
	ADDQ $64, SI
	DECQ DX
	JNZ q6kgroup
	ADDQ $3072, DI
	DECQ R10
	JNZ q6khalf
	VZEROUPPER
	RET
