package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/tiny"
)

// EnvAvailableMemory names the environment variable that, when set to a
// number of bytes, replaces the memory PlanMemory measures. It is meant
// for testing the checks on a machine of any size.
const EnvAvailableMemory = "LEM_AVAILABLE_MEMORY"

// MemoryPlan is what loading a model with a context takes, set against the
// memory of the device its weights go to.
type MemoryPlan struct {
	// Weights is the bytes of the model's weights as stored.
	Weights int64
	// PositionBytes is what one position of one sequence's KV cache takes
	// over every attention layer (an upper bound: sliding windows and
	// layers without attention are counted as full attention).
	PositionBytes int64
	// Trained is the model's trained context length.
	Trained int
	// Context is the context chosen: the one asked for, or the trained
	// length bounded by what the memory left after the weights allows.
	Context int
	// Available is the memory free on the device (a GPU's free memory, or
	// the host's available memory); 0 when it cannot be told.
	Available int64
	// Device names where Available was measured: "GPU", "host" or "test
	// override".
	Device string
	// Reason says how Context was chosen.
	Reason string
	// Warnings are things the user should know before the model runs.
	Warnings []string
}

// KVBytes is the KV cache of one sequence of n positions.
func (p *MemoryPlan) KVBytes(n int) int64 { return int64(n) * p.PositionBytes }

// minContext is the smallest context PlanMemory picks on its own.
const minContext = 256

// PlanMemory sizes the model at path (a GGUF file, a model directory, or ""
// for lem-tiny) on backend b with a context of ctx tokens (0: choose), and
// checks it against the memory available. It refuses, with the sizes in
// GiB and what to change, when the weights do not fit or when the KV cache
// of an asked-for context does not fit beside them; it warns when a
// context beyond the trained length is asked for. It loads nothing.
func PlanMemory(path string, b compute.Backend, ctx int) (*MemoryPlan, error) {
	if ctx < 0 {
		return nil, fmt.Errorf("context %d: want 0 (choose) or a positive number of tokens", ctx)
	}
	cfg, weights, err := sizeModel(path)
	if err != nil {
		return nil, err
	}
	p := &MemoryPlan{Weights: weights, Trained: cfg.MaxPositionEmbeddings}
	if p.Trained <= 0 {
		p.Trained = 4096
	}
	elem := int64(compute.F32.Size())
	if kp, ok := b.(compute.KVPooler); ok {
		elem = int64(kp.KVPoolType().Size())
	}
	p.PositionBytes = int64(cfg.NumHiddenLayers) * 2 * int64(cfg.NumKeyValueHeads) * int64(cfg.HeadDim) * elem
	p.Available, p.Device = availableMemory(b)
	name := path
	if name == "" {
		name = tiny.Name
	}
	if p.Available > 0 && p.Weights > p.Available {
		return nil, fmt.Errorf("%s: the weights take %s but only %s of %s memory is available: "+
			"use a smaller quantization (lem quant SRC --gguf q4_k_m -o OUT, or a smaller model) or free memory",
			name, gib(p.Weights), gib(p.Available), p.Device)
	}
	left := p.Available - p.Weights
	if ctx > 0 {
		p.Context = ctx
		p.Reason = "asked for"
		if ctx > p.Trained {
			p.Warnings = append(p.Warnings, fmt.Sprintf("a context of %d tokens is beyond the %d the model was trained on: its answers degrade past %d", ctx, p.Trained, p.Trained))
		}
		if p.Available > 0 && p.KVBytes(ctx) > left {
			fit := fitContext(left, p.PositionBytes)
			return nil, fmt.Errorf("%s: the weights (%s) and the KV cache of %d tokens (%s) take %s but only %s of %s memory is available: "+
				"use --ctx %d or less, or a smaller quantization",
				name, gib(p.Weights), ctx, gib(p.KVBytes(ctx)), gib(p.Weights+p.KVBytes(ctx)), gib(p.Available), p.Device, fit)
		}
		return p, nil
	}
	p.Context, p.Reason = p.Trained, "the model's trained length"
	if p.Available > 0 && p.PositionBytes > 0 {
		// The KV cache may take half of what the weights leave, so that
		// the machine keeps room for the rest.
		if fit := fitContext(left/2, p.PositionBytes); fit < p.Context {
			p.Context = max(fit, min(minContext, p.Trained))
			p.Reason = fmt.Sprintf("bounded by memory: %s of %s memory available, %s of weights, the model was trained on %d",
				gib(p.Available), p.Device, gib(p.Weights), p.Trained)
			if p.KVBytes(p.Context) > left {
				return nil, fmt.Errorf("%s: the weights (%s) leave %s of the %s of %s memory available, too little for a KV cache of %d tokens (%s): "+
					"use a smaller quantization or free memory",
					name, gib(p.Weights), gib(max(left, 0)), gib(p.Available), p.Device, p.Context, gib(p.KVBytes(p.Context)))
			}
		}
	}
	if p.Available > 0 && p.Weights+p.KVBytes(p.Context) > p.Available*9/10 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("the weights (%s) and the KV cache (%s) take most of the %s of %s memory available: the model may run slowly; a smaller quantization or a smaller --ctx leaves room",
			gib(p.Weights), gib(p.KVBytes(p.Context)), gib(p.Available), p.Device))
	}
	return p, nil
}

// fitContext is the most positions of bytes each that room holds, rounded
// down to a multiple of minContext.
func fitContext(room, bytes int64) int {
	if room <= 0 || bytes <= 0 {
		return 0
	}
	n := room / bytes
	if n >= minContext {
		n -= n % minContext
	}
	return int(min(n, 1<<30))
}

// gib writes n bytes in GiB.
func gib(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }

// availableMemory is the memory free where b keeps its tensors: a GPU's
// free memory, or the host's available memory.
func availableMemory(b compute.Backend) (int64, string) {
	if s := os.Getenv(EnvAvailableMemory); s != "" {
		var n int64
		if _, err := fmt.Sscan(s, &n); err == nil && n > 0 {
			return n, "test override"
		}
	}
	if r, ok := b.(compute.MemoryReporter); ok {
		if n, err := r.FreeMemory(); err == nil && n > 0 {
			return n, "GPU"
		}
	}
	return memAvailable(), "host"
}

// sizeModel reads the configuration and the weights' size of the model at
// path without loading it.
func sizeModel(path string) (*model.Config, int64, error) {
	if path == "" {
		cfg, err := model.ParseConfig([]byte(tiny.Config))
		return cfg, int64(len(tiny.Weights())), err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if !st.IsDir() {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		g, err := model.ReadGGUF(f, model.GGUFOptions{})
		if err != nil {
			return nil, 0, err
		}
		var n int64
		for _, t := range f.Tensors {
			n += t.Size()
		}
		return g.Config, n, nil
	}
	cfg, err := model.LoadConfig(path)
	if err != nil {
		return nil, 0, err
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, 0, err
	}
	var n int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		// Through the link, as the loader reads it (Hugging Face caches
		// link blobs).
		if st, err := os.Stat(filepath.Join(path, e.Name())); err == nil {
			n += st.Size()
		}
	}
	return cfg, n, nil
}
