//go:build ignore

// gen_kernels writes matmul_amd64.s and matmul_amd64.go: the AVX2 and
// AVX-512 micro-kernels of MatMul. Run it with go generate.
//
// Every kernel computes an R×C block of dot products: R activation rows
// (packed float32, see packX) times C weight rows (bf16, f16 or f32 bytes),
// over a.k elements, and stores the sums to a.dst (a full block: row t at
// a.dst + t*a.ldd bytes, added to when a.acc is 1) or, with a.dst nil, to
// a.out[t*8+r]. Row pointers come from the kargs struct, so the caller can
// repeat a pointer to pad a block at the edge of the matrix. The vector
// register file holds R×C accumulators (times the unroll factor).
//
// bf16 is widened without shuffles: a vector of 2n bf16 values read as n
// 32-bit lanes gives the even elements by a left shift of 16 and the odd
// elements by masking off the low 16 bits. packX stores each block of
// activations as its even elements followed by its odd elements to match.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
)

// kargs offsets; TestKargsLayout checks them against the Go struct.
const (
	offX   = 0
	offW   = 64
	offK   = 128
	offOut = 136
	offDst = 392
	offLdd = 400
	offAcc = 408
	offKC  = 416
)

type isa struct {
	name  string // Go name part: AVX2 or AVX512
	reg   string // vector register prefix
	nreg  int
	blk   int // elements per step
	masks bool
}

var (
	avx2   = isa{"AVX2", "Y", 16, 16, false}
	avx512 = isa{"AVX512", "Z", 32, 32, true}
)

type dtype struct {
	name string
	es   int // element size in bytes
}

var (
	bf16 = dtype{"BF16", 2}
	f16  = dtype{"F16", 2}
	f32  = dtype{"F32", 4}
)

type kernel struct {
	isa  isa
	dt   dtype
	r, c int
	xmem bool // read activations as FMA memory operands instead of registers
	pf   int  // prefetch distance in weight bytes, 0 for none
	u    int  // steps per loop iteration, each with its own accumulators
	kb   bool // cut a.k into blocks of a.kc elements, as MatMul does for GEMM (R=1, u=0)
}

func (k kernel) name() string {
	m := ""
	if k.xmem {
		m = "m"
	}
	if k.pf > 0 {
		m += fmt.Sprintf("p%d", k.pf)
	}
	if k.u > 1 {
		m += fmt.Sprintf("u%d", k.u)
	}
	if k.kb {
		m += "b"
	}
	return fmt.Sprintf("k%s%sR%dC%d%s", k.isa.name, k.dt.name, k.r, k.c, m)
}

// gprs the kernels may use: not SP, BP (frame pointer) or R15 (GOT base in
// dynamically linked code).
var gprs = []string{"BX", "SI", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "DI"}

type gen struct {
	b bytes.Buffer
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.b, "\t"+format+"\n", args...)
}

func (g *gen) label(l string) { fmt.Fprintf(&g.b, "%s:\n", l) }

func (g *gen) kernel(k kernel) {
	I := k.isa
	if k.r+k.c > len(gprs) {
		log.Fatalf("%s: too many row pointers", k.name())
	}
	U := max(k.u, 1)
	nacc := k.r * k.c
	// Register plan: accumulators (U sets) first, then activations,
	// weights, mask.
	mask := I.nreg - 1
	wreg := I.nreg - 2
	xbase := U * nacc
	nx := k.r
	if k.xmem {
		nx = 0
	}
	if xbase+nx+2 > I.nreg {
		log.Fatalf("%s: needs %d vector registers", k.name(), xbase+nx+2)
	}
	if U > 1 && k.r+k.c >= len(gprs) {
		log.Fatalf("%s: no register left for the unrolled loop", k.name())
	}
	if k.kb && (k.r != 1 || U != 1 || k.xmem || k.c > 8 || k.r+k.c >= len(gprs)) {
		log.Fatalf("%s: blocks of a.kc need one register row, no unrolling and a free DI", k.name())
	}
	v := func(i int) string { return fmt.Sprintf("%s%d", I.reg, i) }
	xr := func(s string) string { return "X" + s[1:] }
	// The running sums of the blocks of a.kc elements (kb): one register
	// per four weight rows, past the activations.
	run := func(r0 int) string { return xr(v(xbase + nx + r0/4)) }
	accSet := func(u int) func(t, r int) string {
		return func(t, r int) string { return v(u*nacc + t*k.c + r) }
	}
	acc := accSet(0)
	xp := func(t int) string { return gprs[t] }
	wp := func(r int) string { return gprs[k.r+r] }
	xscale := 4 / k.dt.es    // activation bytes per weight byte
	wstep := I.blk * k.dt.es // weight bytes per step
	half := I.blk / 2        // elements per half step
	xhalf := half * 4        // activation bytes per half step
	name := k.name()

	fmt.Fprintf(&g.b, "\n// func %s(a *kargs)\nTEXT ·%s(SB), NOSPLIT, $0-8\n", name, name)
	g.p("MOVQ a+0(FP), DI")
	g.p("MOVQ %d(DI), CX", offK)
	for t := 0; t < k.r; t++ {
		g.p("MOVQ %d(DI), %s", offX+8*t, xp(t))
	}
	for r := 0; r < k.c; r++ {
		g.p("MOVQ %d(DI), %s", offW+8*r, wp(r))
	}
	if k.dt == bf16 {
		g.p("MOVL $0xffff0000, AX")
		if I.masks {
			g.p("VPBROADCASTD AX, %s", v(mask))
		} else {
			g.p("VMOVD AX, X%d", mask)
			g.p("VPBROADCASTD X%d, %s", mask, v(mask))
		}
	}
	if k.kb {
		// The running sums start at -0, which adding the first block's
		// sums leaves exact (-0 + x is x, for x = ±0 too). DI = elements
		// left, AX = offset of the block in weight bytes.
		g.p("MOVL $0x80000000, AX")
		g.p("VMOVD AX, %s", run(0))
		g.p("VPBROADCASTD %s, %s", run(0), run(0))
		for r0 := 4; r0 < k.c; r0 += 4 {
			g.p("VMOVAPS %s, %s", run(0), run(r0))
		}
		g.p("MOVQ CX, DI")
		g.p("XORQ AX, AX")
		g.label(name + "_block")
	}
	for i := 0; i < U*nacc; i++ {
		if I.masks {
			g.p("VPXORD %s, %s, %s", v(i), v(i), v(i))
		} else {
			g.p("VXORPS %s, %s, %s", v(i), v(i), v(i))
		}
	}
	if k.kb {
		// CX = elements of this block: min(a.kc, DI).
		g.p("MOVQ a+0(FP), CX")
		g.p("MOVQ %d(CX), CX", offKC)
		g.p("CMPQ DI, CX")
		g.p("CMOVQLT DI, CX")
		g.p("SUBQ CX, DI")
	}
	// DX = elements left for the masked tail, CX = end of the main loop in
	// weight bytes.
	g.p("MOVQ CX, DX")
	g.p("ANDQ $%d, DX", I.blk-1)
	g.p("SUBQ DX, CX")
	if k.dt.es == 2 {
		g.p("SHLQ $1, CX")
	} else {
		g.p("SHLQ $2, CX")
	}
	if k.kb {
		g.p("ADDQ AX, CX")
	} else {
		g.p("XORQ AX, AX")
	}
	prefetch := func(boff int) {
		if k.pf > 0 {
			for r := 0; r < k.c; r++ {
				for off := 0; off < wstep; off += 64 {
					g.p("PREFETCHT0 %d(%s)(AX*1)", boff+k.pf+off, wp(r))
				}
			}
		}
	}
	if U > 1 {
		tmp := gprs[k.r+k.c]
		g.label(name + "_loopu")
		g.p("LEAQ %d(AX), %s", U*wstep, tmp)
		g.p("CMPQ %s, CX", tmp)
		g.p("JA %s_loop1", name)
		for u := 0; u < U; u++ {
			g.step(k, v, accSet(u), xp, wp, xscale, half, xhalf, xbase, wreg, mask, false, u*wstep)
			prefetch(u * wstep)
		}
		g.p("MOVQ %s, AX", tmp)
		g.p("JMP %s_loopu", name)
		g.label(name + "_loop1")
	}
	g.p("CMPQ AX, CX")
	g.p("JAE %s_tail", name)
	g.label(name + "_loop")
	g.step(k, v, acc, xp, wp, xscale, half, xhalf, xbase, wreg, mask, false, 0)
	prefetch(0)
	g.p("ADDQ $%d, AX", wstep)
	g.p("CMPQ AX, CX")
	g.p("JB %s_loop", name)
	g.label(name + "_tail")
	if I.masks {
		g.p("TESTQ DX, DX")
		g.p("JZ %s_reduce", name)
		g.p("MOVQ DX, CX")
		g.p("MOVL $1, DX")
		g.p("SHLL CX, DX")
		g.p("DECL DX")
		g.p("KMOVD DX, K1")
		g.p("KSHIFTRD $16, K1, K2")
		g.step(k, v, acc, xp, wp, xscale, half, xhalf, xbase, wreg, mask, true, 0)
		g.label(name + "_reduce")
	}
	for u := 1; u < U; u++ {
		for i := 0; i < nacc; i++ {
			g.p("VADDPS %s, %s, %s", v(u*nacc+i), v(i), v(i))
		}
	}
	if !k.kb {
		g.reduce(k, v, acc, xbase)
		return
	}
	// Add the block's sums to the running ones, in the order MatMul adds
	// the sums of a GEMM kernel's blocks; a masked tail is only ever in
	// the last block, a.kc being a multiple of I.blk.
	g.sums(k, v, acc, xbase)
	for r0 := 0; r0 < k.c; r0 += 4 {
		g.p("VADDPS %s, %s, %s", xr(acc(0, r0)), run(r0), run(r0))
	}
	g.p("TESTQ DI, DI")
	g.p("JNZ %s_block", name)
	for r0 := 0; r0 < k.c; r0 += 4 {
		g.p("VMOVAPS %s, %s", run(r0), xr(acc(0, r0)))
	}
	g.store(k, v, acc, xbase)
}

// step emits one block of I.blk elements: two halves, each loading the
// activations of R rows and then, per weight row, widening it and issuing R
// FMAs. With tail set, weight loads are masked by K1 (elements) and K2.
func (g *gen) step(k kernel, v func(int) string, acc func(int, int) string,
	xp, wp func(int) string, xscale, half, xhalf, xbase, wreg, mask int, tail bool, boff int) {
	I := k.isa
	W := v(wreg)
	wmem := func(r, off int) string {
		off += boff
		if off == 0 {
			return fmt.Sprintf("(%s)(AX*1)", wp(r))
		}
		return fmt.Sprintf("%d(%s)(AX*1)", off, wp(r))
	}
	xmem := func(t, off int) string {
		off += boff * xscale
		if off == 0 {
			return fmt.Sprintf("(%s)(AX*%d)", xp(t), xscale)
		}
		return fmt.Sprintf("%d(%s)(AX*%d)", off, xp(t), xscale)
	}
	lowHalf := strings.Replace(W, I.reg, "Y", 1)
	if I.reg == "Y" {
		lowHalf = strings.Replace(W, "Y", "X", 1)
	}
	for h := 0; h < 2; h++ {
		if !k.xmem {
			for t := 0; t < k.r; t++ {
				g.p("VMOVUPS %s, %s", xmem(t, h*xhalf), v(xbase+t))
			}
		}
		for r := 0; r < k.c; r++ {
			switch {
			case k.dt == bf16 && !tail:
				if h == 0 {
					if I.masks {
						g.p("VPSLLD $16, %s, %s", wmem(r, 0), W)
					} else {
						g.p("VMOVDQU %s, %s", wmem(r, 0), W)
						g.p("VPSLLD $16, %s, %s", W, W)
					}
				} else {
					if I.masks {
						g.p("VPANDD %s, %s, %s", wmem(r, 0), v(mask), W)
					} else {
						g.p("VPAND %s, %s, %s", wmem(r, 0), v(mask), W)
					}
				}
			case k.dt == bf16 && tail:
				g.p("VMOVDQU16.Z %s, K1, %s", wmem(r, 0), W)
				if h == 0 {
					g.p("VPSLLD $16, %s, %s", W, W)
				} else {
					g.p("VPANDD %s, %s, %s", W, v(mask), W)
				}
			case k.dt == f16 && !tail:
				g.p("VCVTPH2PS %s, %s", wmem(r, h*half*2), W)
			case k.dt == f16 && tail:
				g.p("VMOVDQU16.Z %s, K%d, %s", wmem(r, h*half*2), h+1, lowHalf)
				g.p("VCVTPH2PS %s, %s", lowHalf, W)
			case k.dt == f32 && !tail:
				g.p("VMOVUPS %s, %s", wmem(r, h*half*4), W)
			case k.dt == f32 && tail:
				g.p("VMOVUPS.Z %s, K%d, %s", wmem(r, h*half*4), h+1, W)
			}
			for t := 0; t < k.r; t++ {
				if k.xmem {
					g.p("VFMADD231PS %s, %s, %s", xmem(t, h*xhalf), W, acc(t, r))
				} else {
					g.p("VFMADD231PS %s, %s, %s", v(xbase+t), W, acc(t, r))
				}
			}
		}
	}
}

// reduce sums each accumulator's lanes, groups the C sums of token t in
// fours (transposing with unpack instructions), and stores them: to
// a.dst + t*a.ldd (adding to what is there when a.acc is set) or, when
// a.dst is nil, to a.out[t*8:].
func (g *gen) reduce(k kernel, v func(int) string, acc func(int, int) string, xbase int) {
	g.sums(k, v, acc, xbase)
	g.store(k, v, acc, xbase)
}

// sums leaves in acc(t, r0) the four sums of the rows r0..r0+3 of token
// t, for each r0 a multiple of 4.
func (g *gen) sums(k kernel, v func(int) string, acc func(int, int) string, xbase int) {
	I := k.isa
	x := func(s string) string { return "X" + s[1:] }
	y := func(s string) string { return "Y" + s[1:] }
	// Temporaries: registers past the accumulators.
	t0, t1, t2 := v(xbase), v(xbase+1), v(xbase+2)
	if k.xmem || k.r < 3 {
		t0, t1, t2 = v(I.nreg-4), v(I.nreg-3), v(I.nreg-2)
	}
	for t := 0; t < k.r; t++ {
		for r := 0; r < k.c; r++ {
			a := acc(t, r)
			if I.masks {
				g.p("VEXTRACTF64X4 $1, %s, %s", a, y(t0))
				g.p("VADDPS %s, %s, %s", y(t0), y(a), y(a))
				g.p("VEXTRACTF32X4 $1, %s, %s", y(a), x(t0))
			} else {
				g.p("VEXTRACTF128 $1, %s, %s", a, x(t0))
			}
			g.p("VADDPS %s, %s, %s", x(t0), x(a), x(a))
		}
		// The sums of rows r0..r0+3 end up in acc(t, r0).
		for r0 := 0; r0 < k.c; r0 += 4 {
			var s [4]string
			for i := range s {
				s[i] = x(acc(t, min(r0+i, k.c-1)))
			}
			g.p("VUNPCKLPS %s, %s, %s", s[1], s[0], x(t0))
			g.p("VUNPCKHPS %s, %s, %s", s[1], s[0], x(t1))
			g.p("VADDPS %s, %s, %s", x(t1), x(t0), x(t0))
			g.p("VUNPCKLPS %s, %s, %s", s[3], s[2], x(t1))
			g.p("VUNPCKHPS %s, %s, %s", s[3], s[2], x(t2))
			g.p("VADDPS %s, %s, %s", x(t2), x(t1), x(t1))
			g.p("VUNPCKLPD %s, %s, %s", x(t1), x(t0), x(t2))
			g.p("VUNPCKHPD %s, %s, %s", x(t1), x(t0), x(t0))
			g.p("VADDPS %s, %s, %s", x(t2), x(t0), s[0])
		}
	}
}

// store writes the sums that sums left: to a.dst + t*a.ldd (adding to
// what is there when a.acc is set) or, when a.dst is nil, to a.out[t*8:].
func (g *gen) store(k kernel, v func(int) string, acc func(int, int) string, xbase int) {
	x := func(s string) string { return "X" + s[1:] }
	t1 := v(xbase + 1)
	if k.xmem || k.r < 3 {
		t1 = v(k.isa.nreg - 3)
	}
	name := k.name()
	g.p("MOVQ a+0(FP), DI")
	g.p("MOVQ %d(DI), SI", offDst)
	g.p("TESTQ SI, SI")
	g.p("JNZ %s_dst", name)
	for t := 0; t < k.r; t++ {
		for r0 := 0; r0 < k.c; r0 += 4 {
			g.p("VMOVUPS %s, %d(DI)", x(acc(t, r0)), offOut+4*(t*8+r0))
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	g.label(name + "_dst")
	g.p("MOVQ %d(DI), DX", offLdd)
	g.p("MOVQ %d(DI), CX", offAcc)
	g.p("TESTQ CX, CX")
	g.p("JZ %s_store", name)
	for _, add := range []bool{true, false} {
		if !add {
			g.label(name + "_store")
		}
		for t := 0; t < k.r; t++ {
			if t > 0 {
				g.p("ADDQ DX, SI")
			}
			for r0 := 0; r0 < k.c; r0 += 4 {
				r := x(acc(t, r0))
				mem := fmt.Sprintf("%d(SI)", 4*r0)
				switch w := min(4, k.c-r0); w {
				case 4:
					if add {
						g.p("VADDPS %s, %s, %s", mem, r, r)
					}
					g.p("VMOVUPS %s, %s", r, mem)
				case 2:
					if add {
						g.p("VMOVSD %s, %s", mem, x(t1))
						g.p("VADDPS %s, %s, %s", x(t1), r, r)
					}
					g.p("VMOVSD %s, %s", r, mem)
				case 1:
					if add {
						g.p("VADDSS %s, %s, %s", mem, r, r)
					}
					g.p("VMOVSS %s, %s", r, mem)
				default:
					log.Fatalf("%s: no store of %d sums", name, w)
				}
			}
		}
		g.p("VZEROUPPER")
		g.p("RET")
	}
}

// The kernels MatMul uses: one for blocks of tokens (GEMM) and one for a
// single token (GEMV), per instruction set and weight type.
//
// The GEMV kernel sums each dot product in the order of the GEMM kernel:
// one accumulator vector per weight row (no unrolling over several
// accumulator sets), the two halves of each step in turn, the same masked
// tail and the same reduction of the lanes. So a row computed alone has
// the bits it has in a block of rows, and MatMul needs no row-stable mode
// for float weights.
type config struct {
	isa        isa
	gemm, gemv kernel
}

func configs() []config {
	var cs []config
	for _, dt := range []dtype{bf16, f16, f32} {
		cs = append(cs, config{avx512,
			kernel{avx512, dt, 4, 6, false, 0, 0, false},
			kernel{avx512, dt, 1, 8, false, 1024, 0, true}})
	}
	for _, dt := range []dtype{bf16, f16, f32} {
		cs = append(cs, config{avx2,
			kernel{avx2, dt, 3, 4, true, 0, 0, false},
			kernel{avx2, dt, 1, 8, false, 1024, 0, true}})
	}
	return cs
}

// extra kernels generated for benchmarking other block shapes. The
// unrolled one-row kernels (u2) sum in another order than the GEMM
// kernels: they are the speed the row-stable GEMV kernels are measured
// against.
var extra = []kernel{
	{avx512, bf16, 4, 5, false, 0, 0, false},
	{avx512, bf16, 6, 4, true, 0, 0, false},
	{avx512, bf16, 1, 8, false, 0, 0, false},
	{avx512, bf16, 1, 8, false, 512, 0, false},
	{avx512, bf16, 1, 8, false, 1024, 2, false},
	{avx2, bf16, 2, 5, false, 0, 0, false},
	{avx2, bf16, 1, 8, false, 512, 0, false},
	{avx2, bf16, 1, 6, false, 1024, 0, false},
	{avx2, bf16, 1, 6, false, 1024, 2, false},
	{avx512, bf16, 1, 8, false, 1024, 0, false},
}

func main() {
	var s gen
	s.b.WriteString("// Code generated by gen_kernels.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	var decl bytes.Buffer
	decl.WriteString("// Code generated by gen_kernels.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage cpu\n\nimport \"github.com/lem-engine/lem/compute\"\n\n")
	seen := map[string]bool{}
	add := func(k kernel) {
		if seen[k.name()] {
			return
		}
		seen[k.name()] = true
		s.kernel(k)
		fmt.Fprintf(&decl, "//go:noescape\nfunc %s(a *kargs)\n\n", k.name())
	}
	cs := configs()
	for _, c := range cs {
		add(c.gemm)
		add(c.gemv)
	}
	for _, k := range extra {
		add(k)
	}
	decl.WriteString("// asmKernels lists the generated kernels per instruction set and weight type.\nvar asmKernels = []kernelSet{\n")
	for _, c := range cs {
		fmt.Fprintf(&decl, "\t{level: level%s, dtype: compute.%s, blk: %d, masked: %v, gemm: %s, gemmR: %d, gemmC: %d, gemv: %s, gemvC: %d, gemvKC: %v},\n",
			c.isa.name, c.gemm.dt.name, c.isa.blk, c.isa.masks, c.gemm.name(), c.gemm.r, c.gemm.c, c.gemv.name(), c.gemv.c, c.gemv.kb)
	}
	decl.WriteString("}\n\n// extraKernels are other block shapes, for benchmarks.\nvar extraKernels = []kernelSet{\n")
	for _, k := range extra {
		fmt.Fprintf(&decl, "\t{level: level%s, dtype: compute.%s, blk: %d, masked: %v, gemm: %s, gemmR: %d, gemmC: %d},\n",
			k.isa.name, k.dt.name, k.isa.blk, k.isa.masks, k.name(), k.r, k.c)
	}
	decl.WriteString("}\n")
	src, err := format.Source(decl.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("matmul_amd64.s", s.b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("matmul_amd64.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
}
