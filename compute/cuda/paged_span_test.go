package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lem-engine/lem/compute"
)

// stepSpans lays out one call as step does, but with each sequence's rows
// consecutive and in position order (the sequences in a random order),
// and returns the spans that say so.
func (p *pagedRun) stepSpans(r *rand.Rand, rows []int, window int) (seq, pos []int32, spans []compute.PageSpan) {
	for _, s := range r.Perm(len(rows)) {
		n := rows[s]
		if n == 0 {
			continue
		}
		spans = append(spans, compute.PageSpan{Row: len(seq), Rows: n, Start: p.next[s]})
		for i := range n {
			pp := p.next[s] + i
			if e := &p.table[s*p.maxBlocks+pp/p.bs]; *e < 0 {
				*e, p.free = p.free[0], p.free[1:]
			}
			seq, pos = append(seq, int32(s)), append(pos, int32(pp))
		}
		if window > 0 {
			first := max(0, p.next[s]-window+1)
			for j := range first / p.bs {
				p.table[s*p.maxBlocks+j] = -1
			}
		}
		p.next[s] += n
	}
	return seq, pos, spans
}

// TestAttendPagedSpans checks AttendPaged with spans: calls that mix
// decode rows with prompt chunks of several sequences, at starts 0, inside
// a block and after many blocks, with GQA, windows, soft caps and sinks,
// over f32 and f16 pools. Chunks of flashMinRows rows or more with a head
// dim flash_attend has go through the tensor cores: against the CPU (on
// the values the pool keeps) they must agree to flash_attend's tolerance,
// ‖Δ‖/‖ref‖ ≤ 1e-2 over the chunk (bf16 operands: keys, values, queries
// and probabilities each rounded by at most 2⁻⁹ of themselves, as
// TestFlashAttend argues), and they must not be the paged kernel's bits
// (so the test sees that the flash path ran). Every other row (decode
// rows, short chunks, other head dims) must be bit for bit what the paged
// kernels give without the flash path (LEM_CUDA_ATTENTION=exact), and
// agree with the CPU to f32 precision.
func TestAttendPagedSpans(t *testing.T) {
	h := newHarness(t)
	defer h.g.pinAttention(attnFlash)()
	// The decode rows' bits are compared with exact attention's: keep
	// them off the tensor cores (TestAttendPaged covers attend_ptc).
	defer func(n int) { h.g.pagedTC = n }(h.g.pagedTC)
	h.g.pagedTC = 0
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []pagedCase{
		{"gqa 128 mixed", 32, 8, 128, 0, 0, false, 16, [][]int{{600, 40, 1, 300}, {1, 64, 1, 1}, {1, 1, 200, 37}, {1, 1, 1, 1}}},
		{"gqa 64 window", 8, 2, 64, 100, 0, false, 16, [][]int{{150, 33, 1}, {70, 1, 1}, {1, 90, 40}}},
		{"softcap sinks 256", 4, 2, 256, 0, 30, true, 8, [][]int{{50, 1}, {45, 100}, {1, 1}}},
		{"short chunks", 8, 2, 128, 0, 0, false, 16, [][]int{{20, 5, 1}, {31, 1, 3}, {32, 1, 1}}},
		{"hd 32", 4, 2, 32, 0, 0, false, 4, [][]int{{40, 1}, {33, 1}}},
	} {
		for _, dt := range poolTypes {
			t.Run(tc.name+"/"+dt.String(), func(t *testing.T) {
				h.t = t
				spansCompare(t, h, r, tc, dt)
			})
		}
	}
}

// spansCompare runs one case of TestAttendPagedSpans.
func spansCompare(t *testing.T, h *harness, r *rand.Rand, tc pagedCase, dt compute.DType) {
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
	kc, qc := tc.kvHeads*tc.hd, tc.heads*tc.hd
	cpool := h.c.NewKVCache(blocks*tc.bs, kc, false)
	gpool := newPool(h.g, dt, blocks, tc.bs, kc)
	run := newPagedRun(r, seqs, tc.bs, maxBlocks, blocks)
	a := &compute.Attention{Heads: tc.heads, KVHeads: tc.kvHeads, HeadDim: tc.hd,
		Scale: float32(1 / math.Sqrt(float64(tc.hd))), SoftCap: tc.softCap, Window: tc.window}
	var sinks pair
	if tc.sinks {
		sinks = h.vec(compute.F32, 2, tc.heads)
	}
	flashable := false
	for _, c := range flashConfigs {
		flashable = flashable || c.hd == tc.hd
	}
	for step, rows := range tc.steps {
		seq, ps, spans := run.stepSpans(r, rows, tc.window)
		n := len(seq)
		q, k, v := h.act(2, n, qc), h.act(2, n, kc), h.act(1, n, kc)
		if dt == compute.F16 {
			h.roundCPU(k)
			h.roundCPU(v)
		}
		table, sq, pos := h.ints(run.table), h.ints(seq), h.ints(ps)
		dst := h.zeros(n, qc)
		paged := h.g.Alloc(compute.F32, n, qc)
		a.Sinks = sinks.c
		h.c.AttendPaged(dst.c, q.c, k.c, v.c, cpool, &compute.Pages{BlockSize: tc.bs, MaxBlocks: maxBlocks, Table: table.c, Seq: sq.c}, pos.c, a)
		a.Sinks = sinks.g
		pg := &compute.Pages{BlockSize: tc.bs, MaxBlocks: maxBlocks, Table: table.g, Seq: sq.g, Spans: spans}
		h.g.AttendPaged(dst.g, q.g, k.g, v.g, gpool, pg, pos.g, a)
		// The paged kernels alone (the call stores the same keys and
		// values again).
		restore := h.g.pinAttention(attnExact)
		h.g.AttendPaged(paged, q.g, k.g, v.g, gpool, pg, pos.g, a)
		restore()
		got, want := h.readBoth(dst)
		ref := make([]float32, n*qc)
		h.g.Read(ref, paged)
		if err := h.g.Err(); err != nil {
			t.Fatal(err)
		}
		for _, sp := range spans {
			lo, hi := sp.Row*qc, (sp.Row+sp.Rows)*qc
			what := fmt.Sprintf("step %d: %d rows from position %d", step, sp.Rows, sp.Start)
			if flashable && sp.Rows >= flashMinRows {
				e := relErr(got[lo:hi], want[lo:hi])
				t.Logf("%s (flash): ‖Δ‖/‖ref‖ = %.2e", what, e)
				if e > 1e-2 || math.IsNaN(e) {
					t.Errorf("%s: ‖Δ‖/‖ref‖ = %.3g > 1e-2", what, e)
				}
				same := true
				for i := lo; i < hi; i++ {
					same = same && math.Float32bits(got[i]) == math.Float32bits(ref[i])
				}
				if same {
					t.Errorf("%s: the paged kernel's bits: the chunk did not take flash_attend", what)
				}
				continue
			}
			for i := lo; i < hi; i++ {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("%s: output %d = %g, the paged kernel alone gives %g", what, i-lo, got[i], ref[i])
				}
			}
			if w, at := relDiff(got[lo:hi], want[lo:hi]); w > 2e-5 || math.IsNaN(w) {
				t.Errorf("%s: relative error %.3g at %d > 2e-5", what, w, at)
			}
		}
		h.g.Free(paged)
	}
	comparePools(t, h, cpool, gpool, tc.bs, a)
}

// TestAttendPagedSpansRowsIndependent checks that a prompt chunk's rows
// taken by flash_attend do not depend on the other rows of the call: the
// same chunk of a sequence (starting inside a block, after many blocks)
// attended alone and beside decode rows and chunks of other sequences, in
// any order, also when the paged kernels run in launches of a few rows,
// gives the same bits, on f32 and f16 pools.
func TestAttendPagedSpansRowsIndependent(t *testing.T) {
	for _, dt := range poolTypes {
		t.Run(dt.String(), func(t *testing.T) { spanRowsIndependent(t, dt) })
	}
}

func spanRowsIndependent(t *testing.T, dt compute.DType) {
	h := newHarness(t)
	g := h.g
	defer g.pinAttention(attnFlash)()
	r := rand.New(rand.NewPCG(13, 14))
	const bs, maxb, heads, kvHeads, hd, chunk = 16, 80, 8, 2, 128, 100
	kc, qc := kvHeads*hd, heads*hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.09, Window: 0}
	run := newPagedRun(r, 6, bs, maxb, 6*maxb)
	pool := newPool(g, dt, 6*maxb, bs, kc)
	seq, ps := run.step(r, []int{700, 650, 300, 900, 20, 515}, 0)
	n := len(seq)
	// Blocks for the rows the calls below add.
	for s := range 6 {
		for j := run.next[s] / bs; j < maxb; j++ {
			if e := &run.table[s*maxb+j]; *e < 0 {
				*e, run.free = run.free[0], run.free[1:]
			}
		}
	}
	table := g.Alloc(compute.I32, len(run.table))
	g.UploadInts(table, run.table)
	sq, pos := g.Alloc(compute.I32, n), g.Alloc(compute.I32, n)
	g.UploadInts(sq, seq)
	g.UploadInts(pos, ps)
	fill := g.Alloc(compute.F32, n, qc)
	g.AttendPaged(fill, gpuRandom(g, 3, 1, n, qc), gpuRandom(g, 1, 1, n, kc), gpuRandom(g, 2, 1, n, kc), pool,
		&compute.Pages{BlockSize: bs, MaxBlocks: maxb, Table: table, Seq: sq}, pos, a)
	// Sequence 3 (900 positions cached) adds a chunk; the others add
	// decode rows or chunks of their own.
	q3, k3, v3 := randVals(r, chunk*qc, 1), randVals(r, chunk*kc, 1), randVals(r, chunk*kc, 1)
	attend := func(parts [][2]int) []float32 { // (sequence, rows)
		var sqv, pv []int32
		var qv, kv, vv []float32
		var spans []compute.PageSpan
		out := 0
		for _, p := range parts {
			s, m := p[0], p[1]
			if s == 3 {
				m = chunk
				out = len(sqv)
				qv, kv, vv = append(qv, q3...), append(kv, k3...), append(vv, v3...)
			} else {
				qv, kv, vv = append(qv, randVals(r, m*qc, 1)...), append(kv, randVals(r, m*kc, 1)...), append(vv, randVals(r, m*kc, 1)...)
			}
			spans = append(spans, compute.PageSpan{Row: len(sqv), Rows: m, Start: run.next[s]})
			for i := range m {
				sqv, pv = append(sqv, int32(s)), append(pv, int32(run.next[s]+i))
			}
		}
		m := len(sqv)
		q, k, v := g.Alloc(compute.F32, m, qc), g.Alloc(compute.F32, m, kc), g.Alloc(compute.F32, m, kc)
		sq, pos, dst := g.Alloc(compute.I32, m), g.Alloc(compute.I32, m), g.Alloc(compute.F32, m, qc)
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
		g.AttendPaged(dst, q, k, v, pool, &compute.Pages{BlockSize: bs, MaxBlocks: maxb, Table: table, Seq: sq, Spans: spans}, pos, a)
		res := make([]float32, m*qc)
		g.Read(res, dst)
		return res[out*qc : (out+chunk)*qc]
	}
	alone := attend([][2]int{{3, chunk}})
	for _, part := range []int64{pagedPartMax, 3 * heads * 4 * (hd + 2) * 4} {
		g.pagedPart = part
		for _, parts := range [][][2]int{
			{{0, 1}, {1, 1}, {3, chunk}, {2, 1}},
			{{5, 200}, {3, chunk}},
			{{3, chunk}, {0, 64}, {1, 1}, {4, 33}},
			{{2, 1}, {4, 5}, {0, 300}, {3, chunk}, {1, 1}},
		} {
			got := attend(parts)
			if err := g.Err(); err != nil {
				t.Fatal(err)
			}
			for i := range alone {
				if math.Float32bits(got[i]) != math.Float32bits(alone[i]) {
					t.Fatalf("parts %v (%d bytes of parts per launch): output %d = %g, alone %g", parts, part, i, got[i], alone[i])
				}
			}
		}
	}
	g.pagedPart = pagedPartMax
}

// TestAttendPagedSpansBad checks that spans that do not lie within the
// call, or overlap, are refused with a clear panic before any launch.
func TestAttendPagedSpansBad(t *testing.T) {
	h := newHarness(t)
	g := h.g
	const bs, heads, kvHeads, hd = 16, 4, 2, 64
	kc, qc := kvHeads*hd, heads*hd
	a := &compute.Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: 0.125}
	pool := newPool(g, compute.F16, 4, bs, kc)
	table, sq, pos := g.Alloc(compute.I32, 4), g.Alloc(compute.I32, 3), g.Alloc(compute.I32, 3)
	q, k, v, dst := g.Alloc(compute.F32, 3, qc), g.Alloc(compute.F32, 3, kc), g.Alloc(compute.F32, 3, kc), g.Alloc(compute.F32, 3, qc)
	for _, spans := range [][]compute.PageSpan{
		{{Row: 0, Rows: 4, Start: 0}},
		{{Row: 0, Rows: 2, Start: 0}, {Row: 1, Rows: 2, Start: 0}},
		{{Row: 0, Rows: 0, Start: 0}},
		{{Row: 0, Rows: 3, Start: -1}},
	} {
		func() {
			defer func() {
				if e := recover(); e == nil {
					t.Errorf("spans %v: no panic", spans)
				} else {
					t.Logf("spans %v: %v", spans, e)
				}
			}()
			g.AttendPaged(dst, q, k, v, pool, &compute.Pages{BlockSize: bs, MaxBlocks: 4, Table: table, Seq: sq, Spans: spans}, pos, a)
		}()
	}
}
