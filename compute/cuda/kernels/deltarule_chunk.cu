// The chunked (WY) form of the gated delta rule, for prefill.
//
// The rows are cut into chunks of DRC. Within a chunk, with G the
// cumulative log decay, D[i][j] = e^(G_i−G_j) and L the strictly lower
// triangular L[i][j] = β_i·(k_i·k_j)·D[i][j], T = (I + L)⁻¹ gives
//
//	U = T·(β⊙V),  W = T·(β⊙e^G⊙K)            (state-independent)
//	Û = U − W·S                                (the corrected values)
//	out_i = e^(G_i)·Sᵀq_i + Σ_{j≤i} (q_i·k_j)·D[i][j]·Û_j
//	S ← e^(G_last)·S + Σ_j e^(G_last−G_j)·k_j ⊗ Û_j
//
// dr_prep computes, for every (chunk, value head) at once, the
// state-independent parts: W, U, e^G⊙Q, e^(G_last−G)⊙K, the masked
// (QKᵀ⊙D) and e^(G_last). U and W come from forward substitution, one
// thread per column, without forming T. dr_chunk then carries the state
// through the chunks in order, one block per (value head, DRTY value
// columns): the rows of Sᵀ are independent of one another.

#define DRC 32    // rows per chunk
#define DRTY 16   // value columns per dr_chunk block
#define DRMAXK 256 // largest key dim

// dr_block returns the scratch of (head h, chunk c): per floats, laid out
// as W [DRC][dk], Qd [DRC][dk], Kt [DRC][dk], U [DRC][dv], A [DRC][DRC], dl.
__device__ __forceinline__ float* dr_block(float* scr, int h, int c, int nchunks, i64 per) {
    return scr + ((i64)h * nchunks + c) * per;
}

// dr_prep: grid (nchunks, vh), 256 threads. Inputs as delta_rule's.
extern "C" __global__ void __launch_bounds__(256)
    dr_prep(float* scr, const float* qkv, const float* a, const float* b, const void* alog, int aldt,
            const void* dtb, int dbdt, int n, int kh, int vh, int dk, int dv, float scale, float eps,
            int tiled, float bscale, int nchunks, long long per) {
    __shared__ float ks[DRC][DRMAXK + 1]; // normalised keys
    __shared__ float ls[DRC][DRC + 1];    // L
    __shared__ float gs[DRC], bs[DRC], qs[DRC];
    int c = blockIdx.x, h = blockIdx.y;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int t0 = c * DRC, rows = min(DRC, n - t0);
    int kx = tiled ? h % kh : h / (vh / kh);
    i64 w = 2 * (i64)kh * dk + (i64)vh * dv;
    float* blk = dr_block(scr, h, c, nchunks, per);
    float *W = blk, *Qd = blk + DRC * dk, *Kt = blk + 2 * DRC * dk, *U = blk + 3 * DRC * dk;
    float* A = U + DRC * dv;
    float* dl = A + DRC * DRC;

    // Normalised keys, query scales, log decays and update strengths.
    for (int i = warp; i < DRC; i += 8) {
        if (i >= rows) {
            for (int x = lane; x < dk; x += 32) ks[i][x] = 0.0f;
            if (lane == 0) gs[i] = bs[i] = qs[i] = 0.0f;
            continue;
        }
        const float* row = qkv + (i64)(t0 + i) * w;
        const float *qr = row + (i64)kx * dk, *kr = row + (i64)(kh + kx) * dk;
        float qq = 0.0f, kk = 0.0f;
        for (int x = lane; x < dk; x += 32) {
            float q = qr[x], k = kr[x];
            qq += q * q;
            kk += k * k;
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
        float ki = (float)(1.0 / sqrt((double)kk + (double)eps));
        for (int x = lane; x < dk; x += 32) ks[i][x] = kr[x] * ki;
        if (lane == 0) {
            qs[i] = (float)(1.0 / sqrt((double)qq + (double)eps)) * scale;
            i64 at = (i64)(t0 + i) * vh + h;
            float rate = -(float)exp((double)ldf(alog, aldt, h));
            gs[i] = rate * softplusf(a[at] + ldf(dtb, dbdt, h));
            bs[i] = bscale * sigmoidf(b[at]);
        }
    }
    __syncthreads();
    if (tid == 0) {
        float s = 0.0f;
        for (int i = 0; i < DRC; i++) {
            s += gs[i];
            gs[i] = s;
        }
    }
    __syncthreads();
    float glast = gs[rows - 1];

    // L and the masked QKᵀ⊙D: thread (i, j = lane).
    for (int e = tid; e < DRC * DRC; e += 256) {
        int i = e >> 5, j = e & 31;
        float lv = 0.0f, av = 0.0f;
        if (i < rows && j <= i) {
            const float* qr = qkv + (i64)(t0 + i) * w + (i64)kx * dk;
            float kk = 0.0f, qk = 0.0f;
            for (int x = 0; x < dk; x++) {
                float kj = ks[j][x];
                kk += ks[i][x] * kj;
                qk += qr[x] * kj;
            }
            float d = expf(gs[i] - gs[j]);
            av = qs[i] * qk * d;
            if (j < i) lv = bs[i] * kk * d;
        }
        ls[i][j] = lv;
        A[e] = av;
    }
    // e^G⊙Q and e^(G_last−G)⊙K.
    for (int e = tid; e < DRC * dk; e += 256) {
        int i = e / dk, x = e - i * dk;
        float qd = 0.0f, kt = 0.0f;
        if (i < rows) {
            qd = expf(gs[i]) * qs[i] * qkv[(i64)(t0 + i) * w + (i64)kx * dk + x];
            kt = expf(glast - gs[i]) * ks[i][x];
        }
        Qd[e] = qd;
        Kt[e] = kt;
    }
    if (tid == 0) *dl = expf(glast);
    __syncthreads();

    // U = T·(β⊙V) and W = T·(β⊙e^G⊙K) by forward substitution,
    // X_i = B_i − Σ_{m<i} L[i][m]·X_m, one column per thread.
    // ls is read through a volatile pointer, so that its entries are not
    // hoisted out of the column loop into (spilled) registers.
    const volatile float* lv = &ls[0][0];
    for (int col = tid; col < dv + dk; col += 256) {
        float xv[DRC];
        bool isv = col < dv;
        int kc = col - dv;
#pragma unroll
        for (int m = 0; m < DRC; m++) {
            float bv = 0.0f;
            if (m < rows) {
                bv = isv ? bs[m] * qkv[(i64)(t0 + m) * w + 2 * (i64)kh * dk + (i64)h * dv + col]
                         : bs[m] * expf(gs[m]) * ks[m][kc];
            }
            xv[m] = bv;
        }
#pragma unroll
        for (int i = 1; i < DRC; i++) {
            float s = xv[i];
#pragma unroll
            for (int m = 0; m < i; m++) s -= lv[i * (DRC + 1) + m] * xv[m];
            xv[i] = s;
        }
        if (isv) {
#pragma unroll
            for (int i = 0; i < DRC; i++) U[(i64)i * dv + col] = xv[i];
        } else {
#pragma unroll
            for (int i = 0; i < DRC; i++) W[(i64)i * dk + kc] = xv[i];
        }
    }
}

// dr_chunk: grid (ceil(dv/DRTY), vh), 256 threads. Carries rows
// y0 … y0+DRTY-1 of each head's Sᵀ (state [vh, dv, dk]) through the chunks
// and writes dst [n, vh·dv].
extern "C" __global__ void __launch_bounds__(256)
    dr_chunk(float* dst, float* state, const float* scr, int n, int vh, int dk, int dv, int nchunks, long long per) {
    __shared__ float S[DRTY][DRMAXK + 1];
    __shared__ float us[DRC][DRTY], ps[DRC][DRTY];
    int y0 = blockIdx.x * DRTY, h = blockIdx.y, tid = threadIdx.x;
    float* st = state + (i64)h * dv * dk;
    for (int e = tid; e < DRTY * dk; e += 256) {
        int yy = e / dk, x = e - yy * dk;
        S[yy][x] = y0 + yy < dv ? st[(i64)(y0 + yy) * dk + x] : 0.0f;
    }
    __syncthreads();
    for (int c = 0; c < nchunks; c++) {
        const float* blk = dr_block((float*)scr, h, c, nchunks, per);
        const float *W = blk, *Qd = blk + DRC * dk, *Kt = blk + 2 * DRC * dk, *U = blk + 3 * DRC * dk;
        const float* A = U + DRC * dv;
        float dl = A[DRC * DRC];
        int t0 = c * DRC, rows = min(DRC, n - t0);
        // Û = U − W·S and P = (e^G⊙Q)·S for (row i, column yy).
        for (int e = tid; e < DRC * DRTY; e += 256) {
            int i = e / DRTY, yy = e - i * DRTY, y = y0 + yy;
            const float *wr = W + (i64)i * dk, *qr = Qd + (i64)i * dk;
            float aw = 0.0f, aq = 0.0f;
            for (int x = 0; x < dk; x++) {
                float s = S[yy][x];
                aw += wr[x] * s;
                aq += qr[x] * s;
            }
            us[i][yy] = y < dv ? U[(i64)i * dv + y] - aw : 0.0f;
            ps[i][yy] = aq;
        }
        __syncthreads();
        // Outputs: P + (QKᵀ⊙D)·Û.
        for (int e = tid; e < rows * DRTY; e += 256) {
            int i = e / DRTY, yy = e - i * DRTY, y = y0 + yy;
            const float* ar = A + i * DRC;
            float o = ps[i][yy];
            for (int j = 0; j <= i; j++) o += ar[j] * us[j][yy];
            if (y < dv) dst[((i64)(t0 + i) * vh + h) * dv + y] = o;
        }
        // The state: Sᵀ ← e^(G_last)·Sᵀ + Ûᵀ·(e^(G_last−G)⊙K), eight rows
        // of Sᵀ per thread.
        for (int e = tid; e < (DRTY / 8) * dk; e += 256) {
            int yg = e / dk, x = e - yg * dk;
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = dl * S[yg * 8 + r][x];
            for (int j = 0; j < rows; j++) {
                float kt = Kt[(i64)j * dk + x];
#pragma unroll
                for (int r = 0; r < 8; r++) acc[r] += us[j][yg * 8 + r] * kt;
            }
#pragma unroll
            for (int r = 0; r < 8; r++) S[yg * 8 + r][x] = acc[r];
        }
        __syncthreads();
    }
    for (int e = tid; e < DRTY * dk; e += 256) {
        int yy = e / dk, x = e - yy * dk;
        if (y0 + yy < dv) st[(i64)(y0 + yy) * dk + x] = S[yy][x];
    }
}

// dr_stage copies rows × cols floats (row-major, cols apart) from global
// memory into shared memory rows sd floats apart, zero-padding each row to
// cols4 (cols rounded up to 4), with 16-byte loads when cols is a multiple
// of 4.
__device__ __forceinline__ void dr_stage(float* dst, const float* src, int rows, int cols, int cols4, int sd) {
    int q = cols4 >> 2;
    if ((cols & 3) == 0) {
        for (int e = threadIdx.x; e < rows * q; e += blockDim.x) {
            int i = e / q, x = (e - i * q) << 2;
            *(F4*)(dst + i * sd + x) = *(const F4*)(src + (i64)i * cols + x);
        }
        return;
    }
    for (int e = threadIdx.x; e < rows * cols4; e += blockDim.x) {
        int i = e / cols4, x = e - i * cols4;
        dst[i * sd + x] = x < cols ? src[(i64)i * cols + x] : 0.0f;
    }
}

// dr_carry is dr_chunk with each chunk's matrices staged in shared memory
// (dynamic, drCarryShared bytes: W, e^G⊙Q, e^(G_last)−G⊙K and the state
// tile DRTY rows of dk4+4 floats, then the masked QKᵀ, Û and P) and the
// products blocked in registers over four key dimensions and two rows.
extern "C" __global__ void __launch_bounds__(256)
    dr_carry(float* dst, float* state, const float* scr, int n, int vh, int dk, int dv, int nchunks, long long per) {
    extern __shared__ __align__(16) float sm[];
    int dk4 = (dk + 3) & ~3, sd = dk4 + 4;
    float *Ws = sm, *Qs = Ws + DRC * sd, *Ks = Qs + DRC * sd, *S = Ks + DRC * sd;
    float *As = S + DRTY * sd, *us = As + DRC * DRC, *ps = us + DRC * DRTY;
    int y0 = blockIdx.x * DRTY, h = blockIdx.y, tid = threadIdx.x;
    float* st = state + (i64)h * dv * dk;
    for (int e = tid; e < DRTY * dk4; e += 256) {
        int yy = e / dk4, x = e - yy * dk4;
        S[yy * sd + x] = y0 + yy < dv && x < dk ? st[(i64)(y0 + yy) * dk + x] : 0.0f;
    }
    int yy = tid & 15, ig = tid >> 4; // steps 1 and 2: rows ig and ig+16, column yy
    int y = y0 + yy;
    for (int c = 0; c < nchunks; c++) {
        const float* blk = dr_block((float*)scr, h, c, nchunks, per);
        const float *W = blk, *Qd = blk + DRC * dk, *Kt = blk + 2 * DRC * dk, *U = blk + 3 * DRC * dk;
        const float* A = U + DRC * dv;
        int t0 = c * DRC, rows = min(DRC, n - t0);
        dr_stage(Ws, W, DRC, dk, dk4, sd);
        dr_stage(Qs, Qd, DRC, dk, dk4, sd);
        dr_stage(Ks, Kt, DRC, dk, dk4, sd);
        for (int e = tid; e < DRC * DRC; e += 256) As[e] = A[e];
        float u0 = 0.0f, u1 = 0.0f;
        if (y < dv) {
            u0 = U[(i64)ig * dv + y];
            u1 = U[(i64)(ig + 16) * dv + y];
        }
        float dl = A[DRC * DRC];
        __syncthreads();
        // Û = U − W·S and P = (e^G⊙Q)·S.
        {
            float aw0 = 0.0f, aw1 = 0.0f, aq0 = 0.0f, aq1 = 0.0f;
            const float *s = S + yy * sd, *w0 = Ws + ig * sd, *w1 = w0 + 16 * sd, *q0 = Qs + ig * sd, *q1 = q0 + 16 * sd;
#pragma unroll 4
            for (int x = 0; x < dk4; x += 4) {
                F4 sv = *(const F4*)(s + x), a = *(const F4*)(w0 + x), b = *(const F4*)(w1 + x);
                F4 p = *(const F4*)(q0 + x), q = *(const F4*)(q1 + x);
                aw0 += a.x * sv.x + a.y * sv.y + a.z * sv.z + a.w * sv.w;
                aw1 += b.x * sv.x + b.y * sv.y + b.z * sv.z + b.w * sv.w;
                aq0 += p.x * sv.x + p.y * sv.y + p.z * sv.z + p.w * sv.w;
                aq1 += q.x * sv.x + q.y * sv.y + q.z * sv.z + q.w * sv.w;
            }
            us[ig * DRTY + yy] = y < dv ? u0 - aw0 : 0.0f;
            us[(ig + 16) * DRTY + yy] = y < dv ? u1 - aw1 : 0.0f;
            ps[ig * DRTY + yy] = aq0;
            ps[(ig + 16) * DRTY + yy] = aq1;
        }
        __syncthreads();
        // Outputs: P + (QKᵀ⊙D)·Û.
        if (y < dv) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int i = ig + 16 * half;
                if (i < rows) {
                    const float* ar = As + i * DRC;
                    float o = ps[i * DRTY + yy];
                    for (int j = 0; j <= i; j++) o += ar[j] * us[j * DRTY + yy];
                    dst[((i64)(t0 + i) * vh + h) * dv + y] = o;
                }
            }
        }
        // The state: Sᵀ ← e^(G_last)·Sᵀ + Ûᵀ·(e^(G_last−G)⊙K), eight rows
        // of Sᵀ per thread.
        for (int e = tid; e < (DRTY / 8) * dk; e += 256) {
            int yg = e / dk, x = e - yg * dk;
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = dl * S[(yg * 8 + r) * sd + x];
            for (int j = 0; j < rows; j++) {
                float kt = Ks[j * sd + x];
                F4 a = *(const F4*)(us + j * DRTY + yg * 8), b = *(const F4*)(us + j * DRTY + yg * 8 + 4);
                acc[0] += a.x * kt;
                acc[1] += a.y * kt;
                acc[2] += a.z * kt;
                acc[3] += a.w * kt;
                acc[4] += b.x * kt;
                acc[5] += b.y * kt;
                acc[6] += b.z * kt;
                acc[7] += b.w * kt;
            }
#pragma unroll
            for (int r = 0; r < 8; r++) S[(yg * 8 + r) * sd + x] = acc[r];
        }
        __syncthreads();
    }
    for (int e = tid; e < DRTY * dk; e += 256) {
        int r = e / dk, x = e - r * dk;
        if (y0 + r < dv) st[(i64)(y0 + r) * dk + x] = S[r * sd + x];
    }
}
