package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
)

// mlxType returns an MLX affine dtype or fails the test.
func mlxType(tb testing.TB, bits, group int, scale compute.DType) compute.DType {
	tb.Helper()
	dt, err := compute.MLXAffine(bits, group, scale)
	if err != nil {
		tb.Fatal(err)
	}
	return dt
}

// quantBlocks returns rows×cols random values stored as dt: quantized by
// package quant where it can write dt, else (MLX) random codes with random
// scales and biases.
func quantBlocks(tb testing.TB, r *rand.Rand, dt compute.DType, rows, cols int) []byte {
	tb.Helper()
	rb, err := dt.RowBytes(cols)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]byte, rows*rb)
	if quant.CanQuantize(dt) {
		v := randVals(r, rows*cols, 1)
		// Vary the magnitude between rows and blocks, as real weights do.
		for i := range v {
			v[i] *= float32(1 + (i/32)%5)
		}
		if err := quant.Quantize(out, v, dt); err != nil {
			tb.Fatal(err)
		}
		return out
	}
	bits, _, scale, ok := dt.MLX()
	if !ok {
		tb.Fatalf("cannot make %s blocks", dt)
	}
	es := scale.Size()
	bb := dt.BlockBytes()
	for b := 0; b < len(out)/bb; b++ {
		blk := out[b*bb : (b+1)*bb]
		for i := 2 * es; i < bb; i++ {
			blk[i] = byte(r.Uint32())
		}
		s := (r.Float32() + 0.5) / float32(int(1)<<bits)
		z := -s * float32(int(1)<<(bits-1)) * (0.5 + r.Float32())
		for i, v := range []float32{s, z} {
			switch scale {
			case compute.BF16:
				binary.LittleEndian.PutUint16(blk[i*es:], half.F32ToBF16(v))
			case compute.F16:
				binary.LittleEndian.PutUint16(blk[i*es:], half.F32ToF16(v))
			default:
				binary.LittleEndian.PutUint32(blk[i*es:], math.Float32bits(v))
			}
		}
	}
	return out
}

// dequantRows decodes a weight with package quant.
func dequantRows(tb testing.TB, dt compute.DType, rows, cols int, data []byte) []float32 {
	tb.Helper()
	w := make([]float32, rows*cols)
	if err := quant.Dequantize(w, data, dt); err != nil {
		tb.Fatal(err)
	}
	return w
}

// quantTypes are the types the product and embedding tests cover: those
// with kernels, and some that are widened to bf16 at load.
func quantTypes(tb testing.TB) []compute.DType {
	return []compute.DType{
		compute.Q8_0, compute.Q4_0, compute.Q4_1, compute.Q5_0, compute.Q4_K, compute.Q5_K, compute.Q6_K,
		mlxType(tb, 4, 32, compute.BF16), mlxType(tb, 4, 64, compute.F16), mlxType(tb, 4, 128, compute.F32),
		mlxType(tb, 4, 64, compute.BF16), mlxType(tb, 8, 64, compute.BF16), mlxType(tb, 8, 32, compute.F32),
		// Widened to bf16 at load.
		compute.Q5_1, compute.Q3_K, mlxType(tb, 6, 64, compute.BF16),
	}
}

// TestQuantMatMul checks quantized products on the GPU, n = 1…qgemvBatch
// (quantized activations, dp4a) and longer (dequantized to f16, dense product), against
// a float64 product of the dequantized weights and against the CPU backend.
// The bound on each output is what the two approximations can cost: codes
// of activations rounded to multiples of max|x_block|/127 (at most half a
// step each, over the GPU's 32-element blocks or the CPU's 256-element
// ones) and weights rounded to bf16 (2⁻⁹ relative): Σᵢ |wᵢ|·(step/2 +
// |xᵢ|·2⁻⁸), plus 1e-5·Σᵢ|wᵢxᵢ| for float32 summation.
func TestQuantMatMul(t *testing.T) {
	h := newHarness(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, dt := range quantTypes(t) {
		bs := dt.BlockSize()
		kb := max(256, bs) // the CPU's activation blocks of the k-quants
		for _, s := range []struct{ m, k int }{{33, 256}, {7, 512}, {129, 1024}, {3, 2304}} {
			if s.k%bs != 0 {
				continue
			}
			data := quantBlocks(t, r, dt, s.m, s.k)
			w := dequantRows(t, dt, s.m, s.k, data)
			wc, err := h.c.Weight(dt, []int{s.m, s.k}, data)
			if err != nil {
				t.Fatal(err)
			}
			wg, err := h.g.Weight(dt, []int{s.m, s.k}, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				n              int
				oneRow, chunks bool
			}{{1, false, false}, {1, true, false}, {2, false, false}, {3, false, false}, {4, false, false},
				{5, false, false}, {8, false, false}, {9, false, false}, {17, false, false}, {32, false, false},
				{33, false, false}, {37, false, false}, {37, false, true}, {64, false, false}} {
				n := c.n
				h.g.quant.oneRow = c.oneRow
				h.g.quant.chunk = 0
				name := fmt.Sprintf("%s/n%d/m%d/k%d", dt, n, s.m, s.k)
				if c.oneRow {
					name += "/one-row-per-warp"
				}
				if c.chunks {
					// Chunks of 64 rows.
					h.g.quant.chunk = 64 * s.k
					name += "/chunked"
				}
				xv := randVals(h.r, n*s.k, 2)
				x := pair{h.c.Alloc(compute.F32, n, s.k), h.g.Alloc(compute.F32, n, s.k)}
				h.c.Upload(x.c, xv)
				h.g.Upload(x.g, xv)
				dst := h.zeros(n, s.m)
				h.c.MatMul(dst.c, x.c, wc)
				h.g.MatMul(dst.g, x.g, wg)
				got := make([]float32, n*s.m)
				h.g.Read(got, dst.g)
				cpuOut := make([]float32, n*s.m)
				h.c.Read(cpuOut, dst.c)
				if err := h.g.Err(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				worst := 0.0
				for i := range n {
					xr := xv[i*s.k : (i+1)*s.k]
					for j := range s.m {
						wr := w[j*s.k : (j+1)*s.k]
						var want, bound, bound256, mag float64
						for e := range s.k {
							want += float64(wr[e]) * float64(xr[e])
							mag += math.Abs(float64(wr[e]) * float64(xr[e]))
						}
						for b0 := 0; b0 < s.k; b0 += 32 {
							bound += blockBound(wr[b0:b0+32], xr[b0:b0+32], amax(xr[b0:b0+32]))
						}
						for b0 := 0; b0 < s.k; b0 += kb {
							e := min(b0+kb, s.k)
							bound256 += blockBound(wr[b0:e], xr[b0:e], amax(xr[b0:e]))
						}
						slack := 1e-5*mag + 1e-6
						g, c := float64(got[i*s.m+j]), float64(cpuOut[i*s.m+j])
						if d := math.Abs(g - want); !(d <= bound+slack) {
							t.Fatalf("%s: out[%d,%d] = %g, want %g ± %.3g (error %.3g)", name, i, j, g, want, bound+slack, d)
						}
						if d := math.Abs(g - c); !(d <= bound+bound256+2*slack) {
							t.Fatalf("%s: out[%d,%d] = %g, cpu %g: differ by %.3g > %.3g", name, i, j, g, c, d, bound+bound256+2*slack)
						}
						worst = max(worst, math.Abs(g-want)/(bound+slack))
					}
				}
				t.Logf("%s: largest error %.2f of the bound", name, worst)
			}
			h.g.quant.oneRow, h.g.quant.chunk = false, 0
		}
	}
}

func amax(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// blockBound is the error bound of one block of a product (see
// TestQuantMatMul): half an activation step and bf16 rounding per weight.
func blockBound(w, x []float32, amax float64) float64 {
	step := amax / 127
	var s float64
	for i := range w {
		s += math.Abs(float64(w[i])) * (step/2*1.0001 + math.Abs(float64(x[i]))/256)
	}
	return s
}

// TestQuantEmbed gathers rows of quantized tables: exactly the CPU's
// dequantization for the types with kernels, and its bf16 rounding for the
// types widened at load.
func TestQuantEmbed(t *testing.T) {
	h := newHarness(t)
	r := rand.New(rand.NewPCG(5, 6))
	ids := h.ints([]int32{3, 0, 36, 3, 17, 36})
	for _, dt := range quantTypes(t) {
		cols := 2 * max(256, dt.BlockSize())
		data := quantBlocks(t, r, dt, 37, cols)
		c, err := h.c.Weight(dt, []int{37, cols}, data)
		if err != nil {
			t.Fatal(err)
		}
		g, err := h.g.Weight(dt, []int{37, cols}, data)
		if err != nil {
			t.Fatal(err)
		}
		dst := h.zeros(6, cols)
		h.c.Embed(dst.c, c, ids.c)
		h.g.Embed(dst.g, g, ids.g)
		tol := 0.0
		if _, ok := qsplitOf(dt); !ok {
			tol = 1.0 / 256
		}
		h.compare("embed "+dt.String(), dst, tol)
	}
}

// TestQuantWeightErrors checks that malformed quantized weights are errors.
func TestQuantWeightErrors(t *testing.T) {
	g := openGPU(t)
	for _, tc := range []struct {
		name  string
		dt    compute.DType
		shape []int
		n     int
	}{
		{"short", compute.Q4_0, []int{4, 64}, 4*36 - 1},
		{"long", compute.Q6_K, []int{2, 256}, 2*210 + 1},
		{"partial block", compute.Q8_0, []int{2, 48}, 2 * 34},
		{"no shape", compute.Q4_K, nil, 144},
		{"widened short", compute.Q5_K, []int{3, 256}, 2 * 176},
	} {
		if _, err := g.Weight(tc.dt, tc.shape, make([]byte, tc.n)); err == nil {
			t.Errorf("%s: Weight(%s, %v, %d bytes) succeeded", tc.name, tc.dt, tc.shape, tc.n)
		}
	}
}

// runRows feeds ids at once and returns every row's logits.
func runRows(t *testing.T, m model.Model, b compute.Backend, ids []int32) [][]float32 {
	t.Helper()
	rows, err := engine.NewSession(m, b, 64).AppendAll(ids)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestQuantConformance converts dense fixtures to GGUF Q8_0, Q4_0 and
// Q4_K_M and compares the logits of each file on the GPU, prefilled at once
// (f16-widened weights) and fed token by token (quantized activations), and
// on the CPU with the Hugging Face reference logits. The bound: on every
// fixture and type the GPU's max |Δlogit| against the reference is at most
// 1.5 times the CPU's plus 1% of the largest |logit|, and for Q8_0 the
// teacher-forced top-1 agrees with the reference greedy run on at least
// 95% of all fixtures' steps. Observed on the H200: token by token the GPU
// matches the CPU within 1e-6 on most files (both quantize activations
// alike; up to 3.8e-2 where a code rounds the other way, and Q4_K_M's
// 32- against 256-element activation blocks); the prefill, on f16 weights
// and float32 activations, is closer to the reference than the CPU (Q8_0:
// 0.7-2.1% of the largest |logit| against the CPU's 0.9-3.4%); top-1
// agreement Q8_0 215/216 (CPU 207/216), Q4_0 158/216 (157), Q4_K_M 182/216
// (182).
func TestQuantConformance(t *testing.T) {
	g := openGPU(t)
	h := newHarness(t)
	type tally struct{ agreeC, agreeG, steps int }
	totals := map[string]*tally{}
	types := []string{"q8_0", "q4_0", "q4_k_m"}
	for _, ty := range types {
		totals[ty] = &tally{}
	}
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			ref := archref.Load(t, dir)
			want := ref.Logits
			var scale float64
			for _, v := range want {
				scale = max(scale, math.Abs(float64(v)))
			}
			for _, ty := range types {
				path := filepath.Join(t.TempDir(), name+"."+ty+".gguf")
				if _, err := convert.ToGGUF(dir, path, convert.GGUFOptions{Type: ty}); err != nil {
					t.Fatal(err)
				}
				mc, err := model.OpenGGUF(path, h.c)
				if err != nil {
					t.Fatal(err)
				}
				mg, err := model.OpenGGUF(path, g)
				if err != nil {
					mc.Close()
					t.Fatal(err)
				}
				vocab := mc.Config().VocabSize
				cl := runRows(t, mc, h.c, ref.InputIDs)
				gl := runRows(t, mg, g, ref.InputIDs)
				gs := stepRows(t, mg, g, ref.InputIDs)
				var eC, eG, eGs, eGC float64
				for i := range cl {
					w := want[i*vocab : (i+1)*vocab]
					eC = max(eC, archref.MaxDiff(cl[i], w))
					eG = max(eG, archref.MaxDiff(gl[i], w))
					eGs = max(eGs, archref.MaxDiff(gs[i], w))
					eGC = max(eGC, archref.MaxDiff(gs[i], cl[i]))
				}
				seq := append(append([]int32{}, ref.GreedyPrompt...), ref.GreedyIDs...)
				fc := runRows(t, mc, h.c, seq)
				fg := runRows(t, mg, g, seq)
				agreeC, agreeG := 0, 0
				for i, id := range ref.GreedyIDs {
					row := len(ref.GreedyPrompt) - 1 + i
					if argmax(fc[row]) == id {
						agreeC++
					}
					if argmax(fg[row]) == id {
						agreeG++
					}
				}
				tl := totals[ty]
				tl.agreeC += agreeC
				tl.agreeG += agreeG
				tl.steps += len(ref.GreedyIDs)
				t.Logf("%-11s %-6s max |Δlogit| vs reference (max |logit| %.2f): CPU %.2e, GPU prefill %.2e, GPU token by token %.2e (%.2f%%); GPU steps vs CPU %.2e; top-1 CPU %d/%d GPU %d/%d",
					name, ty, scale, eC, eG, eGs, 100*eGs/scale, eGC, agreeC, len(ref.GreedyIDs), agreeG, len(ref.GreedyIDs))
				for _, e := range []struct {
					what string
					v    float64
				}{{"prefill", eG}, {"token by token", eGs}} {
					if e.v > 1.5*eC+0.01*scale {
						t.Errorf("%s %s: GPU %s max |Δlogit| %.3e above 1.5 × CPU's %.3e + 1%% of %.2f", name, ty, e.what, e.v, eC, scale)
					}
				}
				mc.Close()
				mg.Close()
			}
		})
	}
	for _, ty := range types {
		tl := totals[ty]
		if tl.steps == 0 {
			continue
		}
		t.Logf("%s: teacher-forced top-1 agreement with the reference: CPU %d/%d, GPU %d/%d", ty, tl.agreeC, tl.steps, tl.agreeG, tl.steps)
		if ty == "q8_0" && float64(tl.agreeG) < 0.95*float64(tl.steps) {
			t.Errorf("%s: GPU top-1 agreement %d/%d below 95%%", ty, tl.agreeG, tl.steps)
		}
	}
	if err := g.Err(); err != nil {
		t.Fatal(err)
	}
}

// stepRows feeds ids one at a time and returns every step's logits.
func stepRows(t *testing.T, m model.Model, b compute.Backend, ids []int32) [][]float32 {
	t.Helper()
	s := engine.NewSession(m, b, 64)
	var rows [][]float32
	for _, id := range ids {
		r, err := s.Append([]int32{id})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, append([]float32(nil), r...))
	}
	return rows
}

// TestQSplit checks on the host that the regions Weight uploads hold every
// byte of every block once, and that each unit's chunks are 16-byte pieces
// of the code range, every byte of it read by one unit.
func TestQSplit(t *testing.T) {
	for _, dt := range quantTypes(t) {
		s, ok := qsplitOf(dt)
		if !ok {
			continue
		}
		bb := dt.BlockBytes()
		seen := make([]int, bb)
		for _, r := range [][2]int{s.codes, s.sc, s.d} {
			for i := r[0]; i < r[1]; i++ {
				seen[i]++
			}
		}
		for i, n := range seen {
			if n != 1 {
				t.Errorf("%s: byte %d of a block goes to %d regions", dt, i, n)
			}
		}
		if s.codeBytes%16 != 0 {
			t.Errorf("%s: %d code bytes per block, not a multiple of 16", dt, s.codeBytes)
		}
		if s.chunks == nil {
			continue
		}
		read := make([]int, s.codeBytes)
		for _, u := range s.chunks {
			if len(u) != len(s.chunks[0]) {
				t.Errorf("%s: units of %d and %d chunks", dt, len(u), len(s.chunks[0]))
			}
			for _, off := range u {
				for i := off; i < off+16; i++ {
					read[i]++
				}
			}
		}
		for i, n := range read {
			if n != 1 {
				t.Errorf("%s: code byte %d read by %d units", dt, i, n)
			}
		}
	}
	src := make([]byte, 32)
	for i := range src {
		src[i] = byte(i*37 + 11)
	}
	dst := make([]byte, 32)
	mlxReorder(dst, src)
	for e := range 64 {
		c, j := e/32, e%32
		want := src[e/2] >> (4 * (e % 2)) & 0xf
		got := dst[16*c+j%16] >> (4 * (j / 16)) & 0xf
		if got != want {
			t.Errorf("reordered element %d: %d, want %d", e, got, want)
		}
	}
}

// TestQuantReuse checks the reuse of quantized activations between
// products: a second weight on the same input reuses its quantization and
// gives what it gives after another operation forced a new one, and an
// operation that rewrites the input makes the next product quantize again.
func TestQuantReuse(t *testing.T) {
	h := newHarness(t)
	g := h.g
	r := rand.New(rand.NewPCG(7, 8))
	const m, k = 45, 512
	var ws []*compute.Tensor
	for _, dt := range []compute.DType{compute.Q4_0, compute.Q6_K} {
		w, err := g.Weight(dt, []int{m, k}, quantBlocks(t, r, dt, m, k))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	x := h.act(1, 2, k)
	other := h.act(1, 2, k)
	d1, d2, d3, d4 := h.zeros(2, m), h.zeros(2, m), h.zeros(2, m), h.zeros(2, m)
	g.MatMul(d1.g, x.g, ws[0])
	g.MatMul(d2.g, x.g, ws[1]) // reuses x's quantization
	g.Scale(other.g, other.g, 2)
	g.MatMul(d3.g, x.g, ws[1]) // quantizes x again
	g.Scale(x.g, x.g, -3)
	g.MatMul(d4.g, x.g, ws[0]) // must see the new x
	read := func(p pair) []float32 {
		v := make([]float32, p.g.Len())
		g.Read(v, p.g)
		return v
	}
	v1, v2, v3, v4 := read(d1), read(d2), read(d3), read(d4)
	for i := range v1 {
		if v2[i] != v3[i] {
			t.Fatalf("reused quantization: out[%d] = %g, with a new one %g", i, v2[i], v3[i])
		}
		// Scaling by -3 scales the activation codes' scale exactly when
		// the codes stay the same, which they do up to ties.
		if d := math.Abs(float64(v4[i]) + 3*float64(v1[i])); d > 1e-3*(1+math.Abs(float64(v4[i]))) {
			t.Fatalf("after the input changed: out[%d] = %g, want %g", i, v4[i], -3*v1[i])
		}
	}
}

// TestRepackLayout decodes repacked weights on the host the way qdequant
// reads them (qchunk's addressing, each type's unit) and checks the values
// against package quant, so that the layout Weight writes and the one the
// kernels read agree without a GPU.
func TestRepackLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, dt := range quantTypes(t) {
		s, ok := qsplitOf(dt)
		if !ok {
			continue
		}
		const rows = 5
		cols := 3 * max(256, dt.BlockSize())
		if dt.BlockSize() == 32 {
			cols = 32 * 37 // more than 32 units: a full and a partial group
		}
		data := quantBlocks(t, r, dt, rows, cols)
		want := dequantRows(t, dt, rows, cols, data)
		host, scOff, dOff := repack(s, dt, rows, cols, data)
		el := 32
		if s.qt == qtQ4_K || s.qt == qtQ5_K || s.qt == qtQ6_K {
			el = 64
		}
		nu := cols / el
		nc := 1
		if s.chunks != nil {
			nc = len(s.chunks[0])
		}
		chunk := func(row, u, c int) []byte {
			g := u &^ 31
			gs := min(32, nu-g)
			return host[((row*nu+g)*nc+c*gs+u-g)*16:][:16]
		}
		f16at := func(off int) float32 { return half.F16ToF32(binary.LittleEndian.Uint16(host[off:])) }
		got := make([]float32, rows*cols)
		for row := range rows {
			for u := range nu {
				bi := row*nu + u
				out := got[row*cols+u*el:]
				switch s.qt {
				case qtQ8_0:
					d := f16at(dOff + 2*bi)
					for e := range 32 {
						out[e] = float32(int8(chunk(row, u, e/16)[e%16])) * d
					}
				case qtQ4_0, qtQ5_0, qtMLX4:
					c0 := chunk(row, u, 0)
					for e := range 32 {
						c := int(c0[e%16]>>(4*(e/16))) & 15
						switch s.qt {
						case qtQ4_0:
							out[e] = float32(c-8) * f16at(dOff+2*bi)
						case qtQ5_0:
							h := binary.LittleEndian.Uint32(host[scOff+4*bi:])
							out[e] = float32(c|int(h>>e&1)<<4-16) * f16at(dOff+2*bi)
						default:
							sc, b := mlxAt(host, dOff, s, row*(nu*32/s.group)+u*32/s.group)
							out[e] = float32(sc*float32(c)) + b
						}
					}
				case qtMLX8:
					sc, b := mlxAt(host, dOff, s, row*(nu*32/s.group)+u*32/s.group)
					for e := range 32 {
						out[e] = float32(sc*float32(chunk(row, u, e/16)[e%16])) + b
					}
				case qtQ4_K, qtQ5_K:
					c := u % 4
					hd := host[scOff+16*(bi/4):][:16]
					d, dmin := half.F16ToF32(binary.LittleEndian.Uint16(hd)), half.F16ToF32(binary.LittleEndian.Uint16(hd[2:]))
					sca, ma := scaleMin(2*c, hd[4:])
					scb, mb := scaleMin(2*c+1, hd[4:])
					var ql, qh []byte
					if s.qt == qtQ5_K {
						blk := host[(bi/4)*160:][:160]
						qh, ql = blk[:32], blk[32+32*c:][:32]
					} else {
						ql = append(append([]byte{}, chunk(row, u, 0)...), chunk(row, u, 1)...)
					}
					for l := range 32 {
						v1, v2 := int(ql[l]&15), int(ql[l]>>4)
						if qh != nil {
							v1 |= int(qh[l]>>(2*c)&1) << 4
							v2 |= int(qh[l]>>(2*c+1)&1) << 4
						}
						out[l] = float32(float32(d*float32(sca))*float32(v1)) - float32(dmin*float32(ma))
						out[32+l] = float32(float32(d*float32(scb))*float32(v2)) - float32(dmin*float32(mb))
					}
				case qtQ6_K:
					p, sb := u%4, u/4
					hf, ii := p/2, p%2
					scs := host[scOff+16*(bi/4):][:16]
					d := f16at(dOff + 2*(bi/4))
					la, lb, qh := chunk(row, u, 0), chunk(row, u, 1), chunk(row, u, 2)
					base := got[row*cols+sb*256+128*hf+16*ii:]
					for tt := range 16 {
						q := [4]int{int(la[tt]&15 | (qh[tt]&3)<<4), int(lb[tt]&15 | (qh[tt]>>2&3)<<4),
							int(la[tt]>>4 | (qh[tt]>>4&3)<<4), int(lb[tt]>>4 | (qh[tt]>>6&3)<<4)}
						for j := range 4 {
							base[32*j+tt] = float32(d*float32(int8(scs[8*hf+ii+2*j]))) * float32(q[j]-32)
						}
					}
				}
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: element %d (row %d, col %d) decodes as %g from the device layout, want %g", dt, i, i/cols, i%cols, got[i], want[i])
			}
		}
	}
}

// mlxAt reads the scale and bias of group g from the d region.
func mlxAt(host []byte, dOff int, s qsplit, g int) (float32, float32) {
	switch compute.DType(s.sdt) {
	case compute.F32:
		b := host[dOff+8*g:]
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), math.Float32frombits(binary.LittleEndian.Uint32(b[4:]))
	case compute.F16:
		b := host[dOff+4*g:]
		return half.F16ToF32(binary.LittleEndian.Uint16(b)), half.F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	}
	b := host[dOff+4*g:]
	return half.BF16ToF32(binary.LittleEndian.Uint16(b)), half.BF16ToF32(binary.LittleEndian.Uint16(b[2:]))
}

// scaleMin unpacks the 6-bit scale and min of sub-block j of a Q4_K or
// Q5_K super-block's 12 scale bytes.
func scaleMin(j int, s []byte) (int, int) {
	if j < 4 {
		return int(s[j] & 63), int(s[j+4] & 63)
	}
	return int(s[j+4]&0xF | (s[j-4]>>6)<<4), int(s[j+4]>>4 | (s[j]>>6)<<4)
}
