package engine

import (
	"testing"

	"lem/internal/fixtures"
)

// moeFixtures are the mixture-of-experts fixtures that the CPU runs.
var moeFixtures = []string{"qwen3_moe", "gpt_oss"}

func TestMoEConformance(t *testing.T) {
	for _, name := range moeFixtures {
		t.Run(name, func(t *testing.T) {
			testArch(t, fixtures.Dir(t, "archs", name))
		})
	}
}

// BenchmarkMoEDecodeStep is BenchmarkDecodeStep on the mixture-of-experts
// fixtures: routing scratch is allocated once per state and chunk size, so
// the steady-state step must not allocate.
func BenchmarkMoEDecodeStep(b *testing.B) {
	for _, name := range moeFixtures {
		b.Run(name, func(b *testing.B) {
			m, err := Open(fixtures.Dir(b, "archs", name), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			s := m.NewSession(256)
			sampler := NewSampler(SampleParams{})
			logits, err := s.Append([]int32{1, 34, 22, 46})
			if err != nil {
				b.Fatal(err)
			}
			next := make([]int32, 1)
			step := func() {
				if s.Len() == s.Capacity() {
					s.Reset()
				}
				next[0] = sampler.Sample(logits, s.Tokens())
				if logits, err = s.Append(next); err != nil {
					b.Fatal(err)
				}
			}
			for range s.Capacity() {
				step()
			}
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
			if n := testing.AllocsPerRun(100, step); n != 0 {
				b.Errorf("%v allocations per decode step", n)
			}
		})
	}
}
