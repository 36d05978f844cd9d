package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestWelfareFlags(t *testing.T) {
	dir := t.TempDir()
	words := filepath.Join(dir, "words.txt")
	os.WriteFile(words, []byte("# extra\nzorblax\n"), 0o644)
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("two words\n"), 0o644)
	audit := filepath.Join(dir, "audit.jsonl")
	parse := func(args ...string) *welfareFlags {
		var w welfareFlags
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		w.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &w
	}
	// Off by default.
	if cfg, _, err := parse().config(); cfg != nil || err != nil {
		t.Errorf("without --welfare: %v, %v", cfg, err)
	}
	cfg, closeAudit, err := parse("--welfare", "--welfare-words", words, "--welfare-audit", audit, "--welfare-turns", "3").config()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAudit()
	if cfg.Turns != 3 || cfg.Threshold != 2 || len(cfg.Words) != 1 || cfg.Words[0] != "zorblax" || cfg.Audit == nil || cfg.AuditText {
		t.Errorf("config %+v", cfg)
	}
	if fi, err := os.Stat(audit); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file: %v, %v", fi, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--welfare-audit", audit}, "--welfare-audit needs --welfare"},
		{[]string{"--welfare", "--welfare-words", bad}, "line 1"},
		{[]string{"--welfare", "--welfare-words", filepath.Join(dir, "none")}, "--welfare-words"},
		{[]string{"--welfare", "--welfare-decay", "1.5"}, "--welfare-decay"},
		{[]string{"--welfare", "--welfare-audit", filepath.Join(dir, "no", "such")}, "--welfare-audit"},
	} {
		if _, _, err := parse(tt.args...).config(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}
