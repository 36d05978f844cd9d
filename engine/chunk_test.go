package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
)

// chunky is a CPU backend that asks for another prefill chunk.
type chunky struct {
	*cpu.Backend
	chunk int
}

func (c chunky) PrefillChunk() int { return c.chunk }

func TestChunkFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    compute.Backend
		want int
	}{
		{"plain backend", cpu.New(1), DefaultChunk},
		{"backend's chunk", chunky{cpu.New(1), 1024}, 1024},
		{"non-positive chunk ignored", chunky{cpu.New(1), 0}, DefaultChunk},
	} {
		if got := chunkFor(tc.b); got != tc.want {
			t.Errorf("%s: chunkFor = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSchedChunk(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         compute.Backend
		recurrent bool
		want      int
	}{
		{"cpu", cpu.New(1), false, cpuChunk},
		{"cpu, recurrent", cpu.New(1), true, DefaultChunk},
		{"backend's chunk", chunky{cpu.New(1), 1024}, false, 1024},
		{"backend's chunk, recurrent", chunky{cpu.New(1), 1024}, true, 1024},
	} {
		if got := schedChunk(tc.b, tc.recurrent); got != tc.want {
			t.Errorf("%s: schedChunk = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// BenchmarkSchedChunk measures a 512-token prompt's prefill on a
// scheduler with prompt chunks of 64, 128 and 256 positions, on lem
// synth's small geometry or the model at $LEM_BENCH_CHUNK_MODEL (a model
// directory or GGUF file), 2 threads. It reports prompt tokens/s: what
// shorter chunks, which make decoding streams wait less, cost a prompt.
func BenchmarkSchedChunk(b *testing.B) {
	m := benchModel(b, "LEM_BENCH_CHUNK_MODEL")
	const plen = 512
	vocab := m.Net.Config().VocabSize
	for _, chunk := range []int{64, 128, 256} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			s, err := m.NewScheduler(SchedulerOptions{Parallel: 1, Context: plen + 8, Chunk: chunk, Draft: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var elapsed time.Duration
			iter := 0
			for b.Loop() {
				// A new prompt each time: no prefix is cached.
				req := Request{Prompt: testPrompt(plen, 1000+iter, vocab), MaxTokens: 1, IgnoreModelStops: true}
				iter++
				res, err := s.Generate(context.Background(), req, nil)
				if err != nil {
					b.Fatal(err)
				}
				elapsed += res.Prefill
			}
			b.ReportMetric(float64(plen*iter)/elapsed.Seconds(), "prompt-tok/s")
		})
	}
}
