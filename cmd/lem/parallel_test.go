package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
)

func TestParseByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		err  string
	}{
		{"4GiB", 4 << 30, ""},
		{"512MiB", 512 << 20, ""},
		{"512mib", 512 << 20, ""},
		{"1.5G", 3 << 29, ""},
		{"2 GB", 2e9, ""},
		{"64k", 64 << 10, ""},
		{"1048576", 1 << 20, ""},
		{"100B", 100, ""},
		{"0", 0, ""},
		{"", 0, "not a size"},
		{"GiB", 0, "not a size"},
		{"4XB", 0, "not a size"},
		{"0x10", 0, "not a size"},
		{"NaN", 0, "not a size"},
		{"-1GiB", 0, "negative"},
		{"99999999TiB", 0, "too large"},
	} {
		got, err := parseByteSize(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: %d, %v; want an error containing %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%q: %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// TestServeParallelFlags serves lem-tiny with --parallel and --kv-memory
// and reads them back from /metrics; bad values are refused.
func TestServeParallelFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--parallel", "-1"}, "--parallel: want 0"},
		{[]string{"--parallel", "two"}, "invalid argument"},
		{[]string{"--kv-memory", "4XB"}, "not a size"},
		{[]string{"--kv-memory", "-1GiB"}, "negative"},
		{[]string{"--kv-memory", "1KiB"}, "paged cache"},
	} {
		_, err := execLem(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("serve %v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	out, err := execLemIn(t, "", "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--parallel", "--kv-memory", "4GiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("lem serve --help lacks %s", want)
		}
	}

	url := startServe(t, "--parallel", "3", "--kv-memory", "64MiB")
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lem_sequences_parallel{model="lem-tiny"} 3`, `lem_sequences_running{model="lem-tiny"} 0`, `lem_kv_blocks_total{model="lem-tiny"}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestBenchParallel runs bench's parallel mode, -npl as
// llama-batched-bench spells it, and checks the rows' arithmetic.
func TestBenchParallel(t *testing.T) {
	dir := synthTiny(t)
	out, err := execLem(t, "bench", dir, "-npl", "1,2", "-p", "16", "-n", "8", "--threads", "2", "--json")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out)
	}
	if len(rep.Parallel) != 2 || len(rep.Tests) != 0 || rep.ModelType != "qwen3" {
		t.Fatalf("report: %s", out)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }
	for i, p := range rep.Parallel {
		b := i + 1
		switch {
		case p.B != b || p.PP != 16 || p.TG != 8 || p.NKV != b*24:
			t.Errorf("row %d: %+v, want B %d, PP 16, TG 8, N_KV %d", i, p, b, b*24)
		case !(p.TPP > 0 && p.TTG > 0) || !near(p.T, p.TPP+p.TTG):
			t.Errorf("row %d: T_PP %v + T_TG %v against T %v", i, p.TPP, p.TTG, p.T)
		case !near(p.SPP, float64(b*16)/p.TPP) || !near(p.S, float64(b*24)/p.T):
			t.Errorf("row %d: S_PP %v, S %v for %+v", i, p.SPP, p.S, p)
		case !(p.STG > 0) || p.STG*p.TTG > float64(b*8)+1e-9:
			t.Errorf("row %d: S_TG %v over T_TG %v: more than the %d tokens generated", i, p.STG, p.TTG, b*8)
		case p.Preemptions != 0:
			t.Errorf("row %d: %d preemptions", i, p.Preemptions)
		}
	}

	out, err = execLem(t, "bench", dir, "--npl=2", "-p", "8", "-n", "4", "--threads", "1")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, want := range []string{"|  PP |  TG |   B | N_KV |", "| S_PP t/s |", "| S_TG t/s |", "| --: | --: | --: | ---: |", "qwen3 3.28M BF16", "|   8 |   4 |   2 |   24 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// f16 pools and drafts (the llama-server spellings of the flags).
	if out, err := execLem(t, "bench", dir, "-npl", "2", "-p", "8", "-n", "4", "--threads", "1", "--cache-type-k", "f16", "--draft-max", "3"); err != nil {
		t.Errorf("bench with f16 pools and drafts: %v\n%s", err, out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-npl", "0"}, "at least 1"},
		{[]string{"-npl", "1,x"}, "invalid argument"},
		{[]string{"-npl", "2", "-p", "0"}, "-p must be at least 1"},
		{[]string{"-npl", "2", "-d", "8"}, "-d does not apply"},
		{[]string{"-npl", "2", "-p", "4000", "-n", "200"}, "exceed the model's context"},
		{[]string{"--kv-memory", "1GiB"}, "parallel mode only"},
		{[]string{"-npl", "2", "--kv-memory", "lots"}, "not a size"},
		{[]string{"--kv-type", "f16"}, "parallel mode only"},
		{[]string{"--draft", "3"}, "parallel mode only"},
		{[]string{"-npl", "2", "--kv-type", "f8"}, "want f16 or f32"},
	} {
		_, err := execLem(t, append([]string{"bench", dir, "--mem-buffer", "1"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("bench %v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	if out, err := execLemIn(t, "", "bench", "--help"); err != nil || !strings.Contains(out, "-npl") || !strings.Contains(out, "llama-batched-bench") {
		t.Errorf("bench --help: %v\n%s", err, out)
	}
}
