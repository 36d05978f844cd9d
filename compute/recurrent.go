package compute

// Convolver is implemented by backends that run the short causal
// convolutions of state-space and linear-attention layers (Mamba2's conv1d,
// LFM2's short convolution, the gated delta rule's q/k/v convolution).
// Architectures that need it check for it at load time.
type Convolver interface {
	// CausalConv applies a depthwise causal convolution of width K along
	// the rows of x [n, C]:
	//
	//	dst[t, c] = bias[c] + Σ_{j<K} w[c, j] · in[t-K+1+j, c]
	//
	// where in continues the K-1 rows held in state [K-1, C] (the inputs
	// that preceded x, oldest first; zeros for a fresh sequence). w is an
	// F32 tensor [C, K]; bias may be nil. With silu set, dst is passed
	// through SiLU. Afterwards state holds the last K-1 input rows. dst
	// must not alias x.
	CausalConv(dst, x, w, bias, state *Tensor, silu bool)
}
