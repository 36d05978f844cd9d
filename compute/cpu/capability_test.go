package cpu

import (
	"testing"

	"github.com/lem-engine/lem/compute"
)

// TestCapabilities checks the device capabilities the CPU backend answers
// through package compute's interfaces (lem bench reads them there).
func TestCapabilities(t *testing.T) {
	var b compute.Backend = New(2)
	th, ok := b.(compute.Threader)
	if !ok || th.Threads() != 2 {
		t.Fatalf("compute.Threader: %v, want 2 threads", ok)
	}
	m, ok := b.(compute.BandwidthMeter)
	if !ok {
		t.Fatal("not a compute.BandwidthMeter")
	}
	if got := m.BandwidthMethod(); got != "streaming read" {
		t.Errorf("BandwidthMethod = %q", got)
	}
	bps, err := m.MemoryBandwidth(8 << 20)
	if err != nil || !(bps > 0) {
		t.Errorf("MemoryBandwidth(8 MiB) = %v, %v; want a positive rate", bps, err)
	}
	for _, size := range []int64{0, -1} {
		if _, err := m.MemoryBandwidth(size); err == nil {
			t.Errorf("MemoryBandwidth(%d): no error", size)
		}
	}
}
