package server

import (
	"context"
	"net/http"
	"slices"
	"time"
)

// ModelState is a model of a registry as the admin API reports it.
type ModelState struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// State is "loaded", "loading" or "unloaded".
	State  string `json:"state"`
	Loaded bool   `json:"loaded"`
	Pinned bool   `json:"pinned"`
	// Bytes is the estimated memory of the loaded model (weights and KV
	// budget); VRAM the part of it on a GPU.
	Bytes int64 `json:"bytes"`
	VRAM  int64 `json:"vram"`
	// Requests is the requests in flight on the model.
	Requests int `json:"requests"`
	// ExpiresAt is when an idle model unloads (none: busy, pinned or kept
	// forever).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Retired counts older loads still finishing requests (after a reload
	// or an unload of a busy model).
	Retired int `json:"retired,omitempty"`
	// Queue and KV are the loaded model's queue and scheduler (status).
	Queue *QueueState `json:"queue,omitempty"`
	KV    *KVState    `json:"kv,omitempty"`

	model *Model
}

// QueueState is a model's request queue.
type QueueState struct {
	Waiting int `json:"waiting"`
}

// KVState is a model's scheduler and paged KV cache (engine.SchedulerStats).
type KVState struct {
	Parallel    int `json:"parallel"`
	Running     int `json:"running"`
	Waiting     int `json:"waiting"`
	BlocksUsed  int `json:"blocks_used"`
	BlocksTotal int `json:"blocks_total"`
}

// states returns the registry's models in order.
func (r *registry) states() []ModelState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ModelState, 0, len(r.order))
	for _, name := range r.order {
		e := r.entries[name]
		st := ModelState{Name: name, Path: e.spec.Path, State: "unloaded", Pinned: e.pinned}
		for _, in := range r.live {
			if in.e == e && in != e.cur && in.m != nil {
				st.Retired++
			}
		}
		switch in := e.cur; {
		case in != nil:
			st.State, st.Loaded, st.model = "loaded", true, in.m
			st.Bytes, st.Requests = in.bytes, in.refs
			if in.gpu {
				st.VRAM = in.bytes
			}
			if !in.expires.IsZero() {
				t := in.expires.UTC()
				st.ExpiresAt = &t
			}
		case e.loading != nil:
			st.State = "loading"
		}
		out = append(out, st)
	}
	return out
}

// adminModelRequest is the body of the admin routes that act on a model.
type adminModelRequest struct {
	// Model names the model.
	Model string `json:"model"`
	// Path, for load, adds the model at this path under Model (a path
	// under a model root; see --model-root).
	Path string `json:"path,omitempty"`
	// Pinned, for pin, pins (true, the default) or unpins (false).
	Pinned *bool `json:"pinned,omitempty"`
}

// adminModels is the reply of GET /v1/admin/models and /v1/admin/status.
type adminModels struct {
	Models []ModelState `json:"models"`
	// MemoryLimit and the bytes used, host and GPU apart (status only).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	HostBytes   int64 `json:"host_bytes"`
	GPUBytes    int64 `json:"gpu_bytes"`
}

// adminRegistry returns the registry, writing a 400 for a server of
// fixed models.
func (s *Server) adminRegistry(w http.ResponseWriter) *registry {
	if s.reg == nil {
		openaiErrors(w, invalid("", "this server serves a fixed set of models; start it with models loaded on demand to manage them"))
	}
	return s.reg
}

func (s *Server) adminListModels(w http.ResponseWriter, r *http.Request) {
	reg := s.adminRegistry(w)
	if reg == nil {
		return
	}
	writeJSON(w, http.StatusOK, adminModels{Models: reg.states()})
}

func (s *Server) adminStatus(w http.ResponseWriter, r *http.Request) {
	reg := s.adminRegistry(w)
	if reg == nil {
		return
	}
	sts := reg.states()
	for i := range sts {
		if m := sts[i].model; m != nil {
			st := m.sched.Stats()
			sts[i].Queue = &QueueState{Waiting: m.q.waiting()}
			sts[i].KV = &KVState{Parallel: st.Parallel, Running: st.Running, Waiting: st.Waiting,
				BlocksUsed: st.BlocksUsed, BlocksTotal: st.BlocksTotal}
		}
	}
	reg.mu.Lock()
	host, gpu := reg.used(false), reg.used(true)
	reg.mu.Unlock()
	writeJSON(w, http.StatusOK, adminModels{Models: sts, MemoryLimit: reg.limit, HostBytes: host, GPUBytes: gpu})
}

// readAdmin decodes an admin request naming a model.
func (s *Server) readAdmin(w http.ResponseWriter, r *http.Request) (*registry, *adminModelRequest) {
	reg := s.adminRegistry(w)
	if reg == nil {
		return nil, nil
	}
	var o adminModelRequest
	if err := s.readJSON(r, &o); err != nil {
		openaiErrors(w, err)
		return nil, nil
	}
	if o.Model == "" {
		openaiErrors(w, invalid("model", "is required"))
		return nil, nil
	}
	return reg, &o
}

// state returns the state of the named model.
func (r *registry) state(name string) ModelState {
	for _, st := range r.states() {
		if st.Name == name {
			return st
		}
	}
	return ModelState{Name: name, State: "unloaded"}
}

func (s *Server) adminLoad(w http.ResponseWriter, r *http.Request) {
	reg, o := s.readAdmin(w, r)
	if o == nil {
		return
	}
	name := o.Model
	if o.Path != "" {
		p, err := gatePath(o.Path, reg.roots)
		if err != nil {
			openaiErrors(w, AsError(err))
			return
		}
		if err := reg.add(ModelSpec{Name: name, Path: p, Options: reg.defaults}); err != nil {
			openaiErrors(w, AsError(err))
			return
		}
	} else {
		e := withEntry(w, reg, name)
		if e == nil {
			return
		}
		name = e.spec.Name
	}
	in, err := reg.acquire(r.Context(), name)
	if err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	reg.release(in, nil)
	writeJSON(w, http.StatusOK, reg.state(name))
}

// add adds a model, or points a known one that is not loaded at a new
// path.
func (r *registry) add(sp ModelSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[sp.Name]; e != nil {
		if e.spec.Path == sp.Path {
			return nil
		}
		if e.cur != nil || e.loading != nil {
			return &Error{Status: http.StatusConflict, Code: CodeInvalidRequest, Param: "path",
				Message: "the model " + sp.Name + " is loaded from " + e.spec.Path + "; unload it first"}
		}
		e.spec.Path = sp.Path
		return nil
	}
	r.entries[sp.Name] = &entry{spec: sp}
	r.order = append(r.order, sp.Name)
	return nil
}

// withEntry finds the named model, writing a 404 when there is none.
func withEntry(w http.ResponseWriter, reg *registry, name string) *entry {
	reg.mu.Lock()
	e, err := reg.find(name)
	reg.mu.Unlock()
	if err != nil {
		openaiErrors(w, AsError(err))
		return nil
	}
	return e
}

// readAdminEntry decodes an admin request naming a known model and finds
// it; e is nil when an error has been written.
func (s *Server) readAdminEntry(w http.ResponseWriter, r *http.Request) (reg *registry, o *adminModelRequest, e *entry) {
	reg, o = s.readAdmin(w, r)
	if o == nil {
		return nil, nil, nil
	}
	if e = withEntry(w, reg, o.Model); e == nil {
		return nil, nil, nil
	}
	return reg, o, e
}

func (s *Server) adminUnload(w http.ResponseWriter, r *http.Request) {
	reg, _, e := s.readAdminEntry(w, r)
	if e == nil {
		return
	}
	reg.mu.Lock()
	if in := e.cur; in != nil {
		reg.unloadLocked(in)
	}
	reg.mu.Unlock()
	writeJSON(w, http.StatusOK, reg.state(e.spec.Name))
}

func (s *Server) adminPin(w http.ResponseWriter, r *http.Request) {
	reg, o, e := s.readAdminEntry(w, r)
	if e == nil {
		return
	}
	pin := o.Pinned == nil || *o.Pinned
	reg.mu.Lock()
	e.pinned = pin
	if in := e.cur; in != nil {
		if pin {
			in.stopTimer()
		} else if in.refs == 0 {
			reg.expireAfter(in, reg.keepAliveOf(e))
		}
	}
	reg.mu.Unlock()
	writeJSON(w, http.StatusOK, reg.state(e.spec.Name))
}

func (s *Server) adminReload(w http.ResponseWriter, r *http.Request) {
	reg, _, e := s.readAdminEntry(w, r)
	if e == nil {
		return
	}
	if err := reg.reload(r.Context(), e); err != nil {
		openaiErrors(w, AsError(err))
		return
	}
	writeJSON(w, http.StatusOK, reg.state(e.spec.Name))
}

// reload loads e's model again from disk: requests that arrive from now
// on wait for the new load; those in flight finish on the old one, which
// is closed after the last.
func (r *registry) reload(ctx context.Context, e *entry) error {
	r.mu.Lock()
	for e.loading != nil {
		ch := e.loading
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	ch := make(chan struct{})
	e.loading, e.loadErr = ch, nil
	if old := e.cur; old != nil {
		r.unloadLocked(old) // retired while busy
	}
	in, err := r.load(ctx, e)
	if err == nil {
		in.lastUsed = time.Now()
		e.cur = in
		r.expireAfter(in, r.keepAliveOf(e))
	}
	e.loadErr = err
	e.loading = nil
	close(ch)
	r.mu.Unlock()
	return err
}

// adminRoutes are the routes of the admin API, behind the admin key.
func (s *Server) adminRoutes() []route {
	return slices.Clip([]route{
		{pattern: "GET /v1/admin/models", errors: openaiErrors, flags: admin, handler: s.adminListModels,
			dialect: "lem", summary: "Admin: the known models, their state, memory and pins", response: adminModels{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/admin/models/load", errors: openaiErrors, flags: admin, handler: s.adminLoad,
			dialect: "lem", summary: "Admin: load a model (a known one, or one at a path under a model root)", request: adminModelRequest{}, response: ModelState{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/admin/models/unload", errors: openaiErrors, flags: admin, handler: s.adminUnload,
			dialect: "lem", summary: "Admin: unload a model (a busy one once its requests end)", request: adminModelRequest{}, response: ModelState{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/admin/models/pin", errors: openaiErrors, flags: admin, handler: s.adminPin,
			dialect: "lem", summary: "Admin: pin a model (never unloaded) or unpin it", request: adminModelRequest{}, response: ModelState{}, errorBody: openaiErrorValue},
		{pattern: "POST /v1/admin/reload", errors: openaiErrors, flags: admin, handler: s.adminReload,
			dialect: "lem", summary: "Admin: reload a model from disk; requests in flight finish on the old weights", request: adminModelRequest{}, response: ModelState{}, errorBody: openaiErrorValue},
		{pattern: "GET /v1/admin/status", errors: openaiErrors, flags: admin, handler: s.adminStatus,
			dialect: "lem", summary: "Admin: memory per model, queue and KV cache usage", response: adminModels{}, errorBody: openaiErrorValue},
	})
}
