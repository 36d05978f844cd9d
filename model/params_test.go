package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestFamilyParamsOutsideConfig checks that the parameter structs Config
// embeds are defined in family files and that config.go does not name
// them outside Config's declaration: a family's parameters are read
// through registerParams, so adding a family adds no read call to
// config.go.
func TestFamilyParamsOutsideConfig(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if files[name], err = parser.ParseFile(fset, name, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	config := files["config.go"]
	if config == nil {
		t.Fatal("config.go not parsed")
	}
	// The struct types declared in each file.
	declaredIn := map[string]string{}
	for name, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, ok := ts.Type.(*ast.StructType); ok {
					declaredIn[ts.Name.Name] = name
				}
			}
			return true
		})
	}
	var cfg *ast.StructType
	ast.Inspect(config, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			cfg = ts.Type.(*ast.StructType)
		}
		return cfg == nil
	})
	if cfg == nil {
		t.Fatal("no Config in config.go")
	}
	// Family fields: the embedded structs, and SSM.
	params := map[string]bool{}
	for _, fld := range cfg.Fields.List {
		id, ok := fld.Type.(*ast.Ident)
		if !ok || declaredIn[id.Name] == "" {
			continue
		}
		name := id.Name
		if len(fld.Names) == 1 {
			name = fld.Names[0].Name
		} else if len(fld.Names) > 1 {
			continue
		}
		if file := declaredIn[id.Name]; file == "config.go" {
			if len(fld.Names) == 0 {
				t.Errorf("Config embeds %s, declared in config.go rather than a family file", id.Name)
			}
			continue
		}
		params[name] = true
	}
	if len(params) == 0 {
		t.Fatal("found no family parameter fields in Config")
	}
	for _, d := range config.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && params[sel.Sel.Name] {
				t.Errorf("config.go: %s names family parameters %s (%s)", fn.Name.Name, sel.Sel.Name, fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
