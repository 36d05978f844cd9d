package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/safetensors"
)

// plainBackend hides every optional interface of the backend it wraps.
type plainBackend struct{ compute.Backend }

func TestMoENeedsExpertsBackend(t *testing.T) {
	b := plainBackend{cpu.New(1)}
	if _, ok := compute.Backend(b).(compute.Experts); ok {
		t.Fatal("plainBackend implements compute.Experts")
	}
	dense, err := OpenDir(fixtures.Dir(t, "archs", "qwen3"), b)
	if err != nil {
		t.Fatalf("a dense model on the plain backend: %v", err)
	}
	dense.Close()
	for _, name := range []string{"qwen3_moe", "gpt_oss"} {
		m, err := OpenDir(fixtures.Dir(t, "archs", name), b)
		if err == nil {
			m.Close()
			t.Errorf("%s loaded on a backend without compute.Experts", name)
			continue
		}
		if !strings.Contains(err.Error(), "compute.Experts") {
			t.Errorf("%s: error %q does not name compute.Experts", name, err)
		}
	}
}

// editedSource is a fixture's tensors with some hidden or replaced.
type editedSource struct {
	Source
	hide    string
	replace map[string]Stored
}

func (s editedSource) Lookup(name string) (Stored, bool) {
	if s.hide != "" && name == s.hide {
		return Stored{}, false
	}
	if r, ok := s.replace[name]; ok {
		return r, true
	}
	return s.Source.Lookup(name)
}

func TestMoELoadErrors(t *testing.T) {
	for _, c := range []struct {
		arch, hide, reshape string
		want                string
	}{
		{arch: "qwen3_moe", hide: "model.layers.2.mlp.experts.3.up_proj.weight", want: "tensor model.layers.2.mlp.experts.3.up_proj.weight is missing"},
		{arch: "qwen3_moe", hide: "model.layers.0.mlp.gate.weight", want: "tensor model.layers.0.mlp.gate.weight is missing"},
		{arch: "qwen3_moe", reshape: "model.layers.1.mlp.experts.0.down_proj.weight", want: "tensor model.layers.1.mlp.experts.0.down_proj.weight has shape"},
		{arch: "gpt_oss", hide: "model.layers.1.mlp.experts.down_proj", want: "tensor model.layers.1.mlp.experts.down_proj is missing"},
		{arch: "gpt_oss", reshape: "model.layers.3.mlp.experts.gate_up_proj", want: "tensor model.layers.3.mlp.experts.gate_up_proj has shape"},
		{arch: "gpt_oss", reshape: "model.layers.0.mlp.experts.gate_up_proj_bias", want: "tensor model.layers.0.mlp.experts.gate_up_proj_bias has shape"},
		{arch: "gpt_oss", hide: "model.layers.0.self_attn.sinks", want: "tensor model.layers.0.self_attn.sinks is missing"},
	} {
		t.Run(c.arch+"/"+c.hide+c.reshape, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", c.arch)
			cfg, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			st, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			src := editedSource{Source: safetensorsSource{st}, hide: c.hide}
			if c.reshape != "" {
				s, ok := src.Lookup(c.reshape)
				if !ok {
					t.Fatalf("no tensor %s", c.reshape)
				}
				s.Shape = append([]int{1}, s.Shape...)
				src.replace = map[string]Stored{c.reshape: s}
			}
			_, err = Load(cfg, src, cpu.New(1))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestMoETransposes(t *testing.T) {
	// hid 2, inter 2: columns g0 u0 g1 u1 per input row.
	u16 := func(v ...uint16) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], x)
		}
		return b
	}
	src := u16(
		10, 20, 11, 21, // h0: g0 u0 g1 u1
		30, 40, 31, 41, // h1
	)
	want := u16(
		10, 30, // gate row 0 over h0, h1
		11, 31, // gate row 1
		20, 40, // up row 0
		21, 41, // up row 1
	)
	if got := deinterleaveT(src, 2, 2, 2); !slices.Equal(got, want) {
		t.Errorf("deinterleaveT = %v, want %v", got, want)
	}
	if got := transpose(u16(1, 2, 3, 4, 5, 6), 2, 3, 2); !slices.Equal(got, u16(1, 4, 2, 5, 3, 6)) {
		t.Errorf("transpose = %v", got)
	}
	if got := deinterleave([]float32{1, 2, 3, 4, 5, 6}); !slices.Equal(got, []float32{1, 3, 5, 2, 4, 6}) {
		t.Errorf("deinterleave = %v", got)
	}
}

// mapSource serves tensors from a map.
type mapSource map[string]Stored

func (m mapSource) Lookup(name string) (Stored, bool) {
	s, ok := m[name]
	return s, ok
}

// fixtureSource opens a fixture's weights for the duration of the test.
func fixtureSource(t *testing.T, name string) (*Config, Source) {
	t.Helper()
	dir := fixtures.Dir(t, "archs", name)
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cfg, safetensorsSource{st}
}

// runBlock loads a block with spec from src and runs it on x [n, hidden].
func runBlock(t *testing.T, src Source, spec *moeSpec, x []float32, n int) []float32 {
	t.Helper()
	b := cpu.New(2)
	l := &loader{src: src, b: b}
	blk := l.moe("model.layers.0.", spec)
	if l.err != nil {
		t.Fatal(l.err)
	}
	xt, dst := b.Alloc(compute.F32, n, spec.hidden), b.Alloc(compute.F32, n, spec.hidden)
	b.Upload(xt, x)
	blk.forward(dst, xt, xt, newMoEScratch(b, n, blk))
	out := make([]float32, n*spec.hidden)
	b.Read(out, dst)
	return out
}

func testInput(n, hid int) []float32 {
	x := make([]float32, n*hid)
	for i := range x {
		x[i] = float32(math.Sin(float64(3*i+1))) * 2
	}
	return x
}

// TestMoEBlockSharedExpert runs Qwen3.5-MoE's block (routed experts plus a
// shared expert behind a sigmoid gate) against the formula in float64.
func TestMoEBlockSharedExpert(t *testing.T) {
	cfg, src := fixtureSource(t, "qwen3_5_moe_text")
	spec := &moeSpec{
		router: "mlp.gate", experts: "mlp.experts", layout: moePerExpert,
		shared: "mlp.shared_expert", sharedGate: "mlp.shared_expert_gate",
		hidden: cfg.HiddenSize, numExperts: cfg.NumExperts, topK: cfg.NumExpertsPerTok,
		order: compute.SoftmaxTopK, normalize: cfg.NormTopKProb,
		inter: cfg.MoEIntermediateSize, sharedInter: cfg.SharedExpertIntermediateSize,
		act: compute.SiLU,
	}
	const n = 5
	hid := cfg.HiddenSize
	x := testInput(n, hid)
	got := runBlock(t, src, spec, x, n)

	w := func(name string) []float64 {
		s, ok := src.Lookup("model.layers.0." + name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		v, err := toF32(s)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(v))
		for i, f := range v {
			out[i] = float64(f)
		}
		return out
	}
	// matvec computes W·v for W [rows, len(v)].
	matvec := func(wt []float64, v []float64) []float64 {
		out := make([]float64, len(wt)/len(v))
		for r := range out {
			for c, e := range v {
				out[r] += wt[r*len(v)+c] * e
			}
		}
		return out
	}
	mlp := func(p string, v []float64) []float64 {
		g, u := matvec(w(p+".gate_proj.weight"), v), matvec(w(p+".up_proj.weight"), v)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		return matvec(w(p+".down_proj.weight"), g)
	}
	for i := range n {
		v := make([]float64, hid)
		for c := range v {
			v[c] = float64(x[i*hid+c])
		}
		logits := matvec(w("mlp.gate.weight"), v)
		var z float64
		for _, l := range logits {
			z += math.Exp(l)
		}
		order := []int{0, 1, 2, 3}
		slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(logits[b], logits[a]) })
		top := order[:spec.topK]
		var sum float64
		for _, e := range top {
			sum += math.Exp(logits[e]) / z
		}
		want := make([]float64, hid)
		for _, e := range top {
			p := math.Exp(logits[e]) / z
			if spec.normalize {
				p /= sum
			}
			y := mlp(fmt.Sprintf("mlp.experts.%d", e), v)
			for c := range want {
				want[c] += p * y[c]
			}
		}
		gate := 1 / (1 + math.Exp(-matvec(w("mlp.shared_expert_gate.weight"), v)[0]))
		y := mlp("mlp.shared_expert", v)
		for c := range want {
			want[c] += gate * y[c]
			if d := math.Abs(float64(got[i*hid+c]) - want[c]); d > 1e-5 {
				t.Fatalf("row %d col %d: got %g, want %g", i, c, got[i*hid+c], want[c])
			}
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestMoEBlockFusedLayout restacks Qwen3 MoE's per-expert tensors into
// transformers 5's fused layout and checks that both load to the same block.
func TestMoEBlockFusedLayout(t *testing.T) {
	cfg, src := fixtureSource(t, "qwen3_moe")
	ne, inter, hid := cfg.NumExperts, cfg.MoEIntermediateSize, cfg.HiddenSize
	fused := mapSource{}
	router, _ := src.Lookup("model.layers.0.mlp.gate.weight")
	fused["model.layers.0.mlp.gate.weight"] = router
	var gu, down []byte
	for e := range ne {
		for _, proj := range []string{"gate_proj", "up_proj"} {
			s, _ := src.Lookup(fmt.Sprintf("model.layers.0.mlp.experts.%d.%s.weight", e, proj))
			gu = append(gu, s.Data...)
		}
		s, _ := src.Lookup(fmt.Sprintf("model.layers.0.mlp.experts.%d.down_proj.weight", e))
		down = append(down, s.Data...)
	}
	fused["model.layers.0.mlp.experts.gate_up_proj"] = Stored{DType: router.DType, Shape: []int{ne, 2 * inter, hid}, Data: gu}
	fused["model.layers.0.mlp.experts.down_proj"] = Stored{DType: router.DType, Shape: []int{ne, hid, inter}, Data: down}

	spec := moeSpec{
		router: "mlp.gate", experts: "mlp.experts", layout: moePerExpert,
		hidden: hid, numExperts: ne, topK: cfg.NumExpertsPerTok, order: compute.SoftmaxTopK,
		inter: inter, act: compute.SiLU,
	}
	const n = 6
	x := testInput(n, hid)
	want := runBlock(t, src, &spec, x, n)
	spec.layout = moeFused
	got := runBlock(t, fused, &spec, x, n)
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-6 {
			t.Fatalf("[%d]: fused %g, per expert %g", i, got[i], want[i])
		}
	}
}
