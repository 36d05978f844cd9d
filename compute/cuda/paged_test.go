package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// poolTypes are the element types of the CUDA paged pools under test: f32
// (NewKVCache) and f16 (NewKVPool).
var poolTypes = []compute.DType{compute.F32, compute.F16}

// newPool makes a GPU paged pool of blocks×bs positions of type dt.
func newPool(g *Backend, dt compute.DType, blocks, bs, kc int) *compute.KVCache {
	if dt == compute.F32 {
		return g.NewKVCache(blocks*bs, kc, false)
	}
	defer func(t compute.DType) { g.poolType = t }(g.poolType)
	g.poolType = dt
	return g.NewKVPool(blocks, bs, kc)
}

// roundF16 returns v rounded to f16 (to nearest, ties to even) and back:
// what an f16 pool keeps of a key or value.
func roundF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = half.F16ToF32(half.F32ToF16(x))
	}
	return out
}

// readPool reads a GPU pool tensor of type F32 or F16 as float32.
func readPool(g *Backend, t *compute.Tensor) []float32 {
	if t.DType == compute.F32 {
		out := make([]float32, t.Len())
		g.Read(out, t)
		return out
	}
	raw := make([]float32, t.Len()/2)
	g.Read(raw, t)
	hs := unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), t.Len())
	out := make([]float32, t.Len())
	for i, h := range hs {
		out[i] = half.F16ToF32(h)
	}
	return out
}

// comparePools checks that the GPU pool holds the CPU pool's values
// exactly (the CPU was given the values the GPU pool rounds to). The CPU
// lays each block of bs positions out head by head (block, kv head, row,
// dim); the GPU position by position (block, row, kv head, dim).
func comparePools(t *testing.T, h *harness, cpool, gpool *compute.KVCache, bs int, a *compute.Attention) {
	t.Helper()
	hd, kvh := a.HeadDim, a.KVHeads
	kc := kvh * hd
	for _, kv := range [][2]*compute.Tensor{{cpool.K, gpool.K}, {cpool.V, gpool.V}} {
		cpu := make([]float32, kv[0].Len())
		h.c.Read(cpu, kv[0])
		want := make([]float32, len(cpu))
		for i := range want {
			row, c := i/kc, i%kc
			blk, r, kh, d := row/bs, row%bs, c/hd, c%hd
			want[i] = cpu[((blk*kvh+kh)*bs+r)*hd+d]
		}
		got := readPool(h.g, kv[1])
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("pool (%s) element %d = %g, want %g", kv[1].DType, i, got[i], want[i])
			}
		}
	}
}

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
// leave the table, soft caps, sinks and head dims up to 512, over f32 and
// f16 pools, on the grouped and the general kernel, and in launches of one
// row.
//
// f16 pools: the CPU is given the keys and values rounded to f16 (what the
// GPU pool keeps, exactly: kvstore_paged rounds to nearest even, as
// half.F32ToF16 does, and f16 widens to f32 exactly), so the outputs must
// agree to the f32 tolerance, and the pools bit for bit. Against the CPU on
// the unrounded values, rounding each key element by at most 2⁻¹¹ of
// itself moves a score by at most δ = 2⁻¹¹·scale·Σ|q·k| and each value
// by 2⁻¹¹|v|; the softmax weights then move by at most a factor e^{±2δ},
// so an output moves by at most (e^{2δ}−1 + 2⁻¹¹)·max|v|: that bound is
// checked too, with δ from the largest |q|, |k| and the head dim.
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
		{"gqa 8", 16, 2, 128, 0, 0, false, 16, [][]int{{40, 300}, {1, 1}, {1, 1}}},
		{"gqa 12 sinks", 12, 1, 64, 0, 0, true, 8, [][]int{{30, 5, 270}, {1, 1, 1}}},
		{"gqa 256 window", 8, 1, 256, 20, 0, false, 4, [][]int{{30, 5}, {1, 1}, {2, 1}}},
		{"window", 4, 2, 48, 7, 0, false, 4, [][]int{{9, 12}, {1, 1}, {6, 1}, {1, 1}, {1, 1}}},
		{"softcap sinks", 4, 2, 128, 0, 30, true, 8, [][]int{{6, 2}, {1, 1}}},
		{"hd 256", 4, 1, 256, 0, 0, true, 16, [][]int{{3, 1}, {1, 1}}},
		{"hd 512", 2, 1, 512, 0, 0, false, 16, [][]int{{4, 2}, {1, 1}}},
		{"decode split", 8, 2, 128, 0, 0, false, 16, append([][]int{{700, 300, 1, 520}}, decode(4, 3)...)},
		{"decode split window sinks", 8, 4, 64, 300, 20, true, 16, append([][]int{{650, 20, 301}}, decode(3, 3)...)},
		{"many rows", 4, 2, 64, 0, 0, false, 32, [][]int{{900, 800, 700}, {1, 1, 1}}},
	} {
		for _, dt := range poolTypes {
			for _, mode := range []string{"", "/one row per launch", "/general kernel", "/tensor cores"} {
				t.Run(tc.name+"/"+dt.String()+mode, func(t *testing.T) {
					h.t = t
					switch mode {
					case "/one row per launch":
						// The least scratch: every row in a launch of its own.
						defer func(m int64) { h.g.pagedPart = m }(h.g.pagedPart)
						h.g.pagedPart = 0
					case "/general kernel":
						defer func(on bool) { h.g.pagedGeneric = on }(h.g.pagedGeneric)
						h.g.pagedGeneric = true
					case "/tensor cores":
						// Every call, whatever its rows (f16 pools of head
						// dims 64 and 128; the others take the SIMT kernels).
						defer func(n int) { h.g.pagedTC = n }(h.g.pagedTC)
						h.g.pagedTC = 1
					}
					pagedCompare(t, h, r, tc, dt)
				})
			}
		}
	}
}

// pagedCompare runs one case of TestAttendPaged.
func pagedCompare(t *testing.T, h *harness, r *rand.Rand, tc pagedCase, dt compute.DType) {
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
	epool := h.c.NewKVCache(blocks*tc.bs, kc, false) // unrounded values (f16 pools)
	gpool := newPool(h.g, dt, blocks, tc.bs, kc)
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
		exact := pair{h.c.Alloc(compute.F32, n, tc.heads*tc.hd), nil}
		ek, ev := h.c.Alloc(compute.F32, n, kc), h.c.Alloc(compute.F32, n, kc)
		if dt == compute.F16 {
			// The CPU attends over what the GPU pool keeps; epool keeps
			// the unrounded values for the bound.
			for _, t := range [][2]*compute.Tensor{{k.c, ek}, {v.c, ev}} {
				vals := make([]float32, n*kc)
				h.c.Read(vals, t[0])
				h.c.Upload(t[1], vals)
				h.c.Upload(t[0], roundF16(vals))
			}
		}
		table, sq, pos := h.ints(run.table), h.ints(seq), h.ints(ps)
		dst := h.zeros(n, tc.heads*tc.hd)
		pg := func(i int) *compute.Pages {
			return &compute.Pages{BlockSize: tc.bs, MaxBlocks: maxBlocks, Table: [2]*compute.Tensor{table.c, table.g}[i], Seq: [2]*compute.Tensor{sq.c, sq.g}[i]}
		}
		a.Sinks = sinks.c
		h.c.AttendPaged(dst.c, q.c, k.c, v.c, cpool, pg(0), pos.c, a)
		if dt == compute.F16 {
			h.c.AttendPaged(exact.c, q.c, ek, ev, epool, pg(0), pos.c, a)
		}
		a.Sinks = sinks.g
		h.g.AttendPaged(dst.g, q.g, k.g, v.g, gpool, pg(1), pos.g, a)
		tol := 2e-5
		if h.g.tcKernel(gpool, a, n) >= 0 {
			// attend_ptc rounds the queries to f16, which moves a score
			// as rounding the keys does (δ below), and the softmax
			// weights it multiplies the values by, each by at most 2⁻¹¹
			// of itself: |Δ| ≤ (e^{2δ}−1 + 2·2⁻¹¹)·max|v|, max|v| < 1.
			delta := math.Ldexp(1, -11) * float64(a.Scale) * float64(tc.hd) * 2 * 2
			if tc.softCap > 0 {
				delta = min(delta, 2*float64(tc.softCap))
			}
			tol = math.Exp(2*delta) - 1 + math.Ldexp(1, -10)
		}
		h.compare(fmt.Sprintf("step %d (%d rows)", step, n), dst, tol)
		if dt == compute.F16 {
			// |q| < 2, |k| < 2, |v| < 1 (h.act's scales).
			delta := math.Ldexp(1, -11) * float64(a.Scale) * float64(tc.hd) * 2 * 2
			if tc.softCap > 0 {
				delta = min(delta, 2*float64(tc.softCap)) // a capped score moves less
			}
			bound := (math.Exp(2*delta) - 1 + math.Ldexp(1, -11)) * 1
			if tol > 2e-5 {
				bound += tol // the queries and weights rounded too
			}
			got := make([]float32, n*tc.heads*tc.hd)
			want := make([]float32, len(got))
			h.g.Read(got, dst.g)
			h.c.Read(want, exact.c)
			worst := 0.0
			for i := range got {
				worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
			}
			t.Logf("step %d: f16 pool against unrounded f32: max |Δ| %.2e (bound %.2e)", step, worst, bound)
			if worst > bound || math.IsNaN(worst) {
				t.Errorf("step %d: f16 pool moves an output by %.3g, more than rounding allows (%.3g)", step, worst, bound)
			}
		}
	}
	comparePools(t, h, cpool, gpool, tc.bs, a)
}

// roundCPU rounds the CPU side of p to f16 values (what an f16 pool keeps).
func (h *harness) roundCPU(p pair) {
	vals := make([]float32, p.c.Len())
	h.c.Read(vals, p.c)
	h.c.Upload(p.c, roundF16(vals))
}

// TestAttendPagedRowsIndependent checks that a decode row's result does
// not depend on the other rows of the call: the same sequence attended
// alone and beside others (decode rows of other sequences, a chunk of
// several rows of another, long tables) gives the same bits, on f32 and
// f16 pools, also when the call runs in launches of a few rows.
func TestAttendPagedRowsIndependent(t *testing.T) {
	for _, dt := range poolTypes {
		t.Run(dt.String(), func(t *testing.T) { rowsIndependent(t, dt) })
	}
}

func rowsIndependent(t *testing.T, dt compute.DType) {
	h := newHarness(t)
	g := h.g
	r := rand.New(rand.NewPCG(7, 8))
	const bs, heads, kvHeads, hd = 16, 8, 2, 128
	kc := kvHeads * hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.09}
	run := newPagedRun(r, 6, bs, 64, 6*64)
	pool := newPool(g, dt, 6*64, bs, kc)
	// Fill every sequence's first positions.
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
	// (its new key and value are the same in both). A sequence listed
	// several times contributes rows at consecutive positions.
	q1 := randVals(r, heads*hd, 1)
	k1, v1 := randVals(r, kc, 1), randVals(r, kc, 1)
	attend := func(seqs []int32) []float32 {
		var sqv, pv []int32
		var qv, kv, vv []float32
		at := map[int32]int{}
		for _, s := range seqs {
			sqv, pv = append(sqv, s), append(pv, int32(run.next[s]+at[s]))
			at[s]++
			if s == 3 {
				qv, kv, vv = append(qv, q1...), append(kv, k1...), append(vv, v1...)
			} else {
				qv, kv, vv = append(qv, randVals(r, heads*hd, 1)...), append(kv, randVals(r, kc, 1)...), append(vv, randVals(r, kc, 1)...)
			}
		}
		m := len(seqs)
		q, k, v := g.Alloc(compute.F32, m, heads*hd), g.Alloc(compute.F32, m, kc), g.Alloc(compute.F32, m, kc)
		sq, pos, dst := g.Alloc(compute.I32, m), g.Alloc(compute.I32, m), g.Alloc(compute.F32, m, heads*hd)
		defer func() {
			for _, t := range []*compute.Tensor{q, k, v, sq, pos, dst} {
				g.Free(t)
			}
		}()
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
	// Rows are independent of their batch for a given span: fix it.
	defer func(s int) { g.pagedSpan = s }(g.pagedSpan)
	g.pagedSpan = pagedSpan
	alone := attend([]int32{3})
	for _, part := range []int64{pagedPartMax, 3 * heads * 4 * (hd + 2) * 4} {
		g.pagedPart = part
		for _, seqs := range [][]int32{{0, 1, 2, 3, 4, 5}, {5, 3}, {3, 0, 1}, {0, 0, 0, 0, 3, 1}, {4, 4, 2, 3}} {
			got := attend(seqs)
			if err := g.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range alone {
				if math.Float32bits(got[i]) != math.Float32bits(alone[i]) {
					t.Fatalf("rows %v (%d bytes of parts per launch): output %d = %g, alone %g", seqs, part, i, got[i], alone[i])
				}
			}
		}
	}
	g.pagedPart = pagedPartMax
}

// TestAttendPagedGraph captures a decode call in a CUDA graph and replays
// it after changing the block table, the row→sequence map, the positions
// and the inputs: every replay matches the CPU on the new inputs, on f32
// and f16 pools.
func TestAttendPagedGraph(t *testing.T) {
	for _, dt := range poolTypes {
		t.Run(dt.String(), func(t *testing.T) { pagedGraph(t, dt) })
	}
}

func pagedGraph(t *testing.T, dt compute.DType) {
	h := newHarness(t)
	g := h.g
	r := rand.New(rand.NewPCG(9, 10))
	const seqs, bs, maxBlocks, heads, kvHeads, hd = 5, 16, 40, 8, 2, 64
	kc := kvHeads * hd
	blocks := seqs*maxBlocks + 3
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.125, SoftCap: 25}
	cpool := h.c.NewKVCache(blocks*bs, kc, false)
	gpool := newPool(g, dt, blocks, bs, kc)
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
		g.Upload(p.g, v)
		if dt == compute.F16 && p != q {
			v = roundF16(v)
		}
		h.c.Upload(p.c, v)
	}
	setInts := func(p pair, v []int32) {
		h.c.UploadInts(p.c, v)
		g.UploadInts(p.g, v)
	}
	// Prefill the sequences to different lengths, outside the graph.
	pseq, pps := run.step(r, []int{100, 3, 250, 17, 60}, 0)
	pn := len(pseq)
	pq, pk, pv := h.act(1, pn, heads*hd), h.act(1, pn, kc), h.act(1, pn, kc)
	if dt == compute.F16 {
		h.roundCPU(pk)
		h.roundCPU(pv)
	}
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
	comparePools(t, h, cpool, gpool, bs, a)
}

// h200Bandwidth is the H200's HBM3e bandwidth in bytes per second, the
// bound a decode-attention kernel is judged against.
const h200Bandwidth = 4.8e12

// pinPaged makes b's paged attention take the general kernel (generic) or
// not, and the tensor cores for calls of any size (tc) or never; the
// returned func restores the settings.
func (b *Backend) pinPaged(generic, tc bool) func() {
	old, oldTC := b.pagedGeneric, b.pagedTC
	b.pagedGeneric, b.pagedTC = generic, 0
	if tc {
		b.pagedTC = 1
	}
	return func() { b.pagedGeneric, b.pagedTC = old, oldTC }
}

// pagedVariants are the kernels BenchmarkAttendPaged compares in one run:
// the general kernel over f32 pools (the kernel before the grouped one),
// the grouped kernel over f32 and f16 pools, and attend_ptc over f16
// pools.
var pagedVariants = []struct {
	name    string
	generic bool
	dt      compute.DType
	tc      bool // attend_ptc (f16 pools)
}{
	{"general-f32", true, compute.F32, false},
	{"gqa-f32", false, compute.F32, false},
	{"gqa-f16", false, compute.F16, false},
	{"tc-f16", false, compute.F16, true},
}

// BenchmarkAttendPaged measures batched decode attention over a paged
// pool on llama-3.1-8b's geometry (32 query heads, 8 kv heads of 128;
// blocks of 16 in random order): one call per step, every sequence at the
// same context. GB/s counts the keys and values read at the pool's type;
// pct-of-4.8TB/s relates it to the H200's bandwidth.
func BenchmarkAttendPaged(b *testing.B) {
	g := openGPU(b)
	const bs, heads, kvHeads, hd = 16, 32, 8, 128
	kc := kvHeads * hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
	for _, ctx := range []int{512, 2048} {
		for _, seqs := range []int{1, 8, 64, 256} {
			for _, vr := range pagedVariants {
				b.Run(fmt.Sprintf("ctx%d/seqs%d/%s", ctx, seqs, vr.name), func(b *testing.B) {
					defer g.pinPaged(vr.generic, vr.tc)()
					r := rand.New(rand.NewPCG(uint64(ctx), uint64(seqs)))
					maxBlocks := ctx/bs + 1
					blocks := seqs * maxBlocks
					pool := newPool(g, vr.dt, blocks, bs, kc)
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
					bytes := float64(seqs) * float64(ctx) * float64(kc) * 2 * float64(vr.dt.Size())
					b.ReportMetric(bytes/s/1e9, "GB/s")
					b.ReportMetric(100*bytes/s/h200Bandwidth, "pct-of-4.8TB/s")
					for _, t := range []*compute.Tensor{tt, st, pt, q, k, v, dst} {
						g.Free(t)
					}
				})
			}
		}
	}
}

// pagedPrefillFlash is BenchmarkAttendPagedPrefill's variant whose calls
// carry spans: each chunk gathered from the f16 pool and attended by
// flash_attend.
var pagedPrefillFlash = struct {
	name    string
	generic bool
	dt      compute.DType
	tc      bool
}{"spans-f16-flash", false, compute.F16, false}

// BenchmarkAttendPagedPrefill measures prefill chunks over paged pools on
// llama-3.1-8b's geometry: 8 sequences × 512 rows in one call, each chunk
// the first of its prompt (positions 0…511) or the second (512…1023, over
// 512 cached positions), on the paged kernels, with spans (the chunks on
// flash_attend, gathered from the f16 pool); and, for the tensor cores'
// speed, flash_attend over a contiguous cache, one sequence per call, 8
// calls. rows/s counts query rows.
func BenchmarkAttendPagedPrefill(b *testing.B) {
	g := openGPU(b)
	const bs, heads, kvHeads, hd, seqs, chunk = 16, 32, 8, 128, 8, 512
	kc := kvHeads * hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.088}
	for _, start := range []int{0, 512} {
		n := seqs * chunk
		q, k, v := gpuRandom(g, 1, 1, n, heads*hd), gpuRandom(g, 2, 1, n, kc), gpuRandom(g, 3, 1, n, kc)
		dst := g.Alloc(compute.F32, n, heads*hd)
		for _, vr := range append(pagedVariants[:len(pagedVariants):len(pagedVariants)], pagedPrefillFlash) {
			b.Run(fmt.Sprintf("start%d/%s", start, vr.name), func(b *testing.B) {
				defer g.pinPaged(vr.generic, vr.tc)()
				r := rand.New(rand.NewPCG(uint64(start), 1))
				maxBlocks := (start + chunk) / bs
				blocks := seqs * maxBlocks
				pool := newPool(g, vr.dt, blocks, bs, kc)
				defer g.Free(pool.K)
				defer g.Free(pool.V)
				table := make([]int32, seqs*maxBlocks)
				for i, p := range r.Perm(blocks) {
					table[i] = int32(p)
				}
				seq, ps := make([]int32, n), make([]int32, n)
				for i := range n {
					seq[i], ps[i] = int32(i/chunk), int32(start+i%chunk)
				}
				tt, st, pt := g.Alloc(compute.I32, len(table)), g.Alloc(compute.I32, n), g.Alloc(compute.I32, n)
				g.UploadInts(tt, table)
				g.UploadInts(st, seq)
				g.UploadInts(pt, ps)
				pg := &compute.Pages{BlockSize: bs, MaxBlocks: maxBlocks, Table: tt, Seq: st}
				if vr.name == pagedPrefillFlash.name {
					for i := range seqs {
						pg.Spans = append(pg.Spans, compute.PageSpan{Row: i * chunk, Rows: chunk, Start: start})
					}
				}
				s := timeOps(b, g, func() { g.AttendPaged(dst, q, k, v, pool, pg, pt, a) })
				b.ReportMetric(float64(n)/s, "rows/s")
				for _, t := range []*compute.Tensor{tt, st, pt} {
					g.Free(t)
				}
			})
		}
		b.Run(fmt.Sprintf("start%d/flash-contiguous", start), func(b *testing.B) {
			cache := g.NewKVCache(start+chunk, kc, false)
			defer g.Free(cache.K)
			defer g.Free(cache.V)
			pt := g.Alloc(compute.I32, 1)
			g.UploadInts(pt, []int32{int32(start)})
			views := make([][4]*compute.Tensor, seqs)
			for i := range views {
				views[i] = [4]*compute.Tensor{g.View(dst, i*chunk, (i+1)*chunk), g.View(q, i*chunk, (i+1)*chunk), g.View(k, i*chunk, (i+1)*chunk), g.View(v, i*chunk, (i+1)*chunk)}
			}
			s := timeOps(b, g, func() {
				for _, w := range views {
					g.Attend(w[0], w[1], w[2], w[3], cache, pt, a)
				}
			})
			b.ReportMetric(float64(n)/s, "rows/s")
			g.Free(pt)
		})
		for _, t := range []*compute.Tensor{q, k, v, dst} {
			g.Free(t)
		}
	}
}

// TestSpanFor checks the span chosen by the blocks of a split.
func TestSpanFor(t *testing.T) {
	for _, c := range [][2]int{{1, 32}, {8, 32}, {32, 32}, {33, 64}, {64, 64}, {100, 128}, {256, 256}, {2048, 256}} {
		if got := spanFor(c[0]); got != c[1] {
			t.Errorf("spanFor(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

// TestParsePagedSpan checks LEM_CUDA_PAGED_SPAN's values.
func TestParsePagedSpan(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"", 0, true}, {"64", 64, true}, {"256", 256, true}, {"512", 0, false}, {"100", 0, false}, {"x", 0, false}} {
		got, err := parsePagedSpan(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("parsePagedSpan(%q) = %d, %v", c.in, got, err)
		}
	}
}

// TestParsePagedTC checks LEM_CUDA_PAGED_TC's values.
func TestParsePagedTC(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"", pagedTCRows, true}, {"0", 0, true}, {"1", 1, true}, {"64", 64, true}, {"-1", 0, false}, {"x", 0, false}} {
		got, err := parsePagedTC(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("parsePagedTC(%q) = %d, %v", c.in, got, err)
		}
	}
}
