package model_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// TestGGUFConfigKeys writes fixtures as GGUF files and reads them back: the
// reader gives the Hugging Face config keys that the key tables map, with
// the values of config.json, so the two directions of a table agree.
func TestGGUFConfigKeys(t *testing.T) {
	tests := []struct {
		fixture string
		keys    []string
	}{
		{"llama", []string{"hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"}},
		{"gemma2", []string{"hidden_size", "sliding_window", "final_logit_softcapping", "attn_logit_softcapping"}},
		{"qwen3_moe", []string{"num_experts_per_tok", "moe_intermediate_size"}},
		{"lfm2", []string{"conv_L_cache", "num_attention_heads"}},
		{"qwen3_5_text", []string{"linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads"}},
		{"qwen3_next", []string{"moe_intermediate_size", "shared_expert_intermediate_size", "num_experts"}},
		{"olmo_hybrid", []string{"linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads", "num_key_value_heads"}},
		{"gemma4_text-kvshared", []string{"num_kv_shared_layers", "hidden_size_per_layer_input", "head_dim"}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", tc.fixture)
			want, err := model.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := convert.ToGGUF(dir, path, convert.GGUFOptions{Type: "f32"}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			g, err := model.ReadGGUF(f, model.GGUFOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range tc.keys {
				var w, got float64
				if ok, err := want.Get(key, &w); !ok || err != nil {
					t.Fatalf("config.json: key %s: %v, %v", key, ok, err)
				}
				raw, ok := g.Config.Raw[key]
				if !ok {
					t.Errorf("GGUF config has no key %s", key)
					continue
				}
				if err := json.Unmarshal(raw, &got); err != nil || float32(got) != float32(w) {
					t.Errorf("key %s: GGUF config has %s, config.json %g", key, raw, w)
				}
			}
		})
	}
}
