package cuda

import (
	"fmt"
	"os"
	"unsafe"
)

// Programmatic dependent launch (sm_90 and newer): a kernel launched with
// it may be scheduled while the kernel before it in the stream still runs,
// once every block of that one has signalled (griddepcontrol.launch_dependents)
// or ended. It must wait (griddepcontrol.wait) before it touches memory the
// earlier kernel writes; what it does before — the decode kernels start
// loading their weights — overlaps the earlier kernel's tail and the launch
// latency, which between a hundred short kernels is much of a decode step.
// Only kernels that wait before any dependent access are launched this way
// (see pdl_wait in kernels/common.cuh). The short kernels of a paged
// decode step's attention (rope_prep, kvstore_paged, the paged attention
// kernel, attend_combine) signal before they wait, so each is resident
// before the one it waits for ends, and the next product starts loading
// its weights meanwhile. LEM_CUDA_PDL=0 turns it off.

// launchAttrProgrammaticSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const launchAttrProgrammaticSerialization = 6

// launchAttr is CUlaunchAttribute: an id, padding, a 64-byte value.
type launchAttr struct {
	id  uint32
	_   uint32
	val [64]byte
}

// launchConfig is CUlaunchConfig.
type launchConfig struct {
	grid, block [3]uint32
	shared      uint32
	_           uint32
	stream      uintptr
	attrs       uintptr
	nattrs      uint32
	_           uint32
}

var _ [56 - unsafe.Sizeof(launchConfig{})]byte
var _ [unsafe.Sizeof(launchConfig{}) - 56]byte
var _ [72 - unsafe.Sizeof(launchAttr{})]byte

// pdlEnabled reads LEM_CUDA_PDL.
func pdlEnabled() bool { return os.Getenv("LEM_CUDA_PDL") != "0" }

// launchPDL launches o (its parameters already in w.params) with
// programmatic stream serialization allowed.
func (w *owner) launchPDL(o *op) error {
	w.attr = launchAttr{id: launchAttrProgrammaticSerialization}
	w.attr.val[0] = 1
	w.launch = launchConfig{grid: o.grid, block: o.block, shared: o.shared, stream: w.stream,
		attrs: uintptr(unsafe.Pointer(&w.attr)), nattrs: 1}
	r := call(w.d.cuLaunchKernelEx, uintptr(unsafe.Pointer(&w.launch)), o.fn, uintptr(unsafe.Pointer(&w.params[0])), 0)
	if r != cudaSuccess {
		return fmt.Errorf("kernel %s grid %v block %v: %w", o.name, o.grid, o.block, w.d.check("cuLaunchKernelEx", r))
	}
	return nil
}
