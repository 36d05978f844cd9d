//go:build !amd64 || purego

package cpu

var asmPackKernels []qpackSet
var qpackExtra []qpackSet
var qpackGemmExtra []qpackSet
