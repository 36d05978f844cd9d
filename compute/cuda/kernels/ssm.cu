// The selective scan of state-space layers (compute.SSMScanner).
//
// One warp per (head, channel): the channel's row of the head's state
// (StateSize values, SSM_MAXS per lane) stays in registers while the warp
// walks the time steps in order. A decode step is one iteration; a prefill
// is the same recurrence over every row (sequential over time, parallel
// over heads × channels).

#define SSM_MAXS 8 // state values per lane: StateSize ≤ 256

// ssm_scan: x, y [n, heads·hd]; dt [n, heads]; bm, cm [n, groups·ns];
// state [heads, hd·ns]; A, D, dtb [heads] of storage types adt, ddt, bdt.
extern "C" __global__ void __launch_bounds__(128)
    ssm_scan(float* y, const float* x, const float* dt, const float* bm, const float* cm, float* state,
             const void* A, int adt, const void* D, int ddt, const void* dtb, int bdt,
             int n, int heads, int hd, int groups, int ns, float dtmin, float dtmax) {
    int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= heads * hd) return;
    int h = warp / hd, i = warp - h * hd;
    int g = h / (heads / groups);
    float a = ldf(A, adt, h), d = ldf(D, ddt, h), bias = ldf(dtb, bdt, h);
    float* st = state + ((i64)h * hd + i) * ns;
    float s[SSM_MAXS];
#pragma unroll
    for (int j = 0; j < SSM_MAXS; j++) {
        int idx = lane + 32 * j;
        s[j] = idx < ns ? st[idx] : 0.0f;
    }
    i64 hp = (i64)heads * hd, gn = (i64)groups * ns;
    for (int t = 0; t < n; t++) {
        float delta = softplusf(dt[(i64)t * heads + h] + bias);
        delta = fminf(fmaxf(delta, dtmin), dtmax);
        float decay = (float)exp((double)(delta * a));
        float xv = x[t * hp + (i64)h * hd + i];
        float dx = delta * xv;
        const float* bt = bm + t * gn + (i64)g * ns;
        const float* ct = cm + t * gn + (i64)g * ns;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < SSM_MAXS; j++) {
            int idx = lane + 32 * j;
            if (idx < ns) {
                s[j] = s[j] * decay + dx * bt[idx];
                acc += s[j] * ct[idx];
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) y[t * hp + (i64)h * hd + i] = acc + d * xv;
    }
#pragma unroll
    for (int j = 0; j < SSM_MAXS; j++) {
        int idx = lane + 32 * j;
        if (idx < ns) st[idx] = s[j];
    }
}
