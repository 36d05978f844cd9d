package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// convOnly offers causal convolutions but no SSM scan.
type convOnly struct {
	compute.Backend
	compute.Convolver
}

// TestSSMNeedsCapabilities checks that loading a family on a backend that
// lacks an operation it needs fails with an error naming the capability,
// and that a model whose layers need none loads.
func TestSSMNeedsCapabilities(t *testing.T) {
	c := cpu.New(1)
	lfm2Conv, lfm2Src := syntheticLFM2(t)
	for _, tt := range []struct {
		name string
		load func(b compute.Backend) error
		b    compute.Backend
		want string // "" for success
	}{
		{"mamba2 without a convolver", openFixture(t, "mamba2"), plainBackend{c}, "compute.Convolver"},
		{"mamba2 without a scanner", openFixture(t, "mamba2"), convOnly{c, c}, "compute.SSMScanner"},
		{"falcon_h1 without a scanner", openFixture(t, "falcon_h1"), convOnly{c, c}, "compute.SSMScanner"},
		{"lfm2 convolution layers without a convolver", loadWith(lfm2Conv, lfm2Src), plainBackend{c}, "compute.Convolver"},
		{"lfm2 attention-only fixture without a convolver", openFixture(t, "lfm2"), plainBackend{c}, ""},
		{"mamba2 on the CPU", openFixture(t, "mamba2"), c, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load(tt.b)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("load failed: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("load error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func openFixture(t *testing.T, name string) func(b compute.Backend) error {
	dir := fixtures.Dir(t, "archs", name)
	return func(b compute.Backend) error {
		m, err := OpenDir(dir, b)
		if err == nil {
			m.Close()
		}
		return err
	}
}

func loadWith(cfg *Config, src Source) func(b compute.Backend) error {
	return func(b compute.Backend) error {
		_, err := Load(cfg, src, b)
		return err
	}
}

// memSource holds tensors in memory.
type memSource map[string]Stored

func (s memSource) Lookup(name string) (Stored, bool) {
	t, ok := s[name]
	return t, ok
}

// add stores random F32 values of the given shape, scaled by scale.
func (s memSource) add(r *rand.Rand, name string, scale float32, shape ...int) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(scale*(2*r.Float32()-1)))
	}
	s[name] = Stored{DType: compute.F32, Shape: shape, Data: data}
}

// syntheticLFM2 returns a small LFM2 with random weights whose layers
// alternate between short convolutions and attention (the fixture's
// layers all attend).
func syntheticLFM2(t *testing.T) (*Config, Source) {
	cfg, err := ParseConfig([]byte(`{"model_type":"lfm2","vocab_size":50,"hidden_size":16,"num_hidden_layers":4,
		"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":48,"block_auto_adjust_ff_dim":true,
		"block_ffn_dim_multiplier":1.0,"block_multiple_of":8,"conv_L_cache":3,"conv_bias":true,"norm_eps":1e-5,
		"max_position_embeddings":128,"layer_types":["conv","full_attention","conv","conv"]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	src := memSource{}
	hid, ff := 16, cfg.FeedForwardSize()
	src.add(r, "model.embed_tokens.weight", 1, 50, hid)
	src.add(r, "model.embedding_norm.weight", 1, hid)
	src.add(r, "lm_head.weight", 0.5, 50, hid)
	for i := range 4 {
		p := fmt.Sprintf("model.layers.%d.", i)
		src.add(r, p+"operator_norm.weight", 1, hid)
		src.add(r, p+"ffn_norm.weight", 1, hid)
		src.add(r, p+"feed_forward.w1.weight", 0.3, ff, hid)
		src.add(r, p+"feed_forward.w3.weight", 0.3, ff, hid)
		src.add(r, p+"feed_forward.w2.weight", 0.3, hid, ff)
		if cfg.LayerType(i) == "conv" {
			src.add(r, p+"conv.in_proj.weight", 0.5, 3*hid, hid)
			src.add(r, p+"conv.in_proj.bias", 0.5, 3*hid)
			src.add(r, p+"conv.out_proj.weight", 0.5, hid, hid)
			src.add(r, p+"conv.out_proj.bias", 0.5, hid)
			src.add(r, p+"conv.conv.weight", 0.8, hid, 1, 3)
			src.add(r, p+"conv.conv.bias", 0.5, hid)
		} else {
			a := p + "self_attn."
			src.add(r, a+"q_proj.weight", 0.5, hid, hid)
			src.add(r, a+"k_proj.weight", 0.5, hid/2, hid)
			src.add(r, a+"v_proj.weight", 0.5, hid/2, hid)
			src.add(r, a+"out_proj.weight", 0.5, hid, hid)
			src.add(r, a+"q_layernorm.weight", 1, 4)
			src.add(r, a+"k_layernorm.weight", 1, 4)
		}
	}
	return cfg, src
}

// run feeds ids to a fresh or given state in chunks of the given size and
// returns the logits of every position.
func run(b compute.Backend, m Model, st State, start int, ids []int32, chunk int) [][]float32 {
	vocab := m.Config().VocabSize
	var out [][]float32
	for lo := 0; lo < len(ids); lo += chunk {
		hi := min(lo+chunk, len(ids))
		n := hi - lo
		idt, post := b.Alloc(compute.I32, n), b.Alloc(compute.I32, n)
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(start + lo + i)
		}
		b.UploadInts(idt, ids[lo:hi])
		b.UploadInts(post, pos)
		logits := b.Alloc(compute.F32, n, vocab)
		m.Forward(st, idt, post, logits)
		flat := make([]float32, n*vocab)
		b.Read(flat, logits)
		for i := range n {
			out = append(out, flat[i*vocab:(i+1)*vocab])
		}
	}
	return out
}

func maxDiff(a, b [][]float32) float64 {
	var d float64
	for i := range a {
		for j := range a[i] {
			d = max(d, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return d
}

// TestLFM2ConvolutionLayers checks that LFM2's convolution layers carry
// their window across calls: whole, token by token and in chunks give the
// same logits, and a state restored to a checkpoint continues exactly as
// one that never went further.
func TestLFM2ConvolutionLayers(t *testing.T) {
	cfg, src := syntheticLFM2(t)
	b := cpu.New(2)
	m, err := Load(cfg, src, b)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]int32, 30)
	for i := range ids {
		ids[i] = int32(r.IntN(50))
	}
	whole := run(b, m, m.NewState(64), 0, ids, len(ids))
	for _, chunk := range []int{1, 2, 7} {
		if d := maxDiff(run(b, m, m.NewState(64), 0, ids, chunk), whole); d > 1e-5 {
			t.Errorf("chunks of %d: max |Δlogit| = %.2e against the whole sequence", chunk, d)
		}
	}
	// Feed 20 tokens with a checkpoint at 12, run on, rewind, continue.
	st := m.NewState(64)
	run(b, m, st, 0, ids[:12], 12)
	st.(Recurrent).Checkpoint(12)
	run(b, m, st, 12, ids[12:20], 8)
	if got := st.(Recurrent).Restore(15); got != 12 {
		t.Fatalf("Restore(15) = %d, want 12", got)
	}
	if d := maxDiff(run(b, m, st, 12, ids[12:], 18), whole[12:]); d > 1e-5 {
		t.Errorf("after restoring: max |Δlogit| = %.2e", d)
	}
	// A convolution with no window would make position 1 independent of
	// position 0; check it is not.
	other := append([]int32{(ids[0] + 1) % 50}, ids[1:2]...)
	if d := maxDiff(run(b, m, m.NewState(64), 0, other, 2)[1:], whole[1:2]); d == 0 {
		t.Error("position 1 does not depend on position 0")
	}
}

// TestRecurrentCheckpoints checks the checkpoint bookkeeping: the bound,
// the thinning, and that Restore returns the latest checkpoint at or
// before its argument with the tensors as they were.
func TestRecurrentCheckpoints(t *testing.T) {
	b := cpu.New(1)
	st := newRecurrentState(b, nil, 1000)
	a, c := st.recurrent(2, 3), st.recurrent(1, 4)
	fill := func(v float32) {
		for _, t := range []*compute.Tensor{a, c} {
			vals := make([]float32, t.Len())
			for i := range vals {
				vals[i] = v
			}
			b.Upload(t, vals)
		}
	}
	check := func(want float32) {
		t.Helper()
		for _, tt := range []*compute.Tensor{a, c} {
			vals := make([]float32, tt.Len())
			b.Read(vals, tt)
			for _, v := range vals {
				if v != want {
					t.Fatalf("state holds %g, want %g", v, want)
				}
			}
		}
	}
	// Checkpoints every 10 positions up to 200.
	for l := 10; l <= 200; l += 10 {
		st.advance(10)
		fill(float32(l))
		st.Checkpoint(l)
	}
	if len(st.saved) != maxCheckpoints {
		t.Fatalf("%d checkpoints kept, want %d", len(st.saved), maxCheckpoints)
	}
	var lengths []int
	for _, c := range st.saved {
		lengths = append(lengths, c.length)
	}
	t.Logf("checkpoints kept: %v", lengths)
	if lengths[0] != 10 || lengths[len(lengths)-1] != 200 || lengths[len(lengths)-2] != 190 {
		t.Errorf("kept %v: want the oldest, the newest and its neighbour", lengths)
	}
	// Restoring to 195 gives 190; to a length between kept ones, the one
	// before.
	if got := st.Restore(195); got != 190 {
		t.Fatalf("Restore(195) = %d", got)
	}
	check(190)
	if len(st.saved) != maxCheckpoints-1 {
		t.Errorf("Restore(195) kept %d checkpoints, want %d", len(st.saved), maxCheckpoints-1)
	}
	mid := lengths[3]
	if got := st.Restore(mid + 5); got != mid {
		t.Fatalf("Restore(%d) = %d, want %d", mid+5, got, mid)
	}
	check(float32(mid))
	// Restoring past the state's length changes nothing.
	if got := st.Restore(mid + 100); got != mid {
		t.Fatalf("Restore beyond the state = %d, want %d", got, mid)
	}
	// Before the first checkpoint: zeros.
	if got := st.Restore(5); got != 0 {
		t.Fatalf("Restore(5) = %d, want 0", got)
	}
	check(0)
	if len(st.saved) != 0 {
		t.Errorf("%d checkpoints left after restoring to 0", len(st.saved))
	}
}

// syntheticFalconH1 returns a small Falcon-H1 with random weights and
// every option the fixture leaves at its default: µP multipliers, the
// gated RMSNorm over two groups, normalised before the gate, and a
// clamped time step.
func syntheticFalconH1(t *testing.T) (*Config, Source) {
	cfg, err := ParseConfig([]byte(`{"model_type":"falcon_h1","vocab_size":40,"hidden_size":16,"num_hidden_layers":2,
		"num_attention_heads":4,"num_key_value_heads":2,"head_dim":4,"intermediate_size":24,"hidden_act":"silu",
		"rms_norm_eps":1e-5,"max_position_embeddings":128,"mamba_n_heads":4,"mamba_d_head":8,"mamba_d_state":6,
		"mamba_n_groups":2,"mamba_d_ssm":32,"mamba_d_conv":3,"mamba_chunk_size":16,"mamba_rms_norm":true,
		"mamba_norm_before_gate":true,"time_step_limit":[0.01,0.5],
		"attention_in_multiplier":0.8,"attention_out_multiplier":0.9,"ssm_in_multiplier":1.25,"ssm_out_multiplier":0.7,
		"key_multiplier":1.5,"lm_head_multiplier":0.5,"embedding_multiplier":2,"mlp_multipliers":[0.75,1.25],
		"ssm_multipliers":[0.5,1.5,0.8,1.2,0.9]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	src := memSource{}
	hid, inner, gn, heads := 16, 32, 12, 4
	convDim := inner + 2*gn
	src.add(r, "model.embed_tokens.weight", 1, 40, hid)
	src.add(r, "model.final_layernorm.weight", 1, hid)
	src.add(r, "lm_head.weight", 0.5, 40, hid)
	for i := range 2 {
		p := fmt.Sprintf("model.layers.%d.", i)
		src.add(r, p+"input_layernorm.weight", 1, hid)
		src.add(r, p+"pre_ff_layernorm.weight", 1, hid)
		src.add(r, p+"feed_forward.gate_proj.weight", 0.3, 24, hid)
		src.add(r, p+"feed_forward.up_proj.weight", 0.3, 24, hid)
		src.add(r, p+"feed_forward.down_proj.weight", 0.3, hid, 24)
		a := p + "self_attn."
		src.add(r, a+"q_proj.weight", 0.5, hid, hid)
		src.add(r, a+"k_proj.weight", 0.5, 8, hid)
		src.add(r, a+"v_proj.weight", 0.5, 8, hid)
		src.add(r, a+"o_proj.weight", 0.5, hid, hid)
		s := p + "mamba."
		src.add(r, s+"in_proj.weight", 0.4, inner+convDim+heads, hid)
		src.add(r, s+"out_proj.weight", 0.4, hid, inner)
		src.add(r, s+"conv1d.weight", 0.6, convDim, 1, 3)
		src.add(r, s+"conv1d.bias", 0.3, convDim)
		src.add(r, s+"dt_bias", 1, heads)
		src.add(r, s+"A_log", 1, heads)
		src.add(r, s+"D", 1, heads)
		src.add(r, s+"norm.weight", 1, inner)
	}
	return cfg, src
}

// TestFalconH1Options runs the options the fixture does not exercise:
// whole, token by token and in chunks must agree.
func TestFalconH1Options(t *testing.T) {
	cfg, src := syntheticFalconH1(t)
	b := cpu.New(2)
	m, err := Load(cfg, src, b)
	if err != nil {
		t.Fatal(err)
	}
	f := m.(*falconH1)
	if mx := f.layers[0].mixer; mx.ones == nil || mx.normGroup != 16 || !mx.normBeforeGate || mx.inScale == nil {
		t.Fatalf("mixer options not applied: group %d, before gate %v, µP vector %v", mx.normGroup, mx.normBeforeGate, mx.inScale != nil)
	}
	r := rand.New(rand.NewPCG(11, 12))
	ids := make([]int32, 25)
	for i := range ids {
		ids[i] = int32(r.IntN(40))
	}
	whole := run(b, m, m.NewState(64), 0, ids, len(ids))
	for _, chunk := range []int{1, 4, 10} {
		if d := maxDiff(run(b, m, m.NewState(64), 0, ids, chunk), whole); d > 1e-5 {
			t.Errorf("chunks of %d: max |Δlogit| = %.2e against the whole sequence", chunk, d)
		}
	}
}

func TestMuPVector(t *testing.T) {
	cfg := &Config{
		SSM:            SSMParams{Heads: 2, Groups: 1, StateSize: 1, Inner: 2},
		FalconH1Params: FalconH1Params{SSMInMultiplier: 2, SSMMultipliers: [5]float64{1, 2, 3, 4, 5}},
	}
	// z: 2 values, x: 2, B: 1, C: 1, dt: 2, each times ssm_in_multiplier.
	want := []float32{2, 2, 4, 4, 6, 8, 10, 10}
	if got := mupVector(cfg); !slices.Equal(got, want) {
		t.Errorf("mupVector = %v, want %v", got, want)
	}
	cfg.SSMInMultiplier, cfg.SSMMultipliers = 1, [5]float64{1, 1, 1, 1, 1}
	if got := mupVector(cfg); got != nil {
		t.Errorf("mupVector of ones = %v, want nil", got)
	}
}
