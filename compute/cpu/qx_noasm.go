//go:build !amd64 || purego

package cpu

// quantizeAsm reports false: this build has no assembly quantizers.
func quantizeAsm(dst []byte, x []float32, f xfmt, off int32) bool { return false }
