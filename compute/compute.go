// Package compute defines the backend-neutral tensor operations that model
// architectures are written against. A Backend (compute/cpu, compute/cuda)
// owns the memory of its tensors and implements every operation on batches of
// rows: prefill and decode are the same calls with different row counts.
//
// Conventions: activations are float32 matrices of shape [rows, cols] stored
// row-major; weights keep the dtype they were stored in and have the shape
// [out, in], so MatMul computes x·Wᵀ. Positions of the rows being processed
// live in an I32 tensor on the backend, so that a captured decode step can be
// replayed with new positions.
package compute

import (
	"fmt"
	"sync/atomic"
)

// DType is the storage type of a tensor's elements.
type DType uint8

// Storage types.
const (
	F32 DType = iota
	F16
	BF16
	I32

	// Block-quantized weight types, stored exactly as ggml lays out their
	// blocks (see package lem/compute/quant). Each block of BlockSize elements
	// takes BlockBytes bytes; a row is a whole number of blocks.
	Q8_0   // 32 elements: f16 scale, 32 int8
	Q4_0   // 32 elements: f16 scale, 16 bytes of 4-bit codes
	Q4_1   // 32 elements: f16 scale and min, 16 bytes of 4-bit codes
	Q5_0   // 32 elements: f16 scale, 4 bytes of high bits, 16 bytes of low nibbles
	Q5_1   // 32 elements: f16 scale and min, high bits, low nibbles
	Q2_K   // 256 elements: 2-bit codes, 4-bit sub-block scales and mins
	Q3_K   // 256 elements: 3-bit codes, 6-bit sub-block scales
	Q4_K   // 256 elements: 4-bit codes, 6-bit sub-block scales and mins
	Q5_K   // 256 elements: 5-bit codes, 6-bit sub-block scales and mins
	Q6_K   // 256 elements: 6-bit codes, 8-bit sub-block scales
	IQ4_NL // 32 elements: f16 scale, 4-bit indices into a non-linear table
	MXFP4  // 32 elements: E8M0 scale, 4-bit E2M1 codes

	// numBlockTypes ends the named types; the MLX affine types follow
	// (see MLXAffine).
	numBlockTypes
	numDTypes = numBlockTypes + DType(len(mlxBits)*len(mlxGroups)*len(mlxScales))
)

var dtypeNames = [...]string{
	F32: "f32", F16: "f16", BF16: "bf16", I32: "i32",
	Q8_0: "q8_0", Q4_0: "q4_0", Q4_1: "q4_1", Q5_0: "q5_0", Q5_1: "q5_1",
	Q2_K: "q2_k", Q3_K: "q3_k", Q4_K: "q4_k", Q5_K: "q5_k", Q6_K: "q6_k",
	IQ4_NL: "iq4_nl", MXFP4: "mxfp4",
}

// blockLayout is the block size in elements and bytes of each type.
var blockLayout = [numDTypes][2]int{
	F32: {1, 4}, F16: {1, 2}, BF16: {1, 2}, I32: {1, 4},
	Q8_0: {32, 34}, Q4_0: {32, 18}, Q4_1: {32, 20}, Q5_0: {32, 22}, Q5_1: {32, 24},
	Q2_K: {256, 84}, Q3_K: {256, 110}, Q4_K: {256, 144}, Q5_K: {256, 176}, Q6_K: {256, 210},
	IQ4_NL: {32, 18}, MXFP4: {32, 17},
}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	if bits, group, scale, ok := d.MLX(); ok {
		name := fmt.Sprintf("mlx%dg%d", bits, group)
		if scale != BF16 {
			name += scale.String()
		}
		return name
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size returns the size of one element in bytes for the element types (F32,
// F16, BF16, I32), and 0 for block-quantized types, whose elements have no
// whole size: use BlockSize, BlockBytes or RowBytes for those.
func (d DType) Size() int {
	switch {
	case d == F16 || d == BF16:
		return 2
	case d.Quantized():
		return 0
	default:
		return 4
	}
}

// Quantized reports whether d is a block-quantized type.
func (d DType) Quantized() bool { return d >= Q8_0 && d < numDTypes }

// Known reports whether d is one of the types defined here.
func (d DType) Known() bool { return d < numDTypes }

// BlockSize returns the number of elements one block of d holds: 1 for the
// element types, 32 or 256 for the ggml types, the group size for the MLX
// affine types, 0 for an unknown type.
func (d DType) BlockSize() int {
	if !d.Known() {
		return 0
	}
	return blockLayout[d][0]
}

// BlockBytes returns the size in bytes of one block of d (the element size
// for element types), or 0 for an unknown type.
func (d DType) BlockBytes() int {
	if !d.Known() {
		return 0
	}
	return blockLayout[d][1]
}

// RowBytes returns the size in bytes of n consecutive elements of type d. It
// fails when d is unknown or n is negative or not a whole number of blocks.
func (d DType) RowBytes(n int) (int, error) {
	bs, bb := d.BlockSize(), d.BlockBytes()
	switch {
	case bs == 0:
		return 0, fmt.Errorf("unknown dtype %s", d)
	case n < 0:
		return 0, fmt.Errorf("negative element count %d", n)
	case n%bs != 0:
		return 0, fmt.Errorf("%d elements of %s are not a whole number of %d-element blocks", n, d, bs)
	}
	return n / bs * bb, nil
}

// Tensor is a dense tensor owned by a backend. Buf holds the backend's
// storage and is opaque to architecture code.
type Tensor struct {
	DType DType
	Shape []int
	Buf   any
}

// Len returns the number of elements.
func (t *Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Rows returns the product of all dimensions but the last.
func (t *Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Len() / t.Shape[len(t.Shape)-1]
}

// Cols returns the last dimension.
func (t *Tensor) Cols() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[len(t.Shape)-1]
}

// Activation names an elementwise nonlinearity.
type Activation uint8

// Activations.
const (
	SiLU Activation = iota
	GELUTanh
	GELU
	ReLU
	// Sigmoid is σ(x) = 1 / (1 + e⁻ˣ); GLU with it gates a value by a
	// learned sigmoid (the output gate of Qwen3-Next's attention).
	Sigmoid
)

// ParseActivation maps a Hugging Face hidden_act name to an Activation.
func ParseActivation(name string) (Activation, error) {
	switch name {
	case "silu", "swish":
		return SiLU, nil
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_tanh":
		return GELUTanh, nil
	case "gelu":
		return GELU, nil
	case "relu":
		return ReLU, nil
	case "sigmoid":
		return Sigmoid, nil
	}
	return 0, fmt.Errorf("unsupported activation %q", name)
}

// Rope describes rotary position embedding for one attention layer type.
type Rope struct {
	// Dims is the number of leading dimensions of each head that rotate
	// (HeadDim for full rotary, less for partial rotary). Even.
	Dims int
	// InvFreq holds Dims/2 inverse frequencies.
	InvFreq []float32
	// Scale multiplies cos and sin (YaRN's attention factor); 1 otherwise.
	Scale float32
	// Interleaved rotates adjacent pairs (x0,x1),(x2,x3)… instead of the
	// Hugging Face half split (x_i, x_{i+Dims/2}).
	Interleaved bool
}

// Attention describes one attention call.
type Attention struct {
	Heads, KVHeads, HeadDim int
	// Scale multiplies q·k before the soft cap and softmax.
	Scale float32
	// SoftCap, when positive, applies cap·tanh(s/cap) to the scores.
	SoftCap float32
	// Window, when positive, lets a query at position p see keys at
	// positions p-Window+1 … p only.
	Window int
	// Sinks, when set, holds one learned logit per head that joins the
	// softmax denominator (gpt-oss).
	Sinks *Tensor
}

// KVCache holds the keys and values of one attention layer for one sequence.
// A cache with Ring set keeps only the last Capacity positions (a sliding
// window layer); otherwise it holds positions 0 … Capacity-1.
type KVCache struct {
	K, V     *Tensor // [Capacity, KVHeads*HeadDim]
	Capacity int
	Ring     bool
}

// Backend executes tensor operations. Operations may be asynchronous; Read
// synchronises. A backend is used by one goroutine at a time.
type Backend interface {
	// Name identifies the backend and device, for example "cpu (2 threads, avx512)".
	Name() string

	// Weight makes stored data (often a slice of a memory-mapped file) a
	// tensor on the backend, without widening it. The data must outlive the
	// tensor.
	Weight(dtype DType, shape []int, data []byte) (*Tensor, error)
	// Alloc returns a zeroed tensor of the given type and shape.
	Alloc(dtype DType, shape ...int) *Tensor
	// Free releases a tensor from Alloc.
	Free(t *Tensor)
	// Upload copies host float32 values into an F32 tensor.
	Upload(dst *Tensor, src []float32)
	// UploadInts copies host int32 values into an I32 tensor.
	UploadInts(dst *Tensor, src []int32)
	// Read copies an F32 tensor (the first len(dst) elements) to the host.
	Read(dst []float32, src *Tensor)
	// View returns rows [from, to) of a tensor without copying.
	View(t *Tensor, from, to int) *Tensor

	// Embed gathers rows of table (any float dtype) for the token ids.
	Embed(dst, table, ids *Tensor)
	// MatMul computes dst[n, m] = x[n, k] · w[m, k]ᵀ.
	MatMul(dst, x, w *Tensor)
	// Add computes dst = a + b; b may be one row broadcast over a's rows.
	Add(dst, a, b *Tensor)
	// Mul computes dst = a ⊙ b; b may be one row broadcast over a's rows.
	Mul(dst, a, b *Tensor)
	// Scale computes dst = x · s.
	Scale(dst, x *Tensor, s float32)
	// RMSNorm normalises each group of len(w) values of every row:
	// x / sqrt(mean(x²) + eps) · (w + offset). A weight shorter than the row
	// normalises each head separately (q/k norms). w may be nil (no weight).
	RMSNorm(dst, x, w *Tensor, eps, offset float32)
	// LayerNorm computes (x - mean) / sqrt(var + eps) · w + b per row; b may be nil.
	LayerNorm(dst, x, w, b *Tensor, eps float32)
	// Activate applies an activation elementwise.
	Activate(dst, x *Tensor, act Activation)
	// GLU computes dst = act(gate) ⊙ up.
	GLU(dst, gate, up *Tensor, act Activation)
	// SoftCap computes dst = cap · tanh(x / cap).
	SoftCap(dst, x *Tensor, cap float32)
	// Columns copies columns [from, to) of every row of x into dst.
	Columns(dst, x *Tensor, from int)
	// RoPE rotates each head of x (rows at positions pos) in place.
	RoPE(x, pos *Tensor, heads int, r *Rope)
	// Attend computes attention of q [n, Heads*HeadDim] at positions pos
	// over the cache and the new keys k and values v [n, KVHeads*HeadDim]
	// (causal), writes the result to dst [n, Heads*HeadDim], then stores k and
	// v in the cache. Positions are consecutive; pos[0] equals the number of
	// positions already in the cache.
	Attend(dst, q, k, v *Tensor, cache *KVCache, pos *Tensor, a *Attention)
	// NewKVCache allocates a cache of capacity positions of width kvDim.
	NewKVCache(capacity, kvDim int, ring bool) *KVCache
}

// Graph is a recorded sequence of operations that can be replayed.
type Graph interface {
	Launch()
	Close() error
}

// GraphCapturer is implemented by backends that can record the operations
// fn issues as a Graph (CUDA graphs), so that a decode step costs one launch.
// The tensors fn uses must stay allocated while the graph lives; values such
// as token ids and positions are passed through them.
type GraphCapturer interface {
	Capture(fn func()) (Graph, error)
}

// Interruptible is implemented by backends that can abandon work they
// were asked for, so that a caller can stop a long forward pass (a prefill
// chunk) between operations instead of waiting for its end.
type Interruptible interface {
	// SetInterrupt ties the operations issued from now on to stop: an
	// operation other than Alloc, Free, Upload, UploadInts, Read and View
	// may do nothing if stop is true when its turn comes (on an
	// asynchronous backend, when it would be launched); the expensive ones
	// (matrix products, attention, recurrences, experts) always are. What
	// they would have written is then undefined, caches and recurrent
	// state included, so the caller must drop the positions it was
	// computing. Read still synchronises. Once stop is set the skipped
	// operations are a suffix of those issued under it, in issue order.
	// SetInterrupt(nil) issues later operations unconditionally again.
	SetInterrupt(stop *atomic.Bool)
}

// ErrorReporter is implemented by asynchronous backends: Err returns the
// first failure of an operation since the backend was created.
type ErrorReporter interface {
	Err() error
}

// MLX affine packs. mlx-lm stores a quantized weight [out, in] as three
// tensors: the codes (U32 [out, in·bits/32], one little-endian bit stream
// per row, each element's code in the next bits bits, least significant
// first), and per group of consecutive elements along the input dimension
// a scale and a bias ([out, in/group], in the model's float type); an
// element is scale·code + bias. A Backend takes one tensor per weight, so
// a loader repacks the three into one matrix of an MLX affine type: one
// block per group, holding the group's scale and bias in their stored
// float type (2 bytes each for BF16 and F16, 4 for F32) followed by the
// group's group·bits/8 bytes of the row's bit stream, unchanged. A row is
// then a whole number of blocks like every block-quantized type, so
// splitting rows, Embed and Dequantize need nothing special, and the block
// is as large as the three tensors' share of it: memory stays equal to the
// file size. The dtype carries bits, group size and scale type, one value
// per combination, so a block's layout follows from its dtype alone.
var (
	mlxBits   = [...]int{2, 3, 4, 5, 6, 8}
	mlxGroups = [...]int{32, 64, 128}
	mlxScales = [...]DType{BF16, F16, F32}
)

// MLXAffine returns the dtype of MLX affine blocks of the given bits (2, 3,
// 4, 5, 6 or 8), group size (32, 64 or 128) and scale type (BF16, F16 or
// F32: the float type of the pack's scales and biases).
func MLXAffine(bits, group int, scale DType) (DType, error) {
	bi, gi, si := -1, -1, -1
	for i, b := range mlxBits {
		if b == bits {
			bi = i
		}
	}
	for i, g := range mlxGroups {
		if g == group {
			gi = i
		}
	}
	for i, s := range mlxScales {
		if s == scale {
			si = i
		}
	}
	switch {
	case bi < 0:
		return 0, fmt.Errorf("MLX affine quantization with %d bits: supported are 2, 3, 4, 5, 6 and 8", bits)
	case gi < 0:
		return 0, fmt.Errorf("MLX affine quantization with group size %d: supported are 32, 64 and 128", group)
	case si < 0:
		return 0, fmt.Errorf("MLX affine scales of type %s: supported are bf16, f16 and f32", scale)
	}
	return numBlockTypes + DType((si*len(mlxGroups)+gi)*len(mlxBits)+bi), nil
}

// MLX reports whether d is an MLX affine type and returns its bits, group
// size and scale type.
func (d DType) MLX() (bits, group int, scale DType, ok bool) {
	if d < numBlockTypes || d >= numDTypes {
		return 0, 0, 0, false
	}
	i := int(d - numBlockTypes)
	bits = mlxBits[i%len(mlxBits)]
	i /= len(mlxBits)
	group = mlxGroups[i%len(mlxGroups)]
	scale = mlxScales[i/len(mlxGroups)]
	return bits, group, scale, true
}

func init() {
	for d := numBlockTypes; d < numDTypes; d++ {
		bits, group, scale, _ := d.MLX()
		blockLayout[d] = [2]int{group, 2*scale.Size() + group*bits/8}
	}
}

// TokenFeeder is implemented by asynchronous backends that can hand a
// decode step's greedy token to the next step on the device, so that the
// next step is queued before the host has read the token (and the device
// does not wait for the host between steps).
type TokenFeeder interface {
	// Feed sets ids[0] (I32) to the column that a TopK with k = 1 wrote to
	// picked[1] and adds one to pos[0] (I32), in stream order.
	Feed(ids, pos, picked *Tensor)
	// FeedRows sets ids[r] (I32) to the column that a TopK with k = 1
	// wrote to picked[2r+1], for each row r < n, in stream order: the
	// inputs of a batched step whose rows each take the token the step
	// before picked for the same row.
	FeedRows(ids, picked *Tensor, n int)
	// ReadAsync starts copying src's first len(dst) values to the host in
	// stream order; wait blocks until they are in dst and returns the
	// backend's error, if any. dst must not be touched until then.
	ReadAsync(dst []float32, src *Tensor) (wait func() error)
}

// MaxTopK is the largest k a TokenPicker takes.
const MaxTopK = 256

// TokenPicker is implemented by backends that select the most likely tokens
// where the logits are, so that a decode step returns a few candidates to
// the host instead of the whole vocabulary.
type TokenPicker interface {
	// TopK writes, for each row of the F32 tensor x, its k largest values
	// (1 ≤ k ≤ MaxTopK) in descending order, the lower column first among
	// equal values, to dst[r, 0:k], and their columns, as float32 values
	// (exact below 2²⁴), to dst[r, k:2k]. dst is F32 with at least
	// rows·2k elements. Zeros of either sign are equal; x must hold no
	// NaN.
	TopK(dst, x *Tensor, k int)
}

// Bidirectional is implemented by backends that run the attention of
// encoder models (BERT, XLM-RoBERTa, ModernBERT), where every row of an
// input attends to the rows after it as well as those before it. Loading
// an encoder needs it.
type Bidirectional interface {
	// AttendAll computes attention of q [n, Heads*HeadDim] over the keys k
	// and values v [n, KVHeads*HeadDim] of the same n rows, one input, and
	// writes the result to dst [n, Heads*HeadDim]. Row i attends to every
	// row j or, when a.Window is positive, to the rows with
	// |i − j| < a.Window (a window symmetric about i). Nothing is cached.
	// SoftCap and Sinks apply as in Backend.Attend.
	AttendAll(dst, q, k, v *Tensor, a *Attention)
}
