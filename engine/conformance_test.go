package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

func TestDenseConformance(t *testing.T) {
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			testArch(t, dir)
		})
	}
}

// testArch checks a fixture's logits fed at once and one token at a time,
// and its greedy continuation.
func testArch(t *testing.T, dir string) {
	testArchOn(t, dir, cpu.New(0), archref.Tolerance)
}

// testArchOn is testArch on a given backend, with a logit tolerance.
func testArchOn(t *testing.T, dir string, b compute.Backend, tol float64) {
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref := archref.Load(t, dir)

	s := NewSession(m, b, 64)
	all, err := s.AppendAll(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, row := range all {
		worst = max(worst, archref.MaxDiff(row, ref.Row(i)))
	}
	t.Logf("whole sequence: max |Δlogit| = %.2e", worst)
	if worst > tol {
		t.Errorf("whole sequence: max |Δlogit| = %.2e > %.0e", worst, tol)
	}

	s = NewSession(m, b, 64)
	worst = 0
	for i, id := range ref.InputIDs {
		row, err := s.Append([]int32{id})
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, archref.MaxDiff(row, ref.Row(i)))
	}
	t.Logf("token by token: max |Δlogit| = %.2e", worst)
	if worst > tol {
		t.Errorf("token by token: max |Δlogit| = %.2e > %.0e", worst, tol)
	}

	// Chunked prefill with a chunk smaller than the sliding window.
	s = NewSession(m, b, 64)
	s.SetChunk(3)
	row, err := s.Append(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	last := len(ref.InputIDs) - 1
	if d := archref.MaxDiff(row, ref.Row(last)); d > tol {
		t.Errorf("chunked prefill: last-row max |Δlogit| = %.2e", d)
	}

	s = NewSession(m, b, 64)
	logits, err := s.Append(ref.GreedyPrompt)
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for range ref.GreedyIDs {
		id := argmax(logits)
		got = append(got, id)
		if logits, err = s.Append([]int32{id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range got {
		if got[i] != ref.GreedyIDs[i] {
			t.Fatalf("greedy ids differ at step %d:\n got %v\nwant %v", i, got, ref.GreedyIDs)
		}
	}
	testGenerateGreedy(t, m, b, ref, tol)
}

// testGenerateGreedy runs the greedy reference through Generate, where a
// backend that feeds tokens (CUDA) queues each step before the host reads
// the token it consumes: the ids must be the reference's, and a generation
// that a stop token or MaxTokens ends must leave the session where it
// stopped, whatever step was queued beyond it.
func testGenerateGreedy(t *testing.T, net model.Model, b compute.Backend, ref *archref.Reference, tol float64) {
	m := &Model{Net: net, Backend: b}
	n := len(ref.GreedyIDs)
	s := NewSession(net, b, 64)
	defer s.Close()
	res, err := m.Generate(context.Background(), s, Request{Prompt: ref.GreedyPrompt, MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, ref.GreedyIDs) {
		t.Fatalf("Generate: greedy ids\n got %v\nwant %v", res.IDs, ref.GreedyIDs)
	}
	// The last id is returned, not run.
	if want := len(ref.GreedyPrompt) + n - 1; s.Len() != want {
		t.Errorf("Generate: session holds %d positions, want %d", s.Len(), want)
	}
	// Stop at the first id that does not occur before it, past the middle.
	k := n / 2
	for k < n && slices.Contains(ref.GreedyIDs[:k], ref.GreedyIDs[k]) {
		k++
	}
	if k >= n-1 {
		return
	}
	s.Reset()
	res, err = m.Generate(context.Background(), s, Request{Prompt: ref.GreedyPrompt, StopIDs: ref.GreedyIDs[k : k+1]}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, ref.GreedyIDs[:k]) || res.StopReason != StopToken {
		t.Fatalf("Generate with stop id %d: %v (%s), want %v", ref.GreedyIDs[k], res.IDs, res.StopReason, ref.GreedyIDs[:k])
	}
	if want := len(ref.GreedyPrompt) + k; s.Len() != want {
		t.Errorf("Generate with stop id: session holds %d positions, want %d", s.Len(), want)
	}
	// A prompt of exactly the session's tokens runs the last of them again
	// (Reuse leaves one to run): the caches must still hold what it needs,
	// sliding-window rings included, whatever step ran past the stop.
	held := slices.Clone(s.tokens)
	kept := s.Reuse(held)
	again, err := s.Append(held[kept:])
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewSession(net, b, 64)
	defer fresh.Close()
	want, err := fresh.Append(held)
	if err != nil {
		t.Fatal(err)
	}
	if d := archref.MaxDiff(again, want); d > tol {
		t.Errorf("after the stop, the same tokens again (%d kept): max |Δlogit| = %.2e against a fresh session", kept, d)
	}
	// The session goes on from where it stopped.
	logits, err := s.Append(ref.GreedyIDs[k : k+1])
	if err != nil {
		t.Fatal(err)
	}
	if got := argmax(logits); got != ref.GreedyIDs[k+1] {
		t.Errorf("after the stop: next greedy id %d, want %d", got, ref.GreedyIDs[k+1])
	}
}
