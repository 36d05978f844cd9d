package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestLoadBar loads a safetensors fixture and a GGUF file made of it with
// lem generate and lem bench: on a terminal standard error shows the
// weights loading and how long it took; through a pipe it shows neither.
func TestLoadBar(t *testing.T) {
	dir := fixtures.Dir(t, "archs", "llama")
	ggufPath := filepath.Join(t.TempDir(), "llama.Q8_0.gguf")
	if _, err := execLem(t, "quant", dir, "--gguf", "q8_0", "-o", ggufPath); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"generate", dir, "--prompt-ids", "1,2,3", "--max-tokens", "2", "--device", "cpu", "--threads", "1"},
		{"generate", ggufPath, "--no-mmap", "--prompt-ids", "1,2,3", "--max-tokens", "2", "--device", "cpu", "--threads", "1"},
		{"bench", ggufPath, "-p", "8", "-n", "2", "-r", "1", "--threads", "1"},
	} {
		t.Run(args[0]+" "+filepath.Base(args[1]), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "LEM_TEST_AS_LEM=1", "TERM=xterm")
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
			if err != nil {
				t.Skipf("no pseudo-terminal: %v", err)
			}
			var out bytes.Buffer
			_, err = io.Copy(&out, f)
			if err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatal(err)
			}
			f.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			tty := out.String()
			for _, want := range []string{"\rloading weights [", "##############################] ", " GiB", "lem: loaded in "} {
				if !strings.Contains(tty, want) {
					t.Errorf("terminal output lacks %q:\n%q", want, tty)
				}
			}
			// The bar's line is cleared before the note.
			if i, j := strings.LastIndex(tty, "\rloading weights"), strings.Index(tty, "lem: loaded in"); i > j || !strings.Contains(tty[i:j], "\r"+strings.Repeat(" ", 40)) {
				t.Errorf("the bar is not cleared before the note:\n%q", tty)
			}

			cmd = exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "LEM_TEST_AS_LEM=1")
			piped, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, piped)
			}
			if s := string(piped); strings.Contains(s, "loading weights") || strings.Contains(s, "loaded in") {
				t.Errorf("a pipe got the progress:\n%s", s)
			}
		})
	}
}
