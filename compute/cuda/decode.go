package cuda

import (
	"fmt"
	"time"

	"github.com/lem-engine/lem/compute"
)

// decodeKernels are the handles of kernels/decode.cu.
type decodeKernels struct {
	fgemv, fgemvNorm [3]uintptr        // by weight dtype: f32, f16, bf16
	fqgemv           [numQT][2]uintptr // by quantized kernel type (fqTypes): plain, norm
	ropePrep         uintptr
	attend           [5]uintptr // (elements per lane, query heads per kv head): (2,4) (4,4) (8,4) (2,8) (4,8)
	argmax, topk     uintptr
	argmaxSplit      uintptr
	feed, feedRows   uintptr
}

func (k *decodeKernels) add(t map[string]*uintptr) {
	for i, dn := range []string{"f32", "f16", "bf16"} {
		t["fgemv_"+dn] = &k.fgemv[i]
		t["fgemv_norm_"+dn] = &k.fgemvNorm[i]
	}
	for _, qt := range fqTypes {
		t["fqgemv_"+qtNames[qt]] = &k.fqgemv[qt][0]
		t["fqgemv_norm_"+qtNames[qt]] = &k.fqgemv[qt][1]
	}
	t["rope_prep"] = &k.ropePrep
	for i, n := range []string{"2_4", "4_4", "8_4", "2_8", "4_8"} {
		t["attend_dec"+n] = &k.attend[i]
	}
	t["argmax_rows"] = &k.argmax
	t["argmax_split"] = &k.argmaxSplit
	t["topk_rows"] = &k.topk
	t["feed_token"] = &k.feed
	t["feed_rows"] = &k.feedRows
}

var _ compute.TokenPicker = (*Backend)(nil)

// TopK implements compute.TokenPicker.
func (b *Backend) TopK(dst, x *compute.Tensor, k int) {
	rows, n := x.Rows(), x.Cols()
	if k < 1 || k > compute.MaxTopK || k > n || dst.Len() < rows*2*k || x.DType != compute.F32 {
		panic(fmt.Sprintf("cuda: TopK %d of %v into %v", k, x.Shape, dst.Shape))
	}
	if rows == 0 {
		return
	}
	if k == 1 && n >= argmaxSplitMin && !b.argmaxOneBlock {
		// A long row (a vocabulary) is split across blocks so that the
		// pick is not one SM's sequence of loads.
		nb := min(argmaxSplits, (n+1023)/1024)
		part := b.scratch(&b.pickPart, rows*nb*2*4)
		count := b.counters(&b.pickCount, rows)
		o := b.record(op{fn: b.k.dec.argmaxSplit, name: "argmax_split", grid: [3]uint32{uint32(nb), uint32(rows), 1}, block: [3]uint32{256, 1, 1}, pdl: b.pdl})
		o.ptr(dptr(dst)).ptr(dptr(x)).i(n).ptr(part).ptr(count)
		return
	}
	if k == 1 {
		o := b.launch(b.k.dec.argmax, "argmax_rows", rows, 1024).ptr(dptr(dst)).ptr(dptr(x)).i(n)
		o.pdl = b.pdl
		return
	}
	o := b.launch(b.k.dec.topk, "topk_rows", rows, 1024).ptr(dptr(dst)).ptr(dptr(x)).i(n).i(k)
	o.pdl = b.pdl
}

// argmaxSplitMin is the row length from which TopK(…, 1) splits a row
// across up to argmaxSplits blocks (argmax_split).
const argmaxSplitMin, argmaxSplits = 8192, 128

var (
	_ compute.KernelCounter  = (*Graph)(nil)
	_ compute.BandwidthMeter = (*Backend)(nil)
)

// Kernels implements compute.KernelCounter: the number of kernel launches
// the graph replays.
func (g *Graph) Kernels() int { return g.kernels }

// MemoryBandwidth implements compute.BandwidthMeter with CopyBandwidth.
func (b *Backend) MemoryBandwidth(size int64) (float64, error) { return b.CopyBandwidth(size) }

// BandwidthMethod implements compute.BandwidthMeter.
func (b *Backend) BandwidthMethod() string { return "device copy" }

// CopyBandwidth measures the device's memory bandwidth with device-to-device
// copies of size bytes (bytes read plus bytes written per second, the best
// of a few rounds), in bytes per second. It allocates two buffers of size
// bytes for the measurement and frees them afterwards.
func (b *Backend) CopyBandwidth(size int64) (float64, error) {
	if size <= 0 {
		return 0, fmt.Errorf("cuda: copy bandwidth over %d bytes", size)
	}
	var src, dst uintptr
	err := b.do(func(w *owner) error {
		var err error
		if src, err = w.alloc(size); err != nil {
			return err
		}
		if dst, err = w.alloc(size); err != nil {
			call(w.d.cuMemFree, src)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: copy bandwidth: %w", err)
	}
	defer b.do(func(w *owner) error {
		call(w.d.cuMemFree, src)
		call(w.d.cuMemFree, dst)
		return nil
	})
	cp := func(reps int) {
		for range reps {
			b.enqueue(func(w *owner) error {
				return w.check("cuMemcpyDtoDAsync", call(w.d.cuMemcpyDtoDAsync, dst, src, uintptr(size), w.stream))
			})
		}
	}
	cp(2)
	if err := b.Synchronize(); err != nil {
		return 0, err
	}
	best := 0.0
	for range 3 {
		const reps = 8
		t0 := time.Now()
		cp(reps)
		if err := b.Synchronize(); err != nil {
			return 0, err
		}
		best = max(best, float64(2*size*reps)/time.Since(t0).Seconds())
	}
	return best, nil
}
