package engine

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// TestReuse checks that a second prompt sharing a prefix with the session
// prefills only the rest and gives the same logits as a cold run, for a
// full-attention model and for a sliding-window model whose ring wrapped.
func TestReuse(t *testing.T) {
	for _, name := range []string{"qwen3", "gemma2"} {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			b := cpu.New(0)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ref := archref.Load(t, dir)
			first := ref.InputIDs[:30]
			second := slices.Concat(ref.InputIDs[:25], []int32{7, 8, 9})

			cold := NewSession(m, b, 64)
			want, err := cold.Append(second)
			if err != nil {
				t.Fatal(err)
			}
			want = slices.Clone(want)

			s := NewSession(m, b, 64)
			if _, err := s.Append(first); err != nil {
				t.Fatal(err)
			}
			kept := s.Reuse(second)
			got, err := s.Append(second[kept:])
			if err != nil {
				t.Fatal(err)
			}
			if d := archref.MaxDiff(got, want); d > 1e-5 {
				t.Errorf("reused prefix of %d: max |Δlogit| = %g", kept, d)
			}
			// gemma2's sliding layers hold 8 positions: rewinding 5 tokens
			// past a wrapped ring must fall back to a full prefill.
			wantKept := 25
			if name == "gemma2" {
				wantKept = 0
			}
			if kept != wantKept {
				t.Errorf("kept %d tokens, want %d", kept, wantKept)
			}
			// Extending the same sequence keeps everything but the last token.
			s2 := NewSession(m, b, 64)
			s2.Append(first)
			if k := s2.Reuse(ref.InputIDs[:35]); k != 30 {
				t.Errorf("extension kept %d, want 30", k)
			}
		})
	}
}

func TestLogprobs(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var toks []Token
	res, err := m.Generate(context.Background(), m.NewSession(0),
		Request{Prompt: []int32{1, 334, 224}, MaxTokens: 5, Logprobs: true, TopLogprobs: 3},
		func(tk Token) error { toks = append(toks, tk); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IDs) == 0 {
		t.Fatal("no tokens")
	}
	for _, tk := range toks {
		if tk.ID < 0 {
			continue
		}
		if len(tk.Top) != 3 || tk.Top[0].ID != tk.ID || tk.Logprob > 0 || tk.Top[0].Logprob < tk.Top[1].Logprob {
			t.Fatalf("greedy token %+v: want it first among 3 descending top logprobs ≤ 0", tk)
		}
		if math.IsNaN(float64(tk.Logprob)) {
			t.Fatal("NaN logprob")
		}
	}
}

// onlyToken allows one token id, then is done after n of them.
type onlyToken struct {
	id   int32
	n    int
	seen int
}

func (c *onlyToken) Mask(logits []float32) {
	for i := range logits {
		if int32(i) != c.id {
			logits[i] = float32(math.Inf(-1))
		}
	}
}
func (c *onlyToken) Accept(id int32) { c.seen++ }
func (c *onlyToken) Done() bool      { return c.seen >= c.n }

func TestConstraint(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(context.Background(), m.NewSession(0),
		Request{Prompt: []int32{1, 334, 224}, MaxTokens: 50, Constraint: &onlyToken{id: 400, n: 4},
			Sample: SampleParams{Temperature: 1, HasSeed: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, []int32{400, 400, 400, 400}) || res.StopReason != StopToken {
		t.Fatalf("ids %v stop %q, want four 400s then stop", res.IDs, res.StopReason)
	}
}
