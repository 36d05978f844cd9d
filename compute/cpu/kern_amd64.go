//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// detectLevel returns the best kernel level this CPU runs.
func detectLevel() level {
	x := cpu.X86
	if !x.HasAVX2 || !x.HasFMA || !x.HasF16C {
		return levelGeneric
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL {
		return levelAVX512
	}
	return levelAVX2
}
