package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/internal/half"
)

// pagedSeq is one sequence of a paged test: cached positions 0..cached−1,
// then rows new positions.
type pagedSeq struct{ cached, rows int }

// pagedFixture is a pool of blocks shared by sequences, their block
// tables, and each sequence's keys, values and queries for every position.
type pagedFixture struct {
	b         *Backend
	a         *compute.Attention
	bs, max   int
	blocks    int
	seqs      []pagedSeq
	table     []int32
	q, k, v   [][]float32 // per sequence, a row per position
	qc, kc    int
	pool      *compute.KVCache
	unreached float32 // what the pool's unused rows hold
}

// newPagedFixture lays the sequences' blocks over a pool in a random
// order, with spare blocks between them that hold NaN, so that a read
// through a wrong entry shows. With the window set, the blocks that lie
// wholly before the window of a sequence's first new row are left out of
// its table (−1), as a sliding-window cache frees them.
func newPagedFixture(rng *rand.Rand, b *Backend, a *compute.Attention, bs int, seqs []pagedSeq) *pagedFixture {
	f := &pagedFixture{b: b, a: a, bs: bs, seqs: seqs, qc: a.Heads * a.HeadDim, kc: a.KVHeads * a.HeadDim}
	need := 0
	for _, s := range seqs {
		f.max = max(f.max, (s.cached+s.rows+bs-1)/bs+1) // one −1 entry past the end
		need += (s.cached + s.rows + bs - 1) / bs
	}
	f.blocks = 2*need + 3
	f.pool = b.NewKVCache(f.blocks*bs, f.kc, false)
	nan := float32(math.NaN())
	for i := range f32(f.pool.K) {
		f32(f.pool.K)[i], f32(f.pool.V)[i] = nan, nan
	}
	free := rng.Perm(f.blocks)
	f.table = make([]int32, len(seqs)*f.max)
	for i := range f.table {
		f.table[i] = -1
	}
	for si, s := range seqs {
		first := 0
		if a.Window > 0 {
			first = max(0, s.cached-a.Window+1)
		}
		for j := first / bs; j*bs < s.cached+s.rows; j++ {
			f.table[si*f.max+j] = int32(free[0])
			free = free[1:]
		}
		total := s.cached + s.rows
		f.q = append(f.q, randVec(rng, total*f.qc))
		f.k = append(f.k, randVec(rng, total*f.kc))
		f.v = append(f.v, randVec(rng, total*f.kc))
		// The cached positions, into their blocks.
		for p := first; p < s.cached; p++ {
			for h := range a.KVHeads {
				at, src := f.at(si, p, h), p*f.kc+h*a.HeadDim
				copy(f32(f.pool.K)[at:at+a.HeadDim], f.k[si][src:src+a.HeadDim])
				copy(f32(f.pool.V)[at:at+a.HeadDim], f.v[si][src:src+a.HeadDim])
			}
		}
	}
	return f
}

// at returns the offset in the pool of kv head h of sequence si's
// position p.
func (f *pagedFixture) at(si, p, h int) int {
	return pagedAt(f.a, f.bs, int(f.table[si*f.max+p/f.bs]), p%f.bs, h)
}

// pagedRow names a row of a call: sequence s at position p.
type pagedRow struct{ s, p int }

// call runs AttendPaged over the given rows (storing their keys and
// values) and returns the output rows.
func (f *pagedFixture) call(rows []pagedRow) []float32 {
	b, n := f.b, len(rows)
	q, k, v := b.Alloc(compute.F32, n, f.qc), b.Alloc(compute.F32, n, f.kc), b.Alloc(compute.F32, n, f.kc)
	seq, pos := b.Alloc(compute.I32, n), b.Alloc(compute.I32, n)
	for i, r := range rows {
		copy(f32(q)[i*f.qc:], f.q[r.s][r.p*f.qc:(r.p+1)*f.qc])
		copy(f32(k)[i*f.kc:], f.k[r.s][r.p*f.kc:(r.p+1)*f.kc])
		copy(f32(v)[i*f.kc:], f.v[r.s][r.p*f.kc:(r.p+1)*f.kc])
		seq.Buf.([]int32)[i], pos.Buf.([]int32)[i] = int32(r.s), int32(r.p)
	}
	table := b.Alloc(compute.I32, len(f.seqs), f.max)
	b.UploadInts(table, f.table)
	pg := &compute.Pages{BlockSize: f.bs, MaxBlocks: f.max, Table: table, Seq: seq}
	dst := b.Alloc(compute.F32, n, f.qc)
	b.AttendPaged(dst, q, k, v, f.pool, pg, pos, f.a)
	return f32(dst)
}

// newRows returns the new rows of the sequences, interleaved: the first
// row of each, then the second of each, and so on.
func (f *pagedFixture) newRows() []pagedRow {
	var rows []pagedRow
	for j := 0; ; j++ {
		added := false
		for si, s := range f.seqs {
			if j < s.rows {
				rows = append(rows, pagedRow{si, s.cached + j})
				added = true
			}
		}
		if !added {
			return rows
		}
	}
}

// contiguous computes the new rows of sequence si with Attend over a
// contiguous cache: the cached positions as one chunk, then the new rows.
func (f *pagedFixture) contiguous(si int) []float32 {
	b, s := f.b, f.seqs[si]
	cache := b.NewKVCache(s.cached+s.rows, f.kc, false)
	var out []float32
	for _, c := range [][2]int{{0, s.cached}, {s.cached, s.cached + s.rows}} {
		n := c[1] - c[0]
		if n == 0 {
			continue
		}
		q := tensorOf(b, f.q[si][c[0]*f.qc:c[1]*f.qc], n, f.qc)
		k := tensorOf(b, f.k[si][c[0]*f.kc:c[1]*f.kc], n, f.kc)
		v := tensorOf(b, f.v[si][c[0]*f.kc:c[1]*f.kc], n, f.kc)
		pos := b.Alloc(compute.I32, n)
		for i := range n {
			pos.Buf.([]int32)[i] = int32(c[0] + i)
		}
		dst := b.Alloc(compute.F32, n, f.qc)
		b.Attend(dst, q, k, v, cache, pos, f.a)
		out = f32(dst)
	}
	return out
}

// pagedCases are the attention geometries of the paged tests: grouped
// query heads, head dims 64, 128 and 256, sliding windows, soft caps and
// sinks.
var pagedCases = []attnCase{
	{32, 8, 64, 0, 0, false, false},
	{8, 2, 128, 0, 0, false, false},
	{4, 1, 256, 0, 0, false, false},
	{6, 2, 64, 40, 0, false, false},
	{8, 8, 128, 0, 30, true, false},
	{12, 4, 64, 29, 50, true, false},
	{4, 2, 256, 17, 0, true, false},
}

func pagedAttention(b *Backend, rng *rand.Rand, c attnCase) *compute.Attention {
	a := &compute.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd,
		Scale: float32(1 / math.Sqrt(float64(c.hd))), SoftCap: c.softcap, Window: c.window}
	if c.sinks {
		a.Sinks = tensorOf(b, randVec(rng, c.heads), c.heads)
	}
	return a
}

// TestAttendPaged checks AttendPaged against Attend over contiguous
// caches: several sequences of different lengths per call, their rows
// interleaved, blocks in random order over the pool (with −1 entries past
// the ends and before the windows), prompt chunks and decode rows, block
// sizes 16 and 32; and that the new keys and values land in their slots.
func TestAttendPaged(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	seqs := []pagedSeq{{0, 37}, {50, 1}, {95, 9}, {16, 1}, {200, 1}, {3, 20}}
	for _, c := range pagedCases {
		for _, bs := range []int{16, 32} {
			t.Run(fmt.Sprintf("%+v/bs=%d", c, bs), func(t *testing.T) {
				b := New(3)
				f := newPagedFixture(rng, b, pagedAttention(b, rng, c), bs, seqs)
				rows := f.newRows()
				got := f.call(rows)
				for si := range seqs {
					want := f.contiguous(si)
					for i, r := range rows {
						if r.s != si {
							continue
						}
						j := r.p - seqs[si].cached
						for e := range f.qc {
							g, w := got[i*f.qc+e], want[j*f.qc+e]
							if !(math.Abs(float64(g-w)) <= 1e-5*(1+math.Abs(float64(w)))) {
								t.Fatalf("sequence %d position %d [%d] = %g, contiguous %g", si, r.p, e, g, w)
							}
						}
						for e := range f.kc {
							at := f.at(si, r.p, e/c.hd) + e%c.hd
							if f32(f.pool.K)[at] != f.k[si][r.p*f.kc+e] || f32(f.pool.V)[at] != f.v[si][r.p*f.kc+e] {
								t.Fatalf("sequence %d position %d: key or value [%d] not at %d of the pool", si, r.p, e, at)
							}
						}
					}
				}
			})
		}
	}
}

// TestAttendPagedPrefetch checks that the prefetch of the next block's
// rows (prefetchSpan) leaves every output bit as it is without.
func TestAttendPagedPrefetch(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	seqs := []pagedSeq{{0, 37}, {50, 1}, {95, 9}, {200, 1}}
	defer func(on bool) { pagedPrefetch = on }(pagedPrefetch)
	for _, c := range pagedCases {
		for _, bs := range []int{16, 32} {
			b := New(3)
			f := newPagedFixture(rng, b, pagedAttention(b, rng, c), bs, seqs)
			rows := f.newRows()
			pagedPrefetch = false
			want := slices.Clone(f.call(rows))
			pagedPrefetch = true
			got := f.call(rows)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%+v, bs=%d: output [%d] = %g with prefetch, %g without", c, bs, i, got[i], want[i])
				}
			}
		}
	}
}

// TestAttendPagedF16 checks AttendPaged over an f16 pool against an f32
// pool holding the same values (keys and values rounded to f16 first):
// f16 widens to f32 exactly, so every output bit must agree, at every
// kernel level; and the new rows land in their slots rounded to f16.
func TestAttendPagedF16(t *testing.T) {
	for _, l := range levels() {
		t.Run(levelNames[l], func(t *testing.T) {
			atLevel(t, l, func() {
				rng := rand.New(rand.NewPCG(75, 76))
				seqs := []pagedSeq{{0, 37}, {50, 1}, {95, 9}, {16, 1}, {200, 1}}
				for _, c := range pagedCases {
					for _, bs := range []int{16, 32} {
						b := New(3)
						f := newPagedFixture(rng, b, pagedAttention(b, rng, c), bs, seqs)
						for _, x := range slices.Concat(f.k, f.v, [][]float32{f32(f.pool.K), f32(f.pool.V)}) {
							roundF16(x)
						}
						half := &compute.KVCache{K: b.Alloc(compute.F16, f.pool.K.Shape...), V: b.Alloc(compute.F16, f.pool.V.Shape...), Capacity: f.pool.Capacity}
						narrowF16(half.K.Buf.([]byte), f32(f.pool.K))
						narrowF16(half.V.Buf.([]byte), f32(f.pool.V))
						rows := f.newRows()
						want := slices.Clone(f.call(rows))
						wide := f.pool
						f.pool = half
						got := f.call(rows)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%+v, bs=%d: output [%d] = %g over f16, %g over f32", c, bs, i, got[i], want[i])
							}
						}
						stored := make([]float32, wide.K.Len())
						ToF32(stored, half.K.Buf.([]byte), compute.F16)
						for i, x := range f32(wide.K) {
							if math.Float32bits(x) != math.Float32bits(stored[i]) && !math.IsNaN(float64(x)) {
								t.Fatalf("%+v, bs=%d: key [%d] stored as %g, want %g", c, bs, i, stored[i], x)
							}
						}
					}
				}
			})
		})
	}
}

// roundF16 rounds x to f16 values in place.
func roundF16(x []float32) {
	for i, v := range x {
		x[i] = half.F16ToF32(half.F32ToF16(v))
	}
}

// TestAttendPagedRowIndependent checks that a row's output has the same
// bits whether computed alone, in a chunk of 37 rows of its sequence (cut
// in several ways), or beside other sequences' rows, at every kernel level.
func TestAttendPagedRowIndependent(t *testing.T) {
	for _, l := range levels() {
		t.Run(levelNames[l], func(t *testing.T) { atLevel(t, l, func() { testAttendPagedRowIndependent(t) }) })
	}
}

func testAttendPagedRowIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	seqs := []pagedSeq{{45, 37}, {20, 5}, {130, 1}, {0, 1}}
	for _, c := range pagedCases {
		t.Run(fmt.Sprintf("%+v", c), func(t *testing.T) {
			seed := rng.Uint64()
			fixture := func() *pagedFixture {
				b := New(3)
				r := rand.New(rand.NewPCG(seed, 1))
				return newPagedFixture(r, b, pagedAttention(b, r, c), 16, seqs)
			}
			// All sequences' rows in one call.
			f := fixture()
			rows := f.newRows()
			all := f.call(rows)
			want := make([][]float32, seqs[0].rows) // sequence 0's rows
			for i, r := range rows {
				if r.s == 0 {
					want[r.p-seqs[0].cached] = all[i*f.qc : (i+1)*f.qc]
				}
			}
			// Sequence 0 alone, its 37 rows cut into chunks of these sizes.
			for _, cuts := range [][]int{{37}, {1, 36}, {10, 17, 10}, {16, 16, 5}, ones(37)} {
				f := fixture()
				p := seqs[0].cached
				for _, n := range cuts {
					var rows []pagedRow
					for i := range n {
						rows = append(rows, pagedRow{0, p + i})
					}
					got := f.call(rows)
					for i := range n {
						j := p + i - seqs[0].cached
						for e := range f.qc {
							if math.Float32bits(got[i*f.qc+e]) != math.Float32bits(want[j][e]) {
								t.Fatalf("chunks %v: position %d [%d] = %g, %g beside other sequences", cuts, p+i, e, got[i*f.qc+e], want[j][e])
							}
						}
					}
					p += n
				}
			}
		})
	}
}

// TestAttendPagedMisuse checks that operands that do not fit, and block
// tables that point outside the pool or hold no block where a row reads,
// panic with a message naming the call, before anything is read or
// written.
func TestAttendPagedMisuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	c := attnCase{8, 2, 64, 0, 0, false, false}
	for _, m := range []struct {
		name, want string
		edit       func(f *pagedFixture, rows []pagedRow) []pagedRow
	}{
		{"block past the pool", "is not one of the pool's", func(f *pagedFixture, rows []pagedRow) []pagedRow {
			f.table[0] = int32(f.blocks)
			return rows
		}},
		{"negative block", "is not one of the pool's", func(f *pagedFixture, rows []pagedRow) []pagedRow {
			f.table[f.max] = -2
			return rows
		}},
		{"no block where a row reads", "block -1", func(f *pagedFixture, rows []pagedRow) []pagedRow {
			f.table[1] = -1
			return rows
		}},
		{"position past the table", "outside the", func(f *pagedFixture, rows []pagedRow) []pagedRow {
			p := f.max * f.bs
			f.q[1] = make([]float32, (p+1)*f.qc)
			f.k[1], f.v[1] = make([]float32, (p+1)*f.kc), make([]float32, (p+1)*f.kc)
			return append(rows, pagedRow{1, p})
		}},
		{"sequence past the table", "sequence 2 of 2", func(f *pagedFixture, rows []pagedRow) []pagedRow {
			f.q, f.k, f.v = append(f.q, f.q[0]), append(f.k, f.k[0]), append(f.v, f.v[0])
			return append(rows, pagedRow{2, 0})
		}},
	} {
		t.Run(m.name, func(t *testing.T) {
			b := New(2)
			f := newPagedFixture(rng, b, pagedAttention(b, rng, c), 16, []pagedSeq{{20, 3}, {5, 1}})
			rows := m.edit(f, f.newRows())
			k := append([]float32(nil), f32(f.pool.K)...)
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "cpu: AttendPaged: ") || !strings.Contains(msg, m.want) {
					t.Fatalf("panic %v, want a message of cpu: AttendPaged with %q", r, m.want)
				}
				for i, v := range f32(f.pool.K) {
					if math.Float32bits(v) != math.Float32bits(k[i]) {
						t.Fatalf("the pool changed at %d before the panic", i)
					}
				}
			}()
			f.call(rows)
		})
	}
	t.Run("shapes", func(t *testing.T) {
		b := New(1)
		a := pagedAttention(b, rng, c)
		pool := b.NewKVCache(64, 2*64, false)
		table := b.Alloc(compute.I32, 1, 4)
		pg := &compute.Pages{BlockSize: 16, MaxBlocks: 4, Table: table, Seq: b.Alloc(compute.I32, 1)}
		defer func() {
			if msg, _ := recover().(string); !strings.HasPrefix(msg, "cpu: AttendPaged: ") {
				t.Fatalf("panic %q, want one of cpu: AttendPaged", msg)
			}
		}()
		b.AttendPaged(b.Alloc(compute.F32, 1, 8*64), b.Alloc(compute.F32, 1, 8*64), b.Alloc(compute.F32, 1, 3*64),
			b.Alloc(compute.F32, 1, 2*64), pool, pg, b.Alloc(compute.I32, 1), a)
	})
}

// BenchmarkAttendPagedDecode measures a decode step's attention for 8
// sequences (one row each) at llama-3.2-1b's geometry (32 query heads
// over 8 kv heads of 64), two threads: AttendPaged in one call over
// blocks of 16, 32 and 64 positions laid in random order over the pool,
// with units of one kv head ("onehead") or of as many as AttendPaged
// chooses, read block by block, against Attend called once per sequence
// over contiguous caches.
func BenchmarkAttendPagedDecode(b *testing.B) {
	const seqs = 8
	for _, ctx := range []int{512, 2048, 8192} {
		rng := rand.New(rand.NewPCG(91, uint64(ctx)))
		be := New(2)
		a := &compute.Attention{Heads: 32, KVHeads: 8, HeadDim: 64, Scale: 0.125}
		qc, kc := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		q, k, v := tensorOf(be, randVec(rng, seqs*qc), seqs, qc), tensorOf(be, randVec(rng, seqs*kc), seqs, kc), tensorOf(be, randVec(rng, seqs*kc), seqs, kc)
		dst := be.Alloc(compute.F32, seqs, qc)
		b.Run(fmt.Sprintf("ctx=%d/contiguous", ctx), func(b *testing.B) {
			caches := make([]*compute.KVCache, seqs)
			pos := make([]*compute.Tensor, seqs)
			for s := range caches {
				caches[s] = be.NewKVCache(ctx+1, kc, false)
				be.Upload(caches[s].K, randVec(rng, (ctx+1)*kc))
				be.Upload(caches[s].V, randVec(rng, (ctx+1)*kc))
				pos[s] = be.Alloc(compute.I32, 1)
				be.UploadInts(pos[s], []int32{int32(ctx)})
			}
			for b.Loop() {
				for s := range seqs {
					be.Attend(be.View(dst, s, s+1), be.View(q, s, s+1), be.View(k, s, s+1), be.View(v, s, s+1), caches[s], pos[s], a)
				}
			}
		})
		for _, u := range []struct {
			bs      int
			onehead bool
		}{{16, true}, {16, false}, {32, true}, {32, false}, {64, true}, {64, false}} {
			bs, name := u.bs, ""
			if u.onehead {
				name = "/onehead" // a unit per kv head
			}
			b.Run(fmt.Sprintf("ctx=%d/paged/bs=%d%s", ctx, bs, name), func(b *testing.B) {
				defer func(n int) { pagedUnitsPerThread = n }(pagedUnitsPerThread)
				if u.onehead {
					pagedUnitsPerThread = 1 << 30
				}
				per := (ctx + bs) / bs
				pool := be.NewKVCache(seqs*per*bs, kc, false)
				be.Upload(pool.K, randVec(rng, seqs*per*bs*kc))
				be.Upload(pool.V, randVec(rng, seqs*per*bs*kc))
				order := rng.Perm(seqs * per)
				table, seq, pos := be.Alloc(compute.I32, seqs, per), be.Alloc(compute.I32, seqs), be.Alloc(compute.I32, seqs)
				for i, blk := range order {
					table.Buf.([]int32)[i] = int32(blk)
				}
				for s := range seqs {
					seq.Buf.([]int32)[s], pos.Buf.([]int32)[s] = int32(s), int32(ctx)
				}
				pg := &compute.Pages{BlockSize: bs, MaxBlocks: per, Table: table, Seq: seq}
				for b.Loop() {
					be.AttendPaged(dst, q, k, v, pool, pg, pos, a)
				}
			})
		}
	}
}
