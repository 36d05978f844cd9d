// Package levels holds no code: its test encodes the level of every package
// of the module and fails when a package imports one on its own level or a
// higher one, or when two top-level folders import each other (see
// DEVELOPERS.md, Layout). Run
//
//	go test ./internal/levels -v
//
// to print the levels.
package levels
