package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lem/compute"
)

// pagedCase is one geometry of TestAttendPaged.
type pagedCase struct {
	name               string
	heads, kvHeads, hd int
	window             int
	softCap            float32
	sinks              bool
	bs                 int
	steps              [][]int // per step, the rows of each sequence (0: not in the step)
}

// pagedRun holds the block tables of a set of sequences over one pool
// and builds the inputs of AttendPaged calls.
type pagedRun struct {
	bs, maxBlocks int
	table         []int32 // [sequences × maxBlocks], -1 where no block
	next          []int   // each sequence's next position
	free          []int32 // pool blocks not yet handed out, in random order
}

func newPagedRun(r *rand.Rand, seqs, bs, maxBlocks, blocks int) *pagedRun {
	p := &pagedRun{bs: bs, maxBlocks: maxBlocks, table: make([]int32, seqs*maxBlocks), next: make([]int, seqs)}
	for i := range p.table {
		p.table[i] = -1
	}
	for _, b := range r.Perm(blocks) {
		p.free = append(p.free, int32(b))
	}
	return p
}

// step lays out one call: rows[s] rows of sequence s, the sequences'
// rows interleaved in a random order, blocks taken from the free list as
// positions need them and, with a window, dropped (-1) once no row of the
// call can see them.
func (p *pagedRun) step(r *rand.Rand, rows []int, window int) (seq, pos []int32) {
	for s, n := range rows {
		for i := range n {
			pp := p.next[s] + i
			if e := &p.table[s*p.maxBlocks+pp/p.bs]; *e < 0 {
				*e, p.free = p.free[0], p.free[1:]
			}
			seq, pos = append(seq, int32(s)), append(pos, int32(pp))
		}
		if window > 0 && n > 0 {
			first := max(0, p.next[s]-window+1)
			for j := range first / p.bs {
				p.table[s*p.maxBlocks+j] = -1
			}
		}
		p.next[s] += n
	}
	r.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i]; pos[i], pos[j] = pos[j], pos[i] })
	return seq, pos
}

// TestAttendPaged compares AttendPaged with the CPU backend's over random,
// non-contiguous block tables: prefill chunks (several rows of a sequence
// in one call, beside other sequences' rows) and decode steps (one row per
// sequence, split over the keys), with GQA, sliding windows whose blocks
// leave the table, soft caps, sinks and head dims up to 512.
func TestAttendPaged(t *testing.T) {
	h := newHarness(t)
	r := rand.New(rand.NewPCG(5, 6))
	decode := func(seqs, n int) [][]int {
		var out [][]int
		for range n {
			s := make([]int, seqs)
			for i := range s {
				s[i] = 1
			}
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []pagedCase{
		{"mha", 4, 4, 32, 0, 0, false, 4, [][]int{{5, 3, 9}, {1, 1, 1}, {0, 4, 1}, {1, 1, 0}}},
		{"gqa", 8, 2, 64, 0, 0, false, 16, [][]int{{37, 1, 20}, {1, 1, 1}, {1, 0, 1}}},
		{"window", 4, 2, 48, 7, 0, false, 4, [][]int{{9, 12}, {1, 1}, {6, 1}, {1, 1}, {1, 1}}},
		{"softcap sinks", 4, 2, 128, 0, 30, true, 8, [][]int{{6, 2}, {1, 1}}},
		{"hd 256", 4, 1, 256, 0, 0, true, 16, [][]int{{3, 1}, {1, 1}}},
		{"hd 512", 2, 1, 512, 0, 0, false, 16, [][]int{{4, 2}, {1, 1}}},
		{"decode split", 8, 2, 128, 0, 0, false, 16, append([][]int{{700, 300, 1, 520}}, decode(4, 3)...)},
		{"decode split window sinks", 8, 4, 64, 300, 20, true, 16, append([][]int{{650, 20, 301}}, decode(3, 3)...)},
		{"many rows", 4, 2, 64, 0, 0, false, 32, [][]int{{900, 800, 700}, {1, 1, 1}}},
	} {
		for _, whole := range []bool{false, true} {
			name := tc.name
			if whole {
				name += "/unsplit"
			}
			t.Run(name, func(t *testing.T) {
				h.t = t
				if whole {
					// Every (row, head) in one block, as for long prefill chunks.
					defer func(m int64) { h.g.pagedPart = m }(h.g.pagedPart)
					h.g.pagedPart = 0
				}
				pagedCompare(t, h, r, tc)
			})
		}
	}
}

// pagedCompare runs one case of TestAttendPaged.
func pagedCompare(t *testing.T, h *harness, r *rand.Rand, tc pagedCase) {
	seqs := len(tc.steps[0])
	longest := 0
	for s := range seqs {
		n := 0
		for _, st := range tc.steps {
			n += st[s]
		}
		longest = max(longest, n)
	}
	maxBlocks := (longest + tc.bs - 1) / tc.bs
	blocks := seqs*maxBlocks + 5
	kc := tc.kvHeads * tc.hd
	cpool := h.c.NewKVCache(blocks*tc.bs, kc, false)
	gpool := h.g.NewKVCache(blocks*tc.bs, kc, false)
	run := newPagedRun(r, seqs, tc.bs, maxBlocks, blocks)
	a := &compute.Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd,
		Scale: float32(1 / math.Sqrt(float64(tc.hd))), SoftCap: tc.softCap, Window: tc.window}
	var sinks pair
	if tc.sinks {
		sinks = h.vec(compute.F32, 2, tc.heads)
	}
	for step, rows := range tc.steps {
		seq, ps := run.step(r, rows, tc.window)
		n := len(seq)
		q := h.act(2, n, tc.heads*tc.hd)
		k := h.act(2, n, kc)
		v := h.act(1, n, kc)
		table, sq, pos := h.ints(run.table), h.ints(seq), h.ints(ps)
		dst := h.zeros(n, tc.heads*tc.hd)
		pg := func(i int) *compute.Pages {
			return &compute.Pages{BlockSize: tc.bs, MaxBlocks: maxBlocks, Table: [2]*compute.Tensor{table.c, table.g}[i], Seq: [2]*compute.Tensor{sq.c, sq.g}[i]}
		}
		a.Sinks = sinks.c
		h.c.AttendPaged(dst.c, q.c, k.c, v.c, cpool, pg(0), pos.c, a)
		a.Sinks = sinks.g
		h.g.AttendPaged(dst.g, q.g, k.g, v.g, gpool, pg(1), pos.g, a)
		h.compare(fmt.Sprintf("step %d (%d rows)", step, n), dst, 2e-5)
	}
	h.compare("pool K", pair{cpool.K, gpool.K}, 0)
	h.compare("pool V", pair{cpool.V, gpool.V}, 0)
}

// TestAttendPagedRowsIndependent checks that a decode row's result does
// not depend on the other rows of the call: the same sequence attended
// alone and beside others gives the same bits.
func TestAttendPagedRowsIndependent(t *testing.T) {
	h := newHarness(t)
	g := h.g
	r := rand.New(rand.NewPCG(7, 8))
	const bs, heads, kvHeads, hd = 16, 8, 2, 128
	kc := kvHeads * hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.09}
	run := newPagedRun(r, 6, bs, 64, 6*64)
	pool := g.NewKVCache(6*64*bs, kc, false)
	// Fill every sequence's first 700 positions.
	seq, ps := run.step(r, []int{700, 650, 300, 900, 20, 515}, 0)
	n := len(seq)
	table := g.Alloc(compute.I32, len(run.table))
	g.UploadInts(table, run.table)
	sq, pos := g.Alloc(compute.I32, n), g.Alloc(compute.I32, n)
	g.UploadInts(sq, seq)
	g.UploadInts(pos, ps)
	k, v := gpuRandom(g, 1, 1, n, kc), gpuRandom(g, 2, 1, n, kc)
	fill := g.Alloc(compute.F32, n, heads*hd)
	g.AttendPaged(fill, gpuRandom(g, 3, 1, n, heads*hd), k, v, pool, &compute.Pages{BlockSize: bs, MaxBlocks: 64, Table: table, Seq: sq}, pos, a)
	// Sequence 3 decodes its next position alone, then with the others
	// (its new key and value are the same in both).
	q1 := randVals(r, heads*hd, 1)
	k1, v1 := randVals(r, kc, 1), randVals(r, kc, 1)
	attend := func(seqs []int32) []float32 {
		var sqv, pv []int32
		var qv, kv, vv []float32
		for _, s := range seqs {
			sqv, pv = append(sqv, s), append(pv, int32(run.next[s]))
			if s == 3 {
				qv, kv, vv = append(qv, q1...), append(kv, k1...), append(vv, v1...)
			} else {
				qv, kv, vv = append(qv, randVals(r, heads*hd, 1)...), append(kv, randVals(r, kc, 1)...), append(vv, randVals(r, kc, 1)...)
			}
		}
		m := len(seqs)
		q, k, v := g.Alloc(compute.F32, m, heads*hd), g.Alloc(compute.F32, m, kc), g.Alloc(compute.F32, m, kc)
		sq, pos, dst := g.Alloc(compute.I32, m), g.Alloc(compute.I32, m), g.Alloc(compute.F32, m, heads*hd)
		g.Upload(q, qv)
		g.Upload(k, kv)
		g.Upload(v, vv)
		g.UploadInts(sq, sqv)
		g.UploadInts(pos, pv)
		g.AttendPaged(dst, q, k, v, pool, &compute.Pages{BlockSize: bs, MaxBlocks: 64, Table: table, Seq: sq}, pos, a)
		out := make([]float32, m*heads*hd)
		g.Read(out, dst)
		for i, s := range seqs {
			if s == 3 {
				return out[i*heads*hd : (i+1)*heads*hd]
			}
		}
		return nil
	}
	alone := attend([]int32{3})
	for _, seqs := range [][]int32{{0, 1, 2, 3, 4, 5}, {5, 3}, {3, 0, 1}} {
		got := attend(seqs)
		if err := g.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range alone {
			if math.Float32bits(got[i]) != math.Float32bits(alone[i]) {
				t.Fatalf("rows %v: output %d = %g, alone %g", seqs, i, got[i], alone[i])
			}
		}
	}
}

// TestAttendPagedGraph captures a decode call in a CUDA graph and replays
// it after changing the block table, the row→sequence map, the positions
// and the inputs: every replay matches the CPU on the new inputs.
func TestAttendPagedGraph(t *testing.T) {
	h := newHarness(t)
	g := h.g
	r := rand.New(rand.NewPCG(9, 10))
	const seqs, bs, maxBlocks, heads, kvHeads, hd = 5, 16, 40, 8, 2, 64
	kc := kvHeads * hd
	blocks := seqs*maxBlocks + 3
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.125, SoftCap: 25}
	cpool := h.c.NewKVCache(blocks*bs, kc, false)
	gpool := g.NewKVCache(blocks*bs, kc, false)
	run := newPagedRun(r, seqs, bs, maxBlocks, blocks)
	// Fixed tensors the graph refers to.
	table := pair{h.c.Alloc(compute.I32, seqs*maxBlocks), g.Alloc(compute.I32, seqs*maxBlocks)}
	sq := pair{h.c.Alloc(compute.I32, seqs), g.Alloc(compute.I32, seqs)}
	pos := pair{h.c.Alloc(compute.I32, seqs), g.Alloc(compute.I32, seqs)}
	q, k, v := h.zeros(seqs, heads*hd), h.zeros(seqs, kc), h.zeros(seqs, kc)
	dst := h.zeros(seqs, heads*hd)
	pgs := [2]*compute.Pages{
		{BlockSize: bs, MaxBlocks: maxBlocks, Table: table.c, Seq: sq.c},
		{BlockSize: bs, MaxBlocks: maxBlocks, Table: table.g, Seq: sq.g},
	}
	set := func(p pair, v []float32) {
		h.c.Upload(p.c, v)
		g.Upload(p.g, v)
	}
	setInts := func(p pair, v []int32) {
		h.c.UploadInts(p.c, v)
		g.UploadInts(p.g, v)
	}
	// Prefill the sequences to different lengths, outside the graph.
	pseq, pps := run.step(r, []int{100, 3, 250, 17, 60}, 0)
	pn := len(pseq)
	pq, pk, pv := h.act(1, pn, heads*hd), h.act(1, pn, kc), h.act(1, pn, kc)
	pdst := h.zeros(pn, heads*hd)
	psq, ppos := h.ints(pseq), h.ints(pps)
	ptable := h.ints(run.table)
	h.c.AttendPaged(pdst.c, pq.c, pk.c, pv.c, cpool, &compute.Pages{BlockSize: bs, MaxBlocks: maxBlocks, Table: ptable.c, Seq: psq.c}, ppos.c, a)
	g.AttendPaged(pdst.g, pq.g, pk.g, pv.g, gpool, &compute.Pages{BlockSize: bs, MaxBlocks: maxBlocks, Table: ptable.g, Seq: psq.g}, ppos.g, a)
	decode := func() {
		seq, ps := run.step(r, []int{1, 1, 1, 1, 1}, 0)
		setInts(table, run.table)
		setInts(sq, seq)
		setInts(pos, ps)
		for _, p := range []pair{q, k, v} {
			set(p, randVals(r, p.c.Len(), 1))
		}
	}
	// Once uncaptured (scratch memory), then captured.
	decode()
	g.AttendPaged(dst.g, q.g, k.g, v.g, gpool, pgs[1], pos.g, a)
	h.c.AttendPaged(dst.c, q.c, k.c, v.c, cpool, pgs[0], pos.c, a)
	h.compare("uncaptured", dst, 2e-5)
	graph, err := g.Capture(func() { g.AttendPaged(dst.g, q.g, k.g, v.g, gpool, pgs[1], pos.g, a) })
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	for rep := range 20 {
		decode()
		graph.Launch()
		h.c.AttendPaged(dst.c, q.c, k.c, v.c, cpool, pgs[0], pos.c, a)
		h.compare(fmt.Sprintf("replay %d", rep), dst, 2e-5)
	}
	h.compare("pool K", pair{cpool.K, gpool.K}, 0)
	h.compare("pool V", pair{cpool.V, gpool.V}, 0)
}

// BenchmarkAttendPaged measures batched decode attention over a paged
// pool on llama-3.1-8b's geometry (32 query heads, 8 kv heads of 128; f32
// keys and values, blocks of 16 in random order): one call per step, every
// sequence at the same context. GB/s counts the keys and values read.
func BenchmarkAttendPaged(b *testing.B) {
	g := openGPU(b)
	const bs, heads, kvHeads, hd = 16, 32, 8, 128
	kc := kvHeads * hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
	bw, err := copyBandwidth()
	if err != nil {
		b.Fatal(err)
	}
	for _, ctx := range []int{512, 2048} {
		for _, seqs := range []int{8, 64, 256} {
			b.Run(fmt.Sprintf("ctx%d/seqs%d", ctx, seqs), func(b *testing.B) {
				r := rand.New(rand.NewPCG(uint64(ctx), uint64(seqs)))
				maxBlocks := ctx/bs + 1
				blocks := seqs * maxBlocks
				pool := g.NewKVCache(blocks*bs, kc, false)
				defer g.Free(pool.K)
				defer g.Free(pool.V)
				table := make([]int32, seqs*maxBlocks)
				for i, p := range r.Perm(blocks) {
					table[i] = int32(p)
				}
				seq, ps := make([]int32, seqs), make([]int32, seqs)
				for s := range seqs {
					seq[s], ps[s] = int32(s), int32(ctx-1)
				}
				tt, st, pt := g.Alloc(compute.I32, len(table)), g.Alloc(compute.I32, seqs), g.Alloc(compute.I32, seqs)
				g.UploadInts(tt, table)
				g.UploadInts(st, seq)
				g.UploadInts(pt, ps)
				q, k, v := gpuRandom(g, 1, 1, seqs, heads*hd), gpuRandom(g, 2, 1, seqs, kc), gpuRandom(g, 3, 1, seqs, kc)
				dst := g.Alloc(compute.F32, seqs, heads*hd)
				pg := &compute.Pages{BlockSize: bs, MaxBlocks: maxBlocks, Table: tt, Seq: st}
				s := timeOps(b, g, func() { g.AttendPaged(dst, q, k, v, pool, pg, pt, a) })
				bytes := float64(seqs) * float64(ctx) * float64(kc) * 8
				b.ReportMetric(bytes/s/1e9, "GB/s")
				b.ReportMetric(bytes/s/bw, "of-copy-bw")
				for _, t := range []*compute.Tensor{tt, st, pt, q, k, v, dst} {
					g.Free(t)
				}
			})
		}
	}
}
