package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

type chatCase struct {
	Messages       json.RawMessage `json:"messages"`
	Tools          json.RawMessage `json:"tools"`
	EnableThinking *bool           `json:"enable_thinking"`
	Prompt         string          `json:"prompt"`
	PromptIDs      []int32         `json:"prompt_ids"`
	GreedyIDs      []int32         `json:"greedy_ids"`
	GreedyText     string          `json:"greedy_text"`
}

func loadChatCases(t *testing.T, dir string) []chatCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Cases []chatCase }
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	return ref.Cases
}

// TestChatModel renders, tokenizes and greedily continues every case of the
// trained chat model, through the engine's full path.
func TestChatModel(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkChatCases(t, m, loadChatCases(t, dir))
}

// checkChatCases renders, tokenizes and greedily continues each case on m
// and compares with the reference.
func checkChatCases(t *testing.T, m *Model, cases []chatCase) {
	t.Helper()
	if !slices.Contains(m.StopIDs, 2) {
		t.Fatalf("stop ids %v lack <|im_end|> (2)", m.StopIDs)
	}
	for i, c := range cases {
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
		var streamed string
		res, err := m.Generate(context.Background(), m.NewSession(0), Request{Prompt: ids, MaxTokens: 200},
			func(t Token) error { streamed += t.Text; return nil })
		if err != nil {
			t.Fatal(err)
		}
		got := append(slices.Clone(res.IDs), res.StopID)
		if !slices.Equal(got, c.GreedyIDs) {
			t.Errorf("case %d: greedy ids\n got %v\nwant %v", i, got, c.GreedyIDs)
		}
		if want := m.Tokenizer.Decode(c.GreedyIDs[:len(c.GreedyIDs)-1], false); streamed != want || res.Text != want {
			t.Errorf("case %d: text %q (streamed %q), want %q", i, res.Text, streamed, want)
		}
	}
}

func TestGenerateCancel(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err = m.Generate(ctx, m.NewSession(0), Request{Prompt: []int32{1, 334, 224}, Sample: SampleParams{Temperature: 1, HasSeed: true}, IgnoreModelStops: true},
		func(Token) error {
			n++
			if n == 3 {
				cancel()
			}
			return nil
		})
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestContextExceeded(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	b := cpu.New(0)
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := NewSession(m, b, 4)
	if _, err := s.Append([]int32{1, 2, 3, 4, 5}); err == nil {
		t.Fatal("appending 5 tokens to a 4-position session succeeded")
	}
	if _, err := s.Append([]int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append([]int32{4, 5}); err == nil {
		t.Fatal("exceeding the context succeeded")
	}
	if _, err := s.Append([]int32{-1}); err == nil {
		t.Fatal("negative token id accepted")
	}
}
