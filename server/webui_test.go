package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lem-engine/lem/compute/cpu"
	"github.com/lem-engine/lem/engine"
)

// newTinyServer serves lem-tiny under each of the ids (one engine each)
// on a loopback port.
func newTinyServer(t *testing.T, cfg Config, ids ...string) *httptest.Server {
	t.Helper()
	var models []*Model
	for _, id := range ids {
		e, err := engine.OpenTiny(engine.Options{Backend: cpu.New(0)})
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, mustModel(t, id, e, ModelOptions{}))
	}
	_, ts := serveModels(t, cfg, models...)
	return ts
}

// TestChatPageRoutes checks what / answers to a browser and to an API
// client (Ollama's clients probe / for a 200 text), and the page's assets
// with their security headers.
func TestChatPageRoutes(t *testing.T) {
	ts := newTinyServer(t, Config{APIKey: "sekret"}, "lem-tiny")
	for _, tt := range []struct {
		path, accept string
		status       int
		typ, body    string
		secured      bool
	}{
		{"/", "", 200, "text/plain", "lem is running", false},
		{"/", "*/*", 200, "text/plain", "lem is running", false},
		{"/", "application/json", 200, "text/plain", "lem is running", false},
		{"/", "text/html;q=0, */*", 200, "text/plain", "lem is running", false},
		{"/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", 200, "text/html", `<script src="/ui/app.js" defer></script>`, true},
		{"/ui/app.js", "", 200, "text/javascript", "function markdown(", true},
		{"/ui/style.css", "", 200, "text/css", "prefers-color-scheme: dark", true},
		{"/ui/index.html", "", 404, "", "", false},
		{"/ui/webui.go", "", 404, "", "", false},
		{"/ui/", "", 404, "", "", false},
		{"/v1/models", "text/html", 401, "application/json", "", false},
	} {
		req, _ := http.NewRequest("GET", ts.URL+tt.path, nil)
		if tt.accept != "" {
			req.Header.Set("Accept", tt.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name := tt.path + " Accept: " + tt.accept
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, tt.status, body)
			continue
		}
		if typ := resp.Header.Get("Content-Type"); !strings.HasPrefix(typ, tt.typ) {
			t.Errorf("%s: Content-Type %q, want %s", name, typ, tt.typ)
		}
		if !strings.Contains(string(body), tt.body) {
			t.Errorf("%s: body lacks %q", name, tt.body)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if tt.secured && (!strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff") {
			t.Errorf("%s: security headers CSP %q, X-Content-Type-Options %q", name, csp, resp.Header.Get("X-Content-Type-Options"))
		}
	}
}

// chromium finds a Chromium binary; without one the test is skipped, or
// fails under CI (which installs it). The short runs (CI's race run) skip
// the browser.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("the browser tests run without -short")
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium binary found in PATH; CI installs the Debian package chromium (see .ci/run)")
	}
	t.Skip("no chromium binary found in PATH: install it (apt-get install chromium) to test the chat page in a browser")
	return ""
}

// browser starts headless Chromium; uncaught JavaScript exceptions,
// console errors and security messages (CSP violations) fail the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1100, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	var problems []string
	done := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// A failed fetch (the 401 that asks for an API key) is
			// logged by the network, not by the page.
			if m.IsException() || m.Type == "error" && m.Source != "network" || m.Source == "security" {
				problems = append(problems, m.String())
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		cancelCtx()
		cancelAlloc()
		<-done
		for _, p := range problems {
			t.Errorf("page: %s", p)
		}
	})
	return ctx
}

// do runs browser actions, failing the test on an error.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression into a T.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// lastReply is the text of the last assistant message's content.
const lastReply = `(() => { const m = [...document.querySelectorAll('.msg.assistant .content')]; return m.length ? m[m.length-1].textContent : ''; })()`

// TestChatPageBrowser drives the chat page in headless Chromium against
// a real server with two lem-tiny models: it asks the capital of Japan
// and sees "Tokyo" streamed in, with the reasoning folded; stops a long
// reply; picks the other model; reloads and finds the conversation kept;
// and renders Markdown, with HTML in a reply shown as text. A screenshot
// goes to the test's artifact directory.
func TestChatPageBrowser(t *testing.T) {
	ctx := browser(t)
	ts := newTinyServer(t, Config{}, "lem-tiny", "lem-tiny-b")
	poll := func(expr string, what string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Minute))); err != nil {
			page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v; the page reads:\n%s", what, err, page)
		}
	}

	// The first question, greedy through the settings.
	do(t, ctx, "loading the page", chromedp.Navigate(ts.URL+"/"))
	poll(`document.querySelector('#input') !== null && document.querySelectorAll('#model option').length > 0`, "waiting for the page and its models")
	do(t, ctx, "asking",
		chromedp.Click("#settings summary"),
		chromedp.SendKeys("#temperature", "0"),
		chromedp.SendKeys("#input", "What is the capital of Japan?"),
		chromedp.SendKeys("#input", kb.Enter),
	)
	if options := eval[int](t, ctx, `document.querySelectorAll('#model option').length`); options != 2 {
		t.Errorf("the model picker has %d models, want 2", options)
	}
	poll(`document.querySelector('#stop').hidden && `+lastReply+`.includes('Tokyo')`, "waiting for Tokyo")
	folded := eval[struct {
		Details, Open bool
		Reasoning     string
		User          string
	}](t, ctx, `(() => {
		const d = document.querySelector('.msg.assistant details.reasoning');
		return {Details: !!d, Open: !!(d && d.open), Reasoning: d ? d.textContent : '',
			User: document.querySelector('.msg.user').textContent};
	})()`)
	if !folded.Details || folded.Open || !strings.Contains(folded.Reasoning, "Japan") {
		t.Errorf("reasoning: %+v, want it folded in a closed <details>", folded)
	}
	if folded.User != "What is the capital of Japan?" {
		t.Errorf("the user message reads %q", folded.User)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "chat-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	// A long reply (no end of sequence, up to 2,000 tokens) stopped soon
	// after it began: the page says so, and the server stops generating.
	before := metricValue(t, ts.URL, `lem_generated_tokens_total{model="lem-tiny"}`)
	do(t, ctx, "asking for a long reply",
		chromedp.SetValue("#max-tokens", "2000"),
		chromedp.SetValue("#extra", `{"ignore_eos": true}`),
		chromedp.SendKeys("#input", "Hello!"+kb.Enter),
		chromedp.WaitVisible("#stop"),
	)
	poll(`document.querySelectorAll('.msg.assistant').length === 2 && document.querySelector('.msg.assistant:last-child').textContent.length > 0`, "waiting for the long reply to start")
	do(t, ctx, "stopping", chromedp.Click("#stop"))
	poll(`document.querySelector('#stop').hidden && !document.querySelector('#send').hidden && (document.querySelector('.msg.assistant:last-child .note') || {}).textContent === '(stopped)'`, "waiting for the page to stop")
	waitMetric(t, ts.URL, `lem_sequences_running{model="lem-tiny"}`, 0)
	if n := metricValue(t, ts.URL, `lem_generated_tokens_total{model="lem-tiny"}`) - before; n >= 2000 {
		t.Errorf("the stopped reply generated %v tokens, all it was allowed", n)
	} else {
		t.Logf("the stopped reply generated %v tokens", n)
	}

	// The other model, picked in the list.
	do(t, ctx, "asking the other model",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#max-tokens').value = '';
			document.querySelector('#extra').value = '';
			document.querySelector('#model').value = 'lem-tiny-b'`),
		chromedp.SendKeys("#input", "What is the capital of Japan?"+kb.Enter),
	)
	poll(`document.querySelectorAll('.msg.assistant').length === 3 && document.querySelector('#stop').hidden && `+lastReply+`.includes('Tokyo')`, "waiting for the other model")
	if n := metricValue(t, ts.URL, `lem_generated_tokens_total{model="lem-tiny-b"}`); n == 0 {
		t.Error("lem-tiny-b generated nothing: the picker's model was not asked")
	}

	// Reloaded, the page shows the conversation it kept.
	do(t, ctx, "reloading", chromedp.Reload(), chromedp.WaitVisible("#input"))
	kept := eval[struct {
		Conversations, Messages int
		Title                   string
	}](t, ctx, `({Conversations: document.querySelectorAll('#conversations li').length,
			Messages: document.querySelectorAll('.msg').length,
			Title: document.querySelector('#conversations li button.open').textContent})`)
	if kept.Conversations != 1 || kept.Messages != 6 || kept.Title != "What is the capital of Japan?" {
		t.Errorf("after a reload: %+v, want 1 conversation of 6 messages", kept)
	}

	// Markdown, and HTML in a reply shown as text: a stored conversation
	// goes through the same rendering as a streamed reply.
	const reply = "# Title\n\nSome **bold**, *em* and `a<b` code.\n\n- one\n- two\n\n1. first\n\n" +
		"[docs](https://example.com/x?a=1&b=2) and [bad](javascript:alert(1))\n\n" +
		"<img src=x onerror=\"window.xss=1\"><script>window.xss=2</script>\n\n" +
		"```go\nfmt.Println(\"<b>hi</b>\")\n```\n"
	do(t, ctx, "rendering Markdown",
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem('lem.conversations', JSON.stringify([{id: 'md', title: 'Markdown', model: 'lem-tiny',
			messages: [{role: 'user', content: 'Show me'}, {role: 'assistant', content: `+mustJSON(reply)+`}]}]))`),
		chromedp.Reload(),
		chromedp.WaitVisible(".msg.assistant .content h1"),
	)
	md := eval[struct {
		H1, Strong, Em, Code, Pre, Lang, Href, Rel, Target, Text string
		Items, Ordered, Anchors, Elements, Copy                  int
		XSS                                                      bool
	}](t, ctx, `(() => {
			const c = document.querySelector('.msg.assistant .content');
			const a = c.querySelector('a');
			return {H1: c.querySelector('h1').textContent, Strong: c.querySelector('strong').textContent,
				Em: c.querySelector('em').textContent, Code: c.querySelector('p code').textContent,
				Pre: c.querySelector('pre code').textContent, Lang: c.querySelector('pre code').className,
				Href: a.getAttribute('href'), Rel: a.rel, Target: a.target, Text: c.textContent,
				Items: c.querySelectorAll('ul li').length, Ordered: c.querySelectorAll('ol li').length,
				Anchors: c.querySelectorAll('a').length, Elements: c.querySelectorAll('img, script').length,
				Copy: c.querySelectorAll('pre button.copy').length, XSS: window.xss !== undefined};
		})()`)
	want := []struct{ name, got, want string }{
		{"h1", md.H1, "Title"}, {"strong", md.Strong, "bold"}, {"em", md.Em, "em"}, {"code", md.Code, "a<b"},
		{"pre", md.Pre, `fmt.Println("<b>hi</b>")`}, {"language", md.Lang, "language-go"},
		{"href", md.Href, "https://example.com/x?a=1&b=2"}, {"rel", md.Rel, "noopener noreferrer"}, {"target", md.Target, "_blank"},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("Markdown %s: %q, want %q", w.name, w.got, w.want)
		}
	}
	if md.Items != 2 || md.Ordered != 1 || md.Anchors != 1 || md.Copy != 1 {
		t.Errorf("Markdown: %d list items, %d ordered, %d links, %d copy buttons; want 2, 1, 1 (the javascript: link stays text), 1", md.Items, md.Ordered, md.Anchors, md.Copy)
	}
	if md.Elements != 0 || md.XSS || !strings.Contains(md.Text, `<img src=x onerror="window.xss=1"><script>window.xss=2</script>`) {
		t.Errorf("HTML in a reply: %d elements made, script ran %v; text %q", md.Elements, md.XSS, md.Text)
	}
}

// TestChatPageAPIKey checks that against a server with an API key the
// page asks for it, keeps it in the tab's session storage, and then lists
// the model.
func TestChatPageAPIKey(t *testing.T) {
	ctx := browser(t)
	ts := newTinyServer(t, Config{APIKey: "sekret"}, "lem-tiny")
	do(t, ctx, "giving the key",
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible("#api-key"),
		chromedp.SendKeys("#api-key", "sekret"+kb.Enter),
		chromedp.WaitNotVisible("#key-form"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#model-name').textContent !== ''`, chromedp.WithPollingTimeout(time.Minute)),
	)
	name := eval[string](t, ctx, `document.querySelector('#model-name').textContent`)
	picker := eval[bool](t, ctx, `!document.querySelector('#model-label').hidden`)
	stored := eval[string](t, ctx, `sessionStorage.getItem('lem.apiKey')`)
	if name != "lem-tiny" || picker || stored != "sekret" {
		t.Errorf("after the key: model %q, picker shown %v, stored key %q", name, picker, stored)
	}
}
