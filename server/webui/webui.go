// Package webui is the chat page lem serves to browsers at /: one HTML
// page, a style sheet and a script, embedded in the binary, with no build
// step and nothing fetched from elsewhere. The page talks to the server's
// own /v1/models and /v1/chat/completions (streamed), keeps conversations
// in the browser's localStorage and an API key, when the server asks for
// one, in sessionStorage.
//
// The script renders the model's Markdown itself after escaping every
// character of HTML in the text, so that a reply is always shown as text.
// The files are served with a Content-Security-Policy that allows only the
// page's own origin and no inline script.
package webui

import (
	"embed"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed index.html style.css app.js
var files embed.FS

// Prefix is the path under which the page's assets are served.
const Prefix = "/ui/"

// csp is the page's Content-Security-Policy: its own files and its own
// origin's API, nothing inline, no framing.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// ServePage writes the chat page.
func ServePage(w http.ResponseWriter, r *http.Request) {
	serve(w, r, "index.html")
}

// ServeAsset writes the asset that r names under Prefix (app.js or
// style.css); any other path is a 404.
func ServeAsset(w http.ResponseWriter, r *http.Request) {
	name := path.Base(r.URL.Path)
	if r.URL.Path != Prefix+name || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	serve(w, r, name)
}

func serve(w http.ResponseWriter, r *http.Request, name string) {
	data, err := files.ReadFile(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", types[path.Ext(name)])
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	w.Write(data)
}

// WantsPage reports whether a request for / comes from a browser, which
// asks for HTML; API clients (Ollama's, which probe / for a liveness text)
// do not.
func WantsPage(r *http.Request) bool {
	for _, part := range splitAccept(r.Header.Values("Accept")) {
		if part == "text/html" || part == "application/xhtml+xml" {
			return true
		}
	}
	return false
}

// splitAccept returns the media types of Accept headers, lower-cased,
// without their parameters; a type refused with q=0 is left out.
func splitAccept(values []string) []string {
	var out []string
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			typ, params, _ := strings.Cut(item, ";")
			typ = strings.ToLower(strings.TrimSpace(typ))
			refused := false
			for p := range strings.SplitSeq(params, ";") {
				k, val, _ := strings.Cut(p, "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if q, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && q <= 0 {
						refused = true
					}
				}
			}
			if typ != "" && !refused {
				out = append(out, typ)
			}
		}
	}
	return out
}
