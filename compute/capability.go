package compute

// Device capabilities: what a caller may ask a backend (or a Graph) about
// the machine it runs on, beyond the operations. Each is optional; a caller
// asserts the interface, never a concrete backend.

// PrefillChunker is implemented by backends that prefer another number of
// prompt tokens per forward pass during prefill than the caller's default
// (the CUDA backend: its tensor cores want long chunks). A non-positive
// PrefillChunk means no preference.
type PrefillChunker interface {
	PrefillChunk() int
}

// KernelCounter is implemented by Graphs that know how many kernel
// launches one Launch replays (a CUDA graph), so that a caller can report
// the launches per decode step.
type KernelCounter interface {
	Kernels() int
}

// Threader is implemented by backends that compute on the host's threads
// (the CPU backend): Threads returns how many they use.
type Threader interface {
	Threads() int
}

// BandwidthMeter is implemented by backends that can measure the bandwidth
// of the memory that holds their tensors: the bound a decode step, which
// reads every weight once, approaches.
type BandwidthMeter interface {
	// MemoryBandwidth measures it over a buffer of size bytes, which it
	// allocates for the measurement and frees afterwards, and returns the
	// best of a few rounds in bytes per second.
	MemoryBandwidth(size int64) (float64, error)
	// BandwidthMethod says how MemoryBandwidth measures, for a report:
	// "streaming read" (every byte read once), "device copy" (bytes read
	// plus bytes written by device-to-device copies).
	BandwidthMethod() string
}
