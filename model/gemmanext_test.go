package model

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/safetensors"
)

// hiding is a Source without some tensors.
type hiding struct {
	Source
	hidden string
}

func (h hiding) Lookup(name string) (Stored, bool) {
	if name == h.hidden {
		return Stored{}, false
	}
	return h.Source.Lookup(name)
}

// TestGemmaNextLoadErrors checks that Gemma 3n and Gemma 4 checkpoints
// they cannot run fail to load with an error naming the key, tensor or
// capability at fault.
func TestGemmaNextLoadErrors(t *testing.T) {
	tests := []struct {
		name, fixture string
		key           string          // config key to set
		value         json.RawMessage // its value
		hide          string          // tensor to hide
		plain         bool            // load on a backend without optional operations
		want          string
	}{
		{name: "k equals v", fixture: "gemma4_text", key: "attention_k_eq_v", value: json.RawMessage("true"), want: `"attention_k_eq_v"`},
		{name: "moe flag not a bool", fixture: "gemma4_text", key: "enable_moe_block", value: json.RawMessage(`"yes"`), want: `"enable_moe_block"`},
		{name: "moe without experts", fixture: "gemma4_text", key: "enable_moe_block", value: json.RawMessage("true"), want: "4 experts, top 0"},
		{name: "moe on a plain backend", fixture: "gemma4_text-moe", plain: true, want: "compute.Experts"},
		{name: "missing k_norm", fixture: "gemma4_text", hide: "model.layers.3.self_attn.k_norm.weight", want: "model.layers.3.self_attn.k_norm.weight is missing"},
		{name: "missing per-layer table", fixture: "gemma4_text-kvshared", hide: "model.embed_tokens_per_layer.weight", want: "model.embed_tokens_per_layer.weight is missing"},
		{name: "missing layer scalar keeps 1", fixture: "gemma4_text", hide: "model.layers.2.layer_scalar"},
		{name: "AltUp on a plain backend", fixture: "gemma3n_text", plain: true, want: "compute.RowOps"},
		{name: "missing AltUp router", fixture: "gemma3n_text", hide: "model.layers.5.altup.modality_router.weight", want: "model.layers.5.altup.modality_router.weight is missing"},
		{name: "sparsity per layer", fixture: "gemma3n_text", key: "activation_sparsity_pattern", value: json.RawMessage("[0.9]"), want: `"activation_sparsity_pattern": 1 entries for 6 layers`},
		{name: "sparsity of 1", fixture: "gemma3n_text", key: "activation_sparsity_pattern", value: json.RawMessage("[1,0,0,0,0,0]"), want: "sparsity 1 is not below 1"},
		{name: "active stream out of range", fixture: "gemma3n_text", key: "altup_active_idx", value: json.RawMessage("4"), want: "active stream 4 of 4"},
		{name: "laurel rank", fixture: "gemma3n_text", key: "laurel_rank", value: json.RawMessage("0"), want: `"laurel_rank"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", tt.fixture)
			cfg, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != "" {
				cfg.Raw[tt.key] = tt.value
			}
			st, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var src Source = safetensorsSource{st}
			if tt.hide != "" {
				src = hiding{src, tt.hide}
			}
			var b compute.Backend = cpu.New(1)
			if tt.plain {
				b = plainBackend{b}
			}
			_, err = Load(cfg, src, b)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Load error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
