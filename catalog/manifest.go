package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ManifestFile is the name of the file that makes a folder of the models
// directory a model made from another one's weights (lem create, Ollama's
// /api/create and /api/copy): the folder holds no weights, only this
// file naming them and the settings that differ.
const ManifestFile = "lem-model.json"

// Manifest is a model of the models directory that uses the weights of
// another: From is their path (a directory or a GGUF file), and the other
// fields override the model's own settings.
type Manifest struct {
	// From is the absolute path of the weights.
	From string `json:"from"`
	// Template is a chat template (Jinja, as Hugging Face models ship
	// them) used instead of the model's.
	Template string `json:"template,omitempty"`
	// System is a system prompt given to chats that have none.
	System string `json:"system,omitempty"`
	// Parameters are defaults of requests, by Ollama's names
	// (temperature, top_p, top_k, min_p, repeat_penalty, num_ctx,
	// num_predict, stop).
	Parameters map[string]any `json:"parameters,omitempty"`
}

// ReadManifest reads the manifest of the folder dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.From == "" {
		return nil, fmt.Errorf("reading %s: no \"from\" path", filepath.Join(dir, ManifestFile))
	}
	return &m, nil
}

// HasManifest reports whether dir is a folder made by WriteManifest.
func HasManifest(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil
}

// ValidName checks that name can be an entry of the models directory.
func ValidName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("model name %q is empty or a dot", name)
	case strings.ContainsAny(name, `/\:`) || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' }):
		return fmt.Errorf("model name %q must not contain '/', '\\', ':' or control characters", name)
	case len(name) > 200:
		return fmt.Errorf("model name %q is longer than 200 bytes", name)
	}
	return nil
}

// ErrExists is returned by WriteManifest when the name is taken.
var ErrExists = errors.New("a model of that name exists")

// WriteManifest writes m as the model name of the models directory
// modelsDir (modelsDir/name/lem-model.json). A name already there is
// refused (ErrExists) unless replace is set and it is itself a manifest.
func WriteManifest(modelsDir, name string, m *Manifest, replace bool) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	if m.From == "" {
		return "", errors.New("the manifest has no \"from\" path")
	}
	dir := filepath.Join(modelsDir, name)
	for _, p := range []string{dir, dir + ".gguf"} {
		if _, err := os.Lstat(p); err == nil && !(replace && p == dir && HasManifest(dir)) {
			return "", fmt.Errorf("%s: %w", p, ErrExists)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("writing the model %s: %w", name, err)
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", fmt.Errorf("writing the model %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("writing the model %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, ".lem-model-*.json")
	if err != nil {
		return "", fmt.Errorf("writing the model %s: %w", name, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing the model %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ManifestFile)); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing the model %s: %w", name, err)
	}
	return dir, nil
}
