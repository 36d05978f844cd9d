//go:build !linux && amd64 && !purego

package cpu

// amxEnable reports false: AMX is used on Linux only.
func amxEnable() bool { return false }
