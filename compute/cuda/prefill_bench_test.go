package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/engine"
)

// prefillTokens is the prompt length of BenchmarkPrefill8B:
// LEM_PREFILL_TOKENS, else 4096.
func prefillTokens() int {
	if n, err := strconv.Atoi(os.Getenv("LEM_PREFILL_TOKENS")); err == nil && n > 0 {
		return n
	}
	return 4096
}

// BenchmarkPrefill8B measures the prefill of one prompt (4096 tokens by
// default) on a llama-3.1-8b-shaped model with random bf16 weights, as
// tokens/s and as TFLOP/s of the matmuls (2·params·tokens) plus attention.
func BenchmarkPrefill8B(b *testing.B) {
	g := openGPU(b)
	t0 := time.Now()
	m, weightBytes, err := synthLlama(g, llama8BConfig)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.Logf("8B synthetic model: %.1f GB of bf16 weights loaded in %v; prefill matmul: %s",
		float64(weightBytes)/1e9, time.Since(t0), g.GEMM())
	cfg := m.Config()
	n := prefillTokens()
	st := m.NewState(n)
	ids, pos := g.Alloc(compute.I32, n), g.Alloc(compute.I32, n)
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(i * 7 % cfg.VocabSize)
	}
	g.UploadInts(ids, v)
	for i := range v {
		v[i] = int32(i)
	}
	g.UploadInts(pos, v)
	last := g.Alloc(compute.F32, 1, cfg.VocabSize)
	host := make([]float32, cfg.VocabSize)
	run := func() {
		m.Forward(st, ids, pos, last)
		g.Read(host, last)
	}
	run() // warm-up: scratch memory, cuBLAS plans
	if err := g.Err(); err != nil {
		b.Fatal(err)
	}
	// Matmul FLOPs: every layer weight once per token, the output head for
	// the last row only. Attention: QKᵀ and PV over the causal half.
	// weightBytes counts the layers and the output head once (bf16).
	layers := float64(weightBytes/2) - float64(cfg.VocabSize*cfg.HiddenSize)
	flops := 2*layers*float64(n) + 2*float64(cfg.VocabSize*cfg.HiddenSize)
	attn := 4 * float64(cfg.NumHiddenLayers*cfg.NumAttentionHeads*cfg.HeadDim) * float64(n) * float64(n+1) / 2
	var el float64
	b.Run(fmt.Sprint(n), func(b *testing.B) {
		t1 := time.Now()
		for range b.N {
			run()
		}
		el = time.Since(t1).Seconds() / float64(b.N)
		if err := g.Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/el, "tok/s")
		b.ReportMetric((flops+attn)/el/1e12, "TFLOP/s")
	})
	// Through an engine session, as `lem bench` prefills: in chunks.
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(i * 7 % cfg.VocabSize)
	}
	for _, chunk := range []int{engine.DefaultChunk, 1024, n} {
		s := engine.NewSession(m, g, n)
		s.SetChunk(chunk)
		b.Run(fmt.Sprintf("session/chunk%d", chunk), func(b *testing.B) {
			for range b.N {
				s.Reset()
				if _, err := s.Append(tokens); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		s.Close()
	}
	if prof, err := g.ProfileLaunches(func() { m.Forward(st, ids, pos, last) }); err == nil {
		var sb strings.Builder
		for _, k := range prof {
			fmt.Fprintf(&sb, "; %s %v (%d×)", k.Name, k.Time.Round(time.Microsecond), k.Launches)
		}
		b.Logf("profile of one prefill (kernels timed one by one; cuBLAS calls untimed)%s", sb.String())
	}
	b.Logf("%d tokens: %.3f s per prefill; matmul %.1f TFLOP + attention %.1f TFLOP per prefill", n, el, flops/1e12, attn/1e12)
}
