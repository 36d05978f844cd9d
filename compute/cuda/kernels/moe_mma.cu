// Grouped expert products on the tensor cores, for bf16 expert weights.
//
// The same tiles as moe_ggateup and moe_gdown (MGM pairs of one expert ×
// MGN output columns), computed with mma.sync m16n8k16 (bf16 inputs, f32
// accumulation). The weights are bf16 already; each float32 activation a
// is split as a = hi + lo with hi = bf16(a) and lo = bf16(a − hi), and both
// halves are multiplied, so the products keep about 16 bits of the
// activation's mantissa (a relative error near 2⁻¹⁷) rather than bf16's 8.
//
// 128 threads, 4 warps; warp w computes all MGM rows of columns
// 16w … 16w+15 (2 × 2 fragments of 16 × 8). Needs k a multiple of 8 and
// 16-byte aligned weight rows and activation rows (the host checks).

#define MMK 64 // depth of a shared-memory stage
#define MMP 8  // padding of a shared row, in bf16 values

struct alignas(8) MMU2 {
    u32 x, y;
};

__device__ __forceinline__ u32 f2bf_bits(float x) {
    u32 u = __float_as_uint(x);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ void mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// mm_tile multiplies rows xrow[0 … rows-1] of x [*, k] (xs floats apart)
// by w0 (and w1 when TWO) [m, k] bf16 for columns c0 … c0+MGN-1. acc0/acc1
// [mt][nt][4] receive this warp's fragments.
template <bool TWO>
__device__ __forceinline__ void mm_tile(const float* x, i64 xs, const int* xrow, int rows, const u16* w0, const u16* w1,
                                        int m, int k, int c0, float acc0[2][2][4], float acc1[2][2][4]) {
    __shared__ __align__(16) u16 ahi[MGM][MMK + MMP], alo[MGM][MMK + MMP];
    __shared__ __align__(16) u16 b0s[MGN][MMK + MMP];
    __shared__ __align__(16) u16 b1s[TWO ? MGN : 1][MMK + MMP];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc0[a][b][q] = acc1[a][b][q] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += MMK) {
        // Activations: MGM × MMK floats, four per thread per step, split.
        for (int e = tid; e < MGM * MMK / 4; e += 128) {
            int rr = e / (MMK / 4), kk = (e - rr * (MMK / 4)) * 4, gk = k0 + kk;
            F4 v = {0.0f, 0.0f, 0.0f, 0.0f};
            if (rr < rows && gk < k) v = *(const F4*)(x + (i64)xrow[rr] * xs + gk);
            float f[4] = {v.x, v.y, v.z, v.w};
            u32 h[4], l[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                h[j] = f2bf_bits(f[j]);
                l[j] = f2bf_bits(f[j] - __uint_as_float(h[j] << 16));
            }
            *(MMU2*)&ahi[rr][kk] = MMU2{h[0] | h[1] << 16, h[2] | h[3] << 16};
            *(MMU2*)&alo[rr][kk] = MMU2{l[0] | l[1] << 16, l[2] | l[3] << 16};
        }
        // Weights: MGN rows × MMK values, 16 bytes per load.
        for (int e = tid; e < MGN * MMK / 8; e += 128) {
            int cc = e / (MMK / 8), kk = (e - cc * (MMK / 8)) * 8, gc = c0 + cc, gk = k0 + kk;
            U4 z = {0u, 0u, 0u, 0u}, v0 = z, v1 = z;
            if (gc < m && gk < k) {
                v0 = ld_stream(w0 + (i64)gc * k + gk);
                if (TWO) v1 = ld_stream(w1 + (i64)gc * k + gk);
            }
            *(U4*)&b0s[cc][kk] = v0;
            if (TWO) *(U4*)&b1s[cc][kk] = v1;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MMK; kk += 16) {
            u32 ah[2][4], al[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                int r = mt * 16 + gq;
                ah[mt][0] = *(const u32*)&ahi[r][kk + tq * 2];
                ah[mt][1] = *(const u32*)&ahi[r + 8][kk + tq * 2];
                ah[mt][2] = *(const u32*)&ahi[r][kk + tq * 2 + 8];
                ah[mt][3] = *(const u32*)&ahi[r + 8][kk + tq * 2 + 8];
                al[mt][0] = *(const u32*)&alo[r][kk + tq * 2];
                al[mt][1] = *(const u32*)&alo[r + 8][kk + tq * 2];
                al[mt][2] = *(const u32*)&alo[r][kk + tq * 2 + 8];
                al[mt][3] = *(const u32*)&alo[r + 8][kk + tq * 2 + 8];
            }
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                int n = warp * 16 + nt * 8 + gq;
                u32 p0 = *(const u32*)&b0s[n][kk + tq * 2], p1 = *(const u32*)&b0s[n][kk + tq * 2 + 8];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    mma_bf16(acc0[mt][nt], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], p0, p1);
                    mma_bf16(acc0[mt][nt], al[mt][0], al[mt][1], al[mt][2], al[mt][3], p0, p1);
                }
                if (TWO) {
                    u32 q0 = *(const u32*)&b1s[n][kk + tq * 2], q1 = *(const u32*)&b1s[n][kk + tq * 2 + 8];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma_bf16(acc1[mt][nt], ah[mt][0], ah[mt][1], ah[mt][2], ah[mt][3], q0, q1);
                        mma_bf16(acc1[mt][nt], al[mt][0], al[mt][1], al[mt][2], al[mt][3], q0, q1);
                    }
                }
            }
        }
        __syncthreads();
    }
}

// mm_at gives the tile row and column of value q of fragment (mt, nt) of
// this thread's warp.
__device__ __forceinline__ void mm_at(int mt, int nt, int q, int* r, int* c) {
    int warp = threadIdx.x >> 5, gq = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;
    *r = mt * 16 + gq + (q >> 1) * 8;
    *c = warp * 16 + nt * 8 + tq * 2 + (q & 1);
}

// moe_mgateup is moe_ggateup on the tensor cores (bf16 gate and up).
extern "C" __global__ void __launch_bounds__(128)
    moe_mgateup(float* act, const float* x, int* g, const unsigned long long* tab, int nexp, int P, int slots,
                int hid, int stride, int actfn, float limit, float alpha) {
    __shared__ int xrow[MGM];
    int tile = blockIdx.y;
    if (tile >= g[0]) return;
    int* tl = mg_tiles(g, nexp, P) + 2 * tile;
    int e = tl[0], r0 = tl[1];
    const unsigned long long* d = tab + (i64)e * MOE_DESC;
    int inter = (int)d[6], c0 = blockIdx.x * MGN;
    if (c0 >= inter) return;
    int base = mg_off(g)[e] + r0;
    int rows = min(MGM, mg_off(g)[e + 1] - base);
    const int* order = mg_order(g, nexp);
    if (threadIdx.x < MGM) xrow[threadIdx.x] = threadIdx.x < rows ? order[base + threadIdx.x] / slots : 0;
    __syncthreads();
    int bdt = ((int)d[7] >> 16) & 255;
    float ag[2][2][4], au[2][2][4];
    mm_tile<true>(x, hid, xrow, rows, (const u16*)d[0], (const u16*)d[1], inter, hid, c0, ag, au);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int r, c;
        mm_at(mt, nt, q, &r, &c);
        c += c0;
        if (r < rows && c < inter) {
            float gv = ag[mt][nt][q], uv = au[mt][nt][q];
            if (d[3]) gv += ldf((const void*)d[3], bdt, c);
            if (d[4]) uv += ldf((const void*)d[4], bdt, c);
            float o;
            if (limit > 0.0f) {
                gv = fminf(gv, limit);
                uv = fminf(fmaxf(uv, -limit), limit);
                o = (uv + 1.0f) * gv * sigmoidf(alpha * gv);
            } else {
                o = activate(gv, actfn) * uv;
            }
            act[(i64)(base + r) * stride + c] = o;
        }
    }
}

// moe_mgdown is moe_gdown on the tensor cores (bf16 down projections).
extern "C" __global__ void __launch_bounds__(128)
    moe_mgdown(float* y, const float* act, int* g, const unsigned long long* tab, int nexp, int P, int hid, int stride) {
    __shared__ int xrow[MGM];
    int tile = blockIdx.y;
    if (tile >= g[0]) return;
    int* tl = mg_tiles(g, nexp, P) + 2 * tile;
    int e = tl[0], r0 = tl[1];
    const unsigned long long* d = tab + (i64)e * MOE_DESC;
    int inter = (int)d[6], c0 = blockIdx.x * MGN;
    int base = mg_off(g)[e] + r0;
    int rows = min(MGM, mg_off(g)[e + 1] - base);
    if (threadIdx.x < MGM) xrow[threadIdx.x] = base + min((int)threadIdx.x, rows - 1);
    __syncthreads();
    int dbdt = ((int)d[7] >> 24) & 255;
    float acc[2][2][4], unused[2][2][4];
    mm_tile<false>(act, stride, xrow, rows, (const u16*)d[2], 0, hid, inter, c0, acc, unused);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int r, c;
        mm_at(mt, nt, q, &r, &c);
        c += c0;
        if (r < rows && c < hid) {
            float v = acc[mt][nt][q];
            if (d[5]) v += ldf((const void*)d[5], dbdt, c);
            y[(i64)(base + r) * hid + c] = v;
        }
    }
}
