package convert

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
	"github.com/lem-engine/lem/tokenizer"
)

// gemma4Fixtures are the Gemma 4 fixtures: per-layer inputs and wider
// full-attention heads with a proportional rope, KV-shared layers, and a
// mixture of experts beside the MLP.
var gemma4Fixtures = []string{"gemma4_text", "gemma4_text-kvshared", "gemma4_text-moe"}

// TestGGUFConformanceGemma4 is TestGGUFConformance for the Gemma 4
// fixtures: F32 and BF16 files within 1e-3 of the safetensors logits with
// the greedy ids exact; Q8_0 with top-1 agreement ≥ 95% over all three and
// the median position's logits within 3% of the largest magnitude.
func TestGGUFConformanceGemma4(t *testing.T) {
	checkGGUFConformance(t, gemma4Fixtures, []conformanceType{
		{"f32", 1e-3, false, 0.95},
		{"bf16", 1e-3, false, 0.95},
		{"q8_0", 0.03, true, 0.95},
	})
}

// TestGGUFGemma4Layout checks the names, dims (innermost first), types and
// keys that llama.cpp's converter writes and its gemma4 loader reads.
func TestGGUFGemma4Layout(t *testing.T) {
	type tensor struct {
		dims []int64
		typ  gguf.Type
	}
	tests := []struct {
		fixture string
		tensors map[string]tensor
		keys    map[string]any // uint32, float32 or string values
		arrays  map[string]any // []uint32 or []bool values
		absent  []string
	}{
		{"gemma4_text", map[string]tensor{
			"token_embd.weight":                {[]int64{64, 320}, gguf.Q8_0},
			"output.weight":                    {[]int64{64, 320}, gguf.Q8_0},
			"rope_freqs.weight":                {[]int64{16}, gguf.F32},
			"per_layer_token_embd.weight":      {[]int64{96, 320}, gguf.Q8_0},
			"per_layer_model_proj.weight":      {[]int64{64, 96}, gguf.Q8_0},
			"per_layer_proj_norm.weight":       {[]int64{16}, gguf.F32},
			"blk.0.attn_q.weight":              {[]int64{64, 64}, gguf.Q8_0},
			"blk.3.attn_q.weight":              {[]int64{64, 128}, gguf.Q8_0},
			"blk.3.attn_k_norm.weight":         {[]int64{32}, gguf.F32},
			"blk.0.inp_gate.weight":            {[]int64{64, 16}, gguf.Q8_0},
			"blk.0.proj.weight":                {[]int64{16, 64}, gguf.F16}, // rows of 16 hold no Q8_0 block
			"blk.0.post_norm.weight":           {[]int64{64}, gguf.F32},
			"blk.0.layer_output_scale.weight":  {[]int64{1}, gguf.F32},
			"blk.0.post_attention_norm.weight": {[]int64{64}, gguf.F32},
			"blk.0.ffn_norm.weight":            {[]int64{64}, gguf.F32},
			"blk.0.post_ffw_norm.weight":       {[]int64{64}, gguf.F32},
		}, map[string]any{
			"general.architecture":                    "gemma4",
			"gemma4.attention.key_length":             uint32(32),
			"gemma4.attention.value_length":           uint32(32),
			"gemma4.attention.key_length_swa":         uint32(16),
			"gemma4.attention.value_length_swa":       uint32(16),
			"gemma4.rope.dimension_count":             uint32(32),
			"gemma4.rope.dimension_count_swa":         uint32(16),
			"gemma4.rope.freq_base":                   float32(1e6),
			"gemma4.rope.freq_base_swa":               float32(1e4),
			"gemma4.attention.sliding_window":         uint32(8),
			"gemma4.attention.shared_kv_layers":       uint32(0),
			"gemma4.embedding_length_per_layer_input": uint32(16),
			"gemma4.feed_forward_length":              uint32(128),
			"gemma4.attention.head_count_kv":          uint32(2),
		}, map[string]any{
			"gemma4.attention.sliding_window_pattern": []bool{true, true, true, false, true, false},
		}, []string{"blk.0.ffn_gate_inp.weight", "blk.0.attn_norm.bias"}},
		{"gemma4_text-kvshared", map[string]tensor{
			"blk.3.attn_k.weight": {[]int64{64, 64}, gguf.Q8_0},
			"blk.4.attn_q.weight": {[]int64{64, 64}, gguf.Q8_0},
		}, map[string]any{
			"gemma4.attention.shared_kv_layers": uint32(2),
		}, nil, []string{"blk.4.attn_k.weight", "blk.5.attn_v.weight", "blk.4.attn_k_norm.weight"}},
		{"gemma4_text-moe", map[string]tensor{
			"blk.0.ffn_gate_inp.weight":     {[]int64{64, 4}, gguf.F32},
			"blk.0.ffn_gate_inp.scale":      {[]int64{64}, gguf.F32},
			"blk.0.ffn_down_exps.scale":     {[]int64{4}, gguf.F32},
			"blk.0.ffn_gate_up_exps.weight": {[]int64{64, 64, 4}, gguf.Q8_0},
			"blk.0.ffn_down_exps.weight":    {[]int64{32, 64, 4}, gguf.Q8_0},
			"blk.0.post_ffw_norm_1.weight":  {[]int64{64}, gguf.F32},
			"blk.0.pre_ffw_norm_2.weight":   {[]int64{64}, gguf.F32},
			"blk.0.post_ffw_norm_2.weight":  {[]int64{64}, gguf.F32},
			"blk.0.ffn_gate.weight":         {[]int64{64, 128}, gguf.Q8_0},
		}, map[string]any{
			"gemma4.expert_count":               uint32(4),
			"gemma4.expert_used_count":          uint32(2),
			"gemma4.expert_feed_forward_length": uint32(32),
		}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(fixtures.Dir(t, "archs", tc.fixture), path, GGUFOptions{Type: "q8_0", Threads: 2}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for name, want := range tc.tensors {
				ti, _, ok := f.Tensor(name)
				switch {
				case !ok:
					t.Errorf("no tensor %s", name)
				case !slicesEqual64(ti.Dims, want.dims) || ti.Type != want.typ:
					t.Errorf("%s is %s %v, want %s %v", name, ti.Type, ti.Dims, want.typ, want.dims)
				}
			}
			for _, name := range tc.absent {
				if _, _, ok := f.Tensor(name); ok {
					t.Errorf("tensor %s should be absent", name)
				}
			}
			checkKeys(t, f, tc.keys)
			for key, want := range tc.arrays {
				v, ok := f.Value(key)
				if !ok {
					t.Errorf("no key %s", key)
					continue
				}
				got, _ := gguf.ArrayOf[bool](v)
				if w := want.([]bool); len(got) != len(w) {
					t.Errorf("%s = %v, want %v", key, got, w)
				} else {
					for i := range w {
						if got[i] != w[i] {
							t.Errorf("%s = %v, want %v", key, got, w)
							break
						}
					}
				}
			}
			// The rope_freqs of a quarter of 32 turning: 4 ones, then frozen pairs.
			if tc.fixture == "gemma4_text" {
				_, data, _ := f.Tensor("rope_freqs.weight")
				vals := make([]float32, len(data)/4)
				for i := range vals {
					vals[i] = f32At(data, i)
				}
				for i, v := range vals {
					if want := float32(1); i >= 4 {
						want = 1e30
						if v != want {
							t.Errorf("rope_freqs[%d] = %g, want %g", i, v, want)
						}
					} else if v != want {
						t.Errorf("rope_freqs[%d] = %g, want %g", i, v, want)
					}
				}
			}
		})
	}
}

func slicesEqual64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func f32At(b []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// TestGGUFGemma4Variants converts edited Gemma 4 checkpoints that the
// fixtures do not cover and compares the F32 file's logits with the edited
// checkpoint's: the double-wide MLP of the KV-shared layers (written as a
// per-layer feed_forward_length) and an output projection tied to the
// embeddings (no output.weight, as the published models are).
func TestGGUFGemma4Variants(t *testing.T) {
	tests := []struct {
		name, fixture string
		edit          map[string]any
		weights       func(ts []safetensors.Tensor) []safetensors.Tensor
		check         func(t *testing.T, f *gguf.File)
	}{
		{"double-wide", "gemma4_text-kvshared", map[string]any{"use_double_wide_mlp": true},
			func(ts []safetensors.Tensor) []safetensors.Tensor {
				const hid, ff = 64, 2 * 128
				rng := rand.New(rand.NewPCG(3, 4))
				for i, x := range ts {
					for _, l := range []string{"4", "5"} {
						p := "model.layers." + l + ".mlp."
						switch x.Name {
						case p + "gate_proj.weight", p + "up_proj.weight":
							ts[i] = randomBF16(rng, x.Name, ff, hid)
						case p + "down_proj.weight":
							ts[i] = randomBF16(rng, x.Name, hid, ff)
						}
					}
				}
				return ts
			},
			func(t *testing.T, f *gguf.File) {
				v, _ := f.Value("gemma4.feed_forward_length")
				got, _ := gguf.ArrayOf[uint32](v)
				if want := []uint32{128, 128, 128, 128, 256, 256}; !slices.Equal(got, want) {
					t.Errorf("gemma4.feed_forward_length = %v, want %v", got, want)
				}
			}},
		{"tied", "gemma4_text", map[string]any{"tie_word_embeddings": true},
			func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "lm_head.weight" })
			},
			func(t *testing.T, f *gguf.File) {
				if _, _, ok := f.Tensor("output.weight"); ok {
					t.Error("a tied model's file holds output.weight")
				}
			}},
	}
	b := cpu.New(0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := fixtures.Dir(t, "archs", tc.fixture)
			dir := editedCheckpoint(t, src, tc.edit, tc.weights)
			ref := archref.Load(t, src)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want := runLogits(t, m, b, ref.InputIDs)
			vocab := len(want[0])
			var moved float64
			for i := range want {
				moved = max(moved, archref.MaxDiff(want[i], ref.Logits[i*vocab:(i+1)*vocab]))
			}
			if moved < 1e-2 {
				t.Fatalf("the edited checkpoint's logits are within %.2e of the fixture's", moved)
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: "f32", Threads: 2}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f)
			f.Close()
			g, err := model.OpenGGUF(path, b)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			got := runLogits(t, g, b, ref.InputIDs)
			var worst float64
			for i := range got {
				worst = max(worst, archref.MaxDiff(got[i], want[i]))
			}
			t.Logf("%s: max |Δlogit| %.2e (the edit moved the logits by %.2e)", tc.name, worst, moved)
			if worst > 1e-3 {
				t.Errorf("max |Δlogit| %.3e > 1e-3", worst)
			}
		})
	}
}

// editedCheckpoint writes a copy of the model directory src with config
// keys replaced and, when weights is set, its tensors edited.
func editedCheckpoint(t *testing.T, src string, edit map[string]any, weights func([]safetensors.Tensor) []safetensors.Tensor) string {
	t.Helper()
	dir := t.TempDir()
	var cfg map[string]any
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	maps.Copy(cfg, edit)
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ts []safetensors.Tensor
	for _, n := range st.Names() {
		x, _ := st.Tensor(n)
		ts = append(ts, x)
	}
	if weights != nil {
		ts = weights(ts)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randomBF16 is a tensor of normal values (σ 0.1) in bf16.
func randomBF16(rng *rand.Rand, name string, shape ...int) safetensors.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(data[2*i:], half.F32ToBF16(float32(rng.NormFloat64()*0.1)))
	}
	return safetensors.Tensor{Name: name, DType: safetensors.BF16, Shape: shape, Data: data}
}

// TestGemma4TokenizerGGUF writes a SentencePiece-style BPE tokenizer (the
// gemma3 fixture, the family Gemma 4's comes from) as the gemma4 GGUF
// vocabulary, reads it back and checks every reference encoding, with and
// without special tokens, and decoding.
func TestGemma4TokenizerGGUF(t *testing.T) {
	dir := fixtures.Dir(t, "tokenizers", "gemma3")
	kv, err := TokenizerKV(dir, 0, &model.Config{ModelType: "gemma4_text"})
	if err != nil {
		t.Fatal(err)
	}
	f := ggufWithKV(t, kv)
	if m, _ := f.String("tokenizer.ggml.model"); m != "gemma4" {
		t.Fatalf("tokenizer.ggml.model = %q, want gemma4", m)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			Text           string  `json:"text"`
			IDs            []int32 `json:"ids"`
			IDsWithSpecial []int32 `json:"ids_with_special"`
			Decoded        string  `json:"decoded"`
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for i, c := range ref.Cases {
		if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
			t.Errorf("case %d %q: Encode(false)\n got %v\nwant %v", i, c.Text, got, c.IDs)
		}
		if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsWithSpecial) {
			t.Errorf("case %d %q: Encode(true)\n got %v\nwant %v", i, c.Text, got, c.IDsWithSpecial)
		}
		if got := tok.Decode(c.IDs, false); got != c.Decoded {
			t.Errorf("case %d %q: Decode = %q, want %q", i, c.Text, got, c.Decoded)
		}
	}
	t.Logf("gemma3 vocabulary as gemma4 GGUF: %d reference cases checked", len(ref.Cases))
}
