package levels

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// levels lists the module's packages level by level, leaves first. A
// package may import only packages on lower levels; tests may import any.
// A new package gets a line here.
var levels = []struct {
	name     string
	packages []string
}{
	{"leaves", []string{"compute", "internal/fixtures", "internal/half", "internal/levels", "internal/mmap", "server/webui", "tiny"}},
	{"file formats, the hub", []string{"gguf", "hub", "safetensors"}},
	{"codecs, text, model names", []string{"catalog", "chat", "compute/quant", "internal/archref", "tokenizer"}},
	{"backends, architectures, grammars", []string{"compute/cpu", "compute/cuda", "constrain", "model", "synth"}},
	{"device choice, runtime, converter", []string{"compute/device", "convert", "engine"}},
	{"HTTP APIs", []string{"loadgen", "server"}},
	{"CLI", []string{"cmd/lem"}},
}

// backends are the concrete compute backends. Only chooser imports them:
// the rest of the code sees compute's interfaces, capabilities included.
var backends, chooser = []string{"compute/cpu", "compute/cuda"}, "compute/device"

// root is the module's directory.
const root = "../.."

// modulePath reads the module path from go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(raw)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// imports returns the module's packages (paths relative to the module)
// with the module packages their non-test files import, under any build
// constraint but ignore. Nested modules and testdata are left out.
func imports(t *testing.T, module string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module (compat)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		for _, c := range f.Comments {
			if c.Pos() >= f.Package {
				break
			}
			for _, line := range c.List {
				if expr, err := constraint.Parse(line.Text); err == nil && mentions(expr, "ignore") {
					return nil // a generator run by go generate
				}
			}
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		deps := pkgs[pkg]
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(deps, dep) {
				deps = append(deps, dep)
			}
		}
		pkgs[pkg] = deps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// mentions reports whether the build constraint names tag.
func mentions(e constraint.Expr, tag string) bool {
	switch e := e.(type) {
	case *constraint.TagExpr:
		return e.Tag == tag
	case *constraint.NotExpr:
		return mentions(e.X, tag)
	case *constraint.AndExpr:
		return mentions(e.X, tag) || mentions(e.Y, tag)
	case *constraint.OrExpr:
		return mentions(e.X, tag) || mentions(e.Y, tag)
	}
	return false
}

// unit is the folder a package counts under when folders are compared:
// its top-level folder, or for internal/ and cmd/ (namespaces, not
// layers) the folder below.
func unit(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	if len(parts) > 1 && (parts[0] == "internal" || parts[0] == "cmd") {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

// Listing returns the levels as DEVELOPERS.md shows them.
func listing() string {
	var b strings.Builder
	for i, l := range levels {
		fmt.Fprintf(&b, "%d %-34s %s\n", i, l.name, strings.Join(l.packages, " "))
	}
	return b.String()
}

func TestLevels(t *testing.T) {
	module := modulePath(t)
	pkgs := imports(t, module)
	level := map[string]int{}
	for i, l := range levels {
		for _, p := range l.packages {
			if _, dup := level[p]; dup {
				t.Errorf("package %s is listed twice", p)
			}
			level[p] = i
		}
	}
	for p := range level {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("package %s is listed but not in the module", p)
		}
	}
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		lp, ok := level[p]
		if !ok {
			t.Errorf("package %s has no level: add it to levels", p)
			continue
		}
		for _, dep := range pkgs[p] {
			ld, ok := level[dep]
			switch {
			case !ok:
				// reported as a package of its own
			case slices.Contains(backends, dep) && p != chooser:
				t.Errorf("%s imports the backend %s: only %s chooses a backend", p, dep, chooser)
			case ld >= lp:
				t.Errorf("%s (level %d, %s) imports %s (level %d, %s): a package imports only lower levels",
					p, lp, levels[lp].name, dep, ld, levels[ld].name)
			}
		}
	}

	// Folders: no two import each other, directly or around a cycle.
	edges := map[string]map[string]bool{}
	for _, p := range names {
		for _, dep := range pkgs[p] {
			if from, to := unit(p), unit(dep); from != to {
				if edges[from] == nil {
					edges[from] = map[string]bool{}
				}
				edges[from][to] = true
			}
		}
	}
	if cycle := findCycle(edges); cycle != nil {
		t.Errorf("folders import each other: %s", strings.Join(cycle, " → "))
	}
	t.Logf("levels (leaves first):\n%s", listing())
}

// findCycle returns a cycle of the graph, first node repeated at the end,
// or nil.
func findCycle(edges map[string]map[string]bool) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = open
		stack = append(stack, n)
		var next []string
		for m := range edges[n] {
			next = append(next, m)
		}
		slices.Sort(next)
		for _, m := range next {
			switch state[m] {
			case open:
				i := slices.Index(stack, m)
				return append(slices.Clone(stack[i:]), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return nil
	}
	var nodes []string
	for n := range edges {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		if state[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// TestDevelopersListing checks that DEVELOPERS.md shows the levels as
// TestLevels encodes them.
func TestDevelopersListing(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "DEVELOPERS.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := listing(); !strings.Contains(string(raw), "```\n"+want+"```\n") {
		t.Errorf("DEVELOPERS.md does not show the levels; its Layout section should hold, fenced:\n%s", want)
	}
}
