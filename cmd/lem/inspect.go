package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
)

// inspection is what lem inspect reports; its JSON form is a stable contract.
type inspection struct {
	Path          string            `json:"path"`
	Format        string            `json:"format"` // "gguf" or "safetensors"
	Architecture  string            `json:"architecture"`
	Parameters    int64             `json:"parameters"`
	Tensors       int               `json:"tensors"`
	Types         []typeTotal       `json:"types"`
	ContextLength int               `json:"context_length"`
	Layers        int               `json:"layers,omitempty"`
	Rope          map[string]any    `json:"rope,omitempty"`
	Tokenizer     *tokenizerSummary `json:"tokenizer,omitempty"`
	Quantization  string            `json:"quantization,omitempty"` // e.g. "mlx affine 4-bit, group 64"
	FileType      string            `json:"file_type,omitempty"`    // a GGUF file's type, e.g. "Q4_K_M" (gguf.File.FileType)
	ChatTemplate  bool              `json:"chat_template"`
	Supported     bool              `json:"supported"`
}

// typeTotal counts the tensors and bytes of one storage type.
type typeTotal struct {
	Type    string `json:"type"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
}

type tokenizerSummary struct {
	Kind  string `json:"kind"`
	Vocab int    `json:"vocab_size"`
	Error string `json:"error,omitempty"`
}

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Describe a model file or directory",
		Long: `Inspect describes the model at PATH (a GGUF file or a Hugging Face model
directory): architecture, parameter count, tensor types with byte totals,
context length, rope settings, tokenizer kind and vocabulary size, and whether
a chat template is present.`,
		Example: `  lem inspect ../shared/fixtures/chat-model
  lem inspect --json model.gguf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := openSource(args[0])
			if err != nil {
				return err
			}
			defer src.Close()
			var in *inspection
			switch {
			case src.gg != nil:
				in = inspectGGUF(src.gg)
			case src.dir != "":
				in, err = inspectDir(src.dir)
			default:
				return fmt.Errorf("%s: inspect needs a GGUF file or a model directory", args[0])
			}
			if err != nil {
				return err
			}
			in.Path = args[0]
			tok, err := src.Tokenizer()
			switch {
			case errors.Is(err, fs.ErrNotExist):
				in.Tokenizer = nil
			case err != nil:
				in.Tokenizer = &tokenizerSummary{Error: err.Error()}
			default:
				in.Tokenizer = &tokenizerSummary{Kind: tok.Kind(), Vocab: tok.VocabSize()}
			}
			if _, err := src.Templates(); err == nil {
				in.ChatTemplate = true
			} else if !errors.Is(err, chat.ErrNoTemplate) {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), in)
			}
			printInspection(cmd.OutOrStdout(), in)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func inspectGGUF(f *gguf.File) *inspection {
	arch := f.Architecture()
	in := &inspection{Format: "gguf", Architecture: arch, Parameters: f.ParamCount(), Tensors: len(f.Tensors), FileType: f.FileType()}
	totals := map[string]*typeTotal{}
	for _, t := range f.Tensors {
		add(totals, t.Type.String(), t.Size())
	}
	in.Types = sortedTotals(totals)
	if v, ok := f.Uint(arch + ".context_length"); ok {
		in.ContextLength = int(v)
	}
	if v, ok := f.Uint(arch + ".block_count"); ok {
		in.Layers = int(v)
	}
	rope := map[string]any{}
	for _, kv := range f.KV {
		if k, ok := strings.CutPrefix(kv.Key, arch+".rope."); ok {
			rope[k] = kv.Value.String()
		}
	}
	if len(rope) > 0 {
		in.Rope = rope
	}
	return in
}

func inspectDir(dir string) (*inspection, error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	in := &inspection{
		Format: "safetensors", Architecture: cfg.ModelType, Layers: cfg.NumHiddenLayers,
		ContextLength: cfg.MaxPositionEmbeddings,
		Supported:     slices.Contains(model.Supported(), cfg.ModelType),
	}
	totals := map[string]*typeTotal{}
	if q := cfg.Quantization; q != nil && q.Method == "" {
		// An MLX pack: each quantized weight counts as one tensor of its
		// MLX affine type, its scales and biases included.
		in.Quantization = fmt.Sprintf("mlx %s %d-bit, group %d", cmp.Or(q.Mode, "affine"), q.Bits, q.GroupSize)
		src, err := model.OpenSource(dir)
		if err != nil {
			return nil, err
		}
		defer src.Close()
		for _, name := range src.Names() {
			dt, shape, size, _ := src.Info(name)
			typ := dt.String()
			if _, _, _, ok := dt.MLX(); !ok {
				t, _ := st.Tensor(name)
				typ = string(t.DType)
			}
			n := int64(1)
			for _, d := range shape {
				n *= int64(d)
			}
			in.Tensors++
			in.Parameters += n
			add(totals, typ, int64(size))
		}
	} else {
		for _, name := range st.Names() {
			t, _ := st.Tensor(name)
			in.Tensors++
			in.Parameters += int64(t.NumElements())
			add(totals, string(t.DType), int64(len(t.Data)))
		}
	}
	in.Types = sortedTotals(totals)
	rope := map[string]any{}
	types := slices.Sorted(maps.Keys(cfg.RopeByLayerType))
	if len(types) == 0 {
		types = []string{""}
	}
	for _, lt := range types {
		p := cfg.Rope(lt)
		desc := fmt.Sprintf("%s theta=%g", p.Type, p.Theta)
		if p.Factor != 0 && p.Factor != 1 {
			desc += fmt.Sprintf(" factor=%g", p.Factor)
		}
		if p.PartialRotaryFactor != 0 && p.PartialRotaryFactor != 1 {
			desc += fmt.Sprintf(" partial=%g", p.PartialRotaryFactor)
		}
		key := lt
		if key == "" {
			key = "all"
		}
		rope[key] = desc
	}
	in.Rope = rope
	return in, nil
}

func add(totals map[string]*typeTotal, typ string, bytes int64) {
	t := totals[typ]
	if t == nil {
		t = &typeTotal{Type: typ}
		totals[typ] = t
	}
	t.Tensors++
	t.Bytes += bytes
}

func sortedTotals(m map[string]*typeTotal) []typeTotal {
	var out []typeTotal
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, *m[k])
	}
	return out
}

func printInspection(w io.Writer, in *inspection) {
	fmt.Fprintf(w, "%-15s %s\n", "path", in.Path)
	fmt.Fprintf(w, "%-15s %s\n", "format", in.Format)
	fmt.Fprintf(w, "%-15s %s\n", "architecture", in.Architecture)
	fmt.Fprintf(w, "%-15s %s (%d)\n", "parameters", humanCount(in.Parameters), in.Parameters)
	fmt.Fprintf(w, "%-15s %d\n", "layers", in.Layers)
	fmt.Fprintf(w, "%-15s %d\n", "context length", in.ContextLength)
	for _, k := range slices.Sorted(maps.Keys(in.Rope)) {
		fmt.Fprintf(w, "%-15s %s: %v\n", "rope", k, in.Rope[k])
	}
	if in.FileType != "" {
		fmt.Fprintf(w, "%-15s %s\n", "file type", in.FileType)
	}
	if in.Quantization != "" {
		fmt.Fprintf(w, "%-15s %s\n", "quantization", in.Quantization)
	}
	fmt.Fprintf(w, "%-15s %d\n", "tensors", in.Tensors)
	for _, t := range in.Types {
		fmt.Fprintf(w, "  %-13s %5d tensors %12s\n", t.Type, t.Tensors, humanBytes(t.Bytes))
	}
	if tk := in.Tokenizer; tk == nil {
		fmt.Fprintf(w, "%-15s none\n", "tokenizer")
	} else {
		if tk.Error != "" {
			fmt.Fprintf(w, "%-15s error: %s\n", "tokenizer", tk.Error)
		} else {
			fmt.Fprintf(w, "%-15s %s, %d tokens\n", "tokenizer", tk.Kind, tk.Vocab)
		}
	}
	fmt.Fprintf(w, "%-15s %v\n", "chat template", in.ChatTemplate)
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// printJSON writes v to w as indented JSON, the output of --json.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
