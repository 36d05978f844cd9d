// Package archref reads the reference outputs of the architecture fixtures
// (../shared/fixtures/archs/NAME: reference.json and reference.safetensors)
// for conformance tests.
package archref

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lem-engine/lem/safetensors"
)

// Dense names the fixtures of dense decoder families.
var Dense = []string{
	"llama", "llama3-rope", "mistral", "qwen2", "qwen2-yarn", "qwen3",
	"phi3", "gemma2", "gemma3_text",
}

// Tolerance is the largest absolute logit difference a conforming engine
// shows.
const Tolerance = 1e-3

// Reference is one fixture's expected behaviour.
type Reference struct {
	InputIDs     []int32 `json:"input_ids"`
	GreedyPrompt []int32 `json:"greedy_prompt"`
	GreedyIDs    []int32 `json:"greedy_ids"`
	// Logits holds len(InputIDs) rows of the vocabulary's logits.
	Logits []float32 `json:"-"`
}

// Row returns the reference logits of position i.
func (r *Reference) Row(i int) []float32 {
	vocab := len(r.Logits) / len(r.InputIDs)
	return r.Logits[i*vocab : (i+1)*vocab]
}

// Load reads the reference of the fixture directory dir.
func Load(tb testing.TB, dir string) *Reference {
	tb.Helper()
	ref := new(Reference)
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, ref); err != nil {
		tb.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	lt, ok := f.Tensor("logits")
	if !ok {
		tb.Fatal("reference.safetensors has no logits")
	}
	if ref.Logits, err = lt.Float32s(); err != nil {
		tb.Fatal(err)
	}
	if len(ref.InputIDs) == 0 || len(ref.Logits)%len(ref.InputIDs) != 0 {
		tb.Fatalf("%s: %d logits for %d input ids", dir, len(ref.Logits), len(ref.InputIDs))
	}
	return ref
}

// MaxDiff returns the largest absolute difference between got and want
// (+Inf when either holds a NaN).
func MaxDiff(got, want []float32) float64 {
	var d float64
	for i := range got {
		e := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(e) {
			return math.Inf(1)
		}
		d = max(d, e)
	}
	return d
}
