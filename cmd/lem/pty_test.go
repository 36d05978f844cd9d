package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// TestMain lets the tests run this binary as lem (LEM_TEST_AS_LEM=1), for
// the chat on a pseudo-terminal.
func TestMain(m *testing.M) {
	if os.Getenv("LEM_TEST_AS_LEM") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// console reads what a program writes to a pseudo-terminal.
type console struct {
	t    *testing.T
	f    *os.File
	mu   sync.Mutex
	buf  bytes.Buffer
	mark int // start of what expect looks at
	more chan struct{}
}

func (c *console) read() {
	b := make([]byte, 4096)
	for {
		n, err := c.f.Read(b)
		c.mu.Lock()
		c.buf.Write(b[:n])
		c.mu.Unlock()
		select {
		case c.more <- struct{}{}:
		default:
		}
		if err != nil {
			close(c.more)
			return
		}
	}
}

// expect waits for s in the output after the last expect's match and
// returns the output up to and including it.
func (c *console) expect(s string) string {
	c.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		c.mu.Lock()
		out := c.buf.String()[c.mark:]
		if i := strings.Index(out, s); i >= 0 {
			c.mark += i + len(s)
			c.mu.Unlock()
			return out[:i+len(s)]
		}
		c.mu.Unlock()
		select {
		case _, ok := <-c.more:
			if !ok {
				c.mu.Lock()
				defer c.mu.Unlock()
				if strings.Contains(c.buf.String()[c.mark:], s) {
					continue
				}
				c.t.Fatalf("output ended without %q; after the last match:\n%s", s, c.buf.String()[c.mark:])
			}
		case <-deadline:
			c.t.Fatalf("no %q in time; after the last match:\n%s", s, c.buf.String()[c.mark:])
		}
	}
}

func (c *console) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.f, s); err != nil {
		c.t.Fatal(err)
	}
}

// TestRunTerminal chats with lem-tiny on a pseudo-terminal as a person
// would: history recalled with the up arrow, Ctrl-C at an empty prompt and
// during a reply, /?, a pasted line of 10,000 bytes over the context, and
// /bye.
func TestRunTerminal(t *testing.T) {
	data := t.TempDir()
	cmd := exec.Command(os.Args[0], "run", "--ctx", "2048", "--threads", "1", "--device", "cpu", "--no-think", "--seed", "7")
	cmd.Env = append(os.Environ(), "LEM_TEST_AS_LEM=1", "XDG_DATA_HOME="+data, "TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	}()
	c := &console{t: t, f: f, more: make(chan struct{}, 1)}
	go c.read()

	const japan = "The capital of Japan is Tokyo."
	c.expect(">>> ")
	c.send("What is the capital of Japan?\r")
	c.expect(japan)
	c.expect(">>> ")

	// The up arrow recalls the last line; Enter sends it again.
	c.send("\x1b[A")
	c.expect("What is the capital of Japan?")
	c.send("\r")
	c.expect(japan)
	c.expect(">>> ")

	// Ctrl-C at an empty prompt says how to quit. The prompt is printed
	// before the editor takes the terminal: an echoed key shows it has.
	c.send("x")
	c.expect("x")
	c.send("\x7f\x03")
	c.expect("Use Ctrl-D or /bye to exit.")
	c.expect(">>> ")

	// /? lists the commands and is not sent to the model.
	c.send("/?\r")
	out := c.expect("Ctrl-C stops a reply.")
	for _, want := range []string{"/bye", "/reset", "/set parameter", "/show info", "/load MODEL"} {
		if !strings.Contains(out, want) {
			t.Errorf("/? lacks %s:\n%s", want, out)
		}
	}

	// A pasted line of 10,000 bytes (a terminal line holds 4,095) arrives whole: its size in tokens is
	// reported, as it is over the context, and the chat goes on.
	long := strings.Repeat("abcd ", 2000)
	c.send(long + "\r")
	out = c.expect("context of 2048 tokens")
	want := "(message not sent: it is " + strconv.Itoa(chatTokens(t, strings.TrimSpace(long))) + " tokens, over the context of 2048 tokens"
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%.2000s", want, out[max(0, len(out)-2000):])
	}

	// Ctrl-C during a reply stops it; the chat goes on.
	for _, p := range []string{"temperature 100", "top_k 0", "min_p 0", "top_p 1"} {
		c.send("/set parameter " + p + "\r")
		c.expect("Set parameter " + strings.Fields(p)[0])
	}
	c.send("Hello!\r")
	c.expect("Hello!\r\n")
	time.Sleep(50 * time.Millisecond) // let a few tokens arrive; the reply is long either way
	c.send("\x03")
	c.expect("(stopped)")
	c.expect(">>> ")
	c.send("/set parameter temperature 0\r")
	c.expect("Set parameter temperature")
	c.send("What is the capital of Japan?\r")
	c.expect(japan)
	c.expect(">>> ")

	c.send("/bye\r")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("/bye: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("lem run did not exit after /bye")
	}
	hist, err := os.ReadFile(filepath.Join(data, "lem", "history"))
	if err != nil || !strings.Contains(string(hist), "What is the capital of Japan?\n") {
		t.Errorf("history file: %q, %v", hist, err)
	}
}

// chatTokens is the size of msg as lem run sends it to lem-tiny.
func chatTokens(t *testing.T, msg string) int {
	m, err := engine.OpenTiny(engine.Options{Backend: cpu.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := &chatLoop{m: m, kwargs: map[string]any{"enable_thinking": false}}
	c.messages = []map[string]string{{"role": "user", "content": msg}}
	ids, err := c.encode()
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}
