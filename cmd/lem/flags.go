package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/tiny"
)

// runFlags are the flags of every verb that runs a model.
type runFlags struct {
	threads int
	ctx     int
	device  string
	ngl     int // llama.cpp's -ngl: -1 unset, 0 the CPU, more the GPU
	noMmap  bool
	quiet   bool   // no startup line on standard error
	kvType  string // --kv-type where the verb registers it (serve)
}

func (f *runFlags) register(fs *pflag.FlagSet) {
	fs.IntVarP(&f.threads, "threads", "t", 0, "CPU threads (0: all cores)")
	fs.IntVarP(&f.ctx, "ctx", "c", 0, "context length in tokens (0: the model's trained length, bounded by memory; also --ctx-size)")
	registerNoMmap(fs, &f.noMmap)
	registerDevice(fs, &f.device, &f.ngl)
}

// registerDevice registers --device and llama.cpp's -ngl (--n-gpu-layers),
// which resolveDevice turns into a device.
func registerDevice(fs *pflag.FlagSet, dev *string, ngl *int) {
	fs.StringVar(dev, "device", "auto", "where to run: auto (CUDA when a GPU and its driver are present, else the CPU), cpu, cuda or cuda:N")
	fs.IntVar(ngl, "ngl", -1, "as llama.cpp's -ngl (also --n-gpu-layers): more than 0 puts the whole model on the GPU (--device cuda), 0 on the CPU (-1: --device decides)")
}

// resolveDevice returns the device --device and -ngl ask for together.
func resolveDevice(dev string, ngl int) (string, error) {
	switch {
	case ngl < 0:
		return dev, nil
	case ngl == 0 && (dev == "auto" || dev == "cpu"):
		return "cpu", nil
	case ngl > 0 && dev == "auto":
		return "cuda", nil
	case ngl > 0 && strings.HasPrefix(dev, "cuda"):
		return dev, nil
	}
	return "", fmt.Errorf("-ngl %d and --device %s disagree: -ngl 0 means the CPU, more the GPU; give one of them", ngl, dev)
}

// flagAliases maps the names other tools (llama.cpp, Ollama) give lem's
// flags to lem's; the global normalization function applies it, so either
// name works on every verb that has the flag.
var flagAliases = map[string]string{
	"ctx-size":     "ctx",
	"temp":         "temperature",
	"n-gpu-layers": "ngl",
	"n-predict":    "max-tokens",
	"draft-max":    "draft",
	"cache-type-k": "kv-type",
}

// normalizeFlag is the root command's flag normalization: flagAliases.
func normalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if to, ok := flagAliases[name]; ok {
		name = to
	}
	return pflag.NormalizedName(name)
}

// oneDashFlags are llama.cpp's flags of several letters written with one
// dash; pflag would read -ngl as -n gl.
var oneDashFlags = []string{"ngl", "npl"}

// llamaFlags rewrites the oneDashFlags that args write with one dash to
// two, up to a "--".
func llamaFlags(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		for _, n := range oneDashFlags {
			if a == "-"+n || strings.HasPrefix(a, "-"+n+"=") {
				a = "-" + a
			}
		}
		out[i] = a
	}
	return out
}

// flagError is the root command's flag error function: an unknown flag
// names the nearest flag of the verb and where its flags are listed.
func flagError(cmd *cobra.Command, err error) error {
	help := "lem help"
	if cmd.HasParent() {
		help += " " + cmd.Name()
	}
	msg := err.Error()
	var name string
	if n, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		name = n
	} else if n, ok := strings.CutPrefix(msg, "unknown shorthand flag: "); ok {
		// "'x' in -xyz": the whole word is more likely a flag of
		// another tool than a run of one-letter flags.
		if _, word, ok := strings.Cut(n, " in -"); ok {
			name = word
		}
	}
	if name == "" {
		return fmt.Errorf("%w (see %s)", err, help)
	}
	if name == "m" || name == "model" {
		return fmt.Errorf("%w: lem takes the model as an argument, as in lem %s PATH (see %s)", err, cmd.Name(), help)
	}
	if best := nearestFlag(cmd.Flags(), name); best != "" {
		return fmt.Errorf("%w: did you mean %s? (see %s)", err, best, help)
	}
	return fmt.Errorf("%w (see %s)", err, help)
}

// nearestFlag returns the flag of fs (as --name, or -x for a one-letter
// name) closest to name in edit distance, or "" when none is close.
func nearestFlag(fs *pflag.FlagSet, name string) string {
	best, bestD := "", max(2, len(name)/3)+1
	consider := func(cand, show string) {
		if d := editDistance(name, cand); d < bestD {
			best, bestD = show, d
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		consider(f.Name, "--"+f.Name)
		if f.Shorthand != "" && len(name) == 1 {
			consider(f.Shorthand, "-"+f.Shorthand)
		}
	})
	for alias, to := range flagAliases {
		if fs.Lookup(to) != nil {
			consider(alias, "--"+alias)
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// registerKVType registers --kv-type (also llama.cpp's --cache-type-k),
// the element type of the paged KV cache, for setKVType.
func registerKVType(fs *pflag.FlagSet, kvType *string) {
	fs.StringVar(kvType, "kv-type", "", "element type of the paged KV cache: f16 (half the memory) or f32 (default: f32 on the CPU, f16 on a GPU)")
}

// setKVType sets the element type of b's paged KV pools, as --kv-type
// names it ("" leaves the backend's default).
func setKVType(b compute.Backend, name string) error {
	if name == "" {
		return nil
	}
	dt, err := compute.ParseKVPoolType(name)
	if err != nil {
		return fmt.Errorf("--kv-type: %w", err)
	}
	kp, ok := b.(compute.KVPooler)
	if !ok {
		return fmt.Errorf("--kv-type: the %s backend keeps no paged KV cache of its own type", b.Name())
	}
	return kp.SetKVPoolType(dt)
}

// registerNoMmap registers --no-mmap, whose default is on when the
// environment sets LEM_NO_MMAP (to anything but the empty string).
func registerNoMmap(fs *pflag.FlagSet, noMmap *bool) {
	fs.BoolVar(noMmap, "no-mmap", os.Getenv("LEM_NO_MMAP") != "", "read weights into memory (transparent huge pages) instead of mapping the file: slower to start, faster to decode on the CPU (env LEM_NO_MMAP)")
}

// open loads the model name names (a path, or a name: see resolveModel)
// with the flags' backend.
func (f *runFlags) open(name string) (*engine.Model, error) {
	path, err := resolveModel(name)
	if err != nil {
		return nil, err
	}
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	return openPlanned(path, opts, f.ctx, f.quiet)
}

// options picks the backend --device names and says which on standard
// error.
func (f *runFlags) options() (engine.Options, error) {
	dev, err := resolveDevice(f.device, f.ngl)
	if err != nil {
		return engine.Options{}, err
	}
	b, desc, err := device.Open(dev, f.threads)
	if err != nil {
		return engine.Options{}, err
	}
	if err := setKVType(b, f.kvType); err != nil {
		return engine.Options{}, err
	}
	if !f.quiet {
		fmt.Fprintln(os.Stderr, "lem: device", desc)
	}
	return engine.Options{Backend: b, NoMmap: f.noMmap}, nil
}

// openModelArg opens the model a verb's optional MODEL argument names: the
// model args[0] names (a path or a name, see resolveModel), or lem-tiny, the model built into lem, when args is
// empty.
func openModelArg(args []string, rf runFlags) (*engine.Model, error) {
	if len(args) == 0 {
		opts, err := rf.options()
		if err != nil {
			return nil, err
		}
		return openPlanned("", opts, rf.ctx, rf.quiet)
	}
	return rf.open(args[0])
}

// tinyNote introduces the built-in model at startup and tells how to run a
// real one with verb ("run", "serve").
func tinyNote(verb string) string {
	return fmt.Sprintf("%s (embedded, %dM parameters) — point lem at a real model with `lem %s PATH`",
		tiny.Name, (tiny.Parameters+500_000)/1_000_000, verb)
}

// Sampling defaults that generate and run share.
const (
	// defaultTemperature applies when neither --temperature nor the
	// model's generation_config.json sets one; lem-tiny is greedy.
	defaultTemperature = 0.8
	// defaultMaxTokens bounds a reply or a completion.
	defaultMaxTokens = 2048
)

// sampleFlags are the sampling flags of generate and run.
type sampleFlags struct {
	temperature, topP, minP, repeat float32
	topK                            int
	seed                            int64
	fs                              *pflag.FlagSet
}

func (f *sampleFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	f.fs = fs
	fs.Float32Var(&f.temperature, "temperature", defaultTemperature, "sampling temperature (0: greedy; unset: the model's generation_config.json, else 0.8, and 0 for lem-tiny; also --temp)")
	fs.IntVar(&f.topK, "top-k", 40, "keep the K most likely tokens (0: all)")
	fs.Float32Var(&f.topP, "top-p", 0.95, "nucleus sampling threshold (1: off)")
	fs.Float32Var(&f.minP, "min-p", 0.05, "drop tokens less likely than this fraction of the best (0: off)")
	fs.Float32Var(&f.repeat, "repeat-penalty", 1, "penalty for repeating recent tokens (1: off)")
	fs.Int64Var(&f.seed, "seed", -1, "random seed (-1: random)")
}

// params returns the flags' sampling parameters for m: an unset
// --temperature takes m's default (see modelTemperature).
func (f *sampleFlags) params(m *engine.Model) engine.SampleParams {
	t := f.temperature
	if f.fs != nil && !f.fs.Changed("temperature") {
		t = modelTemperature(m)
	}
	p := engine.SampleParams{
		Temperature: t, TopK: f.topK, TopP: f.topP, MinP: f.minP,
		RepetitionPenalty: f.repeat, PenaltyWindow: 64,
	}
	if f.seed >= 0 {
		p.Seed, p.HasSeed = uint64(f.seed), true
	}
	return p
}

// modelTemperature is the temperature m runs at unless told otherwise:
// 0 for lem-tiny, whose answers are meant to come out as written; the
// temperature of its generation_config.json (0 where it sets do_sample
// false); else defaultTemperature.
func modelTemperature(m *engine.Model) float32 {
	if m == nil {
		return defaultTemperature
	}
	if m.Name == tiny.Name {
		return 0
	}
	if g := m.GenConfig; g != nil {
		if g.DoSample != nil && !*g.DoSample {
			return 0
		}
		if g.Temperature != nil {
			return float32(*g.Temperature)
		}
	}
	return defaultTemperature
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

// hostPort holds serve's --host and --port, the way llama-server and
// Ollama name the address that --addr gives whole.
type hostPort struct {
	host string
	port int
}

func (h *hostPort) register(fs *pflag.FlagSet) {
	fs.StringVar(&h.host, "host", "", "host or IP address to listen on, as llama-server's --host (with --port, instead of --addr)")
	fs.IntVar(&h.port, "port", 0, "port to listen on, as llama-server's --port (with --host, instead of --addr)")
}

// addr returns the address to listen on: addr, with the host and port
// that --host and --port replace.
func (h *hostPort) addr(fs *pflag.FlagSet, addr string) (string, error) {
	if h.host == "" && h.port == 0 {
		return addr, nil
	}
	if fs.Changed("addr") {
		return "", fmt.Errorf("--addr %s and --host/--port both name the address: give one", addr)
	}
	if h.port < 0 || h.port > 65535 {
		return "", fmt.Errorf("--port %d: want a port from 0 to 65535", h.port)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %s: %w", addr, err)
	}
	if h.host != "" {
		host = strings.Trim(h.host, "[]")
	}
	if h.port != 0 {
		port = strconv.Itoa(h.port)
	}
	return net.JoinHostPort(host, port), nil
}
