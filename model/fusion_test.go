package model

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/internal/fixtures"
)

// fusionPlan replays the part of the CUDA backend's decode fusion
// (compute/cuda/fuse.go, attend.go) that depends on the order in which a
// model issues its operations, over a decode step's op log: a one-row
// whole-row RMSNorm followed by a product of its output; up to three
// products of one input in a row; a GLU of the two products just recorded;
// an Add of a product just recorded; RoPE of q then k; and an Attend right
// after the RoPE of its q and k. It returns the launches left and how
// many operations were folded into an earlier one. Conditions that do not
// depend on order (dtypes, alignment, overlaps, head sizes) are not
// modelled: fused here means that the order allows fusion.
type fusionPlan struct {
	launches, folded int

	kind    string // "", "rms", "gemv", "rope": what the last launch can absorb
	rmsDst  *compute.Tensor
	gemvX   *compute.Tensor
	gemvOut []*compute.Tensor
	glu     bool
	ropeQ   *compute.Tensor
	ropeK   *compute.Tensor
}

func (p *fusionPlan) launch(kind string) {
	p.launches++
	p.kind = kind
}

func (p *fusionPlan) op(op string, dst, x, y *compute.Tensor) {
	one := dst != nil && dst.Rows() == 1
	switch {
	case op == "RMSNorm" && one && x.Rows() == 1 && (y == nil || y.Len() == x.Cols()):
		p.launch("rms")
		p.rmsDst = dst
	case op == "MatMul" && one && p.kind == "gemv" && p.gemvX == x && len(p.gemvOut) < 3 && !p.glu:
		p.folded++
		p.gemvOut = append(p.gemvOut, dst)
	case op == "MatMul" && one && p.kind == "rms" && p.rmsDst == x:
		p.folded++
		p.kind, p.gemvX, p.gemvOut, p.glu = "gemv", x, []*compute.Tensor{dst}, false
	case op == "MatMul" && one:
		p.launch("gemv")
		p.gemvX, p.gemvOut, p.glu = x, []*compute.Tensor{dst}, false
	case op == "GLU" && p.kind == "gemv" && !p.glu && len(p.gemvOut) == 2 &&
		(x == p.gemvOut[0] && y == p.gemvOut[1] || x == p.gemvOut[1] && y == p.gemvOut[0]):
		p.folded++
		p.glu = true
	case op == "Add" && p.kind == "gemv" && !p.glu && (slices.Contains(p.gemvOut, x) || slices.Contains(p.gemvOut, y)):
		p.folded++
	case op == "RoPE" && one && p.kind == "rope" && p.ropeK == nil:
		p.folded++
		p.ropeK = x
	case op == "RoPE" && one:
		p.launch("rope")
		p.ropeQ, p.ropeK = x, nil
	case op == "Attend" && one && p.kind == "rope" && p.ropeQ == x && p.ropeK == y:
		p.folded++
		p.kind = ""
	default:
		p.launch("")
	}
}

// decodeFusion is, per fixture, the launches of one decode step and the
// operations folded into earlier ones, as fusionPlan counts them. They are
// those of the code before the families shared one attention block, except
// Gemma 3n and 4, which gained 18 folds (Gemma 3n, Gemma 4) or 12 (Gemma 4
// with KV-shared layers) when their q, k and v products and their two
// rotations became adjacent; before, they had 434/23, 136/31, 190/31 and
// 128/29.
var decodeFusion = map[string]struct{ launches, folded int }{
	"falcon_h1":            {66, 45},
	"gemma2":               {40, 33},
	"gemma3_text":          {69, 49},
	"gemma3n_text":         {416, 41},
	"gemma4_text":          {118, 49},
	"gemma4_text-kvshared": {116, 41},
	"gemma4_text-moe":      {172, 49},
	"gpt_oss":              {30, 49},
	"lfm2":                 {30, 41},
	"llama":                {22, 41},
	"llama3-rope":          {17, 31},
	"mamba2":               {35, 10},
	"mistral":              {22, 41},
	"olmo_hybrid":          {40, 31},
	"phi3":                 {35, 19},
	"qwen2":                {22, 53},
	"qwen2-yarn":           {17, 40},
	"qwen3":                {30, 41},
	"qwen3_5_moe_text":     {46, 27},
	"qwen3_5_text":         {38, 35},
	"qwen3_moe":            {38, 29},
	"qwen3_next":           {46, 27},
}

// TestDecodeFusion checks that every family's decode step issues its
// operations in an order that keeps the CUDA backend's fusion: no fewer
// folded operations per step than decodeFusion records.
func TestDecodeFusion(t *testing.T) {
	root := fixtures.Dir(t, "archs")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Run(e.Name(), func(t *testing.T) {
			b := cpu.New(1)
			l, err := OpenDir(filepath.Join(root, e.Name()), b)
			if err != nil {
				t.Skip(err)
			}
			defer l.Close()
			m := l.Model
			st := m.NewState(16)
			run(b, m, st, 0, []int32{1, 5, 9, 17}, 4)
			var p fusionPlan
			b.SetTrace(p.op)
			run(b, m, st, 4, []int32{33}, 1)
			b.SetTrace(nil)
			t.Logf("%s: %d launches, %d folded", e.Name(), p.launches, p.folded)
			want, ok := decodeFusion[e.Name()]
			if !ok {
				t.Fatalf("no fusion count recorded for %s", e.Name())
			}
			if p.folded < want.folded || p.launches > want.launches {
				t.Errorf("a decode step makes %d launches and folds %d operations into earlier ones; want at most %d and at least %d",
					p.launches, p.folded, want.launches, want.folded)
			}
		})
	}
}
