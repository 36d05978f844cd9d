// Tensor-core matrix products for prefill: dst[n, m] (f32) = x[n, k] ·
// w[m, k]ᵀ with x and w in the same half-precision type (bf16 or f16) and
// f32 accumulation, on mma.sync m16n8k16. The host converts the f32
// activations with to_half first (and, for the precise mode, also their
// rounding residual, which a second pass adds in).
//
// Tiling: a block of 256 threads (8 warps, 2 along n × 4 along m) computes a
// 128×128 tile of dst; each warp 64×32 (4×4 mma tiles). The k dimension goes
// in steps of 32 through a 3-stage ring of shared-memory tiles filled with
// cp.async, so loads of step s+2 overlap the mma of step s. Shared rows are
// 64 bytes (four 16-byte chunks) stored with chunk c at c ^ ((row>>1)&3), so
// that ldmatrix reads of eight rows hit eight different bank groups. Needs k
// a multiple of 8 and 16-byte aligned rows (the host checks); rows beyond n
// or m and chunks beyond k are filled with zeros.

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_STAGES 3

// half1 rounds v to bf16 (dt 2) or f16 (dt 1), to nearest even, and
// returns the rounded value back in f32 in *back.
__device__ __forceinline__ u16 half1(float v, int dt, float* back) {
    u16 h;
    if (dt == DT_BF16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        *back = bf2f(h);
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        *back = h2f(h);
    }
    return h;
}

// to_half converts n f32 values (n a multiple of 4, 16-byte aligned) to
// bf16 (dt 2) or f16 (dt 1), rounding to nearest even. With lo set it also
// stores the residual x - half(x), rounded the same way, so that hi + lo
// carries ~16 bits of x.
extern "C" __global__ void to_half(u16* hi, u16* lo, const float* x, i64 n, int dt) {
    GRID_STRIDE(i, n / 4) {
        F4 v = ((const F4*)x)[i];
        float f[4] = {v.x, v.y, v.z, v.w}, back[4];
        u16 h[4];
#pragma unroll
        for (int e = 0; e < 4; e++) h[e] = half1(f[e], dt, &back[e]);
        ((unsigned long long*)hi)[i] = (unsigned long long)h[0] | (unsigned long long)h[1] << 16 |
                                       (unsigned long long)h[2] << 32 | (unsigned long long)h[3] << 48;
        if (lo) {
            u16 l[4];
            float dummy;
#pragma unroll
            for (int e = 0; e < 4; e++) l[e] = half1(f[e] - back[e], dt, &dummy);
            ((unsigned long long*)lo)[i] = (unsigned long long)l[0] | (unsigned long long)l[1] << 16 |
                                           (unsigned long long)l[2] << 32 | (unsigned long long)l[3] << 48;
        }
    }
}

// tc_swz returns the byte offset of 16-byte chunk c of row r in a tile of
// 64-byte rows.
__device__ __forceinline__ u32 tc_swz(int r, int c) { return (u32)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4)); }

template <int DT>
__device__ __forceinline__ void gemm_tc_t(float* dst, const u16* x, const u16* w, int n, int m, int k, int acc) {
    __shared__ __align__(128) unsigned char sm[TC_STAGES][2][TC_BM * TC_BK * 2];
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int wn = warp >> 2, wm = warp & 3; // warp's place: 64 rows of x × 32 rows of w
    int r0 = blockIdx.y * TC_BM, c0 = blockIdx.x * TC_BN;
    int steps = (k + TC_BK - 1) / TC_BK;

    // Each thread copies two 16-byte chunks of each tile per stage.
    auto load = [&](int stage, int step) {
        int k0 = step * TC_BK;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int e = tid + j * 256, r = e >> 2, c = e & 3;
            int gk = k0 + c * 8;
            int gr = r0 + r;
            bool ok = gr < n && gk < k;
            const u16* src = x + (ok ? (i64)gr * k + gk : 0);
            cp_async16(smem_addr(&sm[stage][0][0]) + tc_swz(r, c), src, ok ? 16 : 0);
            int gc = c0 + r;
            ok = gc < m && gk < k;
            src = w + (ok ? (i64)gc * k + gk : 0);
            cp_async16(smem_addr(&sm[stage][1][0]) + tc_swz(r, c), src, ok ? 16 : 0);
        }
    };

    float c[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) c[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < steps) load(s, s);
        cp_async_commit();
    }
    for (int step = 0; step < steps; step++) {
        cp_async_wait<TC_STAGES - 2>();
        __syncthreads();
        // Refill the stage consumed in the previous step.
        int nx = step + TC_STAGES - 1;
        if (nx < steps) load(nx % TC_STAGES, nx);
        cp_async_commit();
        int st = step % TC_STAGES;
        u32 as = smem_addr(&sm[st][0][0]), bs = smem_addr(&sm[st][1][0]);
#pragma unroll
        for (int kk = 0; kk < 2; kk++) { // two k16 halves of the step
            u32 a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wn * 64 + i * 16 + (lane & 15);
                int ch = kk * 2 + (lane >> 4);
                ldmatrix_x4(a[i], as + tc_swz(r, ch));
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int r = wm * 32 + j * 16 + (lane & 7) + ((lane >> 4) << 3);
                int ch = kk * 2 + ((lane >> 3) & 1);
                u32 t[4];
                ldmatrix_x4(t, bs + tc_swz(r, ch));
                b[2 * j][0] = t[0];
                b[2 * j][1] = t[1];
                b[2 * j + 1][0] = t[2];
                b[2 * j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma16816<DT>(c[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();

    // Thread layout of an m16n8 accumulator: c[0..1] at (lane/4, 2·(lane%4)
    // + 0..1), c[2..3] eight rows below.
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int gr = r0 + wn * 64 + i * 16 + (lane >> 2) + h * 8;
            if (gr >= n) continue;
            float* drow = dst + (i64)gr * m;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int gc = c0 + wm * 32 + j * 8 + (lane & 3) * 2;
                float v0 = c[i][j][2 * h], v1 = c[i][j][2 * h + 1];
                if (acc) {
                    if (gc < m) v0 += drow[gc];
                    if (gc + 1 < m) v1 += drow[gc + 1];
                }
                if (gc + 1 < m && (m & 1) == 0) {
                    *(F2*)(drow + gc) = F2{v0, v1};
                } else {
                    if (gc < m) drow[gc] = v0;
                    if (gc + 1 < m) drow[gc + 1] = v1;
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2) gemm_tc_bf16(float* dst, const u16* x, const u16* w, int n, int m, int k, int acc) {
    gemm_tc_t<DT_BF16>(dst, x, w, n, m, k, acc);
}
extern "C" __global__ void __launch_bounds__(256, 2) gemm_tc_f16(float* dst, const u16* x, const u16* w, int n, int m, int k, int acc) {
    gemm_tc_t<DT_F16>(dst, x, w, n, m, k, acc);
}
