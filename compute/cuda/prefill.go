package cuda

// Prefill forms of the modern families' operations: the chunked gated delta
// rule (kernels/deltarule_chunk.cu), the chunked selective scan
// (kernels/ssm_chunk.cu) and mixture-of-experts blocks with the rows
// grouped by expert (kernels/moe_group.cu). A single row (decode) keeps the
// recurrent step and the per-row expert kernels.

// chunkedKernels holds the handles of the prefill kernels.
type chunkedKernels struct {
	drPrep, drChunk uintptr
	ssmCB, ssmChunk uintptr
}

// add lists the kernels in t with where their handles go.
func (k *chunkedKernels) add(t map[string]*uintptr) {
	t["dr_prep"], t["dr_chunk"] = &k.drPrep, &k.drChunk
	t["ssm_cb"], t["ssm_chunk"] = &k.ssmCB, &k.ssmChunk
}

// prefillState is the backend's scratch for the prefill kernels.
type prefillState struct {
	// sequential sends every call through the per-row kernels, as before
	// the chunked forms existed: benchmarks compare the two in one run.
	sequential bool

	delta *buffer // dr_prep's per-(head, chunk) matrices
	cb    *buffer // ssm_cb's C·Bᵀ blocks
}

// Chunk lengths of the chunked kernels (DRC and SSQ in the sources).
const (
	deltaChunk = 32
	ssmChunk   = 32
)

// deltaBlock returns the floats of dr_prep's scratch per (head, chunk):
// W, e^G⊙Q, e^(G_last−G)⊙K [deltaChunk, dk] each, U [deltaChunk, dv], the
// masked QKᵀ [deltaChunk, deltaChunk] and e^(G_last), rounded up to a
// multiple of four.
func deltaBlock(dk, dv int) int {
	n := 3*deltaChunk*dk + deltaChunk*dv + deltaChunk*deltaChunk + 1
	return (n + 3) &^ 3
}
