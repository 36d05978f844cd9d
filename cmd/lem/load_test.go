package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/lem-engine/lem/loadgen"
)

// startServe runs lem serve with lem-tiny on a free loopback port, with
// the extra flags, and returns its URL; the server stops when the test
// ends.
func startServe(t *testing.T, flags ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCmd()
	root.SetOut(io.Discard)
	root.SetErr(pw)
	root.SetArgs(append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, flags...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var url string
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		var line struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
			url = line.URL
		}
	}
	if url == "" {
		t.Fatal("lem serve logged no URL")
	}
	go io.Copy(io.Discard, pr)
	return url
}

// TestLoadCmd drives lem serve with lem load and reads both outputs.
func TestLoadCmd(t *testing.T) {
	url := startServe(t)
	out, err := execLem(t, "load", "--url", url, "-c", "2", "-n", "4", "--prompt-tokens", "16",
		"--output-tokens", "8", "--rate", "100", "--arrival", "fixed", "--shared-prefix", "0.5", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep loadgen.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Model != "lem-tiny" || rep.Completed != 4 || rep.Failed != 0 || rep.Concurrency != 2 ||
		rep.Rate != 100 || rep.Arrival != "fixed" || rep.SharedPrefix != 0.5 || rep.E2E.N != 4 {
		t.Errorf("report: %s", out)
	}
	out, err = execLem(t, "load", "--url", url, "--model", "lem-tiny", "-n", "2", "--endpoint", "completions",
		"--prompt-tokens", "8", "--output-tokens", "4")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"model lem-tiny", "completed       2 of 2 sent", "TTFT", "ITL", "E2E", "p99", "requests/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{
		{"load", "--url", url, "-c", "0"},
		{"load", "--url", url, "--endpoint", "embeddings"},
		{"load", "--url", url, "--shared-prefix", "-0.1"},
		{"load", "--url", url, "extra"},
	} {
		if _, err := execLem(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestLoadHelp(t *testing.T) {
	out, err := execLem(t, "help", "load")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--concurrency", "--rate", "--arrival", "--shared-prefix", "--output-tokens",
		"llama-server", "p99", "ignore_eos"} {
		if !strings.Contains(out, want) {
			t.Errorf("lem help load lacks %s", want)
		}
	}
}
