package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lem-engine/lem/chat"
)

// TestServerNamesNoFormat checks that the server's code consumes the
// tool-call formats through chat.ToolFormat only: no file of it (tests
// aside) names a format, by its value in package chat or by its name.
func TestServerNamesNoFormat(t *testing.T) {
	names := []string{`chat\.Tools[A-Z]\w*`}
	for _, f := range chat.ToolFormats() {
		names = append(names, `(?i)\b`+regexp.QuoteMeta(f.Name())+`\b`)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, n := range names {
			if loc := regexp.MustCompile(n).FindIndex(src); loc != nil {
				line := 1 + strings.Count(string(src[:loc[0]]), "\n")
				t.Errorf("%s:%d names a format: %q", file, line, src[loc[0]:loc[1]])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
