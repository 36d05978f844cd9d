package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveLimits serves the chat model on a loopback port with cfg.
func serveLimits(t *testing.T, cfg Config) (addr string) {
	t.Helper()
	_, m := newTestModel(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.srv.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// trickle writes head, then the bytes of rest one at a time every
// interval, until the server closes the connection or rest runs out. It
// returns what the server answered and how long the connection lasted.
func trickle(addr, head, rest string, interval time.Duration) (reply string, lasted time.Duration, err error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, head); err != nil {
		return "", 0, err
	}
	read := make(chan string, 1)
	go func() {
		c.SetReadDeadline(time.Now().Add(time.Minute))
		data, _ := io.ReadAll(c) // until the server closes
		read <- string(data)
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; {
		select {
		case reply = <-read:
			return reply, time.Since(start), nil
		case <-tick.C:
			if i < len(rest) {
				c.Write([]byte{rest[i]}) // fails once the server closed; the reader sees it
				i++
			}
		}
	}
}

// TestSlowClients trickles headers and bodies a byte at a time, 20
// connections at once: the server closes each within its timeouts, where
// without them it would hold them (and a goroutine each) as long as the
// client cares to keep sending.
func TestSlowClients(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := serveLimits(t, Config{HeaderTimeout: timeout, BodyTimeout: timeout})
	body := strings.Repeat(" ", 200) + oaiTiny
	for _, tt := range []struct {
		name, head, rest, reply string
	}{
		{"headers", "POST /v1/chat/completions HTTP/1.1\r\n", "Host: 127.0.0.1\r\nX-Slow: " + strings.Repeat("a", 500) + "\r\n\r\n", ""},
		{"body", "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n", body, "HTTP/1.1 408"},
		{"chunked body", "POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n", "1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n1\r\n \r\n", "HTTP/1.1 408"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					reply, lasted, err := trickle(addr, tt.head, tt.rest, 20*time.Millisecond)
					switch {
					case err != nil:
						t.Error(err)
					case !strings.HasPrefix(reply, tt.reply):
						t.Errorf("reply %q, want %q…", reply, tt.reply)
					case lasted > 15*time.Second:
						t.Errorf("the server kept the connection %v (timeout %v)", lasted, timeout)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestStreamOutlastsBodyTimeout streams a response for much longer than
// the body's timeout: the response is not cut.
func TestStreamOutlastsBodyTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	addr := serveLimits(t, Config{BodyTimeout: timeout})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := strings.Replace(longStream, "%d", "600", 1)
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("%q %v", line, err)
	}
	start := time.Now()
	var got strings.Builder
	for {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil || strings.HasPrefix(line, "data: [DONE]") {
			break
		}
	}
	lasted := time.Since(start)
	t.Logf("the stream lasted %v", lasted)
	if rest := got.String(); !strings.Contains(rest, "data: [DONE]") || !strings.Contains(rest, `"finish_reason":"length"`) {
		t.Errorf("the stream was cut after %v: …%s", lasted, rest[max(0, len(rest)-300):])
	} else if lasted < 3*timeout {
		t.Errorf("600 tokens streamed within %v: too fast for a timeout of %v to test anything", lasted, timeout)
	}
}

// TestIdleTimeout leaves a keep-alive connection idle after a request:
// the server closes it.
func TestIdleTimeout(t *testing.T) {
	addr := serveLimits(t, Config{IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	data, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the idle connection stayed open: %v", err)
	}
	if !strings.HasPrefix(string(data), "HTTP/1.1 200") {
		t.Errorf("reply %q", data)
	}
}

// TestMaxHeaderBytes sends headers over the limit: 431.
func TestMaxHeaderBytes(t *testing.T) {
	for _, tt := range []struct {
		limit, size int
		want        string
	}{
		{0, 100 << 10, "HTTP/1.1 431"}, // the default, 64 KiB
		{0, 32 << 10, "HTTP/1.1 200"},  // under it
		{4 << 10, 16 << 10, "HTTP/1.1 431"},
	} {
		addr := serveLimits(t, Config{MaxHeaderBytes: tt.limit})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "+strings.Repeat("a", tt.size)+"\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(line, tt.want) {
			t.Errorf("limit %d, %d bytes of headers: %q %v, want %s", tt.limit, tt.size, line, err, tt.want)
		}
		c.Close()
	}
}

// TestMaxConnections opens as many connections as the cap allows, each in
// the middle of a request: the next waits, unanswered, until one of them
// is done with its request, which the server then closes to make room.
func TestMaxConnections(t *testing.T) {
	addr := serveLimits(t, Config{MaxConnections: 2})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /health HTTP/1.1\r\n")
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr) // the kernel completes the handshake
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if line, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection was answered over the cap of 2: %q %v", line, err)
	}
	// The first finishes its request: it is answered, then closed.
	io.WriteString(held[0], "Host: 127.0.0.1\r\n\r\n")
	held[0].SetReadDeadline(time.Now().Add(15 * time.Second))
	if data, err := io.ReadAll(held[0]); err != nil || !strings.HasPrefix(string(data), "HTTP/1.1 200") {
		t.Errorf("the first connection got %q %v, want a reply and the connection closed", data, err)
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if line, err := r.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Errorf("once a connection closed, the waiting one got %q %v", line, err)
	}
}

// TestMaxConnectionsIdle fills the cap with keep-alive connections idle
// between requests: a new client is answered at once, idle ones closed
// to make room.
func TestMaxConnectionsIdle(t *testing.T) {
	addr := serveLimits(t, Config{MaxConnections: 2})
	get := func(c net.Conn) string {
		io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err.Error()
		}
		return line
	}
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if line := get(c); !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatal(line)
		}
		idle = append(idle, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if line := get(c); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Errorf("a client beyond idle connections: %q", line)
	}
	// Room was made by closing idle connections: at least one of them
	// (which, and whether the other too, depends on when each turned idle
	// against when Accept waited).
	closed := make(chan bool, len(idle))
	for _, c := range idle {
		go func() {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			// What is left of the reply, then the end.
			_, err := io.ReadAll(c)
			closed <- err == nil
		}()
	}
	n := 0
	for range idle {
		if <-closed {
			n++
		}
	}
	if n == 0 {
		t.Error("no idle connection was closed to make room")
	}
}
