// Package compat holds end-to-end tests of lem's server driven by the
// official client SDKs. It is a module of its own so that the SDKs stay out
// of lem's go.mod.
package compat
