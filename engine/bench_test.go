package engine

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// decodeFixtures are the fixtures whose steady-state decode step must not
// allocate: the chat model, and every family with routing scratch,
// recurrent state or per-layer inputs. Paths are below the fixtures root.
func decodeFixtures() []string {
	out := []string{"chat-model"}
	for _, name := range slices.Concat(moeFixtures, ssmFixtures, hybridFixtures, gemmaNext) {
		out = append(out, filepath.Join("archs", name))
	}
	return out
}

// decodeLoop opens a fixture and returns its decode step: greedy sampling
// of the last logits and a forward pass of that one token, resetting the
// session when it is full. The step has run through a whole context and a
// reset, so that every buffer has grown.
func decodeLoop(tb testing.TB, path string) (step func()) {
	m, err := Open(fixtures.Dir(tb, path), Options{Backend: cpu.New(0)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	s := m.NewSession(256)
	sampler := NewSampler(SampleParams{})
	logits, err := s.Append([]int32{1, 5, 7, 9})
	if err != nil {
		tb.Fatal(err)
	}
	next := make([]int32, 1)
	step = func() {
		if s.Len() == s.Capacity() {
			s.Reset()
		}
		next[0] = sampler.Sample(logits, s.Tokens())
		if logits, err = s.Append(next); err != nil {
			tb.Fatal(err)
		}
	}
	for range s.Capacity() + 1 {
		step()
	}
	return step
}

// TestDecodeAllocs checks that the steady-state decode step of every
// family allocates nothing.
func TestDecodeAllocs(t *testing.T) {
	for _, path := range decodeFixtures() {
		t.Run(path, func(t *testing.T) {
			step := decodeLoop(t, path)
			if n := testing.AllocsPerRun(20, step); n != 0 {
				t.Errorf("%g allocations per decode step", n)
			}
		})
	}
}

// BenchmarkDecodeStep measures one decode step (a forward pass of one token
// through the session and greedy sampling) of each fixture in
// decodeFixtures.
func BenchmarkDecodeStep(b *testing.B) {
	for _, path := range decodeFixtures() {
		b.Run(path, func(b *testing.B) {
			step := decodeLoop(b, path)
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
		})
	}
}
