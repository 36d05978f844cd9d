// Elementwise operations, gathers and copies.

// embed gathers rows ids[r] of table (storage type dt) into dst; one block per row.
extern "C" __global__ void embed(float* dst, const void* table, int dt, const int* ids, int cols) {
    i64 r = blockIdx.x;
    i64 src = (i64)ids[r] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[r * cols + c] = ldf(table, dt, src + c);
}

// binary computes dst = a op b with b repeated every bn elements (op 0: add, 1: mul).
extern "C" __global__ void binary(float* dst, const float* a, const void* b, int bdt, i64 n, i64 bn, int op) {
    GRID_STRIDE(i, n) {
        float y = ldf(b, bdt, bn == n ? i : i % bn);
        dst[i] = op == 0 ? a[i] + y : a[i] * y;
    }
}

extern "C" __global__ void scale(float* dst, const float* x, i64 n, float s) {
    GRID_STRIDE(i, n) dst[i] = x[i] * s;
}

extern "C" __global__ void softcap(float* dst, const float* x, i64 n, float c) {
    GRID_STRIDE(i, n) dst[i] = c * (float)tanh((double)(x[i] / c));
}

extern "C" __global__ void activation(float* dst, const float* x, i64 n, int act) {
    GRID_STRIDE(i, n) dst[i] = activate(x[i], act);
}

extern "C" __global__ void glu(float* dst, const float* g, const float* u, i64 n, int act) {
    GRID_STRIDE(i, n) dst[i] = activate(g[i], act) * u[i];
}

// columns copies columns [from, from+dc) of each xc-wide row of x into dst.
extern "C" __global__ void columns(float* dst, const float* x, i64 rows, int dc, int xc, int from) {
    GRID_STRIDE(i, rows * dc) {
        i64 r = i / dc;
        int c = (int)(i - r * dc);
        dst[i] = x[r * xc + from + c];
    }
}
