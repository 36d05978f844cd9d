package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"time"

	"github.com/lem-engine/lem/catalog"
	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/engine"
)

// ModelDefaults are a model's defaults for requests, set by the deployer
// (--config, or the manifest of /api/create): each applies when a request
// does not set it; a request's own value wins. They apply in one place
// for every dialect: the sampling parameters in Model.SampleDefaults,
// the rest in Model.PrepareContext.
type ModelDefaults struct {
	Temperature   *float64 `json:"temperature,omitempty"`
	TopP          *float64 `json:"top_p,omitempty"`
	TopK          *int     `json:"top_k,omitempty"`
	MinP          *float64 `json:"min_p,omitempty"`
	RepeatPenalty *float64 `json:"repeat_penalty,omitempty"`
	// MaxTokens is the token limit of a request that sets none.
	MaxTokens *int `json:"max_tokens,omitempty"`
	// Stop are the stop sequences of a request that gives none.
	Stop []string `json:"stop,omitempty"`
	// System is the system prompt of a chat that has none.
	System string `json:"system,omitempty"`
	// Template is a chat template (Jinja) used instead of the model's.
	Template string `json:"template,omitempty"`
}

// check validates the defaults' values.
func (d *ModelDefaults) check() error {
	for _, f := range []struct {
		name   string
		v      *float64
		lo, hi float64
	}{{"temperature", d.Temperature, 0, 100}, {"top_p", d.TopP, 0, 1}, {"min_p", d.MinP, 0, 1}, {"repeat_penalty", d.RepeatPenalty, 0, 100}} {
		if f.v != nil && (math.IsNaN(*f.v) || *f.v < f.lo || *f.v > f.hi) {
			return fmt.Errorf("%s must be between %g and %g (got %g)", f.name, f.lo, f.hi, *f.v)
		}
	}
	if d.TopK != nil && *d.TopK < 0 {
		return fmt.Errorf("top_k must not be negative (got %d)", *d.TopK)
	}
	if d.MaxTokens != nil && *d.MaxTokens < 1 {
		return fmt.Errorf("max_tokens must be at least 1 (got %d)", *d.MaxTokens)
	}
	if d.Template != "" {
		if _, err := chat.Parse(d.Template, chat.Options{Name: "template"}); err != nil {
			return fmt.Errorf("template: %w", err)
		}
	}
	return nil
}

// apply sets the sampling parameters the defaults name.
func (d *ModelDefaults) apply(p *engine.SampleParams) {
	if d.Temperature != nil {
		p.Temperature = float32(*d.Temperature)
	}
	if d.TopP != nil {
		p.TopP = float32(*d.TopP)
	}
	if d.TopK != nil {
		p.TopK = *d.TopK
	}
	if d.MinP != nil {
		p.MinP = float32(*d.MinP)
	}
	if d.RepeatPenalty != nil {
		p.RepetitionPenalty = float32(*d.RepeatPenalty)
	}
}

// parameters returns the defaults by Ollama's names (for /api/show).
func (d *ModelDefaults) parameters() map[string]any {
	out := map[string]any{}
	set := func(k string, v *float64) {
		if v != nil {
			out[k] = *v
		}
	}
	set("temperature", d.Temperature)
	set("top_p", d.TopP)
	set("min_p", d.MinP)
	set("repeat_penalty", d.RepeatPenalty)
	if d.TopK != nil {
		out["top_k"] = *d.TopK
	}
	if d.MaxTokens != nil {
		out["num_predict"] = *d.MaxTokens
	}
	if len(d.Stop) > 0 {
		out["stop"] = d.Stop
	}
	return out
}

// ollamaParameterNames are the parameters a manifest takes, by Ollama's
// names.
var ollamaParameterNames = []string{"temperature", "top_p", "top_k", "min_p", "repeat_penalty", "num_ctx", "num_predict", "stop"}

// defaultsFromParameters reads Ollama's parameters (a manifest's, or
// /api/create's) into defaults and a context length (0: none).
func defaultsFromParameters(params map[string]any) (ModelDefaults, int, error) {
	var d ModelDefaults
	ctx := 0
	num := func(k string, v any) (float64, error) {
		f, ok := v.(float64)
		if !ok {
			if n, isInt := v.(int); isInt {
				return float64(n), nil
			}
			return 0, fmt.Errorf("parameter %s: want a number, got %v", k, v)
		}
		return f, nil
	}
	integer := func(k string, v any) (int, error) {
		f, err := num(k, v)
		if err != nil {
			return 0, err
		}
		if f != math.Trunc(f) || math.Abs(f) > 1<<31 {
			return 0, fmt.Errorf("parameter %s: want a whole number, got %v", k, v)
		}
		return int(f), nil
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		v := params[k]
		var err error
		switch k {
		case "temperature", "top_p", "min_p", "repeat_penalty":
			var f float64
			if f, err = num(k, v); err == nil {
				p := &f
				switch k {
				case "temperature":
					d.Temperature = p
				case "top_p":
					d.TopP = p
				case "min_p":
					d.MinP = p
				default:
					d.RepeatPenalty = p
				}
			}
		case "top_k", "num_predict", "num_ctx":
			var n int
			if n, err = integer(k, v); err == nil {
				switch k {
				case "top_k":
					d.TopK = &n
				case "num_predict":
					d.MaxTokens = &n
				default:
					if n < 1 {
						err = fmt.Errorf("parameter num_ctx must be at least 1 (got %d)", n)
					}
					ctx = n
				}
			}
		case "stop":
			switch s := v.(type) {
			case string:
				d.Stop = []string{s}
			case []any:
				for _, x := range s {
					str, ok := x.(string)
					if !ok {
						return d, 0, fmt.Errorf("parameter stop: want strings, got %v", x)
					}
					d.Stop = append(d.Stop, str)
				}
			case []string:
				d.Stop = s
			default:
				err = fmt.Errorf("parameter stop: want a string or a list of strings, got %v", v)
			}
		default:
			err = fmt.Errorf("unknown parameter %q (lem takes %v)", k, ollamaParameterNames)
		}
		if err != nil {
			return d, 0, err
		}
	}
	return d, ctx, d.check()
}

// SpecFromEntry returns the spec of a model of the models directory:
// for a manifest (see catalog.Manifest), the weights it names with its
// template, system prompt and parameters as the model's defaults. opts
// are the options the model starts from.
func SpecFromEntry(e catalog.Entry, opts ModelOptions) (ModelSpec, error) {
	sp := ModelSpec{Name: e.Name, Path: e.Path, Options: opts}
	if e.Where == "models" {
		sp.Entry = e.Name
	}
	if mf := e.Manifest; mf != nil {
		d, ctx, err := defaultsFromParameters(mf.Parameters)
		if err != nil {
			return sp, fmt.Errorf("model %s: %w", e.Name, err)
		}
		d.System, d.Template = mf.System, mf.Template
		if err := d.check(); err != nil {
			return sp, fmt.Errorf("model %s: %w", e.Name, err)
		}
		sp.Options.Defaults = d
		if ctx > 0 {
			sp.Options.Context = ctx
		}
	}
	return sp, nil
}

// ModelsConfig is the file --config names: aliases and per-model
// defaults.
type ModelsConfig struct {
	// Aliases map a name clients may use to a model's name or a path.
	Aliases map[string]string `json:"aliases,omitempty"`
	// Models map a model's name (or an alias) to its settings.
	Models map[string]ModelConfig `json:"models,omitempty"`
}

// ModelConfig is one model's settings in a ModelsConfig.
type ModelConfig struct {
	ModelDefaults
	// Context is the context length of each sequence.
	Context int `json:"context,omitempty"`
	// KeepAlive is the model's keep_alive: a duration ("10m", "-1") or
	// seconds.
	KeepAlive json.RawMessage `json:"keep_alive,omitempty"`
	// Pinned models are never unloaded by keep_alive or the memory limit.
	Pinned bool `json:"pinned,omitempty"`
}

// LoadModelsConfig reads and checks a --config file.
func LoadModelsConfig(path string) (*ModelsConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var c ModelsConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	for name, mc := range c.Models {
		if err := mc.check(); err != nil {
			return nil, fmt.Errorf("--config %s: model %s: %w", path, name, err)
		}
		if mc.Context < 0 {
			return nil, fmt.Errorf("--config %s: model %s: context must not be negative", path, name)
		}
		if _, err := parseKeepAlive(mc.KeepAlive); err != nil {
			return nil, fmt.Errorf("--config %s: model %s: %v", path, name, err)
		}
	}
	for alias, target := range c.Aliases {
		if alias == "" || target == "" {
			return nil, fmt.Errorf("--config %s: an alias or its target is empty (%q: %q)", path, alias, target)
		}
	}
	return &c, nil
}

// Apply applies the configuration to specs: an alias naming a path that
// is not one of the models adds it (resolve turns a name or path into a
// model's path), and each model's settings become its defaults (over
// those of a manifest). It returns the specs and the aliases of names.
func (c *ModelsConfig) Apply(specs []ModelSpec, resolve func(string) (string, error)) ([]ModelSpec, map[string]string, error) {
	index := map[string]int{}
	for i, sp := range specs {
		index[sp.Name] = i
	}
	aliases := map[string]string{}
	for _, alias := range slices.Sorted(maps.Keys(c.Aliases)) {
		target := c.Aliases[alias]
		if _, ok := index[alias]; ok {
			return nil, nil, fmt.Errorf("--config: alias %q is the name of a model", alias)
		}
		if _, ok := index[target]; ok {
			aliases[alias] = target
			continue
		}
		path, err := resolve(target)
		if err != nil {
			return nil, nil, fmt.Errorf("--config: alias %q: %w", alias, err)
		}
		opts := ModelOptions{}
		if len(specs) > 0 {
			opts = specs[0].Options
			opts.Defaults = ModelDefaults{}
		}
		index[alias] = len(specs)
		specs = append(specs, ModelSpec{Name: alias, Path: path, Options: opts})
	}
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		mc := c.Models[name]
		target := name
		if t, ok := aliases[name]; ok {
			target = t
		}
		i, ok := index[target]
		if !ok {
			return nil, nil, fmt.Errorf("--config: settings for %q, which is not a served model", name)
		}
		sp := &specs[i]
		d := &sp.Options.Defaults
		md := mc.ModelDefaults
		if md.Temperature != nil {
			d.Temperature = md.Temperature
		}
		if md.TopP != nil {
			d.TopP = md.TopP
		}
		if md.TopK != nil {
			d.TopK = md.TopK
		}
		if md.MinP != nil {
			d.MinP = md.MinP
		}
		if md.RepeatPenalty != nil {
			d.RepeatPenalty = md.RepeatPenalty
		}
		if md.MaxTokens != nil {
			d.MaxTokens = md.MaxTokens
		}
		if md.Stop != nil {
			d.Stop = md.Stop
		}
		if md.System != "" {
			d.System = md.System
		}
		if md.Template != "" {
			d.Template = md.Template
		}
		if mc.Context > 0 {
			sp.Options.Context = mc.Context
		}
		if ka, _ := parseKeepAlive(mc.KeepAlive); ka != nil {
			sp.KeepAlive = *ka
			if *ka == 0 {
				// Unload at once: the smallest duration keeps the meaning
				// (a zero KeepAlive is the registry's default).
				sp.KeepAlive = time.Nanosecond
			}
		}
		if mc.Pinned {
			sp.Pinned = true
		}
	}
	return specs, aliases, nil
}
