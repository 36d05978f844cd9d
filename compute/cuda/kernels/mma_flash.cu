// Flash attention for prefill chunks on the tensor cores: causal, GQA,
// sliding window, soft cap and sinks, over the cached positions plus the
// chunk's own keys. Operands are bf16 (mma.sync m16n8k16), scores, softmax
// and accumulators f32, with an online softmax over tiles of BKV keys.
//
// With all set (an encoder's bidirectional attention, compute.Bidirectional)
// there is no cache and no causal mask: pos is null (start 0), the keys are
// the n rows of the input, and row i sees every row j, or those with
// |i - j| < window.
//
// kv_half first gathers the keys and values a chunk can see (positions
// base … start+n-1, base = start-window+1 for sliding layers, else 0) from
// the f32 cache (plain or ring) and the chunk into contiguous bf16 rows, so
// that flash_attend streams them with cp.async. Both read start = pos[0]
// on the device.
//
// flash_attend: one block of 4 warps per (64·MT queries, head); each warp
// owns MT tiles of 16 query rows, so that every K and V fragment read from
// shared memory feeds MT mma instructions. Per key tile: S = Q·Kᵀ (bf16 mma), scale, soft cap, mask,
// online softmax in registers, P (rounded to bf16, straight from the S
// accumulators) · V into the f32 output accumulators. K and V tiles are
// double-buffered in shared memory. Rows of hd bf16 values are stored with
// 16-byte chunk c at c ^ (row & 7), so ldmatrix reads are conflict-free.

#define FA_WARPS 4

// fa_base returns the first key position a chunk starting at start can see.
__device__ __forceinline__ int fa_base(int start, int window) { return window > 0 ? max(0, start - window + 1) : 0; }

// kv_half writes rows t = 0 … start+n-1-base of kh, vh (bf16, kc wide):
// the key and value at position base+t. Block t handles row t; blocks past
// the last row return. The grid (and flash_attend's rows) bounds the rows
// by the scratch the host sized. A null pos means start 0.
extern "C" __global__ void kv_half(u16* kh, u16* vh, const float* k, const float* v, const float* ck, const float* cv,
                                   const int* pos, int n, int kc, int cap, int ring, int window) {
    int start = pos ? pos[0] : 0, base = fa_base(start, window);
    int t = blockIdx.x, p = base + t;
    if (p >= start + n) return;
    const float *ks, *vs;
    if (p >= start) {
        ks = k + (i64)(p - start) * kc;
        vs = v + (i64)(p - start) * kc;
    } else {
        int slot = ring ? p % cap : p;
        ks = ck + (i64)slot * kc;
        vs = cv + (i64)slot * kc;
    }
    for (int c = threadIdx.x; c < kc; c += blockDim.x) {
        u16 a, b;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(a) : "f"(ks[c]));
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(vs[c]));
        kh[(i64)t * kc + c] = a;
        vh[(i64)t * kc + c] = b;
    }
}

template <int HD>
__device__ __forceinline__ u32 fa_swz(int r, int c) {
    return (u32)(r * (HD * 2) + ((c ^ (r & 7)) << 4));
}

template <int HD, int MT, int BKV>
__device__ void flash_t(float* out, const float* q, const u16* kh, const u16* vh, const int* pos,
                        int n, int rows, int heads, int kvheads, float scale, float softcap, int window,
                        const void* sinks, int sdt, int all) {
    extern __shared__ __align__(128) unsigned char fsm[];
    const int CH = HD / 8;              // 16-byte chunks per row
    const int BQ = FA_WARPS * 16 * MT;  // queries per block
    unsigned char* qs = fsm;
    unsigned char* ks = fsm + BQ * HD * 2;    // 2 stages
    unsigned char* vs = ks + 2 * BKV * HD * 2; // 2 stages
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // The longest rows of the causal triangle go first.
    int i0 = (gridDim.x - 1 - blockIdx.x) * BQ, h = blockIdx.y;
    int start = all ? 0 : pos[0], base = all ? 0 : fa_base(start, window);
    int qc = heads * HD, kc = kvheads * HD;
    int ko = (h / (heads / kvheads)) * HD;
    int total = min(start + n - base, rows); // rows of kh, vh

    // Stage Q as bf16.
    for (int e = tid; e < BQ * CH; e += FA_WARPS * 32) {
        int r = e / CH, c = e % CH;
        int gi = i0 + r;
        U4 u = {0, 0, 0, 0};
        if (gi < n) {
            const F4* src = (const F4*)(q + (i64)gi * qc + h * HD + c * 8);
            F4 a = src[0], b = src[1];
            u.x = pack_bf16(a.x, a.y);
            u.y = pack_bf16(a.z, a.w);
            u.z = pack_bf16(b.x, b.y);
            u.w = pack_bf16(b.z, b.w);
        }
        *(U4*)(qs + fa_swz<HD>(r, c)) = u;
    }

    // Key range of the block, as row indices of kh.
    int pmin = start + i0, pmax = start + min(i0 + BQ, n) - 1;
    int lo = window > 0 ? max(base, pmin - window + 1) : 0;
    int t0 = lo - base, t1 = pmax - base; // inclusive
    if (all) t1 = window > 0 ? min(n - 1, pmax + window - 1) : n - 1;
    int tiles = (t1 - t0) / BKV + 1;

    auto load = [&](int stage, int tile) {
        int tb = t0 + tile * BKV;
        u32 kd = smem_addr(ks + stage * BKV * HD * 2), vd = smem_addr(vs + stage * BKV * HD * 2);
        for (int e = tid; e < BKV * CH; e += FA_WARPS * 32) {
            int r = e / CH, c = e % CH;
            int t = tb + r;
            bool ok = t < total;
            i64 off = ok ? (i64)t * kc + ko + c * 8 : 0;
            cp_async16(kd + fa_swz<HD>(r, c), kh + off, ok ? 16 : 0);
            cp_async16(vd + fa_swz<HD>(r, c), vh + off, ok ? 16 : 0);
        }
    };

    // Warp rows: tile mt covers rows wr + 16·mt … +15; each thread holds
    // rows g and g+8 of each tile.
    int g = lane >> 2;
    int wr = warp * 16 * MT;
    int wq0 = start + i0 + wr, wq1 = wq0 + 16 * MT - 1; // the warp's query positions
    float o[MT][HD / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][j][e] = 0.0f;
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        mrow[mt][0] = mrow[mt][1] = NEG_INF;
        lrow[mt][0] = lrow[mt][1] = 0.0f;
    }
    const float L2E = 1.4426950408889634f;

    load(0, 0);
    cp_async_commit();
    for (int tile = 0; tile < tiles; tile++) {
        if (tile + 1 < tiles) load((tile + 1) & 1, tile + 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        int st = tile & 1;
        u32 qa = smem_addr(qs), ka = smem_addr(ks + st * BKV * HD * 2), va = smem_addr(vs + st * BKV * HD * 2);

        float s[MT][BKV / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < BKV / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ldmatrix_x4(a[mt], qa + fa_swz<HD>(wr + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
            for (int j = 0; j < BKV / 16; j++) {
                u32 t[4];
                ldmatrix_x4(t, ka + fa_swz<HD>(j * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
                u32 b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<DT_BF16>(s[mt][2 * j], a[mt], b0);
                    mma16816<DT_BF16>(s[mt][2 * j + 1], a[mt], b1);
                }
            }
        }

        // Scale, cap, mask (only where some key of the tile is hidden from
        // some row of the warp: warp-uniform), online softmax.
        int kb = base + t0 + tile * BKV; // position of the tile's first key
        bool masked = (!all && kb + BKV - 1 > wq0) || (window > 0 && kb <= wq1 - window) ||
                      (all && window > 0 && kb + BKV - 1 >= wq0 + window) || kb - base + BKV > total;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            int qp0 = wq0 + mt * 16 + g, qp1 = qp0 + 8;
            float mx[2] = {mrow[mt][0], mrow[mt][1]};
#pragma unroll
            for (int j = 0; j < BKV / 8; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[mt][j][e] * scale;
                    if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
                    if (masked) {
                        int kp = kb + j * 8 + (lane & 3) * 2 + (e & 1);
                        int qp = e < 2 ? qp0 : qp1;
                        bool ok = (all ? window <= 0 || kp < qp + window : kp <= qp) &&
                                  (window <= 0 || kp > qp - window) && kp - base < total;
                        x = ok ? x : NEG_INF;
                    }
                    s[mt][j][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            }
            float corr[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                // A row with no visible key yet keeps m = -inf; use 0 as
                // the base so that exp gives 0 rather than NaN.
                float mb = mx[r] == NEG_INF ? 0.0f : mx[r];
                corr[r] = exp2f((mrow[mt][r] - mb) * L2E);
                mrow[mt][r] = mx[r];
                lrow[mt][r] *= corr[r];
                mx[r] = mb * L2E;
            }
#pragma unroll
            for (int j = 0; j < BKV / 8; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(fmaf(s[mt][j][e], L2E, -mx[e >> 1]));
                    s[mt][j][e] = p;
                    lrow[mt][e >> 1] += p;
                }
            }
#pragma unroll
            for (int j = 0; j < HD / 8; j++) {
                o[mt][j][0] *= corr[0];
                o[mt][j][1] *= corr[0];
                o[mt][j][2] *= corr[1];
                o[mt][j][3] *= corr[1];
            }
        }
        // O += P·V.
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
            u32 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int j = 0; j < HD / 16; j++) {
                u32 t[4];
                ldmatrix_x4_trans(t, va + fa_swz<HD>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), j * 2 + (lane >> 4)));
                u32 b0[2] = {t[0], t[1]}, b1[2] = {t[2], t[3]};
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<DT_BF16>(o[mt][2 * j], a[mt], b0);
                    mma16816<DT_BF16>(o[mt][2 * j + 1], a[mt], b1);
                }
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>();

    // Final normalisation, with the sink joining the denominator.
    float sink = sinks ? ldf(sinks, sdt, h) : NEG_INF;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = lrow[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float m = mrow[mt][r], f = 1.0f;
            if (sinks) {
                float mf = fmaxf(m, sink);
                float c = exp2f((m - mf) * L2E);
                l = l * c + exp2f((sink - mf) * L2E);
                f = c;
            }
            float inv = f / l;
            int gi = i0 + wr + mt * 16 + g + r * 8;
            if (gi >= n) continue;
            float* orow = out + (i64)gi * qc + h * HD;
#pragma unroll
            for (int j = 0; j < HD / 8; j++) {
                int d = j * 8 + (lane & 3) * 2;
                *(F2*)(orow + d) = F2{o[mt][j][2 * r] * inv, o[mt][j][2 * r + 1] * inv};
            }
        }
    }
}

#define FLASH_ARGS float *out, const float *q, const u16 *kh, const u16 *vh, const int *pos, int n, int rows, int heads, int kvheads, \
                   float scale, float softcap, int window, const void *sinks, int sdt, int all
#define FLASH_CALL out, q, kh, vh, pos, n, rows, heads, kvheads, scale, softcap, window, sinks, sdt, all

// Tile shapes (query tiles per warp, keys per tile) by head dim; the host's
// flashConfigs must agree.
extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attend64(FLASH_ARGS) { flash_t<64, 2, 64>(FLASH_CALL); }
extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attend128(FLASH_ARGS) { flash_t<128, 2, 32>(FLASH_CALL); }
extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attend256(FLASH_ARGS) { flash_t<256, 1, 64>(FLASH_CALL); }

// Alternatives for head dim 128, compared in BenchmarkAttendPrefill.
extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attend128_m1k64(FLASH_ARGS) { flash_t<128, 1, 64>(FLASH_CALL); }
extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) flash_attend128_m1k32(FLASH_ARGS) { flash_t<128, 1, 32>(FLASH_CALL); }
