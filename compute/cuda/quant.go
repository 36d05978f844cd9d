package cuda

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
)

// Block-quantized weights on the GPU.
//
// Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K and MLX affine 4- and 8-bit
// weights (every group size and scale type) stay quantized in device
// memory. Weight splits each block once at upload into up to three regions
// indexed by (row, block), so that codes sit in 16-byte chunks that lanes
// read with 16-byte loads (kernels/quant.cu):
//
//	type   codes per block           sc per block        d per block
//	Q8_0   32 int8                   -                   f16 scale
//	Q4_0   16 bytes of nibbles       -                   f16 scale
//	Q4_1   16 bytes of nibbles       -                   f16 scale, min
//	Q5_0   16 bytes of nibbles       u32 of fifth bits   f16 scale
//	Q4_K   qs[128]                   d, dmin, scales[12] -
//	Q5_K   qh[32], qs[128]           d, dmin, scales[12] -
//	Q6_K   ql[128], qh[64]           scales[16]          f16 d
//	MLX4   group/2 bytes, reordered  -                   scale, bias
//	MLX8   group bytes               -                   scale, bias
//
// Memory stays the file's size. The bytes of each region are the stored
// bytes, except that the chunks of a row's codes are interleaved so that
// the lanes of a warp read consecutive chunks (see qsplit), and MLX 4-bit
// codes are reordered per 32 elements into Q4_0's nibble order (byte j:
// element j low, element j+16 high).
//
// Decode products (n ≤ 4) quantize the activations to int8 per 32
// elements once per call and read the packed weights with dp4a (qgemv_*);
// one-row products of most types take part in the decode fusion instead
// (fuse_quant.go), with the same sums.
// Longer products (prefill) dequantize the weight to f16 in a scratch
// buffer, in chunks of rows, and run the dense f16 MatMul on it. Embed
// dequantizes the gathered rows.
//
// Q4_1 runs on the MLX kernels (its d and m are a scale and a bias of
// 32-element groups). The other block types (Q5_1, Q2_K, Q3_K, IQ4_NL,
// MXFP4, MLX affine of 2, 3, 5 and 6 bits) are dequantized at load to
// bf16 on the host and uploaded as BF16 tensors, which costs more device
// memory than the file; Weight logs each such tensor.

// Kernel type codes, as QT_* in quant.cu.
const (
	qtQ8_0 = iota
	qtQ4_0
	qtQ4_K
	qtQ6_K
	qtMLX4
	qtQ5_0
	qtQ5_K
	qtMLX8
	numQT
)

var qtNames = [numQT]string{"q8_0", "q4_0", "q4_k", "q6_k", "mlx4", "q5_0", "q5_k", "mlx8"}

// quantKernels holds the handles of the quantized-weight kernels.
type quantKernels struct {
	quantize, dequant, columns uintptr
	gemv                       [numQT][4]uintptr
	gemv2                      [numQT]uintptr // two weight rows per warp, n = 1
	gemv8                      [numQT]uintptr // any n, in groups of 8 rows (qgemvBatch)
}

// add lists the kernels in a kernel table.
func (k *quantKernels) add(t map[string]*uintptr) {
	t["quantize_q8"] = &k.quantize
	t["qdequant"] = &k.dequant
	t["qcolumns"] = &k.columns
	for q, name := range qtNames {
		for r := range 4 {
			t[fmt.Sprintf("qgemv_%s_%d", name, r+1)] = &k.gemv[q][r]
		}
		t["qgemv2_"+name+"_1"] = &k.gemv2[q]
		t["qgemv_"+name+"_8"] = &k.gemv8[q]
	}
}

// qlayout describes a quantized weight in device memory: the regions'
// addresses and the parameters of its kernel type.
type qlayout struct {
	qt           int
	codes, sc, d uintptr
	group, sdt   int // MLX: group size and scale dtype
}

// qsplit is how Weight splits one stored block: ranges of the block's
// bytes going to each region (end 0: none), and the 16-byte chunks of the
// code range that each of the block's units (the work of one lane, see
// kernels/quant.cu) reads. Chunks are interleaved by qchunk's rule; nil
// chunks keep the codes of each block together (Q5_K, whose units share
// the block's high bits).
type qsplit struct {
	qt                     int
	codes, sc, d           [2]int
	chunks                 [][]int
	group, sdt             int
	mlx                    bool
	codeBytes, scB, dBytes int
}

// unitChunks returns the chunks of units that each read n consecutive
// chunks of a code range of size bytes.
func unitChunks(size, n int) [][]int {
	var u [][]int
	for off := 0; off < size; off += 16 * n {
		var c []int
		for i := range n {
			c = append(c, off+16*i)
		}
		u = append(u, c)
	}
	return u
}

// qsplitOf returns the split of a dtype with GPU kernels.
func qsplitOf(dt compute.DType) (qsplit, bool) {
	var s qsplit
	switch dt {
	case compute.Q8_0:
		s = qsplit{qt: qtQ8_0, d: [2]int{0, 2}, codes: [2]int{2, 34}}
	case compute.Q4_0:
		s = qsplit{qt: qtQ4_0, d: [2]int{0, 2}, codes: [2]int{2, 18}}
	case compute.Q5_0:
		s = qsplit{qt: qtQ5_0, d: [2]int{0, 2}, sc: [2]int{2, 6}, codes: [2]int{6, 22}}
	case compute.Q4_1:
		// d and m as an MLX scale and bias: the MLX kernels with
		// groups of 32 and f16 scales.
		s = qsplit{qt: qtMLX4, d: [2]int{0, 4}, codes: [2]int{4, 20}, group: 32, sdt: int(compute.F16)}
	case compute.Q4_K:
		s = qsplit{qt: qtQ4_K, sc: [2]int{0, 16}, codes: [2]int{16, 144}}
	case compute.Q5_K:
		s = qsplit{qt: qtQ5_K, sc: [2]int{0, 16}, codes: [2]int{16, 176}}
	case compute.Q6_K:
		s = qsplit{qt: qtQ6_K, codes: [2]int{0, 192}, sc: [2]int{192, 208}, d: [2]int{208, 210}}
	default:
		bits, group, scale, ok := dt.MLX()
		if !ok || (bits != 4 && bits != 8) {
			return s, false
		}
		es := scale.Size()
		s = qsplit{qt: qtMLX4, d: [2]int{0, 2 * es}, codes: [2]int{2 * es, 2*es + group/2}, group: group, sdt: int(scale), mlx: true}
		if bits == 8 {
			s.qt, s.codes[1], s.mlx = qtMLX8, 2*es+group, false
		}
	}
	s.codeBytes, s.scB, s.dBytes = s.codes[1]-s.codes[0], s.sc[1]-s.sc[0], s.d[1]-s.d[0]
	switch s.qt {
	case qtQ8_0, qtQ4_K, qtMLX8:
		s.chunks = unitChunks(s.codeBytes, 2)
	case qtQ4_0, qtQ5_0, qtMLX4:
		s.chunks = unitChunks(s.codeBytes, 1)
	case qtQ6_K:
		for p := range 4 {
			h, i := p>>1, p&1
			s.chunks = append(s.chunks, []int{64*h + 16*i, 64*h + 32 + 16*i, 128 + 32*h + 16*i})
		}
	}
	return s, true
}

// align256 rounds n up to a multiple of 256.
func align256(n int) int { return (n + 255) &^ 255 }

// quantWeight uploads a block-quantized weight: split into regions for the
// types with kernels, widened to bf16 for the others.
func (b *Backend) quantWeight(dtype compute.DType, shape []int, data []byte) (*compute.Tensor, error) {
	t := &compute.Tensor{DType: dtype, Shape: append([]int(nil), shape...)}
	if len(shape) == 0 {
		return nil, fmt.Errorf("weight of shape %v %s: no dimensions", shape, dtype)
	}
	cols, rows := t.Cols(), t.Rows()
	rb, err := dtype.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("weight of shape %v: %w", shape, err)
	}
	if want := rows * rb; len(data) != want {
		return nil, fmt.Errorf("weight of shape %v %s: have %d bytes, want %d", shape, dtype, len(data), want)
	}
	s, ok := qsplitOf(dtype)
	if !ok {
		return b.widenWeight(dtype, shape, data)
	}
	host, scOff, dOff := repack(s, dtype, rows, cols, data)
	bf, err := b.upWeight(host)
	if err != nil {
		return nil, fmt.Errorf("weight of shape %v %s: %w", shape, dtype, err)
	}
	bf.q = &qlayout{qt: s.qt, codes: bf.ptr, sc: bf.ptr + uintptr(scOff), d: bf.ptr + uintptr(dOff), group: s.group, sdt: s.sdt}
	t.Buf = bf
	return t, nil
}

// repack lays out rows×cols values of dtype (data, in the stored block
// layout) in the device regions of split s: the codes, then at scOff the
// sc bytes, at dOff the d bytes.
func repack(s qsplit, dtype compute.DType, rows, cols int, data []byte) (host []byte, scOff, dOff int) {
	nbRow := cols / dtype.BlockSize()
	nblk := rows * nbRow
	bb := dtype.BlockBytes()
	scOff = align256(nblk * s.codeBytes)
	dOff = scOff + align256(nblk*s.scB)
	total := dOff + nblk*s.dBytes
	host = make([]byte, total)
	parallel(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			for bi := r * nbRow; bi < (r+1)*nbRow; bi++ {
				blk := data[bi*bb : (bi+1)*bb]
				copy(host[scOff+bi*s.scB:][:s.scB], blk[s.sc[0]:s.sc[1]])
				copy(host[dOff+bi*s.dBytes:][:s.dBytes], blk[s.d[0]:s.d[1]])
				if s.chunks == nil {
					copy(host[bi*s.codeBytes:][:s.codeBytes], blk[s.codes[0]:s.codes[1]])
				}
			}
			if s.chunks == nil {
				continue
			}
			upb, nc := len(s.chunks), len(s.chunks[0])
			nu := nbRow * upb
			for u := range nu {
				blk := data[(r*nbRow+u/upb)*bb+s.codes[0]:]
				g := u &^ 31
				gs := min(32, nu-g)
				for c, off := range s.chunks[u%upb] {
					dst := host[((r*nu+g)*nc+c*gs+u-g)*16:][:16]
					if s.mlx {
						mlxReorder(dst, blk[off:off+16])
					} else {
						copy(dst, blk[off:off+16])
					}
				}
			}
		}
	})
	return host, scOff, dOff
}

// mlxReorder stores the 4-bit codes of MLX groups (element e in nibble e%2
// of byte e/2) in Q4_0's order: per 32 elements, byte j holds element j in
// its low nibble and element j+16 in its high nibble.
func mlxReorder(dst, src []byte) {
	code := func(e int) byte { return src[e/2] >> (4 * (e % 2)) & 0xf }
	for c := 0; c < len(src)/16; c++ {
		for j := range 16 {
			e := 32*c + j
			dst[16*c+j] = code(e) | code(e+16)<<4
		}
	}
}

// widenWeight dequantizes a weight of a type without kernels to bf16 on
// the host and uploads it as a BF16 tensor.
func (b *Backend) widenWeight(dtype compute.DType, shape []int, data []byte) (*compute.Tensor, error) {
	t := &compute.Tensor{DType: compute.BF16, Shape: append([]int(nil), shape...)}
	cols, rows := t.Cols(), t.Rows()
	rb, _ := dtype.RowBytes(cols)
	host := make([]byte, 2*rows*cols)
	var firstErr error
	var mu sync.Mutex
	parallel(rows, func(lo, hi int) {
		f := make([]float32, cols)
		for r := lo; r < hi; r++ {
			if err := quant.Dequantize(f, data[r*rb:(r+1)*rb], dtype); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			out := host[2*r*cols:]
			for i, v := range f {
				binary.LittleEndian.PutUint16(out[2*i:], half.F32ToBF16(v))
			}
		}
	})
	if firstErr != nil {
		return nil, fmt.Errorf("weight of shape %v %s: %w", shape, dtype, firstErr)
	}
	slog.Info("cuda: weight dequantized to bf16 at load (no kernels for its type)",
		"dtype", dtype.String(), "shape", shape, "file_bytes", len(data), "device_bytes", len(host))
	bf, err := b.upWeight(host)
	if err != nil {
		return nil, fmt.Errorf("weight of shape %v %s: %w", shape, dtype, err)
	}
	t.Buf = bf
	return t, nil
}

// upWeight copies host bytes into a new device allocation.
func (b *Backend) upWeight(data []byte) (*buffer, error) {
	bf, err := b.rawAlloc(int64(len(data)), false)
	if err != nil {
		return nil, err
	}
	if len(data) > 0 {
		err = b.do(func(w *owner) error {
			return w.check("cuMemcpyHtoD", call(w.d.cuMemcpyHtoD, bf.ptr, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data))))
		})
		if err != nil {
			return nil, err
		}
	}
	return bf, nil
}

// parallel runs fn over [0, n) split into a few ranges on separate
// goroutines.
func parallel(n int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), max(1, n/256))
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*n/parts, (p+1)*n/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// quantState is the Backend's scratch for quantized products; captured
// graphs refer to it, so it is never returned to the pool.
type quantState struct {
	qx   *buffer // quantized activations
	deq  *buffer // a chunk of weight rows widened to f16 (prefill)
	part *buffer // the product of a chunk (prefill)

	// The activations quantized last (from x, n rows of k, into qx) are
	// reused by the next product when no operation was recorded in
	// between (Backend.seq): the products of q, k and v (gate and up) of
	// one input quantize it once.
	lastSeq      uint64
	lastX, qxAt  uintptr
	lastN, lastK int

	oneRow bool // one weight row per warp also for n = 1 (benchmarks)
	rows   int  // most rows on the per-row-count kernels (qgemv_T_n; batch.go)
	batch  int  // most rows on the batched kernels (qgemv_T_8) rather than widening the weight (batch.go)
	chunk  int  // elements of a prefill chunk, when not the default (tests)
}

// qxScratch returns scratch for n rows of k quantized activations (codes and
// per-block metadata).
func (b *Backend) qxScratch(n, k int) uintptr {
	return b.scratch(&b.quant.qx, n*k+n*(k/32)*8)
}

// qMatMul computes dst = x · wᵀ for a quantized weight.
func (b *Backend) qMatMul(dst, x, w *compute.Tensor) {
	n, k, m := x.Rows(), x.Cols(), w.Rows()
	if n <= min(4, b.quant.rows) || n <= b.quant.batch {
		qs := &b.quant
		qx := b.qxScratch(n, k)
		if b.recorded != qs.lastSeq || qs.lastX != dptr(x) || qs.qxAt != qx || qs.lastN != n || qs.lastK != k {
			b.launch(b.k.q.quantize, "quantize_q8", (n*k/32+7)/8, 256).ptr(qx).ptr(dptr(x)).i(n).i(k)
		}
		if n <= min(4, b.quant.rows) {
			b.qgemv(dst, qx, w, n, qs.rowsPerWarp(n, buf(w).q.qt))
		} else {
			b.qgemv8(dst, qx, w, n)
		}
		qs.lastSeq, qs.lastX, qs.qxAt, qs.lastN, qs.lastK = b.recorded, dptr(x), qx, n, k
		return
	}
	// Prefill: widen chunks of rows to f16 and use the dense product. f16
	// rather than bf16: its 11 bits hold a code times a block scale about
	// 8 times more closely, and weights stay far below its range.
	chunkElems := 32 << 20
	if b.quant.chunk > 0 {
		chunkElems = b.quant.chunk
	}
	rows := m
	if m*k > 2*chunkElems || n*m > 2*chunkElems {
		rows = max(64, min(chunkElems/k, chunkElems/n)/64*64)
	}
	tmp := b.scratch(&b.quant.deq, rows*k*2)
	var part uintptr
	if rows < m {
		part = b.scratch(&b.quant.part, n*rows*4)
	}
	for r0 := 0; r0 < m; r0 += rows {
		cr := min(rows, m-r0)
		b.dequant(tmp, compute.F16, 0, r0, cr, w)
		wt := &compute.Tensor{DType: compute.F16, Shape: []int{cr, k}, Buf: &buffer{ptr: tmp}}
		if cr == m {
			b.MatMul(dst, x, wt)
			return
		}
		pt := &compute.Tensor{DType: compute.F32, Shape: []int{n, cr}, Buf: &buffer{ptr: part}}
		b.MatMul(pt, x, wt)
		b.launch(b.k.q.columns, "qcolumns", blocks(n*cr), 256).
			ptr(dptr(dst)).ptr(part).i64(n).i(cr).i(m).i(r0)
	}
}

// qgemv launches the product of n rows of quantized activations at qx
// with a quantized weight, rpw weight rows per warp (1, or 2 for n = 1).
func (b *Backend) qgemv(dst *compute.Tensor, qx uintptr, w *compute.Tensor, n, rpw int) {
	m, k := w.Rows(), w.Cols()
	q := buf(w).q
	fn := b.k.q.gemv[q.qt][n-1]
	if rpw == 2 {
		fn = b.k.q.gemv2[q.qt]
	}
	b.launch(fn, "qgemv_"+qtNames[q.qt], (m+4*rpw-1)/(4*rpw), 128).
		ptr(dptr(dst)).ptr(qx).ptr(q.codes).ptr(q.sc).ptr(q.d).i(m).i(k).i(q.group).i(q.sdt)
}

// rowsPerWarp returns the weight rows per warp of a product with n
// activation rows of kernel type qt. Two rows per warp measured faster
// for the k-quants (Q4_K 14336×4096: 0.68 of the copy bandwidth against
// 0.54, Q6_K 0.69 against 0.66) and slower for the 32-element types (Q4_0
// 4096×14336: 0.71 against 0.82), on the H200 in one run.
func (qs *quantState) rowsPerWarp(n, qt int) int {
	if n == 1 && !qs.oneRow && (qt == qtQ4_K || qt == qtQ5_K || qt == qtQ6_K) {
		return 2
	}
	return 1
}

// dequant widens rows of a quantized weight into dst (F32, F16 or BF16): rows
// ids[0…rows) when ids is set, else rows row0 … row0+rows-1.
func (b *Backend) dequant(dst uintptr, odt compute.DType, ids uintptr, row0, rows int, w *compute.Tensor) {
	q := buf(w).q
	k := w.Cols()
	el := 32
	if q.qt == qtQ4_K || q.qt == qtQ5_K || q.qt == qtQ6_K {
		el = 64
	}
	b.launch(b.k.q.dequant, "qdequant", blocks(rows*k/el), 256).
		ptr(dst).i(int(odt)).ptr(ids).i(row0).i(rows).i(q.qt).
		ptr(q.codes).ptr(q.sc).ptr(q.d).i(k).i(q.group).i(q.sdt)
}

// qEmbed gathers rows of a quantized table as float32.
func (b *Backend) qEmbed(dst, table, ids *compute.Tensor) {
	b.dequant(dptr(dst), compute.F32, dptr(ids), 0, ids.Len(), table)
}
