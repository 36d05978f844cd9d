//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func amxTileBF16(a *amxArgs)

//go:noescape
func amxCvtBF16(dst *uint16, src *float32, n int)

//go:noescape
func amxDqQ8_0(dst, codes, scales *byte, perm *uint16)

//go:noescape
func amxDqQ4_0(dst, codes, scales *byte, perm *uint16)

//go:noescape
func amxDqQ4_K(dst, codes, scales *byte, perm *uint16)

//go:noescape
func amxDqQ6_K(dst, codes, scales *byte, perm *uint16)

// amxAsmDequant reports whether the CPU runs the bf16 conversions of
// amx_amd64.s (AVX-512 BF16 and BW).
var amxAsmDequant = hasVNNI && cpu.X86.HasAVX512BF16

// amxKernel is the tile kernel of matMulAMX.
var amxKernel = amxTileBF16
