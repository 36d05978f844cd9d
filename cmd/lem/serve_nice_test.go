package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	lemBinOnce sync.Once
	lemBin     string
	lemBinErr  error
)

// buildLem builds the lem binary once for the package's tests that run it
// as a process.
func buildLem(t *testing.T) string {
	t.Helper()
	lemBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lem-bin")
		if err != nil {
			lemBinErr = err
			return
		}
		lemBin = filepath.Join(dir, "lem")
		out, err := exec.Command("go", "build", "-o", lemBin, ".").CombinedOutput()
		if err != nil {
			lemBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if lemBinErr != nil {
		t.Fatal(lemBinErr)
	}
	return lemBin
}

// TestServeBindsFirst checks that a busy --addr is reported before the
// model is loaded: with a model path that does not exist, the error is
// the address's, not the model's.
func TestServeBindsFirst(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	missing := filepath.Join(t.TempDir(), "no-such-model.gguf")
	_, _, err = execLemErr(t, "", "serve", missing, "--addr", held.Addr().String())
	if err == nil {
		t.Fatal("serve on a busy port: no error")
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), held.Addr().String()) {
		t.Errorf("serve on a busy port before loading a missing model: %v; want the address's error first", err)
	}
}

// openPTY opens a pseudo-terminal and returns its controlling and
// terminal ends.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close(); ptmx.Close() })
	return ptmx, tty
}

// TestLogFormat checks --log-format: text lines for people, JSON objects,
// and auto, which picks text on a terminal and JSON elsewhere (a buffer,
// a pipe, /dev/null); durations are milliseconds either way.
func TestLogFormat(t *testing.T) {
	_, tty := openPTY(t)
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	_, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	for _, tt := range []struct {
		name, format string
		w            io.Writer
		text         bool
	}{
		{"text", "text", pw, true},
		{"json on a terminal", "json", tty, false},
		{"auto on a buffer", "auto", &bytes.Buffer{}, false},
		{"auto on a pipe", "auto", pw, false},
		{"auto on /dev/null", "auto", devNull, false},
		{"auto on a terminal", "auto", tty, true},
	} {
		log, err := newLogger(tt.w, tt.format)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if _, text := log.Handler().(*slog.TextHandler); text != tt.text {
			t.Errorf("%s: text lines %v, want %v", tt.name, text, tt.text)
		}
	}
	for _, tt := range []struct{ format, want string }{
		{"text", "level=INFO msg=request duration_ms=1.5 status=200\n"},
		{"json", `"msg":"request","duration_ms":1.5,"status":200}` + "\n"},
	} {
		var buf bytes.Buffer
		log, err := newLogger(&buf, tt.format)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("request", "duration", 1500*time.Microsecond, "status", 200)
		if !strings.HasSuffix(buf.String(), tt.want) {
			t.Errorf("%s: %q, want it to end with %q", tt.format, buf.String(), tt.want)
		}
	}
	if _, err := newLogger(io.Discard, "xml"); err == nil || !strings.Contains(err.Error(), "auto, text or json") {
		t.Errorf("--log-format xml: %v", err)
	}
}

// TestServeSecondInterrupt runs lem serve as a process with a request
// whose body never ends (so that the graceful shutdown waits), interrupts
// it, and interrupts it again: the second interrupt exits at once.
func TestServeSecondInterrupt(t *testing.T) {
	bin := buildLem(t)
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--log-format", "json", "--drain", "1h", "--body-timeout", "0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	lines := make(chan map[string]any, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
		close(lines)
	}()
	waitLog := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(2 * time.Minute)
		for {
			select {
			case e, ok := <-lines:
				if !ok {
					t.Fatalf("lem serve ended before logging %q", msg)
				}
				if m, _ := e["msg"].(string); strings.HasPrefix(m, msg) {
					return e
				}
			case <-timeout:
				t.Fatalf("lem serve did not log %q", msg)
			}
		}
	}
	url := waitLog("serving")["url"].(string)
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	// A second request on another connection proves the server has read
	// the first's headers before the interrupt.
	resp, err := (&net.Dialer{}).Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(resp, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	io.ReadAll(resp)
	resp.Close()

	cmd.Process.Signal(os.Interrupt)
	waitLog("shutting down")
	select {
	case err := <-done:
		t.Fatalf("lem serve exited on the first interrupt with a request running: %v", err)
	default:
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		done <- err
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("after the second interrupt: %v, want exit status 130", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("lem serve did not exit on a second interrupt")
	}
}
