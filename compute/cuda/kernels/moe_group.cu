// Mixture-of-experts prefill with the (row, slot) pairs grouped by expert.
//
// moe_group sorts the pairs by expert on the device (a counting sort in one
// block) and lists tiles of MGM pairs of one expert each. moe_ggateup and
// moe_gdown then run one tiled matrix product per tile, so that each
// expert's weights are read once per MGM pairs rather than once per pair,
// and moe_combine sums each row's slots with their routing weights. The
// host does not learn the counts: the grids are sized for the most tiles
// any routing can give, and blocks past the last tile return at once.
//
// Layout of the int scratch g: g[0] = number of tiles; then off [nexp+1]
// (where each expert's pairs start in sorted order), order [P] (sorted
// position → pair), inv [P] (pair → sorted position, -1 for a pair naming
// no expert), tiles [2·maxTiles] (expert, first position within it).

#define MGM 32       // pairs per tile
#define MGN 64       // output columns per tile
#define MGK 16       // depth of a shared-memory step
#define MG_MAXEXP 2048

__device__ __forceinline__ int* mg_off(int* g) { return g + 1; }
__device__ __forceinline__ int* mg_order(int* g, int nexp) { return g + 2 + nexp; }
__device__ __forceinline__ int* mg_inv(int* g, int nexp, int P) { return g + 2 + nexp + P; }
__device__ __forceinline__ int* mg_tiles(int* g, int nexp, int P) { return g + 2 + nexp + 2 * P; }

// moe_group: one block of 1024 threads over the P = n·slots pairs of ids.
extern "C" __global__ void __launch_bounds__(1024) moe_group(int* g, const int* ids, int P, int nexp) {
    __shared__ int cnt[MG_MAXEXP], start[MG_MAXEXP], tstart[MG_MAXEXP];
    int tid = threadIdx.x, lane = tid & 31;
    for (int e = tid; e < nexp; e += 1024) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += 1024) {
        int e = ids[p];
        if (e >= 0 && e < nexp) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // Exclusive prefix sums of the counts and of the tiles, warp 0, each
    // lane over a contiguous segment of experts.
    if (tid < 32) {
        int seg = (nexp + 31) / 32, lo = min(nexp, lane * seg), hi = min(nexp, lo + seg);
        int s = 0, ts = 0;
        for (int e = lo; e < hi; e++) {
            s += cnt[e];
            ts += (cnt[e] + MGM - 1) / MGM;
        }
        int is = s, its = ts; // inclusive scans over the lanes
        for (int o = 1; o < 32; o <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, is, o), w = __shfl_up_sync(0xffffffffu, its, o);
            if (lane >= o) {
                is += v;
                its += w;
            }
        }
        s = is - s;
        ts = its - ts;
        for (int e = lo; e < hi; e++) {
            start[e] = s;
            tstart[e] = ts;
            s += cnt[e];
            ts += (cnt[e] + MGM - 1) / MGM;
        }
        if (lane == 31) {
            g[0] = its;
            mg_off(g)[nexp] = is;
        }
    }
    __syncthreads();
    int* off = mg_off(g);
    int* tiles = mg_tiles(g, nexp, P);
    for (int e = tid; e < nexp; e += 1024) {
        off[e] = start[e];
        int nt = (cnt[e] + MGM - 1) / MGM;
        for (int t = 0; t < nt; t++) {
            tiles[2 * (tstart[e] + t)] = e;
            tiles[2 * (tstart[e] + t) + 1] = t * MGM;
        }
        cnt[e] = 0; // reused as the fill count
    }
    __syncthreads();
    int *order = mg_order(g, nexp), *inv = mg_inv(g, nexp, P);
    for (int p = tid; p < P; p += 1024) {
        int e = ids[p], pos = -1;
        if (e >= 0 && e < nexp) {
            pos = start[e] + atomicAdd(&cnt[e], 1);
            order[pos] = p;
        }
        inv[p] = pos;
    }
}

// mg_load8 loads values k … k+7 of row r of w [rows, k] (storage type DT)
// into f, zeros past kmax; vec says rows are 16-byte aligned and kmax a
// multiple of 8.
template <int DT>
__device__ __forceinline__ void mg_load8(const void* w, i64 r, int kmax, int k, bool vec, float* f) {
    const int ES = DT == DT_F32 ? 4 : 2;
    const char* p = (const char*)w + (r * kmax + k) * ES;
    if (vec && k + 8 <= kmax) {
        if (DT == DT_F32) {
            U4 a = ld_stream(p), b = ld_stream(p + 16);
            unpack16<DT_F32>(a, f);
            unpack16<DT_F32>(b, f + 4);
        } else {
            unpack16<DT>(ld_stream(p), f);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = k + j < kmax ? ldf(w, DT, r * kmax + k + j) : 0.0f;
}

// mg_tile runs one tile: rows pos0 … pos0+rows-1 of the sorted pairs, whose
// inputs are rows xrow[·] of x [*, k] (xs values apart), times w0 (and w1
// when TWO) [m, k] for output columns c0 … c0+MGN-1. 128 threads, 4 × 4
// outputs each; acc0/acc1 receive the products.
template <int DT, bool TWO>
__device__ __forceinline__ void mg_tile(const float* x, i64 xs, const int* xrow, int rows, const void* w0, const void* w1,
                                        int m, int k, int c0, float acc0[4][4], float acc1[4][4]) {
    __shared__ __align__(16) float As[MGK][MGM + 4];
    __shared__ __align__(16) float B0[MGK][MGN + 4];
    __shared__ __align__(16) float B1[TWO ? MGK : 1][MGN + 4];
    int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    bool vec = k % 8 == 0 && (((unsigned long long)w0 | (unsigned long long)(TWO ? w1 : w0)) & 15) == 0;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc0[i][j] = acc1[i][j] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += MGK) {
        for (int e = tid; e < MGM * MGK; e += 128) {
            int rr = e / MGK, kk = e - rr * MGK, gk = k0 + kk;
            As[kk][rr] = rr < rows && gk < k ? x[(i64)xrow[rr] * xs + gk] : 0.0f;
        }
        {
            int cc = tid >> 1, part = tid & 1, gc = c0 + cc;
            float f[8];
            if (gc < m) {
                mg_load8<DT>(w0, gc, k, k0 + part * 8, vec, f);
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) f[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) B0[part * 8 + j][cc] = f[j];
            if (TWO) {
                if (gc < m) {
                    mg_load8<DT>(w1, gc, k, k0 + part * 8, vec, f);
                } else {
#pragma unroll
                    for (int j = 0; j < 8; j++) f[j] = 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 8; j++) B1[part * 8 + j][cc] = f[j];
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MGK; kk++) {
            F4 av = *(const F4*)&As[kk][ty * 4], bv0 = *(const F4*)&B0[kk][tx * 4];
            F4 bv1 = TWO ? *(const F4*)&B1[kk][tx * 4] : bv0;
            float a[4] = {av.x, av.y, av.z, av.w}, b0[4] = {bv0.x, bv0.y, bv0.z, bv0.w};
            float b1[4] = {bv1.x, bv1.y, bv1.z, bv1.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc0[i][j] += a[i] * b0[j];
                    if (TWO) acc1[i][j] += a[i] * b1[j];
                }
        }
        __syncthreads();
    }
}

// moe_ggateup: grid (ceil(maxInter/MGN), maxTiles), 128 threads. For each
// sorted pair pos of the tile, act[pos, c] = act(gate·x + bg) · (up·x + bu)
// (or gpt-oss's clamped SwiGLU when limit > 0), x the pair's row of x [n,
// hid]; act rows are stride values apart.
extern "C" __global__ void __launch_bounds__(128)
    moe_ggateup(float* act, const float* x, int* g, const unsigned long long* tab, int nexp, int P, int slots,
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
    int dts = (int)d[7], wdt = dts & 255, bdt = (dts >> 16) & 255;
    float ag[4][4], au[4][4];
    if (wdt == DT_BF16)
        mg_tile<DT_BF16, true>(x, hid, xrow, rows, (const void*)d[0], (const void*)d[1], inter, hid, c0, ag, au);
    else if (wdt == DT_F16)
        mg_tile<DT_F16, true>(x, hid, xrow, rows, (const void*)d[0], (const void*)d[1], inter, hid, c0, ag, au);
    else
        mg_tile<DT_F32, true>(x, hid, xrow, rows, (const void*)d[0], (const void*)d[1], inter, hid, c0, ag, au);
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty * 4 + i;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = c0 + tx * 4 + j;
            if (c >= inter) continue;
            float gv = ag[i][j], uv = au[i][j];
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

// moe_gdown: grid (ceil(hid/MGN), maxTiles), 128 threads. y[pos, c] =
// (down_e·act[pos] + bd_e)[c] for the sorted pairs of each tile.
extern "C" __global__ void __launch_bounds__(128)
    moe_gdown(float* y, const float* act, int* g, const unsigned long long* tab, int nexp, int P, int hid, int stride) {
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
    int dts = (int)d[7], ddt = (dts >> 8) & 255, dbdt = (dts >> 24) & 255;
    float acc[4][4], unused[4][4];
    if (ddt == DT_BF16)
        mg_tile<DT_BF16, false>(act, stride, xrow, rows, (const void*)d[2], 0, hid, inter, c0, acc, unused);
    else if (ddt == DT_F16)
        mg_tile<DT_F16, false>(act, stride, xrow, rows, (const void*)d[2], 0, hid, inter, c0, acc, unused);
    else
        mg_tile<DT_F32, false>(act, stride, xrow, rows, (const void*)d[2], 0, hid, inter, c0, acc, unused);
    int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty * 4 + i;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = c0 + tx * 4 + j;
            if (c >= hid) continue;
            float v = acc[i][j];
            if (d[5]) v += ldf((const void*)d[5], dbdt, c);
            y[(i64)(base + r) * hid + c] = v;
        }
    }
}

// moe_combine: dst[i, c] = Σ_j wts[i, j] · y[inv[i·slots + j], c], the
// slots in order.
extern "C" __global__ void moe_combine(float* dst, const float* y, const int* g, const float* wts, int n, int slots,
                                       int hid, int nexp, int P) {
    const int* inv = mg_inv((int*)g, nexp, P);
    GRID_STRIDE(idx, (i64)n * hid) {
        int i = (int)(idx / hid), c = (int)(idx - (i64)i * hid);
        float acc = 0.0f;
        for (int j = 0; j < slots; j++) {
            int pos = inv[i * slots + j];
            if (pos >= 0) acc += wts[i * slots + j] * y[(i64)pos * hid + c];
        }
        dst[idx] = acc;
    }
}
