package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/engine"
)

// generateOutput is what generate --json prints; a stable contract.
type generateOutput struct {
	IDs          []int32 `json:"ids"`
	Text         string  `json:"text"`
	PromptTokens int     `json:"prompt_tokens"`
	PrefillTokS  float64 `json:"prefill_tok_s"`
	DecodeTokS   float64 `json:"decode_tok_s"`
	StopReason   string  `json:"stop_reason"`
}

func newGenerateCmd() *cobra.Command {
	var (
		rf        runFlags
		sf        sampleFlags
		prompt    string
		promptIDs string
		maxTokens int
		useChat   bool
		asJSON    bool
		ignoreEOS bool
	)
	cmd := &cobra.Command{
		Use:   "generate [PATH] (--prompt TEXT | --prompt-ids IDS)",
		Short: "Generate text from a prompt",
		Long: `Generate continues a prompt with the model at PATH (without PATH, lem-tiny,
the small model built into lem) and streams the text to standard output.
--chat wraps the prompt as one user message in the model's chat template.
With --temperature 0 decoding is greedy and deterministic.

llama.cpp's names work too: -p for --prompt, -c/--ctx-size, -t, --temp,
-ngl/--n-gpu-layers and --n-predict.`,
		Example: `  lem generate --chat --prompt "What is the capital of Japan?" --temperature 0
  lem generate ../shared/fixtures/chat-model --chat --prompt "What is the capital of Japan?"
  lem generate model-dir --prompt "Once upon a time" --max-tokens 64 --temperature 0.8 --seed 1
  lem generate ../shared/fixtures/archs/llama --prompt-ids 73,5,38 --temperature 0 --max-tokens 24 --ignore-eos --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (prompt == "") == (promptIDs == "") {
				return errors.New("give exactly one of --prompt and --prompt-ids")
			}
			m, err := openModelArg(args, rf)
			if err != nil {
				return err
			}
			defer m.Close()
			var ids []int32
			if promptIDs != "" {
				if ids, err = parseIDs(promptIDs); err != nil {
					return err
				}
			} else {
				if ids, err = encodePrompt(m, prompt, useChat); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			onText := func(t engine.Token) error {
				if !asJSON {
					_, err := fmt.Fprint(out, t.Text)
					return err
				}
				return nil
			}
			req := engine.Request{Prompt: ids, Sample: sf.params(m), MaxTokens: maxTokens, IgnoreModelStops: ignoreEOS}
			res, err := m.Generate(ctx, m.NewSession(rf.ctx), req, onText)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLine(out, generateOutput{
					IDs: nonNil(res.IDs), Text: res.Text, PromptTokens: res.PromptTokens,
					PrefillTokS: res.PrefillRate(), DecodeTokS: res.DecodeRate(), StopReason: res.StopReason,
				})
			}
			fmt.Fprintln(out)
			fmt.Fprintf(cmd.ErrOrStderr(), "prompt %d tokens, %.1f tok/s; generated %d tokens, %.1f tok/s (%s)\n",
				res.PromptTokens, res.PrefillRate(), len(res.IDs), res.DecodeRate(), res.StopReason)
			return nil
		},
	}
	rf.register(cmd.Flags())
	sf.register(cmd)
	cmd.Flags().StringVarP(&prompt, "prompt", "p", "", "prompt text")
	cmd.Flags().StringVar(&promptIDs, "prompt-ids", "", "prompt as comma-separated token ids")
	cmd.Flags().IntVarP(&maxTokens, "max-tokens", "n", defaultMaxTokens, "maximum tokens to generate (0: until a stop token or the context ends; also --n-predict)")
	cmd.Flags().BoolVar(&useChat, "chat", false, "apply the chat template to the prompt as one user message")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object at the end instead of streaming text")
	cmd.Flags().BoolVar(&ignoreEOS, "ignore-eos", false, "keep generating past end-of-sequence tokens")
	return cmd
}

// parseIDs parses "5,17,42".
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--prompt-ids: %q is not a token id", f)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

// encodePrompt tokenizes a prompt, optionally as one user chat message.
func encodePrompt(m *engine.Model, prompt string, asChat bool) ([]int32, error) {
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("%s has no tokenizer; use --prompt-ids", m.Name)
	}
	if !asChat {
		return m.Tokenizer.Encode(prompt, true), nil
	}
	msgs, _ := json.Marshal([]map[string]string{{"role": "user", "content": prompt}})
	text, err := renderChat(m, msgs, nil)
	if err != nil {
		return nil, err
	}
	return m.Tokenizer.Encode(text, false), nil
}

// renderChat renders messages (a JSON array) with the model's default
// template and a generation prompt.
func renderChat(m *engine.Model, messages json.RawMessage, kwargs map[string]any) (string, error) {
	if m.Templates == nil {
		return "", fmt.Errorf("%s has no chat template", m.Name)
	}
	data, _ := json.Marshal(map[string]any{"messages": messages, "add_generation_prompt": true})
	in, err := chat.ParseInput(data)
	if err != nil {
		return "", err
	}
	in.Kwargs = kwargs
	t, err := m.Templates.Select("", false)
	if err != nil {
		return "", err
	}
	return t.Render(in)
}
