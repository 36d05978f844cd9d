package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/engine"
)

func newRunCmd() *cobra.Command {
	var (
		rf        runFlags
		sf        sampleFlags
		system    string
		maxTokens int
		noThink   bool
	)
	cmd := &cobra.Command{
		Use:   "run [PATH]",
		Short: "Chat with a model in the terminal",
		Long: `Run opens an interactive chat with the model at PATH, using its chat template
and streaming the reply as it is generated. Without PATH it chats with
lem-tiny, the 5M-parameter model built into lem, which knows the capitals of
30 countries, sums of small numbers, word reversal and greetings.

Type a message and press Enter. End a line with \ to continue on the next
line, or wrap several lines in """. Commands: /reset forgets the
conversation, /bye (or Ctrl-D) quits. Ctrl-C stops the reply being generated.`,
		Example: `  lem run
  lem run ../shared/fixtures/chat-model --no-think
  lem run model-dir --system "You are terse." --temperature 0.7`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := openModelArg(args, rf)
			if err != nil {
				return err
			}
			defer m.Close()
			if m.Tokenizer == nil || m.Templates == nil {
				return fmt.Errorf("%s: lem run needs a tokenizer and a chat template", m.Name)
			}
			c := &chatLoop{m: m, sample: sf.params(), maxTokens: maxTokens, ctx: rf.ctx,
				out: cmd.OutOrStdout(), system: system}
			if noThink {
				c.kwargs = map[string]any{"enable_thinking": false}
			}
			name := m.Name
			if len(args) == 0 {
				name = tinyNote("run")
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "lem: %s\nlem: on %s. /bye to quit, /reset to start over.\n", name, m.Backend.Name())
			return c.loop(cmd.Context(), cmd.InOrStdin())
		},
	}
	rf.register(cmd.Flags())
	sf.register(cmd, 0.7)
	cmd.Flags().StringVar(&system, "system", "", "system prompt")
	cmd.Flags().IntVarP(&maxTokens, "max-tokens", "n", 2048, "maximum tokens per reply")
	cmd.Flags().BoolVar(&noThink, "no-think", false, "ask thinking models to answer directly (enable_thinking=false)")
	return cmd
}

// chatLoop is the state of a terminal conversation.
type chatLoop struct {
	m         *engine.Model
	sample    engine.SampleParams
	maxTokens int
	ctx       int
	kwargs    map[string]any
	system    string
	out       io.Writer

	messages []map[string]string
	session  *engine.Session
}

func (c *chatLoop) reset() {
	c.messages = nil
	if c.system != "" {
		c.messages = append(c.messages, map[string]string{"role": "system", "content": c.system})
	}
}

func (c *chatLoop) loop(ctx context.Context, in io.Reader) error {
	c.reset()
	c.session = c.m.NewSession(c.ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	r := bufio.NewReader(in)
	for {
		fmt.Fprint(c.out, ">>> ")
		msg, err := readMessage(r, c.out)
		if errors.Is(err, io.EOF) && msg == "" {
			fmt.Fprintln(c.out)
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		msg = strings.TrimSpace(msg)
		switch msg {
		case "":
			continue
		case "/bye", "/exit", "/quit":
			return nil
		case "/reset", "/clear":
			c.reset()
			fmt.Fprintln(c.out, "Conversation cleared.")
			continue
		}
		if err := c.reply(ctx, msg, sigs); err != nil {
			return err
		}
	}
}

// readMessage reads one message: a line, lines joined by trailing
// backslashes, or a """-delimited block.
func readMessage(r *bufio.Reader, out io.Writer) (string, error) {
	var lines []string
	block := false
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if err != nil && line == "" {
			return strings.Join(lines, "\n"), err
		}
		switch {
		case !block && len(lines) == 0 && strings.HasPrefix(line, `"""`):
			block = true
			line = strings.TrimPrefix(line, `"""`)
			if rest, ok := strings.CutSuffix(line, `"""`); ok && line != "" {
				return rest, nil
			}
			if line != "" {
				lines = append(lines, line)
			}
		case block && strings.HasSuffix(line, `"""`):
			lines = append(lines, strings.TrimSuffix(line, `"""`))
			return strings.Join(lines, "\n"), nil
		case block:
			lines = append(lines, line)
		case strings.HasSuffix(line, `\`):
			lines = append(lines, strings.TrimSuffix(line, `\`))
		default:
			lines = append(lines, line)
			return strings.Join(lines, "\n"), err
		}
		fmt.Fprint(out, "... ")
		if err != nil {
			return strings.Join(lines, "\n"), err
		}
	}
}

// reply renders the conversation, reuses the session when its tokens are a
// prefix of the new prompt, and streams the answer.
func (c *chatLoop) reply(ctx context.Context, msg string, sigs chan os.Signal) error {
	c.messages = append(c.messages, map[string]string{"role": "user", "content": msg})
	data, _ := json.Marshal(c.messages)
	text, err := renderChat(c.m, data, c.kwargs)
	if err != nil {
		return err
	}
	ids := c.m.Tokenizer.Encode(text, false)
	ids = ids[c.session.Reuse(ids):]
	if c.session.Len()+len(ids) >= c.session.Capacity() {
		fmt.Fprintln(c.out, "(context full: conversation cleared)")
		c.reset()
		c.session.Reset()
		c.messages = append(c.messages, map[string]string{"role": "user", "content": msg})
		data, _ = json.Marshal(c.messages)
		if text, err = renderChat(c.m, data, c.kwargs); err != nil {
			return err
		}
		ids = c.m.Tokenizer.Encode(text, false)
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	maxTokens := min(c.maxTokens, c.session.Capacity()-c.session.Len()-len(ids))
	res, err := c.m.Generate(gctx, c.session, engine.Request{Prompt: ids, Sample: c.sample, MaxTokens: maxTokens},
		func(t engine.Token) error { _, err := fmt.Fprint(c.out, t.Text); return err })
	fmt.Fprintln(c.out)
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		fmt.Fprintln(c.out, "(stopped)")
	} else if err != nil {
		return err
	}
	if res != nil {
		c.messages = append(c.messages, map[string]string{"role": "assistant", "content": res.Text})
	}
	return nil
}
