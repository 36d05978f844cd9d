package engine

import "github.com/lem-engine/lem/compute"

// Speculative decoding by prompt lookup. A decoding sequence of a
// Scheduler may run, with the token it was handed, a few draft tokens
// that guess the ones after it, all in the same step: the step returns a
// row of logits per token run, and the generation samples from them one
// at a time. A sampled token equal to the next draft accepts the draft,
// and the next row's logits are already there; the first that differs
// replaces the draft, and the rows after it are dropped (their positions
// run again from the new token). Rows are computed exactly as they would
// be one step at a time (compute.RowStable), and sampling consumes the
// same random numbers in the same order, so the tokens are the same with
// or without drafts; only the number of steps changes.
//
// The drafts come from the sequence itself: the tokens that followed the
// latest earlier occurrence of its last few tokens, in the prompt or in
// what it generated. Text that quotes its input (code edits, extraction,
// summaries that cite, JSON that repeats keys) gives long runs of
// accepted drafts; other text gives none, and then no draft is run.

// DefaultDraft is the draft tokens per step a Scheduler runs on backend b
// unless told otherwise: 7 on the CPU, where the packed kernels read each
// weight once for up to 8 rows; none on a device whose decode steps are
// padded and replayed as graphs (a GPU), where a step's rows cost more
// with every row that a quantized product adds (drafts run there when
// asked for, inside the padded steps' graphs).
func DefaultDraft(b compute.Backend) int {
	if padsSteps(b) {
		return 0
	}
	return 7
}

// draftRows bounds the rows of a step's decoding sequences, drafts
// included: the rows that the CPU's packed kernels serve with one read of
// the weights. Beyond it every draft would slow down the whole batch.
const draftRows = 8

// Draft lookup bounds: the longest and shortest tail of the sequence
// looked up.
const (
	draftMaxMatch = 4
	draftMinMatch = 2
)

// drafter chooses how many drafts a sequence runs: a rejected draft costs
// its rows and those after it, so the length follows what was accepted
// lately, and a sequence whose first drafts keep failing pauses drafting
// for longer and longer.
type drafter struct {
	k    int // the drafts to propose next (0: the most)
	miss int // verify steps in a row whose first draft was rejected
	wait int // tokens to go before proposing again
}

// propose appends to dst the drafts for the sequence of tokens, at most
// most of them.
func (d *drafter) propose(dst, tokens []int32, most int) []int32 {
	if most <= 0 {
		return dst
	}
	if d.wait > 0 {
		d.wait--
		return dst
	}
	if d.k == 0 {
		d.k = most
	}
	return lookupDraft(dst, tokens, min(d.k, most))
}

// settle records that a of n drafts run were accepted.
func (d *drafter) settle(n, a, most int) {
	switch {
	case n == 0:
	case a == n:
		d.k, d.miss = min(2*n, most), 0
	case a > 0:
		d.k, d.miss = a+1, 0
	default:
		d.k = 1
		d.miss++
		d.wait = min(1<<d.miss, 32) - 1
	}
}

// lookupDraft appends to dst the k tokens that followed the latest earlier
// occurrence of the last n tokens of hist, for the longest n from
// draftMaxMatch down to draftMinMatch that occurs, or none.
func lookupDraft(dst, hist []int32, k int) []int32 {
	if k <= 0 {
		return dst
	}
	l := len(hist)
	for n := min(draftMaxMatch, l-1); n >= draftMinMatch; n-- {
		tail := hist[l-n:]
	search:
		for i := l - n - 1; i >= 0; i-- {
			for j, t := range tail {
				if hist[i+j] != t {
					continue search
				}
			}
			// Past the end of hist the continuation copies itself,
			// as a loop goes on repeating.
			d := len(dst)
			for j := range k {
				if at := i + n + j; at < l {
					dst = append(dst, hist[at])
				} else {
					dst = append(dst, dst[d+at-l])
				}
			}
			return dst
		}
	}
	return dst
}
