// Batch-1 decode kernels: a fused matrix-vector product that the backend
// builds from consecutive operations (see fuse.go), the attention step of
// one token (rotary embedding and cache store in one launch, then attention
// split over the keys that merges its own parts), and token picking.

// ---- fused matrix-vector product

// FGemv describes one launch of fgemv: up to three matrices sharing the input
// x (k wide), optionally RMS-normalised first, each with an optional addend
// (a bias, or the residual stream), or two matrices whose rows pair up
// through a gated linear unit. Its layout is mirrored by fgemvArgs in
// fuse.go; kernels/quant_fgemv.cu runs it on block-quantized weights.
struct FGemv {
    const float* x;     // input row, k values
    const void* nw;     // norm weight (storage type nwdt), null for none
    float* h;           // normalised input, written by block 0 (norm mode)
    const void* w[3];   // [m[j], k] weights
    float* d[3];        // products, m[j] values
    void* add[3];       // addend per matrix (storage type addf & 15), or null
    int m[3];
    int addf[3];        // addend dtype, | FG_SUM_TO_ADD: the sum goes to add, else to d
    int k, nmat, mode, nwdt;
    float eps, off;     // norm epsilon and weight offset
    int act, pad;
    float* gdst;        // GLU mode: act(d[0]) ⊙ d[1]
    const char* sc[3];  // quantized weights (fqgemv): w[j] holds the codes,
    const char* dd[3];  // these the sc and d regions (quant.go)
};

#define FG_WARPS 8
#define FG_U 4
#define FG_MODE_NORM 1
#define FG_MODE_GLU 2
#define FG_MODE_ONE 4 // one row per unit (few rows: more warps busy)
#define FG_MODE_STAGE 8 // without a norm: x copied to shared memory first
#define FG_SUM_TO_ADD 16

// fg_row finds matrix and row of row r of the matrices stacked.
__device__ __forceinline__ void fg_row(const FGemv& a, int r, int& mat, int& row) {
    mat = -1;
    row = r;
    for (int j = 0; j < a.nmat; j++) {
        if (row < a.m[j]) {
            mat = j;
            return;
        }
        row -= a.m[j];
    }
}

// fg_out stores one product with its addend.
__device__ __forceinline__ void fg_out(const FGemv& a, int mat, int row, float s) {
    a.d[mat][row] = s;
    if (a.add[mat]) {
        int f = a.addf[mat];
        float v = s + ldf(a.add[mat], f & 15, row);
        if (f & FG_SUM_TO_ADD)
            ((float*)a.add[mat])[row] = v;
        else
            a.d[mat][row] = v;
    }
}

__device__ __forceinline__ void fg_load(U4* u, const char* w, int t0, int nv) {
#pragma unroll
    for (int j = 0; j < FG_U; j++) {
        int t = t0 + 32 * j;
        if (t < nv) u[j] = ld_stream(w + (i64)t * 16);
    }
}

// FG_NB is how many values of the norm's row each thread loads at once.
#define FG_NB 16

// fg_stage writes w[c] + off (w of storage type WT) to xs[c] for the values
// c of this thread (c ≡ threadIdx.x mod the block's threads), FG_NB loads
// in flight.
template <int WT>
__device__ __forceinline__ void fg_stage(float* xs, const void* w, int k, float off) {
    for (int c0 = threadIdx.x; c0 < k; c0 += FG_WARPS * 32 * FG_NB) {
        float v[FG_NB];
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            int c = c0 + FG_WARPS * 32 * i;
            if (WT == DT_F32)
                v[i] = c < k ? ((const float*)w)[c] : 0.0f;
            else
                v[i] = c < k ? __uint_as_float(((const u16*)w)[c]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            int c = c0 + FG_WARPS * 32 * i;
            if (c >= k) break;
            float f = v[i];
            if (WT == DT_BF16) f = bf2f((u16)__float_as_uint(f));
            if (WT == DT_F16) f = h2f((u16)__float_as_uint(f));
            xs[c] = f + off;
        }
    }
}

// fg_copy copies x[0:k] (k a multiple of 4, x 16-byte aligned) to xs,
// FG_NB loads of 16 bytes in flight per thread.
__device__ __forceinline__ void fg_copy(float* xs, const float* x, int k) {
    int n = k / 4;
    for (int c0 = threadIdx.x; c0 < n; c0 += FG_WARPS * 32 * FG_NB) {
        F4 v[FG_NB];
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            int c = c0 + FG_WARPS * 32 * i;
            if (c < n) v[i] = ((const F4*)x)[c];
        }
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            int c = c0 + FG_WARPS * 32 * i;
            if (c < n) ((F4*)xs)[c] = v[i];
        }
    }
}

// fg_sumsq returns the sum of squares of x[0:k] over the block as the
// rmsnorm kernel with 256 threads computes it (thread t adds values t,
// t + 256, … in order), with FG_NB loads in flight per thread.
__device__ __forceinline__ double fg_sumsq(const float* x, int k, double* sh) {
    double ss = 0;
    for (int c0 = threadIdx.x; c0 < k; c0 += FG_WARPS * 32 * FG_NB) {
        float v[FG_NB];
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            int c = c0 + FG_WARPS * 32 * i;
            v[i] = c < k ? x[c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < FG_NB; i++) {
            double d = v[i];
            ss += d * d;
        }
    }
    return block_sum_d(ss, sh);
}

// fg_rows finds the two weight streams unit u reads: consecutive rows of
// the stacked matrices, in GLU mode row u of both, in one-row mode the two
// halves of row u (the second starting nh 16-byte chunks in); null when out
// of range.
template <int ES>
__device__ __forceinline__ void fg_rows(const FGemv& a, int u, int nh, int& ma, int& ra, int& mb, int& rb,
                                        const char*& wa, const char*& wb) {
    if (a.mode & FG_MODE_GLU) {
        ma = mb = -1;
        ra = rb = u;
        if (u < a.m[0]) ma = 0, mb = 1;
    } else if (a.mode & FG_MODE_ONE) {
        fg_row(a, u, ma, ra);
        mb = -1, rb = 0;
        wa = ma >= 0 ? (const char*)a.w[ma] + (i64)ra * a.k * ES : 0;
        wb = wa ? wa + (i64)nh * 16 : 0;
        return;
    } else {
        fg_row(a, 2 * u, ma, ra);
        fg_row(a, 2 * u + 1, mb, rb);
    }
    wa = ma >= 0 ? (const char*)a.w[ma] + (i64)ra * a.k * ES : 0;
    wb = mb >= 0 ? (const char*)a.w[mb] + (i64)rb * a.k * ES : 0;
}

// Each warp computes two rows at a time (a unit) and moves on to the unit
// gridDim.x·FG_WARPS further: blocks stay resident, so a norm is staged
// once per block, and the loads of a unit's first stretch of weights are
// issued before the last stretch of the previous unit is multiplied, the
// first ones before the input is normalised (or, launched dependent, before
// the previous kernel has finished).
template <int DT, bool NORM>
__device__ __forceinline__ void fgemv_t(const FGemv& a) {
    extern __shared__ float xs[];
    __shared__ double sh[32];
    const int V = DT == DT_F32 ? 4 : 8;
    const int ES = DT == DT_F32 ? 4 : 2;
    const int S = 32 * FG_U;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int stride = gridDim.x * FG_WARPS;
    int unit = blockIdx.x * FG_WARPS + warp;
    int k = a.k, nv = k / V;
    // Chunks of 16 bytes each stream reads: a whole row, or half of it.
    bool one = a.mode & FG_MODE_ONE;
    int nva = one ? (nv + 1) / 2 : nv, nvb = one ? nv - nva : nv;
    int ma, ra, mb, rb;
    const char *wa, *wb;
    fg_rows<ES>(a, unit, nva, ma, ra, mb, rb, wa, wb);
    pdl_launch();
    U4 ua[FG_U], ub[FG_U];
    if (wa) fg_load(ua, wa, lane, nva);
    if (wb) fg_load(ub, wb, lane, nvb);
    // The norm weight does not depend on the previous kernel: staged in
    // xs (each thread its own values) before waiting for it.
    if (NORM && a.nw) {
        if (a.nwdt == DT_F32)
            fg_stage<DT_F32>(xs, a.nw, k, a.off);
        else if (a.nwdt == DT_BF16)
            fg_stage<DT_BF16>(xs, a.nw, k, a.off);
        else
            fg_stage<DT_F16>(xs, a.nw, k, a.off);
    }
    pdl_wait();
    const float* x = a.x;
    if (NORM) {
        float inv = (float)(1.0 / sqrt(fg_sumsq(x, k, sh) / k + (double)a.eps));
        for (int c0 = threadIdx.x; c0 < k; c0 += FG_WARPS * 32 * FG_NB) {
            float v[FG_NB];
#pragma unroll
            for (int i = 0; i < FG_NB; i++) {
                int c = c0 + FG_WARPS * 32 * i;
                v[i] = c < k ? x[c] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < FG_NB; i++) {
                int c = c0 + FG_WARPS * 32 * i;
                if (c >= k) break;
                float o = v[i] * inv;
                if (a.nw) o *= xs[c];
                xs[c] = o;
                if (blockIdx.x == 0) a.h[c] = o;
            }
        }
        __syncthreads();
        x = xs;
    } else if (a.mode & FG_MODE_STAGE) {
        // Read from shared memory, the input no longer competes with the
        // weights for the L1 path (about twice their bytes).
        fg_copy(xs, x, k);
        __syncthreads();
        x = xs;
    }
    const float* xb = one ? x + (i64)nva * V : x;
    while (wa) {
        int nma, nra, nmb, nrb;
        const char *na, *nb;
        fg_rows<ES>(a, unit + stride, nva, nma, nra, nmb, nrb, na, nb);
        float acca = 0.0f, accb = 0.0f;
        for (int t0 = lane; t0 < nva; t0 += S) {
            U4 ca[FG_U], cb[FG_U];
#pragma unroll
            for (int j = 0; j < FG_U; j++) ca[j] = ua[j], cb[j] = ub[j];
            int tn = t0 + S;
            if (tn < nva) {
                fg_load(ua, wa, tn, nva);
                if (wb) fg_load(ub, wb, tn, nvb);
            } else {
                if (na) fg_load(ua, na, lane, nva);
                if (nb) fg_load(ub, nb, lane, nvb);
            }
#pragma unroll
            for (int j = 0; j < FG_U; j++) {
                int t = t0 + 32 * j;
                if (t >= nva) break;
                float fa[V], fb[V];
                unpack16<DT>(ca[j], fa);
                const F4* xr = (const F4*)(x + (i64)t * V);
#pragma unroll
                for (int q = 0; q < V / 4; q++) {
                    F4 v = xr[q];
                    acca += fa[4 * q] * v.x + fa[4 * q + 1] * v.y + fa[4 * q + 2] * v.z + fa[4 * q + 3] * v.w;
                }
                if (t >= nvb) continue;
                unpack16<DT>(cb[j], fb);
                xr = (const F4*)(xb + (i64)t * V);
#pragma unroll
                for (int q = 0; q < V / 4; q++) {
                    F4 v = xr[q];
                    accb += fb[4 * q] * v.x + fb[4 * q + 1] * v.y + fb[4 * q + 2] * v.z + fb[4 * q + 3] * v.w;
                }
            }
        }
        acca = warp_sum(acca);
        accb = warp_sum(accb);
        if (lane == 0) {
            if (one) {
                fg_out(a, ma, ra, acca + accb);
            } else if (a.mode & FG_MODE_GLU) {
                a.d[0][ra] = acca;
                a.d[1][rb] = accb;
                a.gdst[ra] = activate(acca, a.act) * accb;
            } else {
                fg_out(a, ma, ra, acca);
                if (mb >= 0) fg_out(a, mb, rb, accb);
            }
        }
        unit += stride;
        ma = nma, ra = nra, mb = nmb, rb = nrb, wa = na, wb = nb;
    }
}

#define FGEMV(name, DT, NORM) \
    extern "C" __global__ void __launch_bounds__(FG_WARPS * 32, 2) name(const FGemv a) { fgemv_t<DT, NORM>(a); }
FGEMV(fgemv_f32, DT_F32, false)
FGEMV(fgemv_f16, DT_F16, false)
FGEMV(fgemv_bf16, DT_BF16, false)
FGEMV(fgemv_norm_f32, DT_F32, true)
FGEMV(fgemv_norm_f16, DT_F16, true)
FGEMV(fgemv_norm_bf16, DT_BF16, true)

// ---- token picking

// Order keys: a float's bits mapped so that unsigned order is float order.
__device__ __forceinline__ u32 fkey(float f) {
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// AM_NB is how many values each thread of argmax_rows and topk_rows loads
// at once.
#define AM_NB 16

// am_merge keeps in (best, bi) the larger of it and (v, i), the lower
// index on ties; an index of 0x7fffffff marks an empty pair, which any
// value (NaN too) replaces.
__device__ __forceinline__ void am_merge(float& best, int& bi, float v, int i) {
    if (v > best || (v == best && i < bi) || (bi == 0x7fffffff && i != 0x7fffffff)) best = v, bi = i;
}

// am_block reduces (best, bi) over the block into thread 0's.
__device__ __forceinline__ void am_block(float& best, int& bi, float* sv, int* si) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        am_merge(best, bi, ov, oi);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) sv[w] = best, si[w] = bi;
    __syncthreads();
    if (w == 0) {
        best = lane < nw ? sv[lane] : NEG_INF;
        bi = lane < nw ? si[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            am_merge(best, bi, ov, oi);
        }
    }
}

// argmax_rows writes, for each row of x (n values; one block of 1024
// threads per row), its largest value to dst[r*2] and its index (the
// first on ties) to dst[r*2+1], as float.
extern "C" __global__ void __launch_bounds__(1024) argmax_rows(float* dst, const float* x, int n) {
    __shared__ float sv[32];
    __shared__ int si[32];
    pdl_wait();
    pdl_launch();
    const float* row = x + (i64)blockIdx.x * n;
    float best = NEG_INF;
    int bi = 0x7fffffff;
    // Each thread visits its values in increasing order, AM_NB loads in
    // flight (one after another, a row of 128256 took ~125 dependent L2
    // round trips per thread).
    for (int i0 = threadIdx.x; i0 < n; i0 += blockDim.x * AM_NB) {
        float v[AM_NB];
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = i0 + j * blockDim.x;
            v[j] = i < n ? row[i] : NEG_INF;
        }
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = i0 + j * blockDim.x;
            if (i < n && (v[j] > best || bi == 0x7fffffff)) best = v[j], bi = i;
        }
    }
    am_block(best, bi, sv, si);
    if (threadIdx.x == 0) {
        dst[(i64)blockIdx.x * 2] = best;
        dst[(i64)blockIdx.x * 2 + 1] = (float)bi;
    }
}

// feed_token sets ids[0] to the column argmax_rows wrote to picked[1] and
// advances pos[0] by one: the next decode step's inputs, written on the
// device so that the step can be queued before the host has read the token.
extern "C" __global__ void feed_token(int* ids, int* pos, const float* picked) {
    ids[0] = (int)picked[1];
    pos[0] += 1;
}

// feed_rows sets ids[r] to the column argmax_rows wrote to picked[2r+1],
// for each of n rows: a batched step's inputs from the step before it.
extern "C" __global__ void feed_rows(int* ids, const float* picked, int n) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n) ids[r] = (int)picked[2 * r + 1];
}

// ---- attention of one token

// RopePrep rotates the new query (qheads heads) and key (kheads heads; 0:
// not rotated) of one position, as the rope kernel does, and with store set
// writes the key and value rows to their cache slot. Mirrored by ropePrep
// in attend.go.
struct RopePrep {
    float* q;
    float* k;
    const float* v;
    const int* pos;
    const float* invf;
    float* ck;
    float* cv;
    int qheads, kheads, hd, dims;
    float scale;
    int inter;
    int kc, cap, ring, store;
};

extern "C" __global__ void rope_prep(const RopePrep a) {
    pdl_launch();
    pdl_wait();
    int p = a.pos[0];
    int half = a.dims / 2;
    int slot = a.ring ? p % a.cap : p;
    bool store = a.store && (a.ring || p < a.cap);
    float fp = (float)p;
    int total = (a.qheads + a.kheads) * half;
    for (int t = threadIdx.x; t < total; t += blockDim.x) {
        int h = t / half, j = t - h * half;
        float ang = fp * a.invf[j];
        float c = (float)cos((double)ang) * a.scale, s = (float)sin((double)ang) * a.scale;
        bool isk = h >= a.qheads;
        int off = (isk ? h - a.qheads : h) * a.hd;
        float* v = (isk ? a.k : a.q) + off;
        int ia = a.inter ? 2 * j : j, ic = a.inter ? 2 * j + 1 : j + half;
        float x0 = v[ia], x1 = v[ic];
        float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
        v[ia] = y0;
        v[ic] = y1;
        if (isk && store) {
            a.ck[(i64)slot * a.kc + off + ia] = y0;
            a.ck[(i64)slot * a.kc + off + ic] = y1;
        }
    }
    if (!store) return;
    int kd = a.kheads > 0 ? a.dims : 0;
    for (int c = threadIdx.x; c < a.kc; c += blockDim.x) {
        if (c % a.hd >= kd) a.ck[(i64)slot * a.kc + c] = a.k[c];
        a.cv[(i64)slot * a.kc + c] = a.v[c];
    }
}

// AttDec describes attend_dec: attention of one query position over the
// cache. With fresh set the new key and value are read from k and v (and
// with rot set, they and q are first rotated as rope does, for hd = 32·E
// and rotary over the whole head), and the last block stores them in the
// cache (and the rotated q and k back); otherwise the cache already holds
// them. Mirrored by attDec in attend.go.
struct AttDec {
    float* out;
    float* q;
    float* ck;
    float* cv;
    const int* pos;
    const void* sinks;
    float* part;   // [heads][splits][hd + 2]: max, sum, acc
    int* count;    // [kvheads] finished splits, reset by the last
    int heads, kvheads, hd, cap, ring, window, sdt, splits;
    float scale, softcap;
    float* k;
    const float* v;
    const float* invf;
    int fresh, rot, inter;
    float rscale;
    int minchunk; // keys a split takes at least (0: always all splits)
};

// ad_rotate rotates the E values a lane holds of one head (hd = 32·E):
// pairs (d, d + hd/2) sit in the same lane, interleaved pairs in lanes l and
// l^1. cs and sn are the lane's cos and sin per value.
template <int E>
__device__ __forceinline__ void ad_rotate(float* x, const float* cs, const float* sn, int inter, int lane) {
    if (inter) {
#pragma unroll
        for (int e = 0; e < E; e++) {
            float o = __shfl_xor_sync(0xffffffffu, x[e], 1);
            x[e] = (lane & 1) == 0 ? x[e] * cs[e] - o * sn[e] : x[e] * cs[e] + o * sn[e];
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < E / 2; e++) {
        float x0 = x[e], x1 = x[e + E / 2];
        x[e] = x0 * cs[e] - x1 * sn[e];
        x[e + E / 2] = x1 * cs[e] + x0 * sn[e];
    }
}

__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

#define AD_WARPS 4
#define AD_KEYS 4
#define AD_MAXSPLITS 32 // splits attendDecode launches at most

// attend_dec_t: block (kv head, split) walks its share of the keys, each
// warp a strided subset, for all G query heads of the kv head at once (the
// keys are read once per group). The block's parts go to part; the block
// that finishes a kv head's last split merges them into out.
template <int E, int GM>
__device__ void attend_dec_t(const AttDec& a) {
    __shared__ float sm_m[AD_WARPS][GM], sm_l[AD_WARPS][GM];
    __shared__ float sm_acc[AD_WARPS][GM][32 * E];
    __shared__ int last;
    __shared__ float sm_pm[GM][AD_MAXSPLITS], sm_pl[GM][AD_MAXSPLITS], sm_pw[GM][AD_MAXSPLITS], sm_psum[GM];
    pdl_wait();
    pdl_launch();
    int kh = blockIdx.x, sp = blockIdx.y;
    int G = a.heads / a.kvheads, hd = a.hd;
    int p = a.pos[0];
    int first = a.window > 0 ? max(0, p - a.window + 1) : 0;
    int kc = a.kvheads * hd;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float qr[GM][E], acc[GM][E], m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            qr[g][e] = g < G && d < hd ? a.q[(i64)(kh * G + g) * hd + d] : 0.0f;
            acc[g][e] = 0.0f;
        }
    }
    // The new key and value, rotated with q when rot is set.
    float kn[E], vn[E];
    if (a.fresh) {
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            kn[e] = d < hd ? a.k[(i64)kh * hd + d] : 0.0f;
            vn[e] = d < hd ? a.v[(i64)kh * hd + d] : 0.0f;
        }
    }
    if (a.rot) {
        float cs[E], sn[E];
        float fp = (float)p;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            int j = a.inter ? d / 2 : (d < hd / 2 ? d : d - hd / 2);
            float ang = fp * a.invf[j];
            cs[e] = (float)cos((double)ang) * a.rscale;
            sn[e] = (float)sin((double)ang) * a.rscale;
        }
#pragma unroll
        for (int g = 0; g < GM; g++)
            if (g < G) ad_rotate<E>(qr[g], cs, sn, a.inter, lane);
        ad_rotate<E>(kn, cs, sn, a.inter, lane);
    }
    // Early in a sequence fewer splits do: each takes at least minchunk
    // keys, and with one split nothing is merged across blocks.
    int sps = a.splits;
    if (a.minchunk > 0) sps = min(sps, max(1, (p - first + a.minchunk) / a.minchunk));
    if (sp >= sps) return;
    int chunk = (p - first + sps) / sps;
    int lo = first + sp * chunk, hi = min(p, lo + chunk - 1);
    // With fresh, position p is not in the cache: warp 0 of the split that
    // holds it takes it from registers after the loop.
    bool mine = a.fresh && lo <= p && p <= hi && w == 0;
    if (a.fresh) hi = min(hi, p - 1);
    // AD_KEYS keys per warp and step, loaded before any is used.
    for (int j0 = lo + w; j0 <= hi; j0 += AD_KEYS * AD_WARPS) {
        float kv[AD_KEYS][E], vv[AD_KEYS][E];
#pragma unroll
        for (int u = 0; u < AD_KEYS; u++) {
            int j = j0 + u * AD_WARPS;
            int slot = a.ring ? j % a.cap : j;
            const float* kr = a.ck + (i64)slot * kc + kh * hd;
            const float* vr = a.cv + (i64)slot * kc + kh * hd;
#pragma unroll
            for (int e = 0; e < E; e++) {
                int d = lane + 32 * e;
                bool ok = j <= hi && d < hd;
                kv[u][e] = ok ? kr[d] : 0.0f;
                vv[u][e] = ok ? vr[d] : 0.0f;
            }
        }
        // Every score of the step first (their reductions interleave),
        // then one rescale per query head.
        float sc[AD_KEYS][GM];
#pragma unroll
        for (int u = 0; u < AD_KEYS; u++)
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float t = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++) t += qr[g][e] * kv[u][e];
                sc[u][g] = t;
            }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < AD_KEYS; u++)
#pragma unroll
                for (int g = 0; g < GM; g++) sc[u][g] += __shfl_xor_sync(0xffffffffu, sc[u][g], o);
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            float mn = m[g];
#pragma unroll
            for (int u = 0; u < AD_KEYS; u++) {
                float x = sc[u][g] * a.scale;
                if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
                sc[u][g] = j0 + u * AD_WARPS <= hi ? x : NEG_INF;
                mn = fmaxf(mn, sc[u][g]);
            }
            float corr = expf(m[g] - mn), sum = 0.0f;
#pragma unroll
            for (int u = 0; u < AD_KEYS; u++) {
                sc[u][g] = expf(sc[u][g] - mn);
                sum += sc[u][g];
            }
            l[g] = l[g] * corr + sum;
#pragma unroll
            for (int e = 0; e < E; e++) {
                float t = acc[g][e] * corr;
#pragma unroll
                for (int u = 0; u < AD_KEYS; u++) t += sc[u][g] * vv[u][e];
                acc[g][e] = t;
            }
            m[g] = mn;
        }
    }
    if (mine) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++) s += qr[g][e] * kn[e];
            s = warp_sum(s) * a.scale;
            if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
            float mn = fmaxf(m[g], s);
            float corr = expf(m[g] - mn), pj = expf(s - mn);
            l[g] = l[g] * corr + pj;
#pragma unroll
            for (int e = 0; e < E; e++) acc[g][e] = acc[g][e] * corr + pj * vn[e];
            m[g] = mn;
        }
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (lane == 0) sm_m[w][g] = m[g], sm_l[w][g] = l[g];
#pragma unroll
        for (int e = 0; e < E; e++) sm_acc[w][g][lane + 32 * e] = acc[g][e];
    }
    __syncthreads();
    // This block's part of each query head.
    for (int g = 0; g < G; g++) {
        float mx = NEG_INF;
        for (int x = 0; x < AD_WARPS; x++) mx = fmaxf(mx, sm_m[x][g]);
        bool empty = mx == NEG_INF;
        float* pt = a.part + ((i64)(kh * G + g) * a.splits + sp) * (hd + 2);
        if (threadIdx.x == 0) {
            float sum = 0.0f;
            if (!empty)
                for (int x = 0; x < AD_WARPS; x++) sum += sm_l[x][g] * expf(sm_m[x][g] - mx);
            pt[0] = mx;
            pt[1] = sum;
        }
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float s = 0.0f;
            if (!empty)
                for (int x = 0; x < AD_WARPS; x++) s += sm_acc[x][g][d] * expf(sm_m[x][g] - mx);
            pt[2 + d] = s;
        }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = sps == 1 || atomicAdd(&a.count[kh], 1) == sps - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The last split of this kv head merges all of them: every split's max
    // and sum loaded at once (one thread each), the weights, then the
    // values (each thread's loads issued before any is used). The sums run
    // in split order, as before.
    for (int t = threadIdx.x; t < G * sps; t += blockDim.x) {
        int g = t / sps, s = t - g * sps;
        const float* pt = a.part + ((i64)(kh * G + g) * a.splits + s) * (hd + 2);
        sm_pm[g][s] = ld_cg(pt);
        sm_pl[g][s] = ld_cg(pt + 1);
    }
    __syncthreads();
    if (threadIdx.x < G) {
        int g = threadIdx.x, h = kh * G + g;
        float mx = NEG_INF;
        for (int s = 0; s < sps; s++) mx = fmaxf(mx, sm_pm[g][s]);
        float sink = 0.0f;
        if (a.sinks) {
            sink = ldf(a.sinks, a.sdt, h);
            mx = fmaxf(mx, sink);
        }
        float sum = a.sinks ? expf(sink - mx) : 0.0f;
        for (int s = 0; s < sps; s++) {
            float ms = sm_pm[g][s];
            float wgt = ms != NEG_INF ? expf(ms - mx) : 0.0f;
            if (ms != NEG_INF) sum += sm_pl[g][s] * wgt;
            sm_pw[g][s] = wgt;
        }
        sm_psum[g] = sum;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < G * hd; t += blockDim.x) {
        int g = t / hd, d = t - g * hd, h = kh * G + g;
        const float* pt = a.part + (i64)h * a.splits * (hd + 2) + 2 + d;
        float av[AD_MAXSPLITS];
#pragma unroll
        for (int s = 0; s < AD_MAXSPLITS; s++)
            if (s < sps) av[s] = ld_cg(pt + s * (hd + 2));
        float acc2 = 0.0f;
#pragma unroll
        for (int s = 0; s < AD_MAXSPLITS; s++)
            if (s < sps && sm_pm[g][s] != NEG_INF) acc2 += av[s] * sm_pw[g][s];
        a.out[(i64)h * hd + d] = acc2 / sm_psum[g];
    }
    if (threadIdx.x == 0) a.count[kh] = 0;
    // Every other split of this kv head is done reading q, k and the
    // cache: store the new key and value, and the rotations.
    if (a.fresh && w == 0) {
        bool store = a.ring || p < a.cap;
        int slot = a.ring ? p % a.cap : p;
#pragma unroll
        for (int e = 0; e < E; e++) {
            int d = lane + 32 * e;
            if (d >= hd) continue;
            if (store) {
                a.ck[(i64)slot * kc + kh * hd + d] = kn[e];
                a.cv[(i64)slot * kc + kh * hd + d] = vn[e];
            }
            if (a.rot) {
                a.k[(i64)kh * hd + d] = kn[e];
#pragma unroll
                for (int g = 0; g < GM; g++)
                    if (g < G) a.q[(i64)(kh * G + g) * hd + d] = qr[g][e];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(AD_WARPS * 32) attend_dec2_4(const AttDec a) { attend_dec_t<2, 4>(a); }
extern "C" __global__ void __launch_bounds__(AD_WARPS * 32) attend_dec4_4(const AttDec a) { attend_dec_t<4, 4>(a); }
extern "C" __global__ void __launch_bounds__(AD_WARPS * 32) attend_dec8_4(const AttDec a) { attend_dec_t<8, 4>(a); }
extern "C" __global__ void __launch_bounds__(AD_WARPS * 32) attend_dec2_8(const AttDec a) { attend_dec_t<2, 8>(a); }
extern "C" __global__ void __launch_bounds__(AD_WARPS * 32) attend_dec4_8(const AttDec a) { attend_dec_t<4, 8>(a); }

#define AMB_THREADS 256

// argmax_split is argmax_rows with each row split across gridDim.x blocks
// of AMB_THREADS threads (row blockIdx.y): each block writes the best of
// its share to part, and the block that finishes a row's last share
// reduces them into dst and leaves count[row] zero again.
extern "C" __global__ void __launch_bounds__(AMB_THREADS) argmax_split(float* dst, const float* x, int n, float* part, int* count) {
    __shared__ float sv[AMB_THREADS / 32];
    __shared__ int si[AMB_THREADS / 32];
    __shared__ int last;
    pdl_wait();
    pdl_launch();
    int r = blockIdx.y, nb = gridDim.x;
    const float* row = x + (i64)r * n;
    int per = (n + nb - 1) / nb;
    int lo = blockIdx.x * per, hi = min(n, lo + per);
    float best = NEG_INF;
    int bi = 0x7fffffff;
    for (int i0 = lo + threadIdx.x; i0 < hi; i0 += AMB_THREADS * AM_NB) {
        float v[AM_NB];
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = i0 + j * AMB_THREADS;
            v[j] = i < hi ? row[i] : NEG_INF;
        }
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = i0 + j * AMB_THREADS;
            if (i < hi && (v[j] > best || bi == 0x7fffffff)) best = v[j], bi = i;
        }
    }
    am_block(best, bi, sv, si);
    float* pt = part + (i64)r * nb * 2;
    if (threadIdx.x == 0) {
        pt[2 * blockIdx.x] = best;
        pt[2 * blockIdx.x + 1] = __int_as_float(bi);
        __threadfence();
        last = atomicAdd(&count[r], 1) == nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    best = NEG_INF;
    bi = 0x7fffffff;
    for (int b = threadIdx.x; b < nb; b += AMB_THREADS) am_merge(best, bi, ld_cg(pt + 2 * b), __float_as_int(ld_cg(pt + 2 * b + 1)));
    __syncthreads();
    am_block(best, bi, sv, si);
    if (threadIdx.x == 0) {
        dst[(i64)r * 2] = best;
        dst[(i64)r * 2 + 1] = (float)bi;
        count[r] = 0;
    }
}

#define TK_MAX 256

// tk_key orders floats as unsigned keys, with -0 and +0 equal.
__device__ __forceinline__ u32 tk_key(float f) { return fkey(f == 0.0f ? 0.0f : f); }

// topk_rows writes, for each row of x (n values; one block of 1024 threads
// per row), its k ≤ TK_MAX largest values in descending order, the lower
// index first among equal values, to dst[r*2k : r*2k+k] and their indices
// (as float) to dst[r*2k+k : r*2k+2k]. It finds the k-th largest key by a
// radix select over 11, 11 and 10 bits, gathers every greater element and
// the lowest-indexed equal ones, and sorts those.
extern "C" __global__ void __launch_bounds__(1024) topk_rows(float* dst, const float* x, int n, int k) {
    __shared__ u32 hist[2048];
    __shared__ unsigned long long cand[TK_MAX];
    __shared__ int wcount[32];
    __shared__ u32 s_sel;
    __shared__ int s_need, s_gt, s_taken, s_eq;
    pdl_wait();
    pdl_launch();
    const float* row = x + (i64)blockIdx.x * n;
    int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    u32 prefix = 0, mask = 0;
    int need = k;
    for (int pass = 0; pass < 3; pass++) {
        int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        int nb = pass < 2 ? 2048 : 1024;
        for (int i = tid; i < nb; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        // AM_NB loads in flight per thread (the counts do not depend on
        // the order). The first pass's bins are few and crowded (the sign
        // and exponent of values of one scale): a warp adds each of its
        // bins once.
        for (int b0 = 0; b0 < n; b0 += blockDim.x * AM_NB) {
            float v[AM_NB];
#pragma unroll
            for (int j = 0; j < AM_NB; j++) {
                int i = b0 + j * blockDim.x + tid;
                v[j] = i < n ? row[i] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < AM_NB; j++) {
                u32 key = tk_key(v[j]);
                bool in = b0 + j * (int)blockDim.x + tid < n && (key & mask) == prefix;
                u32 bin = (key >> shift) & (nb - 1);
                if (pass == 0) {
                    u32 same = __match_any_sync(0xffffffffu, in ? bin : 0xffffffffu);
                    if (in && lane == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
                } else if (in) {
                    atomicAdd(&hist[bin], 1u);
                }
            }
        }
        __syncthreads();
        if (wid == 0) {
            // Lane l sums bins [nb - (l+1)·per, nb - l·per), from the top.
            int per = nb / 32;
            int hi = nb - lane * per;
            u32 s = 0;
            for (int b = hi - per; b < hi; b++) s += hist[b];
            // Inclusive prefix over lanes (from the top bins down).
            u32 inc = s;
            for (int o = 1; o < 32; o <<= 1) {
                u32 v = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += v;
            }
            u32 exc = inc - s;
            bool here = exc < (u32)need && inc >= (u32)need;
            if (here) {
                u32 cum = exc;
                for (int b = hi - 1; b >= hi - per; b--) {
                    if (cum + hist[b] >= (u32)need) {
                        s_sel = b;
                        s_need = need - cum;
                        s_eq = hist[b];
                        break;
                    }
                    cum += hist[b];
                }
            }
        }
        __syncthreads();
        prefix |= s_sel << shift;
        mask |= (u32)(nb - 1) << shift;
        need = s_need;
        __syncthreads();
    }
    // prefix is the k-th largest key; need of the elements equal to it are
    // taken, the lowest indices first.
    if (tid == 0) s_gt = 0, s_taken = 0;
    __syncthreads();
    int ngt = k - need;
    // Usually every element equal to the k-th largest is taken: then the
    // order in which they are gathered does not matter (the sort below
    // breaks ties by index).
    for (int b0 = 0; s_eq == need && b0 < n; b0 += blockDim.x * AM_NB) {
        float v[AM_NB];
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = b0 + j * blockDim.x + tid;
            v[j] = i < n ? row[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < AM_NB; j++) {
            int i = b0 + j * blockDim.x + tid;
            u32 key = tk_key(v[j]);
            if (i < n && key >= prefix) cand[atomicAdd(&s_gt, 1)] = ((unsigned long long)key << 32) | (0xffffffffu - (u32)i);
        }
    }
    for (int base = 0; s_eq != need && base < n; base += blockDim.x) {
        int i = base + tid;
        u32 key = i < n ? tk_key(row[i]) : 0;
        bool eq = i < n && key == prefix;
        if (i < n && key > prefix) {
            int s = atomicAdd(&s_gt, 1);
            cand[s] = ((unsigned long long)key << 32) | (0xffffffffu - (u32)i);
        }
        u32 bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) wcount[wid] = __popc(bal);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            int c = wcount[w];
            if (w < wid) before += c;
            total += c;
        }
        int rank = s_taken + before + __popc(bal & ((1u << lane) - 1));
        if (eq && rank < need) cand[ngt + rank] = ((unsigned long long)key << 32) | (0xffffffffu - (u32)i);
        __syncthreads();
        if (tid == 0) s_taken += total;
    }
    __syncthreads();
    // Bitonic sort of cand[0:P) descending, padded with zeros.
    int P = 1;
    while (P < k) P <<= 1;
    for (int i = k + tid; i < P; i += blockDim.x) cand[i] = 0;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = tid; t < P / 2; t += blockDim.x) {
                int lo = 2 * t - (t & (stride - 1));
                int hi = lo + stride;
                bool desc = (lo & size) == 0;
                unsigned long long a = cand[lo], c = cand[hi];
                if ((a < c) == desc) cand[lo] = c, cand[hi] = a;
            }
            __syncthreads();
        }
    }
    for (int j = tid; j < k; j += blockDim.x) {
        u32 idx = 0xffffffffu - (u32)(cand[j] & 0xffffffffu);
        dst[(i64)blockIdx.x * 2 * k + j] = row[idx];
        dst[(i64)blockIdx.x * 2 * k + k + j] = (float)idx;
    }
}
