package engine

import (
	"testing"

	"lem/compute"
	"lem/compute/cpu"
	"lem/internal/archref"
	"lem/internal/fixtures"
	"lem/model"
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
}
