//go:build ignore

// gen_qpack writes qpack_amd64.s and qpack_amd64.go: the AVX-512 VNNI
// kernels of the packed quantized weights (see qpack.go). Run it with go
// generate.
//
// A packed group holds 16 weight rows. Per 32-element block it stores the
// codes as vectors of 16 int32 lanes, lane r holding 4 consecutive code
// bytes of row r, so that one VPDPBUSD with the matching 4 activation
// codes broadcast from memory adds 4 products to each of the 16 rows' sums;
// the rows' 16 float16 scales follow all the codes of the group. The
// activations are in layout xfL32 (codes, dx at byte 32, −off·Σqs at byte
// 64), whose offset makes the weights' codes unsigned: Q8_0 codes are
// stored with 128 added, Q4_0 nibbles are unsigned already (offset 8).
//
// Per block and activation row, the integer sums of the 16 rows go through
// VCVTDQ2PS and are added to the float accumulator times the rows' scales
// times dx. The one-row kernel loops over a.groups groups and splits each
// block's products over two integer accumulators (the chain of VPDPBUSD
// is long); the many-row kernels take R activation rows of one group.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

// qpargs offsets; TestQpargsLayout checks them against the Go struct.
const (
	offW       = 0
	offX       = 8
	offNB      = 16
	offGroups  = 24
	offDst     = 32
	offLdd     = 40
	offXstride = 48
)

type qtype int

const (
	q8_0 qtype = iota
	q4_0
	q5_0
	q4_k
	q6_k
)

func (q qtype) String() string { return [...]string{"Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K"}[q] }

// codeBytes is the size of one block's codes in a group.
func (q qtype) codeBytes() int { return [...]int{512, 256, 320}[q] }

type gen struct{ b bytes.Buffer }

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", args...) }

func (g *gen) label(l string) { fmt.Fprintf(&g.b, "%s:\n", l) }

func z(i int) string { return fmt.Sprintf("Z%d", i) }

func off(o int, reg string) string {
	if o == 0 {
		return "(" + reg + ")"
	}
	return fmt.Sprintf("%d(%s)", o, reg)
}

// xregs hold the activation row pointers of the many-row kernels.
var xregs = []string{"BX", "DX", "R8", "R9", "R10", "R11", "R12", "R13"}

// blockCodes emits the products of one block's codes (at W) with the
// activation codes at each of xs into the integer accumulators acc(t, j),
// where j is the 4-element chunk of the block (so that the one-row kernel
// can alternate accumulators).
func (g *gen) blockCodes(q qtype, xs []string, acc func(t, j int) int) {
	switch q {
	case q8_0:
		for j := 0; j < 8; j++ {
			W := 16 + j%4
			g.p("VMOVDQU64 %s, %s", off(64*j, "SI"), z(W))
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, %s, %s", off(4*j, xp), z(W), z(acc(t, j)))
			}
		}
	case q4_0, q5_0:
		if q == q5_0 {
			g.p("VMOVDQU64 256(SI), Z22")
		}
		for j := 0; j < 4; j++ {
			L, H := 16+2*(j%2), 17+2*(j%2)
			g.p("VPANDD %s, Z31, %s", off(64*j, "SI"), z(L))
			g.p("VPSRLW $4, %s, %s", off(64*j, "SI"), z(H))
			g.p("VPANDD Z31, %s, %s", z(H), z(H))
			if q == q5_0 {
				// Bit 4 of each code from the fifth-bit vector: byte i
				// holds in bit j the bit of element 4j+i, in bit 4+j that
				// of element 16+4j+i. 0xD8 selects Z30's bit (0x10) from
				// the shifted vector, the others from the nibbles.
				g.p("VPSLLD $%d, Z22, Z20", 4-j)
				g.p("VPTERNLOGD $0xD8, Z30, Z20, %s", z(L))
				hs := "Z22"
				if j > 0 {
					g.p("VPSRLD $%d, Z22, Z21", j)
					hs = "Z21"
				}
				g.p("VPTERNLOGD $0xD8, Z30, %s, %s", hs, z(H))
			}
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, %s, %s", off(4*j, xp), z(L), z(acc(t, 2*j)))
			}
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, %s, %s", off(16+4*j, xp), z(H), z(acc(t, 2*j+1)))
			}
		}
	}
}

func (g *gen) constants(q qtype) {
	if q != q8_0 {
		g.p("MOVL $0x0f0f0f0f, AX")
		g.p("VPBROADCASTD AX, Z31")
	}
	if q == q5_0 {
		g.p("MOVL $0x10101010, AX")
		g.p("VPBROADCASTD AX, Z30")
	}
}

// gemv: one activation row (BX), a.groups groups of 16 rows from a.w,
// 16 sums per group to a.dst. Z0/Z1 integer accumulators of a block, Z2
// the float accumulator, Z3 the scales.
func (g *gen) gemv(q qtype, pf int) string {
	name := fmt.Sprintf("qpAVX512%sR1", q)
	if pf > 0 {
		name += fmt.Sprintf("p%d", pf)
	}
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	g.constants(q)
	g.p("MOVQ %d(DI), SI", offW)
	g.p("MOVQ %d(DI), R14", offDst)
	g.p("MOVQ %d(DI), R13", offGroups)
	g.p("MOVQ %d(DI), R12", offNB)
	g.p("IMUL3Q $%d, R12, R11", q.codeBytes()) // bytes of a group's codes
	g.label(name + "_group")
	g.p("MOVQ %d(DI), BX", offX)
	g.p("LEAQ (SI)(R11*1), AX") // the group's scales
	g.p("MOVQ R12, CX")
	g.p("VPXORD Z2, Z2, Z2")
	g.label(name + "_block")
	g.p("VPBROADCASTD 64(BX), Z0")
	g.p("VPXORD Z1, Z1, Z1")
	g.blockCodes(q, []string{"BX"}, func(t, j int) int { return j % 2 })
	for o := 0; pf > 0 && o < q.codeBytes(); o += 64 {
		g.p("PREFETCHT0 %s", off(pf+o, "SI"))
	}
	g.p("VPADDD Z1, Z0, Z0")
	g.p("VCVTDQ2PS Z0, Z0")
	g.p("VCVTPH2PS (AX), Z3")
	g.p("VMULPS.BCST 32(BX), Z3, Z3")
	g.p("VFMADD231PS Z0, Z3, Z2")
	g.p("ADDQ $%d, SI", q.codeBytes())
	g.p("ADDQ $32, AX")
	g.p("ADDQ $96, BX")
	g.p("DECQ CX")
	g.p("JNZ %s_block", name)
	g.p("VMOVUPS Z2, (R14)")
	g.p("ADDQ $64, R14")
	g.p("MOVQ AX, SI") // the next group follows the scales
	g.p("DECQ R13")
	g.p("JNZ %s_group", name)
	g.p("VZEROUPPER")
	g.p("RET")
	return name
}

// gemm: R activation rows (a.x, a.xstride apart) times one group of 16
// rows; row t's 16 sums to a.dst + t·a.ldd. Z0..Z(R-1) integer
// accumulators, Z8.. float accumulators, Z20 scales, Z21 a temporary.
func (g *gen) gemm(q qtype, R int) string {
	name := fmt.Sprintf("qpAVX512%sR%d", q, R)
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	g.constants(q)
	g.p("MOVQ %d(DI), SI", offW)
	g.p("MOVQ %d(DI), CX", offNB)
	g.p("IMUL3Q $%d, CX, AX", q.codeBytes())
	g.p("ADDQ SI, AX")
	g.p("MOVQ %d(DI), R14", offXstride)
	g.p("MOVQ %d(DI), BX", offX)
	for t := 1; t < R; t++ {
		g.p("LEAQ (%s)(R14*1), %s", xregs[t-1], xregs[t])
	}
	for t := 0; t < R; t++ {
		g.p("VPXORD %s, %s, %s", z(8+t), z(8+t), z(8+t))
	}
	xs := xregs[:R]
	g.label(name + "_block")
	for t, xp := range xs {
		g.p("VPBROADCASTD 64(%s), %s", xp, z(t))
	}
	g.blockCodes(q, xs, func(t, j int) int { return t })
	g.p("VCVTPH2PS (AX), Z20")
	for t, xp := range xs {
		g.p("VCVTDQ2PS %s, %s", z(t), z(t))
		g.p("VMULPS.BCST 32(%s), Z20, Z21", xp)
		g.p("VFMADD231PS %s, Z21, %s", z(t), z(8+t))
	}
	g.p("ADDQ $%d, SI", q.codeBytes())
	g.p("ADDQ $32, AX")
	for _, xp := range xs {
		g.p("ADDQ $96, %s", xp)
	}
	g.p("DECQ CX")
	g.p("JNZ %s_block", name)
	g.p("MOVQ %d(DI), R14", offDst)
	g.p("MOVQ %d(DI), AX", offLdd)
	for t := 0; t < R; t++ {
		g.p("VMOVUPS %s, (R14)", z(8+t))
		if t < R-1 {
			g.p("ADDQ AX, R14")
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	return name
}

func main() {
	var s gen
	s.b.WriteString("// Code generated by gen_qpack.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	var decl, decls bytes.Buffer
	decl.WriteString("// Code generated by gen_qpack.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage cpu\n\nimport \"lem/compute\"\n\n")
	table := "// asmPackKernels lists the packed kernels per weight type: the one-row\n// kernel, then the kernels of 2 to qpmaxR activation rows.\nvar asmPackKernels = []qpackSet{\n"
	for _, q := range []qtype{q8_0, q4_0, q5_0, q4_k, q6_k} {
		var names []string
		maxR := len(xregs)
		if q == q4_k || q == q6_k {
			maxR = kmaxR
			names = append(names, s.kquant(q, 1, true))
			for R := 2; R <= maxR; R++ {
				names = append(names, s.kquant(q, R, false))
			}
		} else {
			names = append(names, s.gemv(q, 0))
			for R := 2; R <= maxR; R++ {
				names = append(names, s.gemm(q, R))
			}
		}
		for _, n := range names {
			fmt.Fprintf(&decl, "//go:noescape\nfunc %s(a *qpargs)\n\n", n)
		}
		var gemm []string
		for i, n := range names[1:] {
			gemm = append(gemm, fmt.Sprintf("%d: %s", i+2, n))
		}
		table += fmt.Sprintf("\t{dtype: compute.%s, maxR: %d, gemv: %s, gemm: [qpmaxR + 1]func(*qpargs){%s}},\n", q, maxR, names[0], strings.Join(gemm, ", "))
	}
	decl.WriteString(table + "}\n")
	decl.WriteString("\n// qpackExtra are one-row kernels with other prefetch distances, for benchmarks.\nvar qpackExtra = []qpackSet{\n")
	for _, q := range []qtype{q8_0, q4_0} {
		for _, pf := range []int{512, 1024, 2048, 4096} {
			n := s.gemv(q, pf)
			fmt.Fprintf(&decl, "\t{dtype: compute.%s, gemv: %s},\n", q, n)
			fmt.Fprintf(&decls, "//go:noescape\nfunc %s(a *qpargs)\n\n", n)
		}
	}
	decl.WriteString("}\n\n")
	decl.Write(decls.Bytes())
	src, err := format.Source(decl.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("qpack_amd64.s", s.b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("qpack_amd64.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}

// kmaxR is the most activation rows of the k-quant kernels (registers).
const kmaxR = 3

// kquant: Q4_K and Q6_K, R activation rows (layouts xfK4, xfK6) times
// groups of 16 rows, one super-block per step; with loop set, a.groups
// groups (one activation row), else one. See qpack.go for the layouts.
//
// Registers, for activation row t: Z(t) and Z(R+t) integer sums of the
// sub-blocks in hand, Z(2R+t) the super-block's integer sum (sub-block
// sums times scales), Z(3R+t) its correction (Σ min·Σx for Q4_K, Σ
// 32·scale·Σx for Q6_K), Z(4R+t) the float accumulator. Z15-Z27
// temporaries, Z28-Z31 masks.
func (g *gen) kquant(q qtype, R int, loop bool) string {
	name := fmt.Sprintf("qpAVX512%sR%d", q, R)
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	g.p("MOVL $0x0f0f0f0f, AX")
	g.p("VPBROADCASTD AX, Z31")
	if q == q4_k {
		g.p("MOVL $63, AX")
		g.p("VPBROADCASTD AX, Z30")
		g.p("MOVL $15, AX")
		g.p("VPBROADCASTD AX, Z29")
		g.p("MOVL $0x30, AX")
		g.p("VPBROADCASTD AX, Z28")
	} else {
		g.p("MOVL $0x30303030, AX")
		g.p("VPBROADCASTD AX, Z30")
		g.p("MOVL $0x42000000, AX") // 32.0
		g.p("VPBROADCASTD AX, Z29")
	}
	sb := 2304 // bytes of a super-block of 16 rows
	if q == q6_k {
		sb = 3360
	}
	g.p("MOVQ %d(DI), SI", offW)
	g.p("MOVQ %d(DI), R14", offDst)
	if loop {
		g.p("MOVQ %d(DI), R13", offGroups)
	}
	xs := xregs[:R]
	g.label(name + "_group")
	g.p("MOVQ %d(DI), BX", offX)
	if R > 1 {
		g.p("MOVQ %d(DI), AX", offXstride)
		for t := 1; t < R; t++ {
			g.p("LEAQ (%s)(AX*1), %s", xregs[t-1], xregs[t])
		}
	}
	g.p("MOVQ %d(DI), CX", offNB)
	for t := 0; t < R; t++ {
		g.p("VPXORD %s, %s, %s", z(4*R+t), z(4*R+t), z(4*R+t))
	}
	g.label(name + "_block")
	for t := 0; t < R; t++ {
		g.p("VPXORD %s, %s, %s", z(2*R+t), z(2*R+t), z(2*R+t))
		g.p("VPXORD %s, %s, %s", z(3*R+t), z(3*R+t), z(3*R+t))
	}
	if q == q4_k {
		g.q4k(R, xs)
	} else {
		g.q6k(R, xs)
	}
	// F += S·(d·dx) − corr·dmin (Q4_K) or S·(d·dx) − corr·32·d (Q6_K).
	g.p("VCVTPH2PS %d(SI), Z24", map[qtype]int{q4_k: 2048, q6_k: 3328}[q])
	if q == q4_k {
		g.p("VCVTPH2PS 2080(SI), Z25")
	} else {
		g.p("VMULPS Z29, Z24, Z25") // 32·d, for the codes' offset of 32
	}
	for t, xp := range xs {
		g.p("VCVTDQ2PS %s, %s", z(2*R+t), z(2*R+t))
		g.p("VMULPS.BCST 320(%s), Z24, Z26", xp)
		g.p("VFMADD231PS %s, Z26, %s", z(2*R+t), z(4*R+t))
		g.p("VFNMADD231PS %s, Z25, %s", z(3*R+t), z(4*R+t))
	}
	g.p("ADDQ $%d, SI", sb)
	for _, xp := range xs {
		g.p("ADDQ $384, %s", xp)
	}
	g.p("DECQ CX")
	g.p("JNZ %s_block", name)
	if loop {
		g.p("VMOVUPS %s, (R14)", z(4*R))
		g.p("ADDQ $64, R14")
		g.p("DECQ R13")
		g.p("JNZ %s_group", name)
	} else {
		g.p("MOVQ %d(DI), AX", offLdd)
		for t := 0; t < R; t++ {
			g.p("VMOVUPS %s, (R14)", z(4*R+t))
			if t < R-1 {
				g.p("ADDQ AX, R14")
			}
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	return name
}

// q4k emits one Q4_K super-block: per pair of sub-blocks, 8 code vectors
// whose low nibbles are sub-block 2p's and high nibbles 2p+1's codes, then
// each sub-block's 6-bit scale and min unpacked from the vectors A, B, C
// (the 12 scale bytes of each row, 4 per lane).
func (g *gen) q4k(R int, xs []string) {
	g.p("VMOVDQU64 2112(SI), Z21")
	g.p("VMOVDQU64 2176(SI), Z22")
	g.p("VMOVDQU64 2240(SI), Z23")
	for p := 0; p < 4; p++ {
		for t := 0; t < R; t++ {
			g.p("VPXORD %s, %s, %s", z(t), z(t), z(t))
			g.p("VPXORD %s, %s, %s", z(R+t), z(R+t), z(R+t))
		}
		for v := 0; v < 8; v++ {
			o := 512*p + 64*v
			g.p("VPANDD %s, Z31, Z15", off(o, "SI"))
			g.p("VPSRLW $4, %s, Z16", off(o, "SI"))
			g.p("VPANDD Z31, Z16, Z16")
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, Z15, %s", off(64*p+4*v, xp), z(t))
			}
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, Z16, %s", off(64*p+32+4*v, xp), z(R+t))
			}
		}
		for h := 0; h < 2; h++ {
			j := 2*p + h
			// Z17: scale, Z18: min of sub-block j, as int32 lanes.
			if j < 4 {
				g.shr(8*j, "Z21", "Z17")
				g.p("VPANDD Z30, Z17, Z17")
				g.shr(8*j, "Z22", "Z18")
				g.p("VPANDD Z30, Z18, Z18")
			} else {
				jj := j - 4
				g.shr(8*jj, "Z23", "Z17")
				g.p("VPANDD Z29, Z17, Z17")
				g.shr(8*jj+2, "Z21", "Z19")
				g.p("VPTERNLOGD $0xF8, Z28, Z19, Z17") // Z17 |= Z19 & 0x30
				g.shr(8*jj+4, "Z23", "Z18")
				g.p("VPANDD Z29, Z18, Z18")
				g.shr(8*jj+2, "Z22", "Z19")
				g.p("VPTERNLOGD $0xF8, Z28, Z19, Z18")
			}
			g.p("VCVTDQ2PS Z18, Z18")
			for t, xp := range xs {
				I := z(h*R + t)
				g.p("VPMULLD Z17, %s, %s", I, I)
				g.p("VPADDD %s, %s, %s", I, z(2*R+t), z(2*R+t))
				g.p("VFMADD231PS.BCST %s, Z18, %s", off(256+4*j, xp), z(3*R+t))
			}
		}
	}
}

// shr emits dst = src >> n (dword lanes), or a copy for n = 0.
func (g *gen) shr(n int, src, dst string) {
	if n == 0 {
		g.p("VMOVDQA64 %s, %s", src, dst)
		return
	}
	g.p("VPSRLD $%d, %s, %s", n, src, dst)
}

// q6k emits one Q6_K super-block. Per half h and chunk c of 4 elements,
// the low-bit vectors V0 (ql bytes 4c.., whose nibbles are the codes of
// quarters 0 and 2) and V1 (ql bytes 32+4c.., quarters 1 and 3) and the
// high-bit vector U (qh bytes 4c.., two bits per quarter) make the 6-bit
// codes of 4 sub-blocks; per quarter of 4 chunks, the sub-block's sums are
// scaled by its signed scale (VPMOVSXBD from 16 bytes, one per row).
func (g *gen) q6k(R int, xs []string) {
	for h := 0; h < 2; h++ {
		for ch := 0; ch < 2; ch++ {
			// The 4 sub-blocks 8h+2q+ch in two passes: quarters 0 and 2
			// (nibbles of V0), then 1 and 3 (V1), their sums in Z(t), Z(R+t).
			for pass := 0; pass < 2; pass++ {
				for t := 0; t < R; t++ {
					g.p("VPXORD %s, %s, %s", z(t), z(t), z(t))
					g.p("VPXORD %s, %s, %s", z(R+t), z(R+t), z(R+t))
				}
				for c := 4 * ch; c < 4*ch+4; c++ {
					ql := 1024*h + 64*c // ql vectors: half h, 16 vectors of 64 bytes
					if pass == 1 {
						ql += 512 // V1: ql bytes 32+4c
					}
					u := 2048 + 512*h + 64*c // qh vectors
					g.p("VMOVDQU64 %s, Z15", off(ql, "SI"))
					g.p("VMOVDQU64 %s, Z21", off(u, "SI"))
					// Low quarter (0 or 1): nibble | bits (2·pass) of U at bit 4.
					g.p("VPANDD Z31, Z15, Z16")
					if pass == 0 {
						g.p("VPSLLW $4, Z21, Z17")
					} else {
						g.p("VPSLLW $2, Z21, Z17")
					}
					g.p("VPTERNLOGD $0xF8, Z30, Z17, Z16")
					// High quarter (2 or 3).
					g.p("VPSRLW $4, Z15, Z18")
					g.p("VPANDD Z31, Z18, Z18")
					if pass == 0 {
						g.p("VPTERNLOGD $0xF8, Z30, Z21, Z18")
					} else {
						g.p("VPSRLW $2, Z21, Z17")
						g.p("VPTERNLOGD $0xF8, Z30, Z17, Z18")
					}
					e := 128*h + 32*pass + 4*c
					for t, xp := range xs {
						g.p("VPDPBUSD.BCST %s, Z16, %s", off(e, xp), z(t))
					}
					for t, xp := range xs {
						g.p("VPDPBUSD.BCST %s, Z18, %s", off(e+64, xp), z(R+t))
					}
				}
				// Sub-blocks of quarters pass and pass+2.
				for k, qq := range []int{pass, pass + 2} {
					j := 8*h + 2*qq + ch
					g.p("VPMOVSXBD %d(SI), Z17", 3072+16*j)
					g.p("VCVTDQ2PS Z17, Z18")
					for t, xp := range xs {
						I := z(k*R + t)
						g.p("VPMULLD Z17, %s, %s", I, I)
						g.p("VPADDD %s, %s, %s", I, z(2*R+t), z(2*R+t))
						g.p("VFMADD231PS.BCST %s, Z18, %s", off(256+4*j, xp), z(3*R+t))
					}
				}
			}
		}
	}
}
