package compute

// RowOps is implemented by backends that offer operations whose operand
// differs from row to row: a coefficient or a statistic of each row scales
// or shifts that row. Gemma 3n needs them for AltUp (per-token mixing of its
// hidden-state streams and matching of their magnitudes) and for activation
// sparsity. A model that needs them fails to load on a backend without them.
type RowOps interface {
	// AxpyRows computes dst[r, :] += s[r, col] · x[r, :] for every row r.
	// s is an F32 tensor [rows, k] with col < k.
	AxpyRows(dst, x, s *Tensor, col int)
	// MatchRMS scales each row of x to the root mean square of the same row
	// of ref: dst[r, :] = x[r, :] · rms(ref[r, :]) / sqrt(max(mean(x[r, :]²), floor)).
	MatchRMS(dst, x, ref *Tensor, floor float32)
	// GaussianTopK keeps what lies above a normal quantile of each row:
	// dst[r, :] = max(x[r, :] - (mean(x[r, :]) + k·std(x[r, :])), 0), with
	// the population standard deviation. k is the quantile's standard score
	// (1.645 keeps about the top 5%).
	GaussianTopK(dst, x *Tensor, k float32)
}
