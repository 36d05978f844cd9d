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

// attend_all_t is attend_t for the bidirectional attention of an encoder:
// one (row, head) per block over the n rows of one input, row i seeing
// every row j, or those with |i - j| < window. Nothing is cached.
template <int E>
__device__ void attend_all_t(float* out, const float* q, const float* k, const float* v, int n,
                             int heads, int kvheads, int hd, float scale, float softcap, int window,
                             const void* sinks, int sdt) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][32 * E];
    int i = blockIdx.x / heads, h = blockIdx.x - i * heads;
    int lo = window > 0 ? max(0, i - window + 1) : 0, hi = window > 0 ? min(n - 1, i + window - 1) : n - 1;
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
    for (int j = lo + w; j <= hi; j += ATT_WARPS) {
        const float* kr = k + (i64)j * kc + ko;
        const float* vr = v + (i64)j * kc + ko;
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
    att_finish<E>(m, l, acc, out + (i64)i * qc + h * hd, h, hd, sinks, sdt, nullptr, 1, sm_m, sm_l, sm_acc);
}

#define ATTEND_ALL_ARGS float *out, const float *q, const float *k, const float *v, int n, int heads, int kvheads, int hd, \
    float scale, float softcap, int window, const void *sinks, int sdt
#define ATTEND_ALL_CALL out, q, k, v, n, heads, kvheads, hd, scale, softcap, window, sinks, sdt

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_all2(ATTEND_ALL_ARGS) { attend_all_t<2>(ATTEND_ALL_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_all4(ATTEND_ALL_ARGS) { attend_all_t<4>(ATTEND_ALL_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_all8(ATTEND_ALL_ARGS) { attend_all_t<8>(ATTEND_ALL_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_all16(ATTEND_ALL_ARGS) { attend_all_t<16>(ATTEND_ALL_CALL); }

// attend_combine merges the splits partial results of each (query, head)
// block of attend into out, with the sink when there is one. Paged calls
// pass the rows' positions (pos, clamped to maxpos) and the span, and the
// splits after a row's position, all empty, are skipped. Every warp reduces
// the splits' maxima and sums itself, a split per lane, so that a row of
// many splits waits on one round of loads, not one per split.
extern "C" __global__ void attend_combine(float* out, const float* part, int heads, int hd, int splits, const void* sinks, int sdt,
                                          const int* pos, int span, int maxpos) {
    pdl_launch();
    pdl_wait();
    int h = blockIdx.x % heads, lane = threadIdx.x & 31, st = hd + 2;
    const float* pt = part + (i64)blockIdx.x * splits * st;
    if (pos) splits = min(splits, min(pos[blockIdx.x / heads], maxpos) / span + 1);
    float mx = NEG_INF;
    for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, pt[s * st]);
    mx = warp_max(mx);
    float sink = 0.0f;
    if (sinks) {
        sink = ldf(sinks, sdt, h);
        mx = fmaxf(mx, sink);
    }
    float sum = 0.0f;
    for (int s = lane; s < splits; s += 32) {
        float m = pt[s * st];
        if (m != NEG_INF) sum += pt[s * st + 1] * expf(m - mx);
    }
    sum = warp_sum(sum);
    if (sinks) sum += expf(sink - mx);
    float* o = out + (i64)blockIdx.x * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll 4
        for (int s = 0; s < splits; s++) {
            float m = pt[s * st];
            if (m != NEG_INF) a += pt[s * st + 2 + d] * expf(m - mx);
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
// rows, keys and values stored as f32 or f16 (DT); row i of a call belongs
// to sequence seq[i] at position pos[i], and position j of sequence s
// lives in pool row table[s·maxb + j/bs]·bs + j%bs (a negative entry: no
// block, the position is skipped). Everything is read from device memory,
// so a captured graph stays valid when the table and the positions change
// between replays. Every row's keys are split at absolute multiples of
// span positions (split y: [y·span, (y+1)·span)) and the parts merged by
// attend_combine in split order, so that a row's numbers depend only on
// its own query, position and sequence, never on the other rows of the
// call.

// kv_ld reads element e of a pool row of type DT as float.
template <int DT>
__device__ __forceinline__ float kv_ld(const void* p, i64 e) {
    if (DT == DT_F32) return ((const float*)p)[e];
    return h2f(((const u16*)p)[e]);
}

// kvstore_paged_t writes each row's new key and value into its slot,
// rounded to the pool's type.
template <int DT>
__device__ void kvstore_paged_t(void* ck, void* cv, const float* k, const float* v, const int* table,
                                const int* seq, const int* pos, int bs, int maxb, int kc) {
    pdl_launch();
    pdl_wait();
    int i = blockIdx.x, p = pos[i];
    if (p < 0 || p / bs >= maxb) return;
    int blk = table[(i64)seq[i] * maxb + p / bs];
    if (blk < 0) return;
    i64 slot = (i64)blk * bs + p % bs;
    for (int c = threadIdx.x; c < kc; c += blockDim.x) {
        float a = k[(i64)i * kc + c], b = v[(i64)i * kc + c];
        if (DT == DT_F32) {
            ((float*)ck)[slot * kc + c] = a;
            ((float*)cv)[slot * kc + c] = b;
        } else {
            u16 ha, hb;
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(ha) : "f"(a));
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hb) : "f"(b));
            ((u16*)ck)[slot * kc + c] = ha;
            ((u16*)cv)[slot * kc + c] = hb;
        }
    }
}

#define KVSTORE_ARGS void *ck, void *cv, const float *k, const float *v, const int *table, const int *seq, const int *pos, int bs, int maxb, int kc
#define KVSTORE_CALL ck, cv, k, v, table, seq, pos, bs, maxb, kc

extern "C" __global__ void kvstore_paged(KVSTORE_ARGS) { kvstore_paged_t<DT_F32>(KVSTORE_CALL); }
extern "C" __global__ void kvstore_paged_f16(KVSTORE_ARGS) { kvstore_paged_t<DT_F16>(KVSTORE_CALL); }

// kv_half_paged_t gathers one sequence's keys and values at positions
// base … start+n-1 (start = pos[0]; base = start-window+1 for sliding
// layers, else 0) from the paged pool, through the sequence's row of the
// block table (seq[0]), into contiguous bf16 rows of kh, vh: row t holds
// position base+t, what flash_attend reads (kv_half does the same from a
// contiguous cache). The chunk's own rows are read from the pool too,
// where kvstore_paged put them. Block t handles row t; blocks past the
// last row return, so the grid bounds the rows by the scratch the host
// sized. A position whose block is gone (-1) gives zeros; flash_attend
// never reads one inside the window.
template <int DT>
__device__ void kv_half_paged_t(u16* kh, u16* vh, const void* ck, const void* cv, const int* table, const int* seq,
                                const int* pos, int n, int bs, int maxb, int kc, int window) {
    int start = pos[0], base = window > 0 ? max(0, start - window + 1) : 0;
    int t = blockIdx.x, p = base + t;
    if (p >= start + n) return;
    int blk = p / bs < maxb ? table[(i64)seq[0] * maxb + p / bs] : -1;
    i64 slot = (i64)blk * bs + p % bs;
    for (int c = threadIdx.x; c < kc; c += blockDim.x) {
        float a = 0.0f, b = 0.0f;
        if (blk >= 0) {
            a = kv_ld<DT>(ck, slot * kc + c);
            b = kv_ld<DT>(cv, slot * kc + c);
        }
        u16 ha, hb;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(ha) : "f"(a));
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(hb) : "f"(b));
        kh[(i64)t * kc + c] = ha;
        vh[(i64)t * kc + c] = hb;
    }
}

#define KVHALFP_ARGS u16 *kh, u16 *vh, const void *ck, const void *cv, const int *table, const int *seq, const int *pos, int n, int bs, int maxb, int kc, int window
#define KVHALFP_CALL kh, vh, ck, cv, table, seq, pos, n, bs, maxb, kc, window

extern "C" __global__ void kv_half_paged(KVHALFP_ARGS) { kv_half_paged_t<DT_F32>(KVHALFP_CALL); }
extern "C" __global__ void kv_half_paged_f16(KVHALFP_ARGS) { kv_half_paged_t<DT_F16>(KVHALFP_CALL); }

// attend_paged_t is the general kernel (any head dim up to 512): one
// (row, head) per blockIdx.x and split blockIdx.y, each warp walking a
// strided subset of the split's keys with an online softmax; lanes hold E
// elements of the head each (head_dim ≤ 32·E). It always writes parts
// (splits ≥ 2) for attend_combine.
template <int E, int DT>
__device__ void attend_paged_t(float* out, const float* q, const void* ck, const void* cv, const int* table,
                               const int* seq, const int* pos, int bs, int maxb, int heads, int kvheads, int hd,
                               float scale, float softcap, int window, const void* sinks, int sdt, float* part,
                               int splits, int span) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][32 * E];
    pdl_launch();
    pdl_wait();
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
    int lo = max(first, (int)blockIdx.y * span);
    int hi = min(p, ((int)blockIdx.y + 1) * span - 1);
    for (int j = lo + w; j <= hi; j += ATT_WARPS) {
        int blk = tb[j / bs];
        if (blk < 0) continue;
        i64 row = ((i64)blk * bs + j % bs) * kc + ko;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            if (d < hd) s += qr[e] * kv_ld<DT>(ck, row + d);
        }
        s = warp_sum(s) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), pj = expf(s - mn);
        l = l * corr + pj;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            acc[e] = acc[e] * corr + (d < hd ? pj * kv_ld<DT>(cv, row + d) : 0.0f);
        }
        m = mn;
    }
    att_finish<E>(m, l, acc, out + (i64)i * qc + h * hd, h, hd, sinks, sdt,
                  part + ((i64)blockIdx.x * splits + blockIdx.y) * (hd + 2), splits, sm_m, sm_l, sm_acc);
}

#define PAGED_ARGS float *out, const float *q, const void *ck, const void *cv, const int *table, const int *seq, \
    const int *pos, int bs, int maxb, int heads, int kvheads, int hd, float scale, float softcap, int window,  \
    const void *sinks, int sdt, float *part, int splits, int span
#define PAGED_CALL out, q, ck, cv, table, seq, pos, bs, maxb, heads, kvheads, hd, scale, softcap, window, sinks, sdt, part, splits, span

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged2(PAGED_ARGS) { attend_paged_t<2, DT_F32>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged4(PAGED_ARGS) { attend_paged_t<4, DT_F32>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged8(PAGED_ARGS) { attend_paged_t<8, DT_F32>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged16(PAGED_ARGS) { attend_paged_t<16, DT_F32>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged_f16_2(PAGED_ARGS) { attend_paged_t<2, DT_F16>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged_f16_4(PAGED_ARGS) { attend_paged_t<4, DT_F16>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged_f16_8(PAGED_ARGS) { attend_paged_t<8, DT_F16>(PAGED_CALL); }
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32) attend_paged_f16_16(PAGED_ARGS) { attend_paged_t<16, DT_F16>(PAGED_CALL); }

// paged_split finds the keys [lo, hi] of row i in split blockIdx.y (the
// row's position clamped to its table, the window's first key). With none,
// it writes an empty part for the block's ng query heads (pt: the first
// one's) and returns false; otherwise the block's threads stage the
// split's block-table entries in sm_tb, from the sequence's block b0.
__device__ __forceinline__ bool paged_split(int i, int ng, const int* table, const int* seq, const int* pos, int bs,
                                            int maxb, int window, int span, int splits, int hd, float* pt, int* sm_tb,
                                            int& lo, int& hi, int& b0) {
    pdl_launch();
    pdl_wait();
    int p = min(pos[i], maxb * bs - 1);
    int first = window > 0 ? max(0, p - window + 1) : 0;
    lo = max(first, (int)blockIdx.y * span);
    hi = min(p, ((int)blockIdx.y + 1) * span - 1);
    if (lo > hi) {
        if ((int)threadIdx.x < ng) pt[(i64)threadIdx.x * splits * (hd + 2)] = NEG_INF;
        return false;
    }
    const int* tb = table + (i64)seq[i] * maxb;
    b0 = lo / bs;
    int nb = hi / bs - b0 + 1;
    for (int x = threadIdx.x; x < nb; x += blockDim.x) sm_tb[x] = tb[b0 + x];
    return true;
}

// attend_pgqa_t is the grouped kernel for head dims 64, 128 and 256: a
// block per (row, kv head, group of up to GM of its query heads) and split
// blockIdx.y reads each key and value of the split once for all those
// query heads. The split's block-table entries are staged in shared
// memory; a key's HD values are spread over HD/8 lanes, 8 each (one 16-byte
// load of f16, two of f32), so a warp takes 32/(HD/8) keys per load and
// every lane keeps U keys and values in flight before using them. Each
// group of lanes keeps an online softmax per query head over its keys;
// the groups of a warp, then the warps, are merged at the end into the
// split's part for attend_combine.
#define PG_WARPS 4
#define PG_SPAN 256 // the host's pagedSpan

template <int HD, int DT, int GM>
__device__ void attend_pgqa_t(const float* q, const void* ck, const void* cv, const int* table, const int* seq,
                              const int* pos, int bs, int maxb, int heads, int kvheads, float scale, float softcap,
                              int window, float* part, int splits, int span) {
    const int L = HD / 8;                     // lanes per key
    const int KP = 32 / L;                    // keys per warp load
    const int NC = DT == DT_F32 ? 2 : 1;      // 16-byte loads per lane and key
    const int ES = DT == DT_F32 ? 4 : 2;      // bytes per element
    const int U = GM >= 8 ? 2 : 4;            // loads in flight per lane
    __shared__ int sm_tb[PG_SPAN + 2];
    __shared__ float sm_m[PG_WARPS][GM], sm_l[PG_WARPS][GM];
    __shared__ float sm_acc[PG_WARPS][GM][HD];
    int G = heads / kvheads, hch = (G + GM - 1) / GM;
    int i = blockIdx.x / (kvheads * hch);
    int rem = blockIdx.x - i * kvheads * hch;
    int kh = rem / hch, hc = rem - kh * hch;
    int h0 = kh * G + hc * GM, ng = min(GM, G - hc * GM);
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int sg = lane / L, sl = lane - sg * L;
    float* pt = part + ((i64)i * heads + h0) * splits * (HD + 2) + (i64)blockIdx.y * (HD + 2);
    int lo, hi, b0;
    if (!paged_split(i, ng, table, seq, pos, bs, maxb, window, span, splits, HD, pt, sm_tb, lo, hi, b0)) return;

    int qc = heads * HD, kc = kvheads * HD;
    float qr[GM][8], acc[GM][8], m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            qr[g][e] = g < ng ? q[(i64)i * qc + (i64)(h0 + g) * HD + sl * 8 + e] : 0.0f;
            acc[g][e] = 0.0f;
        }
    }
    __syncthreads();
    // Blocks of a power-of-two size (the pools' default 16) find a key's
    // block with a shift rather than a division a key.
    int sh = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
    const char* kb = (const char*)ck + ((i64)kh * HD + sl * 8) * ES;
    const char* vb = (const char*)cv + ((i64)kh * HD + sl * 8) * ES;
    for (int base = lo + w * U * KP; base <= hi; base += PG_WARPS * U * KP) {
        U4 kr[U][NC], vr[U][NC];
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int j = base + u * KP + sg;
            int jb = sh >= 0 ? j >> sh : j / bs;
            int blk = j <= hi ? sm_tb[jb - b0] : -1;
            ok[u] = blk >= 0;
#pragma unroll
            for (int c = 0; c < NC; c++) kr[u][c] = vr[u][c] = U4{0, 0, 0, 0};
            if (ok[u]) {
                i64 off = ((i64)blk * bs + (j - jb * bs)) * kc * ES;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    kr[u][c] = ld_stream(kb + off + 16 * c);
                    vr[u][c] = ld_stream(vb + off + 16 * c);
                }
            }
        }
        float s[U][GM];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
#pragma unroll
            for (int c = 0; c < NC; c++) unpack16<DT>(kr[u][c], kf + c * (8 / NC));
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) d += qr[g][e] * kf[e];
                s[u][g] = d;
            }
        }
#pragma unroll
        for (int o = 1; o < L; o <<= 1)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int g = 0; g < GM; g++) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
        float vf[U][8];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < NC; c++) unpack16<DT>(vr[u][c], vf[u] + c * (8 / NC));
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float x = s[u][g] * scale;
                if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
                x = ok[u] ? x : NEG_INF;
                s[u][g] = x;
                mx = fmaxf(mx, x);
            }
            if (mx == NEG_INF) continue;
            float corr = expf(m[g] - mx), ps = 0.0f, pu[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                pu[u] = expf(s[u][g] - mx);
                ps += pu[u];
            }
            l[g] = l[g] * corr + ps;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                float a = acc[g][e] * corr;
#pragma unroll
                for (int u = 0; u < U; u++) a += pu[u] * vf[u][e];
                acc[g][e] = a;
            }
            m[g] = mx;
        }
    }
    // Merge the key groups of the warp (lanes sl, sl+L, …).
#pragma unroll
    for (int o = L; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float m2 = __shfl_xor_sync(0xffffffffu, m[g], o);
            float l2 = __shfl_xor_sync(0xffffffffu, l[g], o);
            float a2[8];
#pragma unroll
            for (int e = 0; e < 8; e++) a2[e] = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
            float mx = fmaxf(m[g], m2);
            if (mx == NEG_INF) continue;
            float c1 = expf(m[g] - mx), c2 = expf(m2 - mx);
            l[g] = l[g] * c1 + l2 * c2;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] = acc[g][e] * c1 + a2[e] * c2;
            m[g] = mx;
        }
    }
    if (lane < L) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (lane == 0) {
                sm_m[w][g] = m[g];
                sm_l[w][g] = l[g];
            }
#pragma unroll
            for (int e = 0; e < 8; e++) sm_acc[w][g][sl * 8 + e] = acc[g][e];
        }
    }
    __syncthreads();
    // Merge the warps into the part: (max, sum, acc[HD]) per query head.
    for (int x = tid; x < ng * (HD + 2); x += PG_WARPS * 32) {
        int g = x / (HD + 2), d = x - g * (HD + 2);
        float mx = NEG_INF;
#pragma unroll
        for (int y = 0; y < PG_WARPS; y++) mx = fmaxf(mx, sm_m[y][g]);
        float r = 0.0f;
        if (d == 0) {
            r = mx;
        } else if (mx != NEG_INF) {
#pragma unroll
            for (int y = 0; y < PG_WARPS; y++) {
                float c = expf(sm_m[y][g] - mx);
                r += (d == 1 ? sm_l[y][g] : sm_acc[y][g][d - 2]) * c;
            }
        }
        pt[(i64)g * splits * (HD + 2) + d] = r;
    }
}

#define PGQA_ARGS const float *q, const void *ck, const void *cv, const int *table, const int *seq, const int *pos, \
    int bs, int maxb, int heads, int kvheads, float scale, float softcap, int window, float *part, int splits, int span
#define PGQA_CALL q, ck, cv, table, seq, pos, bs, maxb, heads, kvheads, scale, softcap, window, part, splits, span

extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa64_f32_g4(PGQA_ARGS) { attend_pgqa_t<64, DT_F32, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa64_f32_g8(PGQA_ARGS) { attend_pgqa_t<64, DT_F32, 8>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa64_f16_g4(PGQA_ARGS) { attend_pgqa_t<64, DT_F16, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa64_f16_g8(PGQA_ARGS) { attend_pgqa_t<64, DT_F16, 8>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa128_f32_g4(PGQA_ARGS) { attend_pgqa_t<128, DT_F32, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa128_f32_g8(PGQA_ARGS) { attend_pgqa_t<128, DT_F32, 8>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa128_f16_g4(PGQA_ARGS) { attend_pgqa_t<128, DT_F16, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa128_f16_g8(PGQA_ARGS) { attend_pgqa_t<128, DT_F16, 8>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa256_f32_g4(PGQA_ARGS) { attend_pgqa_t<256, DT_F32, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa256_f32_g8(PGQA_ARGS) { attend_pgqa_t<256, DT_F32, 8>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa256_f16_g4(PGQA_ARGS) { attend_pgqa_t<256, DT_F16, 4>(PGQA_CALL); }
extern "C" __global__ void __launch_bounds__(PG_WARPS * 32) attend_pgqa256_f16_g8(PGQA_ARGS) { attend_pgqa_t<256, DT_F16, 8>(PGQA_CALL); }
