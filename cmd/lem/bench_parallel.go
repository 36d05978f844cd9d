package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/lem-engine/lem/engine"
)

// benchParallel is one row of bench's parallel mode (-npl), as
// llama.cpp's llama-batched-bench reports it: B sequences, each with a
// prompt of its own of PP random tokens, run at once through the
// scheduler, each generating TG tokens after its prompt, stop tokens
// ignored.
type benchParallel struct {
	PP  int `json:"pp"`   // prompt tokens per sequence
	TG  int `json:"tg"`   // tokens generated per sequence after the first
	B   int `json:"b"`    // sequences at once (an entry of -npl)
	NKV int `json:"n_kv"` // positions held in all: B × (PP + TG)
	// TPP is the time until every prompt was prefilled (every sequence
	// had its first token), SPP the prompt tokens of all sequences over
	// it: the aggregate prefill rate. Sequences whose prompts are done
	// start decoding while others still prefill, as they do when serving.
	TPP float64 `json:"t_pp"`
	SPP float64 `json:"speed_pp"`
	// TTG is the time from the end of the prefill phase to the last
	// token; STG the tokens generated in it over it: the aggregate decode
	// rate.
	TTG float64 `json:"t_tg"`
	STG float64 `json:"speed_tg"`
	// T is the whole run, S the positions NKV over it.
	T float64 `json:"t"`
	S float64 `json:"speed"`
	// Preemptions counts sequences the scheduler set back for want of
	// KV cache blocks (then recomputed): raise --kv-memory when not 0.
	Preemptions int64 `json:"preemptions"`
	// Restored counts the preempted sequences that resumed from their
	// blocks copied to host memory rather than recomputed.
	Restored int64 `json:"restored"`
	// DraftTokens is the draft tokens run (--draft), DraftAccepted those
	// the sequences accepted.
	DraftTokens   int64 `json:"draft_tokens,omitempty"`
	DraftAccepted int64 `json:"draft_accepted,omitempty"`
}

// runParallel measures the model in bench's parallel mode: for each entry
// of o.npl, that many sequences at once on a fresh scheduler. A warm-up
// run of one sequence of the same lengths comes first.
func runParallel(ctx context.Context, m *engine.Model, rep *benchReport, o benchOptions, logf func(string, ...any)) error {
	rng := rand.New(rand.NewPCG(3, 4))
	vocab := m.Net.Config().VocabSize
	randomIDs := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(vocab))
		}
		return ids
	}
	run := func(npl int) (benchParallel, error) {
		row := benchParallel{PP: o.prompt, TG: o.gen, B: npl, NKV: npl * (o.prompt + o.gen)}
		s, err := m.NewScheduler(engine.SchedulerOptions{Parallel: npl, Context: o.prompt + o.gen + 1, KVBytes: o.kvBytes, Draft: cmp.Or(o.draft, -1)})
		if err != nil {
			return row, err
		}
		defer s.Close()
		prompts := make([][]int32, npl)
		for i := range prompts {
			prompts[i] = randomIDs(o.prompt)
		}
		// times[i] holds when sequence i got each of its tokens.
		times := make([][]time.Time, npl)
		errs := make([]error, npl)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		start := time.Now()
		for i := range npl {
			times[i] = make([]time.Time, 0, o.gen+1)
			wg.Go(func() {
				req := engine.Request{Prompt: prompts[i], MaxTokens: o.gen + 1, IgnoreModelStops: true}
				res, err := s.Generate(ctx, req, func(t engine.Token) error {
					if t.ID >= 0 {
						times[i] = append(times[i], time.Now())
					}
					return nil
				})
				switch {
				case err != nil:
					errs[i] = fmt.Errorf("sequence %d of %d: %w", i+1, npl, err)
				case len(res.IDs) != o.gen+1:
					errs[i] = fmt.Errorf("sequence %d of %d stopped after %d of %d tokens (%s)", i+1, npl, len(res.IDs), o.gen+1, res.StopReason)
				}
				if errs[i] != nil {
					cancel()
				}
			})
		}
		wg.Wait()
		end := time.Now()
		for _, err := range errs {
			if err != nil {
				return row, err
			}
		}
		// The prefill phase ends when the last sequence has its first
		// token; the decode phase counts the tokens after that.
		var prefilled time.Time
		for _, ts := range times {
			if ts[0].After(prefilled) {
				prefilled = ts[0]
			}
		}
		decoded := 0
		for _, ts := range times {
			for _, at := range ts[1:] {
				if at.After(prefilled) {
					decoded++
				}
			}
		}
		row.TPP = prefilled.Sub(start).Seconds()
		row.TTG = end.Sub(prefilled).Seconds()
		row.T = end.Sub(start).Seconds()
		row.SPP = rateOf(npl*o.prompt, row.TPP)
		row.STG = rateOf(decoded, row.TTG)
		row.S = rateOf(row.NKV, row.T)
		st := s.Stats()
		row.Preemptions, row.Restored, row.DraftTokens, row.DraftAccepted = st.Preemptions, st.Restored, st.DraftTokens, st.DraftAccepted
		return row, nil
	}
	logf("bench: warming up\n")
	if _, err := run(1); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	stop, err := startProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	for _, npl := range o.npl {
		if err := ctx.Err(); err != nil {
			return err
		}
		row, err := run(npl)
		if err != nil {
			return fmt.Errorf("npl %d: %w", npl, err)
		}
		logf("bench: npl %d: prefill %.2f t/s, decode %.2f t/s\n", npl, row.SPP, row.STG)
		rep.Parallel = append(rep.Parallel, row)
	}
	return nil
}

// rateOf returns n per second over seconds, 0 when either is not
// positive.
func rateOf(n int, seconds float64) float64 {
	if n <= 0 || seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// printParallel prints the parallel mode's rows in llama-batched-bench's
// layout.
func printParallel(w io.Writer, r *benchReport) error {
	rows := [][]string{{"PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"}}
	for _, p := range r.Parallel {
		rows = append(rows, []string{
			fmt.Sprint(p.PP), fmt.Sprint(p.TG), fmt.Sprint(p.B), fmt.Sprint(p.NKV),
			fmt.Sprintf("%.3f", p.TPP), fmt.Sprintf("%.2f", p.SPP),
			fmt.Sprintf("%.3f", p.TTG), fmt.Sprintf("%.2f", p.STG),
			fmt.Sprintf("%.3f", p.T), fmt.Sprintf("%.2f", p.S),
		})
	}
	right := make([]bool, len(rows[0]))
	for i := range right {
		right[i] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s of weights, %s", r.Label, humanBytes(r.SizeBytes), r.Backend)
	if r.Threads > 0 {
		fmt.Fprintf(&b, ", %d threads", r.Threads)
	}
	b.WriteString("\n\n")
	writeTable(&b, rows, right)
	var preempted, restored int64
	for _, p := range r.Parallel {
		preempted += p.Preemptions
		restored += p.Restored
	}
	for _, p := range r.Parallel {
		if p.DraftTokens > 0 {
			fmt.Fprintf(&b, "\nB=%d: %d of %d draft tokens accepted (%.0f%%)", p.B, p.DraftAccepted, p.DraftTokens, 100*float64(p.DraftAccepted)/float64(p.DraftTokens))
		}
	}
	if preempted > 0 {
		fmt.Fprintf(&b, "\n%d sequences were preempted for want of KV cache blocks (%d of them resumed from blocks copied to host memory); raise --kv-memory for figures without\n", preempted, restored)
	}
	if r.LoadSeconds > 0 {
		fmt.Fprintf(&b, "\nload: %.2f s", r.LoadSeconds)
	}
	if r.PeakRSSBytes > 0 {
		fmt.Fprintf(&b, "; peak resident memory: %s", humanBytes(r.PeakRSSBytes))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
