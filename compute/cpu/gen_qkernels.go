//go:build ignore

// gen_qkernels writes qmatmul_amd64.s and qmatmul_amd64.go: the AVX2 and
// AVX-512 VNNI micro-kernels of the quantized matrix products (see
// qmatmul.go). Run it with go generate.
//
// Every kernel computes an R×C block of dot products: R activation rows,
// quantized in the layout of its weight type (xfmt), times C weight rows in
// their stored blocks, over a.nb weight blocks. The sums go to a.dst (row t
// at a.dst + t*a.ldd bytes) or, with a.dst nil, to a.out[t*8+r]. Row
// pointers come from the qargs struct, so the caller can repeat a pointer
// to pad a block at the edge of the matrix.
//
// Legacy formats (Q8_0, Q4_0): per weight block and activation row, an
// integer sum of 32 products lands in the int32 lanes of a vector (8 lanes
// per block), is converted to float32, multiplied by the activation scale
// (spread over those lanes) and added to the float accumulator times the
// weight scale. The AVX-512 kernels take two blocks per 64-byte vector; the
// activation layout puts codes and scales in the lanes the weights unpack
// to.
//
// k-quants (Q4_K, Q6_K): per super-block, the kernel first unpacks each
// weight row's sub-block scales into vectors of 16-bit lanes, its
// correction vector (Q4_K: dmin·min per sub-block; Q6_K: 32·d·scale, for
// the codes' offset of 32) and its scale d, into the scratch area of the
// qargs struct. Then, per 64 (AVX-512) or 32 (AVX2) weights: VPMADDUBSW
// sums products pairwise to 16 bits, and VPDPWSSD (or VPMADDWD + VPADDD)
// multiplies the pairs by the sub-block scales and accumulates 32-bit
// integers for the whole super-block. At its end the integer sum is
// scaled by d·dx into the float accumulator, and the dot product of the
// row's correction vector with the activation's per-sub-block sums (times
// dx) is subtracted.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

// qargs offsets; TestQargsLayout checks them against the Go struct.
const (
	offX       = 0
	offW       = 64
	offNB      = 128
	offDst     = 136
	offLdd     = 144
	offRows    = 152
	offRstride = 160
	offOut     = 168
	offScr     = 424
	offGsub    = 3576
	scrRow     = 384 // scratch bytes per weight row
	qmaxC      = 8
)

type isa int

const (
	avx2 isa = iota
	avx512
)

func (i isa) String() string { return [...]string{"AVX2", "AVX512"}[i] }

type qtype int

const (
	q8_0 qtype = iota
	q4_0
	q4_k
	q6_k
	q5_0
	iq4_nl
	q5_k
)

func (q qtype) String() string {
	return [...]string{"Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q5_0", "IQ4_NL", "Q5_K"}[q]
}

// blockBytes is the size of one weight block.
func (q qtype) blockBytes() int { return [...]int{34, 18, 144, 210, 22, 18, 176}[q] }

// legacy reports whether q has 32-element blocks.
func (q qtype) legacy() bool { return q != q4_k && q != q6_k && q != q5_k }

// k4 reports whether q has Q4_K's scales and mins (Q4_K, Q5_K).
func (q qtype) k4() bool { return q == q4_k || q == q5_k }

// qsOff is the offset of the 4-bit codes in a Q4_K or Q5_K block.
func (q qtype) qsOff() int {
	if q == q5_k {
		return 48
	}
	return 16
}

type kern struct {
	isa  isa
	typ  qtype
	r, c int
	pf   int  // prefetch distance in weight bytes, 0 for none
	x4   bool // Q4_0 on AVX-512 VBMI: four blocks per step (layout xfL128Q4)
	// MLX affine weights of mlx bits (typ unused) with scales and biases
	// of type scale ("BF16", "F16" or "F32"); 0 for the ggml types.
	mlx   int
	scale string
}

func (k kern) name() string {
	n := fmt.Sprintf("qk%s%sR%dC%d", k.isa, k.typ, k.r, k.c)
	if k.mlx > 0 {
		n = fmt.Sprintf("qk%sMLX%d%sR%dC%d", k.isa, k.mlx, k.scale, k.r, k.c)
	}
	if k.x4 {
		n = fmt.Sprintf("qk%sVBMI%sR%dC%d", k.isa, k.typ, k.r, k.c)
	}
	if k.pf > 0 {
		n += fmt.Sprintf("p%d", k.pf)
	}
	return n
}

// xfmt returns the Go name of the activation layout the kernel reads.
func (k kern) xfmt() string {
	switch {
	case k.mlx > 0:
		return fmt.Sprintf("xfM%d", k.mlx)
	case k.typ.k4():
		return "xfK4"
	case k.typ == q6_k:
		return "xfK6"
	case k.isa == avx2:
		return "xfL32"
	case k.x4:
		return "xfL128Q4"
	case k.typ == q8_0:
		return "xfL64Q8"
	}
	return "xfL64Q4"
}

// xoff returns the code offset of layout xfL32 for the kernel's type.
func (k kern) vbmi() bool { return k.x4 }

// multi reports whether the kernel loops over a.rows groups of C weight
// rows, a.rstride bytes apart (one-row kernels with registers to spare).
func (k kern) multi() bool { return k.r == 1 && k.c <= 5 }

// xoff is the code offset of the legacy layouts: the kernel adds −xoff·Σx
// per activation block to the block's integer sum.
func (k kern) xoff() int {
	switch {
	case k.typ == q4_0:
		return 8
	case k.typ == q5_0:
		return 16
	case k.isa == avx512 && (k.typ == q8_0 || k.typ == iq4_nl):
		return 128 // weights made unsigned by adding 128
	}
	return 0
}

// xbytes returns the size of one group of the kernel's activation layout.
func (k kern) xbytes() int {
	switch {
	case !k.typ.legacy():
		return 384
	case k.isa == avx2:
		return 96
	case k.x4:
		return 256
	}
	return 192
}

// gprs the kernels use for row pointers: not SP, BP (frame pointer), R15
// (GOT base in dynamically linked code), DI (the qargs pointer), CX (the
// loop count), AX or DX.
var gprs = []string{"BX", "SI", "R8", "R9", "R10", "R11", "R12", "R13", "R14"}

type gen struct {
	b bytes.Buffer
	k kern
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.b, "\t"+format+"\n", args...)
}

func (g *gen) label(l string) { fmt.Fprintf(&g.b, "%s:\n", l) }

func (g *gen) xp(t int) string { return gprs[t] }
func (g *gen) wp(r int) string { return gprs[g.k.r+r] }

// off formats a memory operand off(reg).
func off(o int, reg string) string {
	if o == 0 {
		return "(" + reg + ")"
	}
	return fmt.Sprintf("%d(%s)", o, reg)
}

func z(i int) string { return fmt.Sprintf("Z%d", i) }
func y(i int) string { return fmt.Sprintf("Y%d", i) }
func x(i int) string { return fmt.Sprintf("X%d", i) }

// scr returns the scratch operand of weight row r: AX holds the first
// 64-byte boundary in the qargs scratch area (see alignScratch).
func scr(r, o int) string { return off(r*scrRow+o, "AX") }

// alignScratch points AX at the first 64-byte boundary of the scratch
// area, so that the vectors stored there do not straddle cache lines.
func (g *gen) alignScratch() {
	g.p("LEAQ %d(DI), AX", offScr+63)
	g.p("ANDQ $-64, AX")
}

// temps hands out vector registers in turn from a range, so that
// consecutive independent operations use different registers.
type temps struct {
	lo, n, i int
}

func (t *temps) next() int {
	r := t.lo + t.i%t.n
	t.i++
	return r
}

func (g *gen) kernel(k kern) {
	g.k = k
	if k.r+k.c > len(gprs) {
		log.Fatalf("%s: too many row pointers", k.name())
	}
	name := k.name()
	fmt.Fprintf(&g.b, "\n// func %s(a *qargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	if k.multi() {
		// R11: dst, R12: the bytes of a group of rows, R13: groups
		// left. a.w holds the current group's rows (and is advanced).
		g.p("MOVQ %d(DI), R13", offRows)
		g.p("MOVQ %d(DI), R12", offRstride)
		g.p("IMUL3Q $%d, R12, R12", k.c)
		g.p("MOVQ %d(DI), R11", offDst)
		g.label(name + "_rows")
		for r := 0; r < k.c; r++ {
			g.p("MOVQ %d(DI), %s", offW+8*r, g.wp(r))
		}
		g.p("MOVQ %d(DI), CX", offNB)
		g.p("MOVQ %d(DI), %s", offX, g.xp(0))
	} else {
		g.p("MOVQ %d(DI), CX", offNB)
		for t := 0; t < k.r; t++ {
			g.p("MOVQ %d(DI), %s", offX+8*t, g.xp(t))
		}
		for r := 0; r < k.c; r++ {
			g.p("MOVQ %d(DI), %s", offW+8*r, g.wp(r))
		}
	}
	switch {
	case k.mlx > 0:
		g.mlx2()
	case k.x4:
		g.legacy512x4()
	case k.isa == avx512 && k.typ.legacy():
		g.legacy512()
	case k.isa == avx512:
		g.kquant512()
	case k.typ.legacy():
		g.legacy2()
	default:
		g.kquant2()
	}
	g.reduce()
}

func (g *gen) acc(t, r int) int { return t*g.k.c + r }

// prefetch fetches the weight bytes pf ahead of the wblocks blocks of row r
// a step reads, one cache line at a time.
func (g *gen) prefetch(r, wblocks int) {
	if g.k.pf == 0 {
		return
	}
	for o := 0; o < wblocks*g.k.typ.blockBytes(); o += 64 {
		g.p("PREFETCHT0 %d(%s)", g.k.pf+o, g.wp(r))
	}
}

// advance moves the row pointers to the next group of weight blocks.
func (g *gen) advance(wblocks int) {
	for t := 0; t < g.k.r; t++ {
		g.p("ADDQ $%d, %s", g.k.xbytes(), g.xp(t))
	}
	for r := 0; r < g.k.c; r++ {
		g.p("ADDQ $%d, %s", wblocks*g.k.typ.blockBytes(), g.wp(r))
	}
}

func (g *gen) zeroAcc(n int) {
	for i := 0; i < n; i++ {
		if g.k.isa == avx512 {
			g.p("VPXORD %s, %s, %s", z(i), z(i), z(i))
		} else {
			g.p("VXORPS %s, %s, %s", y(i), y(i), y(i))
		}
	}
}

// legacy512: Q8_0, Q4_0, Q5_0 and IQ4_NL on AVX-512 VNNI, two blocks per
// step. Registers: accumulators, then per weight row its unpacked codes W
// and scales D, then temporaries; Z30 holds the VPERMW index that spreads
// the two blocks' f16 scales over their lanes, Z31 the byte mask (0x0F)
// or bias (0x80), Z29 the fifth bit (0x10) of Q5_0 or the IQ4_NL levels
// (biased by 128). Q5_0's fifth bits become a byte mask built in AX, DX.
func (g *gen) legacy512() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	w := func(r int) int { return nacc + 2*r }
	d := func(r int) int { return nacc + 2*r + 1 }
	h := nacc + 2*C
	top := 30
	if k.typ == q5_0 || k.typ == iq4_nl {
		top = 29
	}
	tmp := temps{lo: h + 1, n: top - (h + 1)}
	if tmp.n < 2 {
		log.Fatalf("%s: out of registers", k.name())
	}
	name := k.name()
	g.zeroAcc(nacc)
	switch k.typ {
	case q8_0:
		g.p("VMOVDQU64 ·qc80<>(SB), Z31")
		g.p("VMOVDQU64 ·qidxQ8<>(SB), Z30")
	case q5_0:
		g.p("VMOVDQU64 ·qc0F<>(SB), Z31")
		g.p("VMOVDQU64 ·qidxQ5<>(SB), Z30")
		g.p("VMOVDQU64 ·qc10<>(SB), Z29")
	default:
		g.p("VMOVDQU64 ·qc0F<>(SB), Z31")
		g.p("VMOVDQU64 ·qidxQ4<>(SB), Z30")
		if k.typ == iq4_nl {
			g.p("VMOVDQU64 ·qiq4u<>(SB), Z29")
		}
	}
	g.p("SHRQ $1, CX")
	g.p("JZ %s_tail", name)
	g.label(name + "_loop")
	g.legacy512Step(w, d, h, &tmp, false)
	g.advance(2)
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_tail")
	g.p("TESTQ $1, %d(DI)", offNB)
	g.p("JZ %s_reduce", name)
	g.legacy512Step(w, d, h, &tmp, true)
	g.label(name + "_reduce")
}

func (g *gen) legacy512Step(w, d func(int) int, h int, tmp *temps, tail bool) {
	k := g.k
	for r := 0; r < k.c; r++ {
		wp := g.wp(r)
		W, D := w(r), d(r)
		if k.typ == q5_0 {
			g.q5bits512(W, h, wp, tail)
			if !tail {
				g.p("VPERMW (%s), Y30, %s", wp, y(D))
				g.p("VCVTPH2PS %s, %s", y(D), z(D))
				g.prefetch(r, 2)
			} else {
				g.p("VPBROADCASTW (%s), %s", wp, y(D))
				g.p("VCVTPH2PS %s, %s", y(D), z(D))
			}
			continue
		}
		switch {
		case (k.typ == q4_0 || k.typ == iq4_nl) && !tail:
			g.p("VMOVDQU64 2(%s), %s", wp, x(W))
			g.p("VINSERTI32X4 $1, 20(%s), %s, %s", wp, y(W), y(W))
			g.p("VPSRLW $4, %s, %s", y(W), y(h))
			g.p("VINSERTI64X4 $1, %s, %s, %s", y(h), z(W), z(W))
			g.p("VPANDD Z31, %s, %s", z(W), z(W))
			if k.typ == iq4_nl {
				g.p("VPSHUFB %s, Z29, %s", z(W), z(W))
			}
			g.p("VPERMW (%s), Y30, %s", wp, y(D))
		case k.typ == q4_0 || k.typ == iq4_nl:
			g.p("VMOVDQU64 2(%s), %s", wp, x(W))
			g.p("VPSRLW $4, %s, %s", x(W), x(h))
			g.p("VINSERTI64X4 $1, %s, %s, %s", y(h), z(W), z(W))
			g.p("VPANDD Z31, %s, %s", z(W), z(W))
			if k.typ == iq4_nl {
				g.p("VPSHUFB %s, Z29, %s", z(W), z(W))
			}
			g.p("VPBROADCASTW (%s), %s", wp, y(D))
		case !tail:
			g.p("VMOVDQU64 2(%s), %s", wp, y(W))
			g.p("VINSERTI64X4 $1, 36(%s), %s, %s", wp, z(W), z(W))
			g.p("VPXORD Z31, %s, %s", z(W), z(W))
			g.p("VPERMW (%s), Z30, %s", wp, z(D))
		default:
			g.p("VMOVDQU64 2(%s), %s", wp, y(W))
			g.p("VPXORD Z31, %s, %s", z(W), z(W))
			g.p("VPBROADCASTW (%s), %s", wp, y(D))
		}
		g.p("VCVTPH2PS %s, %s", y(D), z(D))
		if !tail {
			g.prefetch(r, 2)
		}
	}
	for t := 0; t < k.r; t++ {
		xp := g.xp(t)
		for r := 0; r < k.c; r++ {
			T := tmp.next()
			g.p("VMOVDQU64 128(%s), %s", xp, z(T))
			g.p("VPDPBUSD (%s), %s, %s", xp, z(w(r)), z(T))
			g.p("VCVTDQ2PS %s, %s", z(T), z(T))
			g.p("VMULPS 64(%s), %s, %s", xp, z(T), z(T))
			g.p("VFMADD231PS %s, %s, %s", z(T), z(d(r)), z(g.acc(t, r)))
		}
	}
}

// q5bits512 unpacks the codes of a pair of Q5_0 blocks (one block in the
// tail step) into register W, ordered A0-15, B0-15, A16-31, B16-31 as for
// Q4_0: the low nibbles, then the fifth bits ORed in under a byte mask.
// The mask (bytes, so VPADDB rather than a dword op) is the blocks' 32-bit qh words, A's then B's, with the middle
// 16-bit units swapped: A's low half, B's low half, A's high, B's high.
// The tail leaves D's scales to the caller; otherwise D is left alone too.
func (g *gen) q5bits512(W, h int, wp string, tail bool) {
	g.p("VMOVDQU64 6(%s), %s", wp, x(W))
	if !tail {
		g.p("VINSERTI32X4 $1, 28(%s), %s, %s", wp, y(W), y(W))
		g.p("VPSRLW $4, %s, %s", y(W), y(h))
	} else {
		g.p("VPSRLW $4, %s, %s", x(W), x(h))
	}
	g.p("VINSERTI64X4 $1, %s, %s, %s", y(h), z(W), z(W))
	g.p("VPANDD Z31, %s, %s", z(W), z(W))
	g.p("MOVL 2(%s), AX", wp)
	if !tail {
		g.p("MOVL 24(%s), DX", wp)
		g.p("SHLQ $32, DX")
		g.p("ORQ DX, AX")
	}
	g.p("MOVQ AX, DX")
	g.p("SHRQ $16, DX")
	g.p("XORQ AX, DX")
	g.p("ANDL $0xffff0000, DX")
	g.p("XORQ DX, AX")
	g.p("SHLQ $16, DX")
	g.p("XORQ DX, AX")
	g.p("KMOVQ AX, K4")
	g.p("VPADDB Z29, %s, K4, %s", z(W), z(W)) // byte-masked; the nibbles lack bit 4
}

// legacy512x4: Q4_0 on AVX-512 VBMI, four blocks per step. VPERMT2B
// gathers the four blocks' 16 code bytes into one vector, whose low and
// high nibbles are the blocks' first and last 16 codes (the activation
// layout xfL128Q4 matches); VPERMW spreads the four f16 scales over the
// blocks' lanes. A weight row is read through masked loads, which do not
// fault past its end: 64 bytes, then the 8 bytes after them (the step's
// last block ends at byte 72), and in the final step only the bytes of
// the remaining blocks. Z29-Z31 hold the word and byte indices and 0x0F.
func (g *gen) legacy512x4() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	lo, hi, S, Tt, Tu := nacc, nacc+1, nacc+2, nacc+3, nacc+4
	tmp := temps{lo: nacc + 5, n: 29 - (nacc + 5)}
	if tmp.n < 2 {
		log.Fatalf("%s: out of registers", k.name())
	}
	name := k.name()
	g.zeroAcc(nacc)
	g.p("VMOVDQU64 ·qc0F<>(SB), Z31")
	g.p("VMOVDQU64 ·qidxB4<>(SB), Z30")
	g.p("VMOVDQU64 ·qidxW4<>(SB), Z29")
	// CX: steps before the final one; AX: bytes of the final step.
	g.p("TESTQ CX, CX")
	g.p("JZ %s_reduce", name)
	g.p("MOVQ CX, AX")
	g.p("DECQ CX")
	g.p("SHRQ $2, CX")
	g.p("LEAQ (CX*4), DX")
	g.p("SUBQ DX, AX")
	g.p("IMUL3Q $18, AX, AX")
	g.p("MOVQ $-1, DX")
	g.p("BZHIQ AX, DX, DX")
	g.p("KMOVQ DX, K1")
	g.p("SUBQ $64, AX")
	g.p("MOVQ $0, DX")
	g.p("CMOVQLT DX, AX")
	g.p("MOVQ $-1, DX")
	g.p("BZHIQ AX, DX, DX")
	g.p("KMOVQ DX, K2")
	g.p("MOVQ $0xff, DX")
	g.p("KMOVQ DX, K3")
	g.p("TESTQ CX, CX")
	g.p("JZ %s_tail", name)
	g.label(name + "_loop")
	g.legacy512x4Step(lo, hi, S, Tt, Tu, &tmp, false)
	g.advance(4)
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_tail")
	g.legacy512x4Step(lo, hi, S, Tt, Tu, &tmp, true)
	g.label(name + "_reduce")
}

func (g *gen) legacy512x4Step(lo, hi, S, Tt, Tu int, tmp *temps, tail bool) {
	k := g.k
	for r := 0; r < k.c; r++ {
		wp := g.wp(r)
		if tail {
			g.p("VMOVDQU8.Z (%s), K1, %s", wp, z(Tt))
			g.p("VMOVDQU8.Z 64(%s), K2, %s", wp, z(Tu))
		} else {
			g.p("VMOVDQU64 (%s), %s", wp, z(Tt))
			g.p("VMOVDQU8.Z 64(%s), K3, %s", wp, z(Tu))
		}
		g.p("VPERMW %s, Z29, %s", z(Tt), z(S))
		g.p("VCVTPH2PS %s, %s", y(S), z(S))
		g.p("VPERMT2B %s, Z30, %s", z(Tu), z(Tt))
		g.p("VPSRLW $4, %s, %s", z(Tt), z(hi))
		g.p("VPANDD Z31, %s, %s", z(Tt), z(lo))
		g.p("VPANDD Z31, %s, %s", z(hi), z(hi))
		if !tail {
			g.prefetch(r, 4)
		}
		for t := 0; t < k.r; t++ {
			xp := g.xp(t)
			T := tmp.next()
			g.p("VMOVDQU64 192(%s), %s", xp, z(T))
			g.p("VPDPBUSD (%s), %s, %s", xp, z(lo), z(T))
			g.p("VPDPBUSD 64(%s), %s, %s", xp, z(hi), z(T))
			g.p("VCVTDQ2PS %s, %s", z(T), z(T))
			g.p("VMULPS 128(%s), %s, %s", xp, z(T), z(T))
			g.p("VFMADD231PS %s, %s, %s", z(T), z(S), z(g.acc(t, r)))
		}
	}
}

// kquant512: Q4_K and Q6_K on AVX-512 VNNI, one super-block per step.
// Registers: float accumulators, integer accumulators, temporaries; Z31
// holds the byte mask 0x0F, Z30 0x30 (Q6_K) or 0x10 (Q5_K). Q5_K's fifth
// bits are added under byte masks from VPTESTMB of the qh bytes against
// the chunk's bit.
func (g *gen) kquant512() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	ia := func(t, r int) int { return nacc + g.acc(t, r) }
	top := 31
	if k.typ != q4_k {
		top = 30
	}
	tlo := 2 * nacc
	need := 4
	switch k.typ {
	case q6_k:
		need = 6
	case q5_k:
		need = 5
	}
	if top-tlo < need {
		log.Fatalf("%s: out of registers", k.name())
	}
	T := func(i int) int { return tlo + i }
	name := k.name()
	g.zeroAcc(nacc)
	g.alignScratch()
	g.p("VMOVDQU64 ·qc0F<>(SB), Z31")
	switch k.typ {
	case q6_k:
		g.p("VMOVDQU64 ·qc30<>(SB), Z30")
	case q5_k:
		g.p("VMOVDQU64 ·qc10<>(SB), Z30")
	}
	g.p("TESTQ CX, CX")
	g.p("JZ %s_reduce", name)
	g.label(name + "_loop")
	// Phase A: per weight row, scales, correction vector and d to scratch.
	for r := 0; r < C; r++ {
		wp := g.wp(r)
		if k.typ.k4() {
			g.p("VMOVDQU64 4(%s), %s", wp, x(T(0)))
			g.p("VPSRLD $2, %s, %s", x(T(0)), x(T(1)))
			g.p("VPANDD ·qc30<>(SB), %s, %s", x(T(1)), x(T(1)))
			g.p("VPSHUFD $0xAA, %s, %s", x(T(0)), x(T(2)))
			g.p("VPSRLVD ·qshr04<>(SB), %s, %s", x(T(2)), x(T(2)))
			g.p("VPTERNLOGD $0xF8, Z31, %s, %s", z(T(2)), z(T(1)))
			g.p("VPANDD ·qc3F<>(SB), %s, %s", x(T(0)), x(T(0)))
			g.p("VPUNPCKLDQ %s, %s, %s", x(T(1)), x(T(0)), x(T(0)))
			g.p("VSHUFI32X4 $0, %s, %s, %s", z(T(0)), z(T(0)), z(T(1)))
			for c := 0; c < 4; c++ {
				g.p("VPSHUFB ·qk4sel<>+%d(SB), %s, %s", 64*c, z(T(1)), z(T(2)))
				g.p("VMOVDQU64 %s, %s", z(T(2)), scr(r, 64*c))
			}
			g.p("VPSRLDQ $8, %s, %s", x(T(0)), x(T(0)))
			g.p("VPMOVZXBD %s, %s", x(T(0)), y(T(0)))
			g.p("VCVTDQ2PS %s, %s", y(T(0)), y(T(0)))
			g.p("VPBROADCASTW 2(%s), %s", wp, x(T(2)))
			g.p("VCVTPH2PS %s, %s", x(T(2)), y(T(2)))
			g.p("VMULPS %s, %s, %s", y(T(2)), y(T(0)), y(T(0)))
			g.p("VMOVDQU64 %s, %s", z(T(0)), scr(r, 256))
			g.p("VPBROADCASTW (%s), %s", wp, x(T(2)))
			g.p("VCVTPH2PS %s, %s", x(T(2)), x(T(2)))
			g.p("VMOVSS %s, %s", x(T(2)), scr(r, 320))
			g.prefetch(r, 1)
			continue
		}
		g.p("VPMOVSXBW 192(%s), %s", wp, y(T(0)))
		for c := 0; c < 4; c++ {
			if c%2 == 0 {
				g.p("VSHUFI32X4 $%d, %s, %s, %s", 0x55*(c/2), z(T(0)), z(T(0)), z(T(1)))
			}
			g.p("VPSHUFB ·q6sel<>+%d(SB), %s, %s", 64*(c%2), z(T(1)), z(T(2)))
			g.p("VMOVDQU64 %s, %s", z(T(2)), scr(r, 64*c))
		}
		g.p("VPMOVSXBD 192(%s), %s", wp, z(T(0)))
		g.p("VCVTDQ2PS %s, %s", z(T(0)), z(T(0)))
		g.p("VPBROADCASTW 208(%s), %s", wp, y(T(1)))
		g.p("VCVTPH2PS %s, %s", y(T(1)), z(T(1)))
		g.p("VMULPS %s, %s, %s", z(T(1)), z(T(0)), z(T(0)))
		g.p("VMULPS.BCST ·qf32<>(SB), %s, %s", z(T(0)), z(T(0)))
		g.p("VMOVDQU64 %s, %s", z(T(0)), scr(r, 256))
		g.p("VMOVSS %s, %s", x(T(1)), scr(r, 320))
		g.prefetch(r, 1)
	}
	// Phase B: integer sums.
	tp := temps{lo: T(need - 2), n: 2} // Q5_K: T(3), T(4)
	dot := func(xo int, W int, sc string, first bool, t, r int) {
		P := tp.next()
		g.p("VPMADDUBSW %s, %s, %s", off(xo, g.xp(t)), z(W), z(P))
		if first {
			g.p("VPMADDWD %s, %s, %s", sc, z(P), z(ia(t, r)))
		} else {
			g.p("VPDPWSSD %s, %s, %s", sc, z(P), z(ia(t, r)))
		}
	}
	if k.typ.k4() {
		W, H, QH := T(0), T(1), T(2)
		for r := 0; r < C; r++ {
			if k.typ == q5_k {
				g.p("VBROADCASTI64X4 16(%s), %s", g.wp(r), z(QH))
			}
			for c := 0; c < 4; c++ {
				g.p("VMOVDQU64 %d(%s), %s", k.typ.qsOff()+32*c, g.wp(r), y(W))
				g.p("VPSRLW $4, %s, %s", y(W), y(H))
				g.p("VINSERTI64X4 $1, %s, %s, %s", y(H), z(W), z(W))
				g.p("VPANDD Z31, %s, %s", z(W), z(W))
				if k.typ == q5_k {
					g.p("VPTESTMB ·qk5bit<>+%d(SB), %s, K4", 64*c, z(QH))
					g.p("VPADDB Z30, %s, K4, %s", z(W), z(W))
				}
				for t := 0; t < R; t++ {
					dot(64*c, W, scr(r, 64*c), c == 0, t, r)
				}
			}
		}
	} else {
		L, H, A, B := T(0), T(1), T(2), T(3)
		for hf := 0; hf < 2; hf++ {
			for r := 0; r < C; r++ {
				wp := g.wp(r)
				g.p("VMOVDQU64 %s, %s", off(64*hf, wp), z(L))
				g.p("VMOVDQU64 %d(%s), %s", 128+32*hf, wp, y(H))
				g.p("VPSLLW $4, %s, %s", y(H), y(A))
				g.p("VPSLLW $2, %s, %s", y(H), y(B))
				g.p("VINSERTI64X4 $1, %s, %s, %s", y(B), z(A), z(A))
				g.p("VPSRLW $2, %s, %s", y(H), y(B))
				g.p("VINSERTI64X4 $1, %s, %s, %s", y(B), z(H), z(B))
				g.p("VPANDD Z30, %s, %s", z(A), z(A))
				g.p("VPANDD Z30, %s, %s", z(B), z(B))
				g.p("VPTERNLOGD $0xF8, Z31, %s, %s", z(L), z(A))
				g.p("VPSRLW $4, %s, %s", z(L), z(L))
				g.p("VPTERNLOGD $0xF8, Z31, %s, %s", z(L), z(B))
				for t := 0; t < R; t++ {
					dot(128*hf, A, scr(r, 128*hf), hf == 0, t, r)
					dot(128*hf+64, B, scr(r, 128*hf+64), false, t, r)
				}
			}
		}
	}
	// Phase C: scale and correct.
	M := T(0)
	for r := 0; r < C; r++ {
		g.p("VMOVDQU64 %s, %s", scr(r, 256), z(M))
		for t := 0; t < R; t++ {
			I, A := z(ia(t, r)), z(g.acc(t, r))
			g.p("VCVTDQ2PS %s, %s", I, I)
			g.p("VMULPS.BCST %s, %s, %s", scr(r, 320), I, I)
			g.p("VFMADD231PS 320(%s), %s, %s", g.xp(t), I, A)
			g.p("VFNMADD231PS 256(%s), %s, %s", g.xp(t), z(M), A)
		}
	}
	g.advance(1)
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_reduce")
}

// legacy2: Q8_0 and Q4_0 on AVX2, one block per step. Y15 holds 16-bit
// ones (for VPMADDWD), Y14 (Q4_0) the byte mask 0x0F.
func (g *gen) legacy2() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	// Q4_0 and Q5_0 multiply unsigned codes and add −off·Σx; Q8_0 and
	// IQ4_NL multiply |w| by x with w's sign (VPSIGNB).
	unsigned := k.typ == q4_0 || k.typ == q5_0
	nibbles := k.typ != q8_0
	top := 15
	if nibbles {
		top = 14
	}
	lo := nacc
	if top-lo < 5 {
		log.Fatalf("%s: out of registers", k.name())
	}
	W, H, D := lo, lo+1, lo+2
	tmp := temps{lo: lo + 3, n: top - (lo + 3)}
	name := k.name()
	g.zeroAcc(nacc)
	g.p("VMOVDQU ·qones<>(SB), Y15")
	if nibbles {
		g.p("VMOVDQU ·qc0F<>(SB), Y14")
	}
	g.p("TESTQ CX, CX")
	g.p("JZ %s_reduce", name)
	g.label(name + "_loop")
	for r := 0; r < C; r++ {
		wp := g.wp(r)
		qs := 2
		if k.typ == q5_0 {
			qs = 6
		}
		if nibbles {
			g.p("VMOVDQU %d(%s), %s", qs, wp, x(W))
			g.p("VPSRLW $4, %s, %s", x(W), x(H))
			g.p("VINSERTI128 $1, %s, %s, %s", x(H), y(W), y(W))
			g.p("VPAND Y14, %s, %s", y(W), y(W))
		} else {
			g.p("VMOVDQU 2(%s), %s", wp, y(W))
		}
		switch k.typ {
		case q5_0:
			// Byte i gets bit i of qh: spread qh's bytes, select one bit
			// per byte, compare, keep 0x10.
			g.p("VPBROADCASTD 2(%s), %s", wp, y(H))
			g.p("VPSHUFB ·qq5spread<>(SB), %s, %s", y(H), y(H))
			g.p("VPAND ·qbitsel<>(SB), %s, %s", y(H), y(H))
			g.p("VPCMPEQB ·qbitsel<>(SB), %s, %s", y(H), y(H))
			g.p("VPAND ·qc10<>(SB), %s, %s", y(H), y(H))
			g.p("VPOR %s, %s, %s", y(H), y(W), y(W))
		case iq4_nl:
			g.p("VMOVDQU ·qiq4<>(SB), %s", y(H))
			g.p("VPSHUFB %s, %s, %s", y(W), y(H), y(W))
		}
		if !unsigned {
			g.p("VPABSB %s, %s", y(W), y(H))
		}
		g.p("VPBROADCASTW (%s), %s", wp, x(D))
		g.p("VCVTPH2PS %s, %s", x(D), y(D))
		g.prefetch(r, 1)
		for t := 0; t < R; t++ {
			xp := g.xp(t)
			P := tmp.next()
			if unsigned {
				g.p("VPMADDUBSW (%s), %s, %s", xp, y(W), y(P))
				g.p("VPMADDWD Y15, %s, %s", y(P), y(P))
				g.p("VPADDD 64(%s), %s, %s", xp, y(P), y(P))
			} else {
				g.p("VMOVDQU (%s), %s", xp, y(P))
				g.p("VPSIGNB %s, %s, %s", y(W), y(P), y(P))
				g.p("VPMADDUBSW %s, %s, %s", y(P), y(H), y(P))
				g.p("VPMADDWD Y15, %s, %s", y(P), y(P))
			}
			g.p("VCVTDQ2PS %s, %s", y(P), y(P))
			g.p("VMULPS 32(%s), %s, %s", xp, y(P), y(P))
			g.p("VFMADD231PS %s, %s, %s", y(P), y(D), y(g.acc(t, r)))
		}
	}
	g.advance(1)
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_reduce")
}

// mlx2: MLX affine weights on AVX2 (the AVX-512 level uses them too), one
// 32-element sub-block per step. a.nb counts groups, a.gsub the
// sub-blocks of a group: AX holds a group's code bytes, DX the offset of
// the current sub-block's codes in them. A group is the scale and bias
// (hdr bytes) and then its codes, so sub-block codes are at hdr(w)(DX*1).
// Per weight row and sub-block: the codes unpacked to bytes in W (4-bit:
// low nibbles, then high ones; 2-bit: the bytes shifted by 0, 2, 4, 6;
// 8-bit: made signed, |w| in H), the scale S and bias B broadcast, and
// B += off·S (off = 2^(bits−1), see mlxOff); per activation row:
// VPMADDUBSW, VPMADDWD with ones (2 and 4 bits: plus −off·Σqx from lane 0
// of 96(x)), to float, times dx, then acc += S·sum + B·Σx (Σx in lane 0
// of 64(x)).
// Registers: Y15 ones, Y14 the byte mask (0x0F, 0x03) or 0x80, Y13 the
// 2-bit shifts.
func (g *gen) mlx2() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	top := 13
	if k.mlx == 4 {
		top = 14
	}
	W, H, S, B := nacc, nacc+1, nacc+2, nacc+3
	tmp := temps{lo: nacc + 4, n: top - (nacc + 4)}
	if tmp.n < 1 {
		log.Fatalf("%s: out of registers", k.name())
	}
	hdr := map[string]int{"BF16": 4, "F16": 4, "F32": 8}[k.scale]
	name := k.name()
	g.zeroAcc(nacc)
	g.p("VMOVDQU ·qones<>(SB), Y15")
	switch k.mlx {
	case 2:
		g.p("VMOVDQU ·qc03<>(SB), Y14")
		g.p("VMOVDQU ·qshrM2<>(SB), Y13")
	case 4:
		g.p("VMOVDQU ·qc0F<>(SB), Y14")
	case 8:
		g.p("VMOVDQU ·qc80<>(SB), Y14")
	}
	g.p("MOVQ %d(DI), AX", offGsub)
	g.p("SHLQ $%d, AX", map[int]int{2: 3, 4: 4, 8: 5}[k.mlx])
	g.p("TESTQ CX, CX")
	g.p("JZ %s_reduce", name)
	g.label(name + "_group")
	g.p("XORQ DX, DX")
	g.label(name + "_sub")
	for r := 0; r < C; r++ {
		wp := g.wp(r)
		codes := fmt.Sprintf("%d(%s)(DX*1)", hdr, wp)
		switch k.mlx {
		case 2:
			g.p("VPBROADCASTQ %s, %s", codes, y(W))
			g.p("VPSRLVQ Y13, %s, %s", y(W), y(W))
			g.p("VPAND Y14, %s, %s", y(W), y(W))
		case 4:
			g.p("VMOVDQU %s, %s", codes, x(W))
			g.p("VPSRLW $4, %s, %s", x(W), x(H))
			g.p("VINSERTI128 $1, %s, %s, %s", x(H), y(W), y(W))
			g.p("VPAND Y14, %s, %s", y(W), y(W))
		case 8:
			g.p("VMOVDQU %s, %s", codes, y(W))
			g.p("VPXOR Y14, %s, %s", y(W), y(W))
			g.p("VPABSB %s, %s", y(W), y(H))
		}
		switch k.scale {
		case "BF16":
			g.p("VPBROADCASTD (%s), %s", wp, y(B))
			g.p("VPSLLD $16, %s, %s", y(B), y(S))
			g.p("VPAND ·qhi16<>(SB), %s, %s", y(B), y(B))
		case "F16":
			g.p("VPBROADCASTW (%s), %s", wp, x(S))
			g.p("VCVTPH2PS %s, %s", x(S), y(S))
			g.p("VPBROADCASTW 2(%s), %s", wp, x(B))
			g.p("VCVTPH2PS %s, %s", x(B), y(B))
		case "F32":
			g.p("VBROADCASTSS (%s), %s", wp, y(S))
			g.p("VBROADCASTSS 4(%s), %s", wp, y(B))
		}
		g.p("VFMADD231PS ·qfoff%d<>(SB), %s, %s", k.mlx, y(S), y(B))
		if k.pf > 0 {
			g.p("PREFETCHT0 %d(%s)(DX*1)", k.pf, wp)
		}
		for t := 0; t < R; t++ {
			xp := g.xp(t)
			P := tmp.next()
			if k.mlx == 8 {
				g.p("VMOVDQU (%s), %s", xp, y(P))
				g.p("VPSIGNB %s, %s, %s", y(W), y(P), y(P))
				g.p("VPMADDUBSW %s, %s, %s", y(P), y(H), y(P))
			} else {
				g.p("VPMADDUBSW (%s), %s, %s", xp, y(W), y(P))
			}
			g.p("VPMADDWD Y15, %s, %s", y(P), y(P))
			if k.mlx != 8 {
				g.p("VPADDD 96(%s), %s, %s", xp, y(P), y(P))
			}
			g.p("VCVTDQ2PS %s, %s", y(P), y(P))
			g.p("VMULPS 32(%s), %s, %s", xp, y(P), y(P))
			g.p("VFMADD231PS %s, %s, %s", y(P), y(S), y(g.acc(t, r)))
			g.p("VFMADD231PS 64(%s), %s, %s", xp, y(B), y(g.acc(t, r)))
		}
	}
	for t := 0; t < R; t++ {
		g.p("ADDQ $128, %s", g.xp(t))
	}
	g.p("ADDQ $%d, DX", 4*k.mlx)
	g.p("CMPQ DX, AX")
	g.p("JB %s_sub", name)
	for r := 0; r < C; r++ {
		g.p("LEAQ %d(%s)(AX*1), %s", hdr, g.wp(r), g.wp(r))
	}
	g.p("DECQ CX")
	g.p("JNZ %s_group", name)
	g.label(name + "_reduce")
}

// kquant2: Q4_K and Q6_K on AVX2, one super-block per step. Y15 holds the
// byte mask 0x0F.
func (g *gen) kquant2() {
	k := g.k
	R, C := k.r, k.c
	nacc := R * C
	ia := func(t, r int) int { return nacc + g.acc(t, r) }
	tlo := 2 * nacc
	need := 5
	if k.typ == q5_k {
		need = 6
	}
	if 15-tlo < need {
		log.Fatalf("%s: out of registers", k.name())
	}
	T := func(i int) int { return tlo + i }
	name := k.name()
	g.zeroAcc(nacc)
	g.alignScratch()
	g.p("VMOVDQU ·qc0F<>(SB), Y15")
	g.p("TESTQ CX, CX")
	g.p("JZ %s_reduce", name)
	g.label(name + "_loop")
	// Phase A.
	for r := 0; r < C; r++ {
		wp := g.wp(r)
		if k.typ.k4() {
			g.p("VMOVDQU 4(%s), %s", wp, x(T(0)))
			g.p("VPSRLD $2, %s, %s", x(T(0)), x(T(1)))
			g.p("VPAND ·qc30<>(SB), %s, %s", x(T(1)), x(T(1)))
			g.p("VPSHUFD $0xAA, %s, %s", x(T(0)), x(T(2)))
			g.p("VPSRLVD ·qshr04<>(SB), %s, %s", x(T(2)), x(T(2)))
			g.p("VPAND X15, %s, %s", x(T(2)), x(T(2)))
			g.p("VPOR %s, %s, %s", x(T(2)), x(T(1)), x(T(1)))
			g.p("VPAND ·qc3F<>(SB), %s, %s", x(T(0)), x(T(0)))
			g.p("VPUNPCKLDQ %s, %s, %s", x(T(1)), x(T(0)), x(T(0)))
			g.p("VPMOVZXBW %s, %s", x(T(0)), x(T(1)))
			g.p("VMOVDQU %s, %s", x(T(1)), scr(r, 0))
			g.p("VPSRLDQ $8, %s, %s", x(T(0)), x(T(0)))
			g.p("VPMOVZXBD %s, %s", x(T(0)), y(T(0)))
			g.p("VCVTDQ2PS %s, %s", y(T(0)), y(T(0)))
			g.p("VPBROADCASTW 2(%s), %s", wp, x(T(2)))
			g.p("VCVTPH2PS %s, %s", x(T(2)), y(T(2)))
			g.p("VMULPS %s, %s, %s", y(T(2)), y(T(0)), y(T(0)))
			g.p("VMOVUPS %s, %s", y(T(0)), scr(r, 256))
			g.p("VPBROADCASTW (%s), %s", wp, x(T(2)))
			g.p("VCVTPH2PS %s, %s", x(T(2)), x(T(2)))
			g.p("VMOVSS %s, %s", x(T(2)), scr(r, 320))
			g.prefetch(r, 1)
			continue
		}
		g.p("VPMOVSXBW 192(%s), %s", wp, y(T(0)))
		g.p("VMOVDQU %s, %s", y(T(0)), scr(r, 0))
		g.p("VPMOVSXBD 192(%s), %s", wp, y(T(0)))
		g.p("VPMOVSXBD 200(%s), %s", wp, y(T(1)))
		g.p("VCVTDQ2PS %s, %s", y(T(0)), y(T(0)))
		g.p("VCVTDQ2PS %s, %s", y(T(1)), y(T(1)))
		g.p("VPBROADCASTW 208(%s), %s", wp, x(T(2)))
		g.p("VCVTPH2PS %s, %s", x(T(2)), y(T(2)))
		g.p("VMULPS %s, %s, %s", y(T(2)), y(T(0)), y(T(0)))
		g.p("VMULPS %s, %s, %s", y(T(2)), y(T(1)), y(T(1)))
		g.p("VMULPS ·qf32<>(SB), %s, %s", y(T(0)), y(T(0)))
		g.p("VMULPS ·qf32<>(SB), %s, %s", y(T(1)), y(T(1)))
		g.p("VMOVUPS %s, %s", y(T(0)), scr(r, 256))
		g.p("VMOVUPS %s, %s", y(T(1)), scr(r, 288))
		g.p("VMOVSS %s, %s", x(T(2)), scr(r, 320))
		g.prefetch(r, 1)
	}
	// Phase B. dot adds the products of the 32 codes in register W at
	// activation offset xo, times the 16-bit scales in S.
	P := T(4)
	dot := func(xo, W, S int, first bool, t, r int) {
		I := y(ia(t, r))
		g.p("VPMADDUBSW %s, %s, %s", off(xo, g.xp(t)), y(W), y(P))
		if first {
			g.p("VPMADDWD %s, %s, %s", y(S), y(P), I)
			return
		}
		g.p("VPMADDWD %s, %s, %s", y(S), y(P), y(P))
		g.p("VPADDD %s, %s, %s", y(P), I, I)
	}
	if k.typ.k4() {
		Q, H, S, QH, Tm := T(0), T(1), T(2), T(3), T(5)
		for r := 0; r < C; r++ {
			if k.typ == q5_k {
				g.p("VMOVDQU 16(%s), %s", g.wp(r), y(QH))
			}
			for c := 0; c < 4; c++ {
				g.p("VMOVDQU %d(%s), %s", k.typ.qsOff()+32*c, g.wp(r), y(Q))
				g.p("VPSRLW $4, %s, %s", y(Q), y(H))
				g.p("VPAND Y15, %s, %s", y(Q), y(Q))
				g.p("VPAND Y15, %s, %s", y(H), y(H))
				if k.typ == q5_k {
					for e, W := range []int{Q, H} {
						sel := fmt.Sprintf("·qk5bit<>+%d(SB)", 64*c+32*e)
						g.p("VPAND %s, %s, %s", sel, y(QH), y(Tm))
						g.p("VPCMPEQB %s, %s, %s", sel, y(Tm), y(Tm))
						g.p("VPAND ·qc10<>(SB), %s, %s", y(Tm), y(Tm))
						g.p("VPOR %s, %s, %s", y(Tm), y(W), y(W))
					}
				}
				for e, W := range []int{Q, H} {
					j := 2*c + e
					g.p("VPBROADCASTW %s, %s", scr(r, 2*j), y(S))
					for t := 0; t < R; t++ {
						dot(32*j, W, S, j == 0, t, r)
					}
				}
			}
		}
	} else {
		H, W, Tm, S := T(0), T(1), T(2), T(3)
		for hf := 0; hf < 2; hf++ {
			for r := 0; r < C; r++ {
				wp := g.wp(r)
				g.p("VMOVDQU %d(%s), %s", 128+32*hf, wp, y(H))
				for kk := 0; kk < 4; kk++ {
					lo := 64*hf + 32*(kk%2)
					if kk < 2 {
						g.p("VPAND %s, Y15, %s", off(lo, wp), y(W))
					} else {
						g.p("VMOVDQU %s, %s", off(lo, wp), y(W))
						g.p("VPSRLW $4, %s, %s", y(W), y(W))
						g.p("VPAND Y15, %s, %s", y(W), y(W))
					}
					switch kk {
					case 0:
						g.p("VPSLLW $4, %s, %s", y(H), y(Tm))
					case 1:
						g.p("VPSLLW $2, %s, %s", y(H), y(Tm))
					case 3:
						g.p("VPSRLW $2, %s, %s", y(H), y(Tm))
					}
					if kk == 2 {
						g.p("VPAND ·qc30<>(SB), %s, %s", y(H), y(Tm))
					} else {
						g.p("VPAND ·qc30<>(SB), %s, %s", y(Tm), y(Tm))
					}
					g.p("VPOR %s, %s, %s", y(Tm), y(W), y(W))
					a := 8*hf + 2*kk
					g.p("VPBROADCASTW %s, %s", scr(r, 2*a), x(S))
					g.p("VPBROADCASTW %s, %s", scr(r, 2*a+2), x(Tm))
					g.p("VINSERTI128 $1, %s, %s, %s", x(Tm), y(S), y(S))
					for t := 0; t < R; t++ {
						dot(128*hf+32*kk, W, S, hf == 0 && kk == 0, t, r)
					}
				}
			}
		}
	}
	// Phase C.
	D, M0, M1 := T(0), T(1), T(2)
	for r := 0; r < C; r++ {
		g.p("VBROADCASTSS %s, %s", scr(r, 320), y(D))
		g.p("VMOVUPS %s, %s", scr(r, 256), y(M0))
		if k.typ == q6_k {
			g.p("VMOVUPS %s, %s", scr(r, 288), y(M1))
		}
		for t := 0; t < R; t++ {
			I, A := y(ia(t, r)), y(g.acc(t, r))
			g.p("VCVTDQ2PS %s, %s", I, I)
			g.p("VMULPS %s, %s, %s", y(D), I, I)
			g.p("VFMADD231PS 320(%s), %s, %s", g.xp(t), I, A)
			g.p("VFNMADD231PS 256(%s), %s, %s", g.xp(t), y(M0), A)
			if k.typ == q6_k {
				g.p("VFNMADD231PS 288(%s), %s, %s", g.xp(t), y(M1), A)
			}
		}
	}
	g.advance(1)
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_reduce")
}

// reduce sums the lanes of each accumulator and stores the sums. The
// first register past the accumulators serves as scratch.
func (g *gen) reduce() {
	k := g.k
	tmp := k.r * k.c
	for i := 0; i < k.r*k.c; i++ {
		if k.isa == avx512 {
			g.p("VEXTRACTF64X4 $1, %s, %s", z(i), y(tmp))
			g.p("VADDPS %s, %s, %s", y(tmp), y(i), y(i))
			g.p("VEXTRACTF32X4 $1, %s, %s", y(i), x(tmp))
		} else {
			g.p("VEXTRACTF128 $1, %s, %s", y(i), x(tmp))
		}
		g.p("VADDPS %s, %s, %s", x(tmp), x(i), x(i))
		g.p("VMOVHLPS %s, %s, %s", x(i), x(i), x(tmp))
		g.p("VADDPS %s, %s, %s", x(tmp), x(i), x(i))
		g.p("VMOVSHDUP %s, %s", x(i), x(tmp))
		g.p("VADDSS %s, %s, %s", x(tmp), x(i), x(i))
	}
	name := k.name()
	dst := "SI"
	if k.multi() {
		dst = "R11"
	} else {
		g.p("MOVQ %d(DI), SI", offDst)
	}
	g.p("TESTQ %s, %s", dst, dst)
	g.p("JNZ %s_dst", name)
	// Without dst (one group only), to a.out.
	for t := 0; t < k.r; t++ {
		for r := 0; r < k.c; r++ {
			g.p("VMOVSS %s, %d(DI)", x(g.acc(t, r)), offOut+4*(t*qmaxC+r))
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	g.label(name + "_dst")
	if k.multi() {
		for r := 0; r < k.c; r++ {
			g.p("VMOVSS %s, %s", x(g.acc(0, r)), off(4*r, dst))
		}
		// a.w is visible to the garbage collector: it only ever points at
		// rows of the matrix.
		g.p("DECQ R13")
		g.p("JZ %s_end", name)
		g.p("ADDQ $%d, R11", 4*k.c)
		for r := 0; r < k.c; r++ {
			g.p("ADDQ R12, %d(DI)", offW+8*r)
		}
		g.p("JMP %s_rows", name)
		g.label(name + "_end")
		g.p("VZEROUPPER")
		g.p("RET")
		return
	}
	g.p("MOVQ %d(DI), DX", offLdd)
	for t := 0; t < k.r; t++ {
		if t > 0 {
			g.p("ADDQ DX, SI")
		}
		for r := 0; r < k.c; r++ {
			g.p("VMOVSS %s, %s", x(g.acc(t, r)), off(4*r, "SI"))
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// Activation quantizers: func(dst *byte, x *float32, n int[, off int])
// writes n groups of a layout (see xfmt in qmatmul.go) for the activations
// at x, computing exactly what quantBlock does: the largest |x| as float
// bits, NaN scale and zero codes from qxNonFinite up, zero below qxTiny,
// otherwise d = max/127, codes round(x·(127/max)) to nearest even.

// qhead emits a quantizer's prologue.
func (g *gen) qhead(sig string, args int) {
	name := sig[:strings.IndexByte(sig, '(')]
	fmt.Fprintf(&g.b, "\n// func %s\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", sig, name, 8*args)
	g.p("MOVQ dst+0(FP), DI")
	g.p("MOVQ x+8(FP), SI")
	g.p("MOVQ n+16(FP), CX")
}

// qspecial emits the branches on the largest |x| in AX: to lbl_nan or
// lbl_zero. The fall-through is a normal block.
func (g *gen) qspecial(lbl string) {
	g.p("CMPL AX, $0x7f800000")
	g.p("JAE %s_nan", lbl)
	g.p("CMPL AX, $0x0da24260")
	g.p("JB %s_zero", lbl)
}

// hmaxud reduces the unsigned dwords of register r (Z or Y) to its lane 0,
// using register t.
func (g *gen) hmaxud(r, t int, zmm bool) {
	if zmm {
		g.p("VEXTRACTI64X4 $1, %s, %s", z(r), y(t))
		g.p("VPMAXUD %s, %s, %s", y(t), y(r), y(r))
		g.p("VEXTRACTI32X4 $1, %s, %s", y(r), x(t))
	} else {
		g.p("VEXTRACTI128 $1, %s, %s", y(r), x(t))
	}
	g.p("VPMAXUD %s, %s, %s", x(t), x(r), x(r))
	g.p("VPSHUFD $0x4E, %s, %s", x(r), x(t))
	g.p("VPMAXUD %s, %s, %s", x(t), x(r), x(r))
	g.p("VPSHUFD $0xB1, %s, %s", x(r), x(t))
	g.p("VPMAXUD %s, %s, %s", x(t), x(r), x(r))
}

// hsumd reduces the dwords of register r to its lane 0, using t.
func (g *gen) hsumd(r, t int, zmm bool) {
	if zmm {
		g.p("VEXTRACTI64X4 $1, %s, %s", z(r), y(t))
		g.p("VPADDD %s, %s, %s", y(t), y(r), y(r))
		g.p("VEXTRACTI32X4 $1, %s, %s", y(r), x(t))
	} else {
		g.p("VEXTRACTI128 $1, %s, %s", y(r), x(t))
	}
	g.p("VPADDD %s, %s, %s", x(t), x(r), x(r))
	g.p("VPSHUFD $0x4E, %s, %s", x(r), x(t))
	g.p("VPADDD %s, %s, %s", x(t), x(r), x(r))
	g.p("VPSHUFD $0xB1, %s, %s", x(r), x(t))
	g.p("VPADDD %s, %s, %s", x(t), x(r), x(r))
}

// qx512Legacy quantizes 32-element blocks into layout xfL64Q4, xfL64Q8
// or xfL128Q4 (lay); n counts blocks. Z31: |x| mask, X30: 127, X8: zero.
func (g *gen) qx512Legacy(lay string) {
	name := "qxAVX512" + lay
	g.qhead(name+"(dst *byte, x *float32, n int, off int)", 4)
	g.p("MOVQ off+24(FP), R8")
	g.p("VPBROADCASTD ·qabs<>(SB), Z31")
	g.p("VMOVSS ·qf127<>(SB), X30")
	g.p("VPXORD X8, X8, X8")
	// Blocks per group, the offset from one block's bytes to the next's,
	// and the group size.
	nblk, shift, gbytes := 2, 16, 192
	switch lay {
	case "L64Q8":
		shift = 32
	case "L128Q4":
		nblk, gbytes = 4, 256
	}
	block := func(lbl string, o int) {
		g.p("VMOVUPS (SI), Z0")
		g.p("VMOVUPS 64(SI), Z1")
		g.p("VPANDD Z31, Z0, Z2")
		g.p("VPANDD Z31, Z1, Z3")
		g.p("VPMAXUD Z3, Z2, Z2")
		g.hmaxud(2, 3, true)
		g.p("VMOVD X2, AX")
		g.qspecial(lbl)
		g.p("VDIVSS X2, X30, X3")
		g.p("VDIVSS X30, X2, X4")
		g.p("VBROADCASTSS X3, Z3")
		g.p("VMULPS Z3, Z0, Z0")
		g.p("VMULPS Z3, Z1, Z1")
		g.p("VCVTPS2DQ Z0, Z0")
		g.p("VCVTPS2DQ Z1, Z1")
		g.p("VPADDD Z1, Z0, Z5")
		g.hsumd(5, 6, true)
		g.p("VMOVD X5, AX")
		g.p("VPMOVSDB Z0, X0")
		g.p("VPMOVSDB Z1, X1")
		g.p("JMP %s_store", lbl)
		g.label(lbl + "_nan")
		g.p("MOVL $0x7fc00000, AX")
		g.p("VMOVD AX, X4")
		g.p("JMP %s_codes0", lbl)
		g.label(lbl + "_zero")
		g.p("VPXORD X4, X4, X4")
		g.label(lbl + "_codes0")
		g.p("VPXORD X0, X0, X0")
		g.p("VPXORD X1, X1, X1")
		g.p("XORL AX, AX")
		g.label(lbl + "_store")
		switch lay {
		case "L64Q4":
			g.p("VMOVDQU X0, %s", off(o, "DI"))
			g.p("VMOVDQU X1, %d(DI)", o+32)
			g.p("VBROADCASTSS X4, X6")
			g.p("VMOVUPS X6, %d(DI)", o+64)
			g.p("VMOVUPS X6, %d(DI)", o+96)
			g.p("IMULL R8, AX")
			g.p("NEGL AX")
			g.p("VMOVD AX, X7")
			g.p("VMOVDQU X7, %d(DI)", o+128)
			g.p("VMOVDQU X8, %d(DI)", o+160)
		case "L128Q4":
			g.p("VMOVDQU X0, %s", off(o, "DI"))
			g.p("VMOVDQU X1, %d(DI)", o+64)
			g.p("VBROADCASTSS X4, X6")
			g.p("VMOVUPS X6, %d(DI)", o+128)
			g.p("IMULL R8, AX")
			g.p("NEGL AX")
			g.p("VMOVD AX, X7")
			g.p("VMOVDQU X7, %d(DI)", o+192)
		default:
			g.p("VMOVDQU X0, %s", off(o, "DI"))
			g.p("VMOVDQU X1, %d(DI)", o+16)
			g.p("VBROADCASTSS X4, Y6")
			g.p("VMOVUPS Y6, %d(DI)", o+64)
			g.p("IMULL R8, AX")
			g.p("NEGL AX")
			g.p("VMOVD AX, X7")
			g.p("VMOVDQU Y7, %d(DI)", o+128)
		}
		g.p("ADDQ $128, SI")
	}
	g.label(name + "_loop")
	for b := 0; b < nblk; b++ {
		if b == 0 {
			g.p("TESTQ CX, CX")
			g.p("JZ %s_done", name)
		}
		block(fmt.Sprintf("%s_b%d", name, b), b*shift)
		g.p("DECQ CX")
		if b < nblk-1 {
			g.p("JZ %s_done", name)
		}
	}
	g.p("ADDQ $%d, DI", gbytes)
	g.p("JMP %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// qx512K quantizes super-blocks into layout xfK4 or xfK6; n counts
// super-blocks. Z31: |x| mask, X30: 127, Z29: zero, Z28: 0x80 bytes, Z27,
// Z25: dword indices, Z26: 2048.
func (g *gen) qx512K(q4 bool) {
	name := "qxAVX512K6"
	if q4 {
		name = "qxAVX512K4"
	}
	g.qhead(name+"(dst *byte, x *float32, n int)", 3)
	g.p("VPBROADCASTD ·qabs<>(SB), Z31")
	g.p("VMOVSS ·qf127<>(SB), X30")
	g.p("VPXORD Z29, Z29, Z29")
	g.p("VMOVDQU64 ·qc80<>(SB), Z28")
	g.p("VMOVDQU64 ·qidx4<>(SB), Z27")
	g.p("VPBROADCASTD ·q2048<>(SB), Z26")
	g.p("VMOVDQU64 ·qidx2<>(SB), Z25")
	g.p("TESTQ CX, CX")
	g.p("JZ %s_done", name)
	g.label(name + "_loop")
	g.p("VPANDD (SI), Z31, Z0")
	g.p("VPANDD 64(SI), Z31, Z1")
	for i := 2; i < 16; i++ {
		g.p("VPANDD %d(SI), Z31, Z2", 64*i)
		g.p("VPMAXUD Z2, %s, %s", z(i%2), z(i%2))
	}
	g.p("VPMAXUD Z1, Z0, Z0")
	g.hmaxud(0, 1, true)
	g.p("VMOVD X0, AX")
	g.qspecial(name)
	g.p("VDIVSS X0, X30, X3")
	g.p("VDIVSS X30, X0, X4")
	g.p("VBROADCASTSS X3, Z3")
	for i := 0; i < 16; i++ {
		t := 5 + i%8
		g.p("VMULPS %s, Z3, %s", off(64*i, "SI"), z(t))
		g.p("VCVTPS2DQ %s, %s", z(t), z(t))
		g.p("VPMOVSDB %s, %s", z(t), x(t))
		g.p("VMOVDQU %s, %s", x(t), off(16*i, "DI"))
	}
	g.p("JMP %s_sums", name)
	g.label(name + "_nan")
	g.p("MOVL $0x7fc00000, AX")
	g.p("VMOVD AX, X4")
	g.p("JMP %s_codes0", name)
	g.label(name + "_zero")
	g.p("VPXORD X4, X4, X4")
	g.label(name + "_codes0")
	for i := 0; i < 4; i++ {
		g.p("VMOVDQU64 Z29, %s", off(64*i, "DI"))
	}
	g.label(name + "_sums")
	// Sums of each 16 codes: VPSADBW of the codes biased to unsigned
	// sums 8 of them per qword; adjacent qwords are added, and the sums
	// (dwords 0, 4, 8, 12 of each vector) gathered.
	for q := 0; q < 4; q++ {
		r := 13 + q
		g.p("VPXORD %d(DI), Z28, %s", 64*q, z(r))
		g.p("VPSADBW Z29, %s, %s", z(r), z(r))
		g.p("VPSHUFD $0x4E, %s, Z17", z(r))
		g.p("VPADDQ Z17, %s, %s", z(r), z(r))
	}
	g.p("VPERMT2D Z14, Z27, Z13")
	g.p("VPERMT2D Z16, Z27, Z15")
	g.p("VINSERTI64X4 $1, Y15, Z13, Z13")
	g.p("VPSUBD Z26, Z13, Z13")
	g.p("VBROADCASTSS X4, Z4")
	if q4 {
		g.p("VPSHUFD $0xB1, Z13, Z14")
		g.p("VPADDD Z14, Z13, Z13")
		g.p("VPERMD Z13, Z25, Z13")
		g.p("VCVTDQ2PS Y13, Y13")
		g.p("VMULPS Y4, Y13, Y13")
	} else {
		g.p("VCVTDQ2PS Z13, Z13")
		g.p("VMULPS Z4, Z13, Z13")
	}
	g.p("VMOVUPS Z13, 256(DI)")
	g.p("VMOVUPS Z4, 320(DI)")
	g.p("ADDQ $1024, SI")
	g.p("ADDQ $384, DI")
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// pack2 packs the dwords of Y0-Y3 to 32 signed bytes in Y0, in order.
// Y13 holds the VPERMD index that undoes the lane interleaving.
func (g *gen) pack2() {
	g.p("VPACKSSDW Y1, Y0, Y0")
	g.p("VPACKSSDW Y3, Y2, Y2")
	g.p("VPACKSSWB Y2, Y0, Y0")
	g.p("VPERMD Y0, Y13, Y0")
}

// qx2L32 quantizes 32-element blocks into layout xfL32 with AVX2; n counts
// blocks, off is the code offset. Y15: |x| mask, X14: 127, Y13: pack order.
func (g *gen) qx2L32() {
	name := "qxAVX2L32"
	g.qhead(name+"(dst *byte, x *float32, n int, off int)", 4)
	g.p("MOVQ off+24(FP), R8")
	g.p("VPBROADCASTD ·qabs<>(SB), Y15")
	g.p("VMOVSS ·qf127<>(SB), X14")
	g.p("VMOVDQU ·qpack<>(SB), Y13")
	g.p("TESTQ CX, CX")
	g.p("JZ %s_done", name)
	g.label(name + "_loop")
	for i := 0; i < 4; i++ {
		g.p("VANDPS %s, Y15, %s", off(32*i, "SI"), y(4+i))
	}
	g.p("VPMAXUD Y5, Y4, Y4")
	g.p("VPMAXUD Y7, Y6, Y6")
	g.p("VPMAXUD Y6, Y4, Y4")
	g.hmaxud(4, 5, false)
	g.p("VMOVD X4, AX")
	g.qspecial(name)
	g.p("VDIVSS X4, X14, X5")
	g.p("VDIVSS X14, X4, X6")
	g.p("VBROADCASTSS X5, Y5")
	for i := 0; i < 4; i++ {
		g.p("VMULPS %s, Y5, %s", off(32*i, "SI"), y(i))
		g.p("VCVTPS2DQ %s, %s", y(i), y(i))
	}
	g.p("VPADDD Y1, Y0, Y7")
	g.p("VPADDD Y3, Y2, Y8")
	g.p("VPADDD Y8, Y7, Y7")
	g.hsumd(7, 8, false)
	g.p("VMOVD X7, AX")
	g.pack2()
	g.p("JMP %s_store", name)
	g.label(name + "_nan")
	g.p("MOVL $0x7fc00000, AX")
	g.p("VMOVD AX, X6")
	g.p("JMP %s_codes0", name)
	g.label(name + "_zero")
	g.p("VXORPS X6, X6, X6")
	g.label(name + "_codes0")
	g.p("VPXOR Y0, Y0, Y0")
	g.p("XORL AX, AX")
	g.label(name + "_store")
	g.p("VMOVDQU Y0, (DI)")
	g.p("VBROADCASTSS X6, Y6")
	g.p("VMOVUPS Y6, 32(DI)")
	g.p("IMULL R8, AX")
	g.p("NEGL AX")
	g.p("VMOVD AX, X7")
	g.p("VMOVDQU Y7, 64(DI)")
	g.p("ADDQ $128, SI")
	g.p("ADDQ $96, DI")
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// qx2K quantizes super-blocks into layout xfK4 or xfK6 with AVX2. Y15:
// |x| mask, X14: 127, Y13: pack order, Y12: 0x80 bytes, Y11: zero, Y10:
// dword index 0, 4, Y9: 2048.
func (g *gen) qx2K(q4 bool) {
	name := "qxAVX2K6"
	if q4 {
		name = "qxAVX2K4"
	}
	g.qhead(name+"(dst *byte, x *float32, n int)", 3)
	g.p("VPBROADCASTD ·qabs<>(SB), Y15")
	g.p("VMOVSS ·qf127<>(SB), X14")
	g.p("VMOVDQU ·qpack<>(SB), Y13")
	g.p("VMOVDQU ·qc80<>(SB), Y12")
	g.p("VPXOR Y11, Y11, Y11")
	g.p("VMOVDQU ·qidx4<>(SB), Y10")
	g.p("VPBROADCASTD ·q2048<>(SB), Y9")
	g.p("TESTQ CX, CX")
	g.p("JZ %s_done", name)
	g.label(name + "_loop")
	g.p("VANDPS (SI), Y15, Y4")
	g.p("VANDPS 32(SI), Y15, Y5")
	for i := 2; i < 32; i++ {
		g.p("VANDPS %d(SI), Y15, Y6", 32*i)
		g.p("VPMAXUD Y6, %s, %s", y(4+i%2), y(4+i%2))
	}
	g.p("VPMAXUD Y5, Y4, Y4")
	g.hmaxud(4, 5, false)
	g.p("VMOVD X4, AX")
	g.qspecial(name)
	g.p("VDIVSS X4, X14, X5")
	g.p("VDIVSS X14, X4, X6")
	g.p("VBROADCASTSS X5, Y5")
	for q := 0; q < 8; q++ {
		for i := 0; i < 4; i++ {
			g.p("VMULPS %s, Y5, %s", off(128*q+32*i, "SI"), y(i))
			g.p("VCVTPS2DQ %s, %s", y(i), y(i))
		}
		g.pack2()
		g.p("VMOVDQU Y0, %s", off(32*q, "DI"))
	}
	g.p("JMP %s_sums", name)
	g.label(name + "_nan")
	g.p("MOVL $0x7fc00000, AX")
	g.p("VMOVD AX, X6")
	g.p("JMP %s_codes0", name)
	g.label(name + "_zero")
	g.p("VXORPS X6, X6, X6")
	g.label(name + "_codes0")
	for q := 0; q < 8; q++ {
		g.p("VMOVDQU Y11, %s", off(32*q, "DI"))
	}
	g.label(name + "_sums")
	for q := 0; q < 8; q++ {
		g.p("VPXOR %s, Y12, Y0", off(32*q, "DI"))
		g.p("VPSADBW Y11, Y0, Y0")
		g.p("VPSHUFD $0x4E, Y0, Y1")
		g.p("VPADDQ Y1, Y0, Y0")
		g.p("VPERMD Y0, Y10, Y0")
		g.p("VMOVQ X0, %d(DI)", 256+8*q)
	}
	g.p("VMOVDQU 256(DI), Y0")
	g.p("VMOVDQU 288(DI), Y1")
	g.p("VPSUBD Y9, Y0, Y0")
	g.p("VPSUBD Y9, Y1, Y1")
	g.p("VBROADCASTSS X6, Y6")
	if q4 {
		g.p("VPHADDD Y1, Y0, Y0")
		g.p("VPERMQ $0xD8, Y0, Y0")
		g.p("VCVTDQ2PS Y0, Y0")
		g.p("VMULPS Y6, Y0, Y0")
		g.p("VMOVUPS Y0, 256(DI)")
		g.p("VMOVDQU Y11, 288(DI)")
	} else {
		g.p("VCVTDQ2PS Y0, Y0")
		g.p("VCVTDQ2PS Y1, Y1")
		g.p("VMULPS Y6, Y0, Y0")
		g.p("VMULPS Y6, Y1, Y1")
		g.p("VMOVUPS Y0, 256(DI)")
		g.p("VMOVUPS Y1, 288(DI)")
	}
	g.p("VMOVUPS Y6, 320(DI)")
	g.p("VMOVUPS Y6, 352(DI)")
	g.p("ADDQ $1024, SI")
	g.p("ADDQ $384, DI")
	g.p("DECQ CX")
	g.p("JNZ %s_loop", name)
	g.label(name + "_done")
	g.p("VZEROUPPER")
	g.p("RET")
}

// data emits a read-only constant of the given bytes.
func (g *gen) data(name string, b []byte) {
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for j := 7; j >= 0; j-- {
			v = v<<8 | uint64(b[i+j])
		}
		fmt.Fprintf(&g.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, i, v)
	}
	fmt.Fprintf(&g.b, "GLOBL %s<>(SB), RODATA|NOPTR, $%d\n\n", name, len(b))
}

func fill(n int, v byte) []byte { return bytes.Repeat([]byte{v}, n) }

func dwords(ds ...int) []byte {
	var b []byte
	for _, d := range ds {
		b = append(b, byte(d), byte(d>>8), byte(d>>16), byte(d>>24))
	}
	return b
}

func words(ws ...int) []byte {
	var b []byte
	for _, w := range ws {
		b = append(b, byte(w), byte(w>>8))
	}
	return b
}

func (g *gen) constants() {
	g.data("·qc0F", fill(64, 0x0F))
	g.data("·qc30", fill(64, 0x30))
	g.data("·qc3F", fill(16, 0x3F))
	g.data("·qc80", fill(64, 0x80))
	g.data("·qc03", fill(32, 0x03))
	g.data("·qshrM2", dwords(0, 0, 2, 0, 4, 0, 6, 0))
	for _, c := range []struct{ bits, f32 int }{{2, 0x40000000}, {4, 0x41000000}, {8, 0x43000000}} {
		g.data(fmt.Sprintf("·qfoff%d", c.bits), dwords(c.f32, c.f32, c.f32, c.f32, c.f32, c.f32, c.f32, c.f32)) // 2^(bits−1) as float32
	}
	g.data("·qhi16", dwords(-65536, -65536, -65536, -65536, -65536, -65536, -65536, -65536))
	g.data("·qones", words(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))
	g.data("·qshr04", []byte{0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0})
	// Q4_0 pairs: lanes A×4 B×4 A×4 B×4; the scale of B is word 9.
	var idx []int
	for i := 0; i < 32; i++ {
		idx = append(idx, map[bool]int{false: 0, true: 9}[i < 16 && i/4%2 == 1])
	}
	g.data("·qidxQ4", words(idx...))
	// Q8_0 pairs: lanes A×8 B×8; the scale of B is word 17.
	idx = idx[:0]
	for i := 0; i < 32; i++ {
		idx = append(idx, map[bool]int{false: 0, true: 17}[i >= 8 && i < 16])
	}
	g.data("·qidxQ8", words(idx...))
	// Q4_K: from a 128-bit lane holding sc0..7, m0..7 (broadcast to all
	// four), chunk c's 16-bit scales: sc(2c) in words 0-15, sc(2c+1) in
	// words 16-31.
	var sel []byte
	for c := 0; c < 4; c++ {
		for p := 0; p < 64; p++ {
			switch {
			case p%2 == 1:
				sel = append(sel, 0x80)
			case p < 32:
				sel = append(sel, byte(2*c))
			default:
				sel = append(sel, byte(2*c+1))
			}
		}
	}
	g.data("·qk4sel", sel)
	// Q6_K: from a 128-bit lane holding the 16-bit scales 8e'…8e'+7
	// (broadcast), the scales 4e…4e+3 (within the lane), eight words each.
	sel = sel[:0]
	for e := 0; e < 2; e++ {
		for p := 0; p < 64; p++ {
			sel = append(sel, byte(8*e+2*(p/16)+p%2))
		}
	}
	g.data("·q6sel", sel)
	f := []byte{0, 0, 0, 0x42} // 32.0
	g.data("·qf32", bytes.Repeat(f, 8))
	g.data("·qabs", []byte{0xff, 0xff, 0xff, 0x7f})
	g.data("·qf127", []byte{0, 0, 0xfe, 0x42}) // 127.0
	g.data("·q2048", []byte{0, 8, 0, 0})
	g.data("·qidx4", dwords(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0))
	g.data("·qidx2", dwords(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0))
	g.data("·qpack", dwords(0, 4, 1, 5, 2, 6, 3, 7))
	// Q4_0, four blocks: the code bytes of block j to bytes 16j…16j+15,
	// its scale (word 9j) to words 4j…4j+3.
	var b4 []byte
	for p := 0; p < 64; p++ {
		b4 = append(b4, byte(18*(p/16)+2+p%16))
	}
	g.data("·qidxB4", b4)
	// Q5_0 pairs: lanes A×4 B×4 A×4 B×4; the scale of B is word 11.
	idx = idx[:0]
	for i := 0; i < 32; i++ {
		idx = append(idx, map[bool]int{false: 0, true: 11}[i < 16 && i/4%2 == 1])
	}
	g.data("·qidxQ5", words(idx...))
	g.data("·qc10", fill(64, 0x10))
	// Q5_0 on AVX2: byte i of a broadcast qh word to byte i/8.
	var sp []byte
	for i := 0; i < 32; i++ {
		sp = append(sp, byte(i/8%2+2*(i/16)))
	}
	g.data("·qq5spread", sp)
	var bits []byte
	for i := 0; i < 32; i++ {
		bits = append(bits, 1<<(i%8))
	}
	g.data("·qbitsel", bits)
	// The IQ4_NL levels, in every 128-bit lane: as signed bytes, and
	// plus 128 (unsigned).
	lv := []int{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	var iq, iqu []byte
	for l := 0; l < 4; l++ {
		for _, v := range lv {
			iq = append(iq, byte(int8(v)))
			iqu = append(iqu, byte(v+128))
		}
	}
	// Q5_K: the bit of qh holding the fifth bit of chunk c's low (first
	// 32 bytes) and high nibbles.
	var k5 []byte
	for c := 0; c < 4; c++ {
		k5 = append(k5, fill(32, 1<<(2*c))...)
		k5 = append(k5, fill(32, 1<<(2*c+1))...)
	}
	g.data("·qk5bit", k5)
	g.data("·qiq4", iq[:32])
	g.data("·qiq4u", iqu)
	idx = idx[:0]
	for i := 0; i < 32; i++ {
		idx = append(idx, 9*(i%16/4))
	}
	g.data("·qidxW4", words(idx...))
}

// The kernels MatMul uses, per instruction set and weight type: one for a
// single activation row (GEMV) and one for blocks of rows (GEMM).
type config struct {
	gemv, gemm kern
}

func configs() []config {
	var cs []config
	for _, t := range []qtype{q8_0, q4_0, q4_k, q6_k, q5_0, iq4_nl, q5_k} {
		gemm := kern{avx512, t, 4, 4, 0, false, 0, ""}
		if !t.legacy() {
			gemm = kern{avx512, t, 4, 3, 0, false, 0, ""}
		}
		cs = append(cs, config{kern{avx512, t, 1, 4, 1024, false, 0, ""}, gemm})
	}
	cs = append(cs, config{kern{avx512, q4_0, 1, 4, 1024, true, 0, ""}, kern{avx512, q4_0, 6, 3, 0, true, 0, ""}})
	for _, t := range []qtype{q8_0, q4_0, q4_k, q6_k, q5_0, iq4_nl, q5_k} {
		gemm := kern{avx2, t, 2, 4, 0, false, 0, ""}
		if !t.legacy() {
			gemm = kern{avx2, t, 2, 2, 0, false, 0, ""}
		}
		cs = append(cs, config{kern{avx2, t, 1, 4, 1024, false, 0, ""}, gemm})
	}
	return cs
}

// mlxConfigs returns the MLX affine kernels: AVX2, per code width and
// scale type.
func mlxConfigs() []config {
	var cs []config
	for _, bits := range []int{2, 4, 8} {
		for _, sc := range []string{"BF16", "F16", "F32"} {
			cs = append(cs, config{
				kern{avx2, q8_0, 1, 4, 1024, false, bits, sc},
				kern{avx2, q8_0, 2, 4, 0, false, bits, sc},
			})
		}
	}
	return cs
}

// extra kernels generated for benchmarking other block shapes.
var extra = []kern{
	{avx512, q4_0, 1, 4, 0, false, 0, ""}, {avx512, q4_0, 1, 8, 1024, false, 0, ""}, {avx512, q4_0, 1, 4, 512, false, 0, ""}, {avx512, q4_0, 1, 4, 2048, false, 0, ""}, {avx512, q4_0, 6, 3, 0, false, 0, ""},
	{avx512, q8_0, 1, 4, 0, false, 0, ""}, {avx512, q8_0, 1, 8, 1024, false, 0, ""},
	{avx512, q4_k, 1, 4, 0, false, 0, ""}, {avx512, q4_k, 1, 8, 1024, false, 0, ""}, {avx512, q4_k, 4, 2, 0, false, 0, ""},
	{avx512, q6_k, 1, 4, 0, false, 0, ""}, {avx512, q6_k, 1, 8, 1024, false, 0, ""}, {avx512, q6_k, 4, 2, 0, false, 0, ""},
	{avx2, q4_0, 1, 4, 0, false, 0, ""}, {avx2, q4_k, 1, 4, 0, false, 0, ""},
	{avx512, q4_0, 1, 8, 1024, true, 0, ""}, {avx512, q4_0, 4, 4, 0, true, 0, ""}, {avx512, q4_0, 1, 4, 0, true, 0, ""},
}

func main() {
	var s gen
	s.b.WriteString("// Code generated by gen_qkernels.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	s.constants()
	var decl bytes.Buffer
	decl.WriteString("// Code generated by gen_qkernels.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage cpu\n\nimport \"github.com/lem-engine/lem/compute\"\n\n")
	seen := map[string]bool{}
	add := func(k kern) {
		if seen[k.name()] {
			return
		}
		seen[k.name()] = true
		s.kernel(k)
		fmt.Fprintf(&decl, "//go:noescape\nfunc %s(a *qargs)\n\n", k.name())
	}
	cs := configs()
	for _, c := range cs {
		add(c.gemv)
		add(c.gemm)
	}
	for _, k := range extra {
		add(k)
	}
	mcs := mlxConfigs()
	for _, c := range mcs {
		add(c.gemv)
		add(c.gemm)
	}
	s.qx512Legacy("L64Q4")
	s.qx512Legacy("L64Q8")
	s.qx512Legacy("L128Q4")
	s.qx512K(true)
	s.qx512K(false)
	s.qx2L32()
	s.qx2K(true)
	s.qx2K(false)
	decl.WriteString(`// Activation quantizers; see quantizeX.

//go:noescape
func qxAVX512L64Q4(dst *byte, x *float32, n int, off int)

//go:noescape
func qxAVX512L64Q8(dst *byte, x *float32, n int, off int)

//go:noescape
func qxAVX512L128Q4(dst *byte, x *float32, n int, off int)

//go:noescape
func qxAVX512K4(dst *byte, x *float32, n int)

//go:noescape
func qxAVX512K6(dst *byte, x *float32, n int)

//go:noescape
func qxAVX2L32(dst *byte, x *float32, n int, off int)

//go:noescape
func qxAVX2K4(dst *byte, x *float32, n int)

//go:noescape
func qxAVX2K6(dst *byte, x *float32, n int)

`)
	set := func(k kern, gemv, gemm kern) string {
		return fmt.Sprintf("{level: level%s, dtype: compute.%s, xf: %s, xoff: %d, vbmi: %v, gemv: %s, gemvC: %d, gemvRows: %v, gemm: %s, gemmR: %d, gemmC: %d},\n",
			k.isa, k.typ, k.xfmt(), k.xoff(), k.vbmi(), gemv.name(), gemv.c, gemv.multi(), gemm.name(), gemm.r, gemm.c)
	}
	decl.WriteString("// asmQKernels lists the generated kernels per instruction set and weight type.\nvar asmQKernels = []qkernelSet{\n")
	for _, c := range cs {
		decl.WriteString("\t" + set(c.gemv, c.gemv, c.gemm))
	}
	decl.WriteString("}\n\n// qextraKernels are other block shapes, for benchmarks: each as both gemv and gemm.\nvar qextraKernels = []qkernelSet{\n")
	for _, k := range extra {
		decl.WriteString("\t" + set(k, k, k))
	}
	decl.WriteString("}\n\n// asmMLXKernels lists the generated MLX affine kernel sets, per code width\n// and scale type; mlxKernelSets installs them for every group size.\nvar asmMLXKernels = []mlxKernelSet{\n")
	for _, c := range mcs {
		fmt.Fprintf(&decl, "\t{bits: %d, scale: compute.%s, set: qkernelSet{xf: %s, gemv: %s, gemvC: %d, gemvRows: %v, gemm: %s, gemmR: %d, gemmC: %d}},\n",
			c.gemv.mlx, c.gemv.scale, c.gemv.xfmt(), c.gemv.name(), c.gemv.c, c.gemv.multi(), c.gemm.name(), c.gemm.r, c.gemm.c)
	}
	decl.WriteString("}\n")
	src, err := format.Source(decl.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("qmatmul_amd64.s", []byte(strings.TrimRight(s.b.String(), "\n")+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("qmatmul_amd64.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
