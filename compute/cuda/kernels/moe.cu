// Mixture-of-experts routing and expert MLPs (compute.Experts).
//
// Routing stays on the device: moe_route writes each row's expert ids and
// weights, and the expert kernels read the ids from device memory, so a
// captured decode step runs whichever experts a new token picks and reads
// only their weights.
//
// The experts of one block are described by a table in device memory,
// MOE_DESC 64-bit words per expert (see moeDesc in moe.go): the addresses of
// the gate, up and down weights and of the gate, up and down biases (0 when
// absent), the intermediate size, and the storage types packed as
// weights | down << 8 | gate/up bias << 16 | down bias << 24.

#define MOE_DESC 8
#define MOE_WARPS 4

// dtype_size returns the element size of a float storage type.
__device__ __forceinline__ int dtype_size(int dt) { return dt == DT_F32 ? 4 : 2; }

template <int DT>
__device__ __forceinline__ float warp_dot_t(const void* w, const float* x, int k) {
    const int V = DT == DT_F32 ? 4 : 8;
    int lane = threadIdx.x & 31;
    float acc = 0.0f;
    if (k % V == 0 && (((unsigned long long)w | (unsigned long long)x) & 15) == 0) {
        int nv = k / V;
#pragma unroll 4
        for (int t = lane; t < nv; t += 32) {
            U4 u = ld_stream((const char*)w + (i64)t * 16);
            float f[8];
            unpack16<DT>(u, f);
            const F4* xr = (const F4*)(x + (i64)t * V);
#pragma unroll
            for (int q = 0; q < V / 4; q++) {
                F4 a = xr[q];
                acc += f[4 * q] * a.x + f[4 * q + 1] * a.y + f[4 * q + 2] * a.z + f[4 * q + 3] * a.w;
            }
        }
    } else {
        for (int c = lane; c < k; c += 32) acc += ldf(w, DT, c) * x[c];
    }
    return warp_sum(acc);
}

// warp_dot returns w·x over k values to every lane of the warp; w has
// storage type dt.
__device__ __forceinline__ float warp_dot(const void* w, int dt, const float* x, int k) {
    if (dt == DT_BF16) return warp_dot_t<DT_BF16>(w, x, k);
    if (dt == DT_F16) return warp_dot_t<DT_F16>(w, x, k);
    return warp_dot_t<DT_F32>(w, x, k);
}

// moe_route picks the experts of row blockIdx.x of logits [n, ne], one
// warp per row: softmax then top k (order 0) or top k then softmax (order
// 1), optional renormalisation and per-expert scale (escale, storage type
// esdt, may be null), then the nshared shared experts with the sigmoids of
// their gate logits (shared [n, nshared], may be null: weight 1). Ties go to
// the lower index. ne ≤ 1024.
extern "C" __global__ void __launch_bounds__(32)
    moe_route(int* ids, float* wts, const float* logits, const float* shared, int ne, int k, int nshared,
              int order, int normalize, const void* escale, int esdt) {
    extern __shared__ float sv[]; // ne scores
    int r = blockIdx.x, lane = threadIdx.x;
    const float* row = logits + (i64)r * ne;
    int slots = k + nshared;
    int* id = ids + (i64)r * slots;
    float* wt = wts + (i64)r * slots;
    // Each lane owns the scores e ≡ lane (mod 32).
    if (order == 0) {
        float mx = NEG_INF;
        for (int e = lane; e < ne; e += 32) mx = fmaxf(mx, row[e]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int e = lane; e < ne; e += 32) {
            float v = (float)exp((double)(row[e] - mx));
            sv[e] = v;
            sum += v;
        }
        sum = warp_sum(sum);
        for (int e = lane; e < ne; e += 32) sv[e] /= sum;
    } else {
        for (int e = lane; e < ne; e += 32) sv[e] = row[e];
    }
    u32 taken = 0; // bit m: score lane + 32·m is picked
    for (int j = 0; j < k; j++) {
        float bv = NEG_INF;
        int bi = -1;
        for (int m = 0, e = lane; e < ne; m++, e += 32) {
            if (!(taken >> m & 1) && (bi < 0 || sv[e] > bv)) {
                bv = sv[e];
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        if (bi >= 0 && (bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == 0) {
            id[j] = bi;
            wt[j] = bv;
        }
    }
    if (lane != 0) return;
    if (order == 1) {
        float mx = NEG_INF, sum = 0.0f;
        for (int j = 0; j < k; j++) mx = fmaxf(mx, wt[j]);
        for (int j = 0; j < k; j++) {
            float v = (float)exp((double)(wt[j] - mx));
            wt[j] = v;
            sum += v;
        }
        for (int j = 0; j < k; j++) wt[j] /= sum;
    } else if (normalize) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += wt[j];
        for (int j = 0; j < k; j++) wt[j] /= sum;
    }
    if (escale)
        for (int j = 0; j < k; j++) wt[j] *= ldf(escale, esdt, id[j]);
    for (int s = 0; s < nshared; s++) {
        id[k + s] = ne + s;
        wt[k + s] = shared ? sigmoidf(shared[(i64)r * nshared + s]) : 1.0f;
    }
}

// moe_gateup computes, for each (row, slot) pair of x [n, hid]
// (blockIdx.x) and intermediate unit r, act[pair, r] = act(gate·x + bg) · (up·x + bu),
// or gpt-oss's clamped SwiGLU when limit > 0; one warp per unit. act rows
// are stride values apart. Pairs naming no expert of the table are skipped.
extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_gateup(float* act, const float* x, const int* ids, const unsigned long long* tab, int nexp, int slots,
               int hid, int stride, int actfn, float limit, float alpha) {
    int pair = blockIdx.x;
    int r = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    int e = ids[pair];
    if (e < 0 || e >= nexp) return;
    const unsigned long long* d = tab + (i64)e * MOE_DESC;
    int inter = (int)d[6];
    if (r >= inter) return;
    int dts = (int)d[7];
    int wdt = dts & 255, bdt = (dts >> 16) & 255;
    const float* xr = x + (i64)(pair / slots) * hid;
    i64 off = (i64)r * hid * dtype_size(wdt);
    float g = warp_dot((const char*)d[0] + off, wdt, xr, hid);
    float u = warp_dot((const char*)d[1] + off, wdt, xr, hid);
    if (lane != 0) return;
    if (d[3]) g += ldf((const void*)d[3], bdt, r);
    if (d[4]) u += ldf((const void*)d[4], bdt, r);
    float o;
    if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        o = (u + 1.0f) * g * sigmoidf(alpha * g);
    } else {
        o = activate(g, actfn) * u;
    }
    act[(i64)pair * stride + r] = o;
}

// moe_down computes dst[i, c] = Σ_j wts[i, j] · (down_e·act[i·slots + j] +
// bd_e)[c] over the slots j of row i = blockIdx.x, e = ids[i, j]; one warp
// per output column c, slots summed in order.
extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_down(float* dst, const float* act, const int* ids, const float* wts, const unsigned long long* tab, int nexp,
             int slots, int hid, int stride) {
    int i = blockIdx.x;
    int c = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (c >= hid) return;
    float acc = 0.0f;
    for (int j = 0; j < slots; j++) {
        i64 pair = (i64)i * slots + j;
        int e = ids[pair];
        if (e < 0 || e >= nexp) continue;
        const unsigned long long* d = tab + (i64)e * MOE_DESC;
        int inter = (int)d[6];
        int dts = (int)d[7];
        int ddt = (dts >> 8) & 255, dbdt = (dts >> 24) & 255;
        float y = warp_dot((const char*)d[2] + (i64)c * inter * dtype_size(ddt), ddt, act + pair * stride, inter);
        if (d[5]) y += ldf((const void*)d[5], dbdt, c);
        acc += wts[pair] * y;
    }
    if (lane == 0) dst[(i64)i * hid + c] = acc;
}
