package cuda

import (
	"fmt"
	"unsafe"

	"github.com/lem-engine/lem/compute"
)

var _ compute.MemoryReporter = (*Backend)(nil)

// FreeMemory implements compute.MemoryReporter: the device memory the
// driver reports free (cuMemGetInfo), plus the blocks the backend's pool
// holds for reuse, which its allocations take before the driver's.
func (b *Backend) FreeMemory() (int64, error) {
	if b.closed {
		return 0, fmt.Errorf("cuda: FreeMemory of a closed backend")
	}
	var free, total uint64
	err := b.do(func(w *owner) error {
		return w.check("cuMemGetInfo", call(w.d.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: free memory of %s: %w", b.info.Name, err)
	}
	n := int64(free)
	for class, l := range b.free {
		n += class * int64(len(l))
	}
	return n, nil
}
