// Operations whose operand differs from row to row (compute.RowOps).

// axpy_rows computes dst[r, :] += s[r, col] · x[r, :] for rows of c values;
// s has k columns.
extern "C" __global__ void axpy_rows(float* dst, const float* x, const float* s, i64 rows, int c, int k, int col) {
    GRID_STRIDE(i, rows * c) {
        i64 r = i / c;
        dst[i] += s[r * k + col] * x[i];
    }
}

// match_rms scales each row of x (c values) to the root mean square of the
// same row of ref (rc values); one block per row. dst may alias x or ref:
// both sums are taken before anything is written.
extern "C" __global__ void match_rms(float* dst, const float* x, const float* ref, int c, int rc, float floor) {
    __shared__ double sh[32];
    i64 r = blockIdx.x;
    double ss = 0, rs = 0;
    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        double v = x[r * c + i];
        ss += v * v;
    }
    for (int i = threadIdx.x; i < rc; i += blockDim.x) {
        double v = ref[r * rc + i];
        rs += v * v;
    }
    ss = block_sum_d(ss, sh);
    rs = block_sum_d(rs, sh);
    float f = (float)(sqrt(rs / rc) / sqrt(fmax(ss / c, (double)floor)));
    for (int i = threadIdx.x; i < c; i += blockDim.x) dst[r * c + i] = x[r * c + i] * f;
}

// gaussian_topk computes dst[r, :] = max(x[r, :] - (mean + k·std), 0) per
// row of c values, with the population standard deviation; one block per
// row.
extern "C" __global__ void gaussian_topk(float* dst, const float* x, int c, float k) {
    __shared__ double sh[32];
    i64 r = blockIdx.x;
    double s = 0;
    for (int i = threadIdx.x; i < c; i += blockDim.x) s += x[r * c + i];
    double mean = block_sum_d(s, sh) / c;
    double vr = 0;
    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        double d = x[r * c + i] - mean;
        vr += d * d;
    }
    vr = block_sum_d(vr, sh);
    float cut = (float)(mean + sqrt(vr / c) * (double)k);
    for (int i = threadIdx.x; i < c; i += blockDim.x) dst[r * c + i] = fmaxf(x[r * c + i] - cut, 0.0f);
}
