package compute

// SSM describes the selective state-space layer of Mamba2 (and of the SSM
// half of Falcon-H1 layers): Heads heads of HeadDim channels, each with a
// state of HeadDim × StateSize values, reading the input-dependent B and C
// of one of Groups groups (heads are split evenly and in order between the
// groups).
type SSM struct {
	Heads, HeadDim, Groups, StateSize int
	// A holds each head's decay rate -exp(A_log) (F32 [Heads]); D each
	// head's skip weight (F32 [Heads]); DTBias the bias added to the raw
	// time step before the softplus (F32 [Heads]).
	A, D, DTBias *Tensor
	// DTMin and DTMax clamp the time step after the softplus
	// (time_step_limit); DTMax is +Inf when there is no upper limit.
	DTMin, DTMax float32
}

// SSMScanner is implemented by backends that run the selective scan of
// state-space layers. Architectures that need it check for it at load time.
type SSMScanner interface {
	// SSMScan runs n time steps of the scan. x [n, Heads*HeadDim] holds
	// the inputs, dt [n, Heads] the raw time steps, b and c [n,
	// Groups*StateSize] the input and output projections of the state.
	// For each head, with g its group and h its state [HeadDim, StateSize]:
	//
	//	Δ_t = clamp(softplus(dt_t + DTBias), DTMin, DTMax)
	//	h_t = exp(Δ_t·A) · h_{t-1} + Δ_t · x_t ⊗ b_t[g]
	//	y_t = h_t · c_t[g] + D · x_t
	//
	// state [Heads, HeadDim*StateSize] holds h before the first step
	// (zeros for a fresh sequence) and after the last. y [n,
	// Heads*HeadDim] receives the outputs and must not alias the inputs.
	//
	// The result does not depend on how a sequence is cut into calls;
	// backends compute calls of many rows in the chunked (SSD) form and a
	// single row as one recurrent step.
	SSMScan(y, x, dt, b, c, state *Tensor, p *SSM)
}
