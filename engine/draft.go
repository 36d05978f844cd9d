package engine

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

// Draft lookup bounds: the longest and shortest tail of the sequence
// looked up.
const (
	draftMaxMatch = 4
	draftMinMatch = 2
)

// propose appends to dst up to min(s.draft, left) draft tokens for the
// sequence of tokens.
func (s *Scheduler) propose(dst, tokens []int32, left int) []int32 {
	return lookupDraft(dst, tokens, min(s.draft, left))
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
