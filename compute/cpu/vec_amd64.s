//go:build amd64 && !purego

#include "textflag.h"

// Constants of the vector kernels, each repeated over 8 lanes.
DATA expHi<>+0(SB)/4, $0x42b00000
DATA expHi<>+4(SB)/4, $0x42b00000
DATA expHi<>+8(SB)/4, $0x42b00000
DATA expHi<>+12(SB)/4, $0x42b00000
DATA expHi<>+16(SB)/4, $0x42b00000
DATA expHi<>+20(SB)/4, $0x42b00000
DATA expHi<>+24(SB)/4, $0x42b00000
DATA expHi<>+28(SB)/4, $0x42b00000
GLOBL expHi<>(SB), RODATA|NOPTR, $32

DATA expLo<>+0(SB)/4, $0xc2aeac4f
DATA expLo<>+4(SB)/4, $0xc2aeac4f
DATA expLo<>+8(SB)/4, $0xc2aeac4f
DATA expLo<>+12(SB)/4, $0xc2aeac4f
DATA expLo<>+16(SB)/4, $0xc2aeac4f
DATA expLo<>+20(SB)/4, $0xc2aeac4f
DATA expLo<>+24(SB)/4, $0xc2aeac4f
DATA expLo<>+28(SB)/4, $0xc2aeac4f
GLOBL expLo<>(SB), RODATA|NOPTR, $32

DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32

DATA ln2Hi<>+0(SB)/4, $0x3f318000
DATA ln2Hi<>+4(SB)/4, $0x3f318000
DATA ln2Hi<>+8(SB)/4, $0x3f318000
DATA ln2Hi<>+12(SB)/4, $0x3f318000
DATA ln2Hi<>+16(SB)/4, $0x3f318000
DATA ln2Hi<>+20(SB)/4, $0x3f318000
DATA ln2Hi<>+24(SB)/4, $0x3f318000
DATA ln2Hi<>+28(SB)/4, $0x3f318000
GLOBL ln2Hi<>(SB), RODATA|NOPTR, $32

DATA ln2Lo<>+0(SB)/4, $0xb95e8083
DATA ln2Lo<>+4(SB)/4, $0xb95e8083
DATA ln2Lo<>+8(SB)/4, $0xb95e8083
DATA ln2Lo<>+12(SB)/4, $0xb95e8083
DATA ln2Lo<>+16(SB)/4, $0xb95e8083
DATA ln2Lo<>+20(SB)/4, $0xb95e8083
DATA ln2Lo<>+24(SB)/4, $0xb95e8083
DATA ln2Lo<>+28(SB)/4, $0xb95e8083
GLOBL ln2Lo<>(SB), RODATA|NOPTR, $32

DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32

DATA p2<>+0(SB)/4, $0x3f000000
DATA p2<>+4(SB)/4, $0x3f000000
DATA p2<>+8(SB)/4, $0x3f000000
DATA p2<>+12(SB)/4, $0x3f000000
DATA p2<>+16(SB)/4, $0x3f000000
DATA p2<>+20(SB)/4, $0x3f000000
DATA p2<>+24(SB)/4, $0x3f000000
DATA p2<>+28(SB)/4, $0x3f000000
GLOBL p2<>(SB), RODATA|NOPTR, $32

DATA p3<>+0(SB)/4, $0x3e2aaaab
DATA p3<>+4(SB)/4, $0x3e2aaaab
DATA p3<>+8(SB)/4, $0x3e2aaaab
DATA p3<>+12(SB)/4, $0x3e2aaaab
DATA p3<>+16(SB)/4, $0x3e2aaaab
DATA p3<>+20(SB)/4, $0x3e2aaaab
DATA p3<>+24(SB)/4, $0x3e2aaaab
DATA p3<>+28(SB)/4, $0x3e2aaaab
GLOBL p3<>(SB), RODATA|NOPTR, $32

DATA p4<>+0(SB)/4, $0x3d2aaaab
DATA p4<>+4(SB)/4, $0x3d2aaaab
DATA p4<>+8(SB)/4, $0x3d2aaaab
DATA p4<>+12(SB)/4, $0x3d2aaaab
DATA p4<>+16(SB)/4, $0x3d2aaaab
DATA p4<>+20(SB)/4, $0x3d2aaaab
DATA p4<>+24(SB)/4, $0x3d2aaaab
DATA p4<>+28(SB)/4, $0x3d2aaaab
GLOBL p4<>(SB), RODATA|NOPTR, $32

DATA p5<>+0(SB)/4, $0x3c088889
DATA p5<>+4(SB)/4, $0x3c088889
DATA p5<>+8(SB)/4, $0x3c088889
DATA p5<>+12(SB)/4, $0x3c088889
DATA p5<>+16(SB)/4, $0x3c088889
DATA p5<>+20(SB)/4, $0x3c088889
DATA p5<>+24(SB)/4, $0x3c088889
DATA p5<>+28(SB)/4, $0x3c088889
GLOBL p5<>(SB), RODATA|NOPTR, $32

DATA p6<>+0(SB)/4, $0x3ab60b61
DATA p6<>+4(SB)/4, $0x3ab60b61
DATA p6<>+8(SB)/4, $0x3ab60b61
DATA p6<>+12(SB)/4, $0x3ab60b61
DATA p6<>+16(SB)/4, $0x3ab60b61
DATA p6<>+20(SB)/4, $0x3ab60b61
DATA p6<>+24(SB)/4, $0x3ab60b61
DATA p6<>+28(SB)/4, $0x3ab60b61
GLOBL p6<>(SB), RODATA|NOPTR, $32

DATA p7<>+0(SB)/4, $0x39500d01
DATA p7<>+4(SB)/4, $0x39500d01
DATA p7<>+8(SB)/4, $0x39500d01
DATA p7<>+12(SB)/4, $0x39500d01
DATA p7<>+16(SB)/4, $0x39500d01
DATA p7<>+20(SB)/4, $0x39500d01
DATA p7<>+24(SB)/4, $0x39500d01
DATA p7<>+28(SB)/4, $0x39500d01
GLOBL p7<>(SB), RODATA|NOPTR, $32

DATA i127<>+0(SB)/4, $0x0000007f
DATA i127<>+4(SB)/4, $0x0000007f
DATA i127<>+8(SB)/4, $0x0000007f
DATA i127<>+12(SB)/4, $0x0000007f
DATA i127<>+16(SB)/4, $0x0000007f
DATA i127<>+20(SB)/4, $0x0000007f
DATA i127<>+24(SB)/4, $0x0000007f
DATA i127<>+28(SB)/4, $0x0000007f
GLOBL i127<>(SB), RODATA|NOPTR, $32

DATA geluK0<>+0(SB)/4, $0xbfcc422a
DATA geluK0<>+4(SB)/4, $0xbfcc422a
DATA geluK0<>+8(SB)/4, $0xbfcc422a
DATA geluK0<>+12(SB)/4, $0xbfcc422a
DATA geluK0<>+16(SB)/4, $0xbfcc422a
DATA geluK0<>+20(SB)/4, $0xbfcc422a
DATA geluK0<>+24(SB)/4, $0xbfcc422a
DATA geluK0<>+28(SB)/4, $0xbfcc422a
GLOBL geluK0<>(SB), RODATA|NOPTR, $32

DATA geluK1<>+0(SB)/4, $0xbd922279
DATA geluK1<>+4(SB)/4, $0xbd922279
DATA geluK1<>+8(SB)/4, $0xbd922279
DATA geluK1<>+12(SB)/4, $0xbd922279
DATA geluK1<>+16(SB)/4, $0xbd922279
DATA geluK1<>+20(SB)/4, $0xbd922279
DATA geluK1<>+24(SB)/4, $0xbd922279
DATA geluK1<>+28(SB)/4, $0xbd922279
GLOBL geluK1<>(SB), RODATA|NOPTR, $32

// EXP(x, t, u, m) replaces the 8 floats in x by exp(x). Range reduction:
// x = n·ln2 + r with n = round(x·log2e) and |r| ≤ ln2/2, r computed with a
// two-part ln2; exp(r) by its Taylor polynomial of degree 7 (error below
// 6e-9 relative); 2^n built in the exponent bits. Inputs above 88 are
// clamped there; inputs below -87.34 (the smallest normal) give 0.
#define EXP(x, t, u, m) \
	VCMPPS $1, expLo<>(SB), x, m; \
	VMINPS expHi<>(SB), x, x; \
	VMAXPS expLo<>(SB), x, x; \
	VMULPS log2e<>(SB), x, t; \
	VROUNDPS $0, t, t; \
	VFNMADD231PS ln2Hi<>(SB), t, x; \
	VFNMADD231PS ln2Lo<>(SB), t, x; \
	VMOVUPS p7<>(SB), u; \
	VFMADD213PS p6<>(SB), x, u; \
	VFMADD213PS p5<>(SB), x, u; \
	VFMADD213PS p4<>(SB), x, u; \
	VFMADD213PS p3<>(SB), x, u; \
	VFMADD213PS p2<>(SB), x, u; \
	VFMADD213PS one<>(SB), x, u; \
	VFMADD213PS one<>(SB), x, u; \
	VCVTPS2DQ t, t; \
	VPADDD i127<>(SB), t, t; \
	VPSLLD $23, t, t; \
	VMULPS t, u, x; \
	VANDNPS x, m, x

// HSUM(y, x, t) leaves the sum of the 8 floats of y in the low lane of x.
#define HSUM(y, x, tx) \
	VEXTRACTF128 $1, y, tx; \
	VADDPS tx, x, x; \
	VHADDPS x, x, x; \
	VHADDPS x, x, x

// func dotAVX2(a, b *float32, n int) float32
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX
	JZ dot8
dot32:
	VMOVUPS (SI)(AX*4), Y4
	VMOVUPS 32(SI)(AX*4), Y5
	VMOVUPS 64(SI)(AX*4), Y6
	VMOVUPS 96(SI)(AX*4), Y7
	VFMADD231PS (DI)(AX*4), Y4, Y0
	VFMADD231PS 32(DI)(AX*4), Y5, Y1
	VFMADD231PS 64(DI)(AX*4), Y6, Y2
	VFMADD231PS 96(DI)(AX*4), Y7, Y3
	ADDQ $32, AX
	CMPQ AX, DX
	JB dot32
dot8:
	CMPQ AX, CX
	JAE dotdone
	VMOVUPS (SI)(AX*4), Y4
	VFMADD231PS (DI)(AX*4), Y4, Y0
	ADDQ $8, AX
	JMP dot8
dotdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyAVX2(y *float32, alpha float32, x *float32, n int)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSS alpha+8(FP), Y0
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-32, DX
	JZ axpy8
axpy32:
	VMOVUPS (DI)(AX*4), Y1
	VMOVUPS 32(DI)(AX*4), Y2
	VMOVUPS 64(DI)(AX*4), Y3
	VMOVUPS 96(DI)(AX*4), Y4
	VFMADD231PS (SI)(AX*4), Y0, Y1
	VFMADD231PS 32(SI)(AX*4), Y0, Y2
	VFMADD231PS 64(SI)(AX*4), Y0, Y3
	VFMADD231PS 96(SI)(AX*4), Y0, Y4
	VMOVUPS Y1, (DI)(AX*4)
	VMOVUPS Y2, 32(DI)(AX*4)
	VMOVUPS Y3, 64(DI)(AX*4)
	VMOVUPS Y4, 96(DI)(AX*4)
	ADDQ $32, AX
	CMPQ AX, DX
	JB axpy32
axpy8:
	CMPQ AX, CX
	JAE axpydone
	VMOVUPS (DI)(AX*4), Y1
	VFMADD231PS (SI)(AX*4), Y0, Y1
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ $8, AX
	JMP axpy8
axpydone:
	VZEROUPPER
	RET

// func addAVX2(dst, a, b *float32, n int)
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
add8:
	VMOVUPS (SI)(AX*4), Y0
	VADDPS (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB add8
	VZEROUPPER
	RET

// func mulAVX2(dst, a, b *float32, n int)
TEXT ·mulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
mul8:
	VMOVUPS (SI)(AX*4), Y0
	VMULPS (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB mul8
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, s float32, n int)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	VBROADCASTSS s+8(FP), Y1
	MOVQ n+16(FP), CX
	XORQ AX, AX
scale8:
	VMULPS (DI)(AX*4), Y1, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB scale8
	VZEROUPPER
	RET

// func mulScaleAVX2(dst, x, w *float32, s float32, n int)
TEXT ·mulScaleAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	VBROADCASTSS s+24(FP), Y1
	MOVQ n+32(FP), CX
	XORQ AX, AX
mulscale8:
	VMULPS (SI)(AX*4), Y1, Y0
	VMULPS (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB mulscale8
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	MOVQ $8, AX
max8:
	CMPQ AX, CX
	JAE maxdone
	VMAXPS (SI)(AX*4), Y0, Y0
	ADDQ $8, AX
	JMP max8
maxdone:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func anyAboveAVX2(x *float32, n int, t float32) bool
// n is a multiple of 8. Ordered compares: NaN is above nothing and nothing
// is above NaN.
TEXT ·anyAboveAVX2(SB), NOSPLIT, $0-25
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS t+16(FP), Y0
	XORQ AX, AX
above32:
	LEAQ 32(AX), DX
	CMPQ DX, CX
	JA above8
	VCMPPS $0x11, (SI)(AX*4), Y0, Y1
	VCMPPS $0x11, 32(SI)(AX*4), Y0, Y2
	VCMPPS $0x11, 64(SI)(AX*4), Y0, Y3
	VCMPPS $0x11, 96(SI)(AX*4), Y0, Y4
	VORPS Y2, Y1, Y1
	VORPS Y4, Y3, Y3
	VORPS Y3, Y1, Y1
	VMOVMSKPS Y1, DX
	TESTL DX, DX
	JNZ abovefound
	ADDQ $32, AX
	JMP above32
above8:
	CMPQ AX, CX
	JAE abovenone
	VCMPPS $0x11, (SI)(AX*4), Y0, Y1
	VMOVMSKPS Y1, DX
	TESTL DX, DX
	JNZ abovefound
	ADDQ $8, AX
	JMP above8
abovenone:
	MOVB $0, ret+24(FP)
	VZEROUPPER
	RET
abovefound:
	MOVB $1, ret+24(FP)
	VZEROUPPER
	RET

// func expSubAVX2(x *float32, m float32, n int) float32
TEXT ·expSubAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), DI
	VBROADCASTSS m+8(FP), Y5
	MOVQ n+16(FP), CX
	VXORPS Y6, Y6, Y6
	XORQ AX, AX
expsub8:
	VMOVUPS (DI)(AX*4), Y0
	VSUBPS Y5, Y0, Y0
	EXP(Y0, Y1, Y2, Y3)
	VMOVUPS Y0, (DI)(AX*4)
	VADDPS Y0, Y6, Y6
	ADDQ $8, AX
	CMPQ AX, CX
	JB expsub8
	HSUM(Y6, X6, X1)
	VMOVSS X6, ret+24(FP)
	VZEROUPPER
	RET

// func siluAVX2(dst, x *float32, n int)
TEXT ·siluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VXORPS Y6, Y6, Y6
	XORQ AX, AX
silu8:
	VMOVUPS (SI)(AX*4), Y5
	VSUBPS Y5, Y6, Y0
	EXP(Y0, Y1, Y2, Y3)
	VADDPS one<>(SB), Y0, Y0
	VDIVPS Y0, Y5, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB silu8
	VZEROUPPER
	RET

// func geluAVX2(dst, x *float32, n int)
// x/2·(1 + tanh(u)) = x / (1 + exp(-2u)), u = √(2/π)·(x + 0.044715·x³).
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
gelu8:
	VMOVUPS (SI)(AX*4), Y5
	VMULPS Y5, Y5, Y0
	VMOVUPS geluK1<>(SB), Y4
	VFMADD213PS geluK0<>(SB), Y0, Y4
	VMULPS Y5, Y4, Y0
	EXP(Y0, Y1, Y2, Y3)
	VADDPS one<>(SB), Y0, Y0
	VDIVPS Y0, Y5, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB gelu8
	VZEROUPPER
	RET

// func bf16ToF32AVX2(dst *float32, src *byte, n int)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
bf16cvt8:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB bf16cvt8
	VZEROUPPER
	RET

// func f16ToF32AVX2(dst *float32, src *byte, n int)
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
f16cvt8:
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JB f16cvt8
	VZEROUPPER
	RET

// func readSumAVX2(p *byte, n int) uint64
// Adds up n bytes (a multiple of 256) as uint64 words, for bandwidth
// measurement.
TEXT ·readSumAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	XORQ AX, AX
	TESTQ CX, CX
	JZ readsum2done
readsum2:
	VPADDQ (SI)(AX*1), Y0, Y0
	VPADDQ 32(SI)(AX*1), Y1, Y1
	VPADDQ 64(SI)(AX*1), Y2, Y2
	VPADDQ 96(SI)(AX*1), Y3, Y3
	VPADDQ 128(SI)(AX*1), Y0, Y0
	VPADDQ 160(SI)(AX*1), Y1, Y1
	VPADDQ 192(SI)(AX*1), Y2, Y2
	VPADDQ 224(SI)(AX*1), Y3, Y3
	ADDQ $256, AX
	CMPQ AX, CX
	JB readsum2
readsum2done:
	VPADDQ Y1, Y0, Y0
	VPADDQ Y3, Y2, Y2
	VPADDQ Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDQ X1, X0, X0
	VMOVQ X0, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// func readSumAVX512(p *byte, n int) uint64
// Adds up n bytes (a multiple of 512) as uint64 words.
TEXT ·readSumAVX512(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	XORQ AX, AX
	TESTQ CX, CX
	JZ readsum5done
readsum5:
	VPADDQ (SI)(AX*1), Z0, Z0
	VPADDQ 64(SI)(AX*1), Z1, Z1
	VPADDQ 128(SI)(AX*1), Z2, Z2
	VPADDQ 192(SI)(AX*1), Z3, Z3
	VPADDQ 256(SI)(AX*1), Z0, Z0
	VPADDQ 320(SI)(AX*1), Z1, Z1
	VPADDQ 384(SI)(AX*1), Z2, Z2
	VPADDQ 448(SI)(AX*1), Z3, Z3
	ADDQ $512, AX
	CMPQ AX, CX
	JB readsum5
readsum5done:
	VPADDQ Z1, Z0, Z0
	VPADDQ Z3, Z2, Z2
	VPADDQ Z2, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDQ Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDQ X1, X0, X0
	VMOVQ X0, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// func dotsAVX2(out, q, k *float32, stride, n, hd int)
//
// out[i] = Σ_{d<hd} q[d]·k[i·stride+d] for i < n (n ≥ 1; hd a multiple of
// 8; stride in elements).
TEXT ·dotsAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), BX
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	MOVQ n+32(FP), CX
	MOVQ hd+40(FP), DX
dotsrow:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX
dots16:
	LEAQ 16(AX), R9
	CMPQ R9, DX
	JA dots8
	VMOVUPS (SI)(AX*4), Y2
	VMOVUPS 32(SI)(AX*4), Y3
	VFMADD231PS (BX)(AX*4), Y2, Y0
	VFMADD231PS 32(BX)(AX*4), Y3, Y1
	MOVQ R9, AX
	JMP dots16
dots8:
	CMPQ AX, DX
	JAE dotsred
	VMOVUPS (SI)(AX*4), Y2
	VFMADD231PS (BX)(AX*4), Y2, Y0
dotsred:
	VADDPS Y1, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R8, BX
	DECQ CX
	JNZ dotsrow
	VZEROUPPER
	RET

// func axpysAVX2(o, w, v *float32, stride, n, hd int)
//
// o[d] += w[i]·v[i·stride+d] for i = 0..n−1 in turn (n ≥ 1), d < hd (a
// multiple of 8): the sums of n Axpy calls, in their order, with the
// columns of o kept in registers, 64 at a time.
TEXT ·axpysAVX2(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ v+16(FP), BX
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	MOVQ n+32(FP), CX
	MOVQ hd+40(FP), DX
	XORQ AX, AX
axpyscols:
	MOVQ DX, R9
	SUBQ AX, R9
	JBE axpysdone
	MOVQ BX, R10
	MOVQ SI, R11
	MOVQ CX, R12
	CMPQ R9, $64
	JB axpys8
	VMOVUPS (DI)(AX*4), Y0
	VMOVUPS 32(DI)(AX*4), Y1
	VMOVUPS 64(DI)(AX*4), Y2
	VMOVUPS 96(DI)(AX*4), Y3
	VMOVUPS 128(DI)(AX*4), Y4
	VMOVUPS 160(DI)(AX*4), Y5
	VMOVUPS 192(DI)(AX*4), Y6
	VMOVUPS 224(DI)(AX*4), Y7
axpysrow64:
	VBROADCASTSS (R11), Y8
	VFMADD231PS (R10)(AX*4), Y8, Y0
	VFMADD231PS 32(R10)(AX*4), Y8, Y1
	VFMADD231PS 64(R10)(AX*4), Y8, Y2
	VFMADD231PS 96(R10)(AX*4), Y8, Y3
	VFMADD231PS 128(R10)(AX*4), Y8, Y4
	VFMADD231PS 160(R10)(AX*4), Y8, Y5
	VFMADD231PS 192(R10)(AX*4), Y8, Y6
	VFMADD231PS 224(R10)(AX*4), Y8, Y7
	ADDQ $4, R11
	ADDQ R8, R10
	DECQ R12
	JNZ axpysrow64
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	VMOVUPS Y2, 64(DI)(AX*4)
	VMOVUPS Y3, 96(DI)(AX*4)
	VMOVUPS Y4, 128(DI)(AX*4)
	VMOVUPS Y5, 160(DI)(AX*4)
	VMOVUPS Y6, 192(DI)(AX*4)
	VMOVUPS Y7, 224(DI)(AX*4)
	ADDQ $64, AX
	JMP axpyscols
axpys8:
	VMOVUPS (DI)(AX*4), Y0
axpysrow8:
	VBROADCASTSS (R11), Y8
	VFMADD231PS (R10)(AX*4), Y8, Y0
	ADDQ $4, R11
	ADDQ R8, R10
	DECQ R12
	JNZ axpysrow8
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP axpyscols
axpysdone:
	VZEROUPPER
	RET

// The grouped attention kernels: G query heads of one key-value head at
// once (GQA), each key and value row read once for all G. They compute
// exactly what dotsAVX2 and axpysAVX2 compute per head: the same products
// and sums in the same order (the 16 lanes of a Z accumulator are
// dotsAVX2's Y0 and Y1), so the results are bitwise the same. hd is a
// multiple of 16 and n at least 1.

// GDOTRED reduces dot accumulator z (its Y half y, X x) as dotsAVX2 does
// and stores the sum at p.
#define GDOTRED(z, y, x, p) \
	VEXTRACTF64X4 $1, z, Y5; \
	VADDPS Y5, y, y; \
	HSUM(y, x, X5); \
	VMOVSS x, p

// GQRED reduces the dot accumulators a, b, c, d of four keys (one query
// head) at once and stores the four sums at p: each sum pairs the same
// lanes in the same order as GDOTRED (lane l with l+8, then l with l+4,
// then 0 with 1 and 2 with 3, then the two), so that the scores are
// bitwise those of one key at a time. K1 must hold 0x1111.
#define GQRED(a, b, c, d, p) \
	VSHUFF64X2 $0x44, b, a, Z21; \
	VSHUFF64X2 $0xEE, b, a, Z22; \
	VADDPS Z22, Z21, Z21; \
	VSHUFF64X2 $0x44, d, c, Z22; \
	VSHUFF64X2 $0xEE, d, c, Z23; \
	VADDPS Z23, Z22, Z22; \
	VSHUFF32X4 $0x88, Z22, Z21, Z23; \
	VSHUFF32X4 $0xDD, Z22, Z21, Z24; \
	VADDPS Z24, Z23, Z23; \
	VPERMILPS $0xB1, Z23, Z24; \
	VADDPS Z24, Z23, Z23; \
	VPERMILPS $0x4E, Z23, Z24; \
	VADDPS Z24, Z23, Z23; \
	VCOMPRESSPS Z23, K1, p

// func dotsG4AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)
//
// out[g·ldo+i] = q[g·hd : (g+1)·hd] · k[i·stride : i·stride+hd], g < 4:
// four keys at a time (their rows at BX, R9, R14, R15; sixteen
// accumulators, Z(4h+j) for head h and key j), reduced together by
// GQRED; the last n mod 4 keys one at a time.
TEXT ·dotsG4AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R13
	SHLQ $2, R13
	MOVQ q+16(FP), SI
	MOVQ k+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), DX
	LEAQ (SI)(DX*4), R10
	LEAQ (R10)(DX*4), R11
	LEAQ (R11)(DX*4), R12
	MOVL $0x1111, AX
	KMOVW AX, K1
g4quad:
	CMPQ CX, $4
	JB g4tail
	LEAQ (BX)(R8*1), R9
	LEAQ (BX)(R8*2), R14
	LEAQ (R9)(R8*2), R15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	XORQ AX, AX
g4qcol:
	VMOVUPS (BX)(AX*4), Z16
	VMOVUPS (R9)(AX*4), Z17
	VMOVUPS (R14)(AX*4), Z18
	VMOVUPS (R15)(AX*4), Z19
	VMOVUPS (SI)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	VMOVUPS (R10)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z4
	VFMADD231PS Z20, Z17, Z5
	VFMADD231PS Z20, Z18, Z6
	VFMADD231PS Z20, Z19, Z7
	VMOVUPS (R11)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z8
	VFMADD231PS Z20, Z17, Z9
	VFMADD231PS Z20, Z18, Z10
	VFMADD231PS Z20, Z19, Z11
	VMOVUPS (R12)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z12
	VFMADD231PS Z20, Z17, Z13
	VFMADD231PS Z20, Z18, Z14
	VFMADD231PS Z20, Z19, Z15
	ADDQ $16, AX
	CMPQ AX, DX
	JB g4qcol
	GQRED(Z0, Z1, Z2, Z3, (DI))
	GQRED(Z4, Z5, Z6, Z7, (DI)(R13*1))
	GQRED(Z8, Z9, Z10, Z11, (DI)(R13*2))
	LEAQ (DI)(R13*2), AX
	GQRED(Z12, Z13, Z14, Z15, (AX)(R13*1))
	ADDQ $16, DI
	LEAQ (BX)(R8*4), BX
	SUBQ $4, CX
	JMP g4quad
g4tail:
	TESTQ CX, CX
	JZ g4done
	LEAQ (DI)(R13*1), R9
g4row:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ AX, AX
g4col:
	VMOVUPS (BX)(AX*4), Z4
	VFMADD231PS (SI)(AX*4), Z4, Z0
	VFMADD231PS (R10)(AX*4), Z4, Z1
	VFMADD231PS (R11)(AX*4), Z4, Z2
	VFMADD231PS (R12)(AX*4), Z4, Z3
	ADDQ $16, AX
	CMPQ AX, DX
	JB g4col
	GDOTRED(Z0, Y0, X0, (DI))
	GDOTRED(Z1, Y1, X1, (R9))
	GDOTRED(Z2, Y2, X2, (DI)(R13*2))
	GDOTRED(Z3, Y3, X3, (R9)(R13*2))
	ADDQ $4, DI
	ADDQ $4, R9
	ADDQ R8, BX
	DECQ CX
	JNZ g4row
g4done:
	VZEROUPPER
	RET

// func dotsG2AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)
//
// Four keys at a time as dotsG4AVX512, then one at a time.
TEXT ·dotsG2AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R13
	SHLQ $2, R13
	MOVQ q+16(FP), SI
	MOVQ k+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), DX
	LEAQ (SI)(DX*4), R10
	MOVL $0x1111, AX
	KMOVW AX, K1
g2quad:
	CMPQ CX, $4
	JB g2tail
	LEAQ (BX)(R8*1), R9
	LEAQ (BX)(R8*2), R14
	LEAQ (R9)(R8*2), R15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ AX, AX
g2qcol:
	VMOVUPS (BX)(AX*4), Z16
	VMOVUPS (R9)(AX*4), Z17
	VMOVUPS (R14)(AX*4), Z18
	VMOVUPS (R15)(AX*4), Z19
	VMOVUPS (SI)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	VMOVUPS (R10)(AX*4), Z20
	VFMADD231PS Z20, Z16, Z4
	VFMADD231PS Z20, Z17, Z5
	VFMADD231PS Z20, Z18, Z6
	VFMADD231PS Z20, Z19, Z7
	ADDQ $16, AX
	CMPQ AX, DX
	JB g2qcol
	GQRED(Z0, Z1, Z2, Z3, (DI))
	GQRED(Z4, Z5, Z6, Z7, (DI)(R13*1))
	ADDQ $16, DI
	LEAQ (BX)(R8*4), BX
	SUBQ $4, CX
	JMP g2quad
g2tail:
	TESTQ CX, CX
	JZ g2done
	LEAQ (DI)(R13*1), R9
g2row:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	XORQ AX, AX
g2col:
	VMOVUPS (BX)(AX*4), Z4
	VFMADD231PS (SI)(AX*4), Z4, Z0
	VFMADD231PS (R10)(AX*4), Z4, Z1
	ADDQ $16, AX
	CMPQ AX, DX
	JB g2col
	GDOTRED(Z0, Y0, X0, (DI))
	GDOTRED(Z1, Y1, X1, (R9))
	ADDQ $4, DI
	ADDQ $4, R9
	ADDQ R8, BX
	DECQ CX
	JNZ g2row
g2done:
	VZEROUPPER
	RET

// func axpysG4AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)
//
// o[g·hd+c] += w[g·ldw+i]·v[i·stride+c] for i in order, g < 4: columns in
// blocks of 64 (4 Z per head), then of 16. Head g's rows: o at DI, R10,
// DI+2·hd, R10+2·hd (R11 = hd bytes); w at SI, R9, SI+2·ldw, R9+2·ldw
// (R12 = ldw bytes), moving on by a row each step.
TEXT ·axpysG4AVX512(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ ldw+16(FP), R12
	SHLQ $2, R12
	MOVQ v+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), AX
	LEAQ (AX*4), R11
	LEAQ (DI)(R11*1), R10
ag4cols:
	TESTQ AX, AX
	JLE ag4done
	MOVQ w+8(FP), SI
	LEAQ (SI)(R12*1), R9
	MOVQ BX, DX
	MOVQ CX, R13
	CMPQ AX, $64
	JB ag4b16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VMOVUPS (R10), Z4
	VMOVUPS 64(R10), Z5
	VMOVUPS 128(R10), Z6
	VMOVUPS 192(R10), Z7
	VMOVUPS (DI)(R11*2), Z8
	VMOVUPS 64(DI)(R11*2), Z9
	VMOVUPS 128(DI)(R11*2), Z10
	VMOVUPS 192(DI)(R11*2), Z11
	VMOVUPS (R10)(R11*2), Z12
	VMOVUPS 64(R10)(R11*2), Z13
	VMOVUPS 128(R10)(R11*2), Z14
	VMOVUPS 192(R10)(R11*2), Z15
ag4row64:
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	VMOVUPS 128(DX), Z18
	VMOVUPS 192(DX), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R9), Z21
	VBROADCASTSS (SI)(R12*2), Z22
	VBROADCASTSS (R9)(R12*2), Z23
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z18, Z22, Z10
	VFMADD231PS Z19, Z22, Z11
	VFMADD231PS Z16, Z23, Z12
	VFMADD231PS Z17, Z23, Z13
	VFMADD231PS Z18, Z23, Z14
	VFMADD231PS Z19, Z23, Z15
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ ag4row64
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, (R10)
	VMOVUPS Z5, 64(R10)
	VMOVUPS Z6, 128(R10)
	VMOVUPS Z7, 192(R10)
	VMOVUPS Z8, (DI)(R11*2)
	VMOVUPS Z9, 64(DI)(R11*2)
	VMOVUPS Z10, 128(DI)(R11*2)
	VMOVUPS Z11, 192(DI)(R11*2)
	VMOVUPS Z12, (R10)(R11*2)
	VMOVUPS Z13, 64(R10)(R11*2)
	VMOVUPS Z14, 128(R10)(R11*2)
	VMOVUPS Z15, 192(R10)(R11*2)
	ADDQ $256, DI
	ADDQ $256, R10
	ADDQ $256, BX
	SUBQ $64, AX
	JMP ag4cols
ag4b16:
	VMOVUPS (DI), Z0
	VMOVUPS (R10), Z4
	VMOVUPS (DI)(R11*2), Z8
	VMOVUPS (R10)(R11*2), Z12
ag4row16:
	VMOVUPS (DX), Z16
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R9), Z21
	VBROADCASTSS (SI)(R12*2), Z22
	VBROADCASTSS (R9)(R12*2), Z23
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z16, Z23, Z12
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ ag4row16
	VMOVUPS Z0, (DI)
	VMOVUPS Z4, (R10)
	VMOVUPS Z8, (DI)(R11*2)
	VMOVUPS Z12, (R10)(R11*2)
	ADDQ $64, DI
	ADDQ $64, R10
	ADDQ $64, BX
	SUBQ $16, AX
	JMP ag4cols
ag4done:
	VZEROUPPER
	RET

// func axpysG2AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)
TEXT ·axpysG2AVX512(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ ldw+16(FP), R12
	SHLQ $2, R12
	MOVQ v+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), AX
	LEAQ (DI)(AX*4), R10
ag2cols:
	TESTQ AX, AX
	JLE ag2done
	MOVQ w+8(FP), SI
	LEAQ (SI)(R12*1), R9
	MOVQ BX, DX
	MOVQ CX, R13
	CMPQ AX, $64
	JB ag2b16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VMOVUPS (R10), Z4
	VMOVUPS 64(R10), Z5
	VMOVUPS 128(R10), Z6
	VMOVUPS 192(R10), Z7
ag2row64:
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	VMOVUPS 128(DX), Z18
	VMOVUPS 192(DX), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R9), Z21
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ ag2row64
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, (R10)
	VMOVUPS Z5, 64(R10)
	VMOVUPS Z6, 128(R10)
	VMOVUPS Z7, 192(R10)
	ADDQ $256, DI
	ADDQ $256, R10
	ADDQ $256, BX
	SUBQ $64, AX
	JMP ag2cols
ag2b16:
	VMOVUPS (DI), Z0
	VMOVUPS (R10), Z4
ag2row16:
	VMOVUPS (DX), Z16
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R9), Z21
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z16, Z21, Z4
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ ag2row16
	VMOVUPS Z0, (DI)
	VMOVUPS Z4, (R10)
	ADDQ $64, DI
	ADDQ $64, R10
	ADDQ $64, BX
	SUBQ $16, AX
	JMP ag2cols
ag2done:
	VZEROUPPER
	RET

// The AVX2 forms of the grouped kernels: the same results, 16 columns at
// a time (two Y per head).

// func dotsG4AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)
TEXT ·dotsG4AVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R13
	SHLQ $2, R13
	MOVQ q+16(FP), SI
	MOVQ k+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), DX
	LEAQ (SI)(DX*4), R10
	LEAQ (R10)(DX*4), R11
	LEAQ (R11)(DX*4), R12
	LEAQ (DI)(R13*1), R9
a4row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
a4col:
	VMOVUPS (BX)(AX*4), Y8
	VMOVUPS 32(BX)(AX*4), Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS 32(R10)(AX*4), Y9, Y3
	VFMADD231PS (R11)(AX*4), Y8, Y4
	VFMADD231PS 32(R11)(AX*4), Y9, Y5
	VFMADD231PS (R12)(AX*4), Y8, Y6
	VFMADD231PS 32(R12)(AX*4), Y9, Y7
	ADDQ $16, AX
	CMPQ AX, DX
	JB a4col
	VADDPS Y1, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, (DI)
	VADDPS Y3, Y2, Y2
	HSUM(Y2, X2, X3)
	VMOVSS X2, (R9)
	VADDPS Y5, Y4, Y4
	HSUM(Y4, X4, X5)
	VMOVSS X4, (DI)(R13*2)
	VADDPS Y7, Y6, Y6
	HSUM(Y6, X6, X7)
	VMOVSS X6, (R9)(R13*2)
	ADDQ $4, DI
	ADDQ $4, R9
	ADDQ R8, BX
	DECQ CX
	JNZ a4row
	VZEROUPPER
	RET

// func dotsG2AVX2(out *float32, ldo int, q, k *float32, stride, n, hd int)
TEXT ·dotsG2AVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R13
	SHLQ $2, R13
	MOVQ q+16(FP), SI
	MOVQ k+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), DX
	LEAQ (SI)(DX*4), R10
	LEAQ (DI)(R13*1), R9
a2row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
a2col:
	VMOVUPS (BX)(AX*4), Y8
	VMOVUPS 32(BX)(AX*4), Y9
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS 32(SI)(AX*4), Y9, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS 32(R10)(AX*4), Y9, Y3
	ADDQ $16, AX
	CMPQ AX, DX
	JB a2col
	VADDPS Y1, Y0, Y0
	HSUM(Y0, X0, X1)
	VMOVSS X0, (DI)
	VADDPS Y3, Y2, Y2
	HSUM(Y2, X2, X3)
	VMOVSS X2, (R9)
	ADDQ $4, DI
	ADDQ $4, R9
	ADDQ R8, BX
	DECQ CX
	JNZ a2row
	VZEROUPPER
	RET

// func axpysG4AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)
TEXT ·axpysG4AVX2(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ ldw+16(FP), R12
	SHLQ $2, R12
	MOVQ v+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), AX
	LEAQ (AX*4), R11
	LEAQ (DI)(R11*1), R10
b4cols:
	TESTQ AX, AX
	JLE b4done
	MOVQ w+8(FP), SI
	LEAQ (SI)(R12*1), R9
	MOVQ BX, DX
	MOVQ CX, R13
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS (R10), Y2
	VMOVUPS 32(R10), Y3
	VMOVUPS (DI)(R11*2), Y4
	VMOVUPS 32(DI)(R11*2), Y5
	VMOVUPS (R10)(R11*2), Y6
	VMOVUPS 32(R10)(R11*2), Y7
b4row:
	VMOVUPS (DX), Y8
	VMOVUPS 32(DX), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R9), Y11
	VBROADCASTSS (SI)(R12*2), Y12
	VBROADCASTSS (R9)(R12*2), Y13
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ b4row
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (R10)
	VMOVUPS Y3, 32(R10)
	VMOVUPS Y4, (DI)(R11*2)
	VMOVUPS Y5, 32(DI)(R11*2)
	VMOVUPS Y6, (R10)(R11*2)
	VMOVUPS Y7, 32(R10)(R11*2)
	ADDQ $64, DI
	ADDQ $64, R10
	ADDQ $64, BX
	SUBQ $16, AX
	JMP b4cols
b4done:
	VZEROUPPER
	RET

// func axpysG2AVX2(o, w *float32, ldw int, v *float32, stride, n, hd int)
TEXT ·axpysG2AVX2(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ ldw+16(FP), R12
	SHLQ $2, R12
	MOVQ v+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), AX
	LEAQ (DI)(AX*4), R10
b2cols:
	TESTQ AX, AX
	JLE b2done
	MOVQ w+8(FP), SI
	LEAQ (SI)(R12*1), R9
	MOVQ BX, DX
	MOVQ CX, R13
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS (R10), Y2
	VMOVUPS 32(R10), Y3
b2row:
	VMOVUPS (DX), Y8
	VMOVUPS 32(DX), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (R9), Y11
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	ADDQ R8, DX
	ADDQ $4, SI
	ADDQ $4, R9
	DECQ R13
	JNZ b2row
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, (R10)
	VMOVUPS Y3, 32(R10)
	ADDQ $64, DI
	ADDQ $64, R10
	ADDQ $64, BX
	SUBQ $16, AX
	JMP b2cols
b2done:
	VZEROUPPER
	RET

// func dotsG1AVX512(out *float32, ldo int, q, k *float32, stride, n, hd int)
//
// dotsAVX2 for one head with Z registers: lanes 0–7 and 8–15 of Z0 are
// its Y0 and Y1.
//
// Four keys at a time as dotsG4AVX512, then one at a time.
TEXT ·dotsG1AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ q+16(FP), SI
	MOVQ k+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), DX
	MOVL $0x1111, AX
	KMOVW AX, K1
g1quad:
	CMPQ CX, $4
	JB g1tail
	LEAQ (BX)(R8*1), R9
	LEAQ (BX)(R8*2), R14
	LEAQ (R9)(R8*2), R15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ AX, AX
g1qcol:
	VMOVUPS (SI)(AX*4), Z20
	VFMADD231PS (BX)(AX*4), Z20, Z0
	VFMADD231PS (R9)(AX*4), Z20, Z1
	VFMADD231PS (R14)(AX*4), Z20, Z2
	VFMADD231PS (R15)(AX*4), Z20, Z3
	ADDQ $16, AX
	CMPQ AX, DX
	JB g1qcol
	GQRED(Z0, Z1, Z2, Z3, (DI))
	ADDQ $16, DI
	LEAQ (BX)(R8*4), BX
	SUBQ $4, CX
	JMP g1quad
g1tail:
	TESTQ CX, CX
	JZ g1done
g1row:
	VPXORD Z0, Z0, Z0
	XORQ AX, AX
g1col:
	VMOVUPS (BX)(AX*4), Z4
	VFMADD231PS (SI)(AX*4), Z4, Z0
	ADDQ $16, AX
	CMPQ AX, DX
	JB g1col
	GDOTRED(Z0, Y0, X0, (DI))
	ADDQ $4, DI
	ADDQ R8, BX
	DECQ CX
	JNZ g1row
g1done:
	VZEROUPPER
	RET

// func axpysG1AVX512(o, w *float32, ldw int, v *float32, stride, n, hd int)
TEXT ·axpysG1AVX512(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ v+24(FP), BX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ n+40(FP), CX
	MOVQ hd+48(FP), AX
ag1cols:
	TESTQ AX, AX
	JLE ag1done
	MOVQ w+8(FP), SI
	MOVQ BX, DX
	MOVQ CX, R13
	CMPQ AX, $64
	JB ag1b16
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
ag1row64:
	VBROADCASTSS (SI), Z20
	VFMADD231PS (DX), Z20, Z0
	VFMADD231PS 64(DX), Z20, Z1
	VFMADD231PS 128(DX), Z20, Z2
	VFMADD231PS 192(DX), Z20, Z3
	ADDQ R8, DX
	ADDQ $4, SI
	DECQ R13
	JNZ ag1row64
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, DI
	ADDQ $256, BX
	SUBQ $64, AX
	JMP ag1cols
ag1b16:
	VMOVUPS (DI), Z0
ag1row16:
	VBROADCASTSS (SI), Z20
	VFMADD231PS (DX), Z20, Z0
	ADDQ R8, DX
	ADDQ $4, SI
	DECQ R13
	JNZ ag1row16
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, BX
	SUBQ $16, AX
	JMP ag1cols
ag1done:
	VZEROUPPER
	RET

// func prefetchRows(p *float32, stride, n, width int)
TEXT ·prefetchRows(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ width+24(FP), DX
	MOVQ step+32(FP), R9
	TESTQ CX, CX
	JLE prdone
	TESTQ DX, DX
	JLE prdone
prrow:
	XORQ AX, AX
prline:
	PREFETCHT0 (SI)(AX*1)
	ADDQ R9, AX
	CMPQ AX, DX
	JB prline
	ADDQ R8, SI
	DECQ CX
	JNZ prrow
prdone:
	RET
