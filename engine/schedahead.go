package engine

import (
	"os"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/model"
)

// Greedy steps queued ahead. On a backend that feeds tokens
// (compute.TokenFeeder) and whose decode steps are padded and replayed as
// graphs (a GPU), a padded step whose rows are all greedy picks (pick 1,
// no drafts) is launched without waiting for its picks: it stays in
// flight, and the scheduler reads its picks only after it has queued the
// step after it, whose rows each take, on the device, the token the step
// in flight picked for the same row (FeedRows). The device then does not
// wait for the host between the steps of greedy streams: the host hands a
// step's tokens over, and the callers take them and hand them back in,
// while the next step runs.
//
// A token fed ahead is the device's (sequence.fed) until the caller hands
// the same token in. A caller that hands in another token, or stops,
// leaves a row run for nothing, whose position runs again from the
// caller's token, as a rejected draft's does. A step after the one in
// flight is queued only when every sequence of the flight's has had its
// caller hand in the token the flight ran, may take another token, and
// gets a block for it without preempting, and no other sequence has rows
// to run or waits to start; otherwise the flight lands (its picks are
// read and handed over) and the scheduler plans from the host's tokens.
//
// LEM_SCHED_AHEAD=0 turns it off, for measuring.

// flight is a padded step of greedy picks launched but not yet read.
type flight struct {
	parts []stepPart // one row each, in the step's row order
	host  []float32  // each row's pick (logit, id) once wait returns
	wait  func() error
	err   error // the step failed
}

// runsAhead reports whether a scheduler with the resolved options queues
// greedy steps ahead.
func (s *Scheduler) runsAhead() bool {
	_, feeds := s.b.(compute.TokenFeeder)
	_, picks := s.b.(compute.TokenPicker)
	return s.pad && feeds && picks && s.draft == 0 && os.Getenv("LEM_SCHED_AHEAD") != "0"
}

// flies reports whether a padded step over the parts may stay in flight:
// every part is one greedy row whose candidate the backend picks.
func (s *Scheduler) flies(parts []stepPart, bk *bucket) bool {
	if !s.ahead || bk == nil {
		return false
	}
	for _, p := range parts {
		q := p.q
		if p.hi-p.lo != 1 || !p.logits || p.nlog != 1 || q.pick != 1 || q.spec > 0 || q.score || q.embed {
			return false
		}
	}
	return true
}

// fly starts reading the picks of the padded step just run over the
// parts (bt its batch) and keeps the step in flight.
func (s *Scheduler) fly(parts []stepPart, bt *model.Batch, err error) {
	f := &flight{parts: parts, err: err}
	for _, p := range parts {
		p.q.flying++
	}
	s.flight = f
	n := len(parts)
	s.mu.Lock()
	s.rows += int64(n)
	s.steps++
	s.mu.Unlock()
	if err != nil {
		return
	}
	// Sized for every sequence, as readLogits sizes it: a flight's picks
	// are never moved while the step after it reads them.
	s.growCands(2 * s.parallel)
	x := bt.Logits
	if n < x.Rows() {
		x = s.b.View(x, 0, n)
	}
	s.b.(compute.TokenPicker).TopK(s.cands, x, 1)
	s.aheadSlot ^= 1
	h := &s.aheadHost[s.aheadSlot]
	if cap(*h) < 2*n {
		*h = make([]float32, 2*n)
	}
	f.host = (*h)[:2*n]
	f.wait = s.b.(compute.TokenFeeder).ReadAsync(f.host, s.cands)
	s.readFloats += int64(2 * n)
}

// planAhead returns the parts of the step after the flight f, each row
// taking the token f picked for it, with their blocks placed and a
// placeholder for that token appended; or nil when that step cannot be
// queued now (see above). s.mu is held.
func (s *Scheduler) planAhead(f *flight) []stepPart {
	if f.err != nil || len(s.waiting) > 0 {
		return nil
	}
	for _, q := range s.running {
		if q.flying == 0 && q.runnable() {
			return nil
		}
	}
	for _, p := range f.parts {
		q := p.q
		if q.gone || q.err != nil || q.fed > 0 || q.later != nil || q.cut >= 0 || q.left <= 0 || len(q.tokens) != p.hi || p.hi >= s.seqCap {
			return nil
		}
	}
	for _, p := range f.parts {
		if !s.reserve(p.q, p.hi) {
			return nil
		}
	}
	parts := make([]stepPart, len(f.parts))
	for i, p := range f.parts {
		q := p.q
		q.tokens = append(q.tokens, -1) // the pick, once f lands
		q.fed = 1
		parts[i] = stepPart{q: q, lo: p.hi, hi: p.hi + 1, logits: true, nlog: 1}
	}
	return parts
}

// reserve gives q a block for position p in every group from the pool's
// free and cached blocks, first dropping those a sliding window has left;
// it reports false when the pool has none (reserve never preempts).
func (s *Scheduler) reserve(q *sequence, p int) bool {
	for g, gr := range s.groups {
		s.dropWindow(q, g, p)
		t := q.tables[g]
		i := p / s.bs
		for len(t) <= i {
			t = append(t, -1)
		}
		q.tables[g] = t
		if t[i] >= 0 {
			continue
		}
		b, ok := gr.pool.alloc()
		if !ok {
			return false
		}
		t[i] = b
	}
	return true
}

// advance queues the step after the flight f, when it can run now (see
// planAhead), and lands f.
func (s *Scheduler) advance(f *flight) {
	s.mu.Lock()
	parts := s.planAhead(f)
	var (
		bk *bucket
		bt *model.Batch
	)
	if parts != nil {
		bk = s.bucketFor(parts)
		bt, _ = s.fillBucket(bk, parts)
		s.aheadSteps++
	}
	s.mu.Unlock()
	if parts != nil {
		// Stream order: f's picks are read, then fed to this step's
		// rows, then overwritten by this step's picks.
		s.b.(compute.TokenFeeder).FeedRows(bt.IDs, s.cands, len(parts))
		s.fly(parts, bt, s.runBucket(bk, bt))
	}
	s.land(f)
}

// land waits for the picks of the flight f and hands them over. A
// sequence whose caller has not yet handed in the token f ran from keeps
// its pick for when it does (sequence.later); one whose caller replaced
// that token gets nothing (the row was not its).
func (s *Scheduler) land(f *flight) {
	err := f.err
	if err == nil {
		err = f.wait()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, p := range f.parts {
		q := p.q
		q.flying--
		if q.gone || q.err != nil || !s.ran(p, err) || q.done < p.hi {
			continue
		}
		c := candidate{id: int32(f.host[2*i+1]), logit: f.host[2*i]}
		if q.fed > 0 && len(q.tokens)-1 == p.lo {
			// The row ran from a token fed ahead that the caller has
			// not yet handed in.
			q.later = &c
			continue
		}
		if q.fed > 0 && len(q.tokens)-1 == p.hi {
			q.tokens[p.hi] = c.id // the token the step after f runs from
		}
		q.cands = append(q.cands[:0], c)
		q.nrows = 1
		q.need = false
		q.delivered = now
		q.signal()
	}
}

// confirm takes the caller's next token id for q, whose last token was fed
// ahead (q.fed > 0), and reports whether it was that token; s.mu is held.
// The same token becomes the caller's, and the pick of the row run from
// it, when that row has landed, is handed over at once; another token
// drops the one fed ahead and the rows run from it.
func (s *Scheduler) confirm(q *sequence, id int32, left int) bool {
	n := len(q.tokens) - q.fed
	q.fed = 0
	later := q.later
	q.later = nil
	if id != q.tokens[n] {
		q.tokens = q.tokens[:n]
		q.done = min(q.done, n)
		if q.cut < 0 || n < q.cut {
			q.cut = n
		}
		return false
	}
	q.left = left
	if later != nil {
		q.cands = append(q.cands[:0], *later)
		q.nrows = 1
		q.delivered = time.Now()
		q.signal()
		return true
	}
	q.need = true
	s.poke()
	return true
}
