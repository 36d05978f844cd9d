package engine

import (
	"testing"

	"lem/internal/fixtures"
)

// BenchmarkDecodeStep measures one decode step (a forward pass of one token
// through the session and greedy sampling) on the chat-model fixture. The
// steady-state step must not allocate.
func BenchmarkDecodeStep(b *testing.B) {
	dir := fixtures.Dir(b, "chat-model")
	m, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s := m.NewSession(512)
	sampler := NewSampler(SampleParams{})
	logits, err := s.Append([]int32{1, 334, 224, 461})
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
	// Warm up through a whole context so that every buffer has grown.
	for range s.Capacity() {
		step()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

// benchDecodeSteps is BenchmarkDecodeStep on each named fixture of
// ../shared/fixtures/archs: one greedy decode step per iteration, after a
// warm-up through a whole context and a reset so that every buffer (KV
// caches, recurrent state, routing scratch) has grown. The steady-state
// step must not allocate.
func benchDecodeSteps(b *testing.B, names []string) {
	for _, name := range names {
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
			for range s.Capacity() + 1 {
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
