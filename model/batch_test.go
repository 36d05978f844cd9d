package model

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
)

// Asks of a batch sequence's chunk: no logits, the last row's, every row's.
const (
	askNone = iota
	askLast
	askAll
)

// simSpec is one sequence of a simulated schedule: its tokens, the pass it
// joins at, and the rows it contributes to each pass from then on with
// what it asks for; it leaves after its last chunk.
type simSpec struct {
	ids    []int32
	join   int
	chunks []int
	asks   []int // per chunk; nil: askAll everywhere
}

// batchSim drives ForwardBatch as a scheduler would: block tables drawn
// from shuffled free lists, blocks that every later row's window has left
// handed back (-1 in the table) and reused by others, sequences in a
// shuffled order each pass.
type batchSim struct {
	t      *testing.T
	b      compute.Backend
	m      Batched
	vocab  int
	layout KVLayout
	c      *Cache
	bs     int
	free   [][]int32 // per group
	rng    *rand.Rand

	released int // blocks handed back because a window left them
}

// simSeq is a sequence's progress.
type simSeq struct {
	spec   simSpec
	pos    int
	next   int
	blocks [][]int32 // per group, per block index: the pool block, -1 for none
	slot   int
	logits map[int][]float32 // position → logits
}

const simBlockSize = 4

func newBatchSim(t *testing.T, b compute.Backend, m Model, seqs int, seed uint64) *batchSim {
	t.Helper()
	bm, ok := m.(Batched)
	if !ok {
		t.Fatalf("%T does not implement Batched", m)
	}
	s := &batchSim{t: t, b: b, m: bm, vocab: m.Config().VocabSize, layout: bm.KVLayout(), bs: simBlockSize,
		rng: rand.New(rand.NewPCG(seed, 7))}
	spec := CacheSpec{BlockSize: s.bs}
	for range s.layout.Groups {
		// Room for every sequence's 64 positions, and spares.
		n := seqs*64/s.bs + 5
		spec.Blocks = append(spec.Blocks, n)
		free := make([]int32, n)
		for i := range free {
			free[i] = int32(i)
		}
		s.rng.Shuffle(n, func(i, j int) { free[i], free[j] = free[j], free[i] })
		s.free = append(s.free, free)
	}
	if s.layout.StateBytes > 0 {
		spec.States = seqs + 1
	}
	c, err := bm.NewCache(spec)
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

// run plays the schedule and returns each sequence's logits by position.
func (s *batchSim) run(specs []simSpec) []map[int][]float32 {
	seqs := make([]*simSeq, len(specs))
	for i, sp := range specs {
		if sp.asks == nil {
			sp.asks = make([]int, len(sp.chunks))
			for j := range sp.asks {
				sp.asks[j] = askAll
			}
		}
		total := 0
		for _, n := range sp.chunks {
			total += n
		}
		if total != len(sp.ids) {
			s.t.Fatalf("sequence %d: chunks of %d rows for %d ids", i, total, len(sp.ids))
		}
		seqs[i] = &simSeq{spec: sp, slot: i, logits: map[int][]float32{}, blocks: make([][]int32, len(s.layout.Groups))}
	}
	for pass := 0; ; pass++ {
		var active []*simSeq
		done := true
		for _, q := range seqs {
			if q.next < len(q.spec.chunks) {
				done = false
				if q.spec.join <= pass {
					active = append(active, q)
				}
			}
		}
		if done {
			break
		}
		if len(active) == 0 {
			continue
		}
		s.rng.Shuffle(len(active), func(i, j int) { active[i], active[j] = active[j], active[i] })
		s.pass(active)
	}
	out := make([]map[int][]float32, len(seqs))
	for i, q := range seqs {
		out[i] = q.logits
	}
	return out
}

// pass runs one ForwardBatch over the next chunk of every active sequence.
func (s *batchSim) pass(active []*simSeq) {
	b := s.b
	var ids, pos []int32
	var seqOf []int32
	var bseqs []BatchSeq
	var picked []int // position of each logits row
	var pickedSeq []*simSeq
	maxBlocks := 1
	for si, q := range active {
		rows := q.spec.chunks[q.next]
		if q.pos == 0 && s.layout.StateBytes > 0 {
			s.c.ResetState(q.slot)
		}
		first, last := q.pos, q.pos+rows-1
		for g, grp := range s.layout.Groups {
			for len(q.blocks[g]) <= last/s.bs {
				q.blocks[g] = append(q.blocks[g], -1)
			}
			// Hand back the blocks no row from now on sees.
			if grp.Window > 0 {
				for j := range q.blocks[g] {
					if blk := q.blocks[g][j]; blk >= 0 && (j+1)*s.bs <= first-grp.Window+1 {
						s.free[g] = append(s.free[g], blk)
						q.blocks[g][j] = -1
						s.released++
					}
				}
			}
			for j := first / s.bs; j <= last/s.bs; j++ {
				if q.blocks[g][j] < 0 {
					n := len(s.free[g])
					if n == 0 {
						s.t.Fatalf("group %d: out of blocks", g)
					}
					// Take a random free block.
					k := s.rng.IntN(n)
					q.blocks[g][j] = s.free[g][k]
					s.free[g] = slices.Delete(s.free[g], k, k+1)
				}
			}
			maxBlocks = max(maxBlocks, len(q.blocks[g]))
		}
		ask := q.spec.asks[q.next]
		for r := range rows {
			ids = append(ids, q.spec.ids[q.pos+r])
			pos = append(pos, int32(q.pos+r))
			seqOf = append(seqOf, int32(si))
			if ask == askAll || ask == askLast && r == rows-1 {
				picked = append(picked, q.pos+r)
				pickedSeq = append(pickedSeq, q)
			}
		}
		bseqs = append(bseqs, BatchSeq{Rows: rows, State: q.slot, Logits: ask == askLast, AllLogits: ask == askAll})
		if s.layout.StateBytes == 0 {
			bseqs[len(bseqs)-1].State = -1
		}
	}
	n := len(ids)
	bt := &Batch{IDs: b.Alloc(compute.I32, n), Pos: b.Alloc(compute.I32, n), Seqs: bseqs}
	b.UploadInts(bt.IDs, ids)
	b.UploadInts(bt.Pos, pos)
	for g := range s.layout.Groups {
		table := make([]int32, len(active)*maxBlocks)
		for si, q := range active {
			for j := range maxBlocks {
				table[si*maxBlocks+j] = -1
				if j < len(q.blocks[g]) {
					table[si*maxBlocks+j] = q.blocks[g][j]
				}
			}
		}
		pg := compute.Pages{BlockSize: s.bs, MaxBlocks: maxBlocks,
			Table: b.Alloc(compute.I32, len(active), maxBlocks), Seq: b.Alloc(compute.I32, n)}
		b.UploadInts(pg.Table, table)
		b.UploadInts(pg.Seq, seqOf)
		bt.Pages = append(bt.Pages, pg)
	}
	if len(picked) > 0 {
		bt.Logits = b.Alloc(compute.F32, len(picked), s.vocab)
	}
	s.m.ForwardBatch(s.c, bt)
	if bt.Logits != nil {
		flat := make([]float32, len(picked)*s.vocab)
		b.Read(flat, bt.Logits)
		for i, p := range picked {
			pickedSeq[i].logits[p] = flat[i*s.vocab : (i+1)*s.vocab]
		}
	}
	for _, q := range active {
		q.pos += q.spec.chunks[q.next]
		q.next++
	}
}

// archFixtures returns the architecture fixtures' folder and names.
func archFixtures(t *testing.T) (string, []string) {
	root := fixtures.Dir(t, "archs")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return root, names
}

// openArch loads a fixture on a CPU backend of two threads.
func openArch(t *testing.T, dir string) (*cpu.Backend, Model) {
	t.Helper()
	b := cpu.New(2)
	l, err := OpenDir(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return b, l.Model
}

// chunksOf cuts n rows into chunks of the given sizes, repeating the last
// size as needed.
func chunksOf(n int, sizes ...int) []int {
	var out []int
	for i := 0; n > 0; i++ {
		c := min(sizes[min(i, len(sizes)-1)], n)
		out = append(out, c)
		n -= c
	}
	return out
}

// permuted returns ids in a fixed shuffled order, a prompt unlike the
// reference's.
func permuted(ids []int32, seed uint64) []int32 {
	out := slices.Clone(ids)
	rand.New(rand.NewPCG(seed, 1)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestForwardBatch checks, for every fixture, a schedule of three
// sequences of different lengths (prefill chunks beside one-row decode
// steps, joining and leaving, over shuffled block tables) against
// Forward of each sequence alone, and the first sequence, a prefix of the
// reference prompt, against the reference logits.
func TestForwardBatch(t *testing.T) {
	root, names := archFixtures(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			b, m := openArch(t, dir)
			ref := archref.Load(t, dir)
			in := ref.InputIDs
			specs := []simSpec{
				{ids: in[:37], chunks: []int{9, 7, 1, 1, 8, 1, 1, 1, 5, 1, 1, 1},
					asks: []int{askNone, askLast, askAll, askLast, askAll, askAll, askLast, askAll, askAll, askAll, askAll, askAll}},
				{ids: permuted(in, 1)[:23], join: 1, chunks: []int{6, 6, 1, 1, 1, 5, 1, 1, 1}},
				{ids: permuted(in, 2)[:13], join: 3, chunks: []int{1, 4, 1, 1, 5, 1}},
			}
			sim := newBatchSim(t, b, m, len(specs), 1)
			got := sim.run(specs)
			for i, sp := range specs {
				want := run(b, m, m.NewState(64), 0, sp.ids, len(sp.ids))
				if len(got[i]) == 0 {
					t.Fatalf("sequence %d: no logits", i)
				}
				var worst, worstRef float64
				for p, row := range got[i] {
					worst = max(worst, archref.MaxDiff(row, want[p]))
					if i == 0 {
						worstRef = max(worstRef, archref.MaxDiff(row, ref.Row(p)))
					}
				}
				t.Logf("sequence %d: %d rows, max |Δlogit| %.2e against Forward", i, len(got[i]), worst)
				if worst > archref.Tolerance {
					t.Errorf("sequence %d: max |Δlogit| = %.2e against Forward alone", i, worst)
				}
				if i == 0 && worstRef > archref.Tolerance {
					t.Errorf("sequence 0: max |Δlogit| = %.2e against the reference", worstRef)
				}
			}
			for g, grp := range sim.layout.Groups {
				if grp.Window > 0 && grp.Window < 20 && sim.released == 0 {
					t.Errorf("group %d has a window of %d, but no block left it", g, grp.Window)
				}
			}
		})
	}
}

// TestForwardBatchRowStable checks that with row-stable products a
// sequence's logits are bitwise the same alone and batched with others of
// different lengths that join and leave, and, for models without
// recurrent layers, whatever the chunking of its prompt.
func TestForwardBatchRowStable(t *testing.T) {
	root, names := archFixtures(t)
	covered := map[string]bool{}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			b, m := openArch(t, dir)
			b.SetRowStable(true)
			in := archref.Load(t, dir).InputIDs
			x := in[:37]
			chunks := []int{8, 8, 8, 1, 1, 1, 1, 1, 8}
			alone := newBatchSim(t, b, m, 1, 3).run([]simSpec{{ids: x, chunks: chunks}})[0]
			bm := m.(Batched)
			layout := bm.KVLayout()
			recurrent := layout.StateBytes > 0
			xChunks := chunks
			if !recurrent {
				// Other chunk boundaries, through block boundaries.
				xChunks = []int{3, 6, 1, 11, 1, 1, 2, 12}
			}
			others := []simSpec{
				{ids: x, chunks: xChunks, join: 1},
				{ids: permuted(in, 4)[:17], chunks: chunksOf(17, 5, 1), join: 0},
				{ids: permuted(in, 5)[:9], chunks: chunksOf(9, 1), join: 2},
				{ids: permuted(in, 6)[:30], chunks: chunksOf(30, 8, 8, 1), join: 4},
			}
			batched := newBatchSim(t, b, m, len(others), 9).run(others)[0]
			if len(batched) != len(alone) {
				t.Fatalf("%d rows of logits batched, %d alone", len(batched), len(alone))
			}
			for p, row := range alone {
				if !slices.Equal(row, batched[p]) {
					t.Fatalf("position %d: logits differ batched (max |Δ| %.2e)", p, archref.MaxDiff(row, batched[p]))
				}
			}
			kinds := fixtureKinds(m, layout)
			for _, k := range kinds {
				covered[k] = true
			}
			t.Logf("%s: %d positions bitwise equal (%s)", name, len(alone), strings.Join(kinds, ", "))
		})
	}
	for _, k := range []string{"dense", "sliding-window", "moe", "kv-shared", "recurrent"} {
		if !covered[k] {
			t.Errorf("no fixture covered %s layers", k)
		}
	}
}

// fixtureKinds names the kinds of layers a model has, for coverage.
func fixtureKinds(m Model, l KVLayout) []string {
	kinds := []string{}
	if _, ok := m.(*dense); ok {
		kinds = append(kinds, "dense")
	}
	shared := false
	for _, g := range l.Groups {
		if g.Window > 0 {
			kinds = append(kinds, "sliding-window")
		}
	}
	hasMoE := false
	switch mm := m.(type) {
	case *dense:
		for _, ly := range mm.layers {
			hasMoE = hasMoE || ly.moe != nil
		}
	case *gemma4:
		for _, ly := range mm.layers {
			hasMoE = hasMoE || ly.moe != nil
			shared = shared || !ly.attn.ownsCache()
		}
	case *gemma3n:
		for _, ly := range mm.layers {
			shared = shared || !ly.attn.ownsCache()
		}
	case *hybrid:
		for _, ly := range mm.layers {
			hasMoE = hasMoE || ly.moe != nil
		}
	}
	if hasMoE {
		kinds = append(kinds, "moe")
	}
	if shared {
		kinds = append(kinds, "kv-shared")
	}
	if l.StateBytes > 0 {
		kinds = append(kinds, "recurrent")
	}
	return kinds
}

// TestCacheStateSlots checks that CopyState saves and restores a slot
// (a checkpoint) and ResetState returns it to a fresh sequence's state,
// and that Memory accounts for the pools and slots.
func TestCacheStateSlots(t *testing.T) {
	root, names := archFixtures(t)
	tested := 0
	for _, name := range names {
		dir := filepath.Join(root, name)
		b, m := openArch(t, dir)
		bm := m.(Batched)
		l := bm.KVLayout()
		if l.StateBytes == 0 {
			continue
		}
		tested++
		t.Run(name, func(t *testing.T) {
			in := archref.Load(t, dir).InputIDs
			spec := CacheSpec{BlockSize: 4, States: 3}
			var poolBytes int64
			for _, g := range l.Groups {
				spec.Blocks = append(spec.Blocks, 16)
				poolBytes += 16 * 4 * g.PositionBytes
			}
			c, err := bm.NewCache(spec)
			if err != nil {
				t.Fatal(err)
			}
			if got, least := c.Memory(), poolBytes+3*l.StateBytes; got < least {
				t.Errorf("Memory() = %d, below the pools and slots' %d", got, least)
			}
			if c.Spec().States != 3 {
				t.Errorf("Spec().States = %d", c.Spec().States)
			}
			// One sequence over slot 0 (blocks 0..), three chunks.
			step := func(slot, from, to int) []float32 {
				n := to - from
				bt := &Batch{IDs: b.Alloc(compute.I32, n), Pos: b.Alloc(compute.I32, n),
					Seqs:   []BatchSeq{{Rows: n, State: slot, Logits: true}},
					Logits: b.Alloc(compute.F32, 1, m.Config().VocabSize)}
				b.UploadInts(bt.IDs, in[from:to])
				pos := make([]int32, n)
				for i := range pos {
					pos[i] = int32(from + i)
				}
				b.UploadInts(bt.Pos, pos)
				for range l.Groups {
					pg := compute.Pages{BlockSize: 4, MaxBlocks: 16, Table: b.Alloc(compute.I32, 1, 16), Seq: b.Alloc(compute.I32, n)}
					table := make([]int32, 16)
					for j := range table {
						table[j] = int32(j)
					}
					b.UploadInts(pg.Table, table)
					b.UploadInts(pg.Seq, make([]int32, n))
					bt.Pages = append(bt.Pages, pg)
				}
				bm.ForwardBatch(c, bt)
				out := make([]float32, m.Config().VocabSize)
				b.Read(out, bt.Logits)
				return out
			}
			c.ResetState(0)
			first := step(0, 0, 8)
			c.CopyState(2, 0) // checkpoint after 8 positions
			second := step(0, 8, 12)
			c.CopyState(0, 2) // back to 8
			if again := step(0, 8, 12); !slices.Equal(again, second) {
				t.Errorf("after CopyState back to the checkpoint, logits differ (max |Δ| %.2e)", archref.MaxDiff(again, second))
			}
			c.ResetState(0)
			if again := step(0, 0, 8); !slices.Equal(again, first) {
				t.Errorf("after ResetState, logits differ from a fresh start (max |Δ| %.2e)", archref.MaxDiff(again, first))
			}
			// A slot that held a longer sequence, copied over, is that
			// sequence: slot 1 continues from slot 0's 8 positions.
			c.CopyState(1, 0)
			if again := step(1, 8, 12); !slices.Equal(again, second) {
				t.Errorf("a copied slot continues differently (max |Δ| %.2e)", archref.MaxDiff(again, second))
			}
		})
	}
	if tested == 0 {
		t.Fatal("no recurrent fixture")
	}
}

// noPager is a backend without compute.Pager.
type noPager struct{ compute.Backend }

// TestNewCacheErrors checks that bad specs and backends without paged
// attention get clear errors.
func TestNewCacheErrors(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "gemma2")
	b, m := openArch(t, dir)
	bm := m.(Batched)
	l := bm.KVLayout()
	if len(l.Groups) != 2 || l.Groups[0].Window != 0 || l.Groups[1].Window == 0 {
		t.Fatalf("gemma2's layout: %+v; want a full and a sliding group", l)
	}
	for _, tc := range []struct {
		spec CacheSpec
		want string
	}{
		{CacheSpec{BlockSize: 0, Blocks: []int{4, 4}}, "block size"},
		{CacheSpec{BlockSize: 4, Blocks: []int{4}}, "the model has 2"},
		{CacheSpec{BlockSize: 4, Blocks: []int{4, 0}}, "blocks"},
		{CacheSpec{BlockSize: 4, Blocks: []int{4, 4}, States: -1}, "state slots"},
	} {
		if _, err := bm.NewCache(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCache(%+v) = %v; want an error about %q", tc.spec, err, tc.want)
		}
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := openSource(dir, cfg, OpenOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	np, err := Load(cfg, src, noPager{b})
	if err != nil {
		t.Fatal(err)
	}
	_, err = np.(Batched).NewCache(CacheSpec{BlockSize: 4, Blocks: []int{4, 4}})
	if err == nil || !strings.Contains(err.Error(), "compute.Pager") {
		t.Errorf("NewCache on a backend without paged attention: %v", err)
	}
}
