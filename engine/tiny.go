package engine

import (
	"encoding/json"
	"fmt"

	"github.com/lem-engine/lem/chat"
	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
	"github.com/lem-engine/lem/tiny"
	"github.com/lem-engine/lem/tokenizer"
)

// OpenTiny loads lem-tiny, the small chat model built into lem (see package
// tiny), named tiny.Name. Its weights are used in place from the program's
// read-only data: nothing is copied to the heap or written to disk, and
// Close has nothing to release.
func OpenTiny(opts Options) (*Model, error) {
	b := opts.Backend
	if b == nil {
		return nil, errNoBackend
	}
	fail := func(file string, err error) (*Model, error) {
		return nil, fmt.Errorf("%s: embedded %s: %w", tiny.Name, file, err)
	}
	cfg, err := model.ParseConfig([]byte(tiny.Config))
	if err != nil {
		return fail("config.json", err)
	}
	st, err := safetensors.Parse(tiny.Name+"/model.safetensors", tiny.Weights())
	if err != nil {
		return fail("model.safetensors", err)
	}
	net, reads, err := model.LoadReads(cfg, fileSource{st}, b)
	if err != nil {
		return fail("model.safetensors", err)
	}
	m := &Model{Name: tiny.Name, Net: net, Backend: b, loaded: &model.Loaded{Model: net, Reads: reads}, Embedding: DefaultEmbedConfig}
	special, err := tinySpecialTokens()
	if err != nil {
		return fail("tokenizer_config.json", err)
	}
	if m.Tokenizer, err = tinyTokenizer(special); err != nil {
		return fail("tokenizer.json", err)
	}
	tmpl, err := chat.NewSet(map[string]string{chat.DefaultName: tiny.ChatTemplate}, chat.Options{SpecialTokens: special})
	if err != nil {
		return fail("chat_template.jinja", err)
	}
	m.Templates = tmpl
	if m.GenConfig, err = model.ParseGenerationConfig([]byte(tiny.GenerationConfig)); err != nil {
		return fail("generation_config.json", err)
	}
	m.StopIDs = stopIDs(m)
	return m, nil
}

// tinySpecialTokens reads the special tokens tokenizer_config.json names
// (eos_token, pad_token, …; null ones are left out), as chat.LoadDir passes
// them to templates.
func tinySpecialTokens() (map[string]string, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal([]byte(tiny.TokenizerConfig), &cfg); err != nil {
		return nil, err
	}
	special := make(map[string]string)
	for _, key := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		raw, ok := cfg[key]
		if !ok || string(raw) == "null" {
			continue
		}
		var tok string
		if err := json.Unmarshal(raw, &tok); err != nil {
			return nil, fmt.Errorf("%s: want a string or null: %w", key, err)
		}
		special[key] = tok
	}
	return special, nil
}

// tinyTokenizer builds the tokenizer from tokenizer.json with the BOS and
// EOS tokenizer_config.json names, as tokenizer.LoadDir does.
func tinyTokenizer(special map[string]string) (*tokenizer.Tokenizer, error) {
	spec, err := tokenizer.ParseSpec([]byte(tiny.Tokenizer))
	if err != nil {
		return nil, err
	}
	for key, id := range map[string]*int32{"bos_token": &spec.BOS, "eos_token": &spec.EOS} {
		tok, ok := special[key]
		if !ok {
			continue
		}
		*id = -1
		for _, a := range spec.Added {
			if a.Content == tok {
				*id = a.ID
			}
		}
		if *id < 0 {
			return nil, fmt.Errorf("%s %q is not an added token", key, tok)
		}
	}
	return tokenizer.New(*spec)
}

// fileSource adapts one parsed safetensors file to model.Source.
type fileSource struct{ f *safetensors.File }

func (s fileSource) Lookup(name string) (model.Stored, bool) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return model.Stored{}, false
	}
	var dt compute.DType
	switch t.DType {
	case safetensors.F32:
		dt = compute.F32
	case safetensors.F16:
		dt = compute.F16
	case safetensors.BF16:
		dt = compute.BF16
	default:
		// The embedded file holds only float tensors; anything else is
		// left for the backend to reject.
		dt = 255
	}
	return model.Stored{DType: dt, Shape: t.Shape, Data: t.Data}, true
}
