package cpu

import (
	"fmt"
	"math"
	"os"
	"sync"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
)

// Prefill on AMX. On CPUs with AMX-BF16 (Intel Sapphire Rapids and later),
// a many-row product of packed Q8_0, Q4_0, Q4_K or Q6_K weights runs on
// the tile unit instead of the VNNI kernels:
//
//   - the activation rows are rounded to bf16 once per product (A tiles:
//     16 rows × 32 elements, row-major);
//   - each thread takes strips of weight groups (16 rows each, see
//     qpack.go), dequantizes a strip to bf16 B tiles in the VNNI pair
//     layout (row p of a tile holds, for each of the 16 weight rows, its
//     elements 2p and 2p+1), and multiplies every block of 32 activation
//     rows with the strip, 32 weight rows at a time, accumulating in
//     float32 over the whole shared dimension.
//
// The packed layout holds the codes as lanes of 16 rows × 4 elements, so a
// group dequantizes to B tiles lane by lane, without transposing. The
// result differs from the VNNI kernels' by rounding: the activations are
// rounded to bf16 (8 significant bits, per value) instead of quantized to
// 8 bits per block of 32, and the weights' dequantized values to bf16.
// LEM_CPU_AMX=0 turns it off.

const (
	amxRows = 32 // activation rows and weight rows of one kernel call
	// amxMinRows is the fewest activation rows a product runs on AMX.
	amxMinRows = 32
	// amxStripBytes bounds a thread's dequantized strip of weight groups,
	// which stays in its L2 cache while every activation block passes.
	amxStripBytes = 384 << 10
)

// amxArgs carries the operands of amxTileBF16 (see amx_amd64.s), at the
// offsets the assembly reads.
type amxArgs struct {
	cfg    *byte    // the tile configuration, amxConfig
	a      *uint16  // activation row 0, chunk 0 (bf16)
	lda    int      // bytes between activation rows
	b      *byte    // the first group's B tiles, chunk 0
	bnext  int      // bytes from the first group's tiles to the second's
	chunks int      // chunks of 32 elements
	c      *float32 // the 32×32 products of the first pair
	ldc    int      // bytes between rows of c
	pairs  int      // pairs of groups, one after another in b and in c
}

// amxPerm interleaves the two halves of a VCVTNE2PS2BF16 result into
// pairs: word 2n takes word n, word 2n+1 word 16+n.
var amxPerm = func() (p [32]uint16) {
	for n := range 16 {
		p[2*n], p[2*n+1] = uint16(n), uint16(16+n)
	}
	return p
}()

// amxConfig returns the tile configuration of amxTileBF16: palette 1,
// tiles 0-7 of 16 rows × 64 bytes (C: 0-3, A: 4-5, B: 6-7).
var amxConfig = func() *byte {
	b := make([]byte, 128)
	cfg := b[int(-uintptr(unsafe.Pointer(&b[0]))&63):][:64]
	cfg[0] = 1
	for t := range 8 {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	return &cfg[0]
}()

var amxOnce struct {
	sync.Once
	on bool
}

// amxOn reports whether the many-row products of packed weights of the
// types amxDtype names run on AMX: the CPU has it, the kernel granted the
// process its tile state, and LEM_CPU_AMX is not 0.
func amxOn() bool {
	amxOnce.Do(func() {
		amxOnce.on = os.Getenv("LEM_CPU_AMX") != "0" && amxEnable()
	})
	return amxOnce.on
}

// amxDtype reports whether weights of type dt have an AMX dequantizer.
func amxDtype(dt compute.DType) bool {
	switch dt {
	case compute.Q8_0, compute.Q4_0, compute.Q4_K, compute.Q6_K:
		return true
	}
	return false
}

// amxTask is one AMX product, shared by the pool's workers.
type amxTask struct {
	dst, x []float32
	w      []byte // packed weights
	dt     compute.DType
	n, m   int
	k      int
	rb     int      // bytes per stored row
	xb     []uint16 // the activations in bf16, npad rows of k
	npad   int
	pairs  int // pairs of groups (the last may be a lone group)
	strip  int // pairs per chunk of work
	kernel func(*amxArgs)
}

// matMulAMX is matMulPacked on AMX, for n ≥ amxMinRows activation rows and
// m a multiple of packRows.
func matMulAMX(s *poolState, dst, x []float32, n int, w Weights, kernel func(*amxArgs)) {
	m, k := w.Rows, w.Cols
	rb, _ := w.DType.RowBytes(k)
	npad := (n + amxRows - 1) / amxRows * amxRows
	groups := m / packRows
	t := &s.amx
	*t = amxTask{
		dst: dst, x: x, w: w.pack, dt: w.DType, n: n, m: m, k: k, rb: rb,
		xb: s.bscratch(npad * k), npad: npad, pairs: (groups + 1) / 2, kernel: kernel,
	}
	t.strip = max(1, amxStripBytes/(2*k/32*1024))
	s.run(taskAMXCvt, (npad+packChunk-1)/packChunk)
	s.run(taskAMX, (t.pairs+t.strip-1)/t.strip)
	*t = amxTask{}
}

// bscratch returns the bf16 activation buffer with room for n values,
// 64-byte aligned.
func (s *poolState) bscratch(n int) []uint16 {
	if cap(s.xb) < n {
		b := make([]uint16, n+32)
		off := int(-uintptr(unsafe.Pointer(&b[0])) & 63 / 2)
		s.xb = b[off : off+n]
	}
	return s.xb[:n]
}

// cvt rounds chunk c of the activation rows to bf16; the rows past n are
// zeros.
func (t *amxTask) cvt(c int) {
	k := t.k
	for i := c * packChunk; i < min((c+1)*packChunk, t.npad); i++ {
		row := t.xb[i*k : (i+1)*k]
		if i >= t.n {
			clear(row)
			continue
		}
		bf16Row(row, t.x[i*k:(i+1)*k])
	}
}

// product computes chunk c: a strip of pairs of groups, dequantized into
// the worker's buffer, times every block of amxRows activation rows.
func (t *amxTask) product(wk *worker, c int) {
	nc := t.k / 32
	gb := nc * 1024 // bytes of one group's B tiles
	p0 := c * t.strip
	p1 := min(p0+t.strip, t.pairs)
	groups := t.m / packRows
	g0, g1 := 2*p0, min(2*p1, groups)
	need := 2 * (p1 - p0) * gb
	if cap(wk.bt) < need {
		b := make([]byte, 2*t.strip*gb+64)
		wk.bt = b[int(-uintptr(unsafe.Pointer(&b[0]))&63):]
	}
	bt := wk.bt[:need]
	for g := g0; g < g1; g++ {
		amxDequant(bt[(g-g0)*gb:(g-g0+1)*gb], t.w[g*packRows*t.rb:(g+1)*packRows*t.rb], t.dt, t.k/t.dt.BlockSize())
	}
	if g1-g0 < 2*(p1-p0) {
		clear(bt[(g1-g0)*gb:])
	}
	full := (g1 - g0) / 2 // pairs of two groups
	a := &wk.amx
	for i := 0; i < t.npad; i += amxRows {
		rows := min(amxRows, t.n-i)
		p := p0
		if rows == amxRows && full > 0 {
			// The whole pairs straight to dst, in one call.
			*a = amxArgs{
				cfg: amxConfig, a: &t.xb[i*t.k], lda: 2 * t.k, b: &bt[0], bnext: gb, chunks: nc,
				c: &t.dst[i*t.m+g0*packRows], ldc: 4 * t.m, pairs: full,
			}
			t.kernel(a)
			p += full
		}
		for ; p < p1; p++ {
			g := 2 * p
			cols := min(2, groups-g) * packRows
			*a = amxArgs{
				cfg: amxConfig, a: &t.xb[i*t.k], lda: 2 * t.k, b: &bt[(g-g0)*gb], bnext: gb, chunks: nc,
				c: &wk.cs[0], ldc: 4 * amxRows, pairs: 1,
			}
			t.kernel(a)
			for r := range rows {
				copy(t.dst[(i+r)*t.m+g*packRows:][:cols], wk.cs[r*amxRows:][:cols])
			}
		}
	}
}

// amxDequant writes the B tiles of one packed group gd of type dt (nb
// stored blocks per row) to dst, 1024 bytes per 32 elements of a row.
func amxDequant(dst, gd []byte, dt compute.DType, nb int) {
	if !amxAsmDequant {
		amxDequantGo(dst, gd, dt, nb)
		return
	}
	perm := &amxPerm[0]
	switch dt {
	case compute.Q4_K:
		for b := range nb {
			amxDqQ4_K(&dst[b*8192], &gd[b*2304], &gd[b*2304+192], perm)
		}
	case compute.Q6_K:
		for b := range nb {
			amxDqQ6_K(&dst[b*8192], &gd[b*3328], &gd[nb*3328+32*b], perm)
		}
	default:
		dq := amxDqQ8_0
		if dt == compute.Q4_0 {
			dq = amxDqQ4_0
		}
		for b := range nb {
			co, so := legacyOffsets(dt, nb, b)
			dq(&dst[b*1024], &gd[co], &gd[so], perm)
		}
	}
}

// amxDequantGo is amxDequant in Go: each row's blocks unpacked to their
// stored form and dequantized, then rounded to bf16 into the pair layout.
func amxDequantGo(dst, gd []byte, dt compute.DType, nb int) {
	var blk [256]byte
	var f [256]float32
	bs := dt.BlockSize()
	for r := range packRows {
		for b := range nb {
			unpackBlock(blk[:], gd, dt, nb, r, b)
			if err := quant.Dequantize(f[:bs], blk[:dt.BlockBytes()], dt); err != nil {
				panic(fmt.Sprintf("cpu: %v", err))
			}
			for e := range bs {
				g := b*bs + e
				o := g/32*1024 + g%32/2*64 + 4*r + 2*(g%2)
				putU16(dst[o:], half.F32ToBF16(f[e]))
			}
		}
	}
}

func putU16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }

// bf16Row rounds src to bf16 (nearest even) into dst.
func bf16Row(dst []uint16, src []float32) {
	n := 0
	if amxAsmDequant {
		n = len(src) &^ 31
		if n > 0 {
			amxCvtBF16(&dst[0], &src[0], n)
		}
	}
	for i := n; i < len(src); i++ {
		dst[i] = half.F32ToBF16(src[i])
	}
}

// amxTileGo is amxTileBF16 in Go, the oracle of the assembly: the same
// tiles in, the 32×32 products of each pair, accumulated in float64, out.
func amxTileGo(a *amxArgs) {
	for p := range a.pairs {
		q := *a
		q.b = (*byte)(unsafe.Add(unsafe.Pointer(a.b), 2*p*a.bnext))
		q.c = (*float32)(unsafe.Add(unsafe.Pointer(a.c), 128*p))
		amxPairGo(&q)
	}
}

// amxPairGo computes the first pair of a.
func amxPairGo(a *amxArgs) {
	for m := range amxRows {
		arow := unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(a.a), m*a.lda)), a.chunks*32)
		crow := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(a.c), m*a.ldc)), amxRows)
		for n := range amxRows {
			b := unsafe.Add(unsafe.Pointer(a.b), n/packRows*a.bnext+4*(n%packRows))
			var s float64
			for c := range a.chunks {
				for p := range 16 {
					pr := (*[2]uint16)(unsafe.Add(b, c*1024+p*64))
					s += float64(bf16f(arow[32*c+2*p]))*float64(bf16f(pr[0])) +
						float64(bf16f(arow[32*c+2*p+1]))*float64(bf16f(pr[1]))
				}
			}
			crow[n] = float32(s)
		}
	}
}

func bf16f(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
