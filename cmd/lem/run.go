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
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peterh/liner"
	"github.com/spf13/cobra"
	"golang.org/x/term"

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
		Use:   "run [PATH [PROMPT]]",
		Short: "Chat with a model in the terminal",
		Long: `Run opens an interactive chat with the model at PATH, using its chat template
and streaming the reply as it is generated. Without PATH it chats with
lem-tiny, the 5M-parameter model built into lem, which knows the capitals of
30 countries, sums of small numbers, word reversal and greetings. With a
PROMPT after PATH it answers that one message and exits.

Type a message and press Enter. On a terminal, the arrow keys edit the line
and recall earlier ones (kept in the history file of lem's data directory,
$XDG_DATA_HOME/lem/history or ~/.local/share/lem/history). End a line
with \ to continue on the next line, or wrap several lines in """.
Ctrl-C stops the reply being generated; Ctrl-D or /bye quits. /? lists the
commands (/bye, /reset, /set, /show info, /load). When standard input is not
a terminal, messages are read from it line by line.

llama.cpp's and Ollama's names work too: -c/--ctx-size, -t, --temp,
-ngl/--n-gpu-layers, --n-predict.`,
		Example: `  lem run
  lem run ../shared/fixtures/chat-model --no-think
  lem run ../shared/fixtures/chat-model "What is the capital of Japan?"
  lem run model-dir --system "You are terse." --temperature 0.7`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := &chatLoop{rf: rf, sf: &sf, maxTokens: maxTokens, ctx: rf.ctx,
				out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), system: system}
			if noThink {
				c.kwargs = map[string]any{"enable_thinking": false}
			}
			if err := c.load(args[:min(len(args), 1)]); err != nil {
				return err
			}
			defer func() { c.m.Close() }()
			if len(args) == 2 {
				return c.once(cmd.Context(), args[1])
			}
			fmt.Fprintln(c.errOut, "lem: /? for help, /bye to quit, /reset to start over.")
			return c.loop(cmd.Context(), cmd.InOrStdin())
		},
	}
	rf.register(cmd.Flags())
	sf.register(cmd)
	cmd.Flags().StringVar(&system, "system", "", "system prompt")
	cmd.Flags().IntVarP(&maxTokens, "max-tokens", "n", defaultMaxTokens, "maximum tokens per reply (also --n-predict)")
	cmd.Flags().BoolVar(&noThink, "no-think", false, "ask thinking models to answer directly (enable_thinking=false)")
	return cmd
}

// chatLoop is the state of a terminal conversation.
type chatLoop struct {
	rf        runFlags
	sf        *sampleFlags
	m         *engine.Model
	sample    engine.SampleParams
	maxTokens int
	ctx       int
	kwargs    map[string]any
	system    string
	out       io.Writer
	errOut    io.Writer

	messages []map[string]string
	session  *engine.Session
}

// load opens the model args names (none: lem-tiny), replacing the one
// loaded, and prints a line about it: size, type, context and device.
func (c *chatLoop) load(args []string) error {
	m, err := openModelArg(args, c.rf)
	if err != nil {
		return err
	}
	if m.Tokenizer == nil || m.Templates == nil {
		m.Close()
		return fmt.Errorf("%s: lem run needs a tokenizer and a chat template", m.Name)
	}
	if c.m != nil {
		c.m.Close()
	}
	c.m = m
	c.sample = c.sf.params(m)
	c.session = m.NewSession(c.ctx)
	c.reset()
	name := m.Name
	if len(args) == 0 {
		name = tinyNote("run")
	}
	fmt.Fprintf(c.errOut, "lem: %s\nlem: %s\n", name, c.info())
	return nil
}

// info describes the loaded model in one line.
func (c *chatLoop) info() string {
	var typ string
	if src, err := openSource(c.m.Name); err == nil {
		var in *inspection
		switch {
		case src.gg != nil:
			in = inspectGGUF(src.gg)
		case src.dir != "":
			in, _ = inspectDir(src.dir)
		}
		src.Close()
		if in != nil {
			var best typeTotal
			for _, t := range in.Types {
				if t.Bytes > best.Bytes {
					best = t
				}
			}
			typ = ", " + best.Type
			if in.Quantization != "" {
				typ = ", " + in.Quantization
			}
		}
	}
	return fmt.Sprintf("%s of weights%s, context %d tokens (trained %d), temperature %g, on %s",
		humanBytes(c.m.WeightReads().Bytes), typ, c.session.Capacity(), c.m.ContextLength(),
		c.sample.Temperature, c.m.Backend.Name())
}

func (c *chatLoop) reset() {
	c.messages = nil
	if c.system != "" {
		c.messages = append(c.messages, map[string]string{"role": "system", "content": c.system})
	}
}

// once answers one message and returns.
func (c *chatLoop) once(ctx context.Context, msg string) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	return c.reply(ctx, msg, sigs)
}

// lineReader reads the lines of a chat: errInterrupted for Ctrl-C at the
// prompt, io.EOF at the end.
type lineReader interface {
	readLine(prompt string) (string, error)
	close() error
}

var errInterrupted = errors.New("interrupted")

// plainReader reads lines from a pipe or file, printing the prompts.
type plainReader struct {
	r   *bufio.Reader
	out io.Writer
}

func (p *plainReader) readLine(prompt string) (string, error) {
	fmt.Fprint(p.out, prompt)
	line, err := p.r.ReadString('\n')
	if err != nil && line != "" {
		err = nil
	}
	return strings.TrimRight(line, "\r\n"), err
}

func (p *plainReader) close() error { return nil }

// termReader edits lines on a terminal with github.com/peterh/liner:
// raw mode (so no line length limit), arrow keys, history kept in a file.
type termReader struct {
	st      *liner.State
	history string
}

func newTermReader() *termReader {
	t := &termReader{st: liner.NewLiner(), history: historyPath()}
	t.st.SetCtrlCAborts(true)
	if f, err := os.Open(t.history); err == nil {
		t.st.ReadHistory(f)
		f.Close()
	}
	return t
}

func (t *termReader) readLine(prompt string) (string, error) {
	line, err := t.st.Prompt(prompt)
	switch {
	case errors.Is(err, liner.ErrPromptAborted):
		return "", errInterrupted
	case err != nil:
		return "", err
	}
	if strings.TrimSpace(line) != "" {
		t.st.AppendHistory(line)
		t.save()
	}
	return line, nil
}

// save writes the history file, quietly: a chat goes on without one.
func (t *termReader) save() {
	if t.history == "" || os.MkdirAll(filepath.Dir(t.history), 0o700) != nil {
		return
	}
	if f, err := os.OpenFile(t.history, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
		t.st.WriteHistory(f)
		f.Close()
	}
}

func (t *termReader) close() error { return t.st.Close() }

// historyPath is the file of lem run's line history, in lem's data
// directory: $XDG_DATA_HOME/lem/history, else ~/.local/share/lem/history.
func historyPath() string {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "lem", "history")
}

// isTerminal reports whether in and out are the process's terminal.
func isTerminal(in io.Reader, out io.Writer) bool {
	fi, ok1 := in.(*os.File)
	fo, ok2 := out.(*os.File)
	return ok1 && ok2 && fi == os.Stdin && fo == os.Stdout &&
		term.IsTerminal(int(fi.Fd())) && term.IsTerminal(int(fo.Fd()))
}

// runHelp is what /? prints.
const runHelp = `Available commands:
  /set parameter NAME VALUE   set a sampling parameter: temperature, top_k,
                              top_p, min_p, repeat_penalty, seed, num_predict
  /set system TEXT            set the system prompt (and start over)
  /set think, /set nothink    let a thinking model think, or not
  /show info                  show the model's details
  /load MODEL                 load another model (and start over)
  /reset, /clear              forget the conversation
  /bye, /exit                 quit (Ctrl-D too)
  /?, /help                   this help

Use """ to begin and end a message of several lines, or end a line with \.
Ctrl-C stops a reply.
`

func (c *chatLoop) loop(ctx context.Context, in io.Reader) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	var lr lineReader
	if isTerminal(in, c.out) {
		lr = newTermReader()
	} else {
		lr = &plainReader{r: bufio.NewReader(in), out: c.out}
	}
	defer lr.close()
	for {
		msg, err := readMessage(lr)
		if errors.Is(err, errInterrupted) {
			fmt.Fprintln(c.out, "Use Ctrl-D or /bye to exit.")
			continue
		}
		if errors.Is(err, io.EOF) && msg == "" {
			fmt.Fprintln(c.out)
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		msg = strings.TrimSpace(msg)
		if msg == "" {
			continue
		}
		if quit, done := c.command(msg); done {
			if quit {
				return nil
			}
			continue
		}
		if err := c.reply(ctx, msg, sigs); err != nil {
			return err
		}
	}
}

// command runs msg when it is a command (a word starting with /, or exit
// or quit): done says it was one, quit that the chat ends.
func (c *chatLoop) command(msg string) (quit, done bool) {
	f := strings.Fields(msg)
	switch {
	case msg == "exit" || msg == "quit":
		return true, true
	case !strings.HasPrefix(msg, "/") || strings.Contains(f[0][1:], "/"):
		return false, false // a path, not a command
	}
	switch f[0] {
	case "/bye", "/exit", "/quit":
		return true, true
	case "/?", "/help":
		fmt.Fprint(c.out, runHelp)
	case "/reset", "/clear":
		c.reset()
		fmt.Fprintln(c.out, "Conversation cleared.")
	case "/show":
		if len(f) == 2 && f[1] == "info" {
			fmt.Fprintf(c.out, "%s\n%s\n", c.m.Name, c.info())
		} else {
			fmt.Fprintln(c.out, "Usage: /show info")
		}
	case "/load":
		if len(f) != 2 {
			fmt.Fprintln(c.out, "Usage: /load MODEL")
		} else if err := c.load(f[1:]); err != nil {
			fmt.Fprintf(c.out, "Could not load %s: %v\n", f[1], err)
		}
	case "/set":
		c.set(f[1:], msg)
	default:
		fmt.Fprintf(c.out, "Unknown command %s: /? lists the commands.\n", f[0])
	}
	return false, true
}

// set runs /set with the words args of msg.
func (c *chatLoop) set(args []string, msg string) {
	switch {
	case len(args) == 1 && args[0] == "think":
		c.kwargs = nil
		fmt.Fprintln(c.out, "Thinking on.")
		return
	case len(args) == 1 && args[0] == "nothink":
		c.kwargs = map[string]any{"enable_thinking": false}
		fmt.Fprintln(c.out, "Thinking off.")
		return
	case len(args) >= 2 && args[0] == "system":
		_, rest, _ := strings.Cut(msg, "system")
		c.system = strings.TrimSpace(rest)
		c.reset()
		fmt.Fprintln(c.out, "System prompt set; conversation cleared.")
		return
	case len(args) == 3 && args[0] == "parameter":
		v, err := strconv.ParseFloat(args[2], 64)
		if err != nil {
			fmt.Fprintf(c.out, "%s: %q is not a number\n", args[1], args[2])
			return
		}
		p := &c.sample
		switch args[1] {
		case "temperature":
			p.Temperature = float32(v)
		case "top_k":
			p.TopK = int(v)
		case "top_p":
			p.TopP = float32(v)
		case "min_p":
			p.MinP = float32(v)
		case "repeat_penalty":
			p.RepetitionPenalty = float32(v)
		case "seed":
			p.Seed, p.HasSeed = uint64(v), v >= 0
		case "num_predict":
			c.maxTokens = int(v)
		default:
			fmt.Fprintf(c.out, "Unknown parameter %s: /? lists them.\n", args[1])
			return
		}
		fmt.Fprintf(c.out, "Set parameter %s to %s.\n", args[1], args[2])
		return
	}
	fmt.Fprintln(c.out, "Usage: /set parameter NAME VALUE, /set system TEXT, /set think, /set nothink")
}

// readMessage reads one message: a line, lines joined by trailing
// backslashes, or a """-delimited block.
func readMessage(lr lineReader) (string, error) {
	var lines []string
	block := false
	prompt := ">>> "
	for {
		line, err := lr.readLine(prompt)
		if err != nil {
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
			return strings.Join(lines, "\n"), nil
		}
		prompt = "... "
	}
}

// encode renders c.messages with the chat template and tokenizes them.
func (c *chatLoop) encode() ([]int32, error) {
	data, _ := json.Marshal(c.messages)
	text, err := renderChat(c.m, data, c.kwargs)
	if err != nil {
		return nil, err
	}
	return c.m.Tokenizer.Encode(text, false), nil
}

// reply renders the conversation, reuses the session when its tokens are a
// prefix of the new prompt, and streams the answer. A message the context
// cannot hold is reported and dropped; the chat goes on.
func (c *chatLoop) reply(ctx context.Context, msg string, sigs chan os.Signal) error {
	c.messages = append(c.messages, map[string]string{"role": "user", "content": msg})
	ids, err := c.encode()
	if err != nil {
		return err
	}
	ids = ids[c.session.Reuse(ids):]
	if c.session.Len()+len(ids) >= c.session.Capacity() {
		history := c.messages[:len(c.messages)-1]
		c.reset()
		c.messages = append(c.messages, map[string]string{"role": "user", "content": msg})
		c.session.Reset()
		if ids, err = c.encode(); err != nil {
			return err
		}
		if len(ids) >= c.session.Capacity() {
			fmt.Fprintf(c.out, "(message not sent: it is %d tokens, over the context of %d tokens; shorten it or raise --ctx)\n",
				len(ids), c.session.Capacity())
			c.messages = history
			return nil
		}
		fmt.Fprintf(c.out, "(context full: conversation cleared to make room for this message of %d tokens)\n", len(ids))
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A Ctrl-C from before the reply (such as at a prompt read from a
	// pipe) is not for it.
	for len(sigs) > 0 {
		<-sigs
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	maxTokens := c.session.Capacity() - c.session.Len() - len(ids)
	if c.maxTokens > 0 {
		maxTokens = min(c.maxTokens, maxTokens)
	}
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
	} else {
		c.messages = c.messages[:len(c.messages)-1] // no reply: keep turns alternating
	}
	return nil
}
