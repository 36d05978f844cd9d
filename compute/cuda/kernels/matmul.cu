// Matrix products dst[n, m] = x[n, k] · w[m, k]ᵀ with float32 activations
// and weights kept in their storage type (f32, f16, bf16), accumulating in
// float32 on the SIMT cores.
//
// gemv: n ≤ 4 (decode). Bandwidth-bound: one warp per weight row, 16-byte
// streaming loads of the row (eight in flight per lane), x read through L1. Needs k a multiple of 8 (4
// for f32) and 16-byte aligned rows; the host falls back to gemm otherwise.
//
// gemm: any n (prefill). 64×64 output tiles, 256 threads computing 4×4 each
// from shared-memory tiles of depth 16.

#define GEMV_WARPS 4
#define GEMV_UNROLL 8

template <int DT, int NR>
__device__ __forceinline__ void gemv_t(float* dst, const float* x, const void* w, int m, int k) {
    const int V = DT == DT_F32 ? 4 : 8;
    const int ES = DT == DT_F32 ? 4 : 2;
    int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= m) return;
    const char* wr = (const char*)w + (i64)row * k * ES;
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    int nv = k / V;
    // Issue GEMV_UNROLL 16-byte loads per lane before using any, so that
    // enough bytes are in flight to cover the memory latency.
    for (int t0 = lane; t0 < nv; t0 += 32 * GEMV_UNROLL) {
        U4 u[GEMV_UNROLL];
#pragma unroll
        for (int j = 0; j < GEMV_UNROLL; j++) {
            int t = t0 + 32 * j;
            if (t < nv) u[j] = ld_stream(wr + (i64)t * 16);
        }
#pragma unroll
        for (int j = 0; j < GEMV_UNROLL; j++) {
            int t = t0 + 32 * j;
            if (t >= nv) break;
            float f[V];
            unpack16<DT>(u[j], f);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const F4* xr = (const F4*)(x + (i64)r * k + (i64)t * V);
#pragma unroll
                for (int q = 0; q < V / 4; q++) {
                    F4 a = xr[q];
                    acc[r] += f[4 * q] * a.x + f[4 * q + 1] * a.y + f[4 * q + 2] * a.z + f[4 * q + 3] * a.w;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < NR; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0) dst[(i64)r * m + row] = s;
    }
}

#define GEMV(name, DT, NR)                                                                       \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32)                                \
        name(float* dst, const float* x, const void* w, int m, int k) { gemv_t<DT, NR>(dst, x, w, m, k); }
GEMV(gemv_f32_1, DT_F32, 1)
GEMV(gemv_f32_2, DT_F32, 2)
GEMV(gemv_f32_3, DT_F32, 3)
GEMV(gemv_f32_4, DT_F32, 4)
GEMV(gemv_f16_1, DT_F16, 1)
GEMV(gemv_f16_2, DT_F16, 2)
GEMV(gemv_f16_3, DT_F16, 3)
GEMV(gemv_f16_4, DT_F16, 4)
GEMV(gemv_bf16_1, DT_BF16, 1)
GEMV(gemv_bf16_2, DT_BF16, 2)
GEMV(gemv_bf16_3, DT_BF16, 3)
GEMV(gemv_bf16_4, DT_BF16, 4)

#define TM 64
#define TN 64
#define TK 16

template <int DT>
__device__ __forceinline__ void gemm_t(float* dst, const float* x, const void* w, int n, int m, int k) {
    __shared__ float As[TK][TM + 4];
    __shared__ float Bs[TK][TN + 4];
    int tid = threadIdx.x;
    int tx = tid & 15, ty = tid >> 4;
    int r0 = blockIdx.y * TM, c0 = blockIdx.x * TN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += TK) {
#pragma unroll
        for (int e = tid; e < TM * TK; e += 256) {
            int rr = e / TK, kk = e % TK, gr = r0 + rr, gk = k0 + kk;
            As[kk][rr] = (gr < n && gk < k) ? x[(i64)gr * k + gk] : 0.0f;
        }
#pragma unroll
        for (int e = tid; e < TN * TK; e += 256) {
            int cc = e / TK, kk = e % TK, gc = c0 + cc, gk = k0 + kk;
            Bs[kk][cc] = (gc < m && gk < k) ? ldf(w, DT, (i64)gc * k + gk) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[kk][ty * 4 + i];
                b[i] = Bs[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int gr = r0 + ty * 4 + i;
        if (gr >= n) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int gc = c0 + tx * 4 + j;
            if (gc < m) dst[(i64)gr * m + gc] = acc[i][j];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) gemm_f32(float* dst, const float* x, const void* w, int n, int m, int k) { gemm_t<DT_F32>(dst, x, w, n, m, k); }
extern "C" __global__ void __launch_bounds__(256) gemm_f16(float* dst, const float* x, const void* w, int n, int m, int k) { gemm_t<DT_F16>(dst, x, w, n, m, k); }
extern "C" __global__ void __launch_bounds__(256) gemm_bf16(float* dst, const float* x, const void* w, int n, int m, int k) { gemm_t<DT_BF16>(dst, x, w, n, m, k); }
