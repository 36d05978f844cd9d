package cpu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
)

func TestQpargsLayout(t *testing.T) {
	var a qpargs
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"w", unsafe.Offsetof(a.w), 0},
		{"x", unsafe.Offsetof(a.x), 8},
		{"nb", unsafe.Offsetof(a.nb), 16},
		{"groups", unsafe.Offsetof(a.groups), 24},
		{"dst", unsafe.Offsetof(a.dst), 32},
		{"ldd", unsafe.Offsetof(a.ldd), 40},
		{"xstride", unsafe.Offsetof(a.xstride), 48},
	} {
		if c.got != c.want {
			t.Errorf("qpargs.%s at offset %d, the assembly reads it at %d", c.name, c.got, c.want)
		}
	}
}

// withPack returns w with a packed copy.
func withPack(w Weights) Weights {
	w.pack = make([]byte, len(w.Data))
	packWeights(w.pack, w)
	return w
}

var packTypes = []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q5_0, compute.Q4_K, compute.Q6_K}

// TestPackRoundTrip checks that unpackRow recovers every stored row.
func TestPackRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, dt := range packTypes {
		for _, sh := range []struct{ m, k int }{{16, 32}, {17, 96}, {35, 256}, {48, 64}, {33, 512}} {
			if sh.k%dt.BlockSize() != 0 {
				continue
			}
			w, _ := randQuantWeights(t, rng, dt, sh.m, sh.k, 0, false)
			p := &packedWeight{dtype: dt, rows: sh.m, cols: sh.k, pack: withPack(w).pack, data: w.Data}
			if got := p.rowsBytes(0, sh.m); !bytes.Equal(got, w.Data) {
				t.Fatalf("%s %dx%d: rows differ after packing", dt, sh.m, sh.k)
			}
			want := make([]float32, sh.k)
			got := make([]float32, sh.k)
			for r := range sh.m {
				if err := quant.Dequantize(want, w.Row(r), dt); err != nil {
					t.Fatal(err)
				}
				p.dequantRow(got, r)
				if !slices.Equal(got, want) && !slices.EqualFunc(got, want, func(a, b float32) bool { return a == b || a != a && b != b }) {
					t.Fatalf("%s %dx%d: row %d decodes differently after packing", dt, sh.m, sh.k, r)
				}
			}
		}
	}
}

// packShapes cover one and many groups, every remainder of rows after the
// groups, odd block counts, and activation rows of every remainder modulo
// qpmaxR.
var packShapes = []struct{ n, m, k int }{
	{1, 16, 32}, {1, 17, 96}, {1, 31, 160}, {1, 64, 64}, {1, 100, 288}, {1, 1040, 96},
	{2, 16, 32}, {3, 33, 96}, {5, 47, 256}, {7, 18, 544}, {8, 32, 64}, {9, 48, 160},
	{13, 21, 128}, {16, 80, 96}, {23, 45, 1056}, {40, 64, 2304},
	{1, 16, 256}, {1, 50, 768}, {2, 33, 512}, {3, 17, 256}, {4, 47, 1280}, {7, 64, 256},
}

// TestQ5Mix checks the bit arrangement of packed Q5_0 blocks: the codes a
// kernel makes from the mixed bytes and q5Lookup are the stored block's,
// and q5Unmix gives the block back.
func TestQ5Mix(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for range 100 {
		var blk, mixed [22]byte
		for i := range blk {
			blk[i] = byte(rng.Uint32())
		}
		mixed = blk
		q5Mix(mixed[:])
		qh := binary.LittleEndian.Uint32(blk[2:])
		for k := range 16 {
			want := [2]byte{blk[6+k]&0xF | byte(qh>>k&1)<<4, blk[6+k]>>4 | byte(qh>>(16+k)&1)<<4}
			// The kernel's lookup: chunk j = k/4 of lane byte k%4.
			j, l := k/4, mixed[2+k%4]
			n := l & 0xF
			if j >= 2 {
				n = l >> 4
			}
			bits := q5Lookup[16*(j%2)+int(n)]
			c := mixed[6+k]
			got := [2]byte{c&0x0F | bits&0xF0, (c&0xF0 | bits&0x0F) >> 3}
			if got != want {
				t.Fatalf("element %d: codes %v, want %v", k, got, want)
			}
		}
		q5Unmix(mixed[:])
		if mixed != blk {
			t.Fatalf("q5Unmix(q5Mix(b)) != b")
		}
	}
}

// TestQ6Mix checks the bit arrangement of packed Q6_K blocks: the codes
// the kernels take from A, B and C are the stored block's (as the
// reference dequantization reads them), and q6Unmix gives the block back.
func TestQ6Mix(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for range 100 {
		var blk, mixed [210]byte
		for i := range blk {
			blk[i] = byte(rng.Uint32())
		}
		mixed = blk
		q6Mix(mixed[:])
		for h := range 2 {
			for l := range 32 {
				lo, hi, u := blk[64*h+l], blk[64*h+32+l], blk[128+32*h+l]
				want := [4]byte{lo&0xF | u&3<<4, hi&0xF | u>>2&3<<4, lo>>4 | u>>4&3<<4, hi>>4 | u>>6<<4}
				a, b, c := mixed[64*h+l], mixed[64*h+32+l], mixed[128+32*h+l]
				// The kernels' selects: bits 6-7 of a, 4-5 of b>>2, 2-3 of c>>4.
				q3x4 := (a&0xC0 | (b>>2)&0x3F&^0x0F | (c>>4)&0x0F) & 0xFC
				got := [4]byte{a & 0x3F, b & 0x3F, c & 0x3F, q3x4 >> 2}
				if got != want {
					t.Fatalf("half %d, element %d: codes %v, want %v", h, l, got, want)
				}
			}
		}
		q6Unmix(mixed[:])
		if mixed != blk {
			t.Fatalf("q6Unmix(q6Mix(b)) != b")
		}
	}
}

// TestPackedMatMul checks the packed products, assembly and pure Go, against
// float64 and against the unpacked products.
func TestPackedMatMul(t *testing.T) {
	noAMX(t) // TestAMXMatMul checks those products
	rng := rand.New(rand.NewPCG(33, 34))
	for _, threads := range testThreads() {
		pool := NewPool(threads)
		defer pool.Close()
		for _, dt := range packTypes {
			for _, sh := range packShapes {
				if sh.k%dt.BlockSize() != 0 {
					continue
				}
				for _, encode := range []bool{false, true} {
					w, wv := randQuantWeights(t, rng, dt, sh.m, sh.k, 3, encode)
					p := withPack(w)
					x := randVec(rng, sh.n*sh.k)
					for _, l := range levels() {
						t.Run(fmt.Sprintf("%s/%s/n=%d,m=%d,k=%d/threads=%d/enc=%v", l, dt, sh.n, sh.m, sh.k, threads, encode), func(t *testing.T) {
							dst := randVec(rng, sh.n*sh.m+3)
							guard := append([]float32(nil), dst[sh.n*sh.m:]...)
							atLevel(t, l, func() { MatMul(dst, x, sh.n, p, pool) })
							checkQuantMatMul(t, dst, x, wv, sh.n, sh.m, sh.k, dt)
							for i, g := range guard {
								if dst[sh.n*sh.m+i] != g {
									t.Errorf("MatMul wrote past n×m")
								}
							}
							want := make([]float32, sh.n*sh.m)
							atLevel(t, l, func() { MatMul(want, x, sh.n, w, pool) })
							for i := range want {
								var sa float64
								for q := range sh.k {
									sa += math.Abs(float64(x[i/sh.m*sh.k+q]) * wv[i%sh.m*sh.k+q])
								}
								if d := math.Abs(float64(dst[i] - want[i])); d > 2e-6*sa {
									t.Fatalf("dst[%d] = %g, unpacked %g (Σ|x·w| %g)", i, dst[i], want[i], sa)
								}
							}
						})
					}
				}
			}
		}
	}
}

func TestPackedMatMulAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	pool := NewPool(2)
	defer pool.Close()
	const m, k = 100, 512
	for _, dt := range packTypes {
		w, _ := randQuantWeights(t, rng, dt, m, k, 0, false)
		p := withPack(w)
		for _, n := range []int{1, 9} {
			x := randVec(rng, n*k)
			dst := make([]float32, n*m)
			MatMul(dst, x, n, p, pool) // grow the scratch buffers
			if a := testing.AllocsPerRun(50, func() { MatMul(dst, x, n, p, pool) }); a != 0 {
				t.Errorf("%s n=%d: %v allocations per MatMul, want 0", dt, n, a)
			}
		}
	}
}

// TestBackendPacksWeights loads weights through the backend, which packs
// them where this CPU has the kernels, and checks products and embedding
// rows against the stored blocks.
func TestBackendPacksWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	b := New(2)
	const m, k, n = 48, 512, 3
	for _, dt := range packTypes {
		w, wv := randQuantWeights(t, rng, dt, m, k, 0, false)
		stored := append([]byte(nil), w.Data...)
		wt, err := b.Weight(dt, []int{m, k}, w.Data)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := wt.Buf.(*packedWeight); ok != packable(dt, m, k) {
			t.Errorf("%s: packed %v, packable %v", dt, ok, packable(dt, m, k))
		}
		x := b.Alloc(compute.F32, n, k)
		xs := randVec(rng, n*k)
		b.Upload(x, xs)
		dst := b.Alloc(compute.F32, n, m)
		b.MatMul(dst, x, wt)
		checkQuantMatMul(t, dst.Buf.([]float32), xs, wv, n, m, k, dt)

		ids := b.Alloc(compute.I32, 3)
		b.UploadInts(ids, []int32{0, 17, m - 1})
		rows := b.Alloc(compute.F32, 3, k)
		b.Embed(rows, wt, ids)
		want := make([]float32, k)
		rb, _ := dt.RowBytes(k)
		for i, r := range []int{0, 17, m - 1} {
			if err := quant.Dequantize(want, stored[r*rb:(r+1)*rb], dt); err != nil {
				t.Fatal(err)
			}
			if got := rows.Buf.([]float32)[i*k : (i+1)*k]; !slices.Equal(got, want) {
				t.Errorf("%s: embedding row %d differs from the stored row", dt, r)
			}
		}
		v := b.View(wt, 5, 21)
		if got := v.Buf.([]byte); !bytes.Equal(got, stored[5*rb:21*rb]) {
			t.Errorf("%s: view of rows 5..21 differs from the stored rows", dt)
		}
	}
}

// TestPackedExtraKernels checks the one-row kernels that prefetch the
// weights (the defaults on some CPUs, see packPrefetch).
func TestPackedExtraKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(39, 40))
	pool := NewPool(2)
	defer pool.Close()
	for _, ks := range qpackExtra {
		dt := ks.dtype
		if qpackKernels[dt] == nil || ks.gfni && !hasGFNI {
			continue
		}
		const m, k = 80, 768
		w, wv := randQuantWeights(t, rng, dt, m, k, 0, false)
		p := withPack(w)
		x := randVec(rng, k)
		saved := *qpackKernels[dt]
		qpackKernels[dt].gemv = ks.gemv
		dst := make([]float32, m)
		atLevel(t, levelAVX512, func() { MatMul(dst, x, 1, p, pool) })
		*qpackKernels[dt] = saved
		checkQuantMatMul(t, dst, x, wv, 1, m, k, dt)
	}
}

// TestPackedKernelRows calls the many-row kernels of every packed type
// directly, for every count of rows up to qpmaxR, so that 8 decode rows
// read a group's weights once: each row's 16 sums must have the bits the
// one-row kernel gives that row alone.
func TestPackedKernelRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, ks := range qpackKernels {
		if ks == nil {
			continue
		}
		dt := ks.dtype
		if ks.maxR != qpmaxR {
			t.Errorf("%s: the many-row kernels take %d rows, want %d", dt, ks.maxR, qpmaxR)
		}
		const k = 768
		w, _ := randQuantWeights(t, rng, dt, packRows, k, 0, false)
		p := withPack(w)
		xf, xrb := packXf(dt), packXf(dt).rowBytes(k)
		xq := make([]byte, qpmaxR*xrb)
		for i := range qpmaxR {
			quantizeX(xq[i*xrb:(i+1)*xrb], randVec(rng, k), xf, packXoff(dt))
		}
		want := make([]float32, qpmaxR*packRows)
		for i := range qpmaxR {
			ks.gemv(&qpargs{w: &p.pack[0], x: &xq[i*xrb], nb: k / dt.BlockSize(), groups: 1, dst: &want[i*packRows]})
		}
		for R := 2; R <= qpmaxR; R++ {
			for name, set := range map[string][qpmaxR + 1]func(*qpargs){"prefetch " + ks.gemmPrefetch: ks.gemm, "cached": ks.gemmCached} {
				if set[R] == nil {
					t.Errorf("%s: no kernel of %d rows (%s)", dt, R, name)
					continue
				}
				got := make([]float32, R*packRows)
				set[R](&qpargs{w: &p.pack[0], x: &xq[0], nb: k / dt.BlockSize(), groups: 1, dst: &got[0], ldd: 4 * packRows, xstride: xrb})
				if !slices.Equal(got, want[:R*packRows]) {
					t.Errorf("%s, %d rows (%s): sums differ from the one-row kernel's", dt, R, name)
				}
			}
		}
	}
}

// TestPackedGemmPrefetchKernels checks the many-row kernels that prefetch
// the weights (qpackGemmExtra; the defaults on some CPUs, see
// packGemmPrefetch): every row's sums are bitwise those of the kernels
// without prefetch, for every count of rows per call, whether a product
// takes them for every block of rows or only for each group's first.
func TestPackedGemmPrefetchKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	pool := NewPool(2)
	defer pool.Close()
	plain := map[compute.DType][qpmaxR + 1]func(*qpargs){}
	for _, ks := range asmPackKernels {
		plain[ks.dtype] = ks.gemm
	}
	for _, gs := range qpackGemmExtra {
		dt := gs.dtype
		ks := qpackKernels[dt]
		if ks == nil {
			continue
		}
		const m, k = 83, 768 // 5 groups and 3 rows in their stored form
		w, wv := randQuantWeights(t, rng, dt, m, k, 0, false)
		p := withPack(w)
		for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 9, 16, 19} {
			x := randVec(rng, n*k)
			run := func(gemm, cached [qpmaxR + 1]func(*qpargs)) []float32 {
				saved := *ks
				defer func() { *ks = saved }()
				ks.gemm, ks.gemmCached = gemm, cached
				ks.gemm[1], ks.gemmCached[1] = ks.gemv, ks.gemv
				dst := make([]float32, n*m)
				atLevel(t, levelAVX512, func() { MatMul(dst, x, n, p, pool) })
				return dst
			}
			want := run(plain[dt], plain[dt])
			checkQuantMatMul(t, want, x, wv, n, m, k, dt)
			for _, c := range []struct {
				name         string
				gemm, cached [qpmaxR + 1]func(*qpargs)
			}{{"every block", gs.gemm, gs.gemm}, {"first block", gs.gemm, plain[dt]}} {
				if got := run(c.gemm, c.cached); !slices.Equal(got, want) {
					t.Errorf("%s prefetch %s n=%d, %s: sums differ from the kernels without prefetch", dt, gs.prefetch, n, c.name)
				}
			}
		}
	}
}

func TestPackPrefetch(t *testing.T) {
	q4, q8 := compute.Q4_0, compute.Q8_0
	intel := prefetchIntel[q4]
	for _, tc := range []struct {
		vendor, setting string
		dt              compute.DType
		want            string
	}{
		{"GenuineIntel", "", q4, intel},
		{"GenuineIntel", "", q8, prefetchIntel[q8]},
		{"", "", q4, "0"},
		{"SomeVendor", "", q4, "0"},
		{"GenuineIntel", "0", q4, "0"},
		{"AuthenticAMD", "8192", q4, "8192"},
		{"AuthenticAMD", "8192nta", q4, "8192nta"},
		{"AuthenticAMD", "1024+8192t2", q4, "1024+8192t2"},
		{"GenuineIntel", "-1", q4, intel},
		{"GenuineIntel", "far", q4, intel},
		{"GenuineIntel", "4096t3", q4, intel},
		{"GenuineIntel", "1+2+3", q4, intel},
		{"GenuineIntel", "+4096", q4, intel},
		{"GenuineIntel", "4096+", q4, intel},
		{"GenuineIntel", "q4_0=4096nta", q4, "4096nta"},
		{"GenuineIntel", "q6_k=0,Q4_0=0", q4, "0"},
		{"GenuineIntel", "q6_k=0", q4, intel},
		{"GenuineIntel", "q6_k=0,q4_0=near", q4, intel},
		{"AuthenticAMD", "q8_0=8192t2,q4_0=1024", q8, "8192t2"},
	} {
		if got := packPrefetch(tc.vendor, tc.setting, tc.dt); got != tc.want {
			t.Errorf("packPrefetch(%q, %q, %s) = %q, want %q", tc.vendor, tc.setting, tc.dt, got, tc.want)
		}
	}
	if v := vendor(); hasVNNI && v == "" {
		t.Error("no CPU vendor on a CPU with the packed kernels")
	} else if ks := qpackKernels[q4]; ks != nil {
		t.Logf("vendor %q: the one-row Q4_0 kernel is %s (prefetch %q)", v, packFuncName(ks.gemv), ks.prefetch)
	}
}

func TestPackGemmPrefetch(t *testing.T) {
	q4, q8, q6 := compute.Q4_0, compute.Q8_0, compute.Q6_K
	amd := gemmPrefetchAMD[q4]
	for _, tc := range []struct {
		vendor, setting string
		dt              compute.DType
		want            string
	}{
		{"AuthenticAMD", "", q4, amd},
		{"AuthenticAMD", "", q6, gemmPrefetchAMD[q6]},
		{"GenuineIntel", "", q8, or(gemmPrefetchIntel[q8], "0")},
		{"", "", q4, "0"},
		{"SomeVendor", "", q4, "0"},
		{"AuthenticAMD", "0", q4, "0"},
		{"AuthenticAMD", "8192", q4, "8192"},
		{"AuthenticAMD", "far", q4, amd},
		{"AuthenticAMD", "q4_0=0", q4, "0"},
		{"AuthenticAMD", "q4_0=0", q8, gemmPrefetchAMD[q8]},
		{"GenuineIntel", "q6_k=8192nta,q4_0=0", q6, "8192nta"},
	} {
		if got := packGemmPrefetch(tc.vendor, tc.setting, tc.dt); got != tc.want {
			t.Errorf("packGemmPrefetch(%q, %q, %s) = %q, want %q", tc.vendor, tc.setting, tc.dt, got, tc.want)
		}
	}
	// On an AMD CPU with the packed kernels, the many-row products of
	// every packed type prefetch (BenchmarkBatchedDecode: without, 8 decode
	// rows read the weights at a fraction of the bandwidth).
	if vendor() == "AuthenticAMD" && os.Getenv("LEM_CPU_GEMM_PREFETCH") == "" {
		for _, dt := range packTypes {
			if ks := qpackKernels[dt]; ks != nil && ks.gemmPrefetch != gemmPrefetchAMD[dt] {
				t.Errorf("%s: many-row kernels prefetch %q, want %q", dt, ks.gemmPrefetch, gemmPrefetchAMD[dt])
			}
		}
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestPackPrefetchChoices checks that every vendor's choice names a
// generated kernel of its type, so that none silently means no prefetch.
func TestPackPrefetchChoices(t *testing.T) {
	if len(qpackExtra) == 0 {
		t.Skip("no packed kernels in this build")
	}
	for vendor, choice := range map[string]map[compute.DType]string{"GenuineIntel": prefetchIntel, "AuthenticAMD": prefetchAMD} {
		for dt, pf := range choice {
			found := false
			for _, x := range qpackExtra {
				found = found || x.dtype == dt && x.prefetch == pf && !x.gfni
			}
			if !found {
				t.Errorf("%s %s: prefetch %q names no kernel", vendor, dt, pf)
			}
		}
	}
	for _, x := range qpackExtra {
		if !validPrefetch(x.prefetch) {
			t.Errorf("%s: prefetch %q is no setting", packFuncName(x.gemv), x.prefetch)
		}
	}
	for vendor, choice := range map[string]map[compute.DType]string{"GenuineIntel": gemmPrefetchIntel, "AuthenticAMD": gemmPrefetchAMD} {
		for dt, pf := range choice {
			found := false
			for _, x := range qpackGemmExtra {
				found = found || x.dtype == dt && x.prefetch == pf
			}
			if !found {
				t.Errorf("%s %s: many-row prefetch %q names no kernels", vendor, dt, pf)
			}
		}
	}
	for _, x := range qpackGemmExtra {
		if !validPrefetch(x.prefetch) || x.prefetch == "0" {
			t.Errorf("%s many-row kernels: prefetch %q is no setting", x.dtype, x.prefetch)
		}
		for R := 2; R <= x.maxR; R++ {
			if x.gemm[R] == nil {
				t.Errorf("%s many-row kernels, prefetch %q: none of %d rows", x.dtype, x.prefetch, R)
			}
		}
	}
}

func TestPackArena(t *testing.T) {
	var a packArena
	var got [][]byte
	for _, n := range []int{100, 64, 1 << 20, arenaBytes/4 + 1, 3, arenaBytes / 4, arenaBytes / 4} {
		b, c, err := a.alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b) != n || c == nil {
			t.Fatalf("alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(&b[0])); p%64 != 0 {
			t.Errorf("alloc(%d) at %#x: not 64-byte aligned", n, p)
		}
		for i := range b {
			b[i] = byte(len(got))
		}
		got = append(got, b)
	}
	for i, b := range got {
		for _, v := range b {
			if v != byte(i) {
				t.Fatalf("allocation %d overwritten", i)
			}
		}
	}
}
