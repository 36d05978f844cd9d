package cuda

import (
	"fmt"
	"os"

	"github.com/lem-engine/lem/compute"
)

// Prefill attention (chunks of at least flashMinRows queries, head dims 64,
// 128 and 256) runs on the tensor cores in flash_attend
// (kernels/mma_flash.cu) with bf16 operands and f32 softmax; decode steps
// and other head dims use the exact f32 kernel attend. LEM_CUDA_ATTENTION
// picks: auto (the default), exact (always the f32 kernel) or flash (the
// tensor cores whenever the head dim allows).

// flashMinRows is the chunk length from which auto mode uses flash_attend.
const flashMinRows = 32

// attnMode selects the attention kernel.
type attnMode int

const (
	attnAuto attnMode = iota
	attnExact
	attnFlash
)

func parseAttnMode(s string) (attnMode, error) {
	switch s {
	case "", "auto":
		return attnAuto, nil
	case "exact":
		return attnExact, nil
	case "flash":
		return attnFlash, nil
	}
	return 0, fmt.Errorf("cuda: LEM_CUDA_ATTENTION=%q: want auto, exact or flash", s)
}

// flashConfig is one instantiation of flash_attend (see the end of
// kernels/mma_flash.cu): its head dim, queries per block (16·4 per query
// tile per warp) and keys per tile.
type flashConfig struct {
	name        string
	hd, bq, bkv int
}

// flashConfigs are the kernels used, one per head dim: two query tiles per
// warp where the registers allow it. flashVariants are alternatives kept
// for BenchmarkAttendPrefill.
var (
	flashConfigs = []flashConfig{
		{"flash_attend64", 64, 128, 64},
		{"flash_attend128", 128, 128, 32},
		{"flash_attend256", 256, 64, 64},
	}
	flashVariants = []flashConfig{
		{"flash_attend128_m1k64", 128, 64, 64},
		{"flash_attend128_m1k32", 128, 64, 32},
	}
)

// shared is the dynamic shared memory of the kernel: the query tile and
// two stages of key and value tiles, in bf16.
func (c flashConfig) shared() int { return (c.bq + 4*c.bkv) * c.hd * 2 }

// flashKernels are the flash-attention kernels.
type flashKernels struct {
	kvHalf  uintptr
	attend  [3]uintptr // flashConfigs
	variant [2]uintptr // flashVariants
}

func (k *flashKernels) add(t map[string]*uintptr) {
	t["kv_half"] = &k.kvHalf
	for i, c := range flashConfigs {
		t[c.name] = &k.attend[i]
	}
	for i, c := range flashVariants {
		t[c.name] = &k.variant[i]
	}
}

// openFlash reads the mode and lets the kernels use their shared memory
// (owner thread).
func (b *Backend) openFlash() error {
	mode, err := parseAttnMode(os.Getenv("LEM_CUDA_ATTENTION"))
	if err != nil {
		return err
	}
	b.flash.mode = mode
	return b.do(func(w *owner) error {
		set := func(fn uintptr, c flashConfig) error {
			r := call(w.d.cuFuncSetAttribute, fn, funcAttrMaxDynamicShared, uintptr(c.shared()))
			return w.check(fmt.Sprintf("cuFuncSetAttribute(%s, %d bytes)", c.name, c.shared()), r)
		}
		for i, c := range flashConfigs {
			if err := set(b.k.flash.attend[i], c); err != nil {
				return err
			}
		}
		for i, c := range flashVariants {
			if err := set(b.k.flash.variant[i], c); err != nil {
				return err
			}
		}
		return nil
	})
}

// flashState is the backend's prefill attention configuration.
type flashState struct {
	mode    attnMode
	variant int     // 1 + index into flashVariants to use one (benchmarks), else 0
	kv      *buffer // keys and values converted to bf16
}

// flashKernel returns the flash_attend configuration and kernel for head
// dim hd (a benchmark's variant where one is chosen), or false where
// flash_attend has none.
func (b *Backend) flashKernel(hd int) (flashConfig, uintptr, bool) {
	idx := -1
	for i, c := range flashConfigs {
		if c.hd == hd {
			idx = i
		}
	}
	if idx < 0 {
		return flashConfig{}, 0, false
	}
	cfg, fn := flashConfigs[idx], b.k.flash.attend[idx]
	if v := b.flash.variant - 1; v >= 0 && flashVariants[v].hd == hd {
		cfg, fn = flashVariants[v], b.k.flash.variant[v]
	}
	return cfg, fn, true
}

// attendFlash runs Attend with flash_attend when the call suits it and
// reports whether it did (the keys and values are then stored too).
func (b *Backend) attendFlash(dst, q, k, v *compute.Tensor, cache *compute.KVCache, pos *compute.Tensor, a *compute.Attention) bool {
	n := q.Rows()
	cfg, fn, ok := b.flashKernel(a.HeadDim)
	if !ok {
		return false
	}
	switch {
	case b.flash.mode == attnExact,
		b.flash.mode == attnAuto && n < flashMinRows,
		a.KVHeads <= 0 || a.Heads%a.KVHeads != 0,
		cache.Ring && a.Window <= 0, // a ring without a window: the exact kernel's semantics
		dptr(q)%16 != 0 || dptr(dst)%8 != 0:
		return false
	}
	kc := a.KVHeads * a.HeadDim
	// Rows of keys a chunk can see: the cached ones (at most the window
	// less one, at most the capacity) and its own.
	seen := cache.Capacity
	if a.Window > 0 {
		seen = min(seen, a.Window-1)
	}
	rows := seen + n
	half := rows * kc * 2
	kh := b.scratch(&b.flash.kv, 2*half)
	vh := kh + uintptr(half)
	ring := 0
	if cache.Ring {
		ring = 1
	}
	b.launch(b.k.flash.kvHalf, "kv_half", rows, threads(kc, 256)).
		ptr(kh).ptr(vh).ptr(dptr(k)).ptr(dptr(v)).ptr(dptr(cache.K)).ptr(dptr(cache.V)).ptr(dptr(pos)).
		i(n).i(kc).i(cache.Capacity).i(ring).i(a.Window)
	sdt := 0
	if a.Sinks != nil {
		sdt = int(a.Sinks.DType)
	}
	o := b.record(op{fn: fn, name: "flash_attend",
		grid: [3]uint32{uint32((n + cfg.bq - 1) / cfg.bq), uint32(a.Heads), 1}, block: [3]uint32{128, 1, 1},
		shared: uint32(cfg.shared())})
	o.ptr(dptr(dst)).ptr(dptr(q)).ptr(kh).ptr(vh).ptr(dptr(pos)).i(n).i(rows).i(a.Heads).i(a.KVHeads).
		f(a.Scale).f(a.SoftCap).i(a.Window).ptr(dptr(a.Sinks)).i(sdt)
	b.launch(b.k.kvstore, "kvstore", n, threads(kc, 256)).
		ptr(dptr(cache.K)).ptr(dptr(cache.V)).ptr(dptr(k)).ptr(dptr(v)).ptr(dptr(pos)).
		i(n).i(kc).i(cache.Capacity).i(ring)
	return true
}

var _ compute.PrefillChunker = (*Backend)(nil)

// PrefillChunk implements compute.PrefillChunker: the prefill chunk the
// backend asks sessions for (engine.Session): the tensor cores need long chunks to be busy. On
// llama-3.1-8b's geometry a 4096-token prompt prefills at 18.6k tok/s in
// chunks of 256 and 29.7k tok/s in chunks of 1024 (BenchmarkPrefill8B);
// longer chunks gain little more and cost scratch memory.
func (b *Backend) PrefillChunk() int { return 1024 }
