// The gated delta rule of Gated DeltaNet layers (compute.DeltaRuler).
//
// One warp per (value head, value column y): row y of the head's Sᵀ
// (KeyDim values, DR_MAXK per lane) stays in registers while the warp walks
// the rows in order, normalising the row's query and key itself (they are
// shared by the warps of a head and come from L2). A decode step is one
// iteration; a prefill runs the recurrence over every row (sequential over
// time, parallel over heads × value columns).

#define DR_MAXK 8 // key values per lane: KeyDim ≤ 256

// delta_rule: qkv [n, 2·kh·dk + vh·dv]; a, b [n, vh]; state [vh, dv, dk];
// dst [n, vh·dv]; alog, dtb [vh] of storage types aldt, dbdt. Value head h
// reads key head h mod kh when tiled is set, else h / (vh/kh). β is
// bscale·σ(b) (bscale 2 where negative eigenvalues are allowed, else 1).
extern "C" __global__ void __launch_bounds__(128)
    delta_rule(float* dst, const float* qkv, const float* a, const float* b, float* state,
               const void* alog, int aldt, const void* dtb, int dbdt,
               int n, int kh, int vh, int dk, int dv, float scale, float eps, int tiled, float bscale) {
    int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= vh * dv) return;
    int h = warp / dv, y = warp - h * dv;
    int kx = tiled ? h % kh : h / (vh / kh);
    i64 w = 2 * (i64)kh * dk + (i64)vh * dv;
    float rate = -(float)exp((double)ldf(alog, aldt, h));
    float bias = ldf(dtb, dbdt, h);
    float* st = state + ((i64)h * dv + y) * dk;
    float s[DR_MAXK];
#pragma unroll
    for (int j = 0; j < DR_MAXK; j++) {
        int idx = lane + 32 * j;
        s[j] = idx < dk ? st[idx] : 0.0f;
    }
    for (int t = 0; t < n; t++) {
        const float* row = qkv + t * w;
        const float* qr = row + (i64)kx * dk;
        const float* kr = row + (i64)(kh + kx) * dk;
        float q[DR_MAXK], k[DR_MAXK];
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int j = 0; j < DR_MAXK; j++) {
            int idx = lane + 32 * j;
            q[j] = idx < dk ? qr[idx] : 0.0f;
            k[j] = idx < dk ? kr[idx] : 0.0f;
            qq += q[j] * q[j];
            kk += k[j] * k[j];
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        float qi = (float)(1.0 / sqrt((double)qq + (double)eps)) * scale;
        float ki = (float)(1.0 / sqrt((double)kk + (double)eps));
        float sk = 0.0f, sq = 0.0f, qk = 0.0f;
#pragma unroll
        for (int j = 0; j < DR_MAXK; j++) {
            q[j] *= qi;
            k[j] *= ki;
            sk += s[j] * k[j];
            sq += s[j] * q[j];
            qk += q[j] * k[j];
        }
        sk = warp_sum(sk);
        sq = warp_sum(sq);
        qk = warp_sum(qk);
        i64 at = (i64)t * vh + h;
        float decay = (float)exp((double)(rate * softplusf(a[at] + bias)));
        float beta = bscale * sigmoidf(b[at]);
        float v = row[2 * (i64)kh * dk + (i64)h * dv + y];
        float u = beta * (v - decay * sk);
        if (lane == 0) dst[at * dv + y] = decay * sq + qk * u;
#pragma unroll
        for (int j = 0; j < DR_MAXK; j++) s[j] = s[j] * decay + u * k[j];
    }
#pragma unroll
    for (int j = 0; j < DR_MAXK; j++) {
        int idx = lane + 32 * j;
        if (idx < dk) st[idx] = s[j];
    }
}
