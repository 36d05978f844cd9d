package compute

// DeltaRuler is implemented by backends that run the gated delta rule, the
// linear attention of Gated DeltaNet layers (Qwen3-Next, Qwen3.5).
// Architectures that need it check for it at load time.
//
// Each value head h keeps a state S, a KeyDim×ValueDim matrix, that every
// row folds in. Value head h reads key head DeltaRule.KeyHead(h). For row t,
// with q, k the row's query and key of that key head and v its value:
//
//	q ← Scale · q / √(Σq² + NormEps),  k ← k / √(Σk² + NormEps)
//	g = −exp(ALog[h]) · softplus(a[t,h] + DtBias[h])   (log of the decay)
//	β = σ(b[t,h]), or 2·σ(b[t,h]) with NegEigval        (update strength)
//	S ← exp(g) · S
//	S ← S + k ⊗ β·(v − Sᵀk)
//	dst[t,h] = Sᵀq
//
// The result is the same whether the rows come in one call or several, up
// to rounding: a backend may process a prompt in chunks (the WY form of
// the delta rule) rather than row by row.
type DeltaRuler interface {
	// DeltaRule runs the rule over the n rows of qkv [n, 2·KeyHeads·KeyDim
	// + ValueHeads·ValueDim], whose columns hold the queries of every key
	// head, then their keys, then the values of every value head. a and b
	// [n, ValueHeads] are the decay and update-strength inputs. state
	// [ValueHeads, ValueDim, KeyDim] (F32) holds Sᵀ between calls (row y
	// of a head holds the weights that value column y gives each key
	// dimension): zeros for a fresh sequence. dst is [n,
	// ValueHeads·ValueDim].
	DeltaRule(dst, qkv, a, b, state *Tensor, r *DeltaRule)
}

// DeltaRule describes the linear-attention heads of one layer.
type DeltaRule struct {
	KeyHeads, ValueHeads int // ValueHeads is a multiple of KeyHeads
	KeyDim, ValueDim     int
	// ALog and DtBias are F32 tensors [ValueHeads]: the log decay rate
	// and the time-step bias of each value head.
	ALog, DtBias *Tensor
	// Scale multiplies the normalised queries (KeyDim^-½).
	Scale float32
	// NormEps is added to Σq² and Σk² before the square root.
	NormEps float32
	// Tiled says the value heads are in tiled order: value head h reads
	// key head h mod KeyHeads (the query and key heads repeated as a
	// whole, the order llama.cpp's qwen35 files store). Otherwise they are
	// grouped, as the Hugging Face checkpoints store them: value head h
	// reads key head h / (ValueHeads/KeyHeads) (the heads repeated as
	// repeat_interleave does).
	Tiled bool
	// NegEigval doubles β to the range (0, 2), so that the transition
	// I − β·k⊗k may have negative eigenvalues (OLMo Hybrid's
	// linear_allow_neg_eigval).
	NegEigval bool
}

// BetaScale returns the factor of σ(b) in β: 2 with NegEigval, else 1.
func (r *DeltaRule) BetaScale() float32 {
	if r.NegEigval {
		return 2
	}
	return 1
}

// KeyHead returns the key head that value head h reads.
func (r *DeltaRule) KeyHead(h int) int {
	if r.Tiled {
		return h % r.KeyHeads
	}
	return h / (r.ValueHeads / r.KeyHeads)
}

// Width returns the number of columns of qkv: 2·KeyHeads·KeyDim +
// ValueHeads·ValueDim.
func (r *DeltaRule) Width() int { return 2*r.KeyHeads*r.KeyDim + r.ValueHeads*r.ValueDim }
