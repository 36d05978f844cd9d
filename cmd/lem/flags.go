package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/tiny"
)

// runFlags are the flags of every verb that runs a model.
type runFlags struct {
	threads int
	ctx     int
	device  string
	noMmap  bool
	quiet   bool // no startup line on standard error
}

func (f *runFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.threads, "threads", 0, "CPU threads (0: all cores)")
	fs.IntVar(&f.ctx, "ctx", 0, "context length in tokens (0: the model's, at most 8192)")
	registerNoMmap(fs, &f.noMmap)
	fs.StringVar(&f.device, "device", "auto", "where to run: auto (CUDA when a GPU and its driver are present, else the CPU), cpu, cuda or cuda:N")
}

// registerNoMmap registers --no-mmap, whose default is on when the
// environment sets LEM_NO_MMAP (to anything but the empty string).
func registerNoMmap(fs *pflag.FlagSet, noMmap *bool) {
	fs.BoolVar(noMmap, "no-mmap", os.Getenv("LEM_NO_MMAP") != "", "read weights into memory (transparent huge pages) instead of mapping the file: slower to start, faster to decode on the CPU (env LEM_NO_MMAP)")
}

// open loads the model at path with the flags' backend.
func (f *runFlags) open(path string) (*engine.Model, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	return engine.Open(path, opts)
}

// options picks the backend --device names and says which on standard
// error.
func (f *runFlags) options() (engine.Options, error) {
	b, desc, err := device.Open(f.device, f.threads)
	if err != nil {
		return engine.Options{}, err
	}
	if !f.quiet {
		fmt.Fprintln(os.Stderr, "lem: device", desc)
	}
	return engine.Options{Backend: b, NoMmap: f.noMmap}, nil
}

// openModelArg opens the model a verb's optional PATH argument names: the
// model at args[0], or lem-tiny, the model built into lem, when args is
// empty.
func openModelArg(args []string, rf runFlags) (*engine.Model, error) {
	if len(args) == 0 {
		opts, err := rf.options()
		if err != nil {
			return nil, err
		}
		return engine.OpenTiny(opts)
	}
	return rf.open(args[0])
}

// tinyNote introduces the built-in model at startup and tells how to run a
// real one with verb ("run", "serve").
func tinyNote(verb string) string {
	return fmt.Sprintf("%s (embedded, %dM parameters) — point lem at a real model with `lem %s PATH`",
		tiny.Name, (tiny.Parameters+500_000)/1_000_000, verb)
}

// sampleFlags are the sampling flags of generate and run.
type sampleFlags struct {
	temperature, topP, minP, repeat float32
	topK                            int
	seed                            int64
}

func (f *sampleFlags) register(cmd *cobra.Command, temperature float32) {
	fs := cmd.Flags()
	fs.Float32Var(&f.temperature, "temperature", temperature, "sampling temperature (0: greedy)")
	fs.IntVar(&f.topK, "top-k", 40, "keep the K most likely tokens (0: all)")
	fs.Float32Var(&f.topP, "top-p", 0.95, "nucleus sampling threshold (1: off)")
	fs.Float32Var(&f.minP, "min-p", 0.05, "drop tokens less likely than this fraction of the best (0: off)")
	fs.Float32Var(&f.repeat, "repeat-penalty", 1, "penalty for repeating recent tokens (1: off)")
	fs.Int64Var(&f.seed, "seed", -1, "random seed (-1: random)")
}

func (f *sampleFlags) params() engine.SampleParams {
	p := engine.SampleParams{
		Temperature: f.temperature, TopK: f.topK, TopP: f.topP, MinP: f.minP,
		RepetitionPenalty: f.repeat, PenaltyWindow: 64,
	}
	if f.seed >= 0 {
		p.Seed, p.HasSeed = uint64(f.seed), true
	}
	return p
}

// byteSize is a flag holding a number of bytes, written as a count with
// an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB,
// TB (powers of 1000), or K, M, G, T as the binary ones: "4GiB",
// "512MiB", "1.5G", "1048576".
type byteSize int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// parseByteSize reads a size as byteSize takes it.
func parseByteSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "xXpP_") || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size: want a number of bytes with an optional unit, such as 4GiB, 512MiB or 1073741824", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	b := v * mult
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) String() string {
	if *b == 0 {
		return "0"
	}
	return humanBytes(int64(*b))
}

func (b *byteSize) Type() string { return "size" }
