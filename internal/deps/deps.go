// Package deps pins modules that packages under construction will import.
// Temporary: delete once every module here is imported for real.
package deps

import (
	_ "github.com/ardanlabs/jinja"
	_ "github.com/google/go-cmp/cmp"
	_ "golang.org/x/text/unicode/norm"
)
