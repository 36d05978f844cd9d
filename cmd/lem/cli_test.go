package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/internal/fixtures"
)

// execLemIn runs lem with args and standard input.
func execLemIn(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := execute(root, args)
	return out.String(), err
}

type tokCase struct {
	Text           string  `json:"text"`
	IDs            []int32 `json:"ids"`
	IDsWithSpecial []int32 `json:"ids_with_special"`
	Decoded        string  `json:"decoded"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

func TestTokenizeCmd(t *testing.T) {
	for _, name := range []string{"qwen3", "gemma3"} {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "tokenizers", name)
			var ref struct{ Cases []tokCase }
			readJSON(t, filepath.Join(dir, "reference.json"), &ref)

			// Arguments: one array per text.
			out, err := execLemIn(t, "", "tokenize", dir, ref.Cases[10].Text, ref.Cases[11].Text)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("got %d lines for 2 texts:\n%s", len(lines), out)
			}

			// Standard input: every case, with and without special tokens.
			var in strings.Builder
			for _, c := range ref.Cases {
				b, _ := json.Marshal(c.Text)
				in.Write(b)
				in.WriteByte('\n')
			}
			for _, special := range []bool{false, true} {
				args := []string{"tokenize", dir, "-"}
				if special {
					args = append(args, "--special")
				}
				out, err := execLemIn(t, in.String(), args...)
				if err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				if len(lines) != len(ref.Cases) {
					t.Fatalf("got %d lines for %d cases", len(lines), len(ref.Cases))
				}
				for i, line := range lines {
					var got []int32
					if err := json.Unmarshal([]byte(line), &got); err != nil {
						t.Fatalf("line %d: %v", i, err)
					}
					want := ref.Cases[i].IDs
					if special {
						want = ref.Cases[i].IDsWithSpecial
					}
					if !slices.Equal(got, want) {
						t.Errorf("case %d (special=%v) %q: got %v, want %v", i, special, ref.Cases[i].Text, got, want)
					}
				}
			}

			// Decode: arrays in, strings out.
			var ids strings.Builder
			for _, c := range ref.Cases {
				b, _ := json.Marshal(c.IDs)
				ids.Write(b)
				ids.WriteByte('\n')
			}
			out, err = execLemIn(t, ids.String(), "tokenize", "--decode", dir, "-")
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				var got string
				if err := json.Unmarshal([]byte(line), &got); err != nil {
					t.Fatalf("decode line %d: %v", i, err)
				}
				if got != ref.Cases[i].Decoded {
					t.Errorf("decode case %d: got %q, want %q", i, got, ref.Cases[i].Decoded)
				}
			}
		})
	}
}

func TestTemplateCmd(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	var ref struct {
		Cases []struct {
			Messages       json.RawMessage `json:"messages"`
			Tools          json.RawMessage `json:"tools"`
			EnableThinking *bool           `json:"enable_thinking"`
			Prompt         string          `json:"prompt"`
		}
	}
	readJSON(t, filepath.Join(dir, "reference.json"), &ref)
	for i, c := range ref.Cases {
		in := map[string]any{"messages": c.Messages, "add_generation_prompt": true}
		if len(c.Tools) > 0 && string(c.Tools) != "null" {
			in["tools"] = c.Tools
		}
		if c.EnableThinking != nil {
			in["kwargs"] = map[string]any{"enable_thinking": *c.EnableThinking}
		}
		data, _ := json.Marshal(in)
		out, err := execLemIn(t, string(data), "template", dir)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if out != c.Prompt {
			t.Errorf("case %d:\n got %q\nwant %q", i, out, c.Prompt)
		}
	}
}

func TestInspectCmd(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	out, err := execLemIn(t, "", "inspect", "--json", dir)
	if err != nil {
		t.Fatal(err)
	}
	var in inspection
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	if in.Architecture != "qwen3" || in.Format != "safetensors" || !in.ChatTemplate || !in.Supported ||
		in.Tokenizer == nil || in.Tokenizer.Vocab != 1073 || in.Tokenizer.Kind != "byte-level BPE" ||
		in.ContextLength != 2048 || in.Layers != 6 || len(in.Types) != 1 || in.Types[0].Type != "BF16" ||
		in.Types[0].Bytes != 2*in.Parameters {
		t.Errorf("inspect chat-model: %+v", in)
	}

	// A GGUF file written here.
	w := gguf.NewWriter()
	w.SetKV("general.architecture", gguf.String("llama"))
	w.SetKV("llama.context_length", gguf.Uint32(4096))
	w.SetKV("llama.block_count", gguf.Uint32(1))
	w.SetKV("llama.rope.freq_base", gguf.Float32(500000))
	w.SetKV("tokenizer.chat_template", gguf.String("{{ messages[0].content }}"))
	if err := w.AddTensor("token_embd.weight", gguf.F16, []int64{4, 8}, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("blk.0.attn_q.weight", gguf.Q8_0, []int64{32, 2}, make([]byte, 68)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err = execLemIn(t, "", "inspect", "--json", path)
	if err != nil {
		t.Fatal(err)
	}
	in = inspection{}
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	if in.Format != "gguf" || in.Architecture != "llama" || in.Parameters != 96 || in.ContextLength != 4096 ||
		len(in.Types) != 2 || in.Types[1].Type != "Q8_0" || in.Types[1].Bytes != 68 || !in.ChatTemplate ||
		in.Tokenizer == nil || in.Tokenizer.Error == "" {
		t.Errorf("inspect gguf: %+v", in)
	}
	// The template renders from the GGUF alone.
	out, err = execLemIn(t, `{"messages":[{"role":"user","content":"hi"}]}`, "template", path)
	if err != nil || out != "hi" {
		t.Errorf("template from gguf: %q, %v", out, err)
	}
}

// TestGenerateFixtureGreedy checks generate's stable contract: greedy
// decoding from prompt ids reproduces the reference run.
func TestGenerateFixtureGreedy(t *testing.T) {
	for _, name := range []string{"llama", "gemma2"} {
		dir := fixtures.Dir(t, "archs", name)
		var ref struct {
			GreedyPrompt []int32 `json:"greedy_prompt"`
			GreedyIDs    []int32 `json:"greedy_ids"`
		}
		readJSON(t, filepath.Join(dir, "reference.json"), &ref)
		ids := make([]string, len(ref.GreedyPrompt))
		for i, id := range ref.GreedyPrompt {
			ids[i] = itoa(id)
		}
		out, err := execLemIn(t, "", "generate", dir, "--prompt-ids", strings.Join(ids, ","),
			"--temperature", "0", "--max-tokens", "24", "--ignore-eos", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got generateOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs, ref.GreedyIDs) || got.PromptTokens != len(ref.GreedyPrompt) || got.StopReason != "length" {
			t.Errorf("%s: %+v, want ids %v", name, got, ref.GreedyIDs)
		}
	}
}

func itoa(v int32) string { b, _ := json.Marshal(v); return string(b) }

func TestCLIErrors(t *testing.T) {
	chatModel := fixtures.Dir(t, "chat-model")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"missing path", "", []string{"inspect", "/nonexistent/model"}, "no such file"},
		{"not a model", "", []string{"tokenize", "/etc/hostname", "x"}, "not a model directory"},
		{"bad stdin line", "not json\n", []string{"tokenize", chatModel, "-"}, "not a JSON string"},
		{"bad decode ids", "", []string{"tokenize", "--decode", chatModel, "[1, 99999]"}, "out of range"},
		{"template bad json", "{", []string{"template", chatModel}, "JSON object"},
		{"template unknown key", `{"messages":[],"foo":1}`, []string{"template", chatModel}, `unknown key "foo"`},
		{"generate no prompt", "", []string{"generate", chatModel}, "exactly one of"},
		{"generate bad ids", "", []string{"generate", chatModel, "--prompt-ids", "1,x"}, "not a token id"},
		{"generate id range", "", []string{"generate", chatModel, "--prompt-ids", "5000"}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := execLemIn(t, tc.stdin, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
