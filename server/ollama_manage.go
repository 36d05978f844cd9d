package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/catalog"
	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/hub"
	"github.com/lem-engine/lem/model"
)

// This file is Ollama's model management on a server of models loaded on
// demand: /api/create, /api/copy and /api/delete act on the registry's
// models directory, where a created or copied model is a folder holding
// only a manifest (catalog.Manifest) that names the weights, never a
// copy of them.

// olCreateRequest is the body of POST /api/create.
type olCreateRequest struct {
	// Model is the new model's name (Name is the older field).
	Model string `json:"model"`
	Name  string `json:"name,omitempty"`
	// From is a model's name, or the path of a GGUF file or a model
	// directory under a model root.
	From string `json:"from"`
	// Template is a chat template (Jinja, as Hugging Face models ship
	// them) replacing the model's.
	Template string `json:"template,omitempty"`
	// System is the system prompt of chats that have none.
	System string `json:"system,omitempty"`
	// Parameters are request defaults by Ollama's names (temperature,
	// top_p, top_k, min_p, repeat_penalty, num_ctx, num_predict, stop).
	Parameters map[string]any `json:"parameters,omitempty"`
	// Files (uploaded blobs) and Quantize are not supported.
	Files    map[string]string `json:"files,omitempty"`
	Quantize string            `json:"quantize,omitempty"`
	Stream   *bool             `json:"stream,omitempty"`
}

// olCopyRequest is the body of POST /api/copy.
type olCopyRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// olDeleteRequest is the body of DELETE /api/delete.
type olDeleteRequest struct {
	Model string `json:"model"`
	Name  string `json:"name,omitempty"`
}

// olStatus is a line of /api/create's streamed reply.
type olStatus struct {
	Status string `json:"status"`
}

// manageRegistry returns the registry and its models directory, writing
// a 400 when the server cannot manage models.
func (s *Server) manageRegistry(w http.ResponseWriter) *registry {
	if s.reg == nil {
		ollamaErrors(w, invalid("", "this server serves a fixed set of models; start lem serve with --models DIR (or several models) to manage them"))
		return nil
	}
	if s.reg.modelsDir == "" {
		ollamaErrors(w, invalid("", "this server has no models directory to write to"))
		return nil
	}
	return s.reg
}

// newModelName checks the name of a model to create or copy to.
func newModelName(name, param string) (string, *Error) {
	name = strings.TrimSuffix(strings.TrimSpace(name), ":latest")
	if name == "" {
		return "", invalid(param, "is required")
	}
	if err := catalog.ValidName(name); err != nil {
		return "", invalid(param, "%v", err)
	}
	return name, nil
}

// manifestOf returns the manifest a registry model stands for: its own
// (a created model) or one naming its weights.
func (r *registry) manifestOf(e *entry) catalog.Manifest {
	if e.spec.Entry != "" {
		if m, err := catalog.ReadManifest(filepath.Join(r.modelsDir, e.spec.Entry)); err == nil {
			return *m
		}
	}
	abs, err := filepath.Abs(e.spec.Path)
	if err != nil {
		abs = e.spec.Path
	}
	return catalog.Manifest{From: abs}
}

// isModelPath checks that path holds a model: a GGUF file, or a folder
// with a config.json or GGUF files.
func isModelPath(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		if !hub.IsGGUF(path) {
			return errors.New("a model file must be a GGUF file (.gguf)")
		}
		return nil
	}
	files, err := hub.SnapshotFiles(path)
	if err != nil {
		return err
	}
	if !slices.Contains(files, "config.json") && !slices.ContainsFunc(files, hub.IsGGUF) {
		return errors.New("the folder holds no model (no config.json, no GGUF file)")
	}
	return nil
}

func (s *Server) ollamaCreate(w http.ResponseWriter, r *http.Request) {
	var o olCreateRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	reg := s.manageRegistry(w)
	if reg == nil {
		return
	}
	name, perr := newModelName(cmpOr(o.Model, o.Name), "model")
	if perr != nil {
		ollamaErrors(w, perr)
		return
	}
	switch {
	case len(o.Files) > 0:
		ollamaErrors(w, invalid("files", "uploaded files are not supported; give from: a model's name or the path of a GGUF file or model directory under a model root"))
		return
	case o.Quantize != "":
		ollamaErrors(w, invalid("quantize", "quantizing is not supported here; use lem quant"))
		return
	case o.From == "":
		ollamaErrors(w, invalid("from", "is required: a model's name or the path of a GGUF file or model directory under a model root"))
		return
	}
	// From names a served model, else a path under a model root.
	var mf catalog.Manifest
	reg.mu.Lock()
	base, ferr := reg.find(o.From)
	if ferr == nil && len(reg.order) == 1 && !slices.Contains([]string{base.spec.Name, base.spec.Name + ":latest"}, strings.TrimSpace(o.From)) {
		base = nil // the only model answers to any name; a path is meant
	}
	if ferr == nil && base != nil {
		mf = reg.manifestOf(base)
	}
	reg.mu.Unlock()
	if base == nil || ferr != nil {
		p, err := gatePath(o.From, reg.roots)
		if err != nil {
			ollamaErrors(w, AsError(err))
			return
		}
		if err := isModelPath(p); err != nil {
			ollamaErrors(w, invalid("from", "%s: %v", o.From, err))
			return
		}
		mf = catalog.Manifest{From: p}
	}
	if o.Template != "" {
		mf.Template = o.Template
	}
	if o.System != "" {
		mf.System = o.System
	}
	if len(o.Parameters) > 0 {
		params := maps.Clone(mf.Parameters)
		if params == nil {
			params = map[string]any{}
		}
		maps.Copy(params, o.Parameters)
		mf.Parameters = params
	}
	sp, err := manifestSpec(name, &mf, reg.defaults)
	if err != nil {
		ollamaErrors(w, invalid("parameters", "%v", err))
		return
	}
	if err := reg.checkNewName(name); err != nil {
		ollamaErrors(w, err)
		return
	}
	stream := o.Stream == nil || *o.Stream
	var out *ndjsonOut
	if stream {
		out = newNDJSON(w)
		out.line(olStatus{Status: "reading model metadata"})
		out.line(olStatus{Status: "writing manifest"})
	}
	if err := reg.putManifest(name, &mf, sp); err != nil {
		if stream {
			out.line(map[string]string{"error": AsError(err).Message})
			return
		}
		ollamaErrors(w, AsError(err))
		return
	}
	s.log.Info("model created", "model", name, "from", mf.From)
	if stream {
		out.line(olStatus{Status: "success"})
		return
	}
	writeJSON(w, http.StatusOK, olStatus{Status: "success"})
}

// manifestSpec returns the spec of a manifest's model.
func manifestSpec(name string, mf *catalog.Manifest, opts ModelOptions) (ModelSpec, error) {
	return SpecFromEntry(catalog.Entry{Name: name, Where: "models", Path: mf.From, Manifest: mf}, opts)
}

// putManifest writes the manifest of the model name and serves it: a
// new model, or a created one replaced (its loaded copy, if any, is
// unloaded, or retired while busy, so the next request loads the new
// settings). A model of that name that is not a manifest is kept (409).
func (r *registry) putManifest(name string, mf *catalog.Manifest, sp ModelSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.nameFree(name); err != nil {
		return err
	}
	e := r.entries[name]
	if _, err := catalog.WriteManifest(r.modelsDir, name, mf, e != nil); err != nil {
		if errors.Is(err, catalog.ErrExists) {
			return &Error{Status: http.StatusConflict, Code: CodeInvalidRequest, Param: "model",
				Message: fmt.Sprintf("the models directory already holds %q: %v", name, err)}
		}
		return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
	}
	if e == nil {
		r.entries[name] = &entry{spec: sp}
		r.order = append(r.order, name)
		return nil
	}
	if e.cur != nil {
		r.unloadLocked(e.cur)
	}
	e.spec.Path, e.spec.Options, e.spec.Entry = sp.Path, sp.Options, sp.Entry
	return nil
}

// checkNewName checks that name may be written by create or copy: a
// new name, or that of a model made by create or copy.
func (r *registry) checkNewName(name string) *Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nameFree(name)
}

// nameFree is checkNewName, called with r.mu held.
func (r *registry) nameFree(name string) *Error {
	e := r.entries[name]
	if e != nil && (e.spec.Entry == "" || !catalog.HasManifest(filepath.Join(r.modelsDir, e.spec.Entry))) {
		return &Error{Status: http.StatusConflict, Code: CodeInvalidRequest, Param: "model",
			Message: fmt.Sprintf("a model named %q exists and is not one made by create or copy; delete it first or choose another name", name)}
	}
	if t, ok := r.aliases[name]; ok {
		return &Error{Status: http.StatusConflict, Code: CodeInvalidRequest, Param: "model",
			Message: fmt.Sprintf("%q is an alias of the model %q; choose another name", name, t)}
	}
	return nil
}

func (s *Server) ollamaCopy(w http.ResponseWriter, r *http.Request) {
	var o olCopyRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	reg := s.manageRegistry(w)
	if reg == nil {
		return
	}
	if strings.TrimSpace(o.Source) == "" {
		ollamaErrors(w, invalid("source", "is required"))
		return
	}
	dst, perr := newModelName(o.Destination, "destination")
	if perr != nil {
		ollamaErrors(w, perr)
		return
	}
	reg.mu.Lock()
	src := reg.lookup(o.Source)
	var mf catalog.Manifest
	if src != nil {
		mf = reg.manifestOf(src)
	}
	reg.mu.Unlock()
	if src == nil {
		ollamaErrors(w, errModelNotFound(o.Source))
		return
	}
	sp, err := manifestSpec(dst, &mf, reg.defaults)
	if err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	sp.KeepAlive, sp.Pinned = src.spec.KeepAlive, false
	if err := reg.putManifest(dst, &mf, sp); err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	s.log.Info("model copied", "source", src.spec.Name, "destination", dst)
	w.WriteHeader(http.StatusOK)
}

// lookup returns the entry of exactly name (with or without ":latest"),
// not an alias nor the only model for any name. Called with r.mu held.
func (r *registry) lookup(name string) *entry {
	name = strings.TrimSpace(name)
	if e := r.entries[name]; e != nil {
		return e
	}
	return r.entries[strings.TrimSuffix(name, ":latest")]
}

func (s *Server) ollamaDelete(w http.ResponseWriter, r *http.Request) {
	var o olDeleteRequest
	if err := s.readJSON(r, &o); err != nil {
		ollamaErrors(w, err)
		return
	}
	if s.reg == nil {
		ollamaErrors(w, invalid("", "this server serves a fixed set of models; start lem serve with --models DIR (or several models) to manage them"))
		return
	}
	name := cmpOr(o.Model, o.Name)
	if strings.TrimSpace(name) == "" {
		ollamaErrors(w, invalid("model", "is required"))
		return
	}
	if err := s.reg.remove(r, name); err != nil {
		ollamaErrors(w, AsError(err))
		return
	}
	s.log.Info("model deleted", "model", name)
	w.WriteHeader(http.StatusOK)
}

// remove deletes the model name from the models directory and stops
// serving it: a loaded model is unloaded first, or retired while busy
// (its requests finish, then it closes). A model given to the server as
// a path is not in the models directory and is refused (400).
func (r *registry) remove(req *http.Request, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.lookup(name)
	if e == nil {
		if t, ok := r.aliases[strings.TrimSpace(name)]; ok {
			return invalid("model", "%q is an alias of %q from the server's configuration; delete %[2]q, or change the configuration", name, t)
		}
		return errModelNotFound(name)
	}
	if e.spec.Entry == "" || r.modelsDir == "" {
		return invalid("model", "the model %q was given to lem serve as the path %s, not found in the models directory, so there is nothing to delete; restart the server without it to stop serving it", e.spec.Name, e.spec.Path)
	}
	t, err := catalog.Find(e.spec.Entry, catalog.Dirs{Models: r.modelsDir})
	if err != nil {
		var nf *catalog.NotFoundError
		if errors.As(err, &nf) {
			return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("model %q: its entry is gone from the models directory: %v", e.spec.Name, err)}
		}
		return invalid("model", "%v", err)
	}
	// Wait for a load under way to end, then unload (or retire).
	for e.loading != nil {
		ch := e.loading
		r.mu.Unlock()
		select {
		case <-ch:
		case <-req.Context().Done():
			r.mu.Lock()
			return req.Context().Err()
		}
		r.mu.Lock()
	}
	if r.entries[e.spec.Name] != e {
		return errModelNotFound(name) // deleted meanwhile
	}
	if err := catalog.Remove(t); err != nil {
		return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
	}
	if in := e.cur; in != nil {
		r.unloadLocked(in)
	}
	delete(r.entries, e.spec.Name)
	r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == e.spec.Name })
	for a, target := range r.aliases {
		if target == e.spec.Name {
			delete(r.aliases, a)
		}
	}
	return nil
}

// specOf returns the spec of the model name and whether it is loaded.
func (r *registry) specOf(name string) (ModelSpec, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.find(name)
	if err != nil {
		return ModelSpec{}, false, err
	}
	return e.spec, e.cur != nil, nil
}

// showFromFiles answers /api/show for a model that is not loaded, from
// its files: its configuration, chat template and the deployer's
// parameters, without loading its weights.
func (s *Server) showFromFiles(w http.ResponseWriter, sp ModelSpec) {
	st := describeStore(sp.Path)
	format := "safetensors"
	if st.gguf {
		format = "gguf"
	}
	info := map[string]any{"general.basename": sp.Name}
	caps := []string{"completion"}
	var tmpl *chat.Set
	if format == "gguf" {
		if f, err := gguf.Open(sp.Path); err == nil {
			tmpl, _ = chat.FromGGUF(f)
			if arch, ok := f.String("general.architecture"); ok {
				info["general.architecture"] = arch
			}
			f.Close()
		}
	} else if cfg, err := model.LoadConfig(sp.Path); err == nil {
		arch := cfg.ModelType
		info["general.architecture"] = arch
		info[arch+".context_length"] = cfg.MaxPositionEmbeddings
		info[arch+".embedding_length"] = cfg.HiddenSize
		info[arch+".block_count"] = cfg.NumHiddenLayers
		info[arch+".attention.head_count"] = cfg.NumAttentionHeads
		info[arch+".attention.head_count_kv"] = cfg.NumKeyValueHeads
		info[arch+".vocab_size"] = cfg.VocabSize
		if model.IsEncoder(arch) {
			caps = []string{"embedding"}
		} else {
			tmpl, _ = chat.LoadDir(sp.Path, chat.Options{})
		}
	}
	template := ""
	if tmpl != nil && tmpl.Default() != nil {
		template = tmpl.Default().Source()
	}
	d := &sp.Options.Defaults
	if d.Template != "" {
		template = d.Template
	}
	if strings.Contains(template, "tools") {
		caps = append(caps, "tools")
	}
	var params strings.Builder
	if sp.Options.Context > 0 {
		fmt.Fprintf(&params, "%-30s %d\n", "num_ctx", sp.Options.Context)
	}
	pm := d.parameters()
	for _, k := range slices.Sorted(maps.Keys(pm)) {
		switch v := pm[k].(type) {
		case []string:
			for _, x := range v {
				fmt.Fprintf(&params, "%-30s %s\n", k, strconv.Quote(x))
			}
		default:
			fmt.Fprintf(&params, "%-30s %v\n", k, v)
		}
	}
	var mf strings.Builder
	fmt.Fprintf(&mf, "# Modelfile generated by lem\nFROM %s\n", filepath.Base(filepath.Clean(sp.Path)))
	if template != "" {
		fmt.Fprintf(&mf, "TEMPLATE \"\"\"%s\"\"\"\n", template)
	}
	if d.System != "" {
		fmt.Fprintf(&mf, "SYSTEM \"\"\"%s\"\"\"\n", d.System)
	}
	for _, line := range strings.Split(strings.TrimSpace(params.String()), "\n") {
		if line != "" {
			fmt.Fprintf(&mf, "PARAMETER %s\n", line)
		}
	}
	var mod any
	if fi, err := os.Stat(sp.Path); err == nil {
		mod = fi.ModTime().UTC()
	}
	reply := map[string]any{
		"modelfile":    mf.String(),
		"parameters":   params.String(),
		"template":     template,
		"details":      olDetails{Format: format, QuantizationLevel: st.quant},
		"model_info":   info,
		"capabilities": caps,
		"modified_at":  mod,
	}
	if d.System != "" {
		reply["system"] = d.System
	}
	writeJSON(w, http.StatusOK, reply)
}

// ndjsonOut writes a streamed reply of JSON lines.
type ndjsonOut struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newNDJSON(w http.ResponseWriter) *ndjsonOut {
	w.Header().Set("Content-Type", mediaNDJSON)
	w.WriteHeader(http.StatusOK)
	return &ndjsonOut{w: w, rc: http.NewResponseController(w)}
}

// line writes v as one line and flushes it.
func (o *ndjsonOut) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	o.w.Write(append(b, '\n'))
	o.rc.Flush()
}

// manageRoutes are Ollama's model management routes.
func (s *Server) manageRoutes() []route {
	return []route{
		{pattern: "POST /api/create", errors: ollamaErrors, handler: s.ollamaCreate,
			dialect: "Ollama", summary: "Create a model from a model's name or a GGUF file or model directory under a model root (a manifest in the models directory; the weights are not copied)", request: olCreateRequest{}, response: olStatus{}, stream: mediaNDJSON, errorBody: ollamaErrorValue},
		{pattern: "POST /api/copy", errors: ollamaErrors, handler: s.ollamaCopy,
			dialect: "Ollama", summary: "Copy a model under another name (a manifest naming the same weights)", request: olCopyRequest{}, response: noBody{}, errorBody: ollamaErrorValue},
		{pattern: "DELETE /api/delete", errors: ollamaErrors, handler: s.ollamaDelete,
			dialect: "Ollama", summary: "Delete a model of the models directory (a loaded one is unloaded once its requests end)", request: olDeleteRequest{}, response: noBody{}, errorBody: ollamaErrorValue},
	}
}
