package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoTemplate is returned when a model ships no chat template.
var ErrNoTemplate = errors.New("chat: model has no chat template")

// DefaultName is the name of a model's main template.
const DefaultName = "default"

// Set holds the chat templates of one model: the default one and named
// alternatives such as "tool_use".
type Set struct {
	byName map[string]*Template
}

// specialTokenKeys are the special tokens Hugging Face passes to templates
// (its special_tokens_map).
var specialTokenKeys = []string{
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
}

// LoadDir loads the chat templates of a Hugging Face model directory:
//
//   - tokenizer_config.json's "chat_template", either a string (the
//     default template) or a list of {"name", "template"} objects;
//   - chat_template.jinja, which takes the place of the default template;
//   - additional_chat_templates/NAME.jinja, one named template each;
//   - chat_template.json's "chat_template", only when none of the above
//     gives a default template.
//
// The special tokens of tokenizer_config.json (bos_token, eos_token, …, each
// a string or an {"content": ...} object) become the templates'
// SpecialTokens; entries of opts.SpecialTokens take precedence. Each
// template is named by its key (opts.Name is not used). It returns an error
// wrapping ErrNoTemplate when the directory has no template.
func LoadDir(dir string, opts Options) (*Set, error) {
	sources := make(map[string]string)
	special := make(map[string]string)

	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if data, err := os.ReadFile(cfgPath); err == nil {
		if err := parseTokenizerConfig(data, sources, special); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}

	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if data, err := os.ReadFile(jinjaPath); err == nil {
		sources[DefaultName] = string(data)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}

	extraDir := filepath.Join(dir, "additional_chat_templates")
	entries, err := os.ReadDir(extraDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || e.IsDir() || name == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(extraDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("chat: %w", err)
		}
		sources[name] = string(data)
	}

	if _, ok := sources[DefaultName]; !ok {
		jsonPath := filepath.Join(dir, "chat_template.json")
		if data, err := os.ReadFile(jsonPath); err == nil {
			var proc struct {
				ChatTemplate json.RawMessage `json:"chat_template"`
			}
			if err := json.Unmarshal(data, &proc); err != nil {
				return nil, fmt.Errorf("chat: %s: %w", jsonPath, err)
			}
			if err := parseChatTemplateField(proc.ChatTemplate, sources); err != nil {
				return nil, fmt.Errorf("chat: %s: chat_template: %w", jsonPath, err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("chat: %w", err)
		}
	}

	if len(sources) == 0 {
		return nil, fmt.Errorf("%w (in %s)", ErrNoTemplate, dir)
	}
	maps.Copy(special, opts.SpecialTokens)
	opts.SpecialTokens = special
	s, err := NewSet(sources, opts)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", dir, err)
	}
	return s, nil
}

// parseTokenizerConfig reads the chat templates and special tokens of a
// tokenizer_config.json.
func parseTokenizerConfig(data []byte, sources, special map[string]string) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return err
	}
	if cfg == nil {
		return errors.New("not a JSON object")
	}
	if err := parseChatTemplateField(cfg["chat_template"], sources); err != nil {
		return fmt.Errorf("chat_template: %w", err)
	}
	for _, key := range specialTokenKeys {
		raw, ok := cfg[key]
		if !ok {
			continue
		}
		tok, ok, err := specialToken(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if ok {
			special[key] = tok
		}
	}
	return nil
}

// parseChatTemplateField reads a chat_template value: absent or null, a
// template string, or a list of {"name": ..., "template": ...}.
func parseChatTemplateField(raw json.RawMessage, sources map[string]string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var src string
	if err := json.Unmarshal(raw, &src); err == nil {
		sources[DefaultName] = src
		return nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return errors.New("want a string or a list of {name, template} objects")
	}
	for i, e := range list {
		if e.Name == nil || e.Template == nil || *e.Name == "" {
			return fmt.Errorf("entry %d: want a non-empty name and a template", i)
		}
		if _, dup := sources[*e.Name]; dup {
			return fmt.Errorf("entry %d: template %q given twice", i, *e.Name)
		}
		sources[*e.Name] = *e.Template
	}
	return nil
}

// specialToken reads a special token given as a string, as an object with a
// "content" string (an AddedToken), or as null (ok false).
func specialToken(raw json.RawMessage) (tok string, ok bool, err error) {
	if string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &tok); err == nil {
		return tok, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, errors.New(`want a string, null or an object with a "content" string`)
	}
	return *obj.Content, true, nil
}

// NewSet compiles named template sources (such as a GGUF file's
// tokenizer.chat_template, under DefaultName, and tokenizer.chat_template.NAME
// entries) with the same options; each template's Name is its key.
func NewSet(sources map[string]string, opts Options) (*Set, error) {
	s := &Set{byName: make(map[string]*Template, len(sources))}
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		o := opts
		o.Name = name
		t, err := Parse(sources[name], o)
		if err != nil {
			return nil, err
		}
		s.byName[name] = t
	}
	return s, nil
}

// Default returns the default template, or nil if the set has none.
func (s *Set) Default() *Template { return s.byName[DefaultName] }

// Lookup returns the template of the given name, or nil.
func (s *Set) Lookup(name string) *Template { return s.byName[name] }

// Names returns the names of the templates, sorted.
func (s *Set) Names() []string { return slices.Sorted(maps.Keys(s.byName)) }

// Select picks a template as apply_chat_template does: the named one when
// name is not empty; otherwise "tool_use" when the request has tools and
// the set has one; otherwise the default template.
func (s *Set) Select(name string, hasTools bool) (*Template, error) {
	if name != "" {
		if t := s.byName[name]; t != nil {
			return t, nil
		}
		return nil, fmt.Errorf("chat: no template named %q (have %s)", name, strings.Join(s.Names(), ", "))
	}
	if hasTools {
		if t := s.byName["tool_use"]; t != nil {
			return t, nil
		}
	}
	if t := s.byName[DefaultName]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("chat: no default template and no name given (have %s)", strings.Join(s.Names(), ", "))
}
