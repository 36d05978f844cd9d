package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// authorized reports whether r carries the API key, as "Authorization:
// Bearer KEY" (OpenAI, Ollama) or "x-api-key: KEY" (Anthropic). Keys are
// compared through their SHA-256 digests in constant time, so neither the
// key's content nor its length shows in the timing.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	return hasKey(r, s.cfg.APIKey)
}

// adminAuthorized reports whether r carries the admin key; without one
// configured, nothing opens the admin routes.
func (s *Server) adminAuthorized(r *http.Request) bool {
	return s.cfg.AdminKey != "" && hasKey(r, s.cfg.AdminKey)
}

// hasKey reports whether r carries key, in either header.
func hasKey(r *http.Request, key string) bool {
	want := sha256.Sum256([]byte(key))
	ok := 0
	if k := r.Header.Get("X-Api-Key"); k != "" {
		got := sha256.Sum256([]byte(k))
		ok |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		got := sha256.Sum256([]byte(strings.TrimSpace(h[7:])))
		ok |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return ok == 1
}

// corsAllowed returns the value of Access-Control-Allow-Origin for origin,
// or "" when the origin is not allowed.
func (s *Server) corsAllowed(origin string) string {
	if origin == "" || len(s.cfg.CORSOrigins) == 0 {
		return ""
	}
	if slices.Contains(s.cfg.CORSOrigins, "*") {
		return "*"
	}
	if slices.Contains(s.cfg.CORSOrigins, origin) {
		return origin
	}
	return ""
}

// cors adds the CORS headers of an allowed origin to a response.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) {
	if len(s.cfg.CORSOrigins) == 0 {
		return
	}
	w.Header().Add("Vary", "Origin")
	if allow := s.corsAllowed(r.Header.Get("Origin")); allow != "" {
		w.Header().Set("Access-Control-Allow-Origin", allow)
		w.Header().Set("Access-Control-Expose-Headers", "X-Request-Id")
	}
}

// preflight answers CORS preflight requests (which carry no credentials).
// A preflight from an origin that is not allowed gets no CORS headers, so
// the browser does not send the request.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) {
	if !s.hosts.Load().allows(r.Host) {
		openaiErrors(w, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: fmt.Sprintf("the host %q is not allowed", r.Host)})
		return
	}
	allow := s.corsAllowed(r.Header.Get("Origin"))
	if len(s.cfg.CORSOrigins) > 0 {
		w.Header().Add("Vary", "Origin")
	}
	if allow == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", allow)
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	} else {
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Anthropic-Version")
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}
