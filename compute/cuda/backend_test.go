package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/half"
)

var (
	gpuOnce sync.Once
	gpu     *Backend
	gpuErr  error
)

// openGPU returns the shared test backend, skipping the test on machines
// without the NVIDIA driver or a GPU (CI included).
func openGPU(tb testing.TB) *Backend {
	tb.Helper()
	gpuOnce.Do(func() { gpu, gpuErr = Open(0) })
	if errors.Is(gpuErr, ErrNoDriver) || errors.Is(gpuErr, ErrNoDevice) {
		tb.Skipf("no CUDA device: %v", gpuErr)
	}
	if gpuErr != nil {
		tb.Fatal(gpuErr)
	}
	return gpu
}

// relDiff returns the largest |got - want| / (1 + |want|) and where it is
// (the first NaN, if any).
func relDiff(got, want []float32) (worst float64, at int) {
	for i := range want {
		d := math.Abs(float64(got[i])-float64(want[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				break
			}
		}
	}
	return worst, at
}

// pair holds the same tensor on the CPU and the GPU.
type pair struct{ c, g *compute.Tensor }

// encode stores values in a float dtype.
func encode(dt compute.DType, v []float32) []byte {
	out := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case compute.F32:
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
		case compute.F16:
			binary.LittleEndian.PutUint16(out[2*i:], half.F32ToF16(x))
		case compute.BF16:
			binary.LittleEndian.PutUint16(out[2*i:], half.F32ToBF16(x))
		}
	}
	return out
}

func randVals(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

type harness struct {
	t *testing.T
	c *cpu.Backend
	g *Backend
	r *rand.Rand
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, c: cpu.New(1), g: openGPU(t), r: rand.New(rand.NewPCG(1, 2))}
}

// act makes an F32 activation tensor with random values.
func (h *harness) act(scale float32, shape ...int) pair {
	p := pair{h.c.Alloc(compute.F32, shape...), h.g.Alloc(compute.F32, shape...)}
	v := randVals(h.r, p.c.Len(), scale)
	h.c.Upload(p.c, v)
	h.g.Upload(p.g, v)
	return p
}

// zeros makes a zeroed F32 tensor.
func (h *harness) zeros(shape ...int) pair {
	return pair{h.c.Alloc(compute.F32, shape...), h.g.Alloc(compute.F32, shape...)}
}

// ints makes an I32 tensor.
func (h *harness) ints(v []int32) pair {
	p := pair{h.c.Alloc(compute.I32, len(v)), h.g.Alloc(compute.I32, len(v))}
	h.c.UploadInts(p.c, v)
	h.g.UploadInts(p.g, v)
	return p
}

// vec makes a small vector as the model loader does: F32 values in an
// activation tensor, other dtypes as stored weights.
func (h *harness) vec(dt compute.DType, scale float32, n int) pair {
	if dt == compute.F32 {
		return h.act(scale, n)
	}
	return h.weight(dt, scale, n)
}

// weight makes a stored weight in dtype dt with random values.
func (h *harness) weight(dt compute.DType, scale float32, shape ...int) pair {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := encode(dt, randVals(h.r, n, scale))
	c, err := h.c.Weight(dt, shape, data)
	if err != nil {
		h.t.Fatal(err)
	}
	g, err := h.g.Weight(dt, shape, data)
	if err != nil {
		h.t.Fatal(err)
	}
	return pair{c, g}
}

// compare reads both tensors and checks |got - want| ≤ tol·(1 + |want|).
func (h *harness) compare(what string, p pair, tol float64) {
	h.t.Helper()
	want := make([]float32, p.c.Len())
	h.c.Read(want, p.c)
	got := make([]float32, p.g.Len())
	h.g.Read(got, p.g)
	if err := h.g.Err(); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	worst, at := relDiff(got, want)
	if worst > tol || math.IsNaN(worst) {
		h.t.Errorf("%s: relative error %.3g at %d (got %g, want %g) > %g", what, worst, at, got[at], want[at], tol)
	}
}

func TestEmbed(t *testing.T) {
	h := newHarness(t)
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		table := h.weight(dt, 1, 37, 50)
		ids := h.ints([]int32{3, 0, 36, 3, 17})
		dst := h.zeros(5, 50)
		h.c.Embed(dst.c, table.c, ids.c)
		h.g.Embed(dst.g, table.g, ids.g)
		h.compare("embed "+dt.String(), dst, 0)
	}
}

func TestMatMul(t *testing.T) {
	h := newHarness(t)
	shapes := []struct{ m, k int }{{33, 64}, {130, 72}, {7, 13}, {257, 200}, {64, 1024}}
	for _, dt := range []compute.DType{compute.F32, compute.F16, compute.BF16} {
		for _, s := range shapes {
			for _, n := range []int{1, 2, 3, 4, 5, 67, 130} {
				name := fmt.Sprintf("%s/n%d/m%d/k%d", dt, n, s.m, s.k)
				w := h.weight(dt, 0.5, s.m, s.k)
				x := h.act(1, n, s.k)
				dst := h.zeros(n, s.m)
				h.c.MatMul(dst.c, x.c, w.c)
				h.g.MatMul(dst.g, x.g, w.g)
				h.compare(name, dst, 2e-5*math.Sqrt(float64(s.k)))
			}
		}
	}
	// A view of the last row (the logits path of a prefill chunk).
	w := h.weight(compute.BF16, 0.5, 40, 64)
	x := h.act(1, 6, 64)
	dst := h.zeros(1, 40)
	h.c.MatMul(dst.c, h.c.View(x.c, 5, 6), w.c)
	h.g.MatMul(dst.g, h.g.View(x.g, 5, 6), w.g)
	h.compare("matmul of view", dst, 1e-4)
}

func TestElementwise(t *testing.T) {
	h := newHarness(t)
	a := h.act(2, 7, 45)
	full := h.act(2, 7, 45)
	row := h.act(2, 1, 45)
	for _, tc := range []struct {
		name string
		y    pair
	}{{"full", full}, {"row", row}} {
		dst := h.zeros(7, 45)
		h.c.Add(dst.c, a.c, tc.y.c)
		h.g.Add(dst.g, a.g, tc.y.g)
		h.compare("add "+tc.name, dst, 1e-6)
		h.c.Mul(dst.c, a.c, tc.y.c)
		h.g.Mul(dst.g, a.g, tc.y.g)
		h.compare("mul "+tc.name, dst, 1e-6)
	}
	bias := h.weight(compute.BF16, 1, 45)
	dst := h.zeros(7, 45)
	h.c.Add(dst.c, a.c, bias.c)
	h.g.Add(dst.g, a.g, bias.g)
	h.compare("add bf16 bias", dst, 1e-6)

	h.c.Scale(dst.c, a.c, 0.37)
	h.g.Scale(dst.g, a.g, 0.37)
	h.compare("scale", dst, 1e-6)
	big := h.act(60, 7, 45)
	h.c.SoftCap(dst.c, big.c, 30)
	h.g.SoftCap(dst.g, big.g, 30)
	h.compare("softcap", dst, 1e-6)
	for _, act := range []compute.Activation{compute.SiLU, compute.GELUTanh, compute.GELU, compute.ReLU, compute.Sigmoid} {
		x := h.act(6, 7, 45)
		h.c.Activate(dst.c, x.c, act)
		h.g.Activate(dst.g, x.g, act)
		h.compare(fmt.Sprintf("activate %d", act), dst, 1e-6)
		h.c.GLU(dst.c, x.c, a.c, act)
		h.g.GLU(dst.g, x.g, a.g, act)
		h.compare(fmt.Sprintf("glu %d", act), dst, 1e-6)
		h.c.GLU(x.c, x.c, a.c, act) // in place
		h.g.GLU(x.g, x.g, a.g, act)
		h.compare(fmt.Sprintf("glu in place %d", act), x, 1e-6)
	}
	wide := h.act(1, 5, 31)
	narrow := h.zeros(5, 12)
	h.c.Columns(narrow.c, wide.c, 9)
	h.g.Columns(narrow.g, wide.g, 9)
	h.compare("columns", narrow, 0)
}

func TestNorms(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name       string
		rows, cols int
		wlen       int // 0: no weight
		dt         compute.DType
		offset     float32
	}{
		{"row", 5, 300, 300, compute.F32, 0},
		{"row offset", 3, 1100, 1100, compute.F32, 1},
		{"per head", 4, 96, 32, compute.F32, 0},
		{"per head bf16", 4, 128, 64, compute.BF16, 1},
		{"no weight", 3, 77, 0, compute.F32, 0},
	} {
		x := h.act(3, tc.rows, tc.cols)
		var w pair
		if tc.wlen > 0 {
			w = h.vec(tc.dt, 1, tc.wlen)
		}
		dst := h.zeros(tc.rows, tc.cols)
		h.c.RMSNorm(dst.c, x.c, w.c, 1e-6, tc.offset)
		h.g.RMSNorm(dst.g, x.g, w.g, 1e-6, tc.offset)
		h.compare("rmsnorm "+tc.name, dst, 1e-5)
		h.c.RMSNorm(x.c, x.c, w.c, 1e-6, tc.offset) // in place
		h.g.RMSNorm(x.g, x.g, w.g, 1e-6, tc.offset)
		h.compare("rmsnorm in place "+tc.name, x, 1e-5)
	}
	x := h.act(3, 6, 301)
	w := h.vec(compute.F32, 1, 301)
	bias := h.vec(compute.F32, 1, 301)
	dst := h.zeros(6, 301)
	h.c.LayerNorm(dst.c, x.c, w.c, bias.c, 1e-5)
	h.g.LayerNorm(dst.g, x.g, w.g, bias.g, 1e-5)
	h.compare("layernorm", dst, 1e-5)
	h.c.LayerNorm(dst.c, x.c, w.c, nil, 1e-5)
	h.g.LayerNorm(dst.g, x.g, w.g, nil, 1e-5)
	h.compare("layernorm no bias", dst, 1e-5)
}

func TestRoPE(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name        string
		hd, dims    int
		interleaved bool
		scale       float32
	}{
		{"half", 64, 64, false, 1},
		{"interleaved", 32, 32, true, 1},
		{"partial", 80, 32, false, 1},
		{"scaled", 64, 64, false, 1.2},
	} {
		inv := make([]float32, tc.dims/2)
		for j := range inv {
			inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(tc.dims)))
		}
		r := &compute.Rope{Dims: tc.dims, InvFreq: inv, Scale: tc.scale, Interleaved: tc.interleaved}
		heads := 3
		x := h.act(1, 5, heads*tc.hd)
		pos := h.ints([]int32{7, 8, 9, 10, 11})
		h.c.RoPE(x.c, pos.c, heads, r)
		h.g.RoPE(x.g, pos.g, heads, r)
		h.compare("rope "+tc.name, x, 1e-5)
	}
}

func TestAttend(t *testing.T) {
	h := newHarness(t)
	defer h.g.pinAttention(attnExact)() // the f32 kernel; TestFlashAttend checks flash_attend
	for _, tc := range []struct {
		name               string
		heads, kvHeads, hd int
		window, capacity   int
		ring               bool
		softCap            float32
		sinks              bool
		chunks             []int
	}{
		{"mha", 4, 4, 32, 0, 40, false, 0, false, []int{5, 1, 1, 3, 1}},
		{"gqa", 6, 2, 64, 0, 40, false, 0, false, []int{7, 1, 2, 1}},
		{"window", 4, 2, 48, 4, 40, false, 0, false, []int{9, 1, 3, 1}},
		{"ring", 4, 2, 64, 4, 4, true, 0, false, []int{3, 1, 1, 1, 2, 6, 1, 1}},
		{"ring big chunk", 2, 1, 128, 5, 5, true, 0, false, []int{9, 1, 7, 1}},
		{"softcap sinks", 4, 2, 256, 0, 40, false, 20, true, []int{6, 1, 1}},
		{"hd 512", 2, 1, 512, 0, 20, false, 0, false, []int{4, 1}},
		{"split", 2, 1, 64, 0, 2000, false, 0, false, []int{300, 1, 1, 200, 1}},
		{"split sinks softcap", 4, 2, 128, 0, 1500, false, 30, true, []int{5, 1, 600, 1}},
		{"split ring", 2, 2, 64, 600, 600, true, 0, false, []int{700, 1, 1, 30, 1}},
	} {
		for _, chunk := range []int32{0, 1, 32} {
			t.Run(fmt.Sprintf("%s/chunk=%d", tc.name, chunk), func(t *testing.T) {
				h.t = t
				defer func(c int32) { h.g.attendChunk = c }(h.g.attendChunk)
				h.g.attendChunk = chunk // fewest keys per split of attend_dec (0: all splits)
				a := &compute.Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd,
					Scale: float32(1 / math.Sqrt(float64(tc.hd))), SoftCap: tc.softCap, Window: tc.window}
				var sinks pair
				if tc.sinks {
					sinks = h.vec(compute.F32, 2, tc.heads)
				}
				cc := h.c.NewKVCache(tc.capacity, tc.kvHeads*tc.hd, tc.ring)
				gc := h.g.NewKVCache(tc.capacity, tc.kvHeads*tc.hd, tc.ring)
				start := 0
				for step, n := range tc.chunks {
					q := h.act(2, n, tc.heads*tc.hd)
					k := h.act(2, n, tc.kvHeads*tc.hd)
					v := h.act(1, n, tc.kvHeads*tc.hd)
					ps := make([]int32, n)
					for i := range ps {
						ps[i] = int32(start + i)
					}
					pos := h.ints(ps)
					dst := h.zeros(n, tc.heads*tc.hd)
					a.Sinks = sinks.c
					h.c.Attend(dst.c, q.c, k.c, v.c, cc, pos.c, a)
					a.Sinks = sinks.g
					h.g.Attend(dst.g, q.g, k.g, v.g, gc, pos.g, a)
					h.compare(fmt.Sprintf("step %d (%d rows at %d)", step, n, start), dst, 2e-5)
					start += n
				}
				h.compare("cache K", pair{cc.K, gc.K}, 0)
				h.compare("cache V", pair{cc.V, gc.V}, 0)
			})
		}
	}
}

func TestPoolReuse(t *testing.T) {
	g := openGPU(t)
	a := g.Alloc(compute.F32, 1000)
	g.Upload(a, make([]float32, 1000))
	before := g.Allocated()
	g.Free(a)
	b := g.Alloc(compute.F32, 990) // same size class: no new memory
	if g.Allocated() != before {
		t.Errorf("allocated grew from %d to %d on reuse", before, g.Allocated())
	}
	got := make([]float32, 990)
	for i := range got {
		got[i] = 1
	}
	g.Read(got, b)
	for i, v := range got {
		if v != 0 {
			t.Fatalf("reused memory not zeroed at %d: %g", i, v)
		}
	}
	g.Free(b)
	for _, n := range []int64{1, 255, 256, 1025, 4096, 5000, 1 << 20, 3<<20 + 1} {
		c := sizeClass(n)
		if c < n || float64(c) > 1.25*float64(n)+256 {
			t.Errorf("sizeClass(%d) = %d", n, c)
		}
	}
}
