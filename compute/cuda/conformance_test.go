package cuda

import (
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// modernFixtures are the fixtures of the families that need the optional
// operations (compute.Convolver, SSMScanner, DeltaRuler, Experts, RowOps).
var modernFixtures = []string{
	"qwen3_moe", "gpt_oss", "qwen3_5_text", "qwen3_next", "qwen3_5_moe_text",
	"mamba2", "lfm2", "falcon_h1",
	"gemma3n_text", "gemma4_text", "gemma4_text-kvshared", "gemma4_text-moe",
}

// modernTolerance is the largest logit difference allowed on the GPU for
// the modern families, whose recurrences and routing sum in another order
// than the CPU's chunked forms.
const modernTolerance = 2e-3

// TestDenseConformance runs each dense fixture on the GPU against the Hugging
// Face reference logits: the whole sequence at once, token by token, in
// chunks of 3, token by token through a captured CUDA graph, and greedy ids.
func TestDenseConformance(t *testing.T) {
	b := openGPU(t)
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) { conform(t, b, name, archref.Tolerance) })
	}
}

// TestModernConformance is TestDenseConformance for the mixture-of-experts,
// hybrid linear-attention, state-space and Gemma 3n/4 families.
func TestModernConformance(t *testing.T) {
	b := openGPU(t)
	for _, name := range modernFixtures {
		t.Run(name, func(t *testing.T) { conform(t, b, name, modernTolerance) })
	}
}

// conform checks one fixture on the GPU with the given logit tolerance.
func conform(t *testing.T, b *Backend, name string, tol float64) {
	dir := fixtures.Dir(t, "archs", name)
	m, err := model.OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref := archref.Load(t, dir)
	want := ref.Logits
	vocab := m.Config().VocabSize
	row := func(i int) []float32 { return want[i*vocab : (i+1)*vocab] }
	check := func(what string, worst float64) {
		t.Helper()
		t.Logf("%s: max |Δlogit| = %.2e", what, worst)
		if worst > tol {
			t.Errorf("%s: max |Δlogit| = %.2e > %.0e", what, worst, tol)
		}
	}

	s := engine.NewSession(m, b, 64)
	all, err := s.AppendAll(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i, r := range all {
		worst = max(worst, archref.MaxDiff(r, row(i)))
	}
	check("whole sequence", worst)

	s = engine.NewSession(m, b, 64)
	worst = 0
	for i, id := range ref.InputIDs {
		r, err := s.Append([]int32{id})
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, archref.MaxDiff(r, row(i)))
	}
	check("token by token", worst)

	s = engine.NewSession(m, b, 64)
	s.SetChunk(3)
	r, err := s.Append(ref.InputIDs)
	if err != nil {
		t.Fatal(err)
	}
	check("chunked prefill (last row)", archref.MaxDiff(r, row(len(ref.InputIDs)-1)))

	check("token by token, CUDA graph", graphDecode(t, b, m, ref.InputIDs, want, vocab))

	s = engine.NewSession(m, b, 64)
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
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// graphDecode feeds tokens one at a time, running the first step directly
// and capturing the decode step as a CUDA graph that is replayed for the
// rest with new ids and positions, and returns the worst logit difference.
func graphDecode(t *testing.T, b *Backend, m model.Model, ids []int32, want []float32, vocab int) float64 {
	t.Helper()
	st := m.NewState(64)
	idT, posT := b.Alloc(compute.I32, 1), b.Alloc(compute.I32, 1)
	logits := b.Alloc(compute.F32, 1, vocab)
	defer func() { b.Free(idT); b.Free(posT); b.Free(logits) }()
	host := make([]float32, vocab)
	var g compute.Graph
	var worst float64
	for i, id := range ids {
		b.UploadInts(idT, []int32{id})
		b.UploadInts(posT, []int32{int32(i)})
		if i == 0 {
			m.Forward(st, idT, posT, logits)
		} else {
			if g == nil {
				var err error
				g, err = b.Capture(func() { m.Forward(st, idT, posT, logits) })
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
			}
			g.Launch()
		}
		b.Read(host, logits)
		worst = max(worst, archref.MaxDiff(host, want[i*vocab:(i+1)*vocab]))
	}
	return worst
}
