package engine

import (
	"context"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// Greedy decoding on a backend that feeds tokens (compute.TokenFeeder)
// runs one step ahead: the device picks the token, writes it and the next
// position into the inputs of the recorded decode step, and the host queues
// that step before reading the token it will consume. The device then never
// waits for the host between steps. When the token turns out to end the
// generation, the queued step was wasted: its key and value rows sit at the
// position after the session's last, which the next step overwrites; until
// then a sliding-window ring has lost the oldest position it held, which
// Reuse accounts for (ahead.over).

// ahead is a session's state between greedy steps.
type ahead struct {
	queued bool         // a step consuming the last picked token is queued
	wait   func() error // waits for the candidates of the last step
	slot   int          // which of host's halves wait fills
	// over is set when a dropped step wrote the position after the
	// session's last: the caches then hold one position more than the
	// session's tokens.
	over bool
	host [2][2]float32
	// graph records a whole step ahead: the feed, the decode step and its
	// pick, so that none of them is a launch of its own.
	graph       compute.Graph
	graphFailed bool
}

// runsAhead reports whether Generate may queue steps ahead when the backend
// picks pick candidates per step (pickK): on a backend that feeds tokens
// and records graphs (the CPU runs each call before it returns, so it has
// nothing to queue).
func (s *Session) runsAhead(pick int) bool {
	_, feeds := s.b.(compute.TokenFeeder)
	_, graphs := s.b.(compute.GraphCapturer)
	_, recurrent := s.st.(model.Recurrent)
	return pick == 1 && feeds && graphs && !recurrent
}

// appendGreedy runs the decode step that consumes id, as appendTop(id, 1)
// does, and returns the most likely next token. With more set it queues
// the step after it (consuming the token it returns) before reading that
// token; the next call must then pass that token, or the caller must call
// settle.
func (s *Session) appendGreedy(id int32, more bool) ([]candidate, error) {
	tp := s.b.(compute.TokenPicker)
	tf := s.b.(compute.TokenFeeder)
	pk := s.picks()
	a := &s.ahead
	if a.queued {
		// The last call queued the step that consumes id.
		s.tokens = append(s.tokens, id)
	} else {
		if err := s.check([]int32{id}); err != nil {
			return nil, err
		}
		s.run(context.Background(), []int32{id})
		tp.TopK(pk.dst, s.logits, 1)
		a.slot ^= 1
		a.wait = tf.ReadAsync(a.host[a.slot][:], pk.dst)
	}
	a.queued = false
	cur, wait := a.slot, a.wait
	if more && s.graph != nil {
		// Stream order: the read of dst above, then the feed that reads it,
		// then the step and its pick that overwrite dst.
		ids, pos := s.inputs(1)
		if a.graph == nil && !a.graphFailed {
			g, err := s.b.(compute.GraphCapturer).Capture(func() {
				tf.Feed(ids, pos, pk.dst)
				s.m.Forward(s.st, ids, pos, s.logits)
				tp.TopK(pk.dst, s.logits, 1)
			})
			a.graph, a.graphFailed = g, err != nil
		}
		if a.graph != nil {
			a.graph.Launch()
		} else {
			tf.Feed(ids, pos, pk.dst)
			s.graph.Launch()
			tp.TopK(pk.dst, s.logits, 1)
		}
		a.slot ^= 1
		a.wait = tf.ReadAsync(a.host[a.slot][:], pk.dst)
		a.queued = true
	}
	if err := wait(); err != nil {
		a.queued = false
		return nil, err
	}
	if err := s.err(); err != nil {
		a.queued = false
		return nil, err
	}
	h := &a.host[cur]
	pk.cands = append(pk.cands[:0], candidate{id: int32(h[1]), logit: h[0]})
	return pk.cands, nil
}

// settle forgets a step queued ahead whose token was not taken: the next
// step uploads its inputs from the host again.
func (s *Session) settle() {
	if s.ahead.queued {
		s.ahead.over = true
	}
	s.ahead.queued = false
}

// picks returns the session's candidate buffers, allocated on first use.
func (s *Session) picks() *picked {
	if s.pick == nil {
		s.pick = &picked{dst: s.b.Alloc(compute.F32, 1, 2*compute.MaxTopK), host: make([]float32, 2*compute.MaxTopK)}
	}
	return s.pick
}
