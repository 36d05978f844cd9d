package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
)

// DefaultModelKeepAlive is how long a model loaded on demand stays resident
// after its last request, unless the request or the model's settings say
// otherwise (Ollama's default).
const DefaultModelKeepAlive = 5 * time.Minute

// ModelSpec is a model a registry serves: loaded on first use.
type ModelSpec struct {
	// Name is the id clients use.
	Name string
	// Path is the model's directory or GGUF file.
	Path string
	// Options configure the model when it is loaded.
	Options ModelOptions
	// KeepAlive is the model's default keep_alive (0: the registry's;
	// negative: forever).
	KeepAlive time.Duration
	// Pinned models are never unloaded by the memory limit or keep_alive.
	Pinned bool
	// Entry is the name of the model's entry in the registry's models
	// directory (a file, a folder, or a manifest folder of /api/create),
	// which /api/delete removes; empty for a model given by path.
	Entry string
}

// RegistryConfig configures a server of models loaded on demand (see
// NewRegistry).
type RegistryConfig struct {
	// Models are the models served; the first is the default of requests
	// that name none.
	Models []ModelSpec
	// Open loads the model at path (lem's runner opens it on the backend
	// the command line chose).
	Open func(path string) (*engine.Model, error)
	// OpenEncoder, when set, loads an encoder directory (BERT, XLM-RoBERTa,
	// ModernBERT), which serves embeddings and reranking; without it an
	// encoder model fails to load.
	OpenEncoder func(path string) (*engine.Encoder, error)
	// GPU says models are expected to load on a GPU (the backend the
	// command line chose), for the memory accounting of a model's first
	// load; each load then reports where it went.
	GPU bool
	// ModelsDir is the models directory that /api/create and /api/copy
	// write to and /api/delete removes from ("": those routes refuse).
	ModelsDir string
	// Aliases map other names clients may use to the models' names.
	Aliases map[string]string
	// MemoryLimit bounds the estimated bytes of the models resident at
	// once, each its weights plus its KV cache budget; host and GPU memory
	// are counted separately, each against the limit (0: no limit).
	MemoryLimit int64
	// KeepAlive is the default time a model stays loaded after its last
	// request (0: DefaultModelKeepAlive; negative: forever).
	KeepAlive time.Duration
	// Roots are the directories that admin loads may name paths in (see
	// gatePath); the directories of Models are not roots by themselves.
	Roots []string
	// Options configure models an admin load adds by path.
	Options ModelOptions
	// AdminKey is the key of the /v1/admin/ routes (required: the admin
	// API stays closed without one).
	AdminKey string
}

// registry holds the models of a server that loads them on demand: each
// is loaded on first use (one load for all the requests that wait for
// it), kept per keep_alive, and unloaded, least recently used first, when
// loading another would pass the memory limit. A model with requests in
// flight is never unloaded; a reloaded or unloaded model that is still
// busy is retired: its requests finish on it, then it is closed.
type registry struct {
	srv  *Server
	open func(string) (*engine.Model, error)
	// limit bounds the bytes of live instances (host and GPU apart).
	limit     int64
	keepAlive time.Duration
	roots     []string
	defaults  ModelOptions
	openEnc   func(string) (*engine.Encoder, error)
	gpu       bool
	modelsDir string
	aliases   map[string]string

	mu      sync.Mutex
	order   []string // names, in the order given
	entries map[string]*entry
	live    []*instance   // loaded instances, current and retired
	changed chan struct{} // closed and replaced when an instance is released or closed
	closed  bool
}

// entry is one model of the registry.
type entry struct {
	spec    ModelSpec
	cur     *instance     // nil when not loaded
	loading chan struct{} // non-nil while a load runs; closed when it ends
	loadErr error         // the error of the load that just ended
	pinned  bool
	gpu     *bool // where the last load went (nil: not loaded yet)
}

// instance is one load of a model.
type instance struct {
	e        *entry
	m        *Model
	bytes    int64 // estimated memory: weights + KV budget
	gpu      bool
	refs     int
	lastUsed time.Time
	expires  time.Time // zero: never (while idle)
	timer    *time.Timer
	retired  bool
	closed   bool
	closer   func() error // closes what the model holds besides its scheduler (an encoder)
}

// NewRegistry returns a server of the models in rc, loaded on first use.
// With one model, any model name reaches it, as with New.
func NewRegistry(cfg Config, rc RegistryConfig) (*Server, error) {
	if len(rc.Models) == 0 {
		return nil, errors.New("serve: no models")
	}
	if rc.Open == nil {
		return nil, errors.New("serve: RegistryConfig.Open is nil")
	}
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	reg := &registry{srv: s, open: rc.Open, limit: rc.MemoryLimit, keepAlive: rc.KeepAlive, defaults: rc.Options,
		openEnc: rc.OpenEncoder, gpu: rc.GPU, modelsDir: rc.ModelsDir, aliases: map[string]string{},
		entries: map[string]*entry{}, changed: make(chan struct{})}
	if reg.keepAlive == 0 {
		reg.keepAlive = DefaultModelKeepAlive
	}
	for _, root := range rc.Roots {
		abs, err := filepath.Abs(root)
		if err != nil {
			return nil, fmt.Errorf("serve: model root %s: %w", root, err)
		}
		reg.roots = append(reg.roots, abs)
	}
	for _, sp := range rc.Models {
		if sp.Name == "" {
			return nil, fmt.Errorf("serve: model %s has no name", sp.Path)
		}
		if reg.entries[sp.Name] != nil {
			return nil, fmt.Errorf("serve: two models named %q", sp.Name)
		}
		reg.entries[sp.Name] = &entry{spec: sp, pinned: sp.Pinned}
		reg.order = append(reg.order, sp.Name)
	}
	for alias, target := range rc.Aliases {
		if reg.entries[alias] != nil {
			return nil, fmt.Errorf("serve: alias %q is the name of a model", alias)
		}
		if reg.entries[target] == nil {
			return nil, fmt.Errorf("serve: alias %q names %q, which is not a served model", alias, target)
		}
		reg.aliases[alias] = target
	}
	s.reg = reg
	s.cfg.AdminKey = rc.AdminKey
	sm := newSchedulerMetrics(nil)
	sm.list = reg.loadedModels
	s.metrics.reg.MustRegister(sm)
	s.routes()
	return s, nil
}

// find returns the entry a client names: the only one when the registry
// has one, else by name with or without Ollama's ":latest".
func (r *registry) find(name string) (*entry, error) {
	name = strings.TrimSpace(name)
	if len(r.order) == 0 {
		return nil, errModelNotFound(name)
	}
	if name == "" || len(r.order) == 1 {
		return r.entries[r.order[0]], nil
	}
	for _, n := range []string{name, strings.TrimSuffix(name, ":latest")} {
		if e := r.entries[n]; e != nil {
			return e, nil
		}
		if e := r.entries[r.aliases[n]]; e != nil {
			return e, nil
		}
	}
	return nil, errModelNotFound(name)
}

// acquire returns the loaded model of name with a reference held,
// loading it first when needed (waiting for a load under way, and for
// busy models to go idle when the memory limit needs room). Release the
// reference with release.
func (r *registry) acquire(ctx context.Context, name string) (*instance, error) {
	r.mu.Lock()
	e, err := r.find(name)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	for {
		if r.closed {
			r.mu.Unlock()
			return nil, errShuttingDown
		}
		if in := e.cur; in != nil {
			in.refs++
			in.lastUsed = time.Now()
			in.stopTimer()
			r.mu.Unlock()
			return in, nil
		}
		if e.loading != nil {
			ch := e.loading
			r.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			r.mu.Lock()
			if e.cur == nil && e.loadErr != nil {
				err := e.loadErr
				r.mu.Unlock()
				return nil, err
			}
			continue
		}
		// This request loads the model.
		ch := make(chan struct{})
		e.loading, e.loadErr = ch, nil
		in, err := r.load(ctx, e)
		if err == nil {
			in.refs = 1
			in.lastUsed = time.Now()
			e.cur = in
		}
		e.loadErr = err
		e.loading = nil
		close(ch)
		r.mu.Unlock()
		return in, err
	}
}

// load loads e's model, called with r.mu held (released while the model
// loads and while it waits for room). It makes room first, unloading idle
// models least recently used first.
func (r *registry) load(ctx context.Context, e *entry) (*instance, error) {
	need, gpu := r.estimate(e)
	if err := r.makeRoom(ctx, e.spec.Name, need, gpu); err != nil {
		return nil, err
	}
	// Count the bytes while loading, so that concurrent loads of other
	// models see them.
	in := &instance{e: e, bytes: need, gpu: gpu, refs: 1}
	r.live = append(r.live, in)
	r.mu.Unlock()
	m, onGPU, closer, err := r.openModel(e.spec)
	r.mu.Lock()
	if err != nil {
		r.drop(in)
		return nil, &Error{Status: http.StatusInternalServerError, Code: CodeLoadFailed,
			Message: fmt.Sprintf("loading the model %q from %s: %v", e.spec.Name, e.spec.Path, err)}
	}
	in.m, in.closer = m, closer
	// The backend tells where the weights went: count them there.
	e.gpu = &onGPU
	if onGPU != in.gpu {
		in.gpu = onGPU
		r.notify()
	}
	in.refs = 0
	r.srv.log.Info("model loaded", "model", e.spec.Name, "path", e.spec.Path, "bytes", need)
	return in, nil
}

// openModel opens and wraps the model of sp for the server: an encoder
// directory as an embedding model, any other as a generative one. It
// reports whether the model went on a GPU (its backend reports device
// memory) and what closes the encoder, if any.
func (r *registry) openModel(sp ModelSpec) (*Model, bool, func() error, error) {
	if model.IsEncoderPath(sp.Path) {
		if r.openEnc == nil {
			return nil, false, nil, fmt.Errorf("%s is an encoder model, which this server cannot load", sp.Path)
		}
		enc, err := r.openEnc(sp.Path)
		if err != nil {
			return nil, false, nil, err
		}
		m, err := NewEncoderModel(sp.Name, enc, sp.Options)
		if err != nil {
			enc.Close()
			return nil, false, nil, err
		}
		r.srv.attach(m)
		_, gpu := enc.Backend.(compute.MemoryReporter)
		return m, gpu, enc.Close, nil
	}
	em, err := r.open(sp.Path)
	if err != nil {
		return nil, false, nil, err
	}
	m, err := NewModel(sp.Name, em, sp.Options)
	if err != nil {
		em.Close()
		return nil, false, nil, err
	}
	r.srv.attach(m)
	_, gpu := em.Backend.(compute.MemoryReporter)
	return m, gpu, nil, nil
}

// estimate returns the memory a model of e takes: its files' bytes and
// its KV cache budget, and whether it goes on a GPU (where its last load
// went, else where the server expects models to go).
func (r *registry) estimate(e *entry) (int64, bool) {
	gpu := r.gpu
	if e.gpu != nil {
		gpu = *e.gpu
	}
	return describeStore(e.spec.Path).size + max(e.spec.Options.KVBytes, 0), gpu
}

// loadedModels returns the current loads of the models (for the
// scheduler metrics, labelled by model: a model's series go when it
// unloads).
func (r *registry) loadedModels() []*Model {
	var out []*Model
	for _, in := range r.loaded() {
		out = append(out, in.m)
	}
	return out
}

// used returns the bytes of live instances on the GPU or on the host.
func (r *registry) used(gpu bool) int64 {
	var n int64
	for _, in := range r.live {
		if in.gpu == gpu {
			n += in.bytes
		}
	}
	return n
}

// makeRoom unloads idle models, least recently used first, until need
// more bytes fit the limit, waiting for busy models to go idle when no
// idle one is left. Called with r.mu held.
func (r *registry) makeRoom(ctx context.Context, name string, need int64, gpu bool) error {
	if r.limit <= 0 {
		return nil
	}
	if need > r.limit {
		return &Error{Status: http.StatusInsufficientStorage, Code: CodeLoadFailed,
			Message: fmt.Sprintf("model %q needs about %d bytes, more than the memory limit of %d", name, need, r.limit)}
	}
	for r.used(gpu)+need > r.limit {
		var victim *instance
		for _, in := range r.live {
			if in.gpu != gpu || in.refs > 0 || in.m == nil || in.closed || (in.e.pinned && !in.retired) {
				continue
			}
			if victim == nil || in.lastUsed.Before(victim.lastUsed) {
				victim = in
			}
		}
		if victim != nil {
			r.srv.log.Info("unloading the least recently used model for room", "model", victim.e.spec.Name, "for", name)
			r.unloadLocked(victim)
			continue
		}
		// Every resident model is busy (or pinned): wait for one to go idle.
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			return ctx.Err()
		}
		r.mu.Lock()
		if r.closed {
			return errShuttingDown
		}
	}
	return nil
}

// notify wakes those waiting for room. Called with r.mu held.
func (r *registry) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// drop forgets a live instance. Called with r.mu held.
func (r *registry) drop(in *instance) {
	r.live = slices.DeleteFunc(r.live, func(x *instance) bool { return x == in })
	r.notify()
}

// unloadLocked closes an idle instance, or retires a busy one so that it
// closes when its last request ends. Called with r.mu held.
func (r *registry) unloadLocked(in *instance) {
	if in.e.cur == in {
		in.e.cur = nil
	}
	in.stopTimer()
	if in.refs > 0 {
		in.retired = true
		return
	}
	if in.closed {
		return
	}
	in.closed = true
	in.m.q.close()
	if err := in.m.Close(); err != nil {
		r.srv.log.Warn("closing the model", "model", in.e.spec.Name, "error", err)
	}
	if in.closer != nil {
		if err := in.closer(); err != nil {
			r.srv.log.Warn("closing the model", "model", in.e.spec.Name, "error", err)
		}
	}
	r.drop(in)
	r.srv.log.Info("model unloaded", "model", in.e.spec.Name)
}

func (in *instance) stopTimer() {
	if in.timer != nil {
		in.timer.Stop()
		in.timer = nil
	}
	in.expires = time.Time{}
}

// release drops a reference taken by acquire. keepAlive is the request's
// keep_alive (nil: the model's default): once idle, the model stays that
// long (0: unloaded now; negative: forever).
func (r *registry) release(in *instance, keepAlive *time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in.refs--
	in.lastUsed = time.Now()
	defer r.notify()
	if in.refs > 0 {
		return
	}
	if in.retired {
		r.unloadLocked(in)
		return
	}
	d := r.keepAliveOf(in.e)
	if keepAlive != nil {
		d = *keepAlive
	}
	r.expireAfter(in, d)
}

// keepAliveOf returns how long e's model stays loaded when idle: its
// own keep_alive, or the registry's default.
func (r *registry) keepAliveOf(e *entry) time.Duration {
	if e.spec.KeepAlive != 0 {
		return e.spec.KeepAlive
	}
	return r.keepAlive
}

// expireAfter arms in's keep_alive. Called with r.mu held.
func (r *registry) expireAfter(in *instance, d time.Duration) {
	in.stopTimer()
	if in.e.pinned || d < 0 {
		return
	}
	if d == 0 {
		r.unloadLocked(in)
		return
	}
	in.expires = time.Now().Add(d)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if in.timer == t && in.refs == 0 && !in.e.pinned {
			r.unloadLocked(in)
		}
	})
	in.timer = t
}

// close unloads every model, once their requests have ended.
func (r *registry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, in := range slices.Clone(r.live) {
		if in.m != nil {
			r.unloadLocked(in)
		}
	}
	r.notify()
}

// stopAdmitting closes the queues of the loaded models.
func (r *registry) stopAdmitting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.live {
		if in.m != nil {
			in.m.q.close()
		}
	}
}

// loaded returns the current instances in the order of the models.
func (r *registry) loaded() []*instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*instance
	for _, name := range r.order {
		if in := r.entries[name].cur; in != nil {
			out = append(out, in)
		}
	}
	return out
}

// parseKeepAlive reads a keep_alive value as Ollama takes it: a duration
// string ("5m", "1h30m", "0", "-1"), or a number of seconds. nil or an
// empty value is nil (the default).
func parseKeepAlive(raw []byte) (*time.Duration, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil, nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(uq)
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(s); err != nil {
		return nil, invalid("keep_alive", "want a duration such as \"5m\" or a number of seconds, got %s", string(raw))
	}
	if d < 0 {
		d = -1
	}
	return &d, nil
}

// leases are the model references a request holds, released when its
// handler returns.
type leases struct {
	held      []*instance
	keepAlive *time.Duration
}

const leasesKey ctxKey = 1

// acquireModel returns the model name names for the request r: with a
// registry, loaded if need be and held until the handler returns.
func (s *Server) acquireModel(r *http.Request, name string) (*Model, error) {
	if s.reg == nil {
		return s.Model(name)
	}
	l, _ := r.Context().Value(leasesKey).(*leases)
	in, err := s.reg.acquire(r.Context(), name)
	if err != nil {
		return nil, AsError(err)
	}
	if l == nil {
		// Not from handle (cannot happen for a routed request): hold no
		// reference.
		s.reg.release(in, nil)
		return in.m, nil
	}
	l.held = append(l.held, in)
	return in.m, nil
}

// setKeepAlive records the request's keep_alive for the models it holds.
func setKeepAlive(r *http.Request, d *time.Duration) {
	if l, _ := r.Context().Value(leasesKey).(*leases); l != nil && d != nil {
		l.keepAlive = d
	}
}

// releaseAll drops the references the request held.
func (s *Server) releaseAll(l *leases) {
	for _, in := range l.held {
		s.reg.release(in, l.keepAlive)
	}
	l.held = nil
}

// gateError is the 403 of a path outside the model roots.
func gateError(path string, roots []string, why string) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodePermission,
		Message: fmt.Sprintf("path %q is refused: %s; model paths must lie under a model root (%s)", path, why, strings.Join(roots, ", "))}
}

// gatePath resolves a path a client gave (absolute, or relative to the
// first root) and checks that it lies under one of the roots, after
// symbolic links: ".." elements, absolute paths elsewhere and links that
// lead out are refused with a 403 naming the roots.
func gatePath(path string, roots []string) (string, error) {
	if len(roots) == 0 {
		return "", &Error{Status: http.StatusForbidden, Code: CodePermission,
			Message: fmt.Sprintf("path %q is refused: no model root is configured (--model-root, --models)", path)}
	}
	if path == "" {
		return "", invalid("path", "is required")
	}
	if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..") {
		return "", gateError(path, roots, `it contains ".."`)
	}
	p := path
	if !filepath.IsAbs(p) {
		p = filepath.Join(roots[0], p)
	}
	p = filepath.Clean(p)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("path %q: no such file or directory", path)}
		}
		return "", &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: fmt.Sprintf("path %q: %v", path, err)}
	}
	for _, root := range roots {
		rr, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if real == rr || strings.HasPrefix(real, rr+string(filepath.Separator)) {
			return p, nil
		}
	}
	if under(p, roots) {
		return "", gateError(path, roots, "a symbolic link leads out of the model roots")
	}
	return "", gateError(path, roots, "it lies outside the model roots")
}

// under reports whether p is lexically under one of the roots.
func under(p string, roots []string) bool {
	for _, root := range roots {
		if p == root || strings.HasPrefix(p, root+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
