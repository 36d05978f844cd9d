package convert

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lem/compute"
	"lem/compute/cpu"
	"lem/internal/archref"
	"lem/internal/fixtures"
	"lem/model"
	"lem/quant"
	"lem/safetensors"
)

// TestMLXGroup checks one group worked out by hand. 2 bits, values
// −1 … 0.5: step = 1.5/3 = 0.5; the min edge (−1) dominates, q0 =
// round(−1/0.5) = −2, scale = −1/−2 = 0.5, bias = −1; codes =
// round((w+1)/0.5).
func TestMLXGroup(t *testing.T) {
	x := []float32{-1, -0.75, -0.5, 0, 0.25, 0.5}
	codes := make([]uint32, len(x))
	scale, bias := mlxGroup(x, 2, codes)
	if scale != 0.5 || bias != -1 {
		t.Fatalf("scale, bias = %g, %g; want 0.5, -1", scale, bias)
	}
	// −0.75 → 0.5 rounds away from zero to 1; 0.25 → 2.5 → 3.
	if want := []uint32{0, 1, 1, 2, 3, 3}; !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	// The max edge dominating gives a negative scale anchored at the max:
	// step = 2/3, q0 = round(1.5/−(2/3)) = round(−2.25) = −2, scale =
	// 1.5/−2 = −0.75, bias = 1.5; codes = round((w−1.5)/−0.75).
	x = []float32{-0.5, 0, 1.5}
	scale, bias = mlxGroup(x, 2, codes[:3])
	if scale != -0.75 || bias != 1.5 {
		t.Fatalf("scale, bias = %g, %g; want -0.75, 1.5", scale, bias)
	}
	if want := []uint32{3, 2, 0}; !slices.Equal(codes[:3], want) {
		t.Fatalf("codes %v, want %v", codes[:3], want)
	}
}

// TestMLXRoundTrip checks that every element comes back within one step:
// half a step from rounding, except at the far edge, which the anchoring of
// the near edge can push up to one code past the top and clamp.
func TestMLXRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, bits := range []int{2, 4, 8} {
		for _, group := range []int{32, 64, 128} {
			x := make([]float32, group)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			codes := make([]uint32, group)
			scale, bias := mlxGroup(x, bits, codes)
			words := make([]uint32, group*bits/32)
			for j, c := range codes {
				words[j*bits/32] |= c << (j * bits % 32)
			}
			y := make([]float32, group)
			mlxDequantize(y, words, []float32{scale}, []float32{bias}, bits, group)
			for i := range x {
				if e := math.Abs(float64(x[i] - y[i])); e > math.Abs(float64(scale))*(1+1e-5)+1e-6 {
					t.Fatalf("bits %d group %d: element %d: %g → %g (scale %g)", bits, group, i, x[i], y[i], scale)
				}
			}
		}
	}
}

// mlxSource reads an MLX pack written by ToMLX, dequantizing quantized
// weights to F32, so the model can run on a backend without MLX kernels.
type mlxSource struct {
	f           *safetensors.File
	bits, group int
	cache       map[string]model.Stored
}

func (s *mlxSource) Lookup(name string) (model.Stored, bool) {
	if st, ok := s.cache[name]; ok {
		return st, true
	}
	t, ok := s.f.Tensor(name)
	if !ok {
		return model.Stored{}, false
	}
	base := strings.TrimSuffix(name, ".weight")
	sc, ok := s.f.Tensor(base + ".scales")
	if !ok || t.DType != safetensors.U32 {
		dt := map[safetensors.DType]compute.DType{safetensors.F32: compute.F32, safetensors.F16: compute.F16, safetensors.BF16: compute.BF16}[t.DType]
		return model.Stored{DType: dt, Shape: t.Shape, Data: t.Data}, true
	}
	bi, _ := s.f.Tensor(base + ".biases")
	scales, _ := sc.Float32s()
	biases, _ := bi.Float32s()
	rows, cols := t.Shape[0], t.Shape[1]*32/s.bits
	groups := cols / s.group
	out := make([]float32, rows*cols)
	words := make([]uint32, t.Shape[1])
	for r := range rows {
		for k := range words {
			words[k] = binary.LittleEndian.Uint32(t.Data[(r*t.Shape[1]+k)*4:])
		}
		mlxDequantize(out[r*cols:(r+1)*cols], words, scales[r*groups:(r+1)*groups], biases[r*groups:(r+1)*groups], s.bits, s.group)
	}
	data := make([]byte, 4*len(out))
	if err := quant.Quantize(data, out, compute.F32); err != nil {
		panic(err)
	}
	st := model.Stored{DType: compute.F32, Shape: []int{rows, cols}, Data: data}
	s.cache[name] = st
	return st, true
}

// TestMLXConformance writes every dense fixture as a 4-bit MLX pack, runs
// it (dequantized) and logs its agreement with the reference greedy run
// and its logit error; it checks the pack's layout and config.
func TestMLXConformance(t *testing.T) {
	b := cpu.New(0)
	agreeAll, stepsAll := 0, 0
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			ref := archref.Load(t, dir)
			st, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			base := runLogits(t, st, b, ref.InputIDs)

			out := filepath.Join(t.TempDir(), "mlx")
			res, err := ToMLX(dir, out, MLXOptions{Bits: 4, GroupSize: 64})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := model.LoadConfig(out)
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := cfg.Quantization.For("model.layers.0.self_attn.q_proj"); !ok || p.Bits != 4 || p.GroupSize != 64 {
				t.Fatalf("quantization block: %+v", cfg.Quantization)
			}
			f, err := safetensors.Open(filepath.Join(out, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			q, ok := f.Tensor("model.layers.0.mlp.down_proj.weight")
			sc, ok2 := f.Tensor("model.layers.0.mlp.down_proj.scales")
			if !ok || !ok2 || q.DType != safetensors.U32 || !slices.Equal(q.Shape, []int{cfg.HiddenSize, cfg.IntermediateSize / 8}) ||
				sc.DType != safetensors.BF16 || !slices.Equal(sc.Shape, []int{cfg.HiddenSize, cfg.IntermediateSize / 64}) {
				t.Fatalf("down_proj packed as %v %v, scales %v %v", q.DType, q.Shape, sc.DType, sc.Shape)
			}
			if n, ok := f.Tensor("model.norm.weight"); !ok || n.DType != safetensors.BF16 {
				t.Fatal("model.norm.weight did not pass through")
			}
			cfg.Quantization = nil
			m, err := model.Load(cfg, &mlxSource{f: f, bits: 4, group: 64, cache: map[string]model.Stored{}}, b)
			if err != nil {
				t.Fatal(err)
			}
			got := runLogits(t, m, b, ref.InputIDs)
			var worst float64
			for i := range got {
				worst = max(worst, archref.MaxDiff(got[i], base[i]))
			}
			agree := forcedAgreement(t, m, b, ref)
			agreeAll += agree
			stepsAll += len(ref.GreedyIDs)
			t.Logf("%-11s mlx 4-bit: %d → %d bytes (%d weights quantized); max |Δlogit| %.2e; greedy top-1 %d/%d",
				name, res.InBytes, res.FileBytes, res.Quantized, worst, agree, len(ref.GreedyIDs))
		})
	}
	if stepsAll > 0 {
		t.Logf("mlx 4-bit: greedy top-1 agreement %d/%d steps (%.1f%%)", agreeAll, stepsAll, 100*float64(agreeAll)/float64(stepsAll))
	}
}

func TestMLXCopiesFiles(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	out := filepath.Join(t.TempDir(), "mlx")
	if _, err := ToMLX(dir, out, MLXOptions{Bits: 8, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json", "config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []MLXOptions{{Bits: 3}, {Bits: 4, GroupSize: 48}} {
		if _, err := ToMLX(dir, filepath.Join(t.TempDir(), "x"), bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
