package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxQueue     = 32
	DefaultMaxBodyBytes = 16 << 20
	DefaultDrain        = 30 * time.Second
	// DefaultHeaderTimeout bounds reading a request's headers.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds reading a request's body: 16 MiB at
	// 2.2 Mbit/s.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle that long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConnections bounds the connections open at once.
	DefaultMaxConnections = 512
	// streamWriteTimeout bounds each write of a stream, so that a client
	// that stops reading cannot hold the model.
	streamWriteTimeout = 30 * time.Second
)

// Config configures a Server.
type Config struct {
	// APIKey, when set, is required on every API route as
	// "Authorization: Bearer KEY" or "x-api-key: KEY".
	APIKey string
	// CORSOrigins are the origins browsers may call from ("*" for any);
	// none disables CORS. A request that carries an Origin header is
	// refused (403) unless its origin is one of these or the server's own.
	CORSOrigins []string
	// AllowedHosts are the names the server answers to (the Host header)
	// besides localhost, loopback addresses and, when Serve listens beyond
	// loopback, every IP literal and the machine's host name: "name",
	// "*.domain" for a domain and its subdomains, or "*" for any host,
	// which turns off the protection against DNS rebinding. Other hosts
	// get 403.
	AllowedHosts []string
	// HeaderTimeout bounds reading a request's headers; BodyTimeout
	// bounds reading its body, from when its headers are read (not the
	// response, which may stream for longer); IdleTimeout closes a
	// keep-alive connection that long idle. 0: the default; negative:
	// none.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds the size of a request's headers; larger get
	// 431 (0: DefaultMaxHeaderBytes).
	MaxHeaderBytes int
	// MaxConnections bounds the connections Serve keeps open at once.
	// At the bound, connections idle between requests are closed to make
	// room, and further clients wait to be accepted until one closes (0:
	// DefaultMaxConnections; negative: no bound).
	MaxConnections int
	// MaxQueue is how many requests may wait per model while as many run
	// as the model runs sequences at once (ModelOptions.Parallel) (0:
	// DefaultMaxQueue; negative: none may wait).
	MaxQueue int
	// KeepAlive is how often a streamed request waiting for its model
	// gets a keep-alive frame (0: DefaultKeepAlive; negative: none, only
	// the headers at once).
	KeepAlive time.Duration
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxPrepareBytes bounds the bytes of prompt text being rendered and
	// tokenized at once, over all models (0: DefaultMaxPrepareBytes);
	// requests beyond it wait their turn (see admit.go).
	MaxPrepareBytes int64
	// AdminKey is the key of the /v1/admin/ routes ("Authorization:
	// Bearer KEY" or "x-api-key: KEY"); the API key does not open them,
	// and without an admin key they answer 401 to every request.
	AdminKey string
	// Version is the lem version GET /openapi.json names ("": dev).
	Version string
	// LogContent adds prompts and outputs to the request logs.
	LogContent bool
	// Logger receives request logs (nil: slog.Default()).
	Logger *slog.Logger
	// Policy, when set, filters every reply's content, reasoning and
	// tool-call arguments (policy.go).
	Policy *Policy
	// Welfare, when set, turns on the welfare guard (welfare.go); nil,
	// the default, scores nothing.
	Welfare *WelfareConfig
}

// Server serves models over HTTP in several API dialects. Each dialect
// (openai.go, …) registers its routes in routes and turns its requests into
// core Requests.
type Server struct {
	cfg     Config
	log     *slog.Logger
	models  []*Model
	byID    map[string]*Model
	mux     *http.ServeMux
	methods map[string][]string // literal path → methods routed
	metrics *metrics
	store   *responseStore
	hosts   atomic.Pointer[hostPolicy]
	prepare *prepareGate  // bounds the prompts being prepared
	reg     *registry     // models loaded on demand (NewRegistry); nil for New
	welfare *welfareGuard // nil unless Config.Welfare

	// patterns are those handle registered, in order (the OpenAPI
	// test checks each is in the document).
	patterns []string

	// base is the parent of every request's context; cancelling it stops
	// generations (after the drain deadline of Serve).
	base   context.Context
	cancel context.CancelFunc
	once   sync.Once
	closed sync.Once // the models' schedulers
	// running counts the handlers running, so that Serve returns only
	// once the last has (a generation cancelled at the drain deadline
	// still finishes its step on the model).
	running sync.WaitGroup
}

// New returns a server for the models; the first is the default model of
// requests that name none (Ollama and some clients).
func New(cfg Config, models ...*Model) (*Server, error) {
	if len(models) == 0 {
		return nil, errors.New("serve: no models")
	}
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	for _, m := range models {
		if m.srv != nil {
			return nil, fmt.Errorf("serve: model %q already belongs to a server", m.id)
		}
		if s.byID[m.id] != nil {
			return nil, fmt.Errorf("serve: two models with the id %q", m.id)
		}
		s.attach(m)
		s.byID[m.id] = m
		s.models = append(s.models, m)
	}
	s.metrics.reg.MustRegister(newSchedulerMetrics(s.models))
	s.routes()
	return s, nil
}

// attach makes m the server's: its metrics and its queue.
func (s *Server) attach(m *Model) {
	m.srv = s
	m.obs = s.metrics.forModel(m.id)
	m.q = newQueue(m.Parallel(), s.cfg.MaxQueue, func(n int) { m.obs.queueDepth.Set(float64(n)) })
}

// newServer returns a server with cfg's defaults applied and no models
// or routes yet.
func newServer(cfg Config) (*Server, error) {
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueue < 0 {
		cfg.MaxQueue = 0
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.HeaderTimeout, DefaultHeaderTimeout}, {&cfg.BodyTimeout, DefaultBodyTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		*d.v = max(*d.v, 0)
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.MaxPrepareBytes <= 0 {
		cfg.MaxPrepareBytes = DefaultMaxPrepareBytes
	}
	s := &Server{cfg: cfg, log: cfg.Logger, byID: map[string]*Model{}, mux: http.NewServeMux(),
		methods: map[string][]string{}, metrics: newMetrics(), store: newResponseStore(1000),
		prepare: newPrepareGate(cfg.MaxPrepareBytes)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.Welfare != nil {
		g, err := newWelfareGuard(cfg.Welfare)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.welfare = g
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.hosts.Store(newHostPolicy(cfg.AllowedHosts))
	return s, nil
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Models returns the served models in order: with a registry, those
// loaded now.
func (s *Server) Models() []*Model {
	if s.reg != nil {
		var out []*Model
		for _, in := range s.reg.loaded() {
			out = append(out, in.m)
		}
		return out
	}
	return s.models
}

// Model returns the model of the given id; an empty id gives the first.
// When the server serves one model, any id gives it, as llama-server
// does, so that clients configured with another name work. Otherwise an
// unknown id is a 404 *Error.
//
// With a registry (NewRegistry), the model is loaded if need be; the
// server holds no reference for the caller, so that it may be unloaded
// at any time.
func (s *Server) Model(id string) (*Model, error) {
	if s.reg != nil {
		in, err := s.reg.acquire(context.Background(), id)
		if err != nil {
			return nil, err
		}
		s.reg.release(in, nil)
		return in.m, nil
	}
	if id == "" || len(s.models) == 1 {
		return s.models[0], nil
	}
	if m := s.byID[id]; m != nil {
		return m, nil
	}
	return nil, errModelNotFound(id)
}

// Close refuses new generations (503), cancels those running and closes
// the models' schedulers.
func (s *Server) Close() {
	s.stopAdmitting()
	s.cancel()
	s.closeModels()
}

// closeModels closes the models' schedulers, once.
func (s *Server) closeModels() {
	s.closed.Do(func() {
		if s.reg != nil {
			s.reg.close()
		}
		for _, m := range s.models {
			if err := m.Close(); err != nil {
				s.log.Warn("closing the model", "model", m.id, "error", err)
			}
		}
	})
}

func (s *Server) stopAdmitting() {
	s.once.Do(func() {
		if s.reg != nil {
			s.reg.stopAdmitting()
		}
		for _, m := range s.models {
			m.q.close()
		}
	})
}

// Serve answers on ln until ctx ends, then shuts down gracefully: new
// requests are refused, in-flight ones (streams included) may finish
// within drain, after which their generations are cancelled and the
// connections closed; it returns once the last handler has. When ln
// listens beyond loopback, requests may name the server by any IP address
// and by the machine's host name (see Config.AllowedHosts). Once the last
// handler has returned, it closes the models' schedulers.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	hosts := s.hosts.Load().withListener(ln.Addr())
	s.hosts.Store(hosts)
	if hosts.any {
		s.log.Warn("the Host check is off (allowed hosts *): a web page whose domain resolves to this machine (DNS rebinding) can use the server through a visitor's browser")
	}
	if slices.Contains(s.cfg.CORSOrigins, "*") {
		s.log.Warn("CORS origin *: every web page a visitor of this machine opens can use the server")
	}
	// The body's timeout is a read deadline set per request once its
	// headers are read (see handle and deadlineBody) and lifted at the
	// body's end, so that it neither counts the time spent on the headers
	// nor bounds a streamed response.
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.cfg.MaxConnections > 0 {
		l := newLimitListener(ln, s.cfg.MaxConnections)
		ln, hs.ConnState = l, l.connState
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		s.running.Wait()
		s.closeModels()
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", slog.Float64("drain_ms", float64(drain.Milliseconds())))
	s.stopAdmitting()
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := hs.Shutdown(dctx)
	if err != nil {
		s.log.Warn("drain deadline passed; cancelling in-flight requests")
		s.cancel()
		hs.Close()
	}
	s.cancel()
	<-errc
	s.running.Wait()
	s.closeModels()
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// durationMS is the log attribute of a duration: duration_ms, in
// milliseconds with a microsecond's precision.
func durationMS(d time.Duration) slog.Attr {
	return slog.Float64("duration_ms", float64(d.Microseconds())/1000)
}

// errorWriter writes an *Error in a dialect's shape.
type errorWriter func(w http.ResponseWriter, e *Error)

// Route flags.
const (
	open = 1 << iota // no API key needed
	// shared: a route both the OpenAI and the Anthropic dialects use
	// (/v1/models); errors take Anthropic's shape when the request has
	// an anthropic-version header, as Anthropic's clients send.
	shared
	// admin: an admin route, opened by the admin key only (not the API
	// key).
	admin
)

// sharedErrors returns the error writer of a request on a shared route.
func sharedErrors(r *http.Request) errorWriter {
	if r.Header.Get("anthropic-version") != "" {
		return anthropicErrors
	}
	return openaiErrors
}

type ctxKey int

const (
	requestIDKey ctxKey = 0
	routeKey     ctxKey = 1 // the route's pattern
)

// RequestID returns the id of the request ctx belongs to, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// handle registers h under pattern with the shared middleware: request id,
// panic recovery, body read deadline, Host and Origin checks, CORS, API
// key, body limit, metrics and the access log.
// ew writes errors in the route's dialect.
func (s *Server) handle(pattern string, ew errorWriter, flags int, h http.HandlerFunc) {
	route := pattern
	s.patterns = append(s.patterns, pattern)
	if ew == nil {
		ew = openaiErrors
	}
	if method, path, ok := strings.Cut(pattern, " "); ok && !strings.Contains(path, "{") {
		s.methods[path] = append(s.methods[path], method)
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.running.Add(1)
		defer s.running.Done()
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 128 {
			id = NewID("req_")
		}
		w.Header().Set("X-Request-Id", id)
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		ctx = context.WithValue(ctx, routeKey, route)
		r = r.WithContext(ctx)
		rec := &recorder{ResponseWriter: w}
		ew := ew
		if flags&shared != 0 {
			ew = sharedErrors(r)
		}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic serving request", "request_id", id, "route", route, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if !rec.wrote {
					ew(rec, internalError())
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			d := time.Since(start)
			s.metrics.observeRequest(route, status, d.Seconds())
			s.log.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("request_id", id), slog.String("method", r.Method),
				slog.String("route", route), slog.String("path", r.URL.Path), slog.Int("status", status), durationMS(d))
		}()
		if r.Body != nil && r.Body != http.NoBody && s.cfg.BodyTimeout > 0 {
			rc := http.NewResponseController(rec)
			if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		if err := s.guard(r); err != nil {
			rec.Header().Set("Connection", "close")
			ew(rec, err)
			return
		}
		s.cors(rec, r)
		if flags&admin != 0 {
			if !s.adminAuthorized(r) {
				rec.Header().Set("WWW-Authenticate", `Bearer realm="lem-admin"`)
				ew(rec, errAdminUnauthorized)
				return
			}
		} else if flags&open == 0 && !s.authorized(r) {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="lem"`)
			ew(rec, errUnauthorized)
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, s.cfg.MaxBodyBytes)
		if s.reg != nil {
			l := &leases{}
			defer s.releaseAll(l)
			r = r.WithContext(context.WithValue(r.Context(), leasesKey, l))
		}
		h(rec, r)
	})
}

// recorder remembers the status written through it. Unwrap lets
// http.ResponseController reach the connection for flushes and deadlines.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// readJSON reads the request body into v. Errors are *Error values: 413 for
// a body over the limit, 400 naming the field for malformed JSON or wrong
// types.
func (s *Server) readJSON(r *http.Request, v any) *Error {
	data, err := s.readBody(r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errBodyTooLarge(mbe.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return &Error{Status: http.StatusRequestTimeout, Code: CodeInvalidRequest,
				Message: fmt.Sprintf("the request body was not received within %v", s.cfg.BodyTimeout)}
		}
		return invalid("", "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return invalid("", "the request body is empty; want a JSON object")
	}
	return decodeJSON(data, v)
}

// decodeJSON unmarshals data into v, describing errors as the client
// needs them.
func decodeJSON(data []byte, v any) *Error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalid("", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("", "want a JSON object, got %s", te.Value)
		}
		// Fields of embedded structs carry the Go type's name.
		field := strings.ReplaceAll(te.Field, "oaSampling.", "")
		return invalid(field, "wrong type: got %s, want %s", te.Value, jsonTypeName(te.Type.Kind().String()))
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return invalid("", "%v", err)
}

func jsonTypeName(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "integer"
	case strings.HasPrefix(kind, "float"):
		return "number"
	case kind == "slice", kind == "array":
		return "array"
	case kind == "map", kind == "struct":
		return "object"
	case kind == "bool":
		return "boolean"
	}
	return kind
}

// writeJSON writes v with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"message":"internal server error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
