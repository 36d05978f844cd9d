package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/synth"
)

func newSynthCmd() *cobra.Command {
	var (
		opts synth.Options
		out  string
		list bool
	)
	cmd := &cobra.Command{
		Use:   "synth --like NAME -o DIR",
		Short: "Write a random-weight model of a real geometry",
		Long: `Synth writes a Hugging Face model directory with random weights and the
geometry of a real model (layers, widths, heads, vocabulary, rope), so that
speed and memory can be measured at real sizes without downloading weights.
The weights are streamed to disk, so large models need little memory.

Without --tokenizer the model gets a small built-in byte-level BPE tokenizer
and a ChatML chat template. --tokenizer copies a real tokenizer.json (a file,
possibly gzipped, or a directory holding one, with the tokenizer_config.json
and chat template beside it) and sizes the vocabulary to it.

--like tiny is a few-megabyte Qwen 3-style model for end-to-end tests.
--layers N cuts a geometry to its first N layers, every other dimension
kept: a large mixture of experts then fits the disk, and its decode speed
per layer is that of the whole model.
--list shows the geometries.`,
		Example: `  lem synth --like llama-3.2-1b -o /tmp/llama1b
  lem synth --like qwen3-8b --dtype bf16 --tokenizer ../shared/fixtures/tokenizers/qwen3 -o /tmp/qwen3-8b
  lem synth --like qwen3-30b-a3b --layers 4 -o /tmp/qwen3-moe-4l
  lem synth --like tiny -o /tmp/tiny && lem bench /tmp/tiny -p 64 -n 32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if list {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTYPE\tPARAMS\tLAYERS\tHIDDEN\tVOCAB")
				for _, name := range synth.Likes() {
					g, _ := synth.Like(name)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", name, g.ModelType, humanCount(g.Params()), g.Layers, g.HiddenSize, g.VocabSize)
				}
				return tw.Flush()
			}
			if opts.Like == "" {
				return errors.New("--like is required (see --list)")
			}
			if out == "" {
				return errors.New("-o DIR is required")
			}
			res, err := synth.Write(out, opts)
			if err != nil {
				return err
			}
			g := res.Geometry
			_, err = fmt.Fprintf(w, "wrote %s: %s (%s), %s params, %s, %s in %.1fs (%.0f MB/s)\n",
				res.Dir, g.Name, g.ModelType, humanCount(res.Params), res.DType.ST,
				humanBytes(res.FileBytes), res.Elapsed.Seconds(), float64(res.FileBytes)/1e6/res.Elapsed.Seconds())
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Like, "like", "", "geometry to copy (see --list)")
	fs.StringVar(&opts.DType, "dtype", "bf16", "weight type: bf16, f16 or f32")
	fs.StringVarP(&out, "output", "o", "", "directory to write (created; must be empty or a previous synth output)")
	fs.StringVar(&opts.Tokenizer, "tokenizer", "", "tokenizer.json or directory to copy in (default: a small built-in tokenizer)")
	fs.Uint64Var(&opts.Seed, "seed", 0, "random seed of the weights")
	fs.IntVar(&opts.Layers, "layers", 0, "keep only the first N layers (0: all), for geometries too large to write whole")
	fs.BoolVar(&list, "list", false, "list the geometries and exit")
	return cmd
}
