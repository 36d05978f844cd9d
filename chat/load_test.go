package chat

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFiles creates files (name → content) in a new temporary directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDir(t *testing.T) {
	const probe = "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}"
	tests := []struct {
		name      string
		files     map[string]string
		opts      Options
		names     []string
		renders   map[string]string // template name → render of Input{}
		toolsPick string            // Select("", true) picks this one
	}{
		{
			name: "string template, token forms",
			files: map[string]string{"tokenizer_config.json": `{
				"chat_template": "D` + probe + `",
				"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
				"eos_token": "</s>",
				"pad_token": null
			}`},
			names:     []string{"default"},
			renders:   map[string]string{"default": "D<s>|</s>|"},
			toolsPick: "default",
		},
		{
			name: "named templates",
			files: map[string]string{"tokenizer_config.json": `{
				"chat_template": [
					{"name": "default", "template": "D"},
					{"name": "tool_use", "template": "T"},
					{"name": "rag", "template": "R"}
				]
			}`},
			names:     []string{"default", "rag", "tool_use"},
			renders:   map[string]string{"default": "D", "tool_use": "T", "rag": "R"},
			toolsPick: "tool_use",
		},
		{
			name: "chat_template.jinja and additional templates",
			files: map[string]string{
				"tokenizer_config.json":                    `{"chat_template": "old", "eos_token": "E"}`,
				"chat_template.jinja":                      "J{{ eos_token }}\n",
				"additional_chat_templates/tool_use.jinja": "T",
				"additional_chat_templates/README.md":      "not a template",
			},
			names:     []string{"default", "tool_use"},
			renders:   map[string]string{"default": "JE", "tool_use": "T"},
			toolsPick: "tool_use",
		},
		{
			name:      "chat_template.json fallback, no tokenizer config",
			files:     map[string]string{"chat_template.json": `{"chat_template": "P"}`},
			names:     []string{"default"},
			renders:   map[string]string{"default": "P"},
			toolsPick: "default",
		},
		{
			name:      "options override config tokens",
			files:     map[string]string{"tokenizer_config.json": `{"chat_template": "` + probe + `", "bos_token": "<s>", "eos_token": "</s>"}`},
			opts:      Options{SpecialTokens: map[string]string{"eos_token": "<eot>"}},
			names:     []string{"default"},
			renders:   map[string]string{"default": "<s>|<eot>|"},
			toolsPick: "default",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := LoadDir(writeFiles(t, tt.files), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Names(); !slices.Equal(got, tt.names) {
				t.Errorf("Names() = %v, want %v", got, tt.names)
			}
			for name, want := range tt.renders {
				tmpl := set.Lookup(name)
				if tmpl == nil {
					t.Fatalf("no template %q", name)
				}
				if tmpl.Name() != name {
					t.Errorf("template %q is named %q", name, tmpl.Name())
				}
				got, err := tmpl.Render(Input{})
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("template %q rendered %q, want %q", name, got, want)
				}
			}
			picked, err := set.Select("", true)
			if err != nil {
				t.Fatal(err)
			}
			if picked.Name() != tt.toolsPick {
				t.Errorf("Select(\"\", true) = %q, want %q", picked.Name(), tt.toolsPick)
			}
			if d := set.Default(); d == nil {
				t.Error("no default template")
			} else if picked, _ := set.Select("", false); picked != d {
				t.Error("Select(\"\", false) is not the default template")
			}
		})
	}
}

func TestLoadDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no template", map[string]string{"tokenizer_config.json": `{"bos_token": "<s>"}`}, "no chat template"},
		{"empty directory", map[string]string{}, "no chat template"},
		{"malformed config", map[string]string{"tokenizer_config.json": `{"chat_template": `}, "tokenizer_config.json"},
		{"config not an object", map[string]string{"tokenizer_config.json": `[]`}, "tokenizer_config.json"},
		{"chat_template a number", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "chat_template: want a string or a list"},
		{"entry without a name", map[string]string{"tokenizer_config.json": `{"chat_template": [{"template": "x"}]}`}, "entry 0"},
		{"duplicate name", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "a", "template": "x"}, {"name": "a", "template": "y"}]}`}, "given twice"},
		{"bad token", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "eos_token": 5}`}, "eos_token"},
		{"template does not parse", map[string]string{"chat_template.jinja": "a\n{% if x %}"}, `chat template "default", line 2`},
		{"malformed chat_template.json", map[string]string{"chat_template.json": `{`}, "chat_template.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDir(writeFiles(t, tt.files), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	_, err := LoadDir(writeFiles(t, nil), Options{})
	if !errors.Is(err, ErrNoTemplate) {
		t.Errorf("error %v does not wrap ErrNoTemplate", err)
	}
}

func TestSetSelect(t *testing.T) {
	set, err := NewSet(map[string]string{"tool_use": "T", "rag": "R"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if set.Default() != nil {
		t.Error("Default() is not nil without a default template")
	}
	if _, err := set.Select("", false); err == nil {
		t.Error("Select without a default template succeeded")
	}
	if tmpl, err := set.Select("rag", true); err != nil || tmpl.Name() != "rag" {
		t.Errorf("Select(rag) = %v, %v", tmpl, err)
	}
	if _, err := set.Select("missing", false); err == nil || !strings.Contains(err.Error(), "rag, tool_use") {
		t.Errorf("Select(missing) error = %v", err)
	}
}
