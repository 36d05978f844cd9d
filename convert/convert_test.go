package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
	"github.com/lem-engine/lem/tokenizer"
)

// TestTokenizerRoundTrip writes each fixture tokenizer as GGUF metadata,
// reads it back with tokenizer.FromGGUF, and wants exactly the reference
// ids for the fixture's reference strings and for the ordinary texts of
// tokenizer/testdata/ordinary, with and without special tokens.
func TestTokenizerRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "llama2", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "tokenizers", name)
			kv, err := TokenizerKV(dir, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := ggufWithKV(t, kv)
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			type refCase struct {
				Text           string  `json:"text"`
				File           string  `json:"file"`
				IDs            []int32 `json:"ids"`
				IDsWithSpecial []int32 `json:"ids_with_special"`
			}
			var cases []refCase
			for _, path := range []string{
				filepath.Join(dir, "reference.json"),
				filepath.Join("..", "tokenizer", "testdata", "ordinary", name+".json"),
			} {
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				var ref struct{ Cases []refCase }
				if err := json.Unmarshal(raw, &ref); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if len(ref.Cases) == 0 {
					t.Fatalf("%s: no cases", path)
				}
				for _, c := range ref.Cases {
					if c.File != "" {
						data, err := os.ReadFile(filepath.Join(filepath.Dir(path), c.File))
						if err != nil {
							t.Fatal(err)
						}
						c.Text = string(data)
					}
					cases = append(cases, c)
				}
			}
			for _, c := range cases {
				what := c.File
				if what == "" {
					what = strconv.Quote(c.Text)
				}
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("%s: Encode(false)\n got %v\nwant %v", what, got, c.IDs)
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("%s: Encode(true)\n got %v\nwant %v", what, got, c.IDsWithSpecial)
				}
			}
		})
	}
}

// ggufWithKV returns a parsed GGUF file holding only the given metadata.
func ggufWithKV(t *testing.T, kv []gguf.KV) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, e := range kv {
		if err := w.SetKV(e.Key, e.Value); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("tokenizer.gguf", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type chatCase struct {
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools"`
	EnableThinking *bool           `json:"enable_thinking"`
	Prompt         string          `json:"prompt"`
	PromptIDs      []int32         `json:"prompt_ids"`
	GreedyIDs      []int32         `json:"greedy_ids"`
}

// TestChatModelGGUF converts the trained chat model and runs every
// reference conversation from the GGUF file alone: the template renders
// the prompt, the tokenizer encodes it, and greedy decoding continues it.
// The float types must reproduce the reference exactly; of the 12
// conversations the quantized ones must reproduce at least 11 (Q8_0 down
// to Q4_0) or 10 (Q3_K_M, Q2_K): every type reproduced all 12 when these
// floors were set.
func TestChatModelGGUF(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Cases []chatCase }
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	// lose is how many conversations each type may get wrong.
	lose := map[string]int{"bf16": 0, "q8_0": 1, "q6_k": 1, "q5_k_m": 1, "q4_k_m": 1, "q4_0": 1, "q3_k_m": 2, "q2_k": 2}
	for _, typ := range []string{"bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0", "q3_k_m", "q2_k"} {
		t.Run(typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chat."+typ+".gguf")
			res, err := ToGGUF(dir, path, GGUFOptions{Type: typ})
			if err != nil {
				t.Fatal(err)
			}
			m, err := engine.Open(path, engine.Options{Backend: cpu.New(0), DequantizeToF32: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Tokenizer == nil || m.Templates == nil {
				t.Fatal("the GGUF file has no tokenizer or no chat template")
			}
			if !slices.Contains(m.StopIDs, 2) {
				t.Fatalf("stop ids %v lack <|im_end|> (2)", m.StopIDs)
			}
			same := 0
			for i, c := range ref.Cases {
				in := map[string]json.RawMessage{"messages": c.Messages, "add_generation_prompt": json.RawMessage("true")}
				if len(c.Tools) > 0 && string(c.Tools) != "null" {
					in["tools"] = c.Tools
				}
				if c.EnableThinking != nil {
					in["enable_thinking"], _ = json.Marshal(*c.EnableThinking)
				}
				data, _ := json.Marshal(in)
				input, err := chat.ParseInput(data)
				if err != nil {
					t.Fatal(err)
				}
				prompt, err := m.Templates.Default().Render(input)
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				if prompt != c.Prompt {
					t.Fatalf("case %d: prompt\n got %q\nwant %q", i, prompt, c.Prompt)
				}
				ids := m.Tokenizer.Encode(prompt, true)
				if !slices.Equal(ids, c.PromptIDs) {
					t.Fatalf("case %d: prompt ids\n got %v\nwant %v", i, ids, c.PromptIDs)
				}
				out, err := m.Generate(context.Background(), m.NewSession(0), engine.Request{Prompt: ids, MaxTokens: 200}, func(engine.Token) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				got := append(slices.Clone(out.IDs), out.StopID)
				if slices.Equal(got, c.GreedyIDs) {
					same++
				} else if typ == "bf16" {
					t.Errorf("case %d: greedy ids\n got %v\nwant %v", i, got, c.GreedyIDs)
				}
			}
			t.Logf("%s: %d → %d bytes (%v); %d/%d conversations identical to the reference", typ, res.InBytes, res.FileBytes, res.Types, same, len(ref.Cases))
			if same < len(ref.Cases)-lose[typ] {
				t.Errorf("%s: only %d/%d conversations identical, want at least %d", typ, same, len(ref.Cases), len(ref.Cases)-lose[typ])
			}
		})
	}
}

// TestGGUFFromGGUF converts a fixture to F32 GGUF and that file to Q8_0,
// and checks the result equals a direct conversion byte for byte: tensors
// read back from GGUF (Q/K rows of the llama family already permuted,
// Gemma norms already shifted) are written exactly once transformed.
func TestGGUFFromGGUF(t *testing.T) {
	// Fixtures whose norm weights the files store shifted by 1.
	shifted := []string{"gemma2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
	for _, name := range []string{"llama", "gemma2", "phi3", "qwen3_moe", "gpt_oss", "mamba2", "falcon_h1", "lfm2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "gemma3n_text"} {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			tmp := t.TempDir()
			f32 := filepath.Join(tmp, "f32.gguf")
			direct := filepath.Join(tmp, "direct.gguf")
			twice := filepath.Join(tmp, "twice.gguf")
			for _, c := range []struct{ src, dst, typ string }{{dir, f32, "f32"}, {dir, direct, "q8_0"}, {f32, twice, "q8_0"}} {
				if _, err := ToGGUF(c.src, c.dst, GGUFOptions{Type: c.typ, Name: "m"}); err != nil {
					t.Fatal(err)
				}
			}
			a, err := gguf.Open(direct)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := gguf.Open(twice)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if len(a.Tensors) != len(b.Tensors) {
				t.Fatalf("%d tensors vs %d", len(a.Tensors), len(b.Tensors))
			}
			for _, ta := range a.Tensors {
				tb, db, ok := b.Tensor(ta.Name)
				if !ok || tb.Type != ta.Type || !slices.Equal(tb.Dims, ta.Dims) {
					t.Fatalf("tensor %s: %v %v in one file, %v %v in the other", ta.Name, ta.Type, ta.Dims, tb.Type, tb.Dims)
				}
				if da := a.TensorData(ta); !bytes.Equal(da, db) {
					// Shifted norms go w+1 → w → w+1 and A goes
					// −exp(a) → a → −exp(a) in float32, which may round in
					// the last bit; everything else is identical.
					if !(strings.HasSuffix(ta.Name, "norm.weight") && slices.Contains(shifted, name)) && !(strings.HasSuffix(ta.Name, ".ssm_a") && closeF32(da, db, 1e-6)) {
						t.Errorf("tensor %s differs", ta.Name)
					}
				}
			}
		})
	}
}

// TestToGGUFErrors checks that bad input is refused with a clear error and
// leaves no file behind.
func TestToGGUFErrors(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	tmp := t.TempDir()
	// A checkpoint of an architecture GGUF files do not hold here: the
	// llama fixture's weights under another model_type.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "config.json"), []byte(`{"model_type":"jamba","vocab_size":320,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "model.safetensors"), filepath.Join(other, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src, typ, want string
	}{
		{"unknown type", dir, "q7_k", "unknown GGUF type"},
		{"missing source", filepath.Join(tmp, "nope"), "q8_0", "no such file"},
		{"unsupported architecture", other, "q8_0", "jamba"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(tmp, tc.name+".gguf")
			_, err := ToGGUF(tc.src, dst, GGUFOptions{Type: tc.typ})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if _, err := os.Stat(dst); err == nil {
				t.Errorf("%s was written", dst)
			}
		})
	}
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
}

// TestReadBackGGUF checks what a written file holds: general keys, the
// tokenizer, and that model.ReadGGUF understands it.
func TestReadBackGGUF(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := ToGGUF(dir, path, GGUFOptions{Type: "q8_0"}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for key, want := range map[string]string{
		"general.architecture": "qwen3", "general.name": "chat-model",
		"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
	} {
		if got, _ := f.String(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if v, _ := f.Uint("general.file_type"); v != 7 {
		t.Errorf("general.file_type = %d, want 7 (Q8_0)", v)
	}
	if _, ok := f.String("tokenizer.chat_template"); !ok {
		t.Error("no tokenizer.chat_template")
	}
	if _, _, ok := f.Tensor("output.weight"); ok {
		t.Error("a tied model has output.weight")
	}
	g, err := model.ReadGGUF(f, model.GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Config.TieWordEmbeddings || g.Config.VocabSize != 1073 || g.Config.HeadDim != 64 {
		t.Errorf("config read back: %v", g.Config)
	}
}

// closeF32 reports whether two F32 tensors agree within a relative
// tolerance.
func closeF32(a, b []byte, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i+4 <= len(a); i += 4 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(a[i:])))
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		if math.Abs(x-y) > tol*math.Abs(x) {
			return false
		}
	}
	return true
}

// TestGGUFLinearValues pins the values of the delta-rule hybrids' tensors
// against the checkpoint, as llama.cpp's converter writes them: norms w+1
// except linear_attn.norm, ssm_a = −exp(A_log), Qwen3-Next's in_proj_qkvz
// regrouped into attn_qkv and attn_gate, and Qwen3.5's value heads in tiled
// order (head j = v·kh + g holds the checkpoint's head g·r + v). A
// round trip alone cannot tell a transform from its mirror image.
func TestGGUFLinearValues(t *testing.T) {
	const hid, kh, vh, d = 64, 2, 4, 16 // the fixtures' geometry
	grouped := func(j int) int { return j }
	tiled := func(j int) int { return (j%kh)*(vh/kh) + j/kh }
	for _, tc := range []struct {
		fixture string
		head    func(j int) int // checkpoint head of the file's value head j
	}{
		{"qwen3_next", grouped},
		{"qwen3_5_text", tiled},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", tc.fixture)
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, err := ToGGUF(dir, path, GGUFOptions{Type: "f32"}); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			hf := func(name string) []float32 {
				x, ok := st.Tensor("model.layers.0." + name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				v := make([]float32, len(x.Data)/2)
				half.BF16sToF32s(v, x.Data)
				return v
			}
			file := func(name string) []float32 {
				_, data, ok := f.Tensor("blk.0." + name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				v := make([]float32, len(data)/4)
				for i := range v {
					v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
				}
				return v
			}
			check := func(what string, got []float32, want func(i int) float32) {
				t.Helper()
				for i, g := range got {
					if w := want(i); math.Abs(float64(g-w)) > 1e-6*max(1, math.Abs(float64(w))) {
						t.Fatalf("%s[%d] = %g, want %g", what, i, g, w)
					}
				}
			}
			norm, inNorm := file("attn_norm.weight"), hf("input_layernorm.weight")
			check("attn_norm", norm, func(i int) float32 { return inNorm[i] + 1 })
			ssmNorm, lnNorm := file("ssm_norm.weight"), hf("linear_attn.norm.weight")
			check("ssm_norm", ssmNorm, func(i int) float32 { return lnNorm[i] })
			aLog := hf("linear_attn.A_log")
			check("ssm_a", file("ssm_a"), func(j int) float32 { return -float32(math.Exp(float64(aLog[tc.head(j)]))) })
			dt := hf("linear_attn.dt_bias")
			check("ssm_dt.bias", file("ssm_dt.bias"), func(j int) float32 { return dt[tc.head(j)] })
			qkv, gate := file("attn_qkv.weight"), file("attn_gate.weight")
			out, outHF := file("ssm_out.weight"), hf("linear_attn.out_proj.weight")
			check("ssm_out", out, func(i int) float32 {
				r, c := i/(vh*d), i%(vh*d)
				return outHF[r*vh*d+tc.head(c/d)*d+c%d]
			})
			if tc.fixture == "qwen3_next" {
				// in_proj_qkvz: per key head g, rows q (d), k (d), v (2d), z (2d).
				fused := hf("linear_attn.in_proj_qkvz.weight")
				row := func(r int) []float32 { return fused[r*hid : (r+1)*hid] }
				group := 6 * d
				check("attn_qkv", qkv, func(i int) float32 {
					r, c := i/hid, i%hid
					switch {
					case r < kh*d: // queries
						return row((r/d)*group + r%d)[c]
					case r < 2*kh*d: // keys
						r -= kh * d
						return row((r/d)*group + d + r%d)[c]
					}
					r -= 2 * kh * d // values: 2d rows per key head
					return row((r/(2*d))*group + 2*d + r%(2*d))[c]
				})
				check("attn_gate", gate, func(i int) float32 {
					r, c := i/hid, i%hid
					return row((r/(2*d))*group + 4*d + r%(2*d))[c]
				})
				return
			}
			qkvHF, zHF := hf("linear_attn.in_proj_qkv.weight"), hf("linear_attn.in_proj_z.weight")
			check("attn_qkv", qkv, func(i int) float32 {
				r, c := i/hid, i%hid
				if r >= 2*kh*d {
					v := r - 2*kh*d
					r = 2*kh*d + tc.head(v/d)*d + v%d
				}
				return qkvHF[r*hid+c]
			})
			check("attn_gate", gate, func(i int) float32 {
				r, c := i/hid, i%hid
				return zHF[(tc.head(r/d)*d+r%d)*hid+c]
			})
			beta, bHF := file("ssm_beta.weight"), hf("linear_attn.in_proj_b.weight")
			check("ssm_beta", beta, func(i int) float32 { return bHF[tc.head(i/hid)*hid+i%hid] })
			conv, convHF := file("ssm_conv1d.weight"), hf("linear_attn.conv1d.weight")
			const width = 4
			check("ssm_conv1d", conv, func(i int) float32 {
				ch, k := i/width, i%width
				if ch >= 2*kh*d {
					v := ch - 2*kh*d
					ch = 2*kh*d + tc.head(v/d)*d + v%d
				}
				return convHF[ch*width+k]
			})
		})
	}
}

// TestGGUFGemma3nKeys checks the per-layer keys of a gemma3n file, which
// the layout table cannot (arrays), and the configuration read back.
func TestGGUFGemma3nKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := ToGGUF(fixtures.Dir(t, "archs", "gemma3n_text"), path, GGUFOptions{Type: "f32"}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, _ := f.Value("gemma3n.attention.sliding_window_pattern")
	if got, _ := gguf.ArrayOf[bool](v); !slices.Equal(got, []bool{true, true, true, false, true, false}) {
		t.Errorf("sliding_window_pattern = %v", v)
	}
	v, _ = f.Value("gemma3n.activation_sparsity_scale")
	scales, _ := gguf.ArrayOf[float32](v)
	if len(scales) != 6 || math.Abs(float64(scales[0])-1.6448536) > 1e-6 {
		t.Errorf("activation_sparsity_scale = %v, want 6 × Φ⁻¹(0.95) = 1.6448536", scales)
	}
	v, _ = f.Value("gemma3n.feed_forward_length")
	if got, _ := gguf.ArrayOf[uint32](v); !slices.Equal(got, []uint32{128, 128, 128, 128, 128, 128}) {
		t.Errorf("feed_forward_length = %v, want one 128 per layer", v)
	}
	g, err := model.ReadGGUF(f, model.GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config
	var rank, streams int
	var sparsity []float64
	for key, dst := range map[string]any{"laurel_rank": &rank, "altup_num_inputs": &streams, "activation_sparsity_pattern": &sparsity} {
		if _, err := c.Get(key, dst); err != nil {
			t.Fatal(err)
		}
	}
	if rank != 8 || streams != 4 || len(sparsity) != 6 || math.Abs(sparsity[5]-0.95) > 1e-6 ||
		c.NumKVSharedLayers != 2 || c.HiddenSizePerLayerInput != 16 || c.VocabSizePerLayerInput != 320 {
		t.Errorf("read back: laurel_rank %d, altup_num_inputs %d, sparsity %v, %d KV-shared layers, per-layer inputs %d of %d",
			rank, streams, sparsity, c.NumKVSharedLayers, c.HiddenSizePerLayerInput, c.VocabSizePerLayerInput)
	}
}
