package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// TestHybridNeedsBackendCapabilities checks that loading a hybrid model
// on a backend without the recurrent operations fails naming the one that
// is missing.
func TestHybridNeedsBackendCapabilities(t *testing.T) {
	c := cpu.New(1)
	for _, name := range []string{"qwen3_5_text", "qwen3_next", "qwen3_5_moe_text", "olmo_hybrid"} {
		dir := fixtures.Dir(t, "archs", name)
		for _, tc := range []struct {
			b    compute.Backend
			want string
		}{
			{plainBackend{c}, "compute.Convolver"},
			{convOnly{c, c}, "compute.DeltaRuler"},
		} {
			m, err := OpenDir(dir, tc.b)
			if err == nil {
				m.Close()
				t.Fatalf("%s: loaded on a backend without %s", name, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %q does not name %s", name, err, tc.want)
			}
		}
	}
}

func TestLinearAttentionConfig(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "qwen3_5_text")
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := []int{c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim}
	if want := []int{2, 4, 16, 16, 4}; !slices.Equal(got, want) {
		t.Errorf("linear key heads, value heads, key dim, value dim, conv width = %v, want %v", got, want)
	}
	if want := []string{linear, linear, linear, full}; !slices.Equal(c.LayerTypes, want) {
		t.Errorf("LayerTypes = %q, want %q", c.LayerTypes, want)
	}
	if p := c.Rope(FullAttention); p.PartialRotaryFactor != 0.25 {
		t.Errorf("partial rotary factor %g, want 0.25", p.PartialRotaryFactor)
	}

	base := `"model_type":"qwen3_next","vocab_size":10,"hidden_size":8,"num_hidden_layers":4,"num_attention_heads":2`
	c, err = ParseConfig([]byte(`{` + base + `,"full_attention_interval":4,"linear_num_key_heads":16,"linear_num_value_heads":32}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.FullAttentionInterval != 4 || !slices.Equal(c.LayerTypes, []string{linear, linear, linear, full}) {
		t.Errorf("full_attention_interval 4: interval %d, layer types %q", c.FullAttentionInterval, c.LayerTypes)
	}
	for _, tc := range []struct{ json, want string }{
		{`"linear_num_key_heads":3,"linear_num_value_heads":4`, `key "linear_num_value_heads": 4 linear value heads are not a multiple of 3`},
		{`"linear_key_head_dim":-1`, `key "linear_key_head_dim": want a non-negative integer`},
		{`"linear_conv_kernel_dim":"4"`, `key "linear_conv_kernel_dim": want a non-negative integer`},
	} {
		if _, err := ParseConfig([]byte(`{` + base + `,` + tc.json + `}`)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.json, err, tc.want)
		}
	}
}

// TestHybridMissingLinearKeys checks that a hybrid config without the
// linear-attention geometry fails to load with the key named.
func TestHybridMissingLinearKeys(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,"num_hidden_layers":2,
		"num_attention_heads":2,"hidden_act":"silu","layer_types":["linear_attention","full_attention"],
		"linear_num_key_heads":1,"linear_num_value_heads":1,"linear_key_head_dim":4,"linear_value_head_dim":4}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(cfg, nil, cpu.New(1))
	if err == nil || !strings.Contains(err.Error(), `"linear_conv_kernel_dim"`) {
		t.Errorf("Load = %v, want an error naming linear_conv_kernel_dim", err)
	}
}

// TestHybridCheckpoints checks that a hybrid state's checkpoints hold both
// its convolution windows and its delta-rule states (the bookkeeping itself
// is TestRecurrentCheckpoints').
func TestHybridCheckpoints(t *testing.T) {
	b := cpu.New(1)
	m, err := OpenDir(fixtures.Dir(t, "archs", "qwen3_5_text"), b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st := m.NewState(64).(*hybridState)
	// mark fills every recurrent tensor with v; value reads one back.
	mark := func(v float32) {
		for _, ts := range [][]*compute.Tensor{st.conv, st.delta} {
			for _, x := range ts {
				if x != nil {
					vals := make([]float32, x.Len())
					for i := range vals {
						vals[i] = v
					}
					b.Upload(x, vals)
				}
			}
		}
	}
	value := func() (conv, delta float32) {
		c, d := make([]float32, st.conv[0].Len()), make([]float32, st.delta[2].Len())
		b.Read(c, st.conv[0])
		b.Read(d, st.delta[2])
		return c[len(c)-1], d[len(d)-1]
	}
	r := State(st).(Recurrent)
	for _, n := range []int{8, 16, 24} {
		mark(float32(n))
		st.advance(8)
		r.Checkpoint(n)
	}
	mark(-1)
	st.advance(5)
	for _, tc := range []struct{ n, want int }{{20, 16}, {10, 8}, {3, 0}} {
		if got := r.Restore(tc.n); got != tc.want {
			t.Fatalf("Restore(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if c, d := value(); c != float32(tc.want) || d != float32(tc.want) {
			t.Errorf("after Restore(%d): state holds %g, %g, want %d", tc.n, c, d, tc.want)
		}
	}
}
