//go:build !amd64 || purego

package cpu

// This build has no AMX kernels.

const amxAsmDequant = false

var amxKernel = amxTileGo

func amxEnable() bool { return false }

func amxCvtBF16(dst *uint16, src *float32, n int) { panic("cpu: no AMX assembly") }

func amxDqQ8_0(dst, codes, scales *byte, perm *uint16) { panic("cpu: no AMX assembly") }

func amxDqQ4_0(dst, codes, scales *byte, perm *uint16) { panic("cpu: no AMX assembly") }

func amxDqQ4_K(dst, codes, scales *byte, perm *uint16) { panic("cpu: no AMX assembly") }

func amxDqQ6_K(dst, codes, scales *byte, perm *uint16) { panic("cpu: no AMX assembly") }
