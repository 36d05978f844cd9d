// Normalisations: one block per normalised group.

// rmsnorm normalises each group of g values: x / sqrt(mean(x²) + eps) · (w + off).
// w (storage type wdt) may be null.
extern "C" __global__ void rmsnorm(float* dst, const float* x, const void* w, int wdt, int g, float eps, float off) {
    __shared__ double sh[32];
    i64 base = (i64)blockIdx.x * g;
    double ss = 0;
    for (int c = threadIdx.x; c < g; c += blockDim.x) {
        double v = x[base + c];
        ss += v * v;
    }
    ss = block_sum_d(ss, sh);
    float inv = (float)(1.0 / sqrt(ss / g + (double)eps));
    for (int c = threadIdx.x; c < g; c += blockDim.x) {
        float o = x[base + c] * inv;
        if (w) o *= ldf(w, wdt, c) + off;
        dst[base + c] = o;
    }
}

// layernorm computes (x - mean) / sqrt(var + eps) · w + b per row; b may be null.
extern "C" __global__ void layernorm(float* dst, const float* x, const void* w, int wdt, const void* b, int bdt, int g, float eps) {
    __shared__ double sh[32];
    i64 base = (i64)blockIdx.x * g;
    double s = 0;
    for (int c = threadIdx.x; c < g; c += blockDim.x) s += x[base + c];
    double mean = block_sum_d(s, sh) / g;
    double vr = 0;
    for (int c = threadIdx.x; c < g; c += blockDim.x) {
        double d = x[base + c] - mean;
        vr += d * d;
    }
    double inv = 1.0 / sqrt(block_sum_d(vr, sh) / g + (double)eps);
    for (int c = threadIdx.x; c < g; c += blockDim.x) {
        float o = (float)((x[base + c] - mean) * inv) * ldf(w, wdt, c);
        if (b) o += ldf(b, bdt, c);
        dst[base + c] = o;
    }
}
