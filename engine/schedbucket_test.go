package engine

import "testing"

// TestTableWidth checks the block-table widths of steps: the most blocks
// a part reaches or its sequence's table holds, rounded up to a quarter
// of the power of two below it, at least minTableBlocks, at most the
// context's.
func TestTableWidth(t *testing.T) {
	s := &Scheduler{bs: 16, maxBlocks: 8192}
	for _, c := range []struct {
		hi, table, want int // a part's end position and table length
	}{
		{1, 1, 16},
		{256, 16, 16},
		{257, 17, 32},
		{545, 35, 48},
		{1024, 64, 64},
		{1025, 65, 80},
		{2048, 128, 128},
		{2049, 129, 160},
		{100, 40, 48}, // blocks held past the rows'
		{40000, 2500, 2560},
		{131072, 8192, 8192},
	} {
		parts := []stepPart{
			{q: &sequence{tables: [][]int32{make([]int32, 1)}}, lo: 0, hi: 1},
			{q: &sequence{tables: [][]int32{make([]int32, c.table)}}, lo: c.hi - 1, hi: c.hi},
		}
		if got := s.tableWidth(parts); got != c.want {
			t.Errorf("part to %d, table of %d: width %d, want %d", c.hi, c.table, got, c.want)
		}
	}
	s.maxBlocks = 40
	if got := s.tableWidth([]stepPart{{q: &sequence{tables: [][]int32{make([]int32, 35)}}, hi: 545}}); got != 40 {
		t.Errorf("width %d in a context of 40 blocks", got)
	}
}

// TestSchedTableWidths runs sequences whose steps' block tables widen as
// they grow, padded to buckets and not, in a context far wider than they
// reach: every sequence gives bitwise the tokens and logprobs it gives in
// a context as narrow as they, and no step's table was as wide as the
// context.
func TestSchedTableWidths(t *testing.T) {
	for _, name := range schedFixtures {
		t.Run(name, func(t *testing.T) {
			m := openFixture(t, name)
			vocab := m.Net.Config().VocabSize
			narrow := SchedulerOptions{Parallel: 4, Context: 128, BlockSize: 2, Chunk: 8, BatchTokens: 16}
			var reqs []Request
			for i, n := range []int{30, 3, 41, 12} {
				reqs = append(reqs, Request{Prompt: testPrompt(n, i, vocab), MaxTokens: 30 - 4*i, IgnoreModelStops: true, Logprobs: true})
			}
			want := alone(t, newSchedPad(t, m, narrow, false), reqs)
			wide := narrow
			wide.Context = 4096
			for _, pad := range []bool{false, true} {
				s := newSchedPad(t, m, wide, pad)
				sameCases(t, "wide context", together(t, s, reqs), want)
				waitIdle(t, s)
				if !s.pad {
					continue // not asked, or a recurrent model
				}
				if len(s.buckets) == 0 {
					t.Fatal("no padded steps")
				}
				for _, bk := range s.buckets {
					if bk.width < minTableBlocks || bk.width >= s.maxBlocks {
						t.Errorf("bucket of %d rows: last width %d of %d blocks", bk.rows, bk.width, s.maxBlocks)
					}
				}
			}
		})
	}
}
