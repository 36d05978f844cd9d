// Package cpu is the CPU backend of package compute: every tensor operation
// a model's forward pass uses, on float32 activations and weights kept in
// their stored type.
//
// Hot loops are Go assembly chosen at run time through golang.org/x/sys/cpu:
// AVX-512 with VNNI (and AMX-BF16 for prefill on CPUs that have it) or AVX2,
// each with a pure-Go fallback (the purego build tag forces it) that the
// tests pin the assembly against. Quantized GGUF weights (Q8_0, Q4_0, Q5_0,
// Q4_K, Q6_K) are repacked at load into interleaved rows for the integer
// kernels (qpack.go); other stored types are read in place. Work is split
// across a fixed pool of threads (pool.go); decode products prefetch ahead by
// a distance chosen per weight type and CPU vendor (LEM_CPU_PREFETCH
// overrides it).
//
// The repetitive assembly is written by the generators gen_*.go (through
// go generate); edit a generator, not its output.
package cpu
