package cuda

import (
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/archref"
	"github.com/lem-engine/lem/internal/fixtures"
	"github.com/lem-engine/lem/model"
)

// poolTolerance is the largest logit difference TestBatchedPools accepts
// against the reference: the f16 pools round every key and value to 11
// significant bits (relative 2⁻¹¹ ≈ 4.9e-4), which moves the tiny
// fixtures' logits (|logit| of a few units) by a few 1e-3 at most, ten
// times archref.Tolerance.
const poolTolerance = 1e-2

// TestBatchedPools runs each dense fixture's batched passes on the GPU,
// whose paged pools hold f16 keys and values: KVLayout counts half the
// bytes per position of the CPU's f32 pools, NewCache's pools are f16, and
// the logits of the prompt (a chunk of all but the last token, then the
// last as a decode row) match the reference.
func TestBatchedPools(t *testing.T) {
	g := openGPU(t)
	c := cpu.New(1)
	if g.KVPoolType() != compute.F16 {
		t.Skipf("LEM_CUDA_KV_POOL chose %s pools", g.KVPoolType())
	}
	for _, name := range archref.Dense {
		t.Run(name, func(t *testing.T) {
			dir := fixtures.Dir(t, "archs", name)
			gm, err := model.OpenDir(dir, g)
			if err != nil {
				t.Fatal(err)
			}
			defer gm.Close()
			cm, err := model.OpenDir(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			defer cm.Close()
			gb, cb := gm.Model.(model.Batched), cm.Model.(model.Batched)
			gl, cl := gb.KVLayout(), cb.KVLayout()
			if len(gl.Groups) != len(cl.Groups) || len(gl.Groups) == 0 {
				t.Fatalf("%d groups on the GPU, %d on the CPU", len(gl.Groups), len(cl.Groups))
			}
			const bs, blocks = 4, 16
			spec := model.CacheSpec{BlockSize: bs}
			var pools int64
			for i, gr := range gl.Groups {
				if 2*gr.PositionBytes != cl.Groups[i].PositionBytes {
					t.Errorf("group %d: %d bytes per position on the GPU, %d on the CPU: want half", i, gr.PositionBytes, cl.Groups[i].PositionBytes)
				}
				spec.Blocks = append(spec.Blocks, blocks)
				pools += blocks * bs * gr.PositionBytes
			}
			cache, err := gb.NewCache(spec)
			if err != nil {
				t.Fatal(err)
			}
			// The activation buffers come with the first pass: before it,
			// the cache holds the pools alone.
			if got := cache.Memory(); got != pools {
				t.Errorf("Memory() = %d before any pass, want the f16 pools' %d", got, pools)
			}
			ref := archref.Load(t, dir)
			ids := ref.InputIDs
			vocab := gm.Config().VocabSize
			if len(ids) > blocks*bs {
				ids = ids[:blocks*bs]
			}
			table := make([]int32, blocks)
			for j := range table {
				table[j] = int32(blocks - 1 - j) // blocks in reverse order
			}
			pass := func(from, to int) []float32 {
				n := to - from
				bt := &model.Batch{IDs: g.Alloc(compute.I32, n), Pos: g.Alloc(compute.I32, n),
					Seqs:   []model.BatchSeq{{Rows: n, State: -1, AllLogits: true}},
					Logits: g.Alloc(compute.F32, n, vocab)}
				g.UploadInts(bt.IDs, ids[from:to])
				pos, seq := make([]int32, n), make([]int32, n)
				for i := range pos {
					pos[i] = int32(from + i)
				}
				g.UploadInts(bt.Pos, pos)
				tt, st := g.Alloc(compute.I32, 1, blocks), g.Alloc(compute.I32, n)
				g.UploadInts(tt, table)
				g.UploadInts(st, seq)
				for range gl.Groups {
					bt.Pages = append(bt.Pages, compute.Pages{BlockSize: bs, MaxBlocks: blocks, Table: tt, Seq: st})
				}
				gb.ForwardBatch(cache, bt)
				out := make([]float32, n*vocab)
				g.Read(out, bt.Logits)
				if err := g.Err(); err != nil {
					t.Fatal(err)
				}
				return out
			}
			n := len(ids)
			got := append(pass(0, n-1), pass(n-1, n)...)
			worst := 0.0
			for i := range n {
				worst = max(worst, archref.MaxDiff(got[i*vocab:(i+1)*vocab], ref.Logits[i*vocab:(i+1)*vocab]))
			}
			t.Logf("f16 pools: max |Δlogit| = %.2e over %d rows", worst, n)
			if worst > poolTolerance {
				t.Errorf("max |Δlogit| = %.2e > %.0e", worst, poolTolerance)
			}
		})
	}
}
