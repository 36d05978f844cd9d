package engine

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/synth"
)

// openSlow writes and opens a random-weight model whose prefill takes
// long enough on the CPU to be cancelled in the middle: lem synth's small
// geometry (a Qwen 3 of 8 layers of 512 over the built-in 512-token
// vocabulary), about half a second for 1,024 tokens on two idle cores.
func openSlow(t testing.TB) *Model {
	t.Helper()
	dir := t.TempDir()
	if _, err := synth.Write(dir, synth.Options{Like: "small", Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir, Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestGenerateCancelsPrefill cancels Generate while it prefills a long
// prompt: it returns ctx's error well before the prefill would have ended,
// having kept whole chunks only, and the session then continues the prompt
// to the output of a fresh session. Chunks of 128 stop between chunks;
// one chunk of the whole prompt stops between the backend's operations.
// Both sampling paths are covered: candidates picked by the backend
// (appendTop) and the logits read to the host (AppendContext).
func TestGenerateCancelsPrefill(t *testing.T) {
	m := openSlow(t)
	prompt := make([]int32, 1024)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % 500)
	}
	for _, tt := range []struct {
		name  string
		chunk int
		host  bool
	}{
		{"chunks of 128", 128, false},
		{"one chunk", len(prompt), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{Prompt: prompt, MaxTokens: 8, Sample: SampleParams{Temperature: 0}, HostSampling: tt.host}
			fresh := m.NewSession(4096)
			fresh.SetChunk(tt.chunk)
			want, err := m.Generate(context.Background(), fresh, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			full := want.Prefill

			s := m.NewSession(4096)
			s.SetChunk(tt.chunk)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cancelled := make(chan time.Time, 1)
			// An eighth of the way into the prefill.
			timer := time.AfterFunc(full/8, func() {
				cancelled <- time.Now()
				cancel()
			})
			defer timer.Stop()
			_, err = m.Generate(ctx, s, req, nil)
			returned := time.Now()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Generate returned %v, want context.Canceled", err)
			}
			var at time.Time
			select {
			case at = <-cancelled:
			default:
				t.Fatal("Generate returned context.Canceled before the context was cancelled")
			}
			if n := s.Len(); n >= len(prompt) || n%tt.chunk != 0 {
				t.Errorf("the cancelled session holds %d positions, want whole chunks of %d short of the prompt's %d", n, tt.chunk, len(prompt))
			}
			// Without the checks, Generate returns after the whole prefill,
			// 7/8 of full after the cancellation.
			if d := returned.Sub(at); d > full/3 {
				t.Errorf("Generate returned %v after the cancellation; the whole prefill takes %v", d, full)
			}
			t.Logf("prefill %v; returned %v after the cancellation, holding %d positions", full, returned.Sub(at), s.Len())

			held := s.Len()
			kept := s.Reuse(prompt)
			if kept != held {
				t.Errorf("Reuse kept %d of the %d positions the cancelled prefill left", kept, held)
			}
			req.Prompt = prompt[kept:]
			got, err := m.Generate(context.Background(), s, req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.IDs, want.IDs) {
				t.Errorf("after the cancelled prefill: %v, a fresh session: %v", got.IDs, want.IDs)
			}
		})
	}
}

// cancelAt is a context that is cancelled when Err is called for the n-th
// time: AppendContext calls it before each chunk, so n = k+1 cancels it
// after exactly k chunks.
type cancelAt struct {
	context.Context
	cancel   context.CancelFunc
	calls, n int
}

func (c *cancelAt) Err() error {
	if c.calls++; c.calls == c.n {
		c.cancel()
	}
	return c.Context.Err()
}

// TestAppendCancelKeepsState checks the state a cancelled prefill leaves,
// on full and sliding-window caches, experts and recurrent layers: after
// stopping between chunks, and after a chunk abandoned in the middle
// (whose operations may all have run or all been skipped), the session
// continues a prompt to the logits and greedy tokens of a cold run. It
// runs on the device LEM_TEST_DEVICE names, if any (see
// TestConformanceOnDevice), else on the CPU.
func TestAppendCancelKeepsState(t *testing.T) {
	var b compute.Backend = cpu.New(0)
	tol := 1e-4
	if spec := os.Getenv("LEM_TEST_DEVICE"); spec != "" {
		d, desc, err := device.Open(spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Log(desc)
		b, tol = d, deviceTolerance
	}
	for _, tt := range []struct {
		name string
		// The positions kept after cancelling before the third chunk of 8
		// and after abandoning the third: 16 where the state can keep
		// them; a sliding window of 8 that the abandoned chunk wrapped
		// starts afresh.
		between, abandoned int
	}{
		{"qwen3", 16, 16},
		{"gemma2", 16, 0},
		{"qwen3_moe", 16, 0}, // transformers windows its layers (model/qwen3moe.go)
		{"mamba2", 16, 16},
		{"qwen3_5_text", 16, 16},
		{"lfm2", 16, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", tt.name)
			m, err := model.OpenDir(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids := archref.Load(t, dir).InputIDs[:32]

			cold := NewSession(m, b, 64)
			lg, err := cold.Append(ids)
			if err != nil {
				t.Fatal(err)
			}
			wantLogits := slices.Clone(lg)
			wantIDs := greedy(t, cold, lg, 6)

			// continueFrom checks that s, holding kept of ids, continues ids
			// as the cold run did.
			continueFrom := func(t *testing.T, s *Session, kept int) {
				t.Helper()
				if got := s.Reuse(ids); got != kept || !slices.Equal(s.Tokens(), ids[:kept]) {
					t.Fatalf("Reuse kept %d tokens (%v), want the prompt's first %d", got, s.Tokens(), kept)
				}
				got, err := s.Append(ids[kept:])
				if err != nil {
					t.Fatal(err)
				}
				if d := archref.MaxDiff(got, wantLogits); d > tol {
					t.Errorf("max |Δlogit| against a cold run = %.2e", d)
				}
				if gotIDs := greedy(t, s, got, 6); !slices.Equal(gotIDs, wantIDs) {
					t.Errorf("continuation %v, cold run %v", gotIDs, wantIDs)
				}
			}

			t.Run("between chunks", func(t *testing.T) {
				s := NewSession(m, b, 64)
				s.SetChunk(8)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				_, err := s.AppendContext(&cancelAt{Context: ctx, cancel: cancel, n: 3}, ids)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("AppendContext returned %v, want context.Canceled", err)
				}
				if s.Len() != 16 {
					t.Fatalf("the session holds %d positions, want the two chunks before the cancellation", s.Len())
				}
				continueFrom(t, s, tt.between)
			})
			for _, skip := range []bool{false, true} {
				name := map[bool]string{false: "abandoned after running", true: "abandoned with every operation skipped"}[skip]
				t.Run(name, func(t *testing.T) {
					s := NewSession(m, b, 64)
					s.SetChunk(8)
					// A prompt other than ids, so that the positions the
					// abandoned chunk wrote hold other keys than the run's.
					other := slices.Clone(ids)
					for i := 16; i < 24; i++ {
						other[i] = (other[i] + 1) % int32(m.Config().VocabSize)
					}
					if _, err := s.Append(other[:16]); err != nil {
						t.Fatal(err)
					}
					stop := new(atomic.Bool)
					stop.Store(skip)
					ib := b.(compute.Interruptible)
					ib.SetInterrupt(stop)
					s.forward(other[16:24], nil)
					if r, ok := s.st.(model.Recurrent); ok {
						r.Checkpoint(s.Len())
					}
					ib.SetInterrupt(nil)
					s.abandon(16, 8)
					if s.Len() != tt.abandoned {
						t.Fatalf("the session holds %d positions after abandoning a chunk, want %d", s.Len(), tt.abandoned)
					}
					continueFrom(t, s, tt.abandoned)
				})
			}
		})
	}
}
