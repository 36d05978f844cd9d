//go:build !amd64 || purego

package cpu

// detectLevel returns levelGeneric: this build has no assembly kernels.
func detectLevel() level { return levelGeneric }

var asmKernels []kernelSet

var extraKernels []kernelSet

var asmQKernels []qkernelSet

var qextraKernels []qkernelSet

var asmMLXKernels []mlxKernelSet

const (
	hasVNNI = false
	hasVBMI = false
	hasGFNI = false
)
