// Shared helpers for lem's CUDA kernels. Compiled with NVRTC without any
// CUDA headers: half and bfloat16 conversions are done by hand.

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

// Storage types, numbered as compute.DType.
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2

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
