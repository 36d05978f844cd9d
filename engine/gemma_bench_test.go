package engine_test

import (
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/synth"
)

// everyLayer hands the model a logits tensor where the session passes
// none: prefill through every layer of every chunk.
type everyLayer struct {
	model.Model
	logits *compute.Tensor
}

func (e everyLayer) Forward(st model.State, ids, pos, logits *compute.Tensor) {
	if logits == nil {
		logits = e.logits
	}
	e.Model.Forward(st, ids, pos, logits)
}

// BenchmarkKVSharedPrefill measures prefill of a 128-token prompt in chunks
// of 32 on Gemma 4 E2B's geometry, with the KV-shared layers skipped on the
// chunks before the last ("shortcut") and run on every chunk ("full"). To
// fit two cores the stack is cut from 35 layers to 7 in E2B's proportions
// (3 that own a cache, 2 sliding and 1 global, then 4 KV-shared ones, 3
// sliding and 1 global, with double-wide MLPs) and the vocabulary to 8192;
// widths, heads and per-layer inputs are E2B's.
func BenchmarkKVSharedPrefill(b *testing.B) {
	g, err := synth.Like("gemma-4-e2b")
	if err != nil {
		b.Fatal(err)
	}
	const s, f = "sliding_attention", "full_attention"
	g.Layers, g.KVSharedLayers, g.VocabSize = 7, 4, 8192
	g.Extra["layer_types"] = []string{s, s, f, s, s, s, f}
	dir := b.TempDir()
	if _, err := synth.WriteGeometry(dir, g, synth.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	be := cpu.New(0)
	m, err := model.OpenDir(dir, be)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prompt := make([]int32, 128)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % g.VocabSize)
	}
	for _, v := range []struct {
		name string
		m    model.Model
	}{
		{"shortcut", m},
		{"full", everyLayer{m, be.Alloc(compute.F32, 1, g.VocabSize)}},
	} {
		b.Run(v.name, func(b *testing.B) {
			sess := engine.NewSession(v.m, be, len(prompt))
			sess.SetChunk(32)
			for b.Loop() {
				sess.Reset()
				if _, err := sess.Append(prompt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(prompt)*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
