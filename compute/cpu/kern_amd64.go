//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// hasVNNI reports whether the CPU has AVX-512 VNNI, which the AVX-512
// quantized kernels need.
var hasVNNI = cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW

// hasVBMI reports whether the CPU has AVX-512 VBMI and BMI2, which the
// four-block Q4_0 kernels need.
var hasVBMI = hasVNNI && cpu.X86.HasAVX512VBMI && cpu.X86.HasBMI2

// hasGFNI reports whether the CPU has AVX-512 GFNI, which some packed kernels
// (see qpack.go) need beside VNNI.
var hasGFNI = hasVNNI && cpu.X86.HasAVX512GFNI

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
