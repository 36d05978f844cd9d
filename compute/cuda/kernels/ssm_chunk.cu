// The chunked (SSD) form of the selective scan, for prefill.
//
// The time steps are cut into chunks of SSQ. Within a chunk, with
// S_t = Σ_{s≤t} Δ_s·A the decay accumulated so far and h₀ the state the
// chunk starts from:
//
//	y_t = e^(S_t)·(h₀·C_t) + Σ_{s≤t} e^(S_t−S_s)·(C_t·B_s)·Δ_s·x_s + D·x_t
//	h₁  = e^(S_last)·h₀ + Σ_s e^(S_last−S_s)·Δ_s·x_s ⊗ B_s
//
// ssm_cb computes C_t·B_s for every (chunk, group) at once; ssm_chunk then
// carries the state through the chunks in order, one block per (head,
// SSP channels): the channels of a head are independent of one another.

#define SSQ 32     // time steps per chunk
#define SSP 16     // channels per ssm_chunk block
#define SSMAXN 256 // largest state size

// ssm_cb: grid (nchunks, groups), 256 threads. cb [groups, nchunks, SSQ,
// SSQ] receives C_t·B_s for s ≤ t (zeros above the diagonal and past n).
extern "C" __global__ void __launch_bounds__(256)
    ssm_cb(float* cb, const float* bm, const float* cm, int n, int groups, int ns, int nchunks) {
    __shared__ float bs[SSQ][SSMAXN + 1];
    int c = blockIdx.x, g = blockIdx.y, tid = threadIdx.x;
    int t0 = c * SSQ, rows = min(SSQ, n - t0);
    i64 gn = (i64)groups * ns;
    for (int e = tid; e < SSQ * ns; e += 256) {
        int s = e / ns, k = e - s * ns;
        bs[s][k] = s < rows ? bm[(i64)(t0 + s) * gn + (i64)g * ns + k] : 0.0f;
    }
    __syncthreads();
    float* out = cb + ((i64)g * nchunks + c) * SSQ * SSQ;
    for (int e = tid; e < SSQ * SSQ; e += 256) {
        int t = e >> 5, s = e & 31;
        float v = 0.0f;
        if (t < rows && s <= t) {
            const float* ct = cm + (i64)(t0 + t) * gn + (i64)g * ns;
            for (int k = 0; k < ns; k++) v += ct[k] * bs[s][k];
        }
        out[e] = v;
    }
}

// ssm_chunk: grid (ceil(hd/SSP), heads), 256 threads. Arguments as
// ssm_scan's, plus cb from ssm_cb (over ceil(n/SSQ) chunks).
extern "C" __global__ void __launch_bounds__(256)
    ssm_chunk(float* y, const float* x, const float* dt, const float* bm, const float* cm, float* state,
              const float* cb, const void* A, int adt, const void* D, int ddt, const void* dtb, int bdt,
              int n, int heads, int hd, int groups, int ns, float dtmin, float dtmax) {
    __shared__ float H[SSP][SSMAXN + 1];
    __shared__ float xd[SSQ][SSP]; // Δ_s·x_s
    __shared__ float ms[SSQ][SSQ + 1]; // e^(S_t−S_s)·C_t·B_s
    __shared__ float cum[SSQ], wl[SSQ], dls[SSQ];
    int i0 = blockIdx.x * SSP, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    int g = h / (heads / groups), nchunks = (n + SSQ - 1) / SSQ;
    float a = ldf(A, adt, h), d = ldf(D, ddt, h), bias = ldf(dtb, bdt, h);
    i64 hp = (i64)heads * hd, gn = (i64)groups * ns;
    float* st = state + (i64)h * hd * ns;
    for (int e = tid; e < SSP * ns; e += 256) {
        int ii = e / ns, k = e - ii * ns;
        H[ii][k] = i0 + ii < hd ? st[(i64)(i0 + ii) * ns + k] : 0.0f;
    }
    for (int c = 0; c < nchunks; c++) {
        int t0 = c * SSQ, rows = min(SSQ, n - t0);
        // Time steps and their running sum (a scan over the warp).
        float delta = 0.0f;
        if (tid < 32) {
            if (lane < rows) {
                delta = softplusf(dt[(i64)(t0 + lane) * heads + h] + bias);
                delta = fminf(fmaxf(delta, dtmin), dtmax);
            }
            float s = delta * a;
            for (int o = 1; o < 32; o <<= 1) {
                float v = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += v;
            }
            cum[lane] = s;
            dls[lane] = delta;
        }
        __syncthreads(); // cum ready; the previous chunk's readers are done
        float last = cum[rows - 1];
        if (tid < 32) wl[lane] = lane < rows ? expf(last - cum[lane]) : 0.0f;
        for (int e = tid; e < SSQ * SSP; e += 256) {
            int s = e / SSP, ii = e - s * SSP;
            float v = 0.0f;
            if (s < rows && i0 + ii < hd) v = dls[s] * x[(i64)(t0 + s) * hp + (i64)h * hd + i0 + ii];
            xd[s][ii] = v;
        }
        const float* cbc = cb + ((i64)g * nchunks + c) * SSQ * SSQ;
        for (int e = tid; e < SSQ * SSQ; e += 256) {
            int t = e >> 5, s = e & 31;
            ms[t][s] = s <= t && t < rows ? expf(cum[t] - cum[s]) * cbc[e] : 0.0f;
        }
        __syncthreads();
        // Outputs from the carried state and the chunk's own inputs.
        for (int e = tid; e < rows * SSP; e += 256) {
            int t = e / SSP, ii = e - t * SSP, i = i0 + ii;
            const float* ct = cm + (i64)(t0 + t) * gn + (i64)g * ns;
            float o = 0.0f;
            for (int k = 0; k < ns; k++) o += ct[k] * H[ii][k];
            o *= expf(cum[t]);
            for (int s = 0; s <= t; s++) o += ms[t][s] * xd[s][ii];
            if (i < hd) y[(i64)(t0 + t) * hp + (i64)h * hd + i] = o + d * x[(i64)(t0 + t) * hp + (i64)h * hd + i];
        }
        __syncthreads();
        // The state at the end of the chunk, eight channels per thread.
        float dlast = expf(last);
        for (int e = tid; e < (SSP / 8) * ns; e += 256) {
            int ig = e / ns, k = e - ig * ns;
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = dlast * H[ig * 8 + r][k];
            for (int s = 0; s < rows; s++) {
                float bv = wl[s] * bm[(i64)(t0 + s) * gn + (i64)g * ns + k];
#pragma unroll
                for (int r = 0; r < 8; r++) acc[r] += xd[s][ig * 8 + r] * bv;
            }
#pragma unroll
            for (int r = 0; r < 8; r++) H[ig * 8 + r][k] = acc[r];
        }
    }
    __syncthreads();
    for (int e = tid; e < SSP * ns; e += 256) {
        int ii = e / ns, k = e - ii * ns;
        if (i0 + ii < hd) st[(i64)(i0 + ii) * ns + k] = H[ii][k];
    }
}

// ssm_carry is ssm_chunk with each chunk's B and C staged in shared memory
// (dynamic, ssmCarryShared bytes: the state tile H [SSP] and B, C [SSQ]
// rows of ns4+4 floats) and the output products blocked in registers over
// four state values and two time steps.
extern "C" __global__ void __launch_bounds__(256)
    ssm_carry(float* y, const float* x, const float* dt, const float* bm, const float* cm, float* state,
              const float* cb, const void* A, int adt, const void* D, int ddt, const void* dtb, int bdt,
              int n, int heads, int hd, int groups, int ns, float dtmin, float dtmax) {
    extern __shared__ __align__(16) float sm[];
    __shared__ __align__(16) float xd[SSQ][SSP]; // Δ_s·x_s
    __shared__ float ms[SSQ][SSQ + 1];           // e^(S_t−S_s)·C_t·B_s
    __shared__ float cum[SSQ], wl[SSQ], dls[SSQ];
    int ns4 = (ns + 3) & ~3, sn = ns4 + 4;
    float *H = sm, *Bs = H + SSP * sn, *Cs = Bs + SSQ * sn;
    int i0 = blockIdx.x * SSP, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    int g = h / (heads / groups), nchunks = (n + SSQ - 1) / SSQ;
    float a = ldf(A, adt, h), d = ldf(D, ddt, h), bias = ldf(dtb, bdt, h);
    i64 hp = (i64)heads * hd, gn = (i64)groups * ns;
    float* st = state + (i64)h * hd * ns;
    for (int e = tid; e < SSP * ns4; e += 256) {
        int ii = e / ns4, k = e - ii * ns4;
        H[ii * sn + k] = i0 + ii < hd && k < ns ? st[(i64)(i0 + ii) * ns + k] : 0.0f;
    }
    int ii = tid & 15, tg = tid >> 4; // outputs: steps tg and tg+16, channel ii
    for (int c = 0; c < nchunks; c++) {
        int t0 = c * SSQ, rows = min(SSQ, n - t0);
        for (int e = tid; e < SSQ * ns4; e += 256) {
            int s = e / ns4, k = e - s * ns4;
            bool in = s < rows && k < ns;
            i64 o = (i64)(t0 + s) * gn + (i64)g * ns + k;
            Bs[s * sn + k] = in ? bm[o] : 0.0f;
            Cs[s * sn + k] = in ? cm[o] : 0.0f;
        }
        if (tid < 32) {
            float delta = 0.0f;
            if (lane < rows) {
                delta = softplusf(dt[(i64)(t0 + lane) * heads + h] + bias);
                delta = fminf(fmaxf(delta, dtmin), dtmax);
            }
            float s = delta * a;
            for (int o = 1; o < 32; o <<= 1) {
                float v = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += v;
            }
            cum[lane] = s;
            dls[lane] = delta;
        }
        __syncthreads();
        float last = cum[rows - 1];
        if (tid < 32) wl[lane] = lane < rows ? expf(last - cum[lane]) : 0.0f;
        for (int e = tid; e < SSQ * SSP; e += 256) {
            int s = e / SSP, jj = e - s * SSP;
            xd[s][jj] = s < rows && i0 + jj < hd ? dls[s] * x[(i64)(t0 + s) * hp + (i64)h * hd + i0 + jj] : 0.0f;
        }
        const float* cbc = cb + ((i64)g * nchunks + c) * SSQ * SSQ;
        for (int e = tid; e < SSQ * SSQ; e += 256) {
            int t = e >> 5, s = e & 31;
            ms[t][s] = s <= t && t < rows ? expf(cum[t] - cum[s]) * cbc[e] : 0.0f;
        }
        __syncthreads();
        // Outputs from the carried state and the chunk's own inputs.
        {
            float o0 = 0.0f, o1 = 0.0f;
            const float *hr = H + ii * sn, *c0 = Cs + tg * sn, *c1 = c0 + 16 * sn;
#pragma unroll 4
            for (int k = 0; k < ns4; k += 4) {
                F4 hv = *(const F4*)(hr + k), p = *(const F4*)(c0 + k), q = *(const F4*)(c1 + k);
                o0 += p.x * hv.x + p.y * hv.y + p.z * hv.z + p.w * hv.w;
                o1 += q.x * hv.x + q.y * hv.y + q.z * hv.z + q.w * hv.w;
            }
            int i = i0 + ii;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int t = tg + 16 * half;
                float o = (half ? o1 : o0) * expf(cum[t]);
                for (int s = 0; s <= t; s++) o += ms[t][s] * xd[s][ii];
                if (t < rows && i < hd) {
                    i64 at = (i64)(t0 + t) * hp + (i64)h * hd + i;
                    y[at] = o + d * x[at];
                }
            }
        }
        __syncthreads();
        // The state at the end of the chunk, eight channels per thread.
        float dlast = expf(last);
        for (int e = tid; e < (SSP / 8) * ns; e += 256) {
            int jg = e / ns, k = e - jg * ns;
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = dlast * H[(jg * 8 + r) * sn + k];
            for (int s = 0; s < rows; s++) {
                float bv = wl[s] * Bs[s * sn + k];
                F4 p = *(const F4*)&xd[s][jg * 8], q = *(const F4*)&xd[s][jg * 8 + 4];
                acc[0] += p.x * bv;
                acc[1] += p.y * bv;
                acc[2] += p.z * bv;
                acc[3] += p.w * bv;
                acc[4] += q.x * bv;
                acc[5] += q.y * bv;
                acc[6] += q.z * bv;
                acc[7] += q.w * bv;
            }
#pragma unroll
            for (int r = 0; r < 8; r++) H[(jg * 8 + r) * sn + k] = acc[r];
        }
        __syncthreads();
    }
    for (int e = tid; e < SSP * ns; e += 256) {
        int r = e / ns, k = e - r * ns;
        if (i0 + r < hd) st[(i64)(i0 + r) * ns + k] = H[r * sn + k];
    }
}
