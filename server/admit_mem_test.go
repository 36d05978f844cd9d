package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/tiny"
)

// childEnv makes the test binary serve lem-tiny instead of testing: see
// serveChild.
const childEnv = "LEM_TEST_SERVE_CHILD"

const (
	burstClients = 16
	burstPrompt  = 15 << 20 // bytes of prompt text per request
)

// TestHugePromptBurstMemory sends 16 concurrent requests with 15 MiB
// prompts, over real HTTP, to a server running in a child process, and
// samples the child's resident memory: it must stay under the model plus
// its KV cache plus 1 GiB, and be back within 10% of its baseline (or
// 8 MiB, whichever is more) 10 s after the burst. The routes alternate between the chat and completion
// routes of the OpenAI and Ollama dialects; every request is refused as
// too long for the context.
func TestHugePromptBurstMemory(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		serveChild(t)
		return
	}
	if testing.Short() {
		t.Skip("sends 240 MiB of prompts; skipped with -short")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read a process's resident memory")
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHugePromptBurstMemory$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the child exits when its stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewScanner(stdout)
	var base, limitLine string
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "addr="); ok {
			base = "http://" + a
			break
		}
		if l, ok := strings.CutPrefix(lines.Text(), "limit="); ok {
			limitLine = l
		}
	}
	if base == "" {
		t.Fatalf("the child server did not report its address: %v", lines.Err())
	}
	go io.Copy(io.Discard, stdout)
	limit, err := strconv.ParseInt(limitLine, 10, 64)
	if err != nil {
		t.Fatalf("the child server reported no memory limit: %q", limitLine)
	}
	pid := cmd.Process.Pid

	routes := []struct{ path, head, tail string }{
		{"/v1/chat/completions", `{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"`, `"}]}`},
		{"/v1/completions", `{"model":"chat","max_tokens":4,"prompt":"`, `"}`},
		// truncate false: Ollama's default drops the prompt's start
		// (TestOllamaGenerateTruncate) and answers.
		{"/api/generate", `{"model":"chat","stream":false,"truncate":false,"options":{"num_predict":4},"prompt":"`, `"}`},
		{"/api/chat", `{"model":"chat","stream":false,"options":{"num_predict":4},"messages":[{"role":"user","content":"`, `"}]}`},
	}
	// Warm up every route (the session's KV cache is allocated by the
	// first generation), then measure the baseline.
	for _, rt := range routes {
		if code, _, body := post(t, base+rt.path, rt.head+"Hello!"+rt.tail); code != 200 {
			t.Fatalf("warm-up %s: %d %s", rt.path, code, body)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(time.Second)
	baseline := procStatus(t, pid, "VmRSS")

	// Sample the resident set while the burst runs; stop the child at once
	// if it goes over the limit, so that a failure does not take the
	// machine's memory with it.
	ctx, cancel := context.WithCancel(context.Background())
	var peak int64
	var over bool
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			rss := procStatusErr(pid, "VmRSS")
			peak = max(peak, rss)
			if rss > limit {
				over = true
				cmd.Process.Kill()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	client := &http.Client{Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	results := make([]string, burstClients)
	for i := range burstClients {
		rt := routes[i%len(routes)]
		wg.Go(func() {
			body := io.MultiReader(strings.NewReader(rt.head), newWordReader(burstPrompt, uint64(i)+1), strings.NewReader(rt.tail))
			req, err := http.NewRequest("POST", base+rt.path, body)
			if err != nil {
				results[i] = err.Error()
				return
			}
			req.ContentLength = int64(len(rt.head) + burstPrompt + len(rt.tail))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				results[i] = fmt.Sprintf("%s: %v", rt.path, err)
				return
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != 400 || !strings.Contains(string(data), "context") {
				results[i] = fmt.Sprintf("%s: %d %s", rt.path, resp.StatusCode, data)
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	cancel()
	<-sampled
	if over {
		t.Fatalf("resident memory went over %d MiB during the burst (baseline %d MiB); the child was stopped", limit>>20, baseline>>20)
	}
	peak = max(peak, procStatus(t, pid, "VmHWM"))
	for _, r := range results {
		if r != "" {
			t.Errorf("want 400 context_length_exceeded, got %s", r)
		}
	}
	time.Sleep(10 * time.Second)
	after := procStatus(t, pid, "VmRSS")
	t.Logf("resident memory: baseline %.1f MiB, peak %.1f MiB (limit %.1f MiB), 10 s after %.1f MiB (anon %.1f, file %.1f)",
		mib(baseline), mib(peak), mib(limit), mib(after), mib(procStatus(t, pid, "RssAnon")), mib(procStatus(t, pid, "RssFile")))
	// Within 10% of the baseline, but never less than 8 MiB: after a heap
	// of hundreds of MiB the runtime keeps 1 to 4 MiB of bookkeeping (span
	// and arena metadata), which is more than 10% of lem-tiny's 27 MiB
	// process but not of any real model's.
	if slack := max(baseline/10, 8<<20); after > baseline+slack {
		t.Errorf("10 s after the burst the server holds %.1f MiB, more than %.1f MiB over its baseline of %.1f MiB", mib(after), mib(slack), mib(baseline))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// serveChild serves lem-tiny as "chat" on a loopback port, prints
// "limit=BYTES" (the model's weights and KV cache plus 1 GiB) and
// "addr=HOST:PORT", and exits when its standard input closes.
func serveChild(t *testing.T) {
	m, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := NewModel("chat", m, ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sm)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := m.Net.Config()
	kv := int64(sm.ContextLength()) * int64(c.NumHiddenLayers) * int64(c.NumKeyValueHeads) * int64(c.HeadDim) * 2 * 4
	fmt.Printf("limit=%d\naddr=%s\n", int64(len(tiny.Weights()))+kv+1<<30, ln.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	s.Serve(ctx, ln, time.Second)
	os.Exit(0)
}

// procStatus returns a field of /proc/PID/status in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	n := procStatusErr(pid, field)
	if n < 0 {
		t.Fatalf("reading %s of process %d failed", field, pid)
	}
	return n
}

func procStatusErr(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n << 10
				}
			}
		}
	}
	return -1
}

// wordReader yields n bytes of JSON-safe text: words of a made-up
// vocabulary separated by spaces, with a newline now and then, drawn from
// a seeded generator so that every request differs.
type wordReader struct {
	left  int
	state uint64
	buf   []byte
}

func newWordReader(n int, seed uint64) *wordReader {
	return &wordReader{left: n, state: seed * 0x9E3779B97F4A7C15}
}

func (w *wordReader) next() uint64 {
	w.state ^= w.state << 13
	w.state ^= w.state >> 7
	w.state ^= w.state << 17
	return w.state
}

func (w *wordReader) Read(p []byte) (int, error) {
	if w.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && w.left > 0 {
		if len(w.buf) == 0 {
			// A word of 2 to 9 letters from a vocabulary of about 4096.
			r := w.next()
			k := r % 4096
			length := 2 + int(k%8)
			for j := range length {
				w.buf = append(w.buf, "etaoinshrdlucmfw"[(k>>(j%3*4)+uint64(j))%16])
			}
			if r>>40%16 == 0 {
				w.buf = append(w.buf, '.', '\\', 'n')
			} else {
				w.buf = append(w.buf, ' ')
			}
			if len(w.buf) > w.left {
				// Never end inside an escape.
				w.buf = append(w.buf[:0], strings.Repeat(" ", w.left)...)
			}
		}
		c := min(len(p)-n, len(w.buf), w.left)
		copy(p[n:], w.buf[:c])
		w.buf = w.buf[c:]
		n += c
		w.left -= c
	}
	return n, nil
}
