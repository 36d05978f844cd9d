package engine

import "slices"

// The host tier of the paged cache. A preempted sequence's blocks are
// copied to host memory (where the backend can, compute.RowMover, and
// while SchedulerOptions.SwapBytes has room) and copied back into fresh
// blocks when it resumes, instead of being recomputed; its cached prefix,
// where the pool still holds it, is shared as at any admission. The
// copies are the blocks' bits, so the sequence goes on exactly as it
// would have.

// swapOut copies q's blocks of computed positions to host memory, when
// the backend can and the swap space has room for them.
func (s *Scheduler) swapOut(q *sequence) {
	if s.swapCap <= 0 || s.recurrent || q.done == 0 || q.score || q.embed {
		return
	}
	n := (q.done + s.bs - 1) / s.bs
	var need int64
	for g := range s.groups {
		bb := s.cache.BlockBytes(g)
		if bb == 0 {
			return
		}
		for _, b := range q.tables[g][:min(n, len(q.tables[g]))] {
			if b >= 0 {
				need += int64(bb)
			}
		}
	}
	if s.swapUsed+need > s.swapCap {
		return
	}
	q.swap = make([][][]byte, len(s.groups))
	for g := range s.groups {
		t := q.tables[g]
		for i := range n {
			var buf []byte
			if i < len(t) && t[i] >= 0 {
				buf = make([]byte, s.cache.BlockBytes(g))
				s.cache.SaveBlock(g, t[i], buf)
			}
			q.swap[g] = append(q.swap[g], buf)
		}
	}
	if s.cache.BlocksSaved() != nil {
		// The backend failed: the sequence recomputes (and its next
		// step reports the error).
		q.swap = nil
		return
	}
	q.swapDone, q.swapBytes = q.done, need
	s.swapUsed += need
}

// swapIn copies the blocks swapOut saved after q's cached prefix of p
// positions into fresh blocks of q's tables and returns the positions q
// then holds; p when it has none saved past p or the pool has no room.
func (s *Scheduler) swapIn(q *sequence, p int) int {
	if q.swap == nil {
		return p
	}
	defer s.dropSwap(q)
	if q.swapDone <= p {
		return p
	}
	var got [][2]int32 // group and block of each block taken
	for i := p / s.bs; i < (q.swapDone+s.bs-1)/s.bs; i++ {
		for g, gr := range s.groups {
			for len(q.tables[g]) <= i {
				q.tables[g] = append(q.tables[g], -1)
			}
			buf := q.swap[g][i]
			if buf == nil {
				continue
			}
			b, ok := gr.pool.alloc()
			if !ok {
				for _, gb := range got {
					s.groups[gb[0]].pool.release(gb[1])
					q.tables[gb[0]][slices.Index(q.tables[gb[0]], gb[1])] = -1
				}
				return p
			}
			got = append(got, [2]int32{int32(g), b})
			s.cache.LoadBlock(g, b, buf)
			q.tables[g][i] = b
		}
	}
	s.restored++
	return q.swapDone
}

// dropSwap frees the host memory of q's saved blocks.
func (s *Scheduler) dropSwap(q *sequence) {
	s.swapUsed -= q.swapBytes
	q.swap, q.swapBytes = nil, 0
}
