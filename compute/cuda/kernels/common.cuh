// Shared helpers for lem's CUDA kernels. Compiled with NVRTC without any
// CUDA headers: half and bfloat16 conversions are done by hand.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Storage types, numbered as compute.DType.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

// Programmatic dependent launch (pdl.go): a kernel launched with it waits
// for the kernel before it in pdl_wait, before touching anything that one
// may write, and lets the next start early with pdl_launch, which a kernel
// may call before its own pdl_wait: the next kernel's pdl_wait still waits
// for this one to end, and this one for the one before. Both are no-ops
// for a plain launch and before sm_90.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// ldf reads element i of a tensor of storage type dt as float.
__device__ __forceinline__ float ldf(const void* p, int dt, i64 i) {
    if (dt == DT_F32) return ((const float*)p)[i];
    if (dt == DT_BF16) return bf2f(((const u16*)p)[i]);
    return h2f(((const u16*)p)[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// block_sum_d returns the sum of v over the block (blockDim.x a multiple of
// 32, at most 1024) to every thread. sh holds 32 doubles.
__device__ double block_sum_d(double v, double* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(v);
}

#define NEG_INF __int_as_float(0xff800000)

// GRID_STRIDE loops i over [0, n) across the whole grid.
#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// softplusf is log(1 + eˣ), x itself above 20 (as PyTorch and the CPU
// backend compute it).
__device__ __forceinline__ float softplusf(float x) { return x > 20.0f ? x : (float)log1p(exp((double)x)); }

// sigmoidf is 1 / (1 + e⁻ˣ).
__device__ __forceinline__ float sigmoidf(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

// Sixteen bytes, for vector loads.
struct alignas(16) U4 {
    u32 x, y, z, w;
};
struct alignas(16) F4 {
    float x, y, z, w;
};

// ld_stream loads 16 bytes that are read once (weights): through the
// non-coherent path, without allocating in L1.
__device__ __forceinline__ U4 ld_stream(const void* p) {
    U4 u;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    return u;
}

// unpack16 widens 16 bytes of storage type DT into V floats.
template <int DT>
__device__ __forceinline__ void unpack16(U4 u, float* f) {
    u32 a[4] = {u.x, u.y, u.z, u.w};
    if (DT == DT_F32) {
#pragma unroll
        for (int i = 0; i < 4; i++) f[i] = __uint_as_float(a[i]);
    } else if (DT == DT_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(a[i] << 16);
            f[2 * i + 1] = __uint_as_float(a[i] & 0xffff0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = h2f((u16)(a[i] & 0xffffu));
            f[2 * i + 1] = h2f((u16)(a[i] >> 16));
        }
    }
}

// Activation codes, numbered as compute.Activation.
#define ACT_SILU 0
#define ACT_GELU_TANH 1
#define ACT_GELU 2
#define ACT_RELU 3
#define ACT_SIGMOID 4

__device__ __forceinline__ float activate(float x, int act) {
    switch (act) {
    case ACT_SILU:
        return x / (1.0f + (float)exp(-(double)x));
    case ACT_GELU_TANH: {
        double xf = x;
        return (float)(0.5 * xf * (1.0 + tanh(0.7978845608028654 * (xf + 0.044715 * xf * xf * xf))));
    }
    case ACT_GELU:
        return (float)(0.5 * (double)x * (1.0 + erf((double)x / 1.4142135623730951)));
    case ACT_SIGMOID:
        return (float)(1.0 / (1.0 + exp(-(double)x)));
    default:
        return fmaxf(x, 0.0f);
    }
}
