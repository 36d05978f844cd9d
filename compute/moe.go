package compute

// Mixture of experts.
//
// A mixture-of-experts feed-forward block runs, for each token, a few of
// many expert MLPs and sums their outputs weighted by a router. It takes two
// calls on a backend that implements Experts:
//
//	Route(ids, weights, logits, shared, r)   // pick experts from router logits
//	ApplyExperts(dst, x, ids, weights, f)    // run the picked experts
//
// The router logits (x·Wᵀ plus an optional bias) come from MatMul and Add.
// Routing results stay on the backend, so that a recorded decode step reads
// the experts a new token picks; a backend reads only the picked experts'
// weights.

// Experts is implemented by backends that run mixture-of-experts blocks. It
// is optional: model loaders check for it and fail with an error naming it
// when a backend lacks it.
// ExpertChecker is implemented by backends whose Experts support only some
// expert sets (weight types, shapes). A model loader calls CheckExperts
// once the experts of a layer are loaded, so that an unsupported set is an
// error at load time rather than a failure at the first token.
type ExpertChecker interface {
	CheckExperts(f *ExpertFFN, hidden int) error
}

type Experts interface {
	// Route picks experts for each row of logits [n, r.Experts]. It writes
	// the picked experts' indices to ids [n, r.Slots()] (I32) and their
	// weights to weights [n, r.Slots()] (F32): the r.TopK routed experts
	// in order of decreasing score, then the r.Shared shared experts.
	// shared holds [n, r.Shared] gate logits of the shared experts, whose
	// weights are their sigmoids; nil gives every shared expert weight 1.
	Route(ids, weights, logits, shared *Tensor, r *Routing)
	// ApplyExperts computes dst[n, hidden] = Σⱼ weights[i,j] ·
	// FFN_ids[i,j](x[i]) for every row i of x [n, hidden], reading the
	// weights of the experts that ids names only.
	ApplyExperts(dst, x, ids, weights *Tensor, f *ExpertFFN)
}

// RouteOrder says in which order routing takes the softmax and the top k.
type RouteOrder uint8

// Routing orders.
const (
	// SoftmaxTopK takes the softmax over every expert's logit and keeps
	// the k largest probabilities (Mixtral, Qwen MoE, Gemma 4). With
	// Normalize they are divided by their sum.
	SoftmaxTopK RouteOrder = iota
	// TopKSoftmax keeps the k largest logits and takes the softmax over
	// them only, so the weights sum to 1 (gpt-oss).
	TopKSoftmax
)

func (o RouteOrder) String() string {
	switch o {
	case SoftmaxTopK:
		return "softmax-then-top-k"
	case TopKSoftmax:
		return "top-k-then-softmax"
	}
	return "unknown routing order"
}

// Routing describes how a mixture-of-experts block picks its experts.
type Routing struct {
	// Experts is the number of routed experts (columns of the logits);
	// TopK of them are picked per token.
	Experts, TopK int
	Order         RouteOrder
	// Normalize divides the picked probabilities by their sum
	// (norm_topk_prob); TopKSoftmax weights sum to 1 already.
	Normalize bool
	// ExpertScale, when set, is an F32 tensor [Experts] that multiplies
	// the weight of each picked expert (Gemma 4's per_expert_scale).
	ExpertScale *Tensor
	// Shared is the number of shared experts every token runs; they are
	// experts Experts … Experts+Shared-1 of the ExpertFFN and fill the
	// slots after the routed ones.
	Shared int
}

// Slots returns the number of experts each token runs: TopK + Shared.
func (r *Routing) Slots() int { return r.TopK + r.Shared }

// Expert is the gated MLP of one expert:
//
//	FFN(x) = Down·(act(Gate·x + bg) ⊙ (Up·x + bu)) + bd
//
// Weights have the shape [out, in] and keep their stored dtype.
type Expert struct {
	// Gate and Up are [inter, hidden]. GateUp, when set instead, holds
	// both fused, [2·inter, hidden], the gate's rows first.
	Gate, Up, GateUp *Tensor
	// Down is [hidden, inter].
	Down *Tensor
	// GateUpBias (optional, F32 [2·inter]) holds bg then bu; DownBias
	// (optional, F32 [hidden]) holds bd.
	GateUpBias, DownBias *Tensor
}

// Inter returns the expert's intermediate size.
func (e *Expert) Inter() int { return e.Down.Cols() }

// ExpertFFN is the set of experts of one mixture-of-experts block: the
// routed experts, then the shared ones, and the activation they share.
type ExpertFFN struct {
	Experts []Expert
	Act     Activation
	// Limit, when positive, selects gpt-oss's clamped SwiGLU in place of
	// act(gate) ⊙ up: with g = min(gate, Limit) and
	// u = clamp(up, -Limit, Limit), the product is (u + 1) · g · σ(Alpha·g).
	Limit, Alpha float32
}
