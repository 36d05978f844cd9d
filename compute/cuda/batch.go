package cuda

// Batched decode products. A step of a batched server multiplies the rows
// of every running sequence (a few to a few dozen) by each weight. Up to 4
// rows the decode kernels (gemv, qgemv) read each weight row once for all
// of them; from 5 rows up to a bound the batched kernels (gemv_*_8,
// qgemv_*_8) take the rows in groups of 8, each group reading the weight
// once, the groups of one range of weight rows running side by side so
// that all but the first find the bytes in L2. Beyond the bound the
// prefill path takes over: the tensor cores on f16 and bf16 (f32
// activations rounded to the weight's type), quantized weights widened to
// f16 first.

// gemvBatch is the most rows of a float (f32, f16, bf16) product that run
// on gemv_*_8 rather than the tensor cores.
const gemvBatch = 16

// qgemvBatch is the most rows of a quantized product that run on
// qgemv_*_8 (activations quantized to int8, as for n ≤ 4) rather than
// widening the weight to f16 for the tensor cores.
const qgemvBatch = 32
