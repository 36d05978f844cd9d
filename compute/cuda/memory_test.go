package cuda

import (
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestFreeMemory checks that FreeMemory reports the device's free memory:
// within its size, less by an allocation while it is held, and more
// again once it is freed (the pool's blocks count as free).
func TestFreeMemory(t *testing.T) {
	b := openGPU(t)
	var r compute.MemoryReporter = b
	free0, err := r.FreeMemory()
	if err != nil {
		t.Fatal(err)
	}
	if free0 <= 0 || free0 > b.info.Memory {
		t.Fatalf("free memory %d of a device of %d bytes", free0, b.info.Memory)
	}
	const size = 256 << 20
	x := b.Alloc(compute.F32, size/4)
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	free1, err := r.FreeMemory()
	if err != nil {
		t.Fatal(err)
	}
	b.Free(x)
	free2, err := r.FreeMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("free: %d, holding %d bytes: %d, after freeing them: %d (device %d)", free0, size, free1, free2, b.info.Memory)
	if d := free0 - free1; d < size || d > size+64<<20 {
		t.Errorf("an allocation of %d bytes took %d bytes of free memory", size, d)
	}
	if d := free2 - free1; d < size {
		t.Errorf("freeing %d bytes gave back %d bytes of free memory", size, d)
	}
}
