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
