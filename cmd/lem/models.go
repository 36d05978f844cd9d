package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/catalog"
	"github.com/lem-engine/lem/hub"
)

// resolveModel turns a verb's MODEL argument into a path (see
// catalog.Resolve).
func resolveModel(name string) (string, error) {
	return catalog.Resolve(name, catalog.DefaultDirs())
}

const modelsHelp = `PATH may also be a model's name. It is looked up, in order, as
  1. a path: a Hugging Face model directory or a GGUF file;
  2. a name in lem's models directory ($LEM_MODELS, default
     $XDG_DATA_HOME/lem/models or ~/.local/share/lem/models): NAME is the
     entry NAME or NAME.gguf;
  3. a repository in the Hugging Face hub cache ($HF_HUB_CACHE, default
     $HF_HOME/hub or ~/.cache/huggingface/hub), as lem pull and the Hugging
     Face tools write it: ORG/NAME, or ORG/NAME:QUANT (Q4_K_M, Q8_0 …) or
     ORG/NAME:FILE.gguf to choose among GGUF files.`

// addModelsHelp tells the verbs that open a model how names are found.
func addModelsHelp(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "run", "serve", "generate", "bench", "inspect", "template", "tokenize":
			c.Long += "\n\n" + modelsHelp
		}
	}
}

func newPullCmd() *cobra.Command {
	var rev string
	cmd := &cobra.Command{
		Use:   "pull ORG/NAME[:QUANT|:FILE.gguf]",
		Short: "Download a model from the Hugging Face hub",
		Long: `Pull downloads a model from the Hugging Face hub into the hub cache that the
Hugging Face tools share ($HF_HUB_CACHE, default $HF_HOME/hub or
~/.cache/huggingface/hub), where lem run ORG/NAME then finds it.

From a repository of GGUF files it fetches one quantization: QUANT's file
(all parts of a split file), or FILE.gguf; without either, the only model
there is, else ` + hub.DefaultQuant + `; the quantizations offered are listed. From a
safetensors repository it fetches config.json, the tokenizer and chat
template files, generation_config.json, the *.safetensors weights and their
index, and the sentence-transformers files (modules.json, 1_Pooling/ …).

An interrupted download resumes where it stopped (HTTP range requests on
blobs/ETAG.incomplete). Every file is checked against the hub's checksum —
sha256 for files stored with Git LFS (the weights), the Git blob sha1 for
the others — and one that does not match is discarded.

HF_TOKEN (or the token file of huggingface-cli login) is sent to the hub
for gated and private repositories, and not to the content store it
redirects downloads to. HF_ENDPOINT replaces ` + hub.DefaultEndpoint + `.`,
		Example: `  lem pull Qwen/Qwen3-0.6B
  lem pull unsloth/Qwen3-0.6B-GGUF:Q4_K_M
  lem pull bartowski/Llama-3.2-1B-Instruct-GGUF:Llama-3.2-1B-Instruct-Q8_0.gguf
  lem run unsloth/Qwen3-0.6B-GGUF:Q4_K_M`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			repo, sel, _ := strings.Cut(args[0], ":")
			if err := hub.ValidRepo(repo); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c := hub.NewClient()
			bar := newPullBar(cmd.ErrOrStderr())
			c.Progress = bar.update
			res, err := c.Pull(ctx, repo, sel, rev)
			bar.done()
			if err != nil {
				return fmt.Errorf("pull %s: %w", args[0], err)
			}
			w := cmd.OutOrStdout()
			var size int64
			for _, f := range res.Files {
				size += f.Size
			}
			fmt.Fprintf(w, "pulled %s at %s: %d files, %s\n", repo, res.Commit[:12], len(res.Files), humanBytes(size))
			name := repo
			if res.Quant != "" {
				name += ":" + res.Quant
			}
			if len(res.Quants) > 0 {
				fmt.Fprintf(w, "quantizations offered: %s\n", strings.Join(res.Quants, ", "))
			}
			fmt.Fprintf(w, "%s\nrun it with: lem run %s\n", res.Path, name)
			return nil
		},
	}
	cmd.Flags().StringVar(&rev, "revision", "main", "branch, tag or commit to fetch")
	return cmd
}

// pullBar draws a download's progress on a terminal and nothing
// elsewhere.
type pullBar struct {
	*progressBar
	shown time.Time
}

func newPullBar(w io.Writer) *pullBar { return &pullBar{progressBar: newProgressBar(w)} }

func (p *pullBar) update(pr hub.Progress) {
	if !p.tty || (time.Since(p.shown) < 100*time.Millisecond && pr.Done < pr.Total) {
		return
	}
	p.shown = time.Now()
	const width = 30
	filled := int(int64(width) * pr.Done / max(pr.Total, 1))
	line := fmt.Sprintf("\r[%s%s] %d/%d %-40.40s %s / %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		pr.Index, pr.N, pr.File, humanBytes(pr.Done), humanBytes(pr.Total))
	fmt.Fprint(p.w, line)
	p.last = len(line)
}

func newListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the models in the models directory and the hub cache",
		Long: `List shows the models lem finds by name: those of lem's models directory
and those of the Hugging Face hub cache, with the name to pass to lem run,
their size, when they were last modified, their format and quantization.

` + modelsHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := catalog.DefaultDirs()
			entries, err := catalog.List(d)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, entries)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "models directory: %s\nhub cache:        %s\n", d.Models, d.Hub)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tMODIFIED\tFORMAT\tQUANT\tWHERE")
			for _, e := range entries {
				q := e.Quant
				if q == "" {
					q = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, humanBytes(e.Size), e.Modified.Format("2006-01-02 15:04"), e.Format, q, e.Where)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func newRmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Remove models from the models directory or the hub cache",
		Long: `Rm deletes a model lem list shows: NAME, an entry of lem's models directory,
or ORG/NAME, a repository of the Hugging Face hub cache (all its files).
NAME:QUANT or ORG/NAME:QUANT (a tag such as Q4_K_M, or a file name) removes
only that quantization's files from a folder of GGUF files, and in the hub
cache the blobs no snapshot links to any more. It asks before deleting
unless -f is given.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := catalog.DefaultDirs()
			in := bufio.NewReader(cmd.InOrStdin())
			for _, name := range args {
				t, err := catalog.Find(name, d)
				if err != nil {
					return err
				}
				if !force {
					fmt.Fprintf(cmd.ErrOrStderr(), "remove %s (%s, %s)? [y/N] ", t.Path, t.Where, humanBytes(t.Size))
					line, _ := in.ReadString('\n')
					if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
						fmt.Fprintf(cmd.OutOrStdout(), "kept %s\n", name)
						continue
					}
				}
				if err := catalog.Remove(t); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s)\n", name, humanBytes(t.Size))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "delete without asking")
	return cmd
}

func newPsCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "Show the models a running server has loaded",
		Long: `Ps asks the server at --url (lem serve, or Ollama) which models it has
loaded, through its /api/ps, and shows their name, size, device and context
length. A server without /api/ps (llama-server, vLLM) is asked for its
/v1/models and only the names are shown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return printPS(cmd, strings.TrimSuffix(url, "/"))
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://"+defaultAddr, "base URL of the server")
	return cmd
}

func printPS(cmd *cobra.Command, base string) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	get := func(path string, v any) (int, error) {
		req, err := http.NewRequestWithContext(cmd.Context(), "GET", base+path, nil)
		if err != nil {
			return 0, err
		}
		if k := os.Getenv("LEM_API_KEY"); k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, fmt.Errorf("asking %s: %w (is lem serve running there?)", base, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, fmt.Errorf("%s%s: %s", base, path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return resp.StatusCode, fmt.Errorf("%s%s: %w", base, path, err)
		}
		return resp.StatusCode, nil
	}
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Size          int64  `json:"size"`
			SizeVRAM      int64  `json:"size_vram"`
			ContextLength int    `json:"context_length"`
			Details       struct {
				QuantizationLevel string `json:"quantization_level"`
			} `json:"details"`
		} `json:"models"`
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	code, err := get("/api/ps", &ps)
	if code == http.StatusNotFound {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if _, err := get("/v1/models", &list); err != nil {
			return err
		}
		fmt.Fprintln(tw, "NAME")
		for _, m := range list.Data {
			fmt.Fprintln(tw, m.ID)
		}
		return tw.Flush()
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(tw, "NAME\tSIZE\tQUANT\tDEVICE\tCONTEXT")
	for _, m := range ps.Models {
		dev := "CPU"
		switch {
		case m.SizeVRAM >= m.Size && m.Size > 0:
			dev = "GPU"
		case m.SizeVRAM > 0:
			dev = fmt.Sprintf("%.0f%% GPU", 100*float64(m.SizeVRAM)/float64(m.Size))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", m.Name, humanBytes(m.Size), m.Details.QuantizationLevel, dev, m.ContextLength)
	}
	return tw.Flush()
}
