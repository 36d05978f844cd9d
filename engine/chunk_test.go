package engine

import (
	"testing"

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
