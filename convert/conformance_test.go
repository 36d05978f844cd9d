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
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
)

// runLogits feeds the 40 reference tokens at once and returns every row.
func runLogits(t *testing.T, m model.Model, b compute.Backend, ids []int32) [][]float32 {
	t.Helper()
	s := engine.NewSession(m, b, 64)
	rows, err := s.AppendAll(ids)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// greedy decodes len(ref.GreedyIDs) tokens after the prompt, one at a time
// through the cache, and returns the ids and each step's logits.
func greedy(t *testing.T, m model.Model, b compute.Backend, ref *archref.Reference) ([]int32, [][]float32) {
	t.Helper()
	s := engine.NewSession(m, b, 64)
	logits, err := s.Append(ref.GreedyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	var steps [][]float32
	for range ref.GreedyIDs {
		steps = append(steps, logits)
		id := argmax(logits)
		ids = append(ids, id)
		if logits, err = s.Append([]int32{id}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, steps
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// forcedAgreement feeds the reference greedy run (prompt and continuation)
// and counts the steps whose top-1 token is the reference's next token.
func forcedAgreement(t *testing.T, m model.Model, b compute.Backend, ref *archref.Reference) int {
	t.Helper()
	seq := append(append([]int32{}, ref.GreedyPrompt...), ref.GreedyIDs...)
	rows := runLogits(t, m, b, seq)
	agree := 0
	for i, want := range ref.GreedyIDs {
		if argmax(rows[len(ref.GreedyPrompt)-1+i]) == want {
			agree++
		}
	}
	return agree
}

// TestGGUFConformance converts every dense fixture to GGUF and checks that
// the file gives the logits of the safetensors checkpoint:
//
//   - F32, F16, BF16: within 1e-3 of the safetensors model's logits and of
//     the reference logits, and the reference greedy ids exactly;
//   - Q8_0: top-1 agreement with the reference greedy run (teacher-forced)
//     on at least 95% of the steps of all fixtures together, and logits
//     within 3% of the largest logit magnitude of the safetensors model
//     (observed: at most 2.2% on these random-weight models);
//   - Q4_K_M: top-1 agreement on at least 80% of the steps (observed:
//     182/216, 84.3%) and logits within 20% of the largest logit magnitude
//     (observed: 4.6-16.6%).
func TestGGUFConformance(t *testing.T) {
	checkGGUFConformance(t, archref.Dense, []conformanceType{
		{"f32", 1e-3, false, 0.95},
		{"f16", 1e-3, false, 0.95},
		{"bf16", 1e-3, false, 0.95},
		{"q8_0", 0.03, false, 0.95},
		{"q4_k_m", 0.20, false, 0.80},
	})
}

// modernFamilies are the fixtures of the families beyond the dense ones
// (mixtures of experts, state-space and hybrid stacks) that ToGGUF writes
// and OpenGGUF reads.
var modernFamilies = []string{"qwen3_moe", "gpt_oss", "mamba2", "lfm2", "falcon_h1", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "gemma3n_text", "olmo_hybrid"}

// TestGGUFConformanceModern is TestGGUFConformance for modernFamilies:
// F32 and BF16 files within 1e-3 of the safetensors logits and the greedy
// ids exact; Q8_0 with top-1 agreement ≥ 95% over all of them, and the
// median position's logits within 3% of the largest magnitude (observed:
// about 1.5%, with single positions up to 15% where a near-tied expert
// choice flips).
func TestGGUFConformanceModern(t *testing.T) {
	checkGGUFConformance(t, modernFamilies, []conformanceType{
		{"f32", 1e-3, false, 0.95},
		{"bf16", 1e-3, false, 0.95},
		{"q8_0", 0.03, true, 0.95},
	})
}

// conformanceType is a GGUF file type and the bounds on its logits.
type conformanceType struct {
	typ string
	// bound is the largest |Δlogit| against the safetensors model:
	// absolute for the float types, relative to the largest |logit| for
	// the quantized ones (q…); 0 logs only.
	bound float64
	// median bounds the median position's error instead of the largest:
	// where experts are routed, quantization noise may flip a near-tied
	// choice of expert at a few positions, which moves their logits far
	// more than the noise itself.
	median bool
	// agree is the least teacher-forced greedy top-1 agreement with the
	// reference, over the steps of all fixtures together.
	agree float64
}

// checkGGUFConformance converts each named fixture to GGUF files of the
// given types and compares their logits with the safetensors checkpoint's.
func checkGGUFConformance(t *testing.T, names []string, tests []conformanceType) {
	type tally struct{ agree, steps int }
	totals := map[string]*tally{}
	for _, tc := range tests {
		totals[tc.typ] = &tally{}
	}
	b := cpu.New(0)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			ref := archref.Load(t, dir)
			want := ref.Logits
			st, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			vocab := st.Config().VocabSize
			base := runLogits(t, st, b, ref.InputIDs)
			var refDiff, scale float64
			for i, row := range base {
				refDiff = max(refDiff, archref.MaxDiff(row, want[i*vocab:(i+1)*vocab]))
				for _, v := range row {
					scale = max(scale, math.Abs(float64(v)))
				}
			}

			for _, tc := range tests {
				t.Run(tc.typ, func(t *testing.T) {
					path := filepath.Join(t.TempDir(), name+"."+tc.typ+".gguf")
					res, err := ToGGUF(dir, path, GGUFOptions{Type: tc.typ, Threads: 2})
					if err != nil {
						t.Fatal(err)
					}
					for _, w := range res.Warnings {
						t.Logf("%s %s: warning: %s", name, tc.typ, w)
					}
					m, err := model.OpenGGUFWith(path, b, model.GGUFOptions{DequantizeToF32: true})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					got := runLogits(t, m, b, ref.InputIDs)
					var worst, worstRef float64
					rowDiffs := make([]float64, len(got))
					for i := range got {
						rowDiffs[i] = archref.MaxDiff(got[i], base[i])
						worst = max(worst, rowDiffs[i])
						worstRef = max(worstRef, archref.MaxDiff(got[i], want[i*vocab:(i+1)*vocab]))
					}
					slices.Sort(rowDiffs)
					median := rowDiffs[len(rowDiffs)/2]
					agree := forcedAgreement(t, m, b, ref)
					totals[tc.typ].agree += agree
					totals[tc.typ].steps += len(ref.GreedyIDs)
					t.Logf("%-11s %-6s %7d → %7d bytes; max |Δlogit| %.2e vs safetensors (%.2e of max |logit| %.2f; median position %.2e), %.2e vs reference; greedy top-1 %d/%d",
						name, tc.typ, res.InBytes, res.FileBytes, worst, worst/scale, scale, median, worstRef, agree, len(ref.GreedyIDs))
					switch quantized := strings.HasPrefix(tc.typ, "q"); {
					case quantized && tc.median:
						if median > tc.bound*scale {
							t.Errorf("median position's max |Δlogit| %.3e is %.2f%% of max |logit|, above %.0f%%", median, 100*median/scale, 100*tc.bound)
						}
					case quantized:
						if tc.bound > 0 && worst > tc.bound*scale {
							t.Errorf("max |Δlogit| %.3e is %.2f%% of max |logit|, above %.0f%%", worst, 100*worst/scale, 100*tc.bound)
						}
					case tc.bound > 0:
						if worst > tc.bound || worstRef > tc.bound+refDiff {
							t.Errorf("max |Δlogit| %.3e (reference %.3e) > %.0e", worst, worstRef, tc.bound)
						}
						ids, _ := greedy(t, m, b, ref)
						for i := range ids {
							if ids[i] != ref.GreedyIDs[i] {
								t.Fatalf("greedy ids differ at step %d:\n got %v\nwant %v", i, ids, ref.GreedyIDs)
							}
						}
					}
				})
			}
		})
	}
	for _, tc := range tests {
		tl := totals[tc.typ]
		if tl.steps == 0 {
			continue
		}
		frac := float64(tl.agree) / float64(tl.steps)
		t.Logf("%s: greedy top-1 agreement %d/%d steps (%.1f%%)", tc.typ, tl.agree, tl.steps, 100*frac)
		if frac < tc.agree {
			t.Errorf("%s: greedy top-1 agreement %.1f%% < %.0f%%", tc.typ, 100*frac, 100*tc.agree)
		}
	}
}

// TestGGUFTypesWritten checks the per-tensor types of the recipes on a
// fixture: 1-D tensors in F32, and the fallbacks llama.cpp takes for rows
// of 64 and 128 elements.
func TestGGUFTypesWritten(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	tests := []struct {
		typ  string
		want map[string]gguf.Type
	}{
		{"f16", map[string]gguf.Type{"token_embd.weight": gguf.F16, "blk.0.attn_norm.weight": gguf.F32, "blk.0.attn_q.weight": gguf.F16, "output.weight": gguf.F16}},
		{"q8_0", map[string]gguf.Type{"token_embd.weight": gguf.Q8_0, "blk.0.attn_norm.weight": gguf.F32, "output.weight": gguf.Q8_0}},
		{"q4_0", map[string]gguf.Type{"token_embd.weight": gguf.Q4_0, "blk.1.attn_k.weight": gguf.Q4_0, "output.weight": gguf.Q8_0}},
		// Rows of 64 are not whole Q4_K blocks: Q4_K falls back to Q5_0,
		// Q6_K to Q8_0. Of 4 layers, llama.cpp's rule gives layers 2 and 3
		// more bits in attn_v and ffn_down (Q6_K → Q8_0).
		{"q4_k_m", map[string]gguf.Type{
			"blk.1.attn_q.weight": gguf.Q5_0, "blk.0.attn_v.weight": gguf.Q5_0, "blk.3.attn_v.weight": gguf.Q8_0,
			"blk.2.ffn_down.weight": gguf.Q8_0, "blk.1.ffn_down.weight": gguf.Q5_0, "output.weight": gguf.Q8_0}},
		{"q2_k", map[string]gguf.Type{"blk.1.attn_q.weight": gguf.Q4_0, "blk.1.ffn_down.weight": gguf.Q4_0, "output.weight": gguf.Q8_0}},
	}
	for _, tc := range tests {
		t.Run(tc.typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: tc.typ}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for name, want := range tc.want {
				ti, _, ok := f.Tensor(name)
				if !ok {
					t.Errorf("no tensor %s", name)
					continue
				}
				if ti.Type != want {
					t.Errorf("%s is %s, want %s", name, ti.Type, want)
				}
			}
			if ft, _ := f.Uint("general.file_type"); ft == 0 && tc.typ != "f32" {
				t.Errorf("general.file_type is 0")
			}
		})
	}
}

// TestGGUFModernLayout checks the names, shapes (GGUF dims, innermost
// first), types and keys that llama.cpp's converter writes and its loader
// expects for the modern families (convert_hf_to_gguf.py; src/models/*.cpp
// create_tensor shapes).
func TestGGUFModernLayout(t *testing.T) {
	type tensor struct {
		dims []int64
		typ  gguf.Type
	}
	tests := []struct {
		fixture string
		tensors map[string]tensor
		keys    map[string]any // uint32, float32, bool or string values
		absent  []string
	}{
		{"qwen3_moe", map[string]tensor{
			"blk.0.ffn_gate_inp.weight":  {[]int64{64, 4}, gguf.F32},
			"blk.0.ffn_gate_exps.weight": {[]int64{64, 32, 4}, gguf.Q8_0},
			"blk.1.ffn_up_exps.weight":   {[]int64{64, 32, 4}, gguf.Q8_0},
			"blk.3.ffn_down_exps.weight": {[]int64{32, 64, 4}, gguf.Q8_0},
			"blk.0.attn_q_norm.weight":   {[]int64{16}, gguf.F32},
			"blk.0.ffn_norm.weight":      {[]int64{64}, gguf.F32},
		}, map[string]any{
			"general.architecture":                      "qwen3moe",
			"qwen3moe.expert_count":                     uint32(4),
			"qwen3moe.expert_used_count":                uint32(2),
			"qwen3moe.expert_feed_forward_length":       uint32(32),
			"qwen3moe.feed_forward_length":              uint32(128),
			"qwen3moe.expert_weights_norm":              false,
			"qwen3moe.attention.sliding_window":         uint32(8),
			"qwen3moe.attention.layer_norm_rms_epsilon": float32(1e-6),
		}, []string{"blk.0.ffn_gate.weight", "blk.0.ffn_gate_exps.bias"}},
		{"gpt_oss", map[string]tensor{
			"blk.0.attn_sinks.weight":          {[]int64{4}, gguf.F32},
			"blk.0.post_attention_norm.weight": {[]int64{64}, gguf.F32},
			"blk.0.ffn_gate_inp.weight":        {[]int64{64, 4}, gguf.F32},
			"blk.0.ffn_gate_inp.bias":          {[]int64{4}, gguf.F32},
			"blk.0.ffn_gate_exps.weight":       {[]int64{64, 128, 4}, gguf.Q8_0},
			"blk.0.ffn_up_exps.weight":         {[]int64{64, 128, 4}, gguf.Q8_0},
			"blk.0.ffn_down_exps.weight":       {[]int64{128, 64, 4}, gguf.Q8_0},
			"blk.0.ffn_gate_exps.bias":         {[]int64{128, 4}, gguf.F32},
			"blk.0.ffn_up_exps.bias":           {[]int64{128, 4}, gguf.F32},
			"blk.0.ffn_down_exps.bias":         {[]int64{64, 4}, gguf.F32},
			"blk.0.attn_output.bias":           {[]int64{64}, gguf.F32},
		}, map[string]any{
			"general.architecture":                         "gpt-oss",
			"gpt-oss.expert_count":                         uint32(4),
			"gpt-oss.expert_used_count":                    uint32(2),
			"gpt-oss.expert_feed_forward_length":           uint32(128),
			"gpt-oss.attention.sliding_window":             uint32(8),
			"gpt-oss.rope.scaling.type":                    "yarn",
			"gpt-oss.rope.scaling.factor":                  float32(32),
			"gpt-oss.rope.scaling.original_context_length": uint32(4096),
			"gpt-oss.attention.key_length":                 uint32(16),
		}, []string{"blk.0.ffn_norm.weight", "gpt-oss.attention.sliding_window_pattern"}},
		{"mamba2", map[string]tensor{
			"token_embd.weight":       {[]int64{64, 320}, gguf.Q8_0},
			"output_norm.weight":      {[]int64{64}, gguf.F32},
			"blk.0.attn_norm.weight":  {[]int64{64}, gguf.F32},
			"blk.0.ssm_in.weight":     {[]int64{64, 296}, gguf.Q8_0},
			"blk.0.ssm_conv1d.weight": {[]int64{4, 160}, gguf.F32},
			"blk.0.ssm_conv1d.bias":   {[]int64{160}, gguf.F32},
			"blk.0.ssm_dt.bias":       {[]int64{8}, gguf.F32},
			"blk.0.ssm_a":             {[]int64{1, 8}, gguf.F32},
			"blk.0.ssm_d":             {[]int64{1, 8}, gguf.F32},
			"blk.0.ssm_norm.weight":   {[]int64{128, 1}, gguf.F32},
			"blk.2.ssm_out.weight":    {[]int64{128, 64}, gguf.Q8_0},
		}, map[string]any{
			"general.architecture":        "mamba2",
			"mamba2.ssm.conv_kernel":      uint32(4),
			"mamba2.ssm.inner_size":       uint32(128),
			"mamba2.ssm.state_size":       uint32(16),
			"mamba2.ssm.time_step_rank":   uint32(8),
			"mamba2.ssm.group_count":      uint32(1),
			"mamba2.feed_forward_length":  uint32(0),
			"mamba2.attention.head_count": uint32(0),
			"mamba2.embedding_length":     uint32(64),
		}, []string{"blk.0.ssm_a.weight", "mamba2.rope.freq_base"}},
		{"falcon_h1", map[string]tensor{
			"output_norm.weight":      {[]int64{64}, gguf.F32},
			"blk.0.attn_norm.weight":  {[]int64{64}, gguf.F32},
			"blk.0.ffn_norm.weight":   {[]int64{64}, gguf.F32},
			"blk.0.ssm_in.weight":     {[]int64{64, 2688}, gguf.Q8_0},
			"blk.0.ssm_conv1d.weight": {[]int64{4, 1536}, gguf.F32},
			"blk.0.ssm_a":             {[]int64{1, 128}, gguf.F32},
			"blk.0.ssm_out.weight":    {[]int64{1024, 64}, gguf.Q8_0},
			"blk.0.attn_k.weight":     {[]int64{64, 32}, gguf.Q8_0},
			"blk.0.ffn_gate.weight":   {[]int64{64, 128}, gguf.Q8_0},
		}, map[string]any{
			"general.architecture":           "falcon-h1",
			"falcon-h1.ssm.inner_size":       uint32(1024),
			"falcon-h1.ssm.state_size":       uint32(256),
			"falcon-h1.ssm.time_step_rank":   uint32(128),
			"falcon-h1.feed_forward_length":  uint32(128),
			"falcon-h1.attention.head_count": uint32(4),
			"falcon-h1.attention.key_length": uint32(16),
		}, []string{"blk.0.ssm_norm.weight"}},
		{"lfm2", map[string]tensor{
			"token_embd_norm.weight":   {[]int64{64}, gguf.F32},
			"blk.0.attn_norm.weight":   {[]int64{64}, gguf.F32},
			"blk.0.attn_q_norm.weight": {[]int64{16}, gguf.F32},
			"blk.0.attn_output.weight": {[]int64{64, 64}, gguf.Q8_0},
			"blk.0.ffn_gate.weight":    {[]int64{64, 256}, gguf.Q8_0},
		}, map[string]any{
			"general.architecture":     "lfm2",
			"lfm2.shortconv.l_cache":   uint32(3),
			"lfm2.feed_forward_length": uint32(256),
		}, []string{"output_norm.weight"}},
		{"qwen3_next", map[string]tensor{
			"blk.0.attn_qkv.weight":            {[]int64{64, 128}, gguf.Q8_0},
			"blk.0.attn_gate.weight":           {[]int64{64, 64}, gguf.Q8_0},
			"blk.0.ssm_ba.weight":              {[]int64{64, 8}, gguf.Q8_0},
			"blk.0.ssm_conv1d.weight":          {[]int64{4, 128}, gguf.F32},
			"blk.0.ssm_a":                      {[]int64{4}, gguf.F32},
			"blk.0.ssm_dt.bias":                {[]int64{4}, gguf.F32},
			"blk.0.ssm_norm.weight":            {[]int64{16}, gguf.F32},
			"blk.0.ssm_out.weight":             {[]int64{64, 64}, gguf.Q8_0},
			"blk.0.post_attention_norm.weight": {[]int64{64}, gguf.F32},
			"blk.0.ffn_gate_exps.weight":       {[]int64{64, 32, 4}, gguf.Q8_0},
			"blk.0.ffn_gate_inp_shexp.weight":  {[]int64{64, 1}, gguf.F32},
			"blk.0.ffn_up_shexp.weight":        {[]int64{64, 32}, gguf.Q8_0},
			"blk.0.ffn_down_shexp.weight":      {[]int64{32, 64}, gguf.Q8_0},
			"blk.3.attn_q.weight":              {[]int64{64, 128}, gguf.Q8_0},
			"blk.3.attn_k_norm.weight":         {[]int64{16}, gguf.F32},
		}, map[string]any{
			"general.architecture":                        "qwen3next",
			"qwen3next.ssm.conv_kernel":                   uint32(4),
			"qwen3next.ssm.state_size":                    uint32(16),
			"qwen3next.ssm.group_count":                   uint32(2),
			"qwen3next.ssm.time_step_rank":                uint32(4),
			"qwen3next.ssm.inner_size":                    uint32(64),
			"qwen3next.full_attention_interval":           uint32(4),
			"qwen3next.rope.dimension_count":              uint32(4),
			"qwen3next.expert_feed_forward_length":        uint32(32),
			"qwen3next.expert_shared_feed_forward_length": uint32(32),
			"qwen3next.feed_forward_length":               uint32(128),
		}, []string{"blk.0.ssm_in.weight", "blk.0.ssm_beta.weight", "blk.3.attn_qkv.weight", "qwen3next.rope.dimension_sections", "qwen3next.attention.recurrent_layers"}},
		{"qwen3_5_text", map[string]tensor{
			"blk.0.attn_qkv.weight":   {[]int64{64, 128}, gguf.Q8_0},
			"blk.0.attn_gate.weight":  {[]int64{64, 64}, gguf.Q8_0},
			"blk.0.ssm_beta.weight":   {[]int64{64, 4}, gguf.Q8_0},
			"blk.0.ssm_alpha.weight":  {[]int64{64, 4}, gguf.Q8_0},
			"blk.0.ssm_conv1d.weight": {[]int64{4, 128}, gguf.F32},
			"blk.0.ffn_gate.weight":   {[]int64{64, 128}, gguf.Q8_0},
		}, map[string]any{
			"general.architecture":           "qwen35",
			"qwen35.full_attention_interval": uint32(4),
			"qwen35.feed_forward_length":     uint32(128),
			"qwen35.ssm.time_step_rank":      uint32(4),
		}, []string{"blk.0.ssm_ba.weight", "blk.0.ffn_gate_inp.weight", "qwen35.expert_count"}},
		{"qwen3_5_moe_text", map[string]tensor{
			"blk.0.ssm_beta.weight":           {[]int64{64, 4}, gguf.Q8_0},
			"blk.0.ffn_gate_inp.weight":       {[]int64{64, 4}, gguf.F32},
			"blk.0.ffn_down_exps.weight":      {[]int64{32, 64, 4}, gguf.Q8_0},
			"blk.0.ffn_gate_inp_shexp.weight": {[]int64{64, 1}, gguf.F32},
		}, map[string]any{
			"general.architecture":                        "qwen35moe",
			"qwen35moe.expert_count":                      uint32(4),
			"qwen35moe.expert_used_count":                 uint32(2),
			"qwen35moe.expert_shared_feed_forward_length": uint32(32),
		}, []string{"blk.0.ffn_gate.weight", "qwen35moe.feed_forward_length"}},
		{"gemma3n_text", map[string]tensor{
			"per_layer_token_embd.weight":      {[]int64{96, 320}, gguf.Q8_0},
			"per_layer_model_proj.weight":      {[]int64{64, 96}, gguf.Q8_0},
			"per_layer_proj_norm.weight":       {[]int64{16}, gguf.F32},
			"altup_proj.weight":                {[]int64{64, 64, 3}, gguf.Q8_0},
			"altup_unembd_proj.weight":         {[]int64{64, 64, 3}, gguf.Q8_0},
			"blk.0.inp_gate.weight":            {[]int64{64, 16}, gguf.Q8_0},
			"blk.0.proj.weight":                {[]int64{16, 64}, gguf.F16},
			"blk.0.post_norm.weight":           {[]int64{64}, gguf.F32},
			"blk.0.altup_correct_coef.weight":  {[]int64{4, 4}, gguf.F32},
			"blk.0.altup_predict_coef.weight":  {[]int64{4, 16}, gguf.F32},
			"blk.0.altup_router.weight":        {[]int64{64, 4}, gguf.Q8_0},
			"blk.0.altup_correct_scale.weight": {[]int64{64}, gguf.F32},
			"blk.0.laurel_l.weight":            {[]int64{64, 8}, gguf.Q8_0},
			"blk.0.laurel_post_norm.weight":    {[]int64{64}, gguf.F32},
			"blk.0.post_ffw_norm.weight":       {[]int64{64}, gguf.F32},
		}, map[string]any{
			"general.architecture":                     "gemma3n",
			"gemma3n.altup.active_idx":                 uint32(0),
			"gemma3n.altup.num_inputs":                 uint32(4),
			"gemma3n.embedding_length_per_layer_input": uint32(16),
			"gemma3n.attention.shared_kv_layers":       uint32(2),
			"gemma3n.attention.sliding_window":         uint32(8),
			"gemma3n.rope.freq_base":                   float32(1e6),
			"gemma3n.rope.freq_base_swa":               float32(1e4),
			"gemma3n.final_logit_softcapping":          float32(30),
		}, []string{"altup_proj.0.weight", "gemma3n.attention.scale"}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(fixtures.Dir(t, "archs", tc.fixture), path, GGUFOptions{Type: "q8_0"}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for name, want := range tc.tensors {
				ti, _, ok := f.Tensor(name)
				if !ok {
					t.Errorf("no tensor %s", name)
					continue
				}
				if !slices.Equal(ti.Dims, want.dims) || ti.Type != want.typ {
					t.Errorf("%s: %s %v, want %s %v", name, ti.Type, ti.Dims, want.typ, want.dims)
				}
			}
			checkKeys(t, f, tc.keys)
			for _, name := range tc.absent {
				if _, _, ok := f.Tensor(name); ok {
					t.Errorf("tensor %s written", name)
				}
				if _, ok := f.Value(name); ok {
					t.Errorf("key %s written", name)
				}
			}
		})
	}
}

// TestGGUFVariants converts checkpoints that exercise what the fixtures
// leave at trivial values: Falcon-H1 with µP multipliers other than 1
// (folded into the weights by the converter) and LFM2 with convolution
// layers (the fixture's layers all attend). Each is the fixture's weights
// under an edited config, plus random convolution weights for LFM2; the
// F32 GGUF file must give the safetensors checkpoint's logits.
func TestGGUFVariants(t *testing.T) {
	tests := []struct {
		fixture string
		edit    map[string]any // config keys replaced
		// weights edits the tensors; nil keeps the fixture's file.
		weights func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor
	}{
		{"falcon_h1", map[string]any{
			"attention_in_multiplier": 0.7, "attention_out_multiplier": 1.3, "key_multiplier": 0.5,
			"embedding_multiplier": 2.0, "lm_head_multiplier": 0.25, "mlp_multipliers": []float64{0.8, 1.25},
			"ssm_in_multiplier": 1.5, "ssm_out_multiplier": 0.6, "ssm_multipliers": []float64{1.1, 0.9, 1.2, 0.8, 1.05},
		}, nil},
		{"lfm2", map[string]any{
			"layer_types":    []string{"full_attention", "conv", "conv", "full_attention"},
			"full_attn_idxs": []int{0, 3},
		}, func(t *testing.T, ts []safetensors.Tensor) []safetensors.Tensor {
			const hid, width = 64, 3
			rng := rand.New(rand.NewPCG(1, 2))
			random := func(name string, shape ...int) safetensors.Tensor {
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
			ts = slices.DeleteFunc(ts, func(x safetensors.Tensor) bool {
				return strings.Contains(x.Name, "layers.1.self_attn") || strings.Contains(x.Name, "layers.2.self_attn")
			})
			for _, l := range []string{"1", "2"} {
				p := "model.layers." + l + ".conv."
				ts = append(ts, random(p+"in_proj.weight", 3*hid, hid), random(p+"out_proj.weight", hid, hid), random(p+"conv.weight", hid, 1, width))
			}
			return ts
		}},
	}
	b := cpu.New(0)
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			src := fixtures.Dir(t, "archs", tc.fixture)
			dir := t.TempDir()
			var cfg map[string]any
			data, err := os.ReadFile(filepath.Join(src, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			maps.Copy(cfg, tc.edit)
			if data, err = json.Marshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.weights == nil {
				if err := os.Symlink(filepath.Join(src, "model.safetensors"), filepath.Join(dir, "model.safetensors")); err != nil {
					t.Fatal(err)
				}
			} else {
				st, err := safetensors.OpenDir(src)
				if err != nil {
					t.Fatal(err)
				}
				var ts []safetensors.Tensor
				for _, n := range st.Names() {
					x, _ := st.Tensor(n)
					ts = append(ts, x)
				}
				err = safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), tc.weights(t, ts), nil)
				st.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			ref := archref.Load(t, src)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want := runLogits(t, m, b, ref.InputIDs)
			// The edit must matter, or the comparison below proves nothing.
			vocab := len(want[0])
			var moved float64
			for i := range want {
				moved = max(moved, archref.MaxDiff(want[i], ref.Logits[i*vocab:(i+1)*vocab]))
			}
			if moved < 1e-2 {
				t.Fatalf("the edited checkpoint's logits are within %.2e of the fixture's", moved)
			}
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: "f32"}); err != nil {
				t.Fatal(err)
			}
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
			t.Logf("%s variant: max |Δlogit| %.2e", tc.fixture, worst)
			if worst > 1e-3 {
				t.Errorf("max |Δlogit| %.3e > 1e-3", worst)
			}
		})
	}
}

// checkKeys checks that f holds each key with the value given (uint32,
// float32, bool or string).
func checkKeys(t *testing.T, f *gguf.File, keys map[string]any) {
	t.Helper()
	for key, want := range keys {
		v, ok := f.Value(key)
		if !ok {
			t.Errorf("no key %s", key)
			continue
		}
		var got any
		switch want.(type) {
		case uint32:
			n, _ := v.Uint()
			got = uint32(n)
		case float32:
			x, _ := v.Float()
			got = float32(x)
		case bool:
			got, _ = v.Bool()
		case string:
			got, _ = v.Str()
		}
		if got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}
