// The fused matrix-vector product of decode (FGemv, kernels/decode.cu) on
// block-quantized weights: the same launches as fgemv (a norm folded in,
// up to three matrices stacked, GLU pairs, addends in the epilogue), with
// the products of qgemv (kernels/quant.cu).
//
// Each block quantizes the input row (normalised first in norm mode) into
// shared memory as quantize_q8 does, then its warps walk units of rows as
// fgemv's do, dotting the weight units (QUnit) with dp4a. A lane takes the
// units lane, lane + 32, … of a row and sums them in that order, as qgemv
// does, so every product is the one the separate kernels compute. Two rows
// per unit, or in one-row mode one row in two streams (the second FQ_U·32
// units ahead), so that each lane has two streams of loads in flight; the
// loads of a unit's first stretch are issued while the last stretch of the
// unit before is multiplied.

// FQU is how many units a stream loads per step: about four 16-byte
// chunks, as many as the registers hold without spilling.
template <int T>
struct FQU {
    enum { U = 2 };
};
template <>
struct FQU<QT_Q4_0> {
    enum { U = 4 };
};
template <>
struct FQU<QT_Q6_K> {
    enum { U = 1 };
};
template <>
struct FQU<QT_Q5_K> {
    enum { U = 1 };
};

#define FQ_G 8

// fq_rows finds the matrix and row of the two streams of unit u (-1: none).
__device__ __forceinline__ void fq_rows(const FGemv& a, int u, int& ma, int& ra, int& mb, int& rb) {
    if (a.mode & FG_MODE_GLU) {
        ma = mb = -1;
        ra = rb = u;
        if (u < a.m[0]) ma = 0, mb = 1;
    } else if (a.mode & FG_MODE_ONE) {
        fg_row(a, u, ma, ra);
        mb = ma, rb = ra;
    } else {
        fg_row(a, 2 * u, ma, ra);
        fg_row(a, 2 * u + 1, mb, rb);
    }
}

// fq_load issues the loads of U units of a row, u0, u0 + 32, …, those below nu.
template <int T, int U>
__device__ __forceinline__ void fq_load(QUnit<T>* q, const FGemv& a, int mat, int row, int nu, int u0) {
    if (mat < 0) return;
    const char* codes = (const char*)a.w[mat];
#pragma unroll
    for (int j = 0; j < U; j++) {
        int u = u0 + 32 * j;
        if (u < nu) q[j].load(codes, a.sc[mat], a.dd[mat], row, nu, u, 32, 0);
    }
}

template <int T, bool NORM>
__device__ __forceinline__ void fqgemv_t(const FGemv& a) {
    typedef QUnit<T> Q;
    const int U = FQU<T>::U;
    extern __shared__ U4 fq_smem[];
    __shared__ double sh[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int stride = gridDim.x * FG_WARPS;
    int unit = blockIdx.x * FG_WARPS + warp;
    int k = a.k, nu = k / Q::EL;
    bool one = a.mode & FG_MODE_ONE;
    int ob = one ? 32 * U : 0, S = one ? 64 * U : 32 * U;
    int ma, ra, mb, rb;
    fq_rows(a, unit, ma, ra, mb, rb);
    pdl_launch();
    Q qa[U], qb[U];
    fq_load<T, U>(qa, a, ma, ra, nu, lane);
    fq_load<T, U>(qb, a, mb, rb, nu, lane + ob);
    pdl_wait();
    // The input, quantized: k codes, then a QMeta per 32 values.
    char* qx = (char*)fq_smem;
    QMeta* meta = (QMeta*)(qx + k);
    const float* x = a.x;
    float inv = 1.0f;
    if (NORM) {
        inv = (float)(1.0 / sqrt(fg_sumsq(x, k, sh) / k + (double)a.eps));
    }
    // FQ_G blocks of 32 per warp at a time, their loads issued together.
    const int nb = k >> 5;
    for (int b0 = warp; b0 < nb; b0 += FQ_G * FG_WARPS) {
        float v[FQ_G], nv[FQ_G];
#pragma unroll
        for (int j = 0; j < FQ_G; j++) {
            int b = b0 + j * FG_WARPS;
            v[j] = b < nb ? x[32 * b + lane] : 0.0f;
            nv[j] = NORM && a.nw && b < nb ? ldf(a.nw, a.nwdt, 32 * b + lane) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < FQ_G; j++) {
            int b = b0 + j * FG_WARPS, c = 32 * b + lane;
            if (b >= nb) break;
            float o = v[j];
            if (NORM) {
                o = o * inv;
                if (a.nw) o *= nv[j] + a.off;
                if (blockIdx.x == 0) a.h[c] = o;
            }
            q8_block(o, lane, qx + 32 * b, meta + b);
        }
    }
    __syncthreads();
    while (ma >= 0) {
        int nma, nra, nmb, nrb;
        fq_rows(a, unit + stride, nma, nra, nmb, nrb);
        float acca = 0.0f, accb = 0.0f;
        for (int u0 = lane; u0 < nu; u0 += S) {
            Q ca[U], cb[U];
#pragma unroll
            for (int j = 0; j < U; j++) ca[j] = qa[j], cb[j] = qb[j];
            int un = u0 + S;
            if (un < nu) {
                fq_load<T, U>(qa, a, ma, ra, nu, un);
                fq_load<T, U>(qb, a, mb, rb, nu, un + ob);
            } else {
                fq_load<T, U>(qa, a, nma, nra, nu, lane);
                fq_load<T, U>(qb, a, nmb, nrb, nu, lane + ob);
            }
#pragma unroll
            for (int j = 0; j < U; j++) {
                int u = u0 + 32 * j;
                if (u >= nu) break;
                acca += ca[j].dot(qx, meta, u, 32);
            }
            if (mb < 0) continue;
#pragma unroll
            for (int j = 0; j < U; j++) {
                int u = u0 + ob + 32 * j;
                if (u >= nu) break;
                float s = cb[j].dot(qx, meta, u, 32);
                if (one)
                    acca += s;
                else
                    accb += s;
            }
        }
        acca = warp_sum(acca);
        accb = warp_sum(accb);
        if (lane == 0) {
            if (one) {
                fg_out(a, ma, ra, acca);
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
        ma = nma, ra = nra, mb = nmb, rb = nrb;
    }
}

#define FQGEMV(name, T, NORM) \
    extern "C" __global__ void __launch_bounds__(FG_WARPS * 32, 2) name(const FGemv a) { fqgemv_t<T, NORM>(a); }
FQGEMV(fqgemv_q8_0, QT_Q8_0, false)
FQGEMV(fqgemv_norm_q8_0, QT_Q8_0, true)
FQGEMV(fqgemv_q4_0, QT_Q4_0, false)
FQGEMV(fqgemv_norm_q4_0, QT_Q4_0, true)
FQGEMV(fqgemv_q5_0, QT_Q5_0, false)
FQGEMV(fqgemv_norm_q5_0, QT_Q5_0, true)
FQGEMV(fqgemv_q4_k, QT_Q4_K, false)
FQGEMV(fqgemv_norm_q4_k, QT_Q4_K, true)
FQGEMV(fqgemv_q5_k, QT_Q5_K, false)
FQGEMV(fqgemv_norm_q5_k, QT_Q5_K, true)
FQGEMV(fqgemv_q6_k, QT_Q6_K, false)
FQGEMV(fqgemv_norm_q6_k, QT_Q6_K, true)
