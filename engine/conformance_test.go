package engine

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"lem/compute"
	"lem/compute/cpu"
	"lem/internal/fixtures"
	"lem/model"
	"lem/safetensors"
)

// denseFixtures are the architectures of ../shared/fixtures/archs that the
// dense decoder covers.
var denseFixtures = []string{
	"llama", "llama3-rope", "mistral", "qwen2", "qwen2-yarn", "qwen3",
	"phi3", "gemma2", "gemma3_text",
}

type archReference struct {
	InputIDs     []int32 `json:"input_ids"`
	GreedyPrompt []int32 `json:"greedy_prompt"`
	GreedyIDs    []int32 `json:"greedy_ids"`
}

func loadReference(t *testing.T, dir string) (archReference, []float32) {
	t.Helper()
	var ref archReference
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lt, ok := f.Tensor("logits")
	if !ok {
		t.Fatal("reference.safetensors has no logits")
	}
	logits, err := lt.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return ref, logits
}

// maxDiff returns the largest absolute difference between got and want.
func maxDiff(got, want []float32) float64 {
	var d float64
	for i := range got {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d
}

const logitTolerance = 1e-3

func TestDenseConformance(t *testing.T) {
	for _, name := range denseFixtures {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			testArch(t, dir)
		})
	}
}

// testArch checks a fixture's logits fed at once and one token at a time,
// and its greedy continuation.
func testArch(t *testing.T, dir string) {
	testArchOn(t, dir, cpu.New(0))
}

// testArchOn is testArch on a given backend.
func testArchOn(t *testing.T, dir string, b compute.Backend) {
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref, want := loadReference(t, dir)
	vocab := m.Config().VocabSize

	s := NewSession(m, b, 64)
	all, err := s.AppendAll(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, row := range all {
		worst = max(worst, maxDiff(row, want[i*vocab:(i+1)*vocab]))
	}
	t.Logf("whole sequence: max |Δlogit| = %.2e", worst)
	if worst > logitTolerance {
		t.Errorf("whole sequence: max |Δlogit| = %.2e > %.0e", worst, logitTolerance)
	}

	s = NewSession(m, b, 64)
	worst = 0
	for i, id := range ref.InputIDs {
		row, err := s.Append([]int32{id})
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, maxDiff(row, want[i*vocab:(i+1)*vocab]))
	}
	t.Logf("token by token: max |Δlogit| = %.2e", worst)
	if worst > logitTolerance {
		t.Errorf("token by token: max |Δlogit| = %.2e > %.0e", worst, logitTolerance)
	}

	// Chunked prefill with a chunk smaller than the sliding window.
	s = NewSession(m, b, 64)
	s.SetChunk(3)
	row, err := s.Append(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	last := len(ref.InputIDs) - 1
	if d := maxDiff(row, want[last*vocab:(last+1)*vocab]); d > logitTolerance {
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
