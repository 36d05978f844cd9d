// Short depthwise causal convolutions (compute.Convolver).
//
// conv_out computes every output from the inputs and the carried window of
// the K-1 preceding inputs; conv_state then shifts the window. Both read
// the window and may run in one captured graph: conv_out must come first.

// conv_out computes dst[t, ch] = bias[ch] + Σ_j w[ch, j] · in(t-k+1+j, ch)
// for the n×c inputs x, where in(r) is x's row r, or row k-1+r of state
// for r < 0. w [c, k] and bias (may be null) have storage types wdt, bdt.
extern "C" __global__ void conv_out(float* dst, const float* x, const void* w, int wdt, const void* bias, int bdt,
                                    const float* state, int n, int c, int k, int silu) {
    GRID_STRIDE(i, (i64)n * c) {
        int t = (int)(i / c), ch = (int)(i - (i64)t * c);
        float s = bias ? ldf(bias, bdt, ch) : 0.0f;
        for (int j = 0; j < k; j++) {
            int src = t - k + 1 + j;
            float v = src >= 0 ? x[(i64)src * c + ch] : state[(i64)(k - 1 + src) * c + ch];
            s += ldf(w, wdt, (i64)ch * k + j) * v;
        }
        if (silu) s = s / (1.0f + (float)exp(-(double)s));
        dst[i] = s;
    }
}

// conv_state leaves the last k-1 input rows (oldest first) in state, one
// thread per channel. Rows are written in ascending order, so a row still
// to be read (r+n > r) is never overwritten first.
extern "C" __global__ void conv_state(float* state, const float* x, int n, int c, int k) {
    GRID_STRIDE(ch, c) {
        for (int r = 0; r < k - 1; r++) {
            int src = n - (k - 1) + r;
            state[(i64)r * c + ch] = src >= 0 ? x[(i64)src * c + ch] : state[(i64)(r + n) * c + ch];
        }
    }
}
