package engine

import (
	"context"
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// On backends that implement compute.TokenPicker, a decode step need not
// bring the whole vocabulary's logits to the host: for greedy decoding the
// backend returns the best token, and for top-k sampling the k best
// candidates with their logits, from which the sampler finishes exactly as
// it would from all the logits (softmax at temperature, top-p and min-p
// only ever look at the top-k candidates). Penalties, logit biases,
// constraints and logprobs need every logit; requests with them read the
// logits as before.

// picked holds a session's device buffer for the candidates.
type picked struct {
	dst   *compute.Tensor // F32 [1, 2·MaxTopK]: values, then columns
	host  []float32
	cands []candidate
}

// pickK returns how many candidates the backend should pick for req (0:
// read the logits instead).
func pickK(b compute.Backend, req *Request, vocab int) int {
	if _, ok := b.(compute.TokenPicker); !ok {
		return 0
	}
	p := &req.Sample
	rep := p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1
	switch {
	case req.HostSampling, req.Logprobs, req.Constraint != nil, len(p.LogitBias) > 0, rep,
		p.PresencePenalty != 0, p.FrequencyPenalty != 0:
		return 0
	case p.Greedy():
		return 1
	case p.TopK > 0 && p.TopK <= compute.MaxTopK && p.TopK < vocab:
		return p.TopK
	}
	return 0
}

// appendTop runs the tokens like AppendContext and returns the k most likely
// next tokens, selected by the backend (a compute.TokenPicker), by
// descending logit and then ascending id. The returned slice is reused by
// the next call.
func (s *Session) appendTop(ctx context.Context, tokens []int32, k int) ([]candidate, error) {
	tp, ok := s.b.(compute.TokenPicker)
	switch {
	case !ok:
		return nil, fmt.Errorf("append: backend %s does not pick tokens", s.b.Name())
	case k < 1 || k > compute.MaxTopK || k > s.vocab:
		return nil, fmt.Errorf("append: top %d of a vocabulary of %d (at most %d)", k, s.vocab, compute.MaxTopK)
	case len(tokens) == 0:
		return nil, fmt.Errorf("append: no tokens")
	}
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	pk := s.picks()
	if err := s.run(ctx, tokens); err != nil {
		return nil, err
	}
	tp.TopK(pk.dst, s.logits, k)
	s.b.Read(pk.host[:2*k], pk.dst)
	if err := s.err(); err != nil {
		return nil, err
	}
	pk.cands = pk.cands[:0]
	for i := range k {
		pk.cands = append(pk.cands, candidate{id: int32(pk.host[k+i]), logit: pk.host[i]})
	}
	return pk.cands, nil
}

// sampleTop picks the next token from the top-k candidates the backend
// returned, as Sample would from all the logits.
func (s *Sampler) sampleTop(c []candidate) int32 {
	if s.p.Greedy() {
		return c[0].id
	}
	return s.finish(c)
}

// StepKernels returns the kernel launches of the session's recorded decode
// step, or 0 when none is recorded or the backend does not count them
// (compute.KernelCounter).
func (s *Session) StepKernels() int {
	if g, ok := s.graph.(compute.KernelCounter); ok {
		return g.Kernels()
	}
	return 0
}
