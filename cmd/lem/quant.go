package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/gguf"
)

func newQuantCmd() *cobra.Command {
	var (
		ggufType string
		bits     int
		group    int
		out      string
		name     string
		threads  int
	)
	cmd := &cobra.Command{
		Use:   "quant SRC (--gguf TYPE | --bits N) -o OUT",
		Short: "Quantize a model to a GGUF file or an MLX pack",
		Long: `Quant converts a model — a Hugging Face directory (safetensors of any float
type) or a GGUF file, by path or by name as lem run takes it (an entry of the
models directory, ORG/NAME[:QUANT] of the hub cache) — one tensor at a time,
so memory stays bounded by the largest tensor.

--gguf TYPE writes a GGUF file that llama.cpp loads, with the tokenizer,
chat template and llama.cpp's names. TYPE is one of
` + strings.Join(convert.FileTypes(), ", ") + `.
The _m types and q2_k mix per-tensor types as llama.cpp's recipes do (more
bits for the output, attn_v and ffn_down of some layers); norms and other
1-D tensors stay F32.

--bits 2|4|8 writes an MLX affine-quantized directory (mlx_lm.convert's
layout) with --group-size 32, 64 or 128; tokenizer and template files are
copied.`,
		Example: `  lem quant ./Llama-3.2-1B-Instruct --gguf q4_k_m -o llama-1b.Q4_K_M.gguf
  lem quant model.F16.gguf --gguf q8_0 -o model.Q8_0.gguf
  lem quant ./Qwen3-0.6B --bits 4 --group-size 64 -o qwen3-0.6b-4bit`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case out == "":
				return errors.New("-o OUT is required")
			case (ggufType == "") == (bits == 0):
				return errors.New("give exactly one of --gguf TYPE and --bits N")
			}
			src, err := resolveModel(args[0])
			if err != nil {
				return err
			}
			progress := newProgressBar(cmd.ErrOrStderr())
			var res *convert.Result
			if ggufType != "" {
				res, err = convert.ToGGUF(src, out, convert.GGUFOptions{Type: ggufType, Name: name, Threads: threads, Progress: progress.update})
			} else {
				res, err = convert.ToMLX(src, out, convert.MLXOptions{Bits: bits, GroupSize: group, Threads: threads, Progress: progress.update})
			}
			progress.done()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, warn := range res.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", warn)
			}
			what := fmt.Sprintf("%d-bit MLX, group %d, %d of %d tensors quantized", bits, group, res.Quantized, res.Tensors)
			if ggufType != "" {
				// The type as the file says it (general.file_type), named
				// as inspect, bench and the APIs name it.
				f, err := gguf.Open(res.Path)
				if err != nil {
					return fmt.Errorf("reading back %s: %w", res.Path, err)
				}
				ft := f.FileType()
				f.Close()
				what = fmt.Sprintf("%s, %d tensors (%s)", ft, res.Tensors, typeCounts(res.Types))
			}
			ratio := float64(res.InBytes) / float64(max(res.FileBytes, 1))
			_, err = fmt.Fprintf(w, "wrote %s: %s\n%s → %s (%.2f× smaller) in %.1fs\n",
				res.Path, what, humanBytes(res.InBytes), humanBytes(res.FileBytes), ratio, res.Elapsed.Seconds())
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&ggufType, "gguf", "", "write a GGUF file of this type ("+strings.Join(convert.FileTypes(), ", ")+")")
	fs.IntVar(&bits, "bits", 0, "write an MLX affine pack with this many bits (2, 4 or 8)")
	fs.IntVar(&group, "group-size", 64, "MLX group size (32, 64 or 128)")
	fs.StringVarP(&out, "output", "o", "", "file (--gguf) or directory (--bits) to write")
	fs.StringVar(&name, "name", "", "general.name of the GGUF file (default: the source's)")
	fs.IntVar(&threads, "threads", 0, "threads quantizing each tensor (0: all cores)")
	return cmd
}

// typeCounts lists tensors per type, most first.
func typeCounts(m map[compute.DType]int) string {
	type tc struct {
		t compute.DType
		n int
	}
	var list []tc
	for t, n := range m {
		list = append(list, tc{t, n})
	}
	slices.SortFunc(list, func(a, b tc) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.t.String(), b.t.String())
	})
	var parts []string
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%d %s", e.n, e.t))
	}
	return strings.Join(parts, ", ")
}

// progressBar draws a one-line progress bar on a terminal and nothing
// elsewhere.
type progressBar struct {
	w    io.Writer
	tty  bool
	last int
}

func newProgressBar(w io.Writer) *progressBar {
	p := &progressBar{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progressBar) update(pr convert.Progress) {
	if !p.tty {
		return
	}
	const width = 30
	filled := width * pr.Index / max(pr.Count, 1)
	line := fmt.Sprintf("\r[%s%s] %d/%d %-40.40s %-6s %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		pr.Index, pr.Count, pr.Name, pr.Type, humanBytes(pr.Written))
	fmt.Fprint(p.w, line)
	p.last = len(line)
}

func (p *progressBar) done() {
	if p.tty && p.last > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
	}
}
