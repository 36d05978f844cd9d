package cuda

import (
	"slices"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// BenchmarkBatchStep times the batched passes of a served 8B model on
// paged memory, as the scheduler runs them: a decode step of B sequences
// (each one row at position ctx) replayed as a graph, and a step of four
// 512-row prompt chunks (flash over the gathered pool) run directly; and
// logs where each step's device time goes, kernel by kernel. The cases
// named …w8192 pass block tables 8192 blocks wide (a context of 131,072
// positions), as a scheduler would whose tables span the context rather
// than the step's longest sequence.
func BenchmarkBatchStep(b *testing.B) {
	g := openGPU(b)
	m, _, err := synthLlama(g, llama8BConfig)
	if err != nil {
		b.Fatal(err)
	}
	bm := m.(model.Batched)
	vocab := m.Config().VocabSize
	const bs, ctx = 16, 544
	for _, c := range []struct {
		name       string
		seqs, rows int // sequences, rows each
		start      int // position of each sequence's first row
		width      int // table width in blocks (0: the blocks a sequence holds)
	}{
		{"decode1", 1, 1, ctx, 0},
		{"decode64", 64, 1, ctx, 0},
		{"decode256", 256, 1, ctx, 0},
		{"decode1w8192", 1, 1, ctx, 8192},
		{"decode256w8192", 256, 1, ctx, 8192},
		{"prefill4x512", 4, 512, 0, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			held := (c.start + c.rows + bs - 1) / bs
			maxb := max(held, c.width)
			cache, err := bm.NewCache(model.CacheSpec{BlockSize: bs, Blocks: []int{c.seqs * held}})
			if err != nil {
				b.Fatal(err)
			}
			n := c.seqs * c.rows
			ids, pos, seq := make([]int32, n), make([]int32, n), make([]int32, n)
			table := make([]int32, c.seqs*maxb)
			for i := range table {
				table[i] = -1
				if j := i % maxb; j < held {
					table[i] = int32(i/maxb*held + j)
				}
			}
			bt := &model.Batch{IDs: g.Alloc(compute.I32, n), Pos: g.Alloc(compute.I32, n),
				Logits: g.Alloc(compute.F32, c.seqs, vocab)}
			pg := compute.Pages{BlockSize: bs, MaxBlocks: maxb, Table: g.Alloc(compute.I32, len(table)), Seq: g.Alloc(compute.I32, n)}
			for s := range c.seqs {
				for r := range c.rows {
					i := s*c.rows + r
					ids[i], pos[i], seq[i] = int32((i*7919)%vocab), int32(c.start+r), int32(s)
				}
				bt.Seqs = append(bt.Seqs, model.BatchSeq{Rows: c.rows, State: -1, Logits: true})
				if c.rows > 1 {
					pg.Spans = append(pg.Spans, compute.PageSpan{Row: s * c.rows, Rows: c.rows, Start: c.start})
				}
			}
			g.UploadInts(bt.IDs, ids)
			g.UploadInts(bt.Pos, pos)
			g.UploadInts(pg.Table, table)
			g.UploadInts(pg.Seq, seq)
			bt.Pages = []compute.Pages{pg}
			bm.ForwardBatch(cache, bt) // sizes the activation buffers
			if err := g.Synchronize(); err != nil {
				b.Fatal(err)
			}
			const reps = 10
			var step time.Duration
			if c.rows == 1 {
				graph, err := g.Capture(func() { bm.ForwardBatch(cache, bt) })
				if err != nil {
					b.Fatal(err)
				}
				defer graph.Close()
				graph.Launch()
				g.Synchronize()
				t0 := time.Now()
				for range reps {
					graph.Launch()
				}
				g.Synchronize()
				step = time.Since(t0) / reps
			} else {
				t0 := time.Now()
				for range reps {
					bm.ForwardBatch(cache, bt)
				}
				g.Synchronize()
				step = time.Since(t0) / reps
			}
			b.ReportMetric(float64(n)/step.Seconds(), "rows/s")
			if c.rows > 1 {
				// Prompt chunks upload their spans' tables, which timed
				// launches cannot take.
				b.Logf("%s: %v/step, %.0f rows/s", c.name, step, float64(n)/step.Seconds())
				return
			}
			prof, err := g.ProfileLaunches(func() { bm.ForwardBatch(cache, bt) })
			if err != nil {
				b.Fatal(err)
			}
			var sum time.Duration
			for _, k := range prof {
				sum += k.Time
			}
			slices.SortFunc(prof, func(a, c KernelTime) int { return int(c.Time - a.Time) })
			b.Logf("%s: %v/step, %.0f rows/s; timed launches sum to %v:", c.name, step, float64(n)/step.Seconds(), sum)
			for i, k := range prof {
				if i == 14 {
					break
				}
				b.Logf("  %-26s %4d %9v %5.1f%%", k.Name, k.Launches, k.Time, 100*float64(k.Time)/float64(sum))
			}
			for _, t := range []*compute.Tensor{bt.IDs, bt.Pos, bt.Logits, pg.Table, pg.Seq} {
				g.Free(t)
			}
		})
	}
}
