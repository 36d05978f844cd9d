package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/internal/mmap"
	"github.com/lem-engine/lem/synth"
)

// synthTiny writes the tiny synthetic model and returns its directory.
func synthTiny(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(dir, synth.Options{Like: "tiny"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBenchCmdJSON(t *testing.T) {
	dir := synthTiny(t)
	out, err := execLem(t, "bench", dir, "-p", "16", "-n", "8", "-r", "2", "--threads", "2", "--mem-buffer", "64", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	g, _ := synth.Like("tiny")
	bf16, _ := synth.ParseDType("bf16")
	switch {
	case rep.Model != dir || rep.ModelType != "qwen3" || rep.Backend != "cpu" || rep.Threads != 2 || rep.BandwidthMethod != "streaming read":
		t.Errorf("header fields: %+v", rep)
	case rep.Params != g.Params() || rep.SizeBytes != g.Bytes(bf16):
		t.Errorf("params %d size %d, want %d and %d", rep.Params, rep.SizeBytes, g.Params(), g.Bytes(bf16))
	case rep.WeightBytesPerToken != g.DecodeBytes(bf16) || rep.ExpertBytes != 0:
		t.Errorf("weight bytes per token %d, want %d; expert bytes %d", rep.WeightBytesPerToken, g.DecodeBytes(bf16), rep.ExpertBytes)
	case rep.KVBytes != int64(g.Layers*2*g.KVHeads*g.HeadDim*16*4) || rep.StateBytes != 0 || rep.CheckpointBytes != 0:
		// The largest session is the 16-token prefill's, F32 caches.
		t.Errorf("state: KV %d, recurrent %d, checkpoints %d bytes", rep.KVBytes, rep.StateBytes, rep.CheckpointBytes)
	case !(rep.MemBandwidthGBs > 0) || rep.MemBufferBytes != 64<<20:
		t.Errorf("memory bandwidth %v GB/s over %d bytes", rep.MemBandwidthGBs, rep.MemBufferBytes)
	case len(rep.Tests) != 2:
		t.Fatalf("%d tests, want 2: %+v", len(rep.Tests), rep.Tests)
	}
	for i, want := range []struct {
		name    string
		np, ng  int
		decodes bool
	}{{"pp16", 16, 0, false}, {"tg8", 0, 8, true}} {
		tt := rep.Tests[i]
		if tt.Name != want.name || tt.NPrompt != want.np || tt.NGen != want.ng || len(tt.SamplesTS) != 2 || len(tt.SamplesNS) != 2 {
			t.Errorf("test %d: %+v, want %s with 2 samples", i, tt, want.name)
			continue
		}
		sum := 0.0
		for j, ts := range tt.SamplesTS {
			if !(ts > 0) || tt.SamplesNS[j] <= 0 {
				t.Errorf("%s: sample %d: %v t/s in %d ns", tt.Name, j, ts, tt.SamplesNS[j])
			}
			// Each rate is the tokens over the sample's time.
			if r := float64(want.np+want.ng) / (float64(tt.SamplesNS[j]) / 1e9); math.Abs(r-ts)/ts > 1e-6 {
				t.Errorf("%s: sample %d: %v t/s, but %d tokens in %d ns is %v", tt.Name, j, ts, want.np+want.ng, tt.SamplesNS[j], r)
			}
			sum += ts
		}
		if math.Abs(tt.AvgTS-sum/2) > 1e-9*sum || tt.StddevTS < 0 {
			t.Errorf("%s: avg %v sd %v for samples %v", tt.Name, tt.AvgTS, tt.StddevTS, tt.SamplesTS)
		}
		if want.decodes {
			gbs := float64(rep.WeightBytesPerToken) * tt.AvgTS / 1e9
			if math.Abs(tt.WeightGBs-gbs) > 1e-9*gbs || math.Abs(tt.BandwidthPct-100*gbs/rep.MemBandwidthGBs) > 1e-6 {
				t.Errorf("%s: %v GB/s (%v%%), want %v GB/s of %v", tt.Name, tt.WeightGBs, tt.BandwidthPct, gbs, rep.MemBandwidthGBs)
			}
			// Each repetition is paired with the bandwidth measured after
			// it; the run's bandwidth is the best measured.
			if len(tt.SamplesBandwidthGBs) != 2 {
				t.Fatalf("%s: bandwidth samples %v, want 2", tt.Name, tt.SamplesBandwidthGBs)
			}
			pct := 0.0
			for j, bw := range tt.SamplesBandwidthGBs {
				if !(bw > 0) || bw > rep.MemBandwidthGBs {
					t.Errorf("%s: bandwidth sample %d: %v GB/s, run's best %v", tt.Name, j, bw, rep.MemBandwidthGBs)
				}
				pct += 100 * float64(rep.WeightBytesPerToken) * tt.SamplesTS[j] / 1e9 / bw / 2
			}
			if math.Abs(tt.PairedBandwidthPct-pct) > 1e-9*pct {
				t.Errorf("%s: paired %v%%, want %v%%", tt.Name, tt.PairedBandwidthPct, pct)
			}
		} else if tt.WeightGBs != 0 || tt.BandwidthPct != 0 || tt.SamplesBandwidthGBs != nil {
			t.Errorf("%s: prefill has bandwidth figures", tt.Name)
		}
	}
}

// TestBenchCmdDepth runs the tests after a context of -d tokens: their
// names and n_depth say so, and the largest session holds the depth too.
func TestBenchCmdDepth(t *testing.T) {
	dir := synthTiny(t)
	out, err := execLem(t, "bench", dir, "-p", "8", "-n", "4", "-d", "20", "-r", "1", "--threads", "2", "--mem-buffer", "16", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if len(rep.Tests) != 2 {
		t.Fatalf("%d tests, want 2: %+v", len(rep.Tests), rep.Tests)
	}
	for i, want := range []string{"pp8 @ d20", "tg4 @ d20"} {
		if tt := rep.Tests[i]; tt.Name != want || tt.NDepth != 20 || !(tt.AvgTS > 0) {
			t.Errorf("test %d: %+v, want %s at depth 20", i, tt, want)
		}
	}
	// The prefill's session: 20 + 8 positions, F32 caches.
	g, _ := synth.Like("tiny")
	if want := int64(g.Layers * 2 * g.KVHeads * g.HeadDim * 28 * 4); rep.KVBytes != want {
		t.Errorf("KV bytes %d, want %d", rep.KVBytes, want)
	}
}

func TestBenchCmdTable(t *testing.T) {
	dir := synthTiny(t)
	out, err := execLem(t, "bench", dir, "-p", "8", "-n", "0", "-r", "1", "--threads", "1", "--mem-buffer", "16")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, want := range []string{"| model ", " pp8 |", "qwen3 3.28M BF16", "memory bandwidth:"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tg") {
		t.Errorf("-n 0 still decoded:\n%s", out)
	}
}

func TestBenchCmdErrors(t *testing.T) {
	dir := synthTiny(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no tests", []string{"bench", dir, "-p", "0", "-n", "0"}, "nothing to measure"},
		{"no reps", []string{"bench", dir, "-r", "0"}, "-r must be at least 1"},
		{"negative", []string{"bench", dir, "-p", "-3"}, "must not be negative"},
		{"too long", []string{"bench", dir, "-p", "5000", "-n", "1", "--mem-buffer", "1"}, "exceed the model's context of 4096"},
		{"too deep", []string{"bench", dir, "-p", "0", "-n", "8", "-d", "4088", "--mem-buffer", "1"}, "4097 positions exceed the model's context of 4096"},
		{"negative depth", []string{"bench", dir, "-d", "-1"}, "must not be negative"},
		{"missing model", []string{"bench", filepath.Join(dir, "missing")}, "missing"},
		{"no path", []string{"bench"}, "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := execLem(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestBenchCmdGGUF(t *testing.T) {
	dir := synthTiny(t)
	path := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	if out, err := execLem(t, "quant", dir, "--gguf", "q8_0", "-o", path); err != nil {
		t.Fatalf("quant: %v\n%s", err, out)
	}
	out, err := execLem(t, "bench", path, "-p", "16", "-n", "8", "-r", "1", "--threads", "2", "--mem-buffer", "64", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if !strings.Contains(rep.Label, "Q8_0") || rep.WeightBytesPerToken <= 0 || len(rep.Tests) != 2 || rep.Tests[1].AvgTS <= 0 {
		t.Errorf("bench of a GGUF file: %+v", rep)
	}
}

// TestMLXBenchInspect runs bench and inspect on an MLX 4-bit pack of the
// tiny synthetic model: the quantized weights count as one tensor each of
// type mlx4g64, with the parameters of the float model, and decode reads
// fewer bytes than the bf16 model.
func TestMLXBenchInspect(t *testing.T) {
	dir := synthTiny(t)
	out := filepath.Join(t.TempDir(), "tiny-mlx4")
	if o, err := execLem(t, "quant", dir, "--bits", "4", "-o", out); err != nil {
		t.Fatalf("quant: %v\n%s", err, o)
	}
	g, _ := synth.Like("tiny")
	bf16, _ := synth.ParseDType("bf16")
	o, err := execLem(t, "bench", out, "-p", "16", "-n", "8", "-r", "1", "--threads", "2", "--mem-buffer", "64", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, o)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(o), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, o)
	}
	if !strings.Contains(rep.Label, "mlx4g64") || rep.Params != g.Params() || len(rep.Tests) != 2 || rep.Tests[1].AvgTS <= 0 ||
		rep.WeightBytesPerToken <= 0 || rep.WeightBytesPerToken >= g.DecodeBytes(bf16)/3 {
		t.Errorf("bench of an MLX pack: label %q, params %d (want %d), %d bytes per token (bf16: %d), tests %+v",
			rep.Label, rep.Params, g.Params(), rep.WeightBytesPerToken, g.DecodeBytes(bf16), rep.Tests)
	}
	o, err = execLem(t, "inspect", "--json", out)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, o)
	}
	var in inspection
	if err := json.Unmarshal([]byte(o), &in); err != nil {
		t.Fatal(err)
	}
	var mlx typeTotal
	for _, tt := range in.Types {
		if tt.Type == "mlx4g64" {
			mlx = tt
		}
		if tt.Type == "U32" {
			t.Errorf("inspect lists U32 tensors: %+v", in.Types)
		}
	}
	if in.Parameters != g.Params() || in.Quantization != "mlx affine 4-bit, group 64" || mlx.Tensors == 0 || !in.Supported {
		t.Errorf("inspect of an MLX pack: %+v", in)
	}
}

// TestBenchCmdStateAndExperts benchmarks shrunken hybrid and
// mixture-of-experts geometries: the recurrent state and its checkpoints
// count in the memory report, and decode reads only the routed experts.
func TestBenchCmdStateAndExperts(t *testing.T) {
	bf16, _ := synth.ParseDType("bf16")
	tests := []struct {
		like   string
		shrink func(g *synth.Geometry)
		// kv, state: bytes of the 16-token prefill session's KV caches
		// and recurrent state (one checkpoint of it: one chunk).
		kv, state func(g *synth.Geometry) int64
	}{
		{
			like: "qwen3.5-0.8b",
			shrink: func(g *synth.Geometry) {
				g.CutLayers(4)
				g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 96
				g.Heads, g.KVHeads, g.HeadDim = 2, 1, 32
				g.Linear = &synth.LinearAttention{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4}
			},
			// One attention layer; three DeltaNet layers, each with a
			// convolution window of K-1 rows and a delta-rule state.
			kv: func(g *synth.Geometry) int64 { return int64(2*g.KVHeads*g.HeadDim*16) * 4 },
			state: func(g *synth.Geometry) int64 {
				l := g.Linear
				conv := (l.ConvKernel - 1) * (2*l.KeyHeads*l.KeyDim + l.ValueHeads*l.ValueDim)
				return int64(3*(conv+l.ValueHeads*l.ValueDim*l.KeyDim)) * 4
			},
		},
		{
			like: "qwen3-30b-a3b",
			shrink: func(g *synth.Geometry) {
				g.CutLayers(2)
				g.VocabSize, g.HiddenSize, g.IntermediateSize = 300, 64, 96
				g.Heads, g.KVHeads, g.HeadDim = 4, 2, 16
				g.MoE = &synth.MoE{Experts: 16, TopK: 4, Inter: 32}
			},
			kv:    func(g *synth.Geometry) int64 { return int64(g.Layers*2*g.KVHeads*g.HeadDim*16) * 4 },
			state: func(*synth.Geometry) int64 { return 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.like, func(t *testing.T) {
			g, err := synth.Like(tt.like)
			if err != nil {
				t.Fatal(err)
			}
			tt.shrink(g)
			dir := filepath.Join(t.TempDir(), "m")
			if _, err := synth.WriteGeometry(dir, g, synth.Options{}); err != nil {
				t.Fatal(err)
			}
			out, err := execLem(t, "bench", dir, "-p", "16", "-n", "4", "-r", "1", "--threads", "1", "--mem-buffer", "16", "--json")
			if err != nil {
				t.Fatalf("bench: %v\n%s", err, out)
			}
			var rep benchReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, out)
			}
			if rep.WeightBytesPerToken != g.DecodeBytes(bf16) || rep.SizeBytes != g.Bytes(bf16) {
				t.Errorf("reads %d of %d bytes per token, want %d of %d", rep.WeightBytesPerToken, rep.SizeBytes, g.DecodeBytes(bf16), g.Bytes(bf16))
			}
			if e := g.MoE; e != nil {
				if rep.ExpertBytes <= 0 || rep.ActiveExpertBytes != rep.ExpertBytes*int64(e.TopK)/int64(e.Experts) {
					t.Errorf("reads %d of %d expert bytes, want %d of %d", rep.ActiveExpertBytes, rep.ExpertBytes, e.TopK, e.Experts)
				}
			}
			if kv, st := tt.kv(g), tt.state(g); rep.KVBytes != kv || rep.StateBytes != st || rep.CheckpointBytes != st {
				t.Errorf("state: KV %d, recurrent %d, checkpoints %d bytes; want %d, %d, %d", rep.KVBytes, rep.StateBytes, rep.CheckpointBytes, kv, st, st)
			}
		})
	}
	// The table's memory line names the recurrent state.
	g, _ := synth.Like("qwen3.5-0.8b")
	tests[0].shrink(g)
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := synth.WriteGeometry(dir, g, synth.Options{}); err != nil {
		t.Fatal(err)
	}
	out, err := execLem(t, "bench", dir, "-p", "8", "-n", "2", "-r", "1", "--threads", "1", "--mem-buffer", "16")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	if !strings.Contains(out, "+ recurrent state ") || !strings.Contains(out, "peak resident memory:") {
		t.Errorf("memory line lacks the recurrent state:\n%s", out)
	}
}

// TestResetPeakRSS checks that the peak resident set, raised by a buffer
// like the bandwidth measurement's, falls back once the buffer is freed and
// the peak reset: bench's memory figure leaves that buffer out.
func TestResetPeakRSS(t *testing.T) {
	if !canResetPeakRSS() {
		t.Skip("no /proc/self/clear_refs")
	}
	const size = 512 << 20
	buf, err := mmap.Anon(size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	high := peakRSS()
	mmap.Free(buf)
	if err := resetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	if after := peakRSS(); after > high-size/2 {
		t.Errorf("peak resident set %d MiB after the reset, %d MiB with the buffer", after>>20, high>>20)
	}
}
