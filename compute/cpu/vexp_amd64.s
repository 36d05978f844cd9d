//go:build amd64 && !purego

#include "textflag.h"

// Constants of expAVX512 (float32 bits).
DATA vexpc<>+0(SB)/4, $0x3fb8aa3b  // log2(e)
DATA vexpc<>+4(SB)/4, $0x3f318000  // ln 2, high part
DATA vexpc<>+8(SB)/4, $0xb95e8083  // ln 2, low part
DATA vexpc<>+12(SB)/4, $0x39506967 // polynomial coefficients, r^7 … r^2 terms
DATA vexpc<>+16(SB)/4, $0x3ab743ce
DATA vexpc<>+20(SB)/4, $0x3c088908
DATA vexpc<>+24(SB)/4, $0x3d2aa9c1
DATA vexpc<>+28(SB)/4, $0x3e2aaaaa
DATA vexpc<>+32(SB)/4, $0x3f000000
DATA vexpc<>+36(SB)/4, $0x3f800000 // 1
DATA vexpc<>+40(SB)/4, $0x42b20000 // 89: above, e^x overflows
DATA vexpc<>+44(SB)/4, $0xc2d00000 // -104: below, e^x is 0
GLOBL vexpc<>(SB), RODATA|NOPTR, $48

// VEXPCONST loads the constants into Z16-Z27.
#define VEXPCONST \
	VBROADCASTSS vexpc<>+0(SB), Z16; \
	VBROADCASTSS vexpc<>+4(SB), Z17; \
	VBROADCASTSS vexpc<>+8(SB), Z18; \
	VBROADCASTSS vexpc<>+12(SB), Z19; \
	VBROADCASTSS vexpc<>+16(SB), Z20; \
	VBROADCASTSS vexpc<>+20(SB), Z21; \
	VBROADCASTSS vexpc<>+24(SB), Z22; \
	VBROADCASTSS vexpc<>+28(SB), Z23; \
	VBROADCASTSS vexpc<>+32(SB), Z24; \
	VBROADCASTSS vexpc<>+36(SB), Z25; \
	VBROADCASTSS vexpc<>+40(SB), Z26; \
	VBROADCASTSS vexpc<>+44(SB), Z27

// VEXP computes Z0 = e^Z0 (clobbers Z1-Z3): x clamped to [-104, 89] (NaN
// kept), n = round(x·log2 e), r = x − n·ln 2 in two parts, e^r by a
// polynomial of degree 7, times 2^n by VSCALEFPS, which overflows to +Inf
// and underflows to 0.
#define VEXP \
	VMINPS Z0, Z26, Z0; \
	VMAXPS Z0, Z27, Z0; \
	VMULPS Z16, Z0, Z1; \
	VRNDSCALEPS $8, Z1, Z1; \
	VFNMADD231PS Z17, Z1, Z0; \
	VFNMADD231PS Z18, Z1, Z0; \
	VMOVAPS Z19, Z2; \
	VFMADD213PS Z20, Z0, Z2; \
	VFMADD213PS Z21, Z0, Z2; \
	VFMADD213PS Z22, Z0, Z2; \
	VFMADD213PS Z23, Z0, Z2; \
	VFMADD213PS Z24, Z0, Z2; \
	VMULPS Z0, Z0, Z3; \
	VFMADD213PS Z0, Z3, Z2; \
	VADDPS Z25, Z2, Z2; \
	VSCALEFPS Z1, Z2, Z0

// func siluMulAVX512(dst, gate, u *float32, n int)
// dst[i] = gate[i] / (1 + e^−gate[i]) · u[i].
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ u+16(FP), DX
	MOVQ n+24(FP), CX
	VEXPCONST
	VPXORD Z28, Z28, Z28
silu_loop:
	CMPQ CX, $16
	JLT silu_tail
	VMOVUPS (SI), Z4
	VSUBPS Z4, Z28, Z0
	VEXP
	VADDPS Z25, Z0, Z0
	VDIVPS Z0, Z4, Z4
	VMULPS (DX), Z4, Z4
	VMOVUPS Z4, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JMP silu_loop
silu_tail:
	TESTQ CX, CX
	JZ silu_done
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z4
	VMOVUPS.Z (DX), K1, Z5
	VSUBPS Z4, Z28, Z0
	VEXP
	VADDPS Z25, Z0, Z0
	VDIVPS Z0, Z4, Z4
	VMULPS Z5, Z4, Z4
	VMOVUPS Z4, K1, (DI)
silu_done:
	VZEROUPPER
	RET

// func expSubSumAVX512(x *float32, n int, m float32) float32
// x[i] = e^(x[i] − m); returns the sum of the new x[i].
TEXT ·expSubSumAVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z5
	VEXPCONST
	VPXORD Z6, Z6, Z6
exps_loop:
	CMPQ CX, $16
	JLT exps_tail
	VMOVUPS (DI), Z0
	VSUBPS Z5, Z0, Z0
	VEXP
	VMOVUPS Z0, (DI)
	VADDPS Z0, Z6, Z6
	ADDQ $64, DI
	SUBQ $16, CX
	JMP exps_loop
exps_tail:
	TESTQ CX, CX
	JZ exps_sum
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z0
	VSUBPS Z5, Z0, Z0
	VEXP
	VMOVUPS Z0, K1, (DI)
	VADDPS Z0, Z6, K1, Z6
exps_sum:
	VEXTRACTF64X4 $1, Z6, Y7
	VADDPS Y7, Y6, Y6
	VEXTRACTF32X4 $1, Y6, X7
	VADDPS X7, X6, X6
	VMOVHLPS X6, X6, X7
	VADDPS X7, X6, X6
	VMOVSHDUP X6, X7
	VADDSS X7, X6, X6
	MOVSS X6, ret+24(FP)
	VZEROUPPER
	RET
