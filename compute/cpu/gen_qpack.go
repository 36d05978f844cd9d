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

// pfspec is a software prefetch of the one-row kernels: per 64 bytes of
// codes read, one prefetch instruction op (PREFETCHT0, PREFETCHT2,
// PREFETCHNTA) dist bytes ahead. A zero dist is none.
type pfspec struct {
	dist int
	op   string
}

// suffix names a kernel variant: p4096 for PREFETCHT0 4096 bytes ahead,
// p4096t2 or p4096nta for the other hints.
func (p pfspec) suffix() string {
	if p.dist == 0 {
		return ""
	}
	s := fmt.Sprintf("p%d", p.dist)
	switch p.op {
	case "PREFETCHT2":
		s += "t2"
	case "PREFETCHNTA":
		s += "nta"
	case "PREFETCHT1":
		s += "t1"
	}
	return s
}

// prefetch emits the prefetches of the bytes o..o+n of SI for each spec.
// pairPrefetch prefetches a pair of blocks (codes at offset o, scales at
// so) for the loops of pairs: the prefetches cover the whole pair, scales
// included, half the lines in each block (the odd last block: its own).
func (g *gen) pairPrefetch(q qtype, pfs []pfspec, o, so int) {
	cb := q.codeBytes()
	half := (2*cb + 64 + 127) / 128 * 64
	switch {
	case o == cb:
		g.prefetch(pfs, half, 2*cb+64-half)
	case so == cb:
		g.prefetch(pfs, 0, cb+64)
	default:
		g.prefetch(pfs, 0, half)
	}
}

func (g *gen) prefetch(pfs []pfspec, o, n int) {
	for _, pf := range pfs {
		for p := 0; pf.dist > 0 && p < n; p += 64 {
			g.p("%s %s", pf.op, off(pf.dist+o+p, "SI"))
		}
	}
}

func pfname(pfs []pfspec) string {
	var s string
	for _, p := range pfs {
		s += p.suffix()
	}
	return s
}

// pfsetting is the LEM_CPU_PREFETCH value that names a variant (see
// packPrefetch): "4096", "8192t2", "1024+8192t2"; "0" for none.
func pfsetting(pfs []pfspec) string {
	var parts []string
	for _, p := range pfs {
		parts = append(parts, strings.TrimPrefix(p.suffix(), "p"))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "+")
}

type gen struct {
	b bytes.Buffer
	// gfni: unpack Q4_0's high nibbles with VGF2P8AFFINEQB (the matrix in
	// Z29), one instruction instead of a shift and a mask.
	gfni bool
	// hiShift: in the one-row kernel, take the high codes of Q4_0 (4, the
	// high nibbles with one mask, 0xF0 in Z30, and no shift) and Q5_0 (3,
	// see q5Mix) in place, 2^hiShift times their value; their sums have
	// their own accumulator, which the kernel shifts right by hiShift per
	// block (exact: every product is a multiple of 2^hiShift). A shift
	// runs on one port only, the one VPDPBUSD needs too; a mask runs on
	// two. 0: the codes are shifted down before the products.
	hiShift int
}

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
func (g *gen) blockCodes(q qtype, xs []string, acc func(t, j int) int, o, xo int) {
	switch q {
	case q8_0:
		for j := 0; j < 8; j++ {
			W := 16 + j%4
			g.p("VMOVDQU64 %s, %s", off(o+64*j, "SI"), z(W))
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, %s, %s", off(xo+4*j, xp), z(W), z(acc(t, j)))
			}
		}
	case q4_0:
		for j := 0; j < 4; j++ {
			L, H := 16+2*(j%2), 17+2*(j%2)
			if g.gfni {
				g.p("VMOVDQU64 %s, %s", off(o+64*j, "SI"), z(H))
				g.p("VPANDD Z31, %s, %s", z(H), z(L))
				g.p("VGF2P8AFFINEQB $0, Z29, %s, %s", z(H), z(H))
			} else if g.hiShift > 0 {
				g.p("VPANDD %s, Z31, %s", off(o+64*j, "SI"), z(L))
				g.p("VPANDD %s, Z30, %s", off(o+64*j, "SI"), z(H))
			} else {
				g.p("VPANDD %s, Z31, %s", off(o+64*j, "SI"), z(L))
				g.p("VPSRLW $4, %s, %s", off(o+64*j, "SI"), z(H))
				g.p("VPANDD Z31, %s, %s", z(H), z(H))
			}
			g.dots(xs, acc, L, H, j, xo)
		}
	case q5_0:
		// The fifth-bit vector (see q5Mix): byte i holds in bits 2j and
		// 2j+1 the bits chunk j's codes lack. Its nibbles index the
		// lookups (Z28: chunks 0 and 2, Z29: 1 and 3), which give bit 4
		// of the low code (0x10) and bit 0 of the high code, in place
		// (0x08); a select by the mask 0x0F (Z31) merges them with the
		// code bytes.
		g.p("VMOVDQU64 %s, Z22", off(o+256, "SI"))
		g.p("VPSRLW $4, Z22, Z21")
		g.p("VPANDD Z31, Z21, Z21")
		g.p("VPANDD Z31, Z22, Z22")
		for j := 0; j < 4; j++ {
			L, H := 16+2*(j%2), 17+2*(j%2)
			idx, tab := "Z22", 28+j%2
			if j >= 2 {
				idx = "Z21"
			}
			g.p("VPSHUFB %s, %s, %s", idx, z(tab), z(L))
			g.p("VPSHUFB %s, %s, %s", idx, z(tab), z(H))
			g.p("VPTERNLOGD $0xB8, %s, Z31, %s", off(o+64*j, "SI"), z(L)) // mask ? codes : lookup
			g.p("VPTERNLOGD $0xE2, %s, Z31, %s", off(o+64*j, "SI"), z(H)) // mask ? lookup : codes
			if g.hiShift == 0 {
				g.p("VPSRLW $3, %s, %s", z(H), z(H))
			}
			g.dots(xs, acc, L, H, j, xo)
		}
	}
}

// dots emits the products of chunk j's low codes (in L) and high codes
// (in H) with the activation codes at each of xs.
func (g *gen) dots(xs []string, acc func(t, j int) int, L, H, j, xo int) {
	for t, xp := range xs {
		g.p("VPDPBUSD.BCST %s, %s, %s", off(xo+4*j, xp), z(L), z(acc(t, 2*j)))
	}
	for t, xp := range xs {
		g.p("VPDPBUSD.BCST %s, %s, %s", off(xo+16+4*j, xp), z(H), z(acc(t, 2*j+1)))
	}
}

func (g *gen) constants(q qtype) {
	if q != q8_0 {
		g.p("MOVL $0x0f0f0f0f, AX")
		g.p("VPBROADCASTD AX, Z31")
	}
	if q == q5_0 {
		g.p("VBROADCASTI32X4 ·q5Lookup(SB), Z28")
		g.p("VBROADCASTI32X4 ·q5Lookup+16(SB), Z29")
	}
	if g.hiShift == 4 {
		g.p("MOVL $0xf0f0f0f0, AX")
		g.p("VPBROADCASTD AX, Z30")
	}
	if g.gfni {
		// Output bit i (i < 4) of a byte is its bit i+4: rows 7-i of the
		// matrix select bit i+4.
		g.p("MOVQ $0x1020408000000000, AX")
		g.p("VPBROADCASTQ AX, Z29")
	}
}

// The legacy types' packed blocks come in pairs, the codes of blocks
// 2P and 2P+1 then their scales (an odd last block: its codes, then its
// scales), so that a group is read from start to end.

// pairs emits the loop over a row's blocks: body(o, so, xo) emits one
// block with its codes at o(SI), its scales at so(SI) and its activations
// at xo from the activation pointers, which step moves on.
func (g *gen) pairs(q qtype, name string, body func(o, so, xo int), step func(xbytes int)) {
	cb := q.codeBytes()
	g.p("MOVQ %d(DI), CX", offNB)
	g.p("SHRQ $1, CX")
	g.p("JZ %s_odd", name)
	g.label(name + "_pair")
	body(0, 2*cb, 0)
	body(cb, 2*cb+32, 96)
	g.p("ADDQ $%d, SI", 2*(cb+32))
	step(192)
	g.p("DECQ CX")
	g.p("JNZ %s_pair", name)
	g.label(name + "_odd")
	g.p("TESTQ $1, %d(DI)", offNB)
	g.p("JZ %s_done", name)
	body(0, cb, 0)
	g.p("ADDQ $%d, SI", cb+32)
	step(96)
	g.label(name + "_done")
}

// gemv: one activation row (BX), a.groups groups of 16 rows from a.w,
// 16 sums per group to a.dst. Z0/Z1 integer accumulators of a block, Z2
// the float accumulator, Z3 the scales.
func (g *gen) gemv(q qtype, pfs ...pfspec) string {
	name := fmt.Sprintf("qpAVX512%sR1", q)
	if g.gfni {
		name = fmt.Sprintf("qpAVX512GFNI%sR1", q)
	}
	name += pfname(pfs)
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	switch {
	case q == q4_0 && !g.gfni:
		g.hiShift = 4
	case q == q5_0:
		g.hiShift = 3
	}
	defer func() { g.hiShift = 0 }()
	g.constants(q)
	g.p("MOVQ %d(DI), SI", offW)
	g.p("MOVQ %d(DI), R14", offDst)
	g.p("MOVQ %d(DI), R13", offGroups)
	g.label(name + "_group")
	g.p("MOVQ %d(DI), BX", offX)
	g.p("VPXORD Z2, Z2, Z2")
	g.pairs(q, name, func(o, so, xo int) {
		g.p("VPBROADCASTD %d(BX), Z0", xo+64)
		g.p("VPXORD Z1, Z1, Z1")
		g.blockCodes(q, []string{"BX"}, func(t, j int) int { return j % 2 }, o, xo)
		g.pairPrefetch(q, pfs, o, so)
		if g.hiShift > 0 {
			g.p("VPSRAD $%d, Z1, Z1", g.hiShift)
		}
		g.p("VPADDD Z1, Z0, Z0")
		g.p("VCVTDQ2PS Z0, Z0")
		g.p("VCVTPH2PS %s, Z3", off(so, "SI"))
		g.p("VMULPS.BCST %d(BX), Z3, Z3", xo+32)
		g.p("VFMADD231PS Z0, Z3, Z2")
	}, func(xb int) { g.p("ADDQ $%d, BX", xb) })
	g.p("VMOVUPS Z2, (R14)")
	g.p("ADDQ $64, R14")
	g.p("DECQ R13")
	g.p("JNZ %s_group", name)
	g.p("VZEROUPPER")
	g.p("RET")
	return name
}

// gemm: R activation rows (a.x, a.xstride apart) times one group of 16
// rows; row t's 16 sums to a.dst + t·a.ldd. Z0..Z(R-1) integer
// accumulators, Z8.. float accumulators, Z20 scales, Z21 a temporary.
func (g *gen) gemm(q qtype, R int, pfs ...pfspec) string {
	name := fmt.Sprintf("qpAVX512%sR%d", q, R) + pfname(pfs)
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	g.constants(q)
	g.p("MOVQ %d(DI), SI", offW)
	g.p("MOVQ %d(DI), R14", offXstride)
	g.p("MOVQ %d(DI), BX", offX)
	for t := 1; t < R; t++ {
		g.p("LEAQ (%s)(R14*1), %s", xregs[t-1], xregs[t])
	}
	for t := 0; t < R; t++ {
		g.p("VPXORD %s, %s, %s", z(8+t), z(8+t), z(8+t))
	}
	xs := xregs[:R]
	g.pairs(q, name, func(o, so, xo int) {
		for t, xp := range xs {
			g.p("VPBROADCASTD %d(%s), %s", xo+64, xp, z(t))
		}
		g.blockCodes(q, xs, func(t, j int) int { return t }, o, xo)
		g.pairPrefetch(q, pfs, o, so)
		g.p("VCVTPH2PS %s, Z20", off(so, "SI"))
		for t, xp := range xs {
			g.p("VCVTDQ2PS %s, %s", z(t), z(t))
			g.p("VMULPS.BCST %d(%s), Z20, Z21", xo+32, xp)
			g.p("VFMADD231PS %s, Z21, %s", z(t), z(8+t))
		}
	}, func(xb int) {
		for _, xp := range xs {
			g.p("ADDQ $%d, %s", xb, xp)
		}
	})
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
	decl.WriteString("// Code generated by gen_qpack.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage cpu\n\nimport \"github.com/lem-engine/lem/compute\"\n\n")
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
			names = append(names, s.gemv(q))
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
	decl.WriteString("\n// qpackExtra are the one-row kernels without and with software prefetch\n// (named by their prefetch field), among which packPrefetch picks each\n// type's default for the CPU, and for benchmarks.\nvar qpackExtra = []qpackSet{\n")
	t0 := func(d int) pfspec { return pfspec{d, "PREFETCHT0"} }
	t2 := func(d int) pfspec { return pfspec{d, "PREFETCHT2"} }
	nta := func(d int) pfspec { return pfspec{d, "PREFETCHNTA"} }
	variants := [][]pfspec{
		{t0(512)}, {t0(1024)}, {t0(2048)}, {t0(4096)}, {t0(8192)}, {t0(16384)},
		{t2(4096)}, {t2(8192)}, {t2(16384)}, {nta(4096)}, {nta(8192)},
		{t0(1024), t2(8192)}, {t0(2048), t2(16384)},
	}
	for _, q := range []qtype{q8_0, q4_0, q5_0, q4_k, q6_k} {
		fmt.Fprintf(&decl, "\t{dtype: compute.%s, gemv: qpAVX512%sR1, prefetch: \"0\"},\n", q, q)
		for _, pfs := range variants {
			var n string
			if q == q4_k || q == q6_k {
				n = s.kquant(q, 1, true, pfs...)
			} else {
				n = s.gemv(q, pfs...)
			}
			fmt.Fprintf(&decl, "\t{dtype: compute.%s, gemv: %s, prefetch: %q},\n", q, n, pfsetting(pfs))
			fmt.Fprintf(&decls, "//go:noescape\nfunc %s(a *qpargs)\n\n", n)
		}
	}
	s.gfni = true
	for _, pfs := range [][]pfspec{nil, {t0(2048)}, {t0(8192)}} {
		n := s.gemv(q4_0, pfs...)
		fmt.Fprintf(&decl, "\t{dtype: compute.Q4_0, gemv: %s, gfni: true, prefetch: %q},\n", n, pfsetting(pfs))
		fmt.Fprintf(&decls, "//go:noescape\nfunc %s(a *qpargs)\n\n", n)
	}
	s.gfni = false
	decl.WriteString("}\n\n")
	decl.WriteString("// qpackGemmExtra are the many-row kernels with software prefetch (named\n// by their prefetch field), among which packGemmPrefetch picks each type's\n// default for the CPU.\nvar qpackGemmExtra = []qpackSet{\n")
	for _, q := range []qtype{q8_0, q4_0, q5_0, q4_k, q6_k} {
		for _, pfs := range gemmVariants {
			maxR := len(xregs)
			if q == q4_k || q == q6_k {
				maxR = kmaxR
			}
			var gemm []string
			for R := 2; R <= maxR; R++ {
				var n string
				if q == q4_k || q == q6_k {
					n = s.kquant(q, R, false, pfs...)
				} else {
					n = s.gemm(q, R, pfs...)
				}
				gemm = append(gemm, fmt.Sprintf("%d: %s", R, n))
				fmt.Fprintf(&decls, "//go:noescape\nfunc %s(a *qpargs)\n\n", n)
			}
			fmt.Fprintf(&decl, "\t{dtype: compute.%s, maxR: %d, prefetch: %q, gemm: [qpmaxR + 1]func(*qpargs){%s}},\n", q, maxR, pfsetting(pfs), strings.Join(gemm, ", "))
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

// gemmVariants are the software prefetches of the many-row kernels in
// qpackGemmExtra. A many-row kernel spends R times the instructions of the
// one-row kernel on each line of weights, so that the lines its
// out-of-order window keeps in flight fall R times short of the one-row
// kernel's: without prefetch, 8 decode rows read weights from memory at a
// fraction of the bandwidth (BenchmarkBatchedDecode). They prefetch
// further ahead than the one-row kernels, as they consume slower.
var gemmVariants = [][]pfspec{{{16384, "PREFETCHT0"}}, {{16384, "PREFETCHNTA"}}}

// kmaxR is the most activation rows of the k-quant kernels (registers).
// Up to kwideR rows a kernel keeps the integer sums of all the sub-blocks
// in hand (2 per row for Q4_K, 4 for Q6_K) and its float sums in
// registers; with more, it takes the sub-blocks one at a time, reading
// their codes again, keeps 3 vectors per row in registers (the sums of
// the sub-block and of the super-block, and the correction) and the float
// sums on its stack, updated once per super-block. Both add every row's
// products in the same order, so that a row's sums have the same bits in
// any kernel.
const (
	kmaxR  = 8
	kwideR = 3
)

// kquant: Q4_K and Q6_K, R activation rows (layouts xfK4, xfK6) times
// groups of 16 rows, one super-block per step; with loop set, a.groups
// groups (one activation row), else one. See qpack.go for the layouts.
//
// Registers, for activation row t: Z(t) and Z(R+t) integer sums of the
// sub-blocks in hand, Z(2R+t) the super-block's integer sum (sub-block
// sums times scales), Z(3R+t) its correction (Σ min·Σx for Q4_K, Σ
// 32·scale·Σx for Q6_K), Z(4R+t) the float accumulator. Z15-Z27
// temporaries (Q4_K: Z27 the mask of its high nibbles, see hiShift), Z28-Z31
// masks.
func (g *gen) kquant(q qtype, R int, loop bool, pfs ...pfspec) string {
	name := fmt.Sprintf("qpAVX512%sR%d", q, R) + pfname(pfs)
	narrow := R > kwideR
	frame := 0
	if narrow {
		frame = 64 * R // the float sums of the rows
	}
	fmt.Fprintf(&g.b, "\n// func %s(a *qpargs)\nTEXT ·%s(SB), NOSPLIT, $%d-8\n", name, name, frame)
	g.p("MOVQ a+0(FP), DI")
	g.p("MOVL $0x0f0f0f0f, AX")
	g.p("VPBROADCASTD AX, Z31")
	if q == q4_k && narrow {
		g.p("MOVL $0xf0f0f0f0, AX") // the high nibbles in place (see hiShift)
		g.p("VPBROADCASTD AX, Z30")
		g.p("MOVL $63, AX")
		g.p("VPBROADCASTD AX, Z28")
		g.p("MOVL $15, AX")
		g.p("VPBROADCASTD AX, Z29")
	} else if q == q4_k {
		g.p("MOVL $63, AX")
		g.p("VPBROADCASTD AX, Z30")
		g.p("MOVL $15, AX")
		g.p("VPBROADCASTD AX, Z29")
		g.p("MOVL $0x30, AX")
		g.p("VPBROADCASTD AX, Z28")
		g.p("MOVL $0xf0f0f0f0, AX") // the high nibbles in place (see hiShift)
		g.p("VPBROADCASTD AX, Z27")
	} else {
		// The masks of q6k: 0x3F in Z31, 0x0F in Z30, 0xFC in Z29.
		g.p("MOVL $0x3f3f3f3f, AX")
		g.p("VPBROADCASTD AX, Z31")
		g.p("MOVL $0x0f0f0f0f, AX")
		g.p("VPBROADCASTD AX, Z30")
		g.p("MOVL $0xfcfcfcfc, AX")
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
	// Registers of the super-block sums, corrections and float sums.
	S, M, F := 2*R, 3*R, 4*R
	if narrow {
		S, M, F = R, 2*R, -1
	}
	if q == q6_k {
		if R <= kwideR {
			S, M, F = 4*R, 5*R, 6*R
		}
		sb = 3328 // the scales d follow all the super-blocks of a group
		g.p("MOVQ %d(DI), R12", offNB)
		g.p("IMUL3Q $%d, R12, R12", sb)
	}
	g.label(name + "_group")
	if q == q6_k {
		g.p("LEAQ (SI)(R12*1), AX")
	}
	g.p("MOVQ %d(DI), BX", offX)
	if R > 1 {
		g.p("MOVQ %d(DI), R14", offXstride)
		for t := 1; t < R; t++ {
			g.p("LEAQ (%s)(R14*1), %s", xregs[t-1], xregs[t])
		}
		g.p("MOVQ %d(DI), R14", offDst)
	}
	g.p("MOVQ %d(DI), CX", offNB)
	if narrow {
		g.p("VPXORD Z24, Z24, Z24")
		for t := 0; t < R; t++ {
			g.p("VMOVUPS Z24, %s", off(64*t, "SP"))
		}
	}
	for t := 0; t < R && !narrow; t++ {
		g.p("VPXORD %s, %s, %s", z(F+t), z(F+t), z(F+t))
	}
	g.label(name + "_block")
	for t := 0; t < R; t++ {
		g.p("VPXORD %s, %s, %s", z(S+t), z(S+t), z(S+t))
		g.p("VPXORD %s, %s, %s", z(M+t), z(M+t), z(M+t))
	}
	// The narrow kernels spread their prefetches over the super-block
	// (a burst of them at its end stalls: they run several times longer
	// per line than the wide ones).
	pf := func(i, n int) {
		lines := sb / 64
		g.prefetch(pfs, 64*(i*lines/n), 64*((i+1)*lines/n-i*lines/n))
	}
	switch {
	case q == q4_k && narrow:
		g.q4kNarrow(R, xs, pf)
	case q == q4_k:
		g.q4k(R, xs)
	case narrow:
		g.q6kNarrow(R, xs, pf)
	default:
		g.q6k(R, xs)
	}
	if !narrow {
		g.prefetch(pfs, 0, sb)
	}
	// F += S·(d·dx) − corr·dmin (Q4_K) or S·(d·dx) − corr·32·d (Q6_K).
	if q == q4_k {
		g.p("VCVTPH2PS 192(SI), Z24")
		g.p("VCVTPH2PS 224(SI), Z25")
	} else {
		g.p("VCVTPH2PS (AX), Z24")
		g.p("ADDQ $32, AX")
		g.p("VMULPS.BCST ·q6kOffset(SB), Z24, Z25") // 32·d, for the codes' offset of 32
	}
	for t, xp := range xs {
		f := z(F + t)
		if narrow {
			f = "Z27"
			g.p("VMOVUPS %s, Z27", off(64*t, "SP"))
		}
		g.p("VCVTDQ2PS %s, %s", z(S+t), z(S+t))
		g.p("VMULPS.BCST 320(%s), Z24, Z26", xp)
		g.p("VFMADD231PS %s, Z26, %s", z(S+t), f)
		g.p("VFNMADD231PS %s, Z25, %s", z(M+t), f)
		if narrow {
			g.p("VMOVUPS Z27, %s", off(64*t, "SP"))
		}
	}
	g.p("ADDQ $%d, SI", sb)
	for _, xp := range xs {
		g.p("ADDQ $384, %s", xp)
	}
	g.p("DECQ CX")
	g.p("JNZ %s_block", name)
	if loop {
		g.p("VMOVUPS %s, (R14)", z(F))
		g.p("ADDQ $64, R14")
		if q == q6_k {
			g.p("MOVQ AX, SI") // the next group follows the scales
		}
		g.p("DECQ R13")
		g.p("JNZ %s_group", name)
	} else {
		g.p("MOVQ %d(DI), AX", offLdd)
		for t := 0; t < R; t++ {
			if narrow {
				g.p("VMOVUPS %s, Z27", off(64*t, "SP"))
				g.p("VMOVUPS Z27, (R14)")
			} else {
				g.p("VMOVUPS %s, (R14)", z(F+t))
			}
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
// whose low nibbles are sub-block 2p's and high nibbles 2p+1's codes (taken
// in place, as hiShift describes, and their sums shifted right by 4), then
// each sub-block's 6-bit scale and min unpacked from the vectors A, B, C
// (the 12 scale bytes of each row, 4 per lane).
func (g *gen) q4k(R int, xs []string) {
	g.p("VMOVDQU64 (SI), Z21")
	g.p("VMOVDQU64 64(SI), Z22")
	g.p("VMOVDQU64 128(SI), Z23")
	for p := 0; p < 4; p++ {
		for t := 0; t < R; t++ {
			g.p("VPXORD %s, %s, %s", z(t), z(t), z(t))
			g.p("VPXORD %s, %s, %s", z(R+t), z(R+t), z(R+t))
		}
		for v := 0; v < 8; v++ {
			o := 256 + 512*p + 64*v
			g.p("VPANDD %s, Z31, Z15", off(o, "SI"))
			g.p("VPANDD %s, Z27, Z16", off(o, "SI"))
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, Z15, %s", off(64*p+4*v, xp), z(t))
			}
			for t, xp := range xs {
				g.p("VPDPBUSD.BCST %s, Z16, %s", off(64*p+32+4*v, xp), z(R+t))
			}
		}
		for h := 0; h < 2; h++ {
			g.q4kScale(2*p+h, R, xs, q4kWide, func(t int) string { return z(h*R + t) }, h == 1)
		}
	}
}

// q4kRegs are the operands q4kScale unpacks a sub-block's scale and min
// with: three temporaries, the vectors A, B and C of the rows' scale bytes
// (registers or memory), and the masks 63, 15 and 0x30 (0x30 a register,
// or memory to broadcast).
type q4kRegs struct {
	scale, min, tmp string
	abc             [3]string
	m63, m15, m30   string
	m30Bcst         bool
}

var (
	// q4kWide are the operands of the kernels of up to kwideR rows.
	q4kWide = q4kRegs{"Z17", "Z18", "Z19", [3]string{"Z21", "Z22", "Z23"}, "Z30", "Z29", "Z28", false}
	// q4kNarrowRegs are those of the kernels of more rows, whose
	// registers Z0-Z23 hold the sums.
	q4kNarrowRegs = q4kRegs{"Z25", "Z26", "Z27", [3]string{"(SI)", "64(SI)", "128(SI)"}, "Z28", "Z29", "·q4kMask30(SB)", true}
)

// shr emits dst = src >> n (dword lanes), or a copy for n = 0.
func (g *gen) shr(n int, src, dst string) {
	if n == 0 && strings.HasPrefix(src, "Z") {
		g.p("VMOVDQA64 %s, %s", src, dst)
		return
	}
	if n == 0 {
		g.p("VMOVDQU64 %s, %s", src, dst)
		return
	}
	g.p("VPSRLD $%d, %s, %s", n, src, dst)
}

// q6k emits one Q6_K super-block, its codes in the order the packed
// layout stores them: per half h and chunk group ch, for 4 chunks c of 4
// elements the vectors A, B and C (see q6Mix in qpack.go), which make the
// 6-bit codes of the 4 sub-blocks 8h+2q+ch: quarters 0-2 are A, B and C
// masked with 0x3F; quarter 3, times 4, is (A&0xC0 | (B>>2)&0x30 |
// (C>>4)&0x0C), two shifts and two bitwise selects (VPTERNLOGD 0xE4: the
// destination's bits where the mask is set, the source's elsewhere), and
// its sums are shifted right by 2. Then those sub-blocks' sums are scaled
// by their signed scales (VPMOVSXBD of 16 bytes, one per row) that follow.
func (g *gen) q6k(R int, xs []string) {
	for hc := 0; hc < 4; hc++ {
		h, ch := hc/2, hc%2
		base := 832 * hc
		for i := 0; i < 4*R; i++ {
			g.p("VPXORD %s, %s, %s", z(i), z(i), z(i))
		}
		for ci := 0; ci < 4; ci++ {
			c := 4*ch + ci
			o := base + 192*ci
			g.p("VMOVDQU64 %s, Z21", off(o, "SI"))
			g.p("VMOVDQU64 %s, Z22", off(o+64, "SI"))
			g.p("VMOVDQU64 %s, Z23", off(o+128, "SI"))
			g.p("VPANDD Z31, Z21, Z24")
			g.p("VPANDD Z31, Z22, Z25")
			g.p("VPANDD Z31, Z23, Z28")
			g.p("VPSRLW $2, Z22, Z26")
			g.p("VPTERNLOGD $0xE4, Z31, Z21, Z26") // bits 0-5 of B>>2, 6-7 of A
			g.p("VPSRLW $4, Z23, Z27")
			g.p("VPTERNLOGD $0xE4, Z30, Z26, Z27") // bits 0-3 of C>>4, 4-7 of the above
			g.p("VPANDD Z29, Z27, Z27")
			e := 128*h + 4*c
			for q, code := range []string{"Z24", "Z25", "Z28", "Z27"} {
				for t, xp := range xs {
					g.p("VPDPBUSD.BCST %s, %s, %s", off(e+32*q, xp), code, z(q*R+t))
				}
			}
		}
		for q := 0; q < 4; q++ {
			j := 8*h + 2*q + ch
			g.p("VPMOVSXBD %d(SI), Z27", base+768+16*q)
			g.p("VCVTDQ2PS Z27, Z26")
			for t, xp := range xs {
				I := z(q*R + t)
				if q == 3 {
					g.p("VPSRAD $2, %s, %s", I, I)
				}
				g.p("VPMULLD Z27, %s, %s", I, I)
				g.p("VPADDD %s, %s, %s", I, z(4*R+t), z(4*R+t))
				g.p("VFMADD231PS.BCST %s, Z26, %s", off(256+4*j, xp), z(5*R+t))
			}
		}
	}
}

// q4kNarrow is q4k for more than kwideR rows: per pair of sub-blocks, the
// low nibbles of the 8 code vectors (sub-block 2p) and then their high
// nibbles (2p+1), each sub-block's sums (Z0..Z(R-1)) scaled as soon as
// they are whole. Z24 holds the codes; the masks are 0x0F (Z31) and 0xF0
// (Z30) per byte.
func (g *gen) q4kNarrow(R int, xs []string, pf func(i, n int)) {
	for p := 0; p < 4; p++ {
		for h := 0; h < 2; h++ {
			pf(2*p+h, 8)
			for t := 0; t < R; t++ {
				g.p("VPXORD %s, %s, %s", z(t), z(t), z(t))
			}
			mask := "Z31"
			if h == 1 {
				mask = "Z30"
			}
			for v := 0; v < 8; v++ {
				g.p("VPANDD %s, %s, Z24", off(256+512*p+64*v, "SI"), mask)
				for t, xp := range xs {
					g.p("VPDPBUSD.BCST %s, Z24, %s", off(64*p+32*h+4*v, xp), z(t))
				}
			}
			g.q4kScale(2*p+h, R, xs, q4kNarrowRegs, func(t int) string { return z(t) }, h == 1)
		}
	}
}

// q4kScale emits the scaling of sub-block j's integer sums I(t) of each
// row by its 6-bit scale into the super-block sums Z(S+t) and the
// correction of its min into Z(M+t) (S, M as kquant places them), the
// sums shifted right by 4 first if they are of the high nibbles in place.
func (g *gen) q4kScale(j, R int, xs []string, r q4kRegs, I func(t int) string, high bool) {
	S, M := 2*R, 3*R
	if R > kwideR {
		S, M = R, 2*R
	}
	or30 := func(src, dst string) { // dst |= src & 0x30
		if r.m30Bcst {
			g.p("VPTERNLOGD.BCST $0xF8, %s, %s, %s", r.m30, src, dst)
		} else {
			g.p("VPTERNLOGD $0xF8, %s, %s, %s", r.m30, src, dst)
		}
	}
	// scale and min of sub-block j, as int32 lanes.
	A, B, C := r.abc[0], r.abc[1], r.abc[2]
	if j < 4 {
		g.shr(8*j, A, r.scale)
		g.p("VPANDD %s, %s, %s", r.m63, r.scale, r.scale)
		g.shr(8*j, B, r.min)
		g.p("VPANDD %s, %s, %s", r.m63, r.min, r.min)
	} else {
		jj := j - 4
		g.shr(8*jj, C, r.scale)
		g.p("VPANDD %s, %s, %s", r.m15, r.scale, r.scale)
		g.shr(8*jj+2, A, r.tmp)
		or30(r.tmp, r.scale)
		g.shr(8*jj+4, C, r.min)
		g.p("VPANDD %s, %s, %s", r.m15, r.min, r.min)
		g.shr(8*jj+2, B, r.tmp)
		or30(r.tmp, r.min)
	}
	g.p("VCVTDQ2PS %s, %s", r.min, r.min)
	for t, xp := range xs {
		if high {
			g.p("VPSRAD $4, %s, %s", I(t), I(t)) // 16 times the sum
		}
		g.p("VPMULLD %s, %s, %s", r.scale, I(t), I(t))
		g.p("VPADDD %s, %s, %s", I(t), z(S+t), z(S+t))
		g.p("VFMADD231PS.BCST %s, %s, %s", off(256+4*j, xp), r.min, z(M+t))
	}
}

// q6kNarrow is q6k for more than kwideR rows: per half h and chunk group
// ch, the 4 sub-blocks one at a time, each from the codes of its quarter
// of the 4 chunks' vectors A, B and C (read again per quarter), its sums
// (Z0..Z(R-1)) scaled as soon as they are whole. Z24 holds the codes,
// Z25 a temporary, Z26 and Z27 the scales; the masks are kquant's.
func (g *gen) q6kNarrow(R int, xs []string, pf func(i, n int)) {
	S, M := R, 2*R
	for hc := 0; hc < 4; hc++ {
		h, ch := hc/2, hc%2
		base := 832 * hc
		for q := 0; q < 4; q++ {
			pf(4*hc+q, 16)
			for t := 0; t < R; t++ {
				g.p("VPXORD %s, %s, %s", z(t), z(t), z(t))
			}
			for ci := 0; ci < 4; ci++ {
				c := 4*ch + ci
				o := base + 192*ci
				if q < 3 {
					g.p("VPANDD %s, Z31, Z24", off(o+64*q, "SI"))
				} else {
					g.p("VMOVDQU64 %s, Z25", off(o, "SI"))
					g.p("VPSRLW $2, %s, Z24", off(o+64, "SI"))
					g.p("VPTERNLOGD $0xE4, Z31, Z25, Z24") // bits 0-5 of B>>2, 6-7 of A
					g.p("VPSRLW $4, %s, Z25", off(o+128, "SI"))
					g.p("VPTERNLOGD $0xE4, Z30, Z24, Z25") // bits 0-3 of C>>4, 4-7 of the above
					g.p("VPANDD Z29, Z25, Z24")
				}
				e := 128*h + 4*c
				for t, xp := range xs {
					g.p("VPDPBUSD.BCST %s, Z24, %s", off(e+32*q, xp), z(t))
				}
			}
			j := 8*h + 2*q + ch
			g.p("VPMOVSXBD %d(SI), Z27", base+768+16*q)
			g.p("VCVTDQ2PS Z27, Z26")
			for t, xp := range xs {
				I := z(t)
				if q == 3 {
					g.p("VPSRAD $2, %s, %s", I, I)
				}
				g.p("VPMULLD Z27, %s, %s", I, I)
				g.p("VPADDD %s, %s, %s", I, z(S+t), z(S+t))
				g.p("VFMADD231PS.BCST %s, Z26, %s", off(256+4*j, xp), z(M+t))
			}
		}
	}
}
