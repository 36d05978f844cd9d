package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/loadgen"
)

func newLoadCmd() *cobra.Command {
	c := loadgen.Config{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Drive an OpenAI-compatible server with concurrent streaming clients",
		Long: `Load sends -n streaming requests to an OpenAI-compatible server (lem serve,
llama-server, vLLM, …) at --url, at most -c at a time, and reports requests/s,
output tokens/s, and the time to first token (TTFT), inter-token latency (ITL)
and end-to-end latency (E2E) as mean, p50, p90 and p99.

Requests start as fast as the concurrency allows, or with --rate at that many
per second, their gaps exponential (--arrival poisson) or equal (fixed); a
request due while -c are in flight waits for one to end. --duration stops
starting requests after that long; Ctrl-C stops the run, cancels the requests
in flight and prints what was measured.

Prompts are random common English words, one per token of --prompt-tokens
(in the vocabularies of current models each such word is one token; small
vocabularies split them). --shared-prefix makes that fraction of every prompt
the same words, as a shared system prompt would. The server's own count of
prompt tokens (usage.prompt_tokens) is reported. Each request asks for
--output-tokens as max_tokens with ignore_eos (honoured by lem, vLLM and
llama-server) and greedy sampling, and for
usage in the stream (stream_options.include_usage).

TTFT runs from sending the request to the first chunk carrying text; ITL
samples are the gaps between such chunks. Output tokens are the server's
usage.completion_tokens, or the chunks counted where it gives none; when a
server packs several tokens in a chunk, each gap is divided by the mean
tokens per gap, so ITL stays a time per token. Failures are counted by kind:
http_429 (refused, too many requests), other http_NNN, timeout, disconnect
(the stream ended without [DONE]), connect, stream_error, interrupted.

Load talks only to --url: it uses no proxy and follows no redirect.`,
		Example: `  lem serve &                         # lem-tiny on 127.0.0.1:36911
  lem load -c 4 -n 32 --prompt-tokens 128 --output-tokens 64
  lem load -c 16 -n 200 --rate 8 --arrival poisson --shared-prefix 0.5 --json
  llama-server -m model.gguf -np 8 --port 8080 &
  lem load --url http://127.0.0.1:8080 --model x -c 8 -n 64 --prompt-tokens 512 --output-tokens 256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if c.APIKey == "" {
				c.APIKey = os.Getenv("LEM_API_KEY")
			}
			rep, err := loadgen.Run(ctx, c)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, rep)
			}
			return printLoad(w, rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.URL, "url", "http://"+defaultAddr, "base URL of the server")
	fs.StringVar(&c.Model, "model", "", "model id to request (default: the first of the server's /v1/models)")
	fs.StringVar(&c.APIKey, "api-key", "", "bearer token to send (default: $LEM_API_KEY)")
	fs.StringVar(&c.Endpoint, "endpoint", loadgen.Chat, "chat (/v1/chat/completions) or completions (/v1/completions)")
	fs.IntVarP(&c.Concurrency, "concurrency", "c", 1, "most requests in flight at once")
	fs.IntVarP(&c.Requests, "requests", "n", 16, "requests to send")
	fs.Float64Var(&c.Rate, "rate", 0, "requests started per second (0: as fast as -c allows)")
	fs.StringVar(&c.Arrival, "arrival", loadgen.Poisson, "gaps between requests at --rate: poisson or fixed")
	fs.IntVar(&c.PromptTokens, "prompt-tokens", 128, "approximate prompt length in tokens")
	fs.IntVar(&c.OutputTokens, "output-tokens", 128, "tokens to ask for (max_tokens)")
	fs.Float64Var(&c.SharedPrefix, "shared-prefix", 0, "fraction of each prompt common to all requests (0 … 1)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the prompts and the arrival gaps")
	fs.DurationVar(&c.Duration, "duration", 0, "start no request after this long (0: no bound)")
	fs.DurationVar(&c.Timeout, "timeout", loadgen.DefaultTimeout, "bound on one request")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// printLoad prints the report as a table.
func printLoad(w io.Writer, r *loadgen.Report) error {
	rate := "unbounded"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%g/s %s", r.Rate, r.Arrival)
	}
	fmt.Fprintf(w, "%s %s, model %s: %d requests, concurrency %d, rate %s\n",
		r.URL, r.Endpoint, r.Model, r.Requests, r.Concurrency, rate)
	fmt.Fprintf(w, "prompts of ~%d tokens (%.0f%% shared; server counted %.1f on average), %d output tokens asked\n",
		r.PromptTokens, 100*r.SharedPrefix, r.PromptTokensMean, r.OutputTokens)
	if r.Interrupted {
		fmt.Fprintln(w, "interrupted: the figures cover what ran")
	}
	fmt.Fprintf(w, "\nduration        %.2f s\n", r.DurationS)
	fmt.Fprintf(w, "completed       %d of %d sent\n", r.Completed, r.Sent)
	if r.Failed > 0 {
		var kinds []string
		for k := range r.Errors {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for i, k := range kinds {
			kinds[i] = fmt.Sprintf("%s %d", k, r.Errors[k])
		}
		fmt.Fprintf(w, "failed          %d (%s)\n", r.Failed, strings.Join(kinds, ", "))
	}
	if r.UsageMissing > 0 {
		fmt.Fprintf(w, "no usage        %d requests (output tokens counted as chunks)\n", r.UsageMissing)
	}
	fmt.Fprintf(w, "requests/s      %.2f\n", r.RequestsPerS)
	fmt.Fprintf(w, "output tok/s    %.1f (%d tokens)\n", r.OutputTokensPerS, r.OutputTokensTotal)
	fmt.Fprintf(w, "total tok/s     %.1f\n\n", r.TotalTokensPerS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ms\tmean\tp50\tp90\tp99\tsamples\t")
	for _, row := range []struct {
		name string
		s    loadgen.Stats
	}{{"TTFT", r.TTFT}, {"ITL", r.ITL}, {"E2E", r.E2E}} {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n", row.name, row.s.Mean, row.s.P50, row.s.P90, row.s.P99, row.s.N)
	}
	return tw.Flush()
}
