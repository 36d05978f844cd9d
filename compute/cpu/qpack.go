package cpu

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/mmap"
)

// Packed quantized weights. At load, the backend copies the 2-D Q8_0,
// Q4_0, Q5_0, Q4_K and Q6_K matrices of at least packRows rows into an
// interleaved layout for the AVX-512 VNNI kernels of qpack_amd64.s, and
// the copy replaces the stored blocks: both decode and prefill read it,
// and the file's pages are given back (see Backend.Weight).
//
// A group of packRows = 16 consecutive rows occupies the same bytes as the
// 16 rows did, in the order the kernels read them. Codes are vectors of 16
// four-byte lanes, lane r holding 4 consecutive code bytes of row r, so
// that a VPDPBUSD of a vector with 4 activation codes broadcast to every
// lane adds 4 products to each of the 16 rows' sums; the rows' scales are
// vectors of 16 too. The rows after the last whole group follow in their
// stored form. packCopies gives every byte's place:
//
//   - Q8_0, Q4_0, Q5_0: per pair of 32-element blocks the codes of both
//     blocks, then their float16 scales (an odd last block: its codes, then
//     its scales). A block's codes are cb bytes (512 for Q8_0, 256 for
//     Q4_0, 320 for Q5_0): vector j holds bytes 4j..4j+3 of each row's
//     codes, Q8_0's with 128 added (made unsigned), Q4_0's packed nibbles
//     as they are, whose low nibbles are elements 4j..4j+3 and high ones
//     16+4j..16+4j+3; Q5_0's the same after q5Mix, followed by a vector
//     of the bits the nibbles lack (the 4 bytes q5Mix leaves in qh).
//   - Q4_K, per super-block: the 12 scale bytes of each row as three
//     vectors, d and dmin, then per pair of sub-blocks 8 vectors of the
//     32 code bytes whose low nibbles are the first sub-block's codes and
//     high nibbles the second's.
//   - Q6_K, per super-block: per half h and group ch of 4 chunks of 4
//     elements, each chunk's vectors A, B and C, then the signed scales of
//     the 4 sub-blocks they make (one byte per row); the d of all the
//     group's super-blocks after them. A, B and C hold the bytes of ql and
//     qh that the stored block has in their place, with their bits
//     rearranged (see q6Mix): the 6-bit codes of quarters 0, 1 and 2 in
//     their low bits, quarter 3's in their top two bits, so that the
//     kernels need two shifts for four codes.
//
// The kernels read activations in layout xfL32 with the offset that makes
// the weights' codes unsigned (128 for Q8_0, 8 for Q4_0, 16 for Q5_0), or
// xfK4 and xfK6 for the k-quants.

//go:generate go run gen_qpack.go

// packChunkBytes is the most bytes of packed weights a thread takes at a
// time in a one-row product.
var packChunkBytes = 256 << 10

// packLongTiles gives many-row products of packed weights whose rows
// make one tile the long runs of groups of one-row products (the
// benchmarks compare both).
var packLongTiles = true

// q6kOffset is the offset of Q6_K's codes (32), which the packed Q6_K
// kernels read from memory (qpack_amd64.s).
var q6kOffset float32 = 32

// q4kMask30 is the mask of the two high bits of Q4_K's 6-bit scales and
// mins in their 12 bytes, which the packed Q4_K kernels of many rows read
// from memory.
var q4kMask30 uint32 = 0x30

const (
	packRows = 16 // weight rows per packed group
	qpmaxR   = 8  // activation rows per packed many-row kernel call, at most
)

// qpargs carries the operands of one packed-kernel call; the assembly reads
// it at the offsets in gen_qpack.go.
type qpargs struct {
	w       *byte    // the first group
	x       *byte    // the first activation row, layout xfL32
	nb      int      // blocks per row
	groups  int      // one-row kernel: groups to compute
	dst     *float32 // 16 sums per group and activation row
	ldd     int      // bytes between the sums of consecutive activation rows
	xstride int      // bytes between activation rows
}

// qpackSet is the packed kernels of one weight type: gemv takes one
// activation row and a.groups groups; gemm[R] takes R activation rows and
// one group.
type qpackSet struct {
	dtype compute.DType
	gfni  bool // the kernels need AVX-512 GFNI
	maxR  int  // the most activation rows of a gemm kernel
	// prefetch names gemv's software prefetch of the weights, in the form
	// of LEM_CPU_PREFETCH (see packPrefetch); "0" or "" for none.
	prefetch string
	// gemmPrefetch names the software prefetch of the gemm kernels, in
	// the form of LEM_CPU_GEMM_PREFETCH (see packGemmPrefetch).
	gemmPrefetch string
	// gemmCached are the gemm kernels without prefetch, for the blocks of
	// activation rows after a group's first: its weights are in cache.
	gemmCached [qpmaxR + 1]func(*qpargs)
	gemv       func(*qpargs)
	gemm       [qpmaxR + 1]func(*qpargs)
}

// qpackKernels[dt] is the packed kernel set of weight type dt, nil when dt
// is not packed on this CPU.
var qpackKernels [256]*qpackSet

func init() {
	if !hasVNNI {
		return
	}
	setting, gemmSetting := os.Getenv("LEM_CPU_PREFETCH"), os.Getenv("LEM_CPU_GEMM_PREFETCH")
	for i := range asmPackKernels {
		// A copy: asmPackKernels keeps the kernels without prefetch.
		ks := new(qpackSet)
		*ks = asmPackKernels[i]
		pf := packPrefetch(vendor(), setting, ks.dtype)
		for _, x := range qpackExtra {
			if x.dtype == ks.dtype && !x.gfni && x.prefetch == pf && pf != "0" {
				ks.gemv, ks.prefetch = x.gemv, pf
			}
		}
		gpf := packGemmPrefetch(vendor(), gemmSetting, ks.dtype)
		ks.gemmPrefetch = "0"
		for _, x := range qpackGemmExtra {
			if x.dtype == ks.dtype && x.prefetch == gpf && gpf != "0" {
				ks.gemm, ks.gemmPrefetch = x.gemm, gpf
			}
		}
		ks.gemm[1] = ks.gemv
		ks.gemmCached = asmPackKernels[i].gemm
		ks.gemmCached[1] = ks.gemv
		qpackKernels[ks.dtype] = ks
	}
}

// packPrefetch returns the software prefetch of the one-row packed
// kernels of type dt on a CPU of the given vendor: the setting
// (LEM_CPU_PREFETCH) for dt where it is well formed, else the vendor's
// choice for dt (prefetchIntel, prefetchAMD), else "0", none.
//
// A setting is "0" or one or two distances in bytes joined by "+", each
// with an optional hint: "4096" is PREFETCHT0 4096 bytes ahead of the
// codes being read, "8192t2" PREFETCHT2, "8192nta" PREFETCHNTA,
// "1024+8192t2" both a near and a far prefetch. It applies to every type,
// or, as a comma-separated list of type=setting ("q6_k=4096,q4_0=0"), to
// the types it names. A setting that names no generated kernel
// (qpackExtra) means none.
func packPrefetch(vendor, setting string, dt compute.DType) string {
	return choosePrefetch(vendor, setting, dt, prefetchIntel, prefetchAMD)
}

// packGemmPrefetch returns the software prefetch of the many-row packed
// kernels of type dt, as packPrefetch does for the one-row kernels: the
// setting (LEM_CPU_GEMM_PREFETCH, of the same form as LEM_CPU_PREFETCH)
// for dt where it is well formed, else the vendor's choice for dt
// (gemmPrefetchIntel, gemmPrefetchAMD), else "0", none. A setting that
// names no generated kernel (qpackGemmExtra) means none.
func packGemmPrefetch(vendor, setting string, dt compute.DType) string {
	return choosePrefetch(vendor, setting, dt, gemmPrefetchIntel, gemmPrefetchAMD)
}

// choosePrefetch is packPrefetch with the vendors' choices intel and amd.
func choosePrefetch(vendor, setting string, dt compute.DType, intel, amd map[compute.DType]string) string {
	if validPrefetch(setting) {
		return setting
	}
	for _, item := range strings.Split(setting, ",") {
		name, pf, ok := strings.Cut(item, "=")
		if ok && strings.EqualFold(strings.TrimSpace(name), dt.String()) && validPrefetch(pf) {
			return pf
		}
	}
	var pf string
	switch vendor {
	case "GenuineIntel":
		pf = intel[dt]
	case "AuthenticAMD":
		pf = amd[dt]
	}
	if pf == "" {
		return "0"
	}
	return pf
}

// validPrefetch reports whether s is a well-formed prefetch setting.
func validPrefetch(s string) bool {
	if s == "0" {
		return true
	}
	parts := strings.Split(s, "+")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		p = strings.TrimSuffix(strings.TrimSuffix(p, "t2"), "nta")
		if v, err := strconv.Atoi(p); err != nil || v <= 0 {
			return false
		}
	}
	return true
}

// prefetchIntel and prefetchAMD are packPrefetch's choices per weight
// type, each the fastest variant of BenchmarkQPackPrefetch (two threads,
// 2048×8192, GB/s of weights; the streaming read of the same run in
// brackets) on the CPUs named.
//
// A decode step streams every weight once, so the one-row kernels are
// bound by how many cache misses a core keeps in flight; the hardware
// prefetchers alone left them well short of the bandwidth on Intel.
var (
	// A Xeon of the Emerald Rapids generation, 2 of its cores (device
	// round of session 6, streaming read 24.3–25.0 GB/s): a near
	// PREFETCHT0 2048 bytes ahead with a far PREFETCHT2 16384 bytes ahead
	// read Q4_0 at 24.1 GB/s (15.4 without prefetch, 19.6 with 4096
	// alone), Q8_0 24.5 (19.9, 21.1), Q5_0 24.3 (15.9, 19.5), Q4_K 24.2
	// (18.6, 18.7). In session 12, after the kernels lost shifts (two
	// passes; streaming read 26–27 GB/s on that host minutes before), the
	// same pair stayed among the fastest for those four (Q4_0 25.0, 25.4;
	// 16.2, 19.8 without), and became the fastest for Q6_K too (23.8,
	// 25.4; 22.4, 20.9 with 4096 alone, its choice since session 6; 20.7,
	// 17.2 without).
	prefetchIntel = map[compute.DType]string{
		compute.Q8_0: "2048+16384t2", compute.Q4_0: "2048+16384t2", compute.Q5_0: "2048+16384t2",
		compute.Q4_K: "2048+16384t2", compute.Q6_K: "2048+16384t2",
	}
	// An AMD EPYC (a "Turin-like" virtual machine, 2 cores; session 11,
	// after the kernels of sessions 10 and 11 took shifts out): 4096
	// bytes ahead, non-temporal, read Q4_0 at 42-44 GB/s (37-41 without
	// prefetch), Q5_0 43-46 (33-35), Q4_K 48-50 (39-42); Q6_K was best at
	// PREFETCHT0 4096 (43-46; 36-37 without). Q8_0 measured no steady gain
	// (57-61 against 57-59).
	prefetchAMD = map[compute.DType]string{
		compute.Q4_0: "4096nta", compute.Q5_0: "4096nta", compute.Q4_K: "4096nta", compute.Q6_K: "4096",
	}
)

// gemmPrefetchIntel and gemmPrefetchAMD are packGemmPrefetch's choices per
// weight type.
var (
	gemmPrefetchIntel = map[compute.DType]string{}
	gemmPrefetchAMD   = map[compute.DType]string{
		compute.Q8_0: "16384nta", compute.Q4_0: "16384nta", compute.Q5_0: "16384nta",
		compute.Q4_K: "16384", compute.Q6_K: "16384",
	}
)

// packable reports whether weights of type dt and rows×cols are packed at
// load on this CPU.
func packable(dt compute.DType, rows, cols int) bool {
	return qpackKernels[dt] != nil && rows >= packRows && cols%dt.BlockSize() == 0 && cols > 0
}

// packXf returns the activation layout of the packed kernels of dt.
func packXf(dt compute.DType) xfmt {
	switch dt {
	case compute.Q4_K:
		return xfK4
	case compute.Q6_K:
		return xfK6
	}
	return xfL32
}

// legacyOffsets returns where the codes and the scales of block b (of nb)
// of Q8_0, Q4_0 and Q5_0 lie in a packed group: blocks come in pairs, the
// codes of both, then their scales; an odd last block has its codes, then
// its scales.
func legacyOffsets(dt compute.DType, nb, b int) (codes, scales int) {
	cb := packCodeBytes(dt)
	base := b / 2 * 2 * (cb + 32)
	switch {
	case b%2 == 1:
		return base + cb, base + 2*cb + 32
	case b+1 < nb:
		return base, base + 2*cb
	}
	return base, base + cb
}

// packCopies calls f for each run of bytes of block b of row r (of nb
// blocks) of a group: n bytes at offset src of the stored block go to
// offset dst of the group, Q8_0's codes with 128 added, Q5_0's and Q6_K's
// after q5Mix and q6Mix.
func packCopies(dt compute.DType, nb, r, b int, f func(dst, src, n int)) {
	switch dt {
	case compute.Q8_0, compute.Q4_0, compute.Q5_0:
		co, so := legacyOffsets(dt, nb, b)
		nib := packNibbles(dt)
		f(so+2*r, 0, 2)
		for j := range (dt.BlockBytes() - nib) / 4 {
			f(co+64*j+4*r, nib+4*j, 4)
		}
		if dt == compute.Q5_0 {
			f(co+256+4*r, 2, 4)
		}
	case compute.Q4_K:
		// The scale bytes 4q..4q+3 of the rows as vector q, d, dmin,
		// then the codes: per pair p of sub-blocks 8 vectors.
		base := b * 2304
		for q := range 3 {
			f(base+64*q+4*r, 4+4*q, 4)
		}
		f(base+192+2*r, 0, 2)
		f(base+224+2*r, 2, 2)
		for p := range 4 {
			for v := range 8 {
				f(base+256+512*p+64*v+4*r, 16+32*p+4*v, 4)
			}
		}
	case compute.Q6_K:
		// In the order the kernel reads them: per half h and group ch of
		// 4 chunks of 4 elements, each chunk's vectors A, B and C (from
		// ql, ql+32 and qh, after q6Mix), then
		// the scales of the sub-blocks 8h+2q+ch; the d of all the
		// super-blocks after them.
		base := b * 3328
		for hc := range 4 {
			h, ch := hc/2, hc%2
			for ci := range 4 {
				c, o := 4*ch+ci, base+832*hc+192*ci
				f(o+4*r, 64*h+4*c, 4)
				f(o+64+4*r, 64*h+32+4*c, 4)
				f(o+128+4*r, 128+32*h+4*c, 4)
			}
			for q := range 4 {
				f(base+832*hc+768+16*q+r, 192+8*h+2*q+ch, 1)
			}
		}
		f(nb*3328+32*b+2*r, 208, 2)
	}
}

// packCodeBytes returns the bytes of one block's codes in a group of type dt.
func packCodeBytes(dt compute.DType) int {
	switch dt {
	case compute.Q8_0:
		return 512
	case compute.Q5_0:
		return 320
	}
	return 256
}

// packXoff is the activation code offset of the packed kernels of dt.
func packXoff(dt compute.DType) int32 {
	switch dt {
	case compute.Q8_0:
		return 128
	case compute.Q5_0:
		return 16
	case compute.Q4_K, compute.Q6_K:
		return 0
	}
	return 8
}

// packNibbles is the offset of the packed nibbles in a stored block of
// Q4_0 or Q5_0 (after the scale, and Q5_0's 32 fifth bits).
func packNibbles(dt compute.DType) int {
	if dt == compute.Q5_0 {
		return 6
	}
	return 2
}

// q5Mix rearranges the bits of a stored Q5_0 block (22 bytes) in place
// into the form its packed copy keeps. Of byte k of qs, which holds the
// low 4 bits of the 5-bit codes a of element k and b of element 16+k, the
// high nibble becomes b's top 4 bits; the 4 bytes of qh become a lane
// whose byte k%4 holds in bit 2(k/4) the top bit of a and in bit 2(k/4)+1
// the low bit of b. A kernel then has a (low nibble | bit·0x10) and 8b
// (high nibble | bit·0x08) without shifting the codes, and the lane's
// nibbles index a lookup of the bits (q5Lookup).
func q5Mix(blk []byte) {
	qh := binary.LittleEndian.Uint32(blk[2:])
	var lane [4]byte
	for k := range 16 {
		c := blk[6+k]
		b := c>>4 | byte(qh>>(16+k)&1)<<4
		blk[6+k] = c&0xF | b>>1<<4
		lane[k%4] |= byte(qh>>k&1)<<(2*(k/4)) | (b&1)<<(2*(k/4)+1)
	}
	copy(blk[2:6], lane[:])
}

// q5Unmix inverts q5Mix.
func q5Unmix(blk []byte) {
	var qh uint32
	for k := range 16 {
		l, c := blk[2+k%4]>>(2*(k/4)), blk[6+k]
		b := c>>4<<1 | l>>1&1
		blk[6+k] = c&0xF | b<<4
		qh |= uint32(l&1)<<k | uint32(b>>4)<<(16+k)
	}
	binary.LittleEndian.PutUint32(blk[2:], qh)
}

// q5Lookup holds, per nibble n of a lane q5Mix writes, the bits of the
// codes of chunks 0 and 2 (bytes 0-15: bit 0 of n as 0x10, bit 1 as 0x08)
// and of chunks 1 and 3 (bytes 16-31: bits 2 and 3), for VPSHUFB.
var q5Lookup = func() (t [32]byte) {
	for n := range 16 {
		t[n] = byte(n&1)<<4 | byte(n>>1&1)<<3
		t[16+n] = byte(n>>2&1)<<4 | byte(n>>3&1)<<3
	}
	return t
}()

// q6Mix rearranges the bits of a stored Q6_K block (210 bytes) in place
// into the form its packed copy keeps: for half h and l < 32, the bytes
// ql[64h+l], ql[64h+32+l] and qh[32h+l], which together hold the 6-bit
// codes q0..q3 of elements 128h+l, +32, +64 and +96, become
//
//	A = q0 | (q3>>4)<<6,  B = q1 | (q3>>2&3)<<6,  C = q2 | (q3&3)<<6.
//
// Codes 0, 1 and 2 are then one mask away (0x3F), and code 3, times 4, is
// (A&0xC0 | B>>2&0x30 | C>>4&0x0C).
func q6Mix(blk []byte) {
	for h := range 2 {
		for l := range 32 {
			lo, hi, u := blk[64*h+l], blk[64*h+32+l], blk[128+32*h+l]
			q0, q1 := lo&0xF|u&3<<4, hi&0xF|u>>2&3<<4
			q2, q3 := lo>>4|u>>4&3<<4, hi>>4|u>>6<<4
			blk[64*h+l], blk[64*h+32+l], blk[128+32*h+l] = q0|q3>>4<<6, q1|q3>>2&3<<6, q2|q3&3<<6
		}
	}
}

// q6Unmix inverts q6Mix.
func q6Unmix(blk []byte) {
	for h := range 2 {
		for l := range 32 {
			a, b, c := blk[64*h+l], blk[64*h+32+l], blk[128+32*h+l]
			q0, q1, q2 := a&0x3F, b&0x3F, c&0x3F
			q3 := a>>6<<4 | b>>6<<2 | c>>6
			blk[64*h+l], blk[64*h+32+l] = q0&0xF|q2<<4, q1&0xF|q3<<4
			blk[128+32*h+l] = q0>>4 | q1>>4<<2 | q2>>4<<4 | q3>>4<<6
		}
	}
}

// packRun is one run of packCopies for row 0: n bytes from offset src of
// a stored block to offset dst of the group, row r's at dst + r·n.
type packRun struct{ dst, src, n int }

// packWeights writes the rows of w (a type packable accepts) to dst,
// len(w.Data) bytes, in the packed layout.
func packWeights(dst []byte, w Weights) {
	rb, _ := w.DType.RowBytes(w.Cols)
	nb, bb := w.Cols/w.DType.BlockSize(), w.DType.BlockBytes()
	groups := w.Rows / packRows
	// Where each block's bytes go, for row 0: a lane is n bytes wide, so
	// row r's go n·r further.
	plans := make([][]packRun, nb)
	for b := range plans {
		packCopies(w.DType, nb, 0, b, func(d, s, n int) { plans[b] = append(plans[b], packRun{d, s, n}) })
	}
	// Q5_0 and Q6_K blocks are rearranged before they are copied.
	var mix func([]byte)
	switch w.DType {
	case compute.Q5_0:
		mix = q5Mix
	case compute.Q6_K:
		mix = q6Mix
	}
	for g := range groups {
		gd := dst[g*packRows*rb : (g+1)*packRows*rb]
		var mixed [210]byte // a block after mix
		for r := range packRows {
			row := w.Data[(g*packRows+r)*rb:]
			for b, plan := range plans {
				blk := row[b*bb : (b+1)*bb]
				if mix != nil {
					copy(mixed[:], blk)
					blk = mixed[:bb]
					mix(blk)
				}
				for _, p := range plan {
					o := p.dst + r*p.n
					switch p.n {
					case 4:
						binary.LittleEndian.PutUint32(gd[o:], binary.LittleEndian.Uint32(blk[p.src:]))
					case 2:
						gd[o], gd[o+1] = blk[p.src], blk[p.src+1]
					default:
						gd[o] = blk[p.src]
					}
				}
				if w.DType == compute.Q8_0 {
					co, _ := legacyOffsets(w.DType, nb, b)
					for j := range 8 {
						o := co + 64*j + 4*r
						binary.LittleEndian.PutUint32(gd[o:], binary.LittleEndian.Uint32(gd[o:])^0x80808080)
					}
				}
			}
		}
	}
	copy(dst[groups*packRows*rb:], w.Data[groups*packRows*rb:])
}

// unpackBlock writes block b of row r of group gd (of nb blocks) in its
// stored form to dst.
func unpackBlock(dst, gd []byte, dt compute.DType, nb, r, b int) {
	packCopies(dt, nb, r, b, func(d, s, n int) { copy(dst[s:s+n], gd[d:d+n]) })
	switch dt {
	case compute.Q8_0:
		for i := 2; i < 34; i++ {
			dst[i] ^= 0x80
		}
	case compute.Q5_0:
		q5Unmix(dst)
	case compute.Q6_K:
		q6Unmix(dst)
	}
}

// packDotGo is the pure-Go packed kernel, the oracle of the assembly: the
// 16 sums of activation row x (layout xfL32) with group gd of type dt over
// nb blocks, added to out. Per block it forms the same exact integer sums
// as the assembly, then adds sum·(d·dx) to the row's float32 accumulator.
func packDotGo(out *[packRows]float32, gd, x []byte, dt compute.DType, nb int) {
	if dt == compute.Q4_K || dt == compute.Q6_K {
		// The k-quants: each row's super-blocks unpacked, and the
		// kernels of the stored form.
		var blk [210]byte
		bb := dt.BlockBytes()
		for b := range nb {
			for r := range packRows {
				unpackBlock(blk[:bb], gd, dt, nb, r, b)
				if dt == compute.Q6_K {
					out[r] += dotQ6_K(blk[:bb], x[b*384:(b+1)*384], 1)
				} else {
					out[r] += dotQ4_K(blk[:bb], x[b*384:(b+1)*384], 1)
				}
			}
		}
		return
	}
	cb := packCodeBytes(dt)
	for b := range nb {
		xb := x[b*96 : (b+1)*96]
		bias := int32(binary.LittleEndian.Uint32(xb[64:]))
		dx := getF32(xb[32:])
		co, so := legacyOffsets(dt, nb, b)
		codes := gd[co : co+cb]
		for r := range packRows {
			is := bias
			var hi [4]byte // Q5_0: the lane of bits (see q5Mix)
			if dt == compute.Q5_0 {
				copy(hi[:], codes[256+4*r:])
			}
			for j := range min(cb, 512) / 64 {
				if dt == compute.Q5_0 && j == 4 {
					break
				}
				lane := codes[64*j+4*r : 64*j+4*r+4]
				for i, c := range lane {
					if dt == compute.Q8_0 {
						is += int32(c) * int32(int8(xb[4*j+i]))
						continue
					}
					lo, up := int32(c&0xF), int32(c>>4)
					if dt == compute.Q5_0 {
						lo |= int32(hi[i]>>(2*j)&1) << 4
						up = up<<1 | int32(hi[i]>>(2*j+1)&1)
					}
					is += lo*int32(int8(xb[4*j+i])) + up*int32(int8(xb[16+4*j+i]))
				}
			}
			d := f16le(gd[so+2*r:])
			out[r] += float32(is) * float32(d*dx)
		}
	}
}

// packGEMVGo computes groups groups of 16 sums of the packed weights at w
// with one activation row, as the one-row assembly kernel does.
func packGEMVGo(a *qpargs, dt compute.DType) {
	rb := 16 * a.nb * dt.BlockBytes()
	xs := unsafe.Slice(a.x, packXf(dt).rowBytes(a.nb*dt.BlockSize()))
	for g := range a.groups {
		var out [packRows]float32
		packDotGo(&out, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(a.w), g*rb)), rb), xs, dt, a.nb)
		copy(unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(a.dst), 64*g)), packRows), out[:])
	}
}

// matMulPacked is matMulQuant for packed weights.
func matMulPacked(s *poolState, dst, x []float32, n int, w Weights) {
	m, k := w.Rows, w.Cols
	// AMX rounds the operands to bf16, another arithmetic than the VNNI
	// kernels' of fewer rows: row-stable products keep to the latter.
	if n >= amxMinRows && !s.rowStable && m%packRows == 0 && amxDtype(w.DType) && amxOn() {
		matMulAMX(s, dst, x, n, w, amxKernel)
		return
	}
	rb, _ := w.DType.RowBytes(k)
	t := &s.qm
	xf := packXf(w.DType)
	xrb := xf.rowBytes(k)
	*t = qmatmulTask{
		dst: dst, x: x, w: w.pack, dt: w.DType,
		n: n, m: m, k: k, nb: k / w.DType.BlockSize(), rb: rb,
		xrb: xrb, xq: s.qscratch(n * xrb), packed: true,
	}
	if qlevel() == levelAVX512 {
		t.ps = qpackKernels[w.DType]
	}
	groups := m / packRows
	if n == 1 {
		quantizeX(t.xq, x[:k], xf, packXoff(w.DType))
		// Groups per chunk: long runs of bytes, so that the hardware
		// prefetchers stream, but at least 4 chunks per thread.
		gb := packRows * rb
		t.rowsPerChunk = max(gemvChunkRows/packRows, min(packChunkBytes/gb, groups/(4*s.threads)))
		s.run(taskQGEMV, (groups+t.rowsPerChunk-1)/t.rowsPerChunk+min(m%packRows, 1))
	} else {
		s.run(taskQPack, (n+packChunk-1)/packChunk)
		R := qpmaxR
		if t.ps != nil {
			R = t.ps.maxR
		}
		t.tileN = min(max(qgemmXBytes/xrb/R, 1)*R, (n+R-1)/R*R)
		t.tileM = max(qgemmTileM/packRows, 1) // groups per tile
		if packLongTiles && t.tileN >= n {
			// One tile of rows (a few decode rows): long runs of groups,
			// as the one-row product takes, so that each thread streams
			// its weights instead of hopping between short tiles.
			t.tileM = max(t.tileM, min(packChunkBytes/(packRows*rb), groups/(4*s.threads)))
		}
		t.tilesM = (groups+t.tileM-1)/t.tileM + min(m%packRows, 1)
		s.run(taskQGEMM, (n+t.tileN-1)/t.tileN*t.tilesM)
	}
	*t = qmatmulTask{}
}

// packedTail computes the products of activation rows t0..t1 with the
// weight rows after the last whole group, which the packed layout keeps in
// their stored form, with the pure-Go kernels.
func (t *qmatmulTask) packedTail(t0, t1 int) {
	dot := dotQ4_0
	switch t.dt {
	case compute.Q8_0:
		dot = dotQ8_0 // reads no offset: the activation's 128 is unused
	case compute.Q5_0:
		dot = dotQ5_0
	case compute.Q4_K:
		dot = dotQ4_K
	case compute.Q6_K:
		dot = dotQ6_K
	}
	for j := t.m / packRows * packRows; j < t.m; j++ {
		wr := t.w[j*t.rb : (j+1)*t.rb]
		for i := t0; i < t1; i++ {
			t.dst[i*t.m+j] = dot(wr, t.xq[i*t.xrb:(i+1)*t.xrb], t.nb)
		}
	}
}

// packedGEMV computes chunk c of a one-row product with packed weights.
func (t *qmatmulTask) packedGEMV(a *qpargs, c int) {
	groups := t.m / packRows
	g0 := c * t.rowsPerChunk
	if g0 >= groups {
		t.packedTail(0, 1)
		return
	}
	*a = qpargs{
		w: &t.w[g0*packRows*t.rb], x: &t.xq[0], nb: t.nb,
		groups: min(t.rowsPerChunk, groups-g0), dst: &t.dst[g0*packRows],
	}
	if t.ps != nil {
		t.ps.gemv(a)
		return
	}
	packGEMVGo(a, t.dt)
}

// packedGEMM computes tile c of a many-row product with packed weights:
// for each group of the tile, every block of up to qpmaxR activation rows.
func (t *qmatmulTask) packedGEMM(a *qpargs, c int) {
	groups := t.m / packRows
	t0 := c / t.tilesM * t.tileN
	t1 := min(t0+t.tileN, t.n)
	g0 := c % t.tilesM * t.tileM
	if g0 >= groups {
		t.packedTail(t0, t1)
		return
	}
	g1 := min(g0+t.tileM, groups)
	gb := packRows * t.rb
	step := qpmaxR
	if t.ps != nil {
		step = t.ps.maxR
	}
	// The fields that stay are set once, and the others one at a time: the
	// kernels read each with a load of its size, which a store of the same
	// size forwards. (A copy of a whole qpargs per call, in 16-byte moves,
	// held 9% of the samples of an 8-stream decode of qwen2.5-0.5b.)
	*a = qpargs{nb: t.nb, groups: 1, ldd: 4 * t.m, xstride: t.xrb}
	for g := g0; g < g1; g++ {
		for i := t0; i < t1; i += step {
			R := min(step, t1-i)
			a.w, a.x, a.dst = &t.w[g*gb], &t.xq[i*t.xrb], &t.dst[i*t.m+g*packRows]
			if t.ps != nil {
				if i == t0 {
					t.ps.gemm[R](a)
				} else {
					t.ps.gemmCached[R](a)
				}
				continue
			}
			var out [packRows]float32
			for q := range R {
				out = [packRows]float32{}
				packDotGo(&out, t.w[g*gb:(g+1)*gb], t.xq[(i+q)*t.xrb:(i+q+1)*t.xrb], t.dt, t.nb)
				copy(t.dst[(i+q)*t.m+g*packRows:], out[:])
			}
		}
	}
}

// packedWeight is the Buf of a weight tensor the backend packed at load.
type packedWeight struct {
	dtype      compute.DType
	rows, cols int
	pack       []byte // the packed copy, in anonymous memory
	data       []byte // the stored blocks, whose file pages were released
	chunk      *arenaChunk
}

// packArena hands out the memory of packed copies from large anonymous
// mappings, so that the small matrices share huge pages too. A mapping is
// freed once no packed weight (and no arena, for the newest) refers to it.
type packArena struct {
	mu  sync.Mutex
	cur *arenaChunk
}

// arenaChunk is one mapping of a packArena.
type arenaChunk struct {
	buf []byte
	off int // bytes handed out
}

// arenaBytes is the size of an arena's mappings; a copy larger than a
// quarter of it gets a mapping of its own.
const arenaBytes = 64 << 20

// alloc returns n bytes of anonymous memory, 64-byte aligned, and the
// chunk the caller must keep while it uses them.
func (a *packArena) alloc(n int) ([]byte, *arenaChunk, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	newChunk := func(size int) (*arenaChunk, error) {
		buf, err := mmap.Anon(size)
		if err != nil {
			return nil, err
		}
		c := &arenaChunk{buf: buf}
		runtime.AddCleanup(c, func(b []byte) { mmap.Free(b) }, buf)
		return c, nil
	}
	if n > arenaBytes/4 {
		c, err := newChunk(n)
		if err != nil {
			return nil, nil, err
		}
		return c.buf[:n:n], c, nil
	}
	if a.cur == nil || a.cur.off+n > len(a.cur.buf) {
		c, err := newChunk(arenaBytes)
		if err != nil {
			return nil, nil, err
		}
		a.cur = c
	}
	c := a.cur
	b := c.buf[c.off : c.off+n : c.off+n]
	c.off += (n + 63) &^ 63
	return b, c, nil
}

// newPackedWeight packs a rows×cols matrix of type dt stored in data into
// memory from arena, on threads goroutines. It returns nil when the memory
// for the copy cannot be had; the caller then keeps the stored blocks.
func newPackedWeight(arena *packArena, dt compute.DType, rows, cols int, data []byte, threads int) *packedWeight {
	buf, chunk, err := arena.alloc(len(data))
	if err != nil {
		return nil
	}
	rb, _ := dt.RowBytes(cols)
	groups := rows / packRows
	var wg sync.WaitGroup
	for i := range threads {
		g0, g1 := i*groups/threads, (i+1)*groups/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := Weights{DType: dt, Rows: (g1 - g0) * packRows, Cols: cols, Data: data[g0*packRows*rb : g1*packRows*rb]}
			packWeights(buf[g0*packRows*rb:g1*packRows*rb], sub)
		}()
	}
	wg.Wait()
	copy(buf[groups*packRows*rb:], data[groups*packRows*rb:])
	mmap.Release(data)
	return &packedWeight{dtype: dt, rows: rows, cols: cols, pack: buf, data: data, chunk: chunk}
}

// weights returns p as kernel Weights.
func (p *packedWeight) weights() Weights {
	return Weights{DType: p.dtype, Rows: p.rows, Cols: p.cols, Data: p.data, pack: p.pack}
}

// dequantRow decodes row r into dst.
func (p *packedWeight) dequantRow(dst []float32, r int) {
	var blk [210]byte // the largest block, Q6_K's
	bs, bb := p.dtype.BlockSize(), p.dtype.BlockBytes()
	for b := range p.cols / bs {
		p.block(blk[:bb], r, b)
		quant.Dequantize(dst[bs*b:bs*(b+1)], blk[:bb], p.dtype)
	}
}

// block writes block b of row r in its stored form to dst.
func (p *packedWeight) block(dst []byte, r, b int) {
	rb, _ := p.dtype.RowBytes(p.cols)
	bb := p.dtype.BlockBytes()
	groups := p.rows / packRows
	if r >= groups*packRows {
		copy(dst, p.pack[r*rb+b*bb:r*rb+(b+1)*bb])
		return
	}
	g := r / packRows
	unpackBlock(dst, p.pack[g*packRows*rb:(g+1)*packRows*rb], p.dtype, p.cols/p.dtype.BlockSize(), r%packRows, b)
}

// rowsBytes returns rows from..to in their stored form, a new slice.
func (p *packedWeight) rowsBytes(from, to int) []byte {
	rb, _ := p.dtype.RowBytes(p.cols)
	bb := p.dtype.BlockBytes()
	out := make([]byte, (to-from)*rb)
	for r := from; r < to; r++ {
		for b := range p.cols / p.dtype.BlockSize() {
			p.block(out[(r-from)*rb+b*bb:(r-from)*rb+(b+1)*bb], r, b)
		}
	}
	return out
}
