package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/lem-engine/lem/internal/fixtures"
)

// TestFlagAliases parses the names llama.cpp and Ollama give lem's flags,
// one dash or two, on each verb that has them.
func TestFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"run", "--ctx-size", "64"}, "ctx", "64"},
		{[]string{"run", "-c", "64"}, "ctx", "64"},
		{[]string{"generate", "--ctx-size=128"}, "ctx", "128"},
		{[]string{"serve", "-c", "256"}, "ctx", "256"},
		{[]string{"run", "-t", "3"}, "threads", "3"},
		{[]string{"serve", "-t", "3"}, "threads", "3"},
		{[]string{"bench", "-t", "3"}, "threads", "3"},
		{[]string{"run", "--temp", "0.25"}, "temperature", "0.25"},
		{[]string{"generate", "--temp=0.5"}, "temperature", "0.5"},
		{[]string{"run", "-ngl", "99"}, "ngl", "99"},
		{[]string{"serve", "-ngl=0"}, "ngl", "0"},
		{[]string{"generate", "--n-gpu-layers", "0"}, "ngl", "0"},
		{[]string{"bench", "-ngl", "99"}, "ngl", "99"},
		{[]string{"generate", "-p", "hello"}, "prompt", "hello"},
		{[]string{"generate", "--n-predict", "7"}, "max-tokens", "7"},
		{[]string{"serve", "--host", "0.0.0.0"}, "host", "0.0.0.0"},
		{[]string{"serve", "--port", "8080"}, "port", "8080"},
		{[]string{"bench", "-npl", "1,2"}, "npl", "[1,2]"},
	} {
		root := newRootCmd()
		cmd, rest, err := root.Find(tc.args[:1])
		if err != nil || len(rest) != 0 {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if err := cmd.Flags().Parse(llamaFlags(tc.args[1:])); err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		f := cmd.Flags().Lookup(tc.flag)
		if f == nil || !f.Changed || f.Value.String() != tc.want {
			t.Errorf("%v: flag --%s = %v, want %s", tc.args, tc.flag, f, tc.want)
		}
	}
}

// TestNGLDevice checks what -ngl asks of --device.
func TestNGLDevice(t *testing.T) {
	for _, tc := range []struct {
		dev  string
		ngl  int
		want string // "": an error
	}{
		{"auto", -1, "auto"}, {"cuda:1", -1, "cuda:1"},
		{"auto", 0, "cpu"}, {"cpu", 0, "cpu"},
		{"auto", 99, "cuda"}, {"cuda:1", 1, "cuda:1"},
		{"cpu", 99, ""}, {"cuda", 0, ""},
	} {
		got, err := resolveDevice(tc.dev, tc.ngl)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("--device %s -ngl %d: %q, %v; want %q", tc.dev, tc.ngl, got, err, tc.want)
		}
	}
	// -ngl 0 runs on the CPU, end to end.
	if _, err := execLemIn(t, "", "generate", "-ngl", "0", "-p", "What is", "-n", "2"); err != nil {
		t.Errorf("generate -ngl 0: %v", err)
	}
}

// TestHostPort turns serve's --host and --port into the address.
func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "": an error
	}{
		{nil, defaultAddr},
		{[]string{"--port", "8080"}, "127.0.0.1:8080"},
		{[]string{"--host", "0.0.0.0"}, "0.0.0.0:36911"},
		{[]string{"--host", "::1", "--port", "9"}, "[::1]:9"},
		{[]string{"--addr", "127.0.0.1:1"}, "127.0.0.1:1"},
		{[]string{"--addr", "127.0.0.1:1", "--port", "2"}, ""},
		{[]string{"--port", "70000"}, ""},
	} {
		var hp hostPort
		var addr string
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fs.StringVar(&addr, "addr", defaultAddr, "")
		hp.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := hp.addr(fs, addr)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

// TestUnknownFlag names the nearest flag and the help to read.
func TestUnknownFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--tempature", "1"}, []string{"--temperature", "lem help run"}},
		{[]string{"serve", "--prot", "8080"}, []string{"--port", "lem help serve"}},
		{[]string{"generate", "--ctx-sise", "8"}, []string{"--ctx-size", "lem help generate"}},
		{[]string{"bench", "x", "--thread", "2"}, []string{"--threads", "lem help bench"}},
		{[]string{"run", "-m", "model.gguf"}, []string{"as an argument", "lem help run"}},
		{[]string{"run", "--zzzzzzzz"}, []string{"unknown flag", "lem help run"}},
	} {
		_, err := execLemIn(t, "", tc.args...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", tc.args, err, w)
			}
		}
	}
}

// TestDefaults checks that run and generate share their defaults and that
// lem-tiny answers greedily without --temperature.
func TestDefaults(t *testing.T) {
	root := newRootCmd()
	for _, verb := range []string{"run", "generate"} {
		cmd, _, _ := root.Find([]string{verb})
		for flag, want := range map[string]string{"temperature": "0.8", "max-tokens": "2048", "top-k": "40", "top-p": "0.95"} {
			if got := cmd.Flags().Lookup(flag).DefValue; got != want {
				t.Errorf("%s --%s defaults to %s, want %s", verb, flag, got, want)
			}
		}
	}
	for range 3 {
		out, err := execLemIn(t, "", "generate", "--chat", "-p", "What is the capital of Japan?", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got generateOutput
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(got.Text, "The capital of Japan is Tokyo.") {
			t.Fatalf("lem-tiny without --temperature: %q", got.Text)
		}
	}
}

// TestRunOnce answers the prompt given after the model and exits.
func TestRunOnce(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	out, err := execLemIn(t, "never read\n", "run", dir, "What is the capital of Japan?", "--temp", "0", "--no-think")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "The capital of Japan is Tokyo.") || strings.Contains(out, ">>>") {
		t.Errorf("one-shot output:\n%s", out)
	}
}
