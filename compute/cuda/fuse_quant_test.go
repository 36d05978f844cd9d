package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
)

// fqDTypes are the weight types with fused products.
var fqDTypes = []compute.DType{compute.Q8_0, compute.Q4_0, compute.Q5_0, compute.Q4_K, compute.Q5_K, compute.Q6_K}

// readGPU reads a GPU tensor.
func readGPU(t *testing.T, g *Backend, x *compute.Tensor) []float32 {
	t.Helper()
	v := make([]float32, x.Len())
	g.Read(v, x)
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
	return v
}

// sameRows checks |got - want| ≤ tol·(1 + |want|) and returns the largest
// relative difference.
func sameRows(t *testing.T, what string, got, want []float32, tol float64) float64 {
	t.Helper()
	worst, at := relDiff(got, want)
	if worst > tol || math.IsNaN(worst) {
		t.Errorf("%s: relative difference %.3g at %d (got %g, want %g) > %g", what, worst, at, got[at], want[at], tol)
	}
	return worst
}

// TestFusedQuantProducts runs one-row products of quantized weights as
// decode issues them (a norm, then up to three products of its output, a
// GLU of two, addends) with fusion, captured, and without, and checks that
// the fused form is one launch, that it matches the separate kernels, and
// that it is within the quantization bound of TestQuantMatMul of a float64
// product of the dequantized weights with the normalised input.
func TestFusedQuantProducts(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(5, 6))
	savedFuse, savedBlocks := g.fuse, g.fgemvBlocks
	defer func() { g.fuse, g.fgemvBlocks = savedFuse, savedBlocks }()
	type tc struct {
		ms       []int
		k        int
		norm     bool
		glu, add bool
	}
	cases := []tc{
		{[]int{33, 7, 129}, 256, true, false, true}, // q, k, v with a residual add and a bias
		{[]int{65, 65}, 512, true, true, false},     // gate, up, GLU
		{[]int{257}, 2304, false, false, true},      // down with the residual
		{[]int{1}, 768, false, false, false},        // fewer rows than warps
		{[]int{3001, 5}, 256, true, false, false},   // rows stride over the grid
		{[]int{37}, 8192, true, false, true},        // rows long enough for one per warp
	}
	for _, dt := range fqDTypes {
		for _, c := range cases {
			if c.k%dt.BlockSize() != 0 {
				continue
			}
			for _, blocks := range []int{savedBlocks, 0, 1, 3} {
				name := fmt.Sprintf("%s/m%v/k%d/norm=%v/glu=%v/add=%v/blocks%d", dt, c.ms, c.k, c.norm, c.glu, c.add, blocks)
				t.Run(name, func(t *testing.T) {
					g.fgemvBlocks = blocks
					fusedQuantCase(t, g, r, dt, c.ms, c.k, c.norm, c.glu, c.add)
				})
			}
		}
	}
}

func fusedQuantCase(t *testing.T, g *Backend, r *rand.Rand, dt compute.DType, ms []int, k int, norm, glu, add bool) {
	var ws []*compute.Tensor
	var wf [][]float32
	for _, m := range ms {
		data := quantBlocks(t, r, dt, m, k)
		w, err := g.Weight(dt, []int{m, k}, data)
		if err != nil {
			t.Fatal(err)
		}
		defer freeWeight(g, w)
		ws = append(ws, w)
		wf = append(wf, dequantRows(t, dt, m, k, data))
	}
	up := func(v []float32, shape ...int) *compute.Tensor {
		x := g.Alloc(compute.F32, shape...)
		g.Upload(x, v)
		return x
	}
	xv := randVals(r, k, 2)
	nw, err := g.Weight(compute.BF16, []int{k}, encode(compute.BF16, randVals(r, k, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer freeWeight(g, nw)
	resv := randVals(r, ms[0], 1)
	var biasv []float32
	if len(ms) > 1 {
		biasv = randVals(r, ms[1], 1)
	}
	type outs struct {
		x, h, res, bias, glu *compute.Tensor
		d                    []*compute.Tensor
	}
	mk := func() *outs {
		o := &outs{x: up(xv, 1, k), h: g.Alloc(compute.F32, 1, k), res: up(resv, 1, ms[0])}
		if biasv != nil {
			o.bias = up(biasv, 1, ms[1])
		}
		for _, m := range ms {
			o.d = append(o.d, g.Alloc(compute.F32, 1, m))
		}
		o.glu = g.Alloc(compute.F32, 1, ms[0])
		return o
	}
	run := func(o *outs) {
		in := o.x
		if norm {
			g.RMSNorm(o.h, o.x, nw, 1e-5, 0)
			in = o.h
		}
		for j, w := range ws {
			g.MatMul(o.d[j], in, w)
		}
		if glu {
			g.GLU(o.glu, o.d[0], o.d[1], compute.SiLU)
		}
		if add {
			g.Add(o.res, o.res, o.d[0]) // the residual stream: the sum goes to the addend
			if o.bias != nil {
				g.Add(o.d[1], o.d[1], o.bias) // a bias: the sum goes to the product
			}
		}
	}
	plain, fused := mk(), mk()
	g.fuse = false
	run(plain)
	g.fuse = true
	graph, err := g.Capture(func() { run(fused) })
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	if n := graph.(*Graph).Kernels(); n != 1 {
		t.Errorf("fused products: %d kernels, want 1", n)
	}
	graph.Launch()
	tol := 1e-6
	var in []float32
	if norm {
		in = readGPU(t, g, plain.h)
		sameRows(t, "norm", readGPU(t, g, fused.h), in, 0)
	} else {
		in = xv
	}
	prods := make([][]float32, len(ms))
	for j := range ms {
		prods[j] = readGPU(t, g, plain.d[j])
		got := readGPU(t, g, fused.d[j])
		if add && j == 1 {
			// The bias is in both; the bound below is on the product.
			for i := range got {
				got[i] -= biasv[i]
				prods[j][i] -= biasv[i]
			}
		}
		sameRows(t, fmt.Sprintf("product %d", j), got, prods[j], tol)
		// Against the float64 product of the dequantized weight.
		for row := range ms[j] {
			wr := wf[j][row*k : (row+1)*k]
			var want, bound, mag float64
			for e := range k {
				want += float64(wr[e]) * float64(in[e])
				mag += math.Abs(float64(wr[e]) * float64(in[e]))
			}
			for b0 := 0; b0 < k; b0 += 32 {
				bound += blockBound(wr[b0:b0+32], in[b0:b0+32], amax(in[b0:b0+32]))
			}
			if d := math.Abs(float64(got[row]) - want); !(d <= bound+1e-5*mag+1e-6) {
				t.Fatalf("product %d row %d = %g, want %g ± %.3g", j, row, got[row], want, bound+1e-5*mag+1e-6)
			}
		}
	}
	if glu {
		sameRows(t, "glu", readGPU(t, g, fused.glu), readGPU(t, g, plain.glu), tol)
	}
	if add {
		sameRows(t, "residual", readGPU(t, g, fused.res), readGPU(t, g, plain.res), tol)
	}
	for _, o := range []*outs{plain, fused} {
		for _, x := range append([]*compute.Tensor{o.x, o.h, o.res, o.bias, o.glu}, o.d...) {
			if x != nil {
				g.Free(x)
			}
		}
	}
}

// TestFusedQuantDecode runs the operations of a llama-style block with
// quantized matrices on one row, step after step, fused (from a captured
// graph after the first steps) and not, and compares every tensor they
// leave; the captured step must have the launches of the bf16 one.
func TestFusedQuantDecode(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(7, 8))
	savedFuse, savedBlocks := g.fuse, g.fgemvBlocks
	defer func() { g.fuse, g.fgemvBlocks = savedFuse, savedBlocks }()
	const hid, ff, ctx, heads, kvh, hd = 256, 768, 40, 4, 2, 64
	for _, dt := range fqDTypes {
		blockSet := []int{savedBlocks}
		if dt == compute.Q4_0 {
			blockSet = append(blockSet, 0, 1)
		}
		for _, blocks := range blockSet {
			t.Run(fmt.Sprintf("%s/blocks%d", dt, blocks), func(t *testing.T) {
				g.fgemvBlocks = blocks
				wt := func(m, k int) *compute.Tensor {
					w, err := g.Weight(dt, []int{m, k}, quantBlocks(t, r, dt, m, k))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { freeWeight(g, w) })
					return w
				}
				vec := func(n int) *compute.Tensor {
					w, err := g.Weight(compute.BF16, []int{n}, encode(compute.BF16, randVals(r, n, 1)))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { freeWeight(g, w) })
					return w
				}
				inNorm, ffNorm := vec(hid), vec(hid)
				wq, wk, wv, wo := wt(heads*hd, hid), wt(kvh*hd, hid), wt(kvh*hd, hid), wt(hid, heads*hd)
				wg, wu, wd := wt(ff, hid), wt(ff, hid), wt(hid, ff)
				inv := make([]float32, hd/2)
				for j := range inv {
					inv[j] = float32(math.Pow(10000, -2*float64(j)/float64(hd)))
				}
				rp := &compute.Rope{Dims: hd, InvFreq: inv, Scale: 1}
				a := &compute.Attention{Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
				xv := randVals(r, hid, 1)
				type state struct {
					x, hh, q, k, v, att, o, gg, u, pos *compute.Tensor
					cache                              *compute.KVCache
				}
				mk := func() *state {
					s := &state{x: g.Alloc(compute.F32, 1, hid), hh: g.Alloc(compute.F32, 1, hid),
						q: g.Alloc(compute.F32, 1, heads*hd), k: g.Alloc(compute.F32, 1, kvh*hd), v: g.Alloc(compute.F32, 1, kvh*hd),
						att: g.Alloc(compute.F32, 1, heads*hd), o: g.Alloc(compute.F32, 1, hid),
						gg: g.Alloc(compute.F32, 1, ff), u: g.Alloc(compute.F32, 1, ff), pos: g.Alloc(compute.I32, 1),
						cache: g.NewKVCache(ctx, kvh*hd, false)}
					g.Upload(s.x, xv)
					return s
				}
				step := func(s *state) {
					g.RMSNorm(s.hh, s.x, inNorm, 1e-5, 0)
					g.MatMul(s.q, s.hh, wq)
					g.MatMul(s.k, s.hh, wk)
					g.MatMul(s.v, s.hh, wv)
					g.RoPE(s.q, s.pos, heads, rp)
					g.RoPE(s.k, s.pos, kvh, rp)
					g.Attend(s.att, s.q, s.k, s.v, s.cache, s.pos, a)
					g.MatMul(s.o, s.att, wo)
					g.Add(s.x, s.x, s.o)
					g.RMSNorm(s.hh, s.x, ffNorm, 1e-5, 0)
					g.MatMul(s.gg, s.hh, wg)
					g.MatMul(s.u, s.hh, wu)
					g.GLU(s.gg, s.gg, s.u, compute.SiLU)
					g.MatMul(s.o, s.gg, wd)
					g.Add(s.x, s.x, s.o)
				}
				plain, fused := mk(), mk()
				var graph compute.Graph
				for p := range 8 {
					// The residual stream starts each step the same in both: the
					// attention sums run in another order when fused, which may
					// move an activation code by one step in what follows.
					g.Upload(fused.x, readGPU(t, g, plain.x))
					g.UploadInts(plain.pos, []int32{int32(p)})
					g.UploadInts(fused.pos, []int32{int32(p)})
					g.fuse = false
					step(plain)
					g.fuse = true
					switch {
					case p < 4:
						step(fused)
					case graph == nil:
						var err error
						graph, err = g.Capture(func() { step(fused) })
						if err != nil {
							t.Fatal(err)
						}
						defer graph.Close()
						if n := graph.(*Graph).Kernels(); n != 5 {
							t.Errorf("captured step has %d kernels, want 5", n)
						}
						graph.Launch()
					default:
						graph.Launch()
					}
					// q and k are rotated by the attention kernel when fused, by
					// the rope kernel when not: an ulp apart.
					for _, c := range []struct {
						name string
						f, p *compute.Tensor
						tol  float64
					}{{"h", fused.hh, plain.hh, 1e-6}, {"q", fused.q, plain.q, 1e-5}, {"k", fused.k, plain.k, 1e-5},
						{"v", fused.v, plain.v, 1e-6}, {"attention", fused.att, plain.att, 1e-5}, {"o", fused.o, plain.o, 2e-3},
						{"g", fused.gg, plain.gg, 2e-3}, {"u", fused.u, plain.u, 2e-3}, {"x", fused.x, plain.x, 2e-3}} {
						sameRows(t, fmt.Sprintf("position %d: %s", p, c.name), readGPU(t, g, c.f), readGPU(t, g, c.p), c.tol)
					}
				}
			})
		}
	}
}

// quantLlama1B loads a llama-3.2-1b-shaped model with random quantized
// weights as `lem quant --gguf` writes them: matrices in mat, the tied
// embedding and output projection in Q6_K (Q8_0 for a Q8_0 file). It
// returns the bytes of weights a decode step reads.
func quantLlama1B(tb testing.TB, g *Backend, mat compute.DType) (model.Model, int64) {
	emb := compute.Q6_K
	if mat == compute.Q8_0 {
		emb = compute.Q8_0
	}
	m, _, bytes := loadQuantLlama1B(tb, g, mat, emb)
	return m, bytes
}

// llama1BMats are the shapes ([out, in]) of a llama-3.2-1b layer's
// matrices in the order of llama1BMatNames.
func llama1BMats(cfg *model.Config) [][2]int {
	h, f := cfg.HiddenSize, cfg.IntermediateSize
	q, kv := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	return [][2]int{{q, h}, {kv, h}, {kv, h}, {h, q}, {f, h}, {f, h}, {h, f}}
}

var llama1BMatNames = []string{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
	"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}

// loadQuantLlama1B loads a llama-3.2-1b-shaped model with random blocks:
// matrices in mat, the tied embedding and output projection in emb. It
// returns the source (whose random blocks the model's weights are) and the
// bytes of weights a decode step reads.
func loadQuantLlama1B(tb testing.TB, g *Backend, mat, emb compute.DType) (model.Model, *quantSource, int64) {
	cfg, err := model.ParseConfig([]byte(llama1BConfig))
	if err != nil {
		tb.Fatal(err)
	}
	h, f, v := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	layerMats := llama1BMats(cfg)
	shapes := map[string][]int{"model.embed_tokens.weight": {v, h}, "model.norm.weight": {h}}
	bytes := int64(v * mustRowBytes(emb, h))
	for i := range cfg.NumHiddenLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		shapes[p+"input_layernorm.weight"] = []int{h}
		shapes[p+"post_attention_layernorm.weight"] = []int{h}
		for j, n := range llama1BMatNames {
			shapes[p+n] = layerMats[j][:]
			bytes += int64(layerMats[j][0] * mustRowBytes(mat, layerMats[j][1]))
		}
	}
	ones := make([]byte, 2*f)
	for i := 0; i < len(ones); i += 2 {
		binary.LittleEndian.PutUint16(ones[i:], half.F32ToBF16(1))
	}
	src := &quantSource{shapes: shapes, mat: mat, emb: emb, matData: randomBlocks(mat, f, h), embData: randomBlocks(emb, v, h), ones: ones}
	m, err := model.Load(cfg, src, g)
	if err != nil {
		tb.Fatal(err)
	}
	return m, src, bytes
}

// BenchmarkFusedQuantDecode decodes llama-3.2-1b-shaped models with
// quantized weights (quantLlama1B) at context ~64, unfused and fused, and
// reports the replay time of the captured step with its weight bandwidth
// against the copy bandwidth, its kernels, and where the device time of a
// step goes (each launch timed apart).
func BenchmarkFusedQuantDecode(b *testing.B) {
	g := openGPU(b)
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	saved, savedBlocks := g.fuse, g.fgemvBlocks
	defer func() { g.fuse, g.fgemvBlocks, fqAnyOneRow = saved, savedBlocks, false }()
	type setting struct {
		name      string
		fuse, one bool
		blocks    int
	}
	settings := []setting{
		{"plain", false, false, savedBlocks},
		{"fused", true, false, savedBlocks},
		{"fused/any-one-row", true, true, savedBlocks},
		{"fused/grid-all", true, false, 0},
	}
	for _, mat := range []compute.DType{compute.Q4_0, compute.Q8_0, compute.Q4_K} {
		m, weightBytes := quantLlama1B(b, g, mat)
		for _, set := range settings {
			name := mat.String() + "/" + set.name
			b.Run(name, func(b *testing.B) {
				g.fuse, fqAnyOneRow, g.fgemvBlocks = set.fuse, set.one, set.blocks
				profileDecodeStep(b, g, m, name, weightBytes, bw)
			})
		}
	}
}
