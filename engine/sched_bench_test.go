package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/synth"
)

// BenchmarkSchedDecode measures aggregate decode over the scheduler with
// 1, 4 and 8 streams at once, and one stream on a Session for reference,
// on lem synth's small geometry (a Qwen 3 of 8 layers of 512, bf16). Each
// stream has a 16-token prompt and generates 64 tokens; decode tok/s is
// every stream's tokens after its first over the wall time from the
// first stream's first token to the last stream's end.
func BenchmarkSchedDecode(b *testing.B) {
	dir := b.TempDir()
	if _, err := synth.Write(dir, synth.Options{Like: "small", Seed: 5}); err != nil {
		b.Fatal(err)
	}
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	vocab := m.Net.Config().VocabSize
	const gen = 64
	req := func(i int) Request {
		return Request{Prompt: testPrompt(16, i, vocab), MaxTokens: gen, IgnoreModelStops: true}
	}
	for _, stable := range []bool{false, true} {
		name := "session"
		if stable {
			name = "session-rowstable"
		}
		b.Run(name, func(b *testing.B) {
			m.Backend.(*cpu.Backend).SetRowStable(stable)
			defer m.Backend.(*cpu.Backend).SetRowStable(false)
			benchSession(b, m, req(0))
		})
	}
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("parallel=%d", n), func(b *testing.B) {
			s, err := m.NewScheduler(SchedulerOptions{Parallel: n, Context: 256})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var tokens int
			var elapsed time.Duration
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				var first, last time.Time
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						k := 0
						res, err := s.Generate(context.Background(), req(i), func(t Token) error {
							if k++; k == 1 {
								mu.Lock()
								if now := time.Now(); first.IsZero() || now.Before(first) {
									first = now
								}
								mu.Unlock()
							}
							return nil
						})
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						tokens += len(res.IDs) - 1
						if now := time.Now(); now.After(last) {
							last = now
						}
						mu.Unlock()
					}()
				}
				wg.Wait()
				elapsed += last.Sub(first)
			}
			b.ReportMetric(float64(tokens)/elapsed.Seconds(), "decode-tok/s")
		})
	}
}

// benchSession measures one stream's decode on a Session.
func benchSession(b *testing.B, m *Model, req Request) {
	s := m.NewSession(256)
	var tokens int
	var elapsed time.Duration
	for b.Loop() {
		s.Reset()
		res, err := m.Generate(context.Background(), s, req, nil)
		if err != nil {
			b.Fatal(err)
		}
		tokens += len(res.IDs) - 1
		elapsed += res.Decode
	}
	b.ReportMetric(float64(tokens)/elapsed.Seconds(), "decode-tok/s")
}
