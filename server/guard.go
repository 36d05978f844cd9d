package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// CodeForbidden is the code of a request refused for its Host or Origin.
const CodeForbidden = "forbidden"

// hostPolicy says which Host headers the server answers. A web page whose
// domain name is made to resolve to this machine (DNS rebinding) sends its
// own domain as Host; answering only known names keeps such pages out.
// IP literals cannot be rebound: a page is only ever at an IP address if
// it was served from that address.
type hostPolicy struct {
	any      bool            // "*" among the allowed hosts: no check
	names    map[string]bool // allowed names, lower case, without port
	suffixes []string        // ".example.com" from "*.example.com"
	anyIP    bool            // every IP literal: lem listens beyond loopback
}

// newHostPolicy builds the policy of the allowed hosts ("name",
// "name:port", "*.domain" or "*").
func newHostPolicy(allowed []string) *hostPolicy {
	p := &hostPolicy{names: map[string]bool{}}
	for _, h := range allowed {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
		case h == "*":
			p.any = true
		case strings.HasPrefix(h, "*."):
			p.suffixes = append(p.suffixes, hostName(h[1:]))
		default:
			p.names[hostName(h)] = true
		}
	}
	return p
}

// withListener returns a copy of p that also allows the names under which
// the machine is reached when lem listens on addr: when addr is not a
// loopback address, every IP literal and the machine's host name.
func (p *hostPolicy) withListener(addr net.Addr) *hostPolicy {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return p
	}
	q := *p
	q.anyIP = true
	q.names = make(map[string]bool, len(p.names)+2)
	for k := range p.names {
		q.names[k] = true
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		name = hostName(name)
		q.names[name] = true
		if short, _, ok := strings.Cut(name, "."); ok {
			q.names[short] = true
		} else {
			q.names[name+".local"] = true // the name mDNS gives it
		}
	}
	return &q
}

// allows reports whether a request with the Host header host is served.
func (p *hostPolicy) allows(host string) bool {
	if p.any || host == "" { // HTTP/1.0 without Host: no browser sends that
		return true
	}
	h := hostName(host)
	if a, err := netip.ParseAddr(h); err == nil {
		// 0.0.0.0 and :: reach this machine when dialled (as clients of a
		// server that prints http://0.0.0.0:PORT do).
		return p.anyIP || a.Unmap().IsLoopback() || a.IsUnspecified()
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || p.names[h] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(h, s) || h == s[1:] {
			return true
		}
	}
	return false
}

// hostName returns the host of a Host header value or address without
// its port, brackets and trailing dot, in lower case.
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// guard refuses, before the body is read, what a web page could send
// through a visitor's browser: requests for a Host that is not this
// server's (DNS rebinding) and requests from an origin that is not
// allowed (cross-site requests, which browsers make for text/plain and
// form posts without asking first). Requests without an Origin header
// (curl, the SDKs, scripts) pass. Bodies are not refused for their
// Content-Type: curl -d sends application/x-www-form-urlencoded, and the
// requests a browser sends are already caught by their Origin (or, where
// it was withheld, Sec-Fetch-Site).
func (s *Server) guard(r *http.Request) *Error {
	if !s.hosts.Load().allows(r.Host) {
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: fmt.Sprintf("the host %q is not allowed: lem answers requests for localhost and its own addresses only (add the name with lem serve --allowed-hosts)", r.Host)}
	}
	origins := r.Header.Values("Origin")
	switch {
	case len(origins) > 1:
		return &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: "the request has more than one Origin header"}
	case len(origins) == 1:
		if !s.originAllowed(origins[0], r.Host) {
			return &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: fmt.Sprintf("requests from the origin %q are not allowed (allow it with lem serve --cors-origin)", origins[0])}
		}
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		// A browser that withheld the Origin still says where the
		// request comes from.
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
			return &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "cross-site requests are not allowed (Sec-Fetch-Site: " + site + ")"}
		}
	}
	return nil
}

// originAllowed reports whether a request from origin may be served: one
// of the CORS origins, or lem's own (a page served by lem at host).
func (s *Server) originAllowed(origin, host string) bool {
	if s.corsAllowed(origin) != "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// deadlineBody reads a request body under the read deadline its handler
// set on the connection, and lifts the deadline once the body is read
// whole: past the body, the server keeps reading the connection to see
// the client leave, and a deadline passing there would cancel a response
// still streaming (net/http lifts it there too; this does not depend on
// it). A body that fails (too large, too slow) keeps the deadline, which
// then also bounds the server's draining of what is left of it.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// limitListener admits at most max connections at once. When max are
// open, it makes room by closing the connections idle between requests
// (keep-alive ones, which a client reopens when it needs them), at once
// and as others turn idle; until a slot frees, Accept waits, leaving
// further clients in the kernel's backlog (the timeouts of Serve make
// sure that connections busy reading a request free their slots).
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	idle    map[net.Conn]bool // connections between requests
	waiting bool              // Accept waits for a slot
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max), closed: make(chan struct{}),
		idle: map[net.Conn]bool{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	default:
		l.setWaiting(true)
		select {
		case l.slots <- struct{}{}:
			l.setWaiting(false)
		case <-l.closed:
			l.setWaiting(false)
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// setWaiting records whether Accept waits for a slot; when it starts to,
// the idle connections are closed.
func (l *limitListener) setWaiting(w bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = w
	if w {
		for c := range l.idle {
			c.Close()
			delete(l.idle, c)
		}
	}
}

// connState is the http.Server's ConnState hook: it tracks the idle
// connections, and closes one that turns idle while Accept waits.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case st == http.StateIdle && l.waiting:
		c.Close()
	case st == http.StateIdle:
		l.idle[c] = true
	default:
		delete(l.idle, c)
	}
}

// Close closes the listener, and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
