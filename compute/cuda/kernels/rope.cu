// Rotary position embedding, positions read from the device.

// rope rotates the first dims values of each of heads heads of row
// blockIdx.x of x (cols wide) by pos[row]·invf[j]; inter selects adjacent
// pairs instead of the half split. cos and sin are multiplied by scale.
extern "C" __global__ void rope(float* x, const int* pos, const float* invf, int heads, int cols, int dims, float scale, int inter) {
    pdl_launch();
    pdl_wait();
    int half = dims / 2, hd = cols / heads;
    float p = (float)pos[blockIdx.x];
    float* row = x + (i64)blockIdx.x * cols;
    for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
        int h = t / half, j = t - h * half;
        float a = p * invf[j];
        float c = (float)cos((double)a) * scale, s = (float)sin((double)a) * scale;
        float* v = row + h * hd;
        int ia = inter ? 2 * j : j, ic = inter ? 2 * j + 1 : j + half;
        float x0 = v[ia], x1 = v[ic];
        v[ia] = x0 * c - x1 * s;
        v[ic] = x1 * c + x0 * s;
    }
}
