// CUDA's built-ins declared for a host C++ compiler, so that g++
// -fsyntax-only can check the kernels' source (TestKernelSource): their
// syntax, names and types, and every template the kernels instantiate.
// Nothing here runs; the kernels compile for a device through NVRTC.
#include <cmath>
#include <cstdint>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __constant__ static
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
struct dim3_ { unsigned x, y, z; };
extern dim3_ threadIdx, blockIdx, blockDim, gridDim;
extern int warpSize;
float __shfl_xor_sync(unsigned, float, int, int w = 32);
int __shfl_xor_sync(unsigned, int, int, int w = 32);
double __shfl_xor_sync(unsigned, double, int, int w = 32);
unsigned __shfl_xor_sync(unsigned, unsigned, int, int w = 32);
float __shfl_up_sync(unsigned, float, int, int w = 32);
int __shfl_up_sync(unsigned, int, int, int w = 32);
unsigned __shfl_up_sync(unsigned, unsigned, int, int w = 32);
float __shfl_sync(unsigned, float, int, int w = 32);
int __shfl_sync(unsigned, int, int, int w = 32);
unsigned __match_any_sync(unsigned, int);
unsigned __ballot_sync(unsigned, int);
int __any_sync(unsigned, int);
void __syncthreads();
void __syncwarp(unsigned m = 0xffffffff);
void __threadfence();
int __popc(unsigned);
int __ffs(int);
float __fmul_rn(float, float);
float __fadd_rn(float, float);
float __fsub_rn(float, float);
float __fdiv_rn(float, float);
float __int_as_float(int);
int __float_as_int(float);
float __uint_as_float(unsigned);
unsigned __float_as_uint(float);
int __float2int_rn(float);
float __expf(float);
float __logf(float);
float atomicAdd(float*, float);
int atomicAdd(int*, int);
unsigned atomicAdd(unsigned*, unsigned);
int atomicMax(int*, int);
int atomicCAS(int*, int, int);
unsigned long long atomicAdd(unsigned long long*, unsigned long long);
int min(int, int); int max(int, int);
long long min(long long, long long); long long max(long long, long long);
unsigned min(unsigned, unsigned); unsigned max(unsigned, unsigned);
float rsqrtf(float);
template <class T> T __ldg(const T*);
