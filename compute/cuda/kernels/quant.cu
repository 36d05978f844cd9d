// Block-quantized weights (see quant.go for the device layout).
//
// A quantized weight is uploaded as up to three regions, each indexed by
// (row, block): codes (the packed integer codes, 16-byte aligned per block
// so that lanes read them with 16-byte loads), sc (per-block sub-scales:
// the 16-byte header of Q4_K, the 16 int8 scales of Q6_K) and d (the
// block's float16 scale; for MLX the group's scale and bias). Codes of
// 4-bit MLX packs are reordered at upload into the nibble order of Q4_0
// (byte j holds element j low and j+16 high within each 32 elements).
//
// Decode (qgemv, n ≤ 4 rows of activations): the activations are first
// quantized to int8 per 32 elements (quantize_q8: scale max|x|/127, codes
// rounded to nearest even, as the CPU backend does), with one int pair of
// metadata per block: the scale's bits and the sums of the codes of its
// two 16-element halves. Each warp then streams one weight row with
// 16-byte loads and sums code products with dp4a; a type's code offset (8
// for Q4_0, 32 for Q6_K, Q4_K's mins, MLX's bias) multiplies the sum of the
// activation codes once per block.

#define QT_Q8_0 0
#define QT_Q4_0 1
#define QT_Q4_K 2
#define QT_Q6_K 3
#define QT_MLX4 4
#define QT_Q5_0 5
#define QT_Q5_K 6
#define QT_MLX8 7
#define QT_N 8

#define QGEMV_WARPS 4

__device__ __forceinline__ int dp4a(u32 a, u32 b, int c) {
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// Per-block metadata of quantized activations: the scale's bits, and the
// sums of the codes of the two 16-element halves (low and high 16 bits).
struct alignas(8) QMeta {
    int x, y;
};
struct alignas(8) QF2 {
    float x, y;
};

// dp4a_u multiplies unsigned bytes of a by signed bytes of b.
__device__ __forceinline__ int dp4a_u(u32 a, u32 b, int c) {
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

__device__ __forceinline__ U4 ld_u4(const void* p) { return *(const U4*)p; }

// qchunk returns chunk c of unit u of a weight row whose units take C
// 16-byte chunks each. Weight interleaves the chunks of 32 consecutive
// units so that the lanes of a warp read consecutive chunks with each load:
// chunk c of unit u sits at g·C + c·gs + (u - g) of its row, g = u rounded
// down to 32, gs = min(32, nu - g).
__device__ __forceinline__ const char* qchunk(const char* codes, i64 row, int nu, int C, int u, int c) {
    int g = u & ~31;
    int gs = min(32, nu - g);
    return codes + ((row * nu + g) * C + c * gs + (u - g)) * 16;
}

// mlx_shift returns log2(group/32).
__device__ __forceinline__ int mlx_shift(int group) { return group == 32 ? 0 : (group == 64 ? 1 : 2); }

// Sums of the two 16-element halves of a block's activation codes.
__device__ __forceinline__ int qsum_lo(int p) { return (int)(short)(p & 0xffff); }
__device__ __forceinline__ int qsum_hi(int p) { return p >> 16; }

// q8_block quantizes one 32-element block of activations, value v in
// each lane, into the codes at q (32 bytes) and its metadata at mt (scale
// bits, sums of the codes of the halves): scale max|x|/127, codes rounded
// to nearest even, as the CPU backend does.
__device__ __forceinline__ void q8_block(float v, int lane, char* q, QMeta* mt) {
    u32 a = __float_as_uint(v) & 0x7fffffffu;
#if __CUDA_ARCH__ >= 800
    asm("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(a) : "r"(a));
#else
    for (int o = 16; o > 0; o >>= 1) {
        u32 b = __shfl_xor_sync(0xffffffffu, a, o);
        a = b > a ? b : a;
    }
#endif
    float d = 0.0f;
    int c = 0;
    if (a >= 0x7f800000u) {
        d = __int_as_float(0x7fc00000);
    } else if (a >= 0x0da24260u) {
        float amax = __uint_as_float(a);
        d = __fdiv_rn(amax, 127.0f);
        float id = __fdiv_rn(127.0f, amax);
        c = __float2int_rn(__fmul_rn(v, id));
    }
    q[lane] = (char)c;
#if __CUDA_ARCH__ >= 800
    int s, all;
    asm("redux.sync.add.s32 %0, %1, 0xffffffff;" : "=r"(s) : "r"(lane < 16 ? c : 0));
    asm("redux.sync.add.s32 %0, %1, 0xffffffff;" : "=r"(all) : "r"(c));
    int hi = all - s;
#else
    int s = c;
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    int hi = __shfl_sync(0xffffffffu, s, 16);
#endif
    if (lane == 0) {
        QMeta m;
        m.x = __float_as_int(d);
        m.y = (s & 0xffff) | (hi << 16);
        *mt = m;
    }
}

// quantize_q8 quantizes n rows of k activations (k a multiple of 32) into
// qx: n·k int8 codes, then one QMeta per 32-element block. One warp per
// block.
extern "C" __global__ void quantize_q8(char* qx, const float* x, int n, int k) {
    i64 blk = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (blk >= (i64)n * (k >> 5)) return;
    q8_block(x[blk * 32 + lane], lane, qx + blk * 32, (QMeta*)(qx + (i64)n * k) + blk);
}

// Per-type unit of work of one lane: load issues the loads of unit u of a
// row, dot multiplies it with one row of quantized activations.

// qnib returns the low (hi = 0) or high nibbles of w as four bytes.
__device__ __forceinline__ u32 qnib(u32 w, int hi) { return (w >> (4 * hi)) & 0x0f0f0f0fu; }

// mlx_sb reads the scale and bias of group g of MLX scale type sdt.
__device__ __forceinline__ void mlx_sb(const char* d, i64 g, int sdt, float& s, float& b) {
    if (sdt == DT_F32) {
        QF2 v = ((const QF2*)d)[g];
        s = v.x, b = v.y;
    } else {
        u32 v = ((const u32*)d)[g];
        s = sdt == DT_BF16 ? bf2f((u16)(v & 0xffff)) : h2f((u16)(v & 0xffff));
        b = sdt == DT_BF16 ? bf2f((u16)(v >> 16)) : h2f((u16)(v >> 16));
    }
}

// The units: Q8_0, Q4_0, Q5_0, MLX4: one 32-element block (MLX: 32
// elements of a group); Q4_K, Q6_K: 64 elements of a super-block (4 units
// per super-block).
template <int T>
struct QUnit;

template <>
struct QUnit<QT_Q8_0> {
    enum { UNROLL = 4, EL = 32 };
    U4 a, b;
    float d;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        a = ld_stream(qchunk(codes, row, nu, 2, u, 0));
        b = ld_stream(qchunk(codes, row, nu, 2, u, 1));
        d = h2f(((const u16*)dd)[bi]);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        const char* p = qx + (i64)u * 32;
        U4 x0 = ld_u4(p), x1 = ld_u4(p + 16);
        int s = dp4a(a.x, x0.x, 0);
        s = dp4a(a.y, x0.y, s);
        s = dp4a(a.z, x0.z, s);
        s = dp4a(a.w, x0.w, s);
        s = dp4a(b.x, x1.x, s);
        s = dp4a(b.y, x1.y, s);
        s = dp4a(b.z, x1.z, s);
        s = dp4a(b.w, x1.w, s);
        return d * __int_as_float(meta[u].x) * (float)s;
    }
};

// nib_dot sums 32 4-bit codes (low nibbles: elements 0-15, high: 16-31)
// times the activation codes at p.
__device__ __forceinline__ int nib_dot(U4 c, const char* p) {
    U4 x0 = ld_u4(p), x1 = ld_u4(p + 16);
    int s = dp4a(qnib(c.x, 0), x0.x, 0);
    s = dp4a(qnib(c.y, 0), x0.y, s);
    s = dp4a(qnib(c.z, 0), x0.z, s);
    s = dp4a(qnib(c.w, 0), x0.w, s);
    s = dp4a(qnib(c.x, 1), x1.x, s);
    s = dp4a(qnib(c.y, 1), x1.y, s);
    s = dp4a(qnib(c.z, 1), x1.z, s);
    s = dp4a(qnib(c.w, 1), x1.w, s);
    return s;
}

template <>
struct QUnit<QT_Q4_0> {
    enum { UNROLL = 4, EL = 32 };
    U4 c;
    float d;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        c = ld_stream(codes + bi * 16);
        d = h2f(((const u16*)dd)[bi]);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        int s = nib_dot(c, qx + (i64)u * 32);
        QMeta m = meta[u];
        return d * __int_as_float(m.x) * (float)(s - 8 * (qsum_lo(m.y) + qsum_hi(m.y)));
    }
};

// Q5_0: codes as Q4_0, the fifth bits (bit j of a u32 for element j) in sc.
template <>
struct QUnit<QT_Q5_0> {
    enum { UNROLL = 4, EL = 32 };
    U4 c;
    u32 h;
    float d;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        c = ld_stream(codes + bi * 16);
        h = ((const u32*)sc)[bi];
        d = h2f(((const u16*)dd)[bi]);
    }
    // hb spreads bits 4j..4j+3 of h over the fifth bit of four bytes.
    static __device__ __forceinline__ u32 hb(u32 h, int j) {
        u32 b = (h >> (4 * j)) & 0xfu;
        return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        const char* p = qx + (i64)u * 32;
        U4 x0 = ld_u4(p), x1 = ld_u4(p + 16);
        int s = dp4a(qnib(c.x, 0) | hb(h, 0), x0.x, 0);
        s = dp4a(qnib(c.y, 0) | hb(h, 1), x0.y, s);
        s = dp4a(qnib(c.z, 0) | hb(h, 2), x0.z, s);
        s = dp4a(qnib(c.w, 0) | hb(h, 3), x0.w, s);
        s = dp4a(qnib(c.x, 1) | hb(h, 4), x1.x, s);
        s = dp4a(qnib(c.y, 1) | hb(h, 5), x1.y, s);
        s = dp4a(qnib(c.z, 1) | hb(h, 6), x1.z, s);
        s = dp4a(qnib(c.w, 1) | hb(h, 7), x1.w, s);
        QMeta m = meta[u];
        return d * __int_as_float(m.x) * (float)(s - 16 * (qsum_lo(m.y) + qsum_hi(m.y)));
    }
};

template <>
struct QUnit<QT_MLX4> {
    enum { UNROLL = 4, EL = 32 };
    U4 c;
    float s, b;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        c = ld_stream(codes + bi * 16);
        int ps = mlx_shift(group);
        mlx_sb(dd, row * (nu >> ps) + (u >> ps), sdt, s, b);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        int q = nib_dot(c, qx + (i64)u * 32);
        QMeta m = meta[u];
        float dx = __int_as_float(m.x);
        return dx * (s * (float)q + b * (float)(qsum_lo(m.y) + qsum_hi(m.y)));
    }
};

// MLX 8-bit: 32 code bytes per unit, in element order.
template <>
struct QUnit<QT_MLX8> {
    enum { UNROLL = 4, EL = 32 };
    U4 a, c;
    float s, b;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        a = ld_stream(qchunk(codes, row, nu, 2, u, 0));
        c = ld_stream(qchunk(codes, row, nu, 2, u, 1));
        int ps = mlx_shift(group);
        mlx_sb(dd, row * (nu >> ps) + (u >> ps), sdt, s, b);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        const char* p = qx + (i64)u * 32;
        U4 x0 = ld_u4(p), x1 = ld_u4(p + 16);
        int q = dp4a_u(a.x, x0.x, 0);
        q = dp4a_u(a.y, x0.y, q);
        q = dp4a_u(a.z, x0.z, q);
        q = dp4a_u(a.w, x0.w, q);
        q = dp4a_u(c.x, x1.x, q);
        q = dp4a_u(c.y, x1.y, q);
        q = dp4a_u(c.z, x1.z, q);
        q = dp4a_u(c.w, x1.w, q);
        QMeta m = meta[u];
        float dx = __int_as_float(m.x);
        return dx * (s * (float)q + b * (float)(qsum_lo(m.y) + qsum_hi(m.y)));
    }
};

// byte_at returns byte i (0-11) of the three words w0 w1 w2.
__device__ __forceinline__ u32 byte_at(u32 w0, u32 w1, u32 w2, int i) {
    u32 w = i < 4 ? w0 : (i < 8 ? w1 : w2);
    return (w >> (8 * (i & 3))) & 0xffu;
}

// k4_scale_min unpacks the 6-bit scale and min of sub-block j of a Q4_K
// (or Q5_K) super-block, whose 12 scale bytes are in s0 s1 s2.
__device__ __forceinline__ void k4_scale_min(u32 s0, u32 s1, u32 s2, int j, int& sc, int& m) {
    if (j < 4) {
        sc = byte_at(s0, s1, s2, j) & 63;
        m = byte_at(s0, s1, s2, j + 4) & 63;
    } else {
        u32 bj4 = byte_at(s0, s1, s2, j + 4);
        sc = (bj4 & 0xf) | ((byte_at(s0, s1, s2, j - 4) >> 6) << 4);
        m = (bj4 >> 4) | ((byte_at(s0, s1, s2, j) >> 6) << 4);
    }
}

// Q4_K: unit c (0-3) of a super-block covers elements 64c … 64c+63: the 32
// code bytes qs[32c …], low nibbles sub-block 2c, high nibbles 2c+1.
template <>
struct QUnit<QT_Q4_K> {
    enum { UNROLL = 2, EL = 64 };
    U4 c0, c1, h;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        c0 = ld_stream(qchunk(codes, row, nu, 2, u, 0));
        c1 = ld_stream(qchunk(codes, row, nu, 2, u, 1));
        h = ld_u4(sc + (bi >> 2) * 16);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        int c = u & 3;
        int ba = 2 * u; // activation block of sub-block 2c: (u>>2)·8 + 2c
        const char* pa = qx + (i64)ba * 32;
        U4 xa0 = ld_u4(pa), xa1 = ld_u4(pa + 16), xb0 = ld_u4(pa + 32), xb1 = ld_u4(pa + 48);
        int sa = dp4a(qnib(c0.x, 0), xa0.x, 0);
        sa = dp4a(qnib(c0.y, 0), xa0.y, sa);
        sa = dp4a(qnib(c0.z, 0), xa0.z, sa);
        sa = dp4a(qnib(c0.w, 0), xa0.w, sa);
        sa = dp4a(qnib(c1.x, 0), xa1.x, sa);
        sa = dp4a(qnib(c1.y, 0), xa1.y, sa);
        sa = dp4a(qnib(c1.z, 0), xa1.z, sa);
        sa = dp4a(qnib(c1.w, 0), xa1.w, sa);
        int sb = dp4a(qnib(c0.x, 1), xb0.x, 0);
        sb = dp4a(qnib(c0.y, 1), xb0.y, sb);
        sb = dp4a(qnib(c0.z, 1), xb0.z, sb);
        sb = dp4a(qnib(c0.w, 1), xb0.w, sb);
        sb = dp4a(qnib(c1.x, 1), xb1.x, sb);
        sb = dp4a(qnib(c1.y, 1), xb1.y, sb);
        sb = dp4a(qnib(c1.z, 1), xb1.z, sb);
        sb = dp4a(qnib(c1.w, 1), xb1.w, sb);
        int sca, ma, scb, mb;
        k4_scale_min(h.y, h.z, h.w, 2 * c, sca, ma);
        k4_scale_min(h.y, h.z, h.w, 2 * c + 1, scb, mb);
        QMeta mta = meta[ba], mtb = meta[ba + 1];
        float dxa = __int_as_float(mta.x), dxb = __int_as_float(mtb.x);
        float d = h2f((u16)(h.x & 0xffff)), dmin = h2f((u16)(h.x >> 16));
        int suma = qsum_lo(mta.y) + qsum_hi(mta.y), sumb = qsum_lo(mtb.y) + qsum_hi(mtb.y);
        return d * (dxa * (float)(sca * sa) + dxb * (float)(scb * sb)) -
               dmin * (dxa * (float)(ma * suma) + dxb * (float)(mb * sumb));
    }
};

// Q5_K: as Q4_K, the codes region holding qh[32] then qs[128]; the fifth
// bits of unit c's low and high halves are bits 2c and 2c+1 of qh[l].
template <>
struct QUnit<QT_Q5_K> {
    enum { UNROLL = 2, EL = 64 };
    U4 c0, c1, h0, h1, h;
    __device__ __forceinline__ void load(const char* codes, const char* sc, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        const char* cb = codes + (bi >> 2) * 160;
        int c = u & 3;
        c0 = ld_stream(cb + 32 + 32 * c);
        c1 = ld_stream(cb + 48 + 32 * c);
        h0 = ld_u4(cb);
        h1 = ld_u4(cb + 16);
        h = ld_u4(sc + (bi >> 2) * 16);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        int c = u & 3;
        int ba = 2 * u;
        const char* pa = qx + (i64)ba * 32;
        U4 xa0 = ld_u4(pa), xa1 = ld_u4(pa + 16), xb0 = ld_u4(pa + 32), xb1 = ld_u4(pa + 48);
        u32 lo[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        u32 hb[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        u32 xa[8] = {xa0.x, xa0.y, xa0.z, xa0.w, xa1.x, xa1.y, xa1.z, xa1.w};
        u32 xb[8] = {xb0.x, xb0.y, xb0.z, xb0.w, xb1.x, xb1.y, xb1.z, xb1.w};
        int sa = 0, sb = 0;
#pragma unroll
        for (int w = 0; w < 8; w++) {
            sa = dp4a(qnib(lo[w], 0) | (((hb[w] >> (2 * c)) & 0x01010101u) << 4), xa[w], sa);
            sb = dp4a(qnib(lo[w], 1) | (((hb[w] >> (2 * c + 1)) & 0x01010101u) << 4), xb[w], sb);
        }
        int sca, ma, scb, mb;
        k4_scale_min(h.y, h.z, h.w, 2 * c, sca, ma);
        k4_scale_min(h.y, h.z, h.w, 2 * c + 1, scb, mb);
        QMeta mta = meta[ba], mtb = meta[ba + 1];
        float dxa = __int_as_float(mta.x), dxb = __int_as_float(mtb.x);
        float d = h2f((u16)(h.x & 0xffff)), dmin = h2f((u16)(h.x >> 16));
        int suma = qsum_lo(mta.y) + qsum_hi(mta.y), sumb = qsum_lo(mtb.y) + qsum_hi(mtb.y);
        return d * (dxa * (float)(sca * sa) + dxb * (float)(scb * sb)) -
               dmin * (dxa * (float)(ma * suma) + dxb * (float)(mb * sumb));
    }
};

// Q6_K: unit p (0-3) of a super-block is half h = p/2 and l-range i = p%2
// (l in 16i … 16i+15): elements 128h + 32j + l for j < 4, from
// ql[64h + l] (j = 0, 2: low, high nibble), ql[64h + 32 + l] (j = 1, 3) and
// bits 2j of qh[32h + l]; scale 8h + i + 2j. Its three chunks are those
// 16 bytes of ql, of ql + 32 and of qh.
template <>
struct QUnit<QT_Q6_K> {
    enum { UNROLL = 2, EL = 64 };
    U4 la, lb, qh, sc;
    float d;
    __device__ __forceinline__ void load(const char* codes, const char* scp, const char* dd, i64 row, int nu, int u, int group, int sdt) {
        i64 bi = row * nu + u;
        i64 sbi = bi >> 2;
        la = ld_stream(qchunk(codes, row, nu, 3, u, 0));
        lb = ld_stream(qchunk(codes, row, nu, 3, u, 1));
        qh = ld_stream(qchunk(codes, row, nu, 3, u, 2));
        sc = ld_u4(scp + sbi * 16);
        d = h2f(((const u16*)dd)[sbi]);
    }
    __device__ __forceinline__ float dot(const char* qx, const QMeta* meta, int u, int group) const {
        int p = u & 3, h = p >> 1, i = p & 1;
        int b0 = (u >> 2) * 8 + 4 * h; // activation block of j = 0
        u32 l[4] = {la.x, la.y, la.z, la.w}, m[4] = {lb.x, lb.y, lb.z, lb.w}, hh[4] = {qh.x, qh.y, qh.z, qh.w};
        u32 scw[4] = {sc.x, sc.y, sc.z, sc.w};
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const char* px = qx + (i64)(b0 + j) * 32 + 16 * i;
            U4 xv = ld_u4(px);
            u32 xs[4] = {xv.x, xv.y, xv.z, xv.w};
            int s = 0;
#pragma unroll
            for (int w = 0; w < 4; w++) {
                u32 lo = j & 1 ? m[w] : l[w];
                u32 q = ((lo >> (4 * (j >> 1))) & 0x0f0f0f0fu) | (((hh[w] >> (2 * j)) & 0x03030303u) << 4);
                s = dp4a(q, xs[w], s);
            }
            QMeta mt = meta[b0 + j];
            int half = i ? qsum_hi(mt.y) : qsum_lo(mt.y);
            int si = 8 * h + i + 2 * j;
            int scale = (int)(signed char)((scw[si >> 2] >> (8 * (si & 3))) & 0xff);
            acc += __int_as_float(mt.x) * (float)(scale * (s - 32 * half));
        }
        return d * acc;
    }
};

// qgemv_t computes dst[r, row] = x[r]·w[row] for NR rows of quantized
// activations; each warp takes RPW weight rows, whose loads it issues
// together.
//
// Block blk takes the weight rows from blk·QGEMV_WARPS·RPW; meta is the
// activations' metadata and nr ≤ NR the activation rows present.
template <int T, int NR, int RPW>
__device__ __forceinline__ void qgemv_t(int blk, float* dst, const char* qx, const QMeta* meta, const char* codes, const char* sc, const char* dd, int m, int k, int group, int sdt, int nr) {
    typedef QUnit<T> Q;
    int row0 = (blk * QGEMV_WARPS + (threadIdx.x >> 5)) * RPW;
    int lane = threadIdx.x & 31;
    if (row0 >= m) return;
    const int nu = k / Q::EL;
    const int nb = k >> 5;
    float acc[RPW][NR];
#pragma unroll
    for (int w = 0; w < RPW; w++)
#pragma unroll
        for (int r = 0; r < NR; r++) acc[w][r] = 0.0f;
    for (int u0 = lane; u0 < nu; u0 += 32 * Q::UNROLL) {
        Q q[RPW][Q::UNROLL];
#pragma unroll
        for (int w = 0; w < RPW; w++)
#pragma unroll
            for (int j = 0; j < Q::UNROLL; j++) {
                int u = u0 + 32 * j;
                if (u < nu && row0 + w < m) q[w][j].load(codes, sc, dd, row0 + w, nu, u, group, sdt);
            }
#pragma unroll
        for (int j = 0; j < Q::UNROLL; j++) {
            int u = u0 + 32 * j;
            if (u >= nu) break;
#pragma unroll
            for (int w = 0; w < RPW; w++)
#pragma unroll
                for (int r = 0; r < NR; r++)
                    if (r < nr) acc[w][r] += q[w][j].dot(qx + (i64)r * k, meta + (i64)r * nb, u, group);
        }
    }
#pragma unroll
    for (int w = 0; w < RPW; w++)
#pragma unroll
        for (int r = 0; r < NR; r++) {
            float s = warp_sum(acc[w][r]);
            if (lane == 0 && row0 + w < m && r < nr) dst[(i64)r * m + row0 + w] = s;
        }
}

#define QGEMV(name, T, NR, RPW)                                                                                  \
    extern "C" __global__ void __launch_bounds__(QGEMV_WARPS * 32)                                               \
        name(float* dst, const char* qx, const char* codes, const char* sc, const char* dd, int m, int k, int group, int sdt) { \
        qgemv_t<T, NR, RPW>(blockIdx.x, dst, qx, (const QMeta*)(qx + (i64)NR * k), codes, sc, dd, m, k, group, sdt, NR); \
    }
// QGEMV8 is the batched form: n activation rows (any n) in groups of
// QGEMV_BATCH, each weight row read once per group. The groups of one
// range of weight rows are neighbouring blocks (blockIdx.x % groups), so
// that the weight bytes a group reads after the first come from L2.
#define QGEMV_BATCH 8
#define QGEMV8(name, T)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(QGEMV_WARPS * 32)                                                      \
        name(float* dst, const char* qx, const char* codes, const char* sc, const char* dd, int m, int k, int group, int sdt, int n) { \
        int groups = (n + QGEMV_BATCH - 1) / QGEMV_BATCH, g = blockIdx.x % groups, r0 = g * QGEMV_BATCH;               \
        const QMeta* meta = (const QMeta*)(qx + (i64)n * k) + (i64)r0 * (k >> 5);                                     \
        qgemv_t<T, QGEMV_BATCH, 1>(blockIdx.x / groups, dst + (i64)r0 * m, qx + (i64)r0 * k, meta, codes, sc, dd, m, k, \
                                   group, sdt, min(QGEMV_BATCH, n - r0));                                              \
    }
QGEMV8(qgemv_q8_0_8, QT_Q8_0)
QGEMV8(qgemv_q4_0_8, QT_Q4_0)
QGEMV8(qgemv_q4_k_8, QT_Q4_K)
QGEMV8(qgemv_q6_k_8, QT_Q6_K)
QGEMV8(qgemv_mlx4_8, QT_MLX4)
QGEMV8(qgemv_q5_0_8, QT_Q5_0)
QGEMV8(qgemv_q5_k_8, QT_Q5_K)
QGEMV8(qgemv_mlx8_8, QT_MLX8)
// Per type: one weight row per warp for 1-4 activation rows (qgemv_T_N),
// and two weight rows per warp for one activation row (qgemv2_T_1).
QGEMV(qgemv_q8_0_1, QT_Q8_0, 1, 1)
QGEMV(qgemv_q8_0_2, QT_Q8_0, 2, 1)
QGEMV(qgemv_q8_0_3, QT_Q8_0, 3, 1)
QGEMV(qgemv_q8_0_4, QT_Q8_0, 4, 1)
QGEMV(qgemv2_q8_0_1, QT_Q8_0, 1, 2)
QGEMV(qgemv_q4_0_1, QT_Q4_0, 1, 1)
QGEMV(qgemv_q4_0_2, QT_Q4_0, 2, 1)
QGEMV(qgemv_q4_0_3, QT_Q4_0, 3, 1)
QGEMV(qgemv_q4_0_4, QT_Q4_0, 4, 1)
QGEMV(qgemv2_q4_0_1, QT_Q4_0, 1, 2)
QGEMV(qgemv_q4_k_1, QT_Q4_K, 1, 1)
QGEMV(qgemv_q4_k_2, QT_Q4_K, 2, 1)
QGEMV(qgemv_q4_k_3, QT_Q4_K, 3, 1)
QGEMV(qgemv_q4_k_4, QT_Q4_K, 4, 1)
QGEMV(qgemv2_q4_k_1, QT_Q4_K, 1, 2)
QGEMV(qgemv_q6_k_1, QT_Q6_K, 1, 1)
QGEMV(qgemv_q6_k_2, QT_Q6_K, 2, 1)
QGEMV(qgemv_q6_k_3, QT_Q6_K, 3, 1)
QGEMV(qgemv_q6_k_4, QT_Q6_K, 4, 1)
QGEMV(qgemv2_q6_k_1, QT_Q6_K, 1, 2)
QGEMV(qgemv_mlx4_1, QT_MLX4, 1, 1)
QGEMV(qgemv_mlx4_2, QT_MLX4, 2, 1)
QGEMV(qgemv_mlx4_3, QT_MLX4, 3, 1)
QGEMV(qgemv_mlx4_4, QT_MLX4, 4, 1)
QGEMV(qgemv2_mlx4_1, QT_MLX4, 1, 2)
QGEMV(qgemv_q5_0_1, QT_Q5_0, 1, 1)
QGEMV(qgemv_q5_0_2, QT_Q5_0, 2, 1)
QGEMV(qgemv_q5_0_3, QT_Q5_0, 3, 1)
QGEMV(qgemv_q5_0_4, QT_Q5_0, 4, 1)
QGEMV(qgemv2_q5_0_1, QT_Q5_0, 1, 2)
QGEMV(qgemv_q5_k_1, QT_Q5_K, 1, 1)
QGEMV(qgemv_q5_k_2, QT_Q5_K, 2, 1)
QGEMV(qgemv_q5_k_3, QT_Q5_K, 3, 1)
QGEMV(qgemv_q5_k_4, QT_Q5_K, 4, 1)
QGEMV(qgemv2_q5_k_1, QT_Q5_K, 1, 2)
QGEMV(qgemv_mlx8_1, QT_MLX8, 1, 1)
QGEMV(qgemv_mlx8_2, QT_MLX8, 2, 1)
QGEMV(qgemv_mlx8_3, QT_MLX8, 3, 1)
QGEMV(qgemv_mlx8_4, QT_MLX8, 4, 1)
QGEMV(qgemv2_mlx8_1, QT_MLX8, 1, 2)

// cvt_out converts v to the bits of an f16 (odt DT_F16) or bf16 value.
__device__ __forceinline__ u32 cvt_out(float v, int odt) {
    if (odt == DT_F16) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
    u32 b = __float_as_uint(v);
    return (v != v) ? 0x7fc0u : (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

// st8 stores v[0…7] as elements i … i+7 (i a multiple of 8) of an f32, f16
// or bf16 row, with 16-byte stores.
__device__ __forceinline__ void st8(void* dst, int odt, i64 i, const float* v) {
    if (odt == DT_F32) {
        F4* p = (F4*)((float*)dst + i);
        F4 a, b;
        a.x = v[0], a.y = v[1], a.z = v[2], a.w = v[3];
        b.x = v[4], b.y = v[5], b.z = v[6], b.w = v[7];
        p[0] = a;
        p[1] = b;
        return;
    }
    U4 u;
    u.x = cvt_out(v[0], odt) | cvt_out(v[1], odt) << 16;
    u.y = cvt_out(v[2], odt) | cvt_out(v[3], odt) << 16;
    u.z = cvt_out(v[4], odt) | cvt_out(v[5], odt) << 16;
    u.w = cvt_out(v[6], odt) | cvt_out(v[7], odt) << 16;
    *(U4*)((u16*)dst + i) = u;
}

// qdequant widens rows of a quantized weight: dst row r gets weight row
// ids[r] (ids non-null: an embedding gather) or row0 + r, as float32, f16
// or bf16 (odt). Products round as the CPU's dequantization does (no fused
// multiply-add), so that float32 rows match it bit for bit. One thread per
// unit; a unit's values are stored as runs of 16 (Q6_K: the four runs its
// elements form) with 16-byte stores.
extern "C" __global__ void qdequant(void* dst, int odt, const int* ids, int row0, int rows, int qt,
                                    const char* codes, const char* sc, const char* dd, int k, int group, int sdt) {
    int el = (qt == QT_Q4_K || qt == QT_Q5_K || qt == QT_Q6_K) ? 64 : 32;
    int nu = k / el;
    GRID_STRIDE(i, (i64)rows * nu) {
        i64 r = i / nu;
        int u = (int)(i % nu);
        i64 wr = ids ? (i64)ids[r] : (i64)row0 + r;
        i64 bi = wr * nu + u;
        int C = (qt == QT_Q8_0 || qt == QT_Q4_K || qt == QT_MLX8) ? 2 : (qt == QT_Q6_K ? 3 : 1);
        const unsigned char* ch0 = (const unsigned char*)qchunk(codes, wr, nu, C, u, 0);
        const unsigned char* ch1 = (const unsigned char*)qchunk(codes, wr, nu, C, u, C > 1 ? 1 : 0);
        const unsigned char* ch2 = (const unsigned char*)qchunk(codes, wr, nu, C, u, C > 2 ? 2 : 0);
        float v[64];
        // Run j of 16 values starts at o + j·step.
        i64 o = r * k + (i64)u * el;
        int step = 16;
        switch (qt) {
        case QT_Q8_0: {
            float d = h2f(((const u16*)dd)[bi]);
#pragma unroll
            for (int e = 0; e < 32; e++) v[e] = __fmul_rn((float)(signed char)(e < 16 ? ch0[e] : ch1[e - 16]), d);
            break;
        }
        case QT_MLX8: {
            float s, b;
            int ps = mlx_shift(group);
            mlx_sb(dd, wr * (nu >> ps) + (u >> ps), sdt, s, b);
#pragma unroll
            for (int e = 0; e < 32; e++) v[e] = __fadd_rn(__fmul_rn(s, (float)(e < 16 ? ch0[e] : ch1[e - 16])), b);
            break;
        }
        case QT_Q4_0:
        case QT_Q5_0:
        case QT_MLX4: {
            float d = 0.0f, s = 0.0f, b = 0.0f;
            u32 h = 0;
            if (qt == QT_MLX4) {
                int ps = mlx_shift(group);
                mlx_sb(dd, wr * (nu >> ps) + (u >> ps), sdt, s, b);
            } else {
                d = h2f(((const u16*)dd)[bi]);
            }
            if (qt == QT_Q5_0) h = ((const u32*)sc)[bi];
#pragma unroll
            for (int e = 0; e < 32; e++) {
                int c = (ch0[e & 15] >> (4 * (e >> 4))) & 15;
                if (qt == QT_Q4_0) {
                    v[e] = __fmul_rn((float)(c - 8), d);
                } else if (qt == QT_Q5_0) {
                    v[e] = __fmul_rn((float)((c | (int)(((h >> e) & 1) << 4)) - 16), d);
                } else {
                    v[e] = __fadd_rn(__fmul_rn(s, (float)c), b);
                }
            }
            break;
        }
        case QT_Q4_K:
        case QT_Q5_K: {
            int c = u & 3;
            const unsigned char* qh = 0;
            const unsigned char* q0 = ch0;
            const unsigned char* q1 = ch1;
            if (qt == QT_Q5_K) {
                qh = (const unsigned char*)codes + (bi >> 2) * 160;
                q0 = qh + 32 + 32 * c;
                q1 = q0 + 16;
            }
            U4 h = ld_u4(sc + (bi >> 2) * 16);
            float d = h2f((u16)(h.x & 0xffff)), dmin = h2f((u16)(h.x >> 16));
            int sca, ma, scb, mb;
            k4_scale_min(h.y, h.z, h.w, 2 * c, sca, ma);
            k4_scale_min(h.y, h.z, h.w, 2 * c + 1, scb, mb);
            float d1 = __fmul_rn(d, (float)sca), m1 = __fmul_rn(dmin, (float)ma);
            float d2 = __fmul_rn(d, (float)scb), m2 = __fmul_rn(dmin, (float)mb);
#pragma unroll
            for (int l = 0; l < 32; l++) {
                u32 ql = l < 16 ? q0[l] : q1[l - 16];
                u32 v1 = ql & 15, v2 = ql >> 4;
                if (qh) {
                    v1 |= ((qh[l] >> (2 * c)) & 1) << 4;
                    v2 |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                }
                v[l] = __fsub_rn(__fmul_rn(d1, (float)v1), m1);
                v[32 + l] = __fsub_rn(__fmul_rn(d2, (float)v2), m2);
            }
            break;
        }
        case QT_Q6_K: {
            i64 sbi = bi >> 2;
            int p = u & 3, hf = p >> 1, ii = p & 1;
            const signed char* scs = (const signed char*)sc + sbi * 16;
            float d = h2f(((const u16*)dd)[sbi]);
            // The unit's elements are 128hf + 32j + 16ii + t of its
            // super-block: four runs of 16, 32 apart.
            o = r * k + (i64)(u >> 2) * 256 + 128 * hf + 16 * ii;
            step = 32;
            int is = 8 * hf + ii;
            float d0 = __fmul_rn(d, (float)scs[is]), d1 = __fmul_rn(d, (float)scs[is + 2]);
            float d2 = __fmul_rn(d, (float)scs[is + 4]), d3 = __fmul_rn(d, (float)scs[is + 6]);
#pragma unroll
            for (int t = 0; t < 16; t++) {
                u32 qh = ch2[t];
                u32 la = ch0[t], lb = ch1[t];
                v[t] = __fmul_rn(d0, (float)((int)((la & 15) | ((qh & 3) << 4)) - 32));
                v[16 + t] = __fmul_rn(d1, (float)((int)((lb & 15) | (((qh >> 2) & 3) << 4)) - 32));
                v[32 + t] = __fmul_rn(d2, (float)((int)((la >> 4) | (((qh >> 4) & 3) << 4)) - 32));
                v[48 + t] = __fmul_rn(d3, (float)((int)((lb >> 4) | (((qh >> 6) & 3) << 4)) - 32));
            }
            break;
        }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (16 * j >= el) break;
            st8(dst, odt, o + (i64)j * step, v + 16 * j);
            st8(dst, odt, o + (i64)j * step + 8, v + 16 * j + 8);
        }
    }
}

// qcolumns copies src [n, w] into columns [from, from+w) of dst [n, m].
extern "C" __global__ void qcolumns(float* dst, const float* src, i64 n, int w, int m, int from) {
    GRID_STRIDE(i, n * w) {
        i64 r = i / w;
        int c = (int)(i % w);
        dst[r * m + from + c] = src[i];
    }
}
