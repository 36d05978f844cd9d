// Causal attention over a KV cache (plain or ring) plus the chunk's new keys
// and values, with GQA, sliding windows, soft caps and sinks. Positions come
// from the device (pos[0] is the number of positions already cached), so a
// captured graph can be replayed at any position.

#define ATT_WARPS 4

// att_finish merges the online-softmax states (m, l, acc) of a block's
// warps: into o (the row's head) when splits is 1, else into pt as (max,
// sum, acc[hd]) for attend_combine, which adds the sink.
template <int E>
__device__ __forceinline__ void att_finish(float m, float l, const float* acc, float* o, int h, int hd,
                                           const void* sinks, int sdt, float* pt, int splits,
                                           float* sm_m, float* sm_l, float (*sm_acc)[32 * E]) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) {
        sm_m[w] = m;
        sm_l[w] = l;
    }
#pragma unroll
    for (int e = 0; e < E; e++) sm_acc[w][lane + 32 * e] = acc[e];
    __syncthreads();
    float mx = NEG_INF;
    for (int x = 0; x < ATT_WARPS; x++) mx = fmaxf(mx, sm_m[x]);
    if (splits > 1) {
        bool empty = mx == NEG_INF;
        if (threadIdx.x == 0) {
            float sum = 0.0f;
            if (!empty)
                for (int x = 0; x < ATT_WARPS; x++) sum += sm_l[x] * expf(sm_m[x] - mx);
            pt[0] = mx;
            pt[1] = sum;
        }
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = 0.0f;
            if (!empty)
                for (int x = 0; x < ATT_WARPS; x++) a += sm_acc[x][d] * expf(sm_m[x] - mx);
            pt[2 + d] = a;
        }
        return;
    }
    float sink = 0.0f;
    if (sinks) {
        sink = ldf(sinks, sdt, h);
        mx = fmaxf(mx, sink);
    }
    float sum = 0.0f;
    for (int x = 0; x < ATT_WARPS; x++) sum += sm_l[x] * expf(sm_m[x] - mx);
    if (sinks) sum += expf(sink - mx);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int x = 0; x < ATT_WARPS; x++) a += sm_acc[x][d] * expf(sm_m[x] - mx);
        o[d] = a / sum;
    }
}

// attend_t handles one (query row, head) per blockIdx.x, and the part
// blockIdx.y of splits equal parts of its keys. Each warp walks a strided
// subset of those keys with an online softmax; lanes hold E elements of the
// head each (head_dim ≤ 32·E). The warps' results are merged at the end,
// into out when splits is 1, else into part as (max, sum, acc[hd]) for
// attend_combine.
template <int E>
__device__ void attend_t(float* out, const float* q, const float* k, const float* v,
                         const float* ck, const float* cv, const int* pos,
                         int heads, int kvheads, int hd, int cap, int ring,
                         float scale, float softcap, int window, const void* sinks, int sdt,
                         float* part, int splits) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][32 * E];
    int i = blockIdx.x / heads, h = blockIdx.x - i * heads;
    int start = pos[0], p = start + i;
    int first = window > 0 ? max(0, p - window + 1) : 0;
    int qc = heads * hd, kc = kvheads * hd;
    int ko = (h / (heads / kvheads)) * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

    float qr[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        int d = lane + 32 * e;
        qr[e] = d < hd ? q[(i64)i * qc + h * hd + d] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    int chunk = (p - first + splits) / splits;
    int lo = first + (int)blockIdx.y * chunk, hi = min(p, lo + chunk - 1);
    for (int j = lo + w; j <= hi; j += ATT_WARPS) {
        const float *kr, *vr;
        if (j >= start) {
            kr = k + (i64)(j - start) * kc + ko;
            vr = v + (i64)(j - start) * kc + ko;
        } else {
            int slot = ring ? j % cap : j;
            kr = ck + (i64)slot * kc + ko;
            vr = cv + (i64)slot * kc + ko;
        }
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            if (d < hd) s += qr[e] * kr[d];
        }
        s = warp_sum(s) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), pj = expf(s - mn);
        l = l * corr + pj;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            acc[e] = acc[e] * corr + (d < hd ? pj * vr[d] : 0.0f);
        }
        m = mn;
    }
    att_finish<E>(m, l, acc, out + (i64)i * qc + h * hd, h, hd, sinks, sdt,
                  part + ((i64)blockIdx.x * splits + blockIdx.y) * (hd + 2), splits, sm_m, sm_l, sm_acc);
}

#define ATTEND_ARGS float *out, const float *q, const float *k, const float *v, \
    const float *ck, const float *cv, const int *pos, int heads, int kvheads, int hd, int cap, int ring, \
    float scale, float softcap, int window, const void *sinks, int sdt, float *part, int splits
#define ATTEND_CALL out, q, k, v, ck, cv, pos, heads, kvheads, hd, cap, ring, scale, softcap, window, sinks, sdt, part, splits

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend2(ATTEND_ARGS) { attend_t<2>(ATTEND_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend4(ATTEND_ARGS) { attend_t<4>(ATTEND_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend8(ATTEND_ARGS) { attend_t<8>(ATTEND_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend16(ATTEND_ARGS) { attend_t<16>(ATTEND_CALL); }

// attend_combine merges the splits partial results of each (query, head)
// block of attend into out, with the sink when there is one.
extern "C" __global__ void attend_combine(float* out, const float* part, int heads, int hd, int splits, const void* sinks, int sdt) {
    int h = blockIdx.x % heads;
    const float* pt = part + (i64)blockIdx.x * splits * (hd + 2);
    float mx = NEG_INF;
    for (int s = 0; s < splits; s++) mx = fmaxf(mx, pt[s * (hd + 2)]);
    float sink = 0.0f;
    if (sinks) {
        sink = ldf(sinks, sdt, h);
        mx = fmaxf(mx, sink);
    }
    float sum = sinks ? expf(sink - mx) : 0.0f;
    for (int s = 0; s < splits; s++) {
        float m = pt[s * (hd + 2)];
        if (m != NEG_INF) sum += pt[s * (hd + 2) + 1] * expf(m - mx);
    }
    float* o = out + (i64)blockIdx.x * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < splits; s++) {
            float m = pt[s * (hd + 2)];
            if (m != NEG_INF) a += pt[s * (hd + 2) + 2 + d] * expf(m - mx);
        }
        o[d] = a / sum;
    }
}

// kvstore writes the chunk's n keys and values into the cache after
// attention has read it. A ring keeps only the last cap positions.
extern "C" __global__ void kvstore(float* ck, float* cv, const float* k, const float* v, const int* pos, int n, int kc, int cap, int ring) {
    int i = blockIdx.x, start = pos[0], p = start + i, slot = p;
    if (ring) {
        if (p < start + n - cap) return;
        slot = p % cap;
    } else if (slot >= cap) {
        return;
    }
    for (int c = threadIdx.x; c < kc; c += blockDim.x) {
        ck[(i64)slot * kc + c] = k[(i64)i * kc + c];
        cv[(i64)slot * kc + c] = v[(i64)i * kc + c];
    }
}

// Paged attention (compute.Pager): the pool is a cache of blocks of bs
// rows; row i of a call belongs to sequence seq[i] at position pos[i], and
// position j of sequence s lives in pool row table[s·maxb + j/bs]·bs + j%bs
// (a negative entry: no block, the position is skipped). Everything is read
// from device memory, so a captured graph stays valid when the table and
// the positions change between replays.

// kvstore_paged writes each row's new key and value into its slot.
extern "C" __global__ void kvstore_paged(float* ck, float* cv, const float* k, const float* v, const int* table,
                                         const int* seq, const int* pos, int bs, int maxb, int kc) {
    int i = blockIdx.x, p = pos[i];
    if (p < 0 || p / bs >= maxb) return;
    int blk = table[(i64)seq[i] * maxb + p / bs];
    if (blk < 0) return;
    i64 slot = (i64)blk * bs + p % bs;
    for (int c = threadIdx.x; c < kc; c += blockDim.x) {
        ck[slot * kc + c] = k[(i64)i * kc + c];
        cv[slot * kc + c] = v[(i64)i * kc + c];
    }
}

// attend_paged_t handles one (row, head) per blockIdx.x over the row's
// sequence in the pool (its new key already stored). With splits > 1,
// split blockIdx.y takes the keys [y·span, (y+1)·span) of absolute
// positions, so that a row's parts, and the order attend_combine merges
// them in, depend only on its own position: the row computes the same
// numbers whatever the other rows of the call. With splits = 1 one block
// takes all the row's keys.
template <int E>
__device__ void attend_paged_t(float* out, const float* q, const float* ck, const float* cv, const int* table,
                               const int* seq, const int* pos, int bs, int maxb, int heads, int kvheads, int hd,
                               float scale, float softcap, int window, const void* sinks, int sdt, float* part,
                               int splits, int span) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][32 * E];
    int i = blockIdx.x / heads, h = blockIdx.x - i * heads;
    int p = min(pos[i], maxb * bs - 1);
    const int* tb = table + (i64)seq[i] * maxb;
    int first = window > 0 ? max(0, p - window + 1) : 0;
    int qc = heads * hd, kc = kvheads * hd;
    int ko = (h / (heads / kvheads)) * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;

    float qr[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        int d = lane + 32 * e;
        qr[e] = d < hd ? q[(i64)i * qc + h * hd + d] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    int lo = first, hi = p;
    if (splits > 1) {
        lo = max(first, (int)blockIdx.y * span);
        hi = min(p, ((int)blockIdx.y + 1) * span - 1);
    }
    for (int j = lo + w; j <= hi; j += ATT_WARPS) {
        int blk = tb[j / bs];
        if (blk < 0) continue;
        i64 slot = (i64)blk * bs + j % bs;
        const float* kr = ck + slot * kc + ko;
        const float* vr = cv + slot * kc + ko;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            if (d < hd) s += qr[e] * kr[d];
        }
        s = warp_sum(s) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), pj = expf(s - mn);
        l = l * corr + pj;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            acc[e] = acc[e] * corr + (d < hd ? pj * vr[d] : 0.0f);
        }
        m = mn;
    }
    att_finish<E>(m, l, acc, out + (i64)i * qc + h * hd, h, hd, sinks, sdt,
                  part + ((i64)blockIdx.x * splits + blockIdx.y) * (hd + 2), splits, sm_m, sm_l, sm_acc);
}

#define PAGED_ARGS float *out, const float *q, const float *ck, const float *cv, const int *table, const int *seq, \
    const int *pos, int bs, int maxb, int heads, int kvheads, int hd, float scale, float softcap, int window,  \
    const void *sinks, int sdt, float *part, int splits, int span
#define PAGED_CALL out, q, ck, cv, table, seq, pos, bs, maxb, heads, kvheads, hd, scale, softcap, window, sinks, sdt, part, splits, span

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged2(PAGED_ARGS) { attend_paged_t<2>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged4(PAGED_ARGS) { attend_paged_t<4>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged8(PAGED_ARGS) { attend_paged_t<8>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged16(PAGED_ARGS) { attend_paged_t<16>(PAGED_CALL); }
