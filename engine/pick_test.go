package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
)

// plainBackend hides every optional interface of a backend (token picking,
// graphs): the engine then reads all the logits and samples on the host.
type plainBackend struct{ compute.Backend }

// testPick generates with the backend picking the candidates and with the
// host sampling from all the logits, and wants the same tokens.
func testPick(t *testing.T, b compute.Backend) {
	picking, err := OpenTiny(Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer picking.Close()
	host, err := OpenTiny(Options{Backend: plainBackend{b}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	prompt := picking.Tokenizer.Encode("Once upon a time, in a land far away", false)
	for _, tc := range []struct {
		name string
		p    SampleParams
		k    int // what pickK should choose
	}{
		{"greedy", SampleParams{}, 1},
		{"top-k 1", SampleParams{Temperature: 0.7, TopK: 1}, 1},
		{"top-k 40 top-p min-p", SampleParams{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 7, HasSeed: true}, 40},
		{"top-k 5 hot", SampleParams{Temperature: 1.5, TopK: 5, Seed: 3, HasSeed: true}, 5},
		{"top-k 256", SampleParams{Temperature: 1, TopK: 256, Seed: 11, HasSeed: true}, 256},
		{"penalty falls back", SampleParams{Temperature: 0.8, TopK: 40, RepetitionPenalty: 1.3, Seed: 5, HasSeed: true}, 0},
		{"all tokens fall back", SampleParams{Temperature: 0.8, Seed: 9, HasSeed: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Prompt: prompt, Sample: tc.p, MaxTokens: 24, IgnoreModelStops: true}
			if k := pickK(picking.Backend, &req, picking.Net.Config().VocabSize); k != tc.k {
				t.Errorf("pickK = %d, want %d", k, tc.k)
			}
			if k := pickK(host.Backend, &req, host.Net.Config().VocabSize); k != 0 {
				t.Errorf("pickK without a picker = %d, want 0", k)
			}
			run := func(m *Model) []int32 {
				s := m.NewSession(64)
				defer s.Close()
				res, err := m.Generate(context.Background(), s, req, nil)
				if err != nil {
					t.Fatal(err)
				}
				return res.IDs
			}
			got, want := run(picking), run(host)
			if !slices.Equal(got, want) {
				t.Errorf("picked on the backend: %v\nsampled on the host:   %v", got, want)
			}
		})
	}
}

func TestPick(t *testing.T) { testPick(t, cpu.New(1)) }

// TestPickOnDevice is TestPick on the device LEM_TEST_DEVICE names.
func TestPickOnDevice(t *testing.T) { testPick(t, testDevice(t)) }

// TestPickKFallback lists the requests that need every logit.
func TestPickKFallback(t *testing.T) {
	b := cpu.New(1)
	for _, req := range []Request{
		{Logprobs: true},
		{HostSampling: true},
		{Sample: SampleParams{LogitBias: map[int32]float32{3: 1}}},
		{Sample: SampleParams{PresencePenalty: 0.5}},
		{Sample: SampleParams{FrequencyPenalty: 0.5}},
		{Sample: SampleParams{Temperature: 1, TopK: compute.MaxTopK + 1}},
		{Sample: SampleParams{Temperature: 1, TopK: 100}}, // the whole vocabulary of 100
		{Constraint: nopConstraint{}},
	} {
		if k := pickK(b, &req, 100); k != 0 {
			t.Errorf("pickK(%+v) = %d, want 0", req, k)
		}
	}
}

type nopConstraint struct{}

func (nopConstraint) Mask([]float32) {}
func (nopConstraint) Accept(int32)   {}
func (nopConstraint) Done() bool     { return false }
