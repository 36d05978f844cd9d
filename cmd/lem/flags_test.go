package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"
)

// TestNoMmapOption checks that --no-mmap, with LEM_NO_MMAP as its default,
// reaches engine.Options and leaves the environment alone.
func TestNoMmapOption(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want bool
	}{
		{"", nil, false},
		{"", []string{"--no-mmap"}, true},
		{"1", nil, true},
		{"1", []string{"--no-mmap=false"}, false},
	} {
		t.Setenv("LEM_NO_MMAP", tc.env)
		rf := runFlags{quiet: true}
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		rf.register(fs)
		if err := fs.Parse(append([]string{"--device", "cpu", "--threads", "1"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		opts, err := rf.options()
		if err != nil {
			t.Fatal(err)
		}
		if opts.NoMmap != tc.want {
			t.Errorf("LEM_NO_MMAP=%q %v: NoMmap %v, want %v", tc.env, tc.args, opts.NoMmap, tc.want)
		}
		if got := os.Getenv("LEM_NO_MMAP"); got != tc.env {
			t.Errorf("LEM_NO_MMAP=%q %v: the environment became %q", tc.env, tc.args, got)
		}
	}
}
