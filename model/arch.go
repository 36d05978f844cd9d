package model

import (
	"fmt"
	"maps"
	"slices"
)

// Arch is one architecture family as the rest of lem sees it: which
// config.json model types it loads, how it loads them, and how it is stored
// as a GGUF file. Each family file registers its Arch values in an init
// function; nothing else in the package names a family.
type Arch struct {
	// ModelTypes are the config.json model_type values the family loads.
	ModelTypes []string
	// Load builds a model from its config and tensors; nil for an encoder
	// family.
	Load LoadFunc
	// Encoder builds an encoder model (see Encoder) from its config and
	// tensors; nil for a decoder family. Exactly one of Load and Encoder
	// is set.
	Encoder EncoderLoadFunc
	// GGUF is the general.architecture under which llama.cpp stores the
	// family, "" when it has no GGUF form.
	GGUF string
	// Tensors names and transforms the tensors of a GGUF file of
	// architecture GGUF, and reading such a file gives ModelTypes[0]. It is
	// nil for a family written under another family's architecture (Mistral
	// as llama), whose files read back as that family.
	Tensors *TensorLayout
	// Keys maps the family's own config keys between config.json and the
	// GGUF metadata (the keys most families share are in sharedKeys).
	// Families written under one architecture share its keys.
	Keys []ConfigKey
	// Meta says how the family's config is stored as GGUF metadata beyond
	// the shared keys (the variations of the shared keys, and the hooks
	// that read and write the family's own). Families written under another
	// family's architecture use that family's.
	Meta ggufMeta
	// Defaults are config.json values, as JSON, that transformers' config
	// class supplies when a key is absent, for families whose published
	// configs rely on them (the text_config of Gemma 3 omits most of its
	// keys).
	Defaults map[string]string
}

var (
	archByType = map[string]*Arch{} // by config.json model_type
	archByGGUF = map[string]*Arch{} // by general.architecture, the families that read GGUF files
)

// Register makes an architecture family available. It panics when a model
// type or GGUF architecture is registered twice.
func Register(a Arch) {
	p := &a
	if (a.Load == nil) == (a.Encoder == nil) || len(a.ModelTypes) == 0 {
		panic("model: Register needs model types and one of Load and Encoder")
	}
	for _, t := range a.ModelTypes {
		if _, dup := archByType[t]; dup {
			panic(fmt.Sprintf("model: model_type %q registered twice", t))
		}
		archByType[t] = p
	}
	if a.GGUF != "" && a.Tensors != nil {
		if _, dup := archByGGUF[a.GGUF]; dup {
			panic(fmt.Sprintf("model: GGUF architecture %q registered twice", a.GGUF))
		}
		archByGGUF[a.GGUF] = p
	}
}

// Supported returns the registered model types, sorted.
func Supported() []string {
	return slices.Sorted(maps.Keys(archByType))
}

// GGUFArchitectures returns the general.architecture values OpenGGUF
// loads, sorted.
func GGUFArchitectures() []string {
	return slices.Sorted(maps.Keys(archByGGUF))
}

// ggufWritable returns the model types that have a GGUF layout, sorted.
func ggufWritable() []string {
	var types []string
	for t, a := range archByType {
		if a.GGUF != "" {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	return types
}

// A paramReader reads one family's parameter struct, a struct that the
// family's file defines and Config embeds.
type paramReader struct {
	// read reads the struct's keys, leaving the first error in f; it runs
	// once the shared keys are read.
	read func(c *Config, f *fields)
	// check, when not nil, validates the struct and fills in derived
	// values once the shared keys are checked and layer_types is known;
	// prefix goes before the keys its errors name.
	check func(c *Config, prefix string) error
}

// familyParams are the registered parameter readers, in registration
// order.
var familyParams []paramReader

// registerParams makes ParseConfig read a family's parameter struct. A
// family file calls it in its init function beside Register. Every config
// runs every reader, whatever its model type: a key means the same to
// every family that has it, and an absent key leaves the struct's
// defaults.
func registerParams(read func(c *Config, f *fields), check func(c *Config, prefix string) error) {
	if read == nil {
		panic("model: registerParams needs a read function")
	}
	familyParams = append(familyParams, paramReader{read, check})
}
