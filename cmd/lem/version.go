package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lem-engine/lem/compute/device"
)

// version is set at build time with -ldflags "-X main.version=…"; without
// it the module version that `go install PATH@VERSION` records is used.
var version = ""

// releaseVersion returns the version of this binary: the one set at build
// time, else the module's ("(devel)" from a clone becomes "dev").
func releaseVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// buildVersion returns releaseVersion with the commit and its date when
// the build recorded them.
func buildVersion() string {
	v := releaseVersion()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var rev, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	var extra []string
	extra = append(extra, "commit "+rev[:min(12, len(rev))])
	if when != "" {
		extra = append(extra, when)
	}
	if modified {
		extra = append(extra, "modified")
	}
	return fmt.Sprintf("%s (%s)", v, strings.Join(extra, ", "))
}

// versionText is what `lem version` and `lem --version` print: the
// version, the Go toolchain and platform, the CPU kernels, and the GPUs
// the NVIDIA driver shows (or why none is used).
func versionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lem %s\n", buildVersion())
	fmt.Fprintf(&b, "go:   %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, l := range device.Describe() {
		fmt.Fprintln(&b, l)
	}
	return b.String()
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the build and the devices lem can use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}
