package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/synth"
	"github.com/lem-engine/lem/tokenizer"
)

// llamaCppArchs are the architecture fixtures compared; those whose GGUF
// architecture the llama.cpp of LLAMA_CPP_DIR does not know are skipped.
// The Feb 2025 snapshot used during development (commit c392e509) knows
// llama (llama, mistral), qwen2, phi3 and gemma2 among them, and not qwen3,
// qwen3moe, gemma3, gemma3n, gemma4 or the state-space and hybrid
// families; the Sept 2025 commit e74c92e8 knows qwen3, qwen3moe and
// gemma3 too, not gemma4.
// window is the sliding window that llama.cpp's llama architecture does
// not apply (it has no sliding-window key): greedy runs of mistral are
// compared only while every position fits in it.
//
// A fixture whose config llama.cpp cannot represent names the cause in
// unsupported (with the llama.cpp source that shows it, as of the Sept
// 2025 commit e74c92e8) and the config keys that ToGGUF must warn about:
// the fixture as it is is skipped once that warning is seen, and variant,
// the config.json keys that make it representable (nil removes a key), is
// compared in its place, so that the family's tensors and keys are still
// checked against llama.cpp.
var llamaCppArchs = []struct {
	fixture     string
	window      int
	unsupported string
	warn        []string
	variant     map[string]any
}{
	{fixture: "llama"},
	{fixture: "llama3-rope"},
	{fixture: "mistral", window: 8},
	{fixture: "qwen2"},
	{fixture: "qwen2-yarn"},
	{
		fixture: "phi3",
		unsupported: "llama.cpp ignores phi3.attention.sliding_window since May 2025 (src/llama-model.cpp, llama_model::load_hparams, case LLM_ARCH_PHI3: " +
			"\"Phi SWA is currently disabled\" sets the window type to none), so it attends to the whole context where the fixture's every layer " +
			"attends within sliding_window 8; the Feb 2025 snapshot applied the window",
		warn: []string{"sliding_window"},
		// A window wider than every position compared: no mask in lem,
		// nor in the llama.cpp versions that apply it.
		variant: map[string]any{"sliding_window": 512},
	},
	// Families newer llama.cpp versions know; the Feb 2025 snapshot skips
	// them as unknown architectures.
	{fixture: "qwen3"},
	{
		fixture: "qwen3_moe",
		unsupported: "llama.cpp's qwen3moe always renormalises the top-k expert weights (src/llama-model.cpp, llm_build_qwen3moe passes norm_w=true " +
			"to build_moe_ffn and never reads expert_weights_norm), where the fixture has norm_topk_prob false, and it has no sliding-window mask " +
			"(llm_build_qwen3moe uses build_attn_inp_kv, load_hparams reads no window for LLM_ARCH_QWEN3MOE), where transformers windows every " +
			"layer of the fixture within its sliding_window 8 (use_sliding_window false notwithstanding)",
		warn:    []string{"norm_topk_prob", "sliding_window"},
		variant: map[string]any{"norm_topk_prob": true, "sliding_window": nil},
	},
	{
		fixture: "gemma3_text",
		unsupported: "llama.cpp's gemma3 scales queries by 1/√head_dim except for the 62-layer 27B model, whatever gemma3.attention.scale says " +
			"(src/llama-model.cpp, llama_model::load_hparams, case LLM_ARCH_GEMMA3, sets f_attention_scale from the model size), " +
			"where the fixture has query_pre_attn_scalar 256 and head_dim 16",
		warn:    []string{"query_pre_attn_scalar"},
		variant: map[string]any{"query_pre_attn_scalar": 16},
	},
	{fixture: "gemma4_text"},
	{fixture: "gemma4_text-kvshared"},
	{fixture: "gemma4_text-moe"},
	// gemma2 is left out: that llama.cpp's gemma2 takes the output from
	// token_embd and refuses the fixture's untied output.weight (its
	// converter drops lm_head for Gemma), and, tied, aborts on a model of
	// 4 layers: it picks the query scale by model size, known only for
	// the published 26, 42 and 46 layers.
}

// llamaCppTypes are the file types converted. F32 files must give the same
// greedy tokens in both engines; the others report how far they agree:
// llama.cpp rounds the activations to the weights' type for BF16 and F16
// products and to 8-bit blocks for the quantized ones, and these
// random-weight models have near ties that such rounding flips.
var llamaCppTypes = []struct {
	typ    string
	strict bool
}{
	{"f32", true},
	{"bf16", false},
	{"q8_0", false},
	{"q4_0", false},
	{"q4_k_m", false},
}

// minForcedAgreement bounds, for every file type, the share of steps where
// lem's top-1 token is llama.cpp's when both follow llama.cpp's greedy run
// (observed with the Feb 2025 snapshot on an AVX2 machine: 100% for F32,
// 91% for BF16, whose activations llama.cpp rounds to bf16, 96–98% for
// Q8_0, Q4_0 and Q4_K_M; with the Sept 2025 commit e74c92e8 built
// natively: 100%, 95.6%, 96.8%, 99.1% and 99.4%).
const minForcedAgreement = 0.85

// TestLlamaCppGreedy checks GGUF files written by ToGGUF against
// llama.cpp: each loads in llama.cpp's llama-simple (from LLAMA_CPP_DIR,
// with its shared libraries beside it), and llama.cpp and lem decode the
// same greedy tokens from the same prompt.
//
// llama-simple takes text, tokenizes it with the file's vocabulary
// (special tokens parsed, BOS as the file says) and prints the prompt and
// each generated token as text, stopping at an end-of-generation token.
// lem encodes the same text from the same file; the test compares the
// prompt's token count (from llama.cpp's timing report) and the bytes of
// prompt and continuation, token by token. The architecture fixtures have
// no tokenizer, so each gets synth's built-in byte-level BPE of its 320
// ids; the chat model fixture brings its own, and its greedy run is also
// checked against the reference continuation. Where a free-running run
// diverges, lem is fed llama.cpp's tokens to count the steps where it
// would have picked the same one.
//
// Skipped unless LLAMA_CPP_DIR is set.
func TestLlamaCppGreedy(t *testing.T) {
	bin := os.Getenv("LLAMA_CPP_DIR")
	if bin == "" {
		t.Skip("LLAMA_CPP_DIR (a folder with llama.cpp's llama-simple) is not set")
	}
	simple := filepath.Join(bin, "llama-simple")
	if _, err := os.Stat(simple); err != nil {
		t.Fatalf("LLAMA_CPP_DIR: %v", err)
	}
	const prompt = "The engine reads a model from a directory"
	const short = "The" // within mistral's window
	type tally struct{ agree, forced, steps, files int }
	totals := map[string]*tally{}
	for _, tc := range llamaCppTypes {
		totals[tc.typ] = &tally{}
	}
	compareArch := func(t *testing.T, name, src string, window int) {
		for _, tc := range llamaCppTypes {
			t.Run(tc.typ, func(t *testing.T) {
				n := 32
				path := filepath.Join(t.TempDir(), name+"."+tc.typ+".gguf")
				if _, err := ToGGUF(src, path, GGUFOptions{Type: tc.typ, Threads: 2}); err != nil {
					t.Fatal(err)
				}
				p := prompt
				if window > 0 {
					p = short
				}
				r := compareLlamaCpp(t, simple, path, p, n, window)
				totals[tc.typ].agree += r.agree
				totals[tc.typ].forced += r.forced
				totals[tc.typ].steps += r.steps
				totals[tc.typ].files++
				t.Logf("%-11s %-6s prompt %d tokens; greedy tokens agree %d/%d%s", name, tc.typ, r.promptTokens, r.agree, r.steps, r.note)
				if tc.strict && r.agree < r.steps {
					t.Errorf("llama.cpp and lem diverge at generated token %d of %d:\nllama.cpp: %q\nlem:       %q", r.agree, r.steps, r.llama, r.lem)
				}
			})
		}
	}
	for _, arch := range llamaCppArchs {
		t.Run(arch.fixture, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", arch.fixture)
			if arch.unsupported != "" {
				// lem quant must say what llama.cpp will not do.
				src := withBuiltinTokenizer(t, dir, 320, nil)
				res, err := ToGGUF(src, filepath.Join(t.TempDir(), arch.fixture+".gguf"), GGUFOptions{Type: "f32", Threads: 2})
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range arch.warn {
					if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.Contains(w, key) }) {
						t.Errorf("ToGGUF does not warn about %s, which llama.cpp cannot represent; warnings: %q", key, res.Warnings)
					}
				}
				t.Run("variant", func(t *testing.T) {
					t.Logf("config.json changed by %v", arch.variant)
					compareArch(t, arch.fixture+"-variant", withBuiltinTokenizer(t, dir, 320, arch.variant), arch.window)
				})
				t.Skipf("%s as it is: %s", arch.fixture, arch.unsupported)
			}
			compareArch(t, arch.fixture, withBuiltinTokenizer(t, dir, 320, nil), arch.window)
		})
	}

	t.Run("chat-model", func(t *testing.T) {
		dir := fixtures.Dir(t, "chat-model")
		var ref struct {
			Cases []struct {
				Prompt     string  `json:"prompt"`
				PromptIDs  []int32 `json:"prompt_ids"`
				GreedyIDs  []int32 `json:"greedy_ids"`
				GreedyText string  `json:"greedy_text"`
			} `json:"cases"`
		}
		raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &ref); err != nil {
			t.Fatal(err)
		}
		for _, tc := range llamaCppTypes {
			t.Run(tc.typ, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "chat-model."+tc.typ+".gguf")
				if _, err := ToGGUF(dir, path, GGUFOptions{Type: tc.typ, Threads: 2}); err != nil {
					t.Fatal(err)
				}
				agree, forced, steps, refAgree := 0, 0, 0, 0
				for i, c := range ref.Cases[:min(4, len(ref.Cases))] {
					r := compareLlamaCpp(t, simple, path, c.Prompt, len(c.GreedyIDs), 0)
					agree += r.agree
					forced += r.forced
					steps += r.steps
					if !slicesEqual(r.promptIDs, c.PromptIDs) {
						t.Errorf("case %d: lem encodes the prompt from the GGUF as %v, the reference as %v", i, r.promptIDs, c.PromptIDs)
					}
					same := 0
					for same < len(r.lemIDs) && same < len(c.GreedyIDs) && r.lemIDs[same] == c.GreedyIDs[same] {
						same++
					}
					refAgree += same
					if tc.strict && r.agree < r.steps {
						t.Errorf("case %d: llama.cpp and lem diverge at generated token %d of %d:\nllama.cpp: %q\nlem:       %q", i, r.agree, r.steps, r.llama, r.lem)
					}
					if tc.strict && same < len(c.GreedyIDs) {
						t.Errorf("case %d: lem's greedy ids %v, reference %v (%q)", i, r.lemIDs, c.GreedyIDs, c.GreedyText)
					}
				}
				totals[tc.typ].agree += agree
				totals[tc.typ].forced += forced
				totals[tc.typ].steps += steps
				totals[tc.typ].files++
				t.Logf("chat-model  %-6s greedy tokens agree with llama.cpp %d/%d, lem with the reference %d/%d", tc.typ, agree, steps, refAgree, steps)
			})
		}
	})
	for _, tc := range llamaCppTypes {
		tl := totals[tc.typ]
		if tl.steps == 0 {
			continue
		}
		frac := float64(tl.forced) / float64(tl.steps)
		t.Logf("%-6s: %d files; free-running greedy runs agree on %d/%d steps (%.1f%%); fed llama.cpp's tokens, lem's top-1 agrees on %d/%d (%.1f%%)",
			tc.typ, tl.files, tl.agree, tl.steps, 100*float64(tl.agree)/float64(tl.steps), tl.forced, tl.steps, 100*frac)
		if frac < minForcedAgreement {
			t.Errorf("%s: lem's top-1 agrees with llama.cpp's token on %.1f%% of the steps, below %.0f%%", tc.typ, 100*frac, 100*minForcedAgreement)
		}
	}
}

func slicesEqual(a, b []int32) bool {
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

// withBuiltinTokenizer returns a copy of the model directory dir (its
// files linked) with synth's built-in tokenizer of vocab ids added, and
// config.json's keys replaced by those of variant (nil removes a key).
func withBuiltinTokenizer(t *testing.T, dir string, vocab int, variant map[string]any) string {
	t.Helper()
	out := t.TempDir()
	for _, name := range []string{"generation_config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(dir, name), filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if variant != nil {
		var m map[string]any
		if err := json.Unmarshal(cfg, &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range variant {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		if cfg, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	bt, err := synth.NewBuiltinTokenizer(vocab)
	if err != nil {
		t.Fatal(err)
	}
	tj, err := bt.TokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := bt.TokenizerConfig(512)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer.json"), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "tokenizer_config.json"), tc, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// llamaCppRun is one comparison of a greedy run.
type llamaCppRun struct {
	promptTokens int     // the prompt's length in tokens, in both engines
	promptIDs    []int32 // lem's encoding of the prompt
	lemIDs       []int32 // lem's greedy tokens
	agree, steps int     // generated tokens that agree, of those compared
	forced       int     // steps where lem's top-1 is llama.cpp's token, fed llama.cpp's tokens
	gap          float64 // the largest logit gap between lem's choice and llama.cpp's
	llama, lem   string  // the generated text of each engine
	note         string
}

// promptTokensRE finds the prompt's token count in llama.cpp's timings.
var promptTokensRE = regexp.MustCompile(`prompt eval time =.*/\s*(\d+) tokens`)

// compareLlamaCpp runs llama-simple and lem greedily for n tokens on the
// GGUF file at path from the text prompt, and compares their output token
// by token. With window > 0 only the tokens whose positions fit in it are
// compared.
func compareLlamaCpp(t *testing.T, simple, path, prompt string, n, window int) llamaCppRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, simple, "-m", path, "-n", strconv.Itoa(n), prompt)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(simple))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil && !bytes.Contains(stderr.Bytes(), []byte("unknown model architecture")) {
		t.Fatalf("llama-simple %s: %v\n%s", filepath.Base(path), err, tail(stderr.Bytes(), 2000))
	}
	if i := bytes.Index(stderr.Bytes(), []byte("unknown model architecture")); i >= 0 {
		t.Skipf("llama.cpp of LLAMA_CPP_DIR: %s", bytes.TrimSpace(stderr.Bytes()[i:min(i+80, stderr.Len())]))
	}
	m := promptTokensRE.FindSubmatch(stderr.Bytes())
	if m == nil {
		t.Fatalf("llama-simple printed no token counts:\n%s", tail(stderr.Bytes(), 2000))
	}
	llamaPrompt, _ := strconv.Atoi(string(m[1]))

	lm, err := engine.Open(path, engine.Options{Backend: cpu.New(2)})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	if lm.Tokenizer == nil {
		t.Fatal("lem finds no tokenizer in the file")
	}
	ids := lm.Tokenizer.Encode(prompt, true)
	r := llamaCppRun{promptTokens: len(ids), promptIDs: ids}
	if llamaPrompt != len(ids) {
		t.Fatalf("llama.cpp encodes the prompt as %d tokens, lem as %d (%v)", llamaPrompt, len(ids), ids)
	}
	s := lm.NewSession(len(ids) + n)
	logits, err := s.Append(ids)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		id := argmax(logits)
		r.lemIDs = append(r.lemIDs, id)
		if logits, err = s.Append([]int32{id}); err != nil {
			t.Fatal(err)
		}
	}

	// llama-simple prints the prompt's tokens, the generated ones up to an
	// end-of-generation token, and a newline.
	out := stdout.Bytes()
	var head []byte
	for _, id := range ids {
		head = append(head, rawPiece(t, lm.Tokenizer, id)...)
	}
	if !bytes.HasPrefix(out, head) {
		t.Fatalf("llama.cpp prints the prompt as %q, lem decodes it as %q", tail(out, 400), head)
	}
	gen := bytes.TrimSuffix(out[len(head):], []byte("\n"))
	r.llama = string(gen)
	var lemText []byte
	for _, id := range r.lemIDs {
		lemText = append(lemText, rawPiece(t, lm.Tokenizer, id)...)
	}
	r.lem = string(lemText)
	steps := n
	if window > 0 {
		steps = min(n, window-len(ids)+1)
		r.note = fmt.Sprintf(" (of %d: positions beyond the window of %d are not compared)", n, window)
		if steps <= 0 {
			t.Fatalf("the prompt of %d tokens fills the window of %d", len(ids), window)
		}
	}
	rest := gen
	for _, id := range r.lemIDs[:steps] {
		piece := rawPiece(t, lm.Tokenizer, id)
		if len(rest) == 0 && isStop(lm, id) {
			// llama.cpp stopped here, and lem picked an
			// end-of-generation token too.
			r.agree = steps
			break
		}
		if len(piece) == 0 || !bytes.HasPrefix(rest, piece) {
			break
		}
		rest = rest[len(piece):]
		r.agree++
	}
	r.steps = steps
	r.forced = steps
	if r.agree < r.steps {
		r.note += fmt.Sprintf("; first difference at token %d", r.agree)
		r.forced, r.gap = forcedLlamaCpp(t, lm, ids, gen, steps)
		r.note += fmt.Sprintf("; fed llama.cpp's tokens, lem's top-1 agrees %d/%d, largest logit gap to llama.cpp's token %.3g", r.forced, steps, r.gap)
	}
	return r
}

// forcedLlamaCpp feeds lem the prompt and then the tokens llama.cpp
// printed (gen), and counts the steps where lem's top-1 token is
// llama.cpp's; where they differ it returns the largest gap between the
// logit of lem's choice and that of llama.cpp's. llama.cpp prints text, so
// its token at a step is the one, among those whose bytes start what is
// left of gen, that lem ranks highest.
func forcedLlamaCpp(t *testing.T, lm *engine.Model, prompt []int32, gen []byte, steps int) (agree int, gap float64) {
	t.Helper()
	s := lm.NewSession(len(prompt) + steps)
	logits, err := s.Append(prompt)
	if err != nil {
		t.Fatal(err)
	}
	rest := gen
	for range steps {
		top := argmax(logits)
		if len(rest) == 0 {
			// llama.cpp stopped on an end-of-generation token.
			if isStop(lm, top) {
				agree++
			}
			return agree, gap
		}
		next := int32(-1)
		for id := range int32(len(logits)) {
			if lm.Tokenizer.Token(id) == "" {
				continue
			}
			if p := rawPiece(t, lm.Tokenizer, id); len(p) > 0 && bytes.HasPrefix(rest, p) && (next < 0 || logits[id] > logits[next]) {
				next = id
			}
		}
		if next < 0 {
			t.Fatalf("no token spells the start of llama.cpp's %q", tail(rest, 40))
		}
		if next == top {
			agree++
		} else {
			gap = max(gap, float64(logits[top]-logits[next]))
		}
		rest = rest[len(rawPiece(t, lm.Tokenizer, next)):]
		if logits, err = s.Append([]int32{next}); err != nil {
			t.Fatal(err)
		}
	}
	return agree, gap
}

// isStop reports whether id ends generation (llama.cpp stops on its
// end-of-generation tokens and does not print them).
func isStop(m *engine.Model, id int32) bool {
	for _, s := range m.StopIDs {
		if s == id {
			return true
		}
	}
	return m.Tokenizer.IsSpecial(id)
}

// byteOfRune inverts the byte-level BPE alphabet (GPT-2's): the printable
// bytes '!'–'~', '¡'–'¬' and '®'–'ÿ' stand for themselves, the other 68
// bytes for U+0100 onwards in byte order.
var byteOfRune = func() map[rune]byte {
	m := map[rune]byte{}
	next := rune(0x100)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			m[rune(b)] = byte(b)
		} else {
			m[next] = byte(b)
			next++
		}
	}
	return m
}()

// rawPiece returns the bytes token id stands for in a byte-level BPE
// vocabulary, a special token as its text: what llama.cpp prints for it,
// without the replacement of broken UTF-8 that Decode does.
func rawPiece(t *testing.T, tok *tokenizer.Tokenizer, id int32) []byte {
	t.Helper()
	s := tok.Token(id)
	if tok.IsSpecial(id) {
		return []byte(s)
	}
	var out []byte
	for _, r := range s {
		b, ok := byteOfRune[r]
		if !ok {
			t.Fatalf("token %d (%q) is not in the byte-level alphabet", id, s)
		}
		out = append(out, b)
	}
	return out
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
