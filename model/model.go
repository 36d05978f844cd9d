package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lem-engine/lem/compute"
)

// Stored is a tensor as a model file holds it: its type, shape and bytes.
type Stored struct {
	DType compute.DType
	Shape []int
	Data  []byte
}

// Source looks up stored tensors by their Hugging Face name.
type Source interface {
	Lookup(name string) (Stored, bool)
}

// Model is an architecture loaded onto a backend.
type Model interface {
	// Config returns the configuration the model was built from.
	Config() *Config
	// NewState allocates the per-sequence state (KV caches, recurrent
	// state) for up to ctx positions.
	NewState(ctx int) State
	// Forward runs the tokens ids (an I32 tensor of n ids) at positions pos
	// (an I32 tensor; consecutive, starting at the number of positions the
	// state already holds). It writes logits for the last row into
	// logits[1, vocab], or for every row into logits[n, vocab] when logits
	// has n rows.
	//
	// logits may be nil when the caller reads no logits of this call (a
	// prefill chunk that is not the last): the state is updated as
	// always, and the model may skip work whose only product is this
	// chunk's output, such as the output projection or layers that own no
	// cache.
	Forward(st State, ids, pos, logits *compute.Tensor)
}

// State is the per-sequence memory of a model: KV caches and any recurrent
// state. It is owned by one sequence at a time.
type State interface {
	// Capacity is the number of positions the state can hold.
	Capacity() int
	// CanRewind reports whether a state holding length positions can drop
	// back to its first n positions and continue from there. Full caches
	// always can; a sliding-window ring cannot once newer positions have
	// overwritten ones the continuation would attend to.
	CanRewind(n, length int) bool
	// Memory returns the bytes the state holds on its backend.
	Memory() StateMemory
}

// StateMemory is the memory a State holds, in bytes, not counting scratch
// buffers for activations.
type StateMemory struct {
	// KV is the key and value caches (sliding-window rings at their
	// window, and their snapshots where a KV-shared layer reads them).
	KV int64
	// Recurrent is the recurrent tensors: delta-rule and SSM states,
	// short-convolution windows.
	Recurrent int64
	// Checkpoints is the copies of the recurrent tensors kept to restore a
	// shorter prefix (see Recurrent), those in use and those kept for
	// reuse.
	Checkpoints int64
}

// Total returns the sum of the parts.
func (m StateMemory) Total() int64 { return m.KV + m.Recurrent + m.Checkpoints }

// tensorBytes returns the size of the tensors, nil ones counting 0.
func tensorBytes(ts ...*compute.Tensor) int64 {
	var n int64
	for _, t := range ts {
		if t == nil {
			continue
		}
		if rb, err := t.DType.RowBytes(t.Cols()); err == nil {
			n += int64(rb) * int64(t.Rows())
		}
	}
	return n
}

// cacheBytes returns the size of the caches, nil ones counting 0.
func cacheBytes(cs ...*compute.KVCache) int64 {
	var n int64
	for _, c := range cs {
		if c != nil {
			n += tensorBytes(c.K, c.V)
		}
	}
	return n
}

// Recurrent is implemented by states with recurrent parts (a delta-rule or
// SSM state, the window of a short convolution): they fold each position in
// and cannot drop it again, so they cannot rewind position by position.
// Instead the engine records checkpoints at prefill chunk boundaries and
// rewinds to the nearest one. CanRewind is not consulted for such states.
type Recurrent interface {
	// Checkpoint records the state as it is after length positions. A
	// state keeps a bounded number of recent checkpoints.
	Checkpoint(length int)
	// Restore returns the state to the latest checkpoint at or before n
	// that every layer can continue from (attention rings included),
	// drops later checkpoints, and returns its length. 0 means the initial
	// state: recurrent parts zeroed.
	Restore(n int) int
	// Advance records that n more positions were folded in by a replay of
	// a recorded decode step (compute.Graph), which repeats Forward's
	// device operations but not its bookkeeping on the host.
	Advance(n int)
}

// LoadFunc builds a model of one architecture from its config and tensors.
type LoadFunc func(cfg *Config, src Source, b compute.Backend) (Model, error)

// Load builds the model that cfg describes.
func Load(cfg *Config, src Source, b compute.Backend) (Model, error) {
	m, _, err := LoadReads(cfg, src, b)
	return m, err
}

// LoadReads is Load that also accounts what the model reads of its weights
// per decoded token.
func LoadReads(cfg *Config, src Source, b compute.Backend) (Model, WeightReads, error) {
	return loadReads(cfg, src, b, nil, 0)
}

// loadReads is LoadReads telling progress, when not nil, of the bytes
// handed to the backend of total: a tensor counts once the loader asks for
// the next, and all of them once the model is loaded.
func loadReads(cfg *Config, src Source, b compute.Backend, progress Progress, total int64) (Model, WeightReads, error) {
	a, ok := archByType[cfg.ModelType]
	if !ok {
		return nil, WeightReads{}, fmt.Errorf("unsupported model_type %q (supported: %s)", cfg.ModelType, strings.Join(Supported(), ", "))
	}
	if a.Load == nil {
		return nil, WeightReads{}, fmt.Errorf("model_type %q: %w; open it with model.OpenEncoderDir", cfg.ModelType, ErrEncoder)
	}
	log := newReadLog(src)
	log.progress, log.total = progress, total
	log.report()
	m, err := a.Load(cfg, log, b)
	if err != nil {
		return nil, WeightReads{}, err
	}
	if progress != nil {
		progress(total, total)
	}
	return m, log.reads(), nil
}

// loader fetches named tensors onto a backend, checking their shapes.
type loader struct {
	src Source
	b   compute.Backend
	err error
}

// weight loads a tensor in its stored dtype. A nil shape accepts any shape.
// After the first error every call returns nil; check l.err once at the end.
func (l *loader) weight(name string, shape ...int) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	s, ok := l.src.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("tensor %s is missing", name)
		return nil
	}
	if shape != nil && !slices.Equal(s.Shape, shape) {
		l.err = fmt.Errorf("tensor %s has shape %v, want %v", name, s.Shape, shape)
		return nil
	}
	t, err := l.b.Weight(s.DType, s.Shape, s.Data)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return t
}

// has reports whether the file holds a tensor. Asking does not count as
// loading it (see readLog).
func (l *loader) has(name string) bool {
	src := l.src
	if r := l.log(); r != nil {
		src = r.src
	}
	_, ok := src.Lookup(name)
	return ok
}

// vector loads a small tensor (a norm weight or a bias) widened to F32, so
// that elementwise operations need no conversion.
func (l *loader) vector(name string, n int) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	s, ok := l.src.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("tensor %s is missing", name)
		return nil
	}
	if !slices.Equal(s.Shape, []int{n}) {
		l.err = fmt.Errorf("tensor %s has shape %v, want [%d]", name, s.Shape, n)
		return nil
	}
	vals, err := toF32(s)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
		return nil
	}
	t := l.b.Alloc(compute.F32, n)
	l.b.Upload(t, vals)
	return t
}

// optionalVector is vector for tensors some checkpoints leave out.
func (l *loader) optionalVector(name string, n int) *compute.Tensor {
	if !l.has(name) {
		return nil
	}
	return l.vector(name, n)
}

// scalar reads a one-element tensor (a learned multiplier) as a float32.
func (l *loader) scalar(name string) (float32, error) {
	s, ok := l.src.Lookup(name)
	if !ok {
		return 0, fmt.Errorf("tensor %s is missing", name)
	}
	if n := shapeLen(s.Shape); n != 1 {
		return 0, fmt.Errorf("tensor %s has shape %v, want one value", name, s.Shape)
	}
	vals, err := toF32(s)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", name, err)
	}
	return vals[0], nil
}

func shapeLen(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// clipped loads a small matrix widened to F32, its values clamped to
// [-clip, clip] when clip is positive.
func (l *loader) clipped(name string, clip float32, shape ...int) *compute.Tensor {
	return l.widened(name, clip, shape, shape)
}

// reshaped loads a tensor of the given stored shape widened to F32 and
// reshaped to as (a convolution's [C, 1, K] weight as [C, K], say).
func (l *loader) reshaped(name string, shape []int, as ...int) *compute.Tensor {
	return l.widened(name, 0, shape, as)
}

// widened loads a tensor of the given stored shape as an F32 tensor of
// shape as, clamping its values to [-clip, clip] when clip is positive.
func (l *loader) widened(name string, clip float32, shape, as []int) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	s, ok := l.src.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("tensor %s is missing", name)
		return nil
	}
	if !slices.Equal(s.Shape, shape) {
		l.err = fmt.Errorf("tensor %s has shape %v, want %v", name, s.Shape, shape)
		return nil
	}
	vals, err := toF32(s)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
		return nil
	}
	if clip > 0 {
		for i, v := range vals {
			vals[i] = min(max(v, -clip), clip)
		}
	}
	t := l.b.Alloc(compute.F32, as...)
	l.b.Upload(t, vals)
	return t
}

// rows loads the listed rows of a stored matrix of the given shape, in that
// order, as a new tensor in the stored dtype: how fused projections are
// split or regrouped at load time.
func (l *loader) rows(name string, shape []int, order []int) *compute.Tensor {
	if l.err != nil {
		return nil
	}
	s, ok := l.src.Lookup(name)
	if !ok {
		l.err = fmt.Errorf("tensor %s is missing", name)
		return nil
	}
	if !slices.Equal(s.Shape, shape) || len(shape) != 2 {
		l.err = fmt.Errorf("tensor %s has shape %v, want %v", name, s.Shape, shape)
		return nil
	}
	rb, err := s.DType.RowBytes(shape[1])
	if err != nil || len(s.Data) != shape[0]*rb {
		l.err = fmt.Errorf("tensor %s: %d bytes do not hold %v %s values", name, len(s.Data), shape, s.DType)
		return nil
	}
	data := make([]byte, 0, len(order)*rb)
	for _, r := range order {
		data = append(data, s.Data[r*rb:(r+1)*rb]...)
	}
	t, err := l.b.Weight(s.DType, []int{len(order), shape[1]}, data)
	if err != nil {
		l.err = fmt.Errorf("tensor %s: %w", name, err)
	}
	return t
}
