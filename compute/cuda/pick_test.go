package cuda

import (
	"context"
	"slices"
	"testing"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
)

// TestGenerateOnGPU generates through the engine on the GPU, where the
// backend picks the tokens: greedy ids must be the reference's, and
// sampled ids those the host sampler draws from all the logits.
func TestGenerateOnGPU(t *testing.T) {
	b := openGPU(t)
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			m, err := engine.Open(dir, engine.Options{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ref := archref.Load(t, dir)
			gen := func(req engine.Request) []int32 {
				t.Helper()
				s := m.NewSession(64)
				defer s.Close()
				res, err := m.Generate(context.Background(), s, req, nil)
				if err != nil {
					t.Fatal(err)
				}
				return res.IDs
			}
			greedy := gen(engine.Request{Prompt: ref.GreedyPrompt, MaxTokens: len(ref.GreedyIDs), IgnoreModelStops: true})
			if !slices.Equal(greedy, ref.GreedyIDs) {
				t.Errorf("greedy ids\n got %v\nwant %v", greedy, ref.GreedyIDs)
			}
			for _, p := range []engine.SampleParams{
				{Temperature: 0.9, TopK: 20, TopP: 0.9, Seed: 1, HasSeed: true},
				{Temperature: 1.3, TopK: 3, MinP: 0.1, Seed: 2, HasSeed: true},
			} {
				req := engine.Request{Prompt: ref.GreedyPrompt, MaxTokens: 16, IgnoreModelStops: true, Sample: p}
				picked := gen(req)
				req.HostSampling = true
				host := gen(req)
				if !slices.Equal(picked, host) {
					t.Errorf("%+v: picked on the GPU %v, sampled on the host %v", p, picked, host)
				}
			}
		})
	}
}
