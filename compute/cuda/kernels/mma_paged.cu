// Paged decode attention on the tensor cores, for f16 pools: the query
// heads of a kv head (up to 16) form the rows of one 16-row tile, so that
// S = Q·Kᵀ and O = P·V are mma.sync m16n8k16 products (f16 operands, f32
// accumulators) over tiles of 16 keys read once for every query head of
// the kv head. A decode row's attention is then bound by the bytes of its
// keys and values, not by per-key arithmetic: the SIMT kernel
// (attend_pgqa) spends most of its time on shuffles and exponentials at
// hundreds of rows.
//
// attend_ptc: one block of PT_WARPS warps per (row, kv head, group of up
// to 16 of its query heads) and split blockIdx.y of span positions, as
// attend_pgqa's grid, writing the same parts for attend_combine. The
// split's block-table entries are staged in shared memory; each warp
// walks its own tiles of 16 keys (tiles w, w + PT_WARPS, …), double
// buffered in a shared-memory region of its own with cp.async, keeping an
// online softmax per query row in registers; the warps are merged at the
// end. Rows of hd f16 values are stored with 16-byte chunk c at
// c ^ (row & 7), as flash_attend's, so ldmatrix reads are conflict-free.

#define PT_WARPS 4
#define PT_KEYS 16 // keys per tile

// pack_f16 rounds two floats to f16 and packs them, lo in the low half.
__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <int HD>
__device__ void attend_ptc_t(const float* q, const u16* ck, const u16* cv, const int* table, const int* seq,
                             const int* pos, int bs, int maxb, int heads, int kvheads, float scale, float softcap,
                             int window, float* part, int splits, int span) {
    // Dynamic shared memory (the host's ptcShared): the query tile, then
    // per warp two stages of a key and a value tile; after the loop the
    // same bytes hold the warps' results for the merge.
    extern __shared__ __align__(128) unsigned char psm[];
    __shared__ int sm_tb[PG_SPAN + 2];
    const int CH = HD / 8;                   // 16-byte chunks per row
    const int TILE = PT_KEYS * HD * 2;       // bytes of a key (or value) tile
    unsigned char* qs = psm;
    int G = heads / kvheads, hch = (G + 15) / 16;
    int i = blockIdx.x / (kvheads * hch);
    int rem = blockIdx.x - i * kvheads * hch;
    int kh = rem / hch, hc = rem - kh * hch;
    int h0 = kh * G + hc * 16, ng = min(16, G - hc * 16);
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    float* pt = part + ((i64)i * heads + h0) * splits * (HD + 2) + (i64)blockIdx.y * (HD + 2);
    int lo, hi, b0;
    if (!paged_split(i, ng, table, seq, pos, bs, maxb, window, span, splits, HD, pt, sm_tb, lo, hi, b0)) return;
    int qc = heads * HD, kc = kvheads * HD;
    // Stage the query rows as f16; rows past ng are zero.
    for (int e = tid; e < 16 * CH; e += PT_WARPS * 32) {
        int r = e / CH, c = e % CH;
        U4 u = {0, 0, 0, 0};
        if (r < ng) {
            const F4* src = (const F4*)(q + (i64)i * qc + (i64)(h0 + r) * HD + c * 8);
            F4 a = src[0], b = src[1];
            u.x = pack_f16(a.x, a.y);
            u.y = pack_f16(a.z, a.w);
            u.z = pack_f16(b.x, b.y);
            u.w = pack_f16(b.z, b.w);
        }
        *(U4*)(qs + fa_swz<HD>(r, c)) = u;
    }
    __syncthreads();

    // The split's keys [lo, hi] in tiles of PT_KEYS from lo; warp w takes
    // tiles w, w + PT_WARPS, …
    int tiles = (hi - lo) / PT_KEYS + 1;
    unsigned char* ws = psm + 16 * HD * 2 + w * 2 * 2 * TILE; // the warp's stages: K0 V0 K1 V1
    const u16* kb = ck + (i64)kh * HD;
    const u16* vb = cv + (i64)kh * HD;
    // When blocks hold whole tiles and the split starts on a tile, a
    // tile's keys lie in one block: one table entry and one division a
    // tile, not one a key.
    bool whole = bs % PT_KEYS == 0 && lo % PT_KEYS == 0;
    // A lane copies chunk c of rows r0, r0 + RP, … of a tile.
    const int RP = 32 / CH;
    const int c = lane % CH, r0 = lane / CH;
    auto load = [&](int stage, int tile) {
        int j0 = lo + tile * PT_KEYS;
        u32 kd = smem_addr(ws + stage * 2 * TILE), vd = kd + TILE;
        if (whole) {
            int tblk = sm_tb[j0 / bs - b0];
            i64 off = ((i64)tblk * bs + j0 % bs + r0) * kc + c * 8;
#pragma unroll
            for (int r = r0; r < PT_KEYS; r += RP, off += (i64)RP * kc) {
                bool ok = tblk >= 0 && j0 + r <= hi;
                cp_async16(kd + fa_swz<HD>(r, c), kb + (ok ? off : 0), ok ? 16 : 0);
                cp_async16(vd + fa_swz<HD>(r, c), vb + (ok ? off : 0), ok ? 16 : 0);
            }
            return;
        }
        for (int r = r0; r < PT_KEYS; r += RP) {
            int j = j0 + r;
            int blk = j <= hi ? sm_tb[j / bs - b0] : -1;
            i64 off = blk >= 0 ? ((i64)blk * bs + j % bs) * kc + c * 8 : 0;
            cp_async16(kd + fa_swz<HD>(r, c), kb + off, blk >= 0 ? 16 : 0);
            cp_async16(vd + fa_swz<HD>(r, c), vb + off, blk >= 0 ? 16 : 0);
        }
    };

    int g = lane >> 2;
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.0f;
    float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
    const float L2E = 1.4426950408889634f;
    // The query tile's fragments, for every tile of keys.
    u32 qf[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) ldmatrix_x4(qf[kk], smem_addr(qs) + fa_swz<HD>(lane & 15, kk * 2 + (lane >> 4)));

    if (w < tiles) load(0, w);
    cp_async_commit();
    for (int t = w, st = 0; t < tiles; t += PT_WARPS, st ^= 1) {
        if (t + PT_WARPS < tiles) load(st ^ 1, t + PT_WARPS);
        cp_async_commit();
        cp_async_wait<1>();
        __syncwarp();
        u32 ka = smem_addr(ws + st * 2 * TILE), va = ka + TILE;

        // S = Q·Kᵀ: 16 query rows by 16 keys (two 8-key halves), the even
        // and odd steps of the head dim in separate accumulators, so that
        // four chains of mma, not two, wait on each other.
        float s[2][4], s2[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = s2[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 b[4];
            ldmatrix_x4(b, ka + fa_swz<HD>((lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
            u32 b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            if (kk & 1) {
                mma16816<DT_F16>(s2[0], qf[kk], b0);
                mma16816<DT_F16>(s2[1], qf[kk], b1);
            } else {
                mma16816<DT_F16>(s[0], qf[kk], b0);
                mma16816<DT_F16>(s[1], qf[kk], b1);
            }
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] += s2[n][e];

        // Scale, cap, mask the keys past hi (the tile's tail) or without
        // a block, online softmax over rows g and g + 8.
        int j0 = lo + t * PT_KEYS;
        bool tok = whole && sm_tb[j0 / bs - b0] >= 0;
        float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[n][e] * scale;
                if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
                int j = j0 + n * 8 + (lane & 3) * 2 + (e & 1);
                x = j <= hi && (whole ? tok : sm_tb[j / bs - b0] >= 0) ? x : NEG_INF;
                s[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mb = mx[r] == NEG_INF ? 0.0f : mx[r];
            corr[r] = exp2f((mrow[r] - mb) * L2E);
            mrow[r] = mx[r];
            lrow[r] *= corr[r];
            mx[r] = mb * L2E;
        }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pr = exp2f(fmaf(s[n][e], L2E, -mx[e >> 1]));
                s[n][e] = pr;
                lrow[e >> 1] += pr;
            }
        // Once the rows' maxima settle, most tiles leave them: the
        // accumulators are then scaled by 1, which the warp skips.
        if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
            for (int j = 0; j < HD / 8; j++) {
                o[j][0] *= corr[0];
                o[j][1] *= corr[0];
                o[j][2] *= corr[1];
                o[j][3] *= corr[1];
            }
        }
        // O += P·V over the tile's 16 keys.
        u32 a[4] = {pack_f16(s[0][0], s[0][1]), pack_f16(s[0][2], s[0][3]), pack_f16(s[1][0], s[1][1]),
                    pack_f16(s[1][2], s[1][3])};
#pragma unroll
        for (int j = 0; j < HD / 16; j++) {
            u32 b[4];
            ldmatrix_x4_trans(b, va + fa_swz<HD>((lane & 7) + (((lane >> 3) & 1) << 3), j * 2 + (lane >> 4)));
            u32 b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma16816<DT_F16>(o[2 * j], a, b0);
            mma16816<DT_F16>(o[2 * j + 1], a, b1);
        }
        __syncwarp();
    }
    cp_async_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
        lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
    }
    __syncthreads();

    // Merge the warps: each writes its (m, l, o) rows to shared memory,
    // then the block sums them for the rows of real query heads.
    float* sm_o = (float*)psm;                     // [PT_WARPS][16][HD]
    float* sm_ml = sm_o + PT_WARPS * 16 * HD;      // [PT_WARPS][16][2]
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        float* dst = sm_o + ((i64)w * 16 + row) * HD;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            int d = j * 8 + (lane & 3) * 2;
            dst[d] = o[j][2 * r];
            dst[d + 1] = o[j][2 * r + 1];
        }
        if ((lane & 3) == 0) {
            sm_ml[(w * 16 + row) * 2] = mrow[r];
            sm_ml[(w * 16 + row) * 2 + 1] = lrow[r];
        }
    }
    __syncthreads();
    for (int x = tid; x < ng * (HD + 2); x += PT_WARPS * 32) {
        int row = x / (HD + 2), d = x - row * (HD + 2);
        float m = NEG_INF;
#pragma unroll
        for (int y = 0; y < PT_WARPS; y++) m = fmaxf(m, sm_ml[(y * 16 + row) * 2]);
        float v = 0.0f;
        if (d == 0) {
            v = m;
        } else if (m != NEG_INF) {
#pragma unroll
            for (int y = 0; y < PT_WARPS; y++) {
                float my = sm_ml[(y * 16 + row) * 2];
                if (my == NEG_INF) continue;
                float c = expf(my - m);
                v += (d == 1 ? sm_ml[(y * 16 + row) * 2 + 1] : sm_o[((i64)y * 16 + row) * HD + d - 2]) * c;
            }
        }
        pt[(i64)row * splits * (HD + 2) + d] = v;
    }
}

#define PTC_ARGS const float *q, const u16 *ck, const u16 *cv, const int *table, const int *seq, const int *pos, \
    int bs, int maxb, int heads, int kvheads, float scale, float softcap, int window, float *part, int splits, int span
#define PTC_CALL q, ck, cv, table, seq, pos, bs, maxb, heads, kvheads, scale, softcap, window, part, splits, span

extern "C" __global__ void __launch_bounds__(PT_WARPS * 32) attend_ptc64(PTC_ARGS) { attend_ptc_t<64>(PTC_CALL); }
extern "C" __global__ void __launch_bounds__(PT_WARPS * 32) attend_ptc128(PTC_ARGS) { attend_ptc_t<128>(PTC_CALL); }
