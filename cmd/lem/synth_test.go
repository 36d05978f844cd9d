package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/model"
)

// execLem runs the lem command line with args and returns its standard
// output; standard error goes to the test log.
func execLem(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	if errOut.Len() > 0 {
		t.Logf("stderr:\n%s", errOut.String())
	}
	return out.String(), err
}

func TestSynthCmd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	out, err := execLem(t, "synth", "--like", "tiny", "--dtype", "f16", "--seed", "3", "-o", dir)
	if err != nil {
		t.Fatalf("synth: %v\n%s", err, out)
	}
	if !strings.Contains(out, "wrote "+dir) || !strings.Contains(out, "F16") {
		t.Errorf("output %q", out)
	}
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ModelType != "qwen3" || cfg.DType != "float16" {
		t.Errorf("config: model_type %q dtype %q", cfg.ModelType, cfg.DType)
	}

	out, err = execLem(t, "synth", "--list")
	if err != nil || !strings.Contains(out, "llama-3.2-1b") || !strings.Contains(out, "1.24B") {
		t.Errorf("synth --list: %v\n%s", err, out)
	}
}

func TestSynthCmdErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad like", []string{"synth", "--like", "gpt-5", "-o", dir}, `unknown model "gpt-5"`},
		{"bad dtype", []string{"synth", "--like", "tiny", "--dtype", "int3", "-o", dir}, `unknown dtype "int3"`},
		{"no like", []string{"synth", "-o", dir}, "--like is required"},
		{"no output", []string{"synth", "--like", "tiny"}, "-o DIR is required"},
		{"missing tokenizer", []string{"synth", "--like", "tiny", "-o", dir, "--tokenizer", filepath.Join(dir, "nope")}, "nope"},
		{"extra arg", []string{"synth", "--like", "tiny", "-o", dir, "extra"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := execLem(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
