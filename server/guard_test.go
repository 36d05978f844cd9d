package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The smallest generation request of each dialect.
const (
	oaiTiny = `{"model":"chat",` + japan + `,"max_tokens":1}`
	anTiny  = `{"model":"chat","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}`
	olTiny  = `{"model":"chat","prompt":"Hi","stream":false,"options":{"num_predict":1}}`
)

// send makes a request with the given Host (empty: the server's address)
// and headers (name, value pairs; a name may repeat) and returns the
// status, headers and body.
func send(t *testing.T, method, url, host, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// forbiddenShape checks that a 403 body is in the shape of the route's
// dialect.
func forbiddenShape(t *testing.T, path, body string) {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("403 body %q: %v", body, err)
	}
	switch {
	case strings.HasPrefix(path, "/api/"):
		if msg, ok := v["error"].(string); !ok || msg == "" {
			t.Errorf("%s: want Ollama's {\"error\": \"…\"}, got %s", path, body)
		}
	case path == "/v1/messages":
		e, _ := v["error"].(map[string]any)
		if v["type"] != "error" || e["type"] != "permission_error" {
			t.Errorf("%s: want Anthropic's permission_error, got %s", path, body)
		}
	default:
		e, _ := v["error"].(map[string]any)
		if e["code"] != CodeForbidden || e["type"] != "permission_error" || e["message"] == "" {
			t.Errorf("%s: want OpenAI's permission_error with code %q, got %s", path, CodeForbidden, body)
		}
	}
}

// TestHostCheck sends requests for other hosts, as a page whose domain
// was rebound to 127.0.0.1 makes the browser send: only loopback names
// and addresses and the allowed hosts are served.
func TestHostCheck(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "k", AllowedHosts: []string{"lem.example.com:443", "*.corp.example"}})
	auth := []string{"Authorization", "Bearer k"}
	for _, tt := range []struct {
		host string
		want int
	}{
		{"localhost:36911", 200},
		{"LocalHost.", 200},
		{"127.0.0.1:36911", 200},
		{"127.5.6.7", 200},
		{"[::1]:36911", 200},
		{"[::ffff:127.0.0.1]:80", 200},
		{"0.0.0.0:36911", 200},
		{"[::]:36911", 200},
		{"app.localhost:36911", 200},
		{"lem.example.com", 200},
		{"lem.example.com:8080", 200},
		{"corp.example", 200},
		{"gpu.corp.example:36911", 200},
		{"evil.example:36911", 403},
		{"evil.example", 403},
		{"localhost.evil.example", 403},
		{"127.0.0.1.nip.io:36911", 403},
		{"xcorp.example", 403},
		{"example.com", 403},
		// Bound to loopback, the server is not reached by other addresses.
		{"192.168.1.5:36911", 403},
	} {
		for _, route := range []struct{ path, body string }{
			{"/v1/chat/completions", oaiTiny}, {"/v1/messages", anTiny}, {"/api/generate", olTiny},
		} {
			code, _, body := send(t, "POST", ts.URL+route.path, tt.host, route.body, append(auth, "Content-Type", "application/json")...)
			if code != tt.want {
				t.Errorf("Host %q, POST %s: %d, want %d: %s", tt.host, route.path, code, tt.want, body)
				continue
			}
			if code == 403 {
				forbiddenShape(t, route.path, body)
			}
		}
	}
	// Open routes and preflights are checked too.
	for _, method := range []string{"GET", "OPTIONS"} {
		if code, _, body := send(t, method, ts.URL+"/health", "evil.example:36911", "",
			"Origin", "http://evil.example:36911", "Access-Control-Request-Method", "GET"); code != 403 {
			t.Errorf("%s /health for evil.example: %d %s", method, code, body)
		}
	}
	// The check off.
	_, ts = newTestServer(t, Config{AllowedHosts: []string{"*"}})
	if code, _, body := send(t, "POST", ts.URL+"/v1/chat/completions", "evil.example:36911", oaiTiny); code != 200 {
		t.Errorf("allowed hosts *: %d %s", code, body)
	}
}

// TestHostCheckBeyondLoopback serves on every address, as lem serve
// --addr 0.0.0.0:PORT does: clients may then name the machine by any IP
// address and by its host name, but not by another name.
func TestHostCheckBeyondLoopback(t *testing.T) {
	_, m := newTestModel(t, Config{})
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	url, stop, done := serveOn(t, m.srv, ln)
	defer func() { stop(); <-done }()
	url = strings.Replace(url, "0.0.0.0", "127.0.0.1", 1)
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{
		"192.168.1.5:36911":       200,
		"[fe80::1]:36911":         200,
		"10.0.0.2":                200,
		strings.ToUpper(hostname): 200,
		hostname + ":36911":       200,
		"localhost":               200,
		"evil.example:36911":      403,
	} {
		if code, _, body := send(t, "GET", url+"/v1/models", host, ""); code != want {
			t.Errorf("Host %q: %d, want %d: %s", host, code, want, body)
		}
	}
}

// serveOn runs s.Serve on ln until the returned stop is called.
func serveOn(t *testing.T, s *Server, ln net.Listener) (url string, stop func(), done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, 5*time.Second) }()
	return "http://" + ln.Addr().String(), cancel, done
}

// TestOriginCheck sends the requests a browser sends from a web page: the
// simple POSTs it sends without asking first (text/plain, form-encoded
// and multipart bodies, with an Origin), GETs with an Origin and CORS
// preflights. Only allowed origins and lem's own are served; requests
// without an Origin (curl, the SDKs) are.
func TestOriginCheck(t *testing.T) {
	_, ts := newTestServer(t, Config{CORSOrigins: []string{"http://app.example"}})
	own := ts.URL // http://127.0.0.1:PORT
	const evil = "http://evil.example"
	multipart := "multipart/form-data; boundary=x"
	mpBody := "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nb\r\n--x--\r\n"
	for _, tt := range []struct {
		name, method, path, body string
		hdr                      []string
		want                     int
	}{
		{"text/plain from a page", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain;charset=UTF-8", "Origin", evil}, 403},
		{"form from a page", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", evil}, 403},
		{"multipart from a page", "POST", "/v1/chat/completions", mpBody, []string{"Content-Type", multipart, "Origin", evil}, 403},
		{"text/plain to /v1/completions", "POST", "/v1/completions", `{"model":"chat","prompt":"Hi","max_tokens":1}`, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"text/plain to /v1/responses", "POST", "/v1/responses", `{"model":"chat","input":"Hi","max_output_tokens":1}`, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"text/plain to /v1/messages", "POST", "/v1/messages", anTiny, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"text/plain to /api/generate", "POST", "/api/generate", olTiny, []string{"Content-Type", "text/plain", "Origin", evil}, 403},
		{"form to /api/chat", "POST", "/api/chat", `{"model":"chat","stream":false,"messages":[{"role":"user","content":"Hi"}],"options":{"num_predict":1}}`, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", evil}, 403},
		{"null origin", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain", "Origin", "null"}, 403},
		{"another port of localhost", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain", "Origin", "http://127.0.0.1:3000"}, 403},
		{"two origins", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain", "Origin", "http://app.example", "Origin", evil}, 403},
		{"GET from a page", "GET", "/v1/models", "", []string{"Origin", evil}, 403},
		{"GET tags from a page", "GET", "/api/tags", "", []string{"Origin", evil}, 403},
		{"Origin withheld, cross-site", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}, 403},
		{"allowed origin", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "text/plain", "Origin", "http://app.example"}, 200},
		{"allowed origin, JSON", "POST", "/api/generate", olTiny, []string{"Content-Type", "application/json", "Origin", "http://app.example"}, 200},
		{"lem's own page", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "application/json", "Origin", own}, 200},
		{"GET from lem's own page", "GET", "/v1/models", "", []string{"Origin", own}, 200},
		{"same-origin fetch", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-origin", "Origin", own}, 200},
		{"curl -d", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "application/x-www-form-urlencoded"}, 200},
		{"curl -d to Ollama", "POST", "/api/generate", olTiny, []string{"Content-Type", "application/x-www-form-urlencoded"}, 200},
		{"SDK", "POST", "/v1/messages", anTiny, []string{"Content-Type", "application/json"}, 200},
		{"typed in the address bar", "POST", "/v1/chat/completions", oaiTiny, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "none"}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, h, body := send(t, tt.method, ts.URL+tt.path, "", tt.body, tt.hdr...)
			if code != tt.want {
				t.Fatalf("%d, want %d: %s", code, tt.want, body)
			}
			if code == 403 {
				forbiddenShape(t, tt.path, body)
				if h.Get("Access-Control-Allow-Origin") != "" {
					t.Error("a refused request carries Access-Control-Allow-Origin")
				}
			}
		})
	}
	// Preflights: an allowed origin gets the CORS headers, another none
	// (so the browser does not send the request).
	for origin, want := range map[string]string{"http://app.example": "http://app.example", evil: "", "null": ""} {
		code, h, body := send(t, "OPTIONS", ts.URL+"/v1/chat/completions", "", "", "Origin", origin,
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type")
		if code != 204 || h.Get("Access-Control-Allow-Origin") != want {
			t.Errorf("preflight from %s: %d allow-origin %q, want 204 %q: %s", origin, code, h.Get("Access-Control-Allow-Origin"), want, body)
		}
		if want != "" && (!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || h.Get("Access-Control-Allow-Headers") != "authorization,content-type") {
			t.Errorf("preflight from %s: methods %q headers %q", origin, h.Get("Access-Control-Allow-Methods"), h.Get("Access-Control-Allow-Headers"))
		}
	}
	// A rebound page is same-origin to its browser, but not lem's.
	code, _, body := send(t, "POST", ts.URL+"/v1/chat/completions", "evil.example:36911", oaiTiny,
		"Content-Type", "text/plain", "Origin", "http://evil.example:36911")
	if code != 403 {
		t.Errorf("rebound page: %d %s", code, body)
	}
}

// TestRefusedBeforeBody sends only the headers of a cross-site post and
// of a rebound one: the 403 comes without the server waiting for the
// body.
func TestRefusedBeforeBody(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	for _, hdr := range []string{
		"Host: 127.0.0.1\r\nOrigin: http://evil.example\r\n",
		"Host: evil.example:36911\r\n",
	} {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\n"+hdr+"Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 403") {
			t.Errorf("%q: %q %v", hdr, line, err)
		}
	}
}

// TestShowNamesNoPath checks that /api/show does not tell where the model
// lies on the server's disk.
func TestShowNamesNoPath(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	path := s.models[0].eng.Name
	if !filepath.IsAbs(path) {
		t.Fatalf("the fixture's path %q is not absolute", path)
	}
	code, v, raw := post(t, ts.URL+"/api/show", `{"model":"chat"}`)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	if strings.Contains(raw, filepath.Dir(path)) || strings.Contains(raw, filepath.ToSlash(filepath.Dir(path))) {
		t.Errorf("/api/show names the folder %s: %s", filepath.Dir(path), raw)
	}
	if mf, _ := v["modelfile"].(string); !strings.Contains(mf, "\nFROM "+filepath.Base(path)+"\n") {
		t.Errorf("modelfile %q lacks FROM %s", mf, filepath.Base(path))
	}
}
