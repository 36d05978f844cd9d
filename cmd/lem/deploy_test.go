package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := execLemIn(t, "", args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{"lem ", "go:   go1.", "cpu:  ", "cuda: "} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: no %q in\n%s", args, want, out)
			}
		}
	}
	saved := version
	defer func() { version = saved }()
	version = "v9.8.7"
	if v := buildVersion(); !strings.HasPrefix(v, "v9.8.7") {
		t.Errorf("buildVersion with -X main.version=v9.8.7: %q", v)
	}
}

// dockerfile is the instructions of deploy/Dockerfile, continuation lines
// joined, comments dropped.
func dockerfile(t *testing.T) [][2]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	line := ""
	for sc.Scan() {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if c, ok := strings.CutSuffix(s, "\\"); ok {
			line += c + " "
			continue
		}
		line += s
		op, arg, _ := strings.Cut(line, " ")
		out = append(out, [2]string{strings.ToUpper(op), strings.TrimSpace(arg)})
		line = ""
	}
	return out
}

// TestDockerfile checks the image's recipe where no container engine
// runs: the build stage's command builds lem here, the result runs, the
// final stages are distroless and unprivileged, and the default command
// parses as lem serve flags on the exposed port.
func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var build, cmd, expose string
	var froms []string
	user := false
	for _, in := range ins {
		switch in[0] {
		case "FROM":
			froms = append(froms, in[1])
		case "RUN":
			if strings.Contains(in[1], "go build") {
				build = in[1]
			}
		case "CMD":
			cmd = in[1]
		case "EXPOSE":
			expose = in[1]
		case "USER":
			user = in[1] == "nonroot"
		}
	}
	if !slices.ContainsFunc(froms, func(s string) bool { return strings.HasPrefix(s, "gcr.io/distroless/base-debian12:nonroot AS cpu") }) {
		t.Errorf("no distroless cpu stage among %q", froms)
	}
	if !user {
		t.Error("the image does not run as nonroot")
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.HasSuffix(build, "./cmd/lem") {
		t.Fatalf("build step %q: want a CGO_ENABLED=0 build of ./cmd/lem", build)
	}
	args := regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(cmd, -1)
	if len(args) < 3 || args[0][1] != "serve" {
		t.Fatalf("CMD %q: want lem serve …", cmd)
	}
	var flags []string
	for _, a := range args[1:] {
		flags = append(flags, a[1])
	}
	serve := newServeCmd()
	if err := serve.ParseFlags(flags); err != nil {
		t.Errorf("CMD %q does not parse: %v", cmd, err)
	}
	if addr := serve.Flags().Lookup("addr").Value.String(); !strings.HasSuffix(addr, ":"+expose) || !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("CMD listens on %q, EXPOSE %q", addr, expose)
	}
	if testing.Short() {
		t.Skip("the build step compiles lem from scratch (-trimpath)")
	}
	// The build step, as the build stage runs it (its shell variables set).
	out := filepath.Join(t.TempDir(), "lem")
	line := strings.ReplaceAll(build, "${VERSION}", "v0.0.0-docker")
	line = strings.Replace(line, "-o /out/lem", "-o "+out, 1)
	c := exec.Command("sh", "-c", line)
	c.Dir = repoRoot(t)
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	b, err := exec.Command(out, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "lem v0.0.0-docker") {
		t.Errorf("the image's lem version: %v\n%s", err, b)
	}
}

// TestSystemdUnit has systemd verify deploy/lem.service, its binary path
// pointed at a lem built here.
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze not found (CI installs systemd)")
		}
		t.Skip("systemd-analyze not found")
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "lem.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "lem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lem")
	build.Dir = repoRoot(t)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	unit := strings.ReplaceAll(string(raw), "/usr/local/bin/lem", bin)
	if unit == string(raw) {
		t.Fatal("the unit does not run /usr/local/bin/lem")
	}
	path := filepath.Join(dir, "lem.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
	// verify also reports on units it pulls in from the host; only what
	// it says of lem.service counts.
	var bad []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "lem.service") {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 || (err != nil && len(out) == 0) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestRelease runs the release script (without its tag check) and checks
// both binaries: the amd64 one runs and names its version, the arm64 one
// is an arm64 executable.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lem twice from scratch")
	}
	dist := t.TempDir()
	c := exec.Command("bash", "scripts/release.sh", "v0.0.0-test")
	c.Dir = repoRoot(t)
	c.Env = append(os.Environ(), "DIST="+dist, "LEM_RELEASE_ANY=1")
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	b, err := exec.Command(filepath.Join(dist, "lem-v0.0.0-test-linux-amd64"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "lem v0.0.0-test") {
		t.Errorf("amd64 --version: %v\n%s", err, b)
	}
	f, err := elf.Open(filepath.Join(dist, "lem-v0.0.0-test-linux-arm64"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("arm64 binary is for %v", f.Machine)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil || strings.Count(string(sums), "lem-v0.0.0-test-linux-") != 2 {
		t.Errorf("SHA256SUMS: %v\n%s", err, sums)
	}
}

// TestDependencyLicences checks that README's licence table names every
// module the lem binary is built from.
func TestDependencyLicences(t *testing.T) {
	c := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./cmd/lem")
	c.Dir = repoRoot(t)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	mods := strings.Fields(string(out))
	slices.Sort(mods)
	for _, m := range slices.Compact(mods) {
		if m != strings.TrimSpace(string(self)) && !strings.Contains(string(readme), "| `"+m+"` |") {
			t.Errorf("README's licence table lacks %s", m)
		}
	}
}
