package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
)

// benchReport is what bench --json prints; a stable contract.
type benchReport struct {
	Model     string `json:"model"`      // the path benchmarked
	ModelType string `json:"model_type"` // config.json model_type
	Label     string `json:"label"`      // e.g. "qwen2 494.03M BF16", the table's model column
	SizeBytes int64  `json:"size_bytes"` // bytes of all weight tensors
	Params    int64  `json:"params"`
	Backend   string `json:"backend"` // "cpu" or "cuda"
	Device    string `json:"device"`  // the backend's description
	Threads   int    `json:"threads"`
	// WeightBytesPerToken is what one decode step reads of the weights, as
	// the loaded model accounts it (see model.WeightReads): every weight
	// the model loaded, one row of each embedding table, and of a mixture
	// of experts the router, the shared experts and the top k routed ones.
	WeightBytesPerToken int64 `json:"weight_bytes_per_token"`
	// ExpertBytes is the size of the routed experts, ActiveExpertBytes the
	// part of them a token reads (0 without experts).
	ExpertBytes       int64 `json:"expert_bytes,omitempty"`
	ActiveExpertBytes int64 `json:"active_expert_bytes,omitempty"`
	// MemBandwidthGBs is the machine's streaming-read bandwidth with the
	// same thread count, in 10^9 bytes per second; MemBufferBytes the size
	// of the buffer read.
	// On a GPU it is the device's copy bandwidth (bytes read plus
	// bytes written by device-to-device copies of the buffer), as
	// BandwidthMethod says.
	MemBandwidthGBs float64 `json:"mem_bandwidth_gbs"`
	MemBufferBytes  int64   `json:"mem_buffer_bytes"`
	BandwidthMethod string  `json:"bandwidth_method"`
	// DecodeKernels is the number of kernel launches of one decode step
	// as the backend records it (CUDA graphs), 0 where not counted.
	DecodeKernels int `json:"decode_kernels,omitempty"`
	// LoadSeconds is the time engine.Open took: reading the weights and,
	// on a GPU, uploading them.
	LoadSeconds float64 `json:"load_seconds"`
	// PeakRSSBytes is the process's peak resident set while the tests ran,
	// the buffers of the bandwidth measurements left out. KVBytes,
	// StateBytes and CheckpointBytes are the per-sequence state of the largest session:
	// its KV caches, its recurrent state (delta-rule and SSM states,
	// convolution windows) and the checkpoints of that state kept for
	// prefix reuse.
	PeakRSSBytes    int64       `json:"peak_rss_bytes"`
	KVBytes         int64       `json:"kv_bytes"`
	StateBytes      int64       `json:"state_bytes"`
	CheckpointBytes int64       `json:"checkpoint_bytes"`
	Tests           []benchTest `json:"tests"`
	// Parallel holds the rows of the parallel mode (-npl), which runs
	// instead of the tests.
	Parallel []benchParallel `json:"parallel,omitempty"`
}

// benchTest is one row of the table: prefill of NPrompt tokens (ppN) or
// decode of NGen tokens (tgN), repeated.
type benchTest struct {
	Name      string    `json:"name"`
	NPrompt   int       `json:"n_prompt"`
	NGen      int       `json:"n_gen"`
	NDepth    int       `json:"n_depth,omitempty"` // tokens in the context before the test's
	SamplesNS []int64   `json:"samples_ns"`
	SamplesTS []float64 `json:"samples_ts"` // tokens per second, one per repetition
	AvgTS     float64   `json:"avg_ts"`
	StddevTS  float64   `json:"stddev_ts"`
	// Decode only: weight bandwidth achieved at AvgTS, and as a percentage
	// of MemBandwidthGBs.
	WeightGBs    float64 `json:"weight_gbs,omitempty"`
	BandwidthPct float64 `json:"bandwidth_pct,omitempty"`
	// Decode on the CPU only: the streaming-read bandwidth measured right
	// after each repetition, and the mean over the repetitions of each
	// one's weight bandwidth as a percentage of the bandwidth measured
	// after it. On a machine whose bandwidth drifts with other tenants'
	// load, this pairs each decode with the bandwidth of its moment;
	// BandwidthPct compares the mean decode with the best bandwidth of the
	// whole run instead.
	SamplesBandwidthGBs []float64 `json:"samples_bandwidth_gbs,omitempty"`
	PairedBandwidthPct  float64   `json:"paired_bandwidth_pct,omitempty"`
}

// benchOptions are bench's flags.
type benchOptions struct {
	prompt, gen, reps, threads int
	depth                      int // tokens in the context before each test's (-d)
	memMiB                     int
	device                     string
	ngl                        int // llama.cpp's -ngl (see resolveDevice)
	hostSampling               bool
	noMmap                     bool // read the weights into memory (--no-mmap)
	asJSON                     bool
	npl                        []int     // parallel mode: sequences at once, one run each
	kvBytes                    int64     // parallel mode: the paged cache's memory (0: default)
	draft                      int       // parallel mode: draft tokens per step (engine.SchedulerOptions.Draft)
	kvType                     string    // parallel mode: --kv-type
	cpuProfile                 string    // file for a CPU profile of the timed tests; "": none
	progress                   io.Writer // receives a line per repetition; nil: none
}

func newBenchCmd() *cobra.Command {
	var (
		o        benchOptions
		kvMemory byteSize
	)
	cmd := &cobra.Command{
		Use:   "bench PATH",
		Short: "Measure prefill and decode speed",
		Long: `Bench loads the model at PATH and measures, for each repetition, the prefill
of -p random prompt tokens in a fresh session (ppN) and the greedy decode of
-n tokens after a one-token prompt, stop tokens ignored (tgN), in tokens per
second as mean ± standard deviation over the repetitions. A warm-up run of
each test's size precedes them. With -d, each test starts with that many
random tokens already in the context, prefilled untimed (ppN @ dD, tgN @ dD):
decode then also reads a KV cache of that length per token.

Decode reads the weights once per token, so its speed is also given as the
weight bandwidth it achieves (bytes of weights read per token × tokens per
second) and as a percentage of the machine's memory bandwidth, measured in
the same run by streaming reads of a buffer much larger than the caches with
the same number of threads: the best of the measurements after each decode
repetition (on the CPU) and after the tests. On the CPU each decode
repetition is also compared with the bandwidth measured right after it, for
machines whose bandwidth moves with other load. The bytes per token are
what the loaded model reads: embedding tables (the token's, Gemma's
per-layer ones) count one row, the output projection all of it, and a
mixture-of-experts layer its router, its shared experts and the k routed
experts a token runs, not all of them.

The memory line compares the peak resident set with the weights plus the
largest session's state: KV caches, and for hybrid and state-space models
the recurrent state and the checkpoints of it kept for prefix reuse.

With -npl (one dash or two), bench measures many sequences at once instead,
as llama.cpp's llama-batched-bench does: for each count B of the list, B
sequences, each with a prompt of its own of -p random tokens (no shared
prefix), run together through the scheduler of lem serve, each generating
-n tokens, stop tokens ignored. A row reports PP and TG (tokens per
sequence), B, N_KV = B × (PP + TG), the time until every prompt was
prefilled (T_PP) and the aggregate prefill rate over it (S_PP), the time
from then to the last token (T_TG) and the aggregate decode rate over it
(S_TG), and the whole run (T, S = N_KV / T). Sequences whose prompts are
done decode while others still prefill, as when serving. Each count runs
once, on a fresh scheduler, after a warm-up of one sequence (-r does not
apply). --kv-memory sizes the paged cache; sequences preempted for want of
it are counted.`,
		Example: `  lem bench /tmp/qwen05b -p 512 -n 128 -r 3
  lem bench /tmp/qwen05b -p 0 -n 64 -d 4096
  lem bench model-dir --threads 8 --json
  lem bench model.gguf -npl 1,4,16,64 -p 128 -n 128`,
		// Flags are parsed in RunE, so that -npl may be written with one
		// dash as llama-batched-bench takes it.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			if err := fs.Parse(llamaFlags(args)); err != nil {
				return flagError(cmd, err)
			}
			if help, _ := fs.GetBool("help"); help {
				return cmd.Help()
			}
			if err := cobra.ExactArgs(1)(cmd, fs.Args()); err != nil {
				return err
			}
			args = fs.Args()
			dev, err := resolveDevice(o.device, o.ngl)
			if err != nil {
				return err
			}
			o.device = dev
			o.kvBytes = int64(kvMemory)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.progress = cmd.ErrOrStderr()
			rep, err := runBench(ctx, args[0], o)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.asJSON {
				return printJSON(w, rep)
			}
			if len(rep.Parallel) > 0 {
				return printParallel(w, rep)
			}
			return printBench(w, rep)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&o.prompt, "n-prompt", "p", 512, "prompt tokens to prefill (0: skip the prefill test)")
	fs.IntVarP(&o.gen, "n-gen", "n", 128, "tokens to decode (0: skip the decode test)")
	fs.IntVarP(&o.reps, "repetitions", "r", 3, "repetitions of each test")
	fs.IntVarP(&o.depth, "n-depth", "d", 0, "tokens already in the context when each test starts (prefilled, not timed)")
	fs.IntVarP(&o.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	registerDevice(fs, &o.device, &o.ngl)
	fs.IntVar(&o.memMiB, "mem-buffer", 1024, "MiB read to measure the memory bandwidth")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed tests (not the warm-up; the bandwidth reads between decode repetitions show under cpu.StreamRead) to this file")
	fs.BoolVar(&o.hostSampling, "host-sampling", false, "read every logit and pick tokens on the host, even where the device could (for comparison)")
	fs.IntSliceVar(&o.npl, "npl", nil, "parallel mode, as llama-batched-bench: for each count, that many sequences at once, each with a prompt of its own of -p tokens, generating -n tokens (also -npl)")
	fs.Var(&kvMemory, "kv-memory", "parallel mode: memory of the paged KV cache, as 4GiB or 512MiB (0: a share of the free memory)")
	registerKVType(fs, &o.kvType)
	fs.IntVar(&o.draft, "draft", 0, "parallel mode: speculative decoding by prompt lookup, up to this many draft tokens per step (0: none, unlike lem serve's default on the CPU, so that figures compare with other engines)")
	registerNoMmap(fs, &o.noMmap)
	return cmd
}

// runBench measures the model at path.
func runBench(ctx context.Context, path string, o benchOptions) (*benchReport, error) {
	switch {
	case o.prompt < 0 || o.gen < 0 || o.depth < 0:
		return nil, fmt.Errorf("-p, -n and -d must not be negative (got %d, %d and %d)", o.prompt, o.gen, o.depth)
	case o.prompt == 0 && o.gen == 0:
		return nil, errors.New("nothing to measure: -p and -n are both 0")
	case o.reps < 1:
		return nil, fmt.Errorf("-r must be at least 1 (got %d)", o.reps)
	case o.threads < 0:
		return nil, fmt.Errorf("--threads must not be negative (got %d)", o.threads)
	case o.memMiB < 1:
		return nil, fmt.Errorf("--mem-buffer must be at least 1 MiB (got %d)", o.memMiB)
	}
	for _, n := range o.npl {
		if n < 1 {
			return nil, fmt.Errorf("-npl: want counts of sequences of at least 1, got %d", n)
		}
	}
	if len(o.npl) > 0 {
		switch {
		case o.prompt < 1:
			return nil, fmt.Errorf("-npl needs prompts: -p must be at least 1 (got %d)", o.prompt)
		case o.depth > 0:
			return nil, errors.New("-npl runs every sequence from an empty context: -d does not apply")
		}
	} else if o.kvBytes > 0 || o.draft > 0 || o.kvType != "" {
		return nil, errors.New("--kv-memory, --kv-type and --draft apply to the parallel mode only (-npl)")
	}
	backend, desc, err := device.Open(o.device, o.threads)
	if err != nil {
		return nil, err
	}
	if c, ok := backend.(io.Closer); ok {
		defer c.Close()
	}
	if err := setKVType(backend, o.kvType); err != nil {
		return nil, err
	}
	meter, ok := backend.(compute.BandwidthMeter)
	if !ok {
		return nil, fmt.Errorf("backend %s cannot measure its memory bandwidth", backend.Name())
	}
	// A backend on the host's threads is the CPU; the other one is CUDA.
	rep := &benchReport{Model: path, Backend: "cuda", Device: desc, BandwidthMethod: meter.BandwidthMethod()}
	host, onHost := backend.(compute.Threader)
	if onHost {
		rep.Backend, rep.Threads = "cpu", host.Threads()
	}

	path, err = resolveModel(path)
	if err != nil {
		return nil, err
	}
	rep.Model = path
	tOpen := time.Now()
	bar := newLoadBar(os.Stderr, false)
	m, err := engine.Open(path, engine.Options{Backend: backend, NoMmap: o.noMmap, Progress: bar.progress()})
	bar.finish(err == nil)
	if err != nil {
		return nil, err
	}
	rep.LoadSeconds = time.Since(tOpen).Seconds()
	defer m.Close()
	stored, dtype, err := storedTensors(path)
	if err != nil {
		return nil, err
	}
	cfg := m.Net.Config()
	if n := o.prompt + o.gen + 1; len(o.npl) > 0 && n > m.ContextLength() {
		return nil, fmt.Errorf("-p %d and -n %d: %d positions per sequence exceed the model's context of %d", o.prompt, o.gen, n, m.ContextLength())
	}
	if n := o.depth + max(o.prompt, o.gen+1); len(o.npl) == 0 && n > m.ContextLength() {
		return nil, fmt.Errorf("%d positions exceed the model's context of %d", n, m.ContextLength())
	}
	rep.ModelType = cfg.ModelType
	for _, t := range stored {
		rep.SizeBytes += t.bytes
		rep.Params += elements(t.shape)
	}
	rep.Label = fmt.Sprintf("%s %s %s", cfg.ModelType, humanCount(rep.Params), dtype)
	reads := m.WeightReads()
	rep.WeightBytesPerToken = reads.PerToken
	rep.ExpertBytes, rep.ActiveExpertBytes = reads.Experts, reads.ActiveExperts

	rep.MemBufferBytes = int64(o.memMiB) << 20
	logf := func(format string, args ...any) {
		if o.progress != nil {
			fmt.Fprintf(o.progress, format, args...)
		}
	}
	logf("bench: %s, %s of weights\n", rep.Label, humanBytes(rep.SizeBytes))
	if len(o.npl) > 0 {
		if err := runParallel(ctx, m, rep, o, logf); err != nil {
			return nil, err
		}
		rep.PeakRSSBytes = peakRSS()
		return rep, nil
	}
	// state notes the largest session's per-sequence memory.
	state := func(s *engine.Session) {
		if mem := s.Memory(); mem.Total() > rep.KVBytes+rep.StateBytes+rep.CheckpointBytes {
			rep.KVBytes, rep.StateBytes, rep.CheckpointBytes = mem.KV, mem.Recurrent, mem.Checkpoints
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	vocab := cfg.VocabSize
	randomIDs := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(vocab))
		}
		return ids
	}
	prefill := func(n int) (time.Duration, error) {
		s := m.NewSession(o.depth + n)
		if o.depth > 0 {
			if _, err := s.Append(randomIDs(o.depth)); err != nil {
				return 0, err
			}
		}
		ids := randomIDs(n)
		t0 := time.Now()
		_, err := s.Append(ids)
		d := time.Since(t0)
		state(s)
		return d, err
	}
	// Decode reuses one session, reset before each run, as llama-bench
	// reuses its context: the warm-up records its decode graph (on a GPU)
	// and the runs replay it.
	var ds *engine.Session
	defer func() {
		if ds != nil {
			ds.Close()
		}
	}()
	decode := func(n int) (time.Duration, error) {
		req := engine.Request{Prompt: randomIDs(o.depth + 1), MaxTokens: n + 1, IgnoreModelStops: true, HostSampling: o.hostSampling}
		if ds == nil {
			ds = m.NewSession(o.depth + o.gen + 1)
		}
		ds.Reset()
		res, err := m.Generate(ctx, ds, req, nil)
		if err != nil {
			return 0, err
		}
		state(ds)
		if k := ds.StepKernels(); k > 0 {
			rep.DecodeKernels = k
		}
		if len(res.IDs) != n+1 {
			return 0, fmt.Errorf("decode stopped after %d of %d tokens (%s)", len(res.IDs)-1, n, res.StopReason)
		}
		return res.Decode, nil
	}

	// Warm up at the sizes of the tests: page the weights in, grow the
	// scratch buffers, and on a GPU compile the kernels and pick the
	// matmul algorithms of these shapes, so that no repetition pays them.
	logf("bench: warming up\n")
	if o.prompt > 0 {
		if _, err := prefill(o.prompt); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	if o.gen > 0 {
		if _, err := decode(min(o.gen, 2)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}

	stop, err := startProfile(o.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stop()
	// bandwidth measures the memory bandwidth. Its buffer would raise the
	// peak resident set, so the peak so far is noted first and, where
	// decode repetitions are paired with measurements, reset after (where
	// Linux allows; elsewhere only the last measurement, after the tests,
	// is taken).
	var peak int64
	paired := onHost && canResetPeakRSS()
	bandwidth := func() (float64, error) {
		peak = max(peak, peakRSS())
		bps, err := meter.MemoryBandwidth(rep.MemBufferBytes)
		if err != nil {
			return 0, fmt.Errorf("memory bandwidth baseline: %w", err)
		}
		if paired {
			if err := resetPeakRSS(); err != nil {
				return 0, fmt.Errorf("peak resident set: %w", err)
			}
		}
		return bps / 1e9, nil
	}
	run := func(name string, np, ng int, once func(int) (time.Duration, error)) error {
		if o.depth > 0 {
			name += fmt.Sprintf(" @ d%d", o.depth)
		}
		t := benchTest{Name: name, NPrompt: np, NGen: ng, NDepth: o.depth}
		for i := range o.reps {
			if err := ctx.Err(); err != nil {
				return err
			}
			d, err := once(np + ng)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			ts := float64(np+ng) / d.Seconds()
			t.SamplesNS = append(t.SamplesNS, d.Nanoseconds())
			t.SamplesTS = append(t.SamplesTS, ts)
			logf("bench: %s %d/%d: %.2f t/s\n", name, i+1, o.reps, ts)
			if ng > 0 && paired {
				bw, err := bandwidth()
				if err != nil {
					return err
				}
				t.SamplesBandwidthGBs = append(t.SamplesBandwidthGBs, bw)
				logf("bench: %s %d/%d: memory bandwidth %.2f GB/s\n", name, i+1, o.reps, bw)
			}
		}
		t.AvgTS, t.StddevTS = meanStddev(t.SamplesTS)
		if ng > 0 {
			t.WeightGBs = float64(rep.WeightBytesPerToken) * t.AvgTS / 1e9
		}
		if len(t.SamplesBandwidthGBs) == len(t.SamplesTS) && len(t.SamplesTS) > 0 {
			pct := make([]float64, len(t.SamplesTS))
			for i, ts := range t.SamplesTS {
				pct[i] = 100 * float64(rep.WeightBytesPerToken) * ts / 1e9 / t.SamplesBandwidthGBs[i]
			}
			t.PairedBandwidthPct, _ = meanStddev(pct)
		}
		rep.Tests = append(rep.Tests, t)
		return nil
	}
	if o.prompt > 0 {
		if err := run(fmt.Sprintf("pp%d", o.prompt), o.prompt, 0, prefill); err != nil {
			return nil, err
		}
	}
	if o.gen > 0 {
		if err := run(fmt.Sprintf("tg%d", o.gen), 0, o.gen, decode); err != nil {
			return nil, err
		}
	}
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	// The run's bandwidth is the best of its measurements: this last one
	// and those after the decode repetitions.
	bw, err := bandwidth()
	if err != nil {
		return nil, err
	}
	rep.PeakRSSBytes = peak
	rep.MemBandwidthGBs = bw
	for _, t := range rep.Tests {
		for _, b := range t.SamplesBandwidthGBs {
			rep.MemBandwidthGBs = max(rep.MemBandwidthGBs, b)
		}
	}
	for i := range rep.Tests {
		if t := &rep.Tests[i]; t.NGen > 0 && rep.MemBandwidthGBs > 0 {
			t.BandwidthPct = 100 * t.WeightGBs / rep.MemBandwidthGBs
		}
	}
	return rep, nil
}

// peakRSS returns the process's peak resident set size (VmHWM), or 0 where
// /proc is unavailable.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

// resetPeakRSS resets the process's peak resident set size (VmHWM) to its
// current resident set, as Linux allows since 4.0.
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// canResetPeakRSS reports whether resetPeakRSS can work, without resetting.
func canResetPeakRSS() bool {
	f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// storedTensor is a weight as the model file stores it.
type storedTensor struct {
	shape []int // outermost dimension first
	bytes int64 // as stored, quantized blocks included
}

// storedTensors lists the weights of the model at path (a Hugging Face
// directory or a GGUF file), and names their type: a GGUF file's as
// gguf.File.FileType names it, else the storage type holding most of their
// bytes.
func storedTensors(path string) ([]storedTensor, string, error) {
	var out []storedTensor
	byType := map[string]int64{}
	if isGGUF(path) {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		for _, t := range f.Tensors {
			shape := make([]int, len(t.Dims))
			for i, d := range t.Dims {
				shape[len(t.Dims)-1-i] = int(d)
			}
			out = append(out, storedTensor{shape: shape, bytes: t.Size()})
		}
		return out, f.FileType(), nil
	} else {
		// The weights as the loader sees them: an MLX pack's quantized
		// weight is one tensor of its logical shape, scales and biases
		// included in its bytes.
		src, err := model.OpenSource(path)
		if err != nil {
			return nil, "", err
		}
		defer src.Close()
		d, err := safetensors.OpenDir(path)
		if err != nil {
			return nil, "", err
		}
		defer d.Close()
		for _, name := range src.Names() {
			dt, shape, size, _ := src.Info(name)
			typ := dt.String()
			if _, _, _, ok := dt.MLX(); !ok {
				t, _ := d.Tensor(name)
				typ = string(t.DType)
			}
			out = append(out, storedTensor{shape: slices.Clone(shape), bytes: int64(size)})
			byType[typ] += int64(size)
		}
	}
	var top string
	for dt, n := range byType {
		if n > byType[top] || n == byType[top] && dt < top {
			top = dt
		}
	}
	return out, top, nil
}

func elements(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// meanStddev returns the mean and the sample standard deviation (0 for one
// sample).
func meanStddev(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

// printBench prints the report as a Markdown table in llama-bench's layout,
// with the decode bandwidth columns added.
func printBench(w io.Writer, r *benchReport) error {
	rows := [][]string{{"model", "size", "params", "backend", "threads", "test", "t/s", "weights GB/s", "% of mem bw"}}
	for _, t := range r.Tests {
		gbs, pct := "", ""
		if t.NGen > 0 {
			gbs = fmt.Sprintf("%.2f", t.WeightGBs)
			pct = fmt.Sprintf("%.1f%%", t.BandwidthPct)
		}
		rows = append(rows, []string{
			r.Label, humanBytes(r.SizeBytes), humanCount(r.Params), r.Backend, fmt.Sprint(r.Threads),
			t.Name, fmt.Sprintf("%.2f ± %.2f", t.AvgTS, t.StddevTS), gbs, pct,
		})
	}
	right := []bool{false, true, true, false, true, true, true, true, true}
	var b strings.Builder
	writeTable(&b, rows, right)
	if r.Backend == "cuda" {
		fmt.Fprintf(&b, "\ndevice: %s\nmemory bandwidth: %.2f GB/s (device copy of %s, read + write); decode reads %s of weights per token",
			r.Device, r.MemBandwidthGBs, humanBytes(r.MemBufferBytes), humanBytes(r.WeightBytesPerToken))
	} else {
		fmt.Fprintf(&b, "\nmemory bandwidth: %.2f GB/s (streaming read of %s, %d threads); decode reads %s of weights per token",
			r.MemBandwidthGBs, humanBytes(r.MemBufferBytes), r.Threads, humanBytes(r.WeightBytesPerToken))
	}
	if r.DecodeKernels > 0 {
		fmt.Fprintf(&b, "; %d kernels per decode step", r.DecodeKernels)
	}
	for _, t := range r.Tests {
		if len(t.SamplesBandwidthGBs) > 0 {
			bws := make([]string, len(t.SamplesBandwidthGBs))
			for i, bw := range t.SamplesBandwidthGBs {
				bws[i] = fmt.Sprintf("%.2f", bw)
			}
			fmt.Fprintf(&b, "\n%s: %.1f%% of the bandwidth measured after each repetition (%s GB/s)", t.Name, t.PairedBandwidthPct, strings.Join(bws, ", "))
		}
	}
	if r.LoadSeconds > 0 {
		fmt.Fprintf(&b, "\nload: %.2f s (%.2f GB/s of weights)", r.LoadSeconds, float64(r.SizeBytes)/r.LoadSeconds/1e9)
	}
	if r.ExpertBytes > 0 {
		fmt.Fprintf(&b, " (routed experts: %s of %s)", humanBytes(r.ActiveExpertBytes), humanBytes(r.ExpertBytes))
	}
	b.WriteString("\n")
	if r.PeakRSSBytes > 0 {
		held := r.SizeBytes + r.KVBytes + r.StateBytes + r.CheckpointBytes
		fmt.Fprintf(&b, "peak resident memory: %s = %.2f × (weights %s + KV cache %s", humanBytes(r.PeakRSSBytes),
			float64(r.PeakRSSBytes)/float64(held), humanBytes(r.SizeBytes), humanBytes(r.KVBytes))
		if r.StateBytes+r.CheckpointBytes > 0 {
			fmt.Fprintf(&b, " + recurrent state %s + its checkpoints %s", humanBytes(r.StateBytes), humanBytes(r.CheckpointBytes))
		}
		b.WriteString(")\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes rows (the first the header) as a Markdown table, the
// columns whose right is set aligned right. Columns are at least 3 wide,
// room for an alignment marker.
func writeTable(b *strings.Builder, rows [][]string, right []bool) {
	width := make([]int, len(rows[0]))
	for i := range width {
		width[i] = 3
	}
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if right[i] {
				c = pad + c
			} else {
				c += pad
			}
			b.WriteString("| " + c + " ")
		}
		b.WriteString("|\n")
	}
	line(rows[0])
	for i := range width {
		dash := strings.Repeat("-", width[i])
		if right[i] {
			dash = dash[1:] + ":"
		}
		b.WriteString("| " + dash + " ")
	}
	b.WriteString("|\n")
	for _, row := range rows[1:] {
		line(row)
	}
}

// startProfile starts a CPU profile into the file path ("": none) and
// returns the function that ends it.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
