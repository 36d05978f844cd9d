package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/mmap"
	"github.com/lem-engine/lem/safetensors"
)

// MLX affine packs. mlx-lm stores a quantized linear layer or embedding
// as three tensors, NAME.weight (U32 [out, in·bits/32], the packed
// codes), NAME.scales and NAME.biases ([out, in/group], in the model's
// float type), with bits and the group size in config.json's
// "quantization" block, which may override them per module path (or leave
// a module unquantized). mlxSource shows such a directory to the
// architecture loaders as an ordinary one: NAME.weight looks up as one
// [out, in] tensor of the MLX affine dtype (compute.MLXAffine) that holds
// the three repacked into one block per group, so every loader and
// backend operation sees one tensor per weight. Tensors MLX leaves
// unquantized (norms, biases, odd shapes) pass through unchanged.
//
// Memory: each quantized weight is repacked once, when the loader first
// looks it up, into anonymous memory (transparent huge pages where the
// kernel allows) of the same size as its three tensors in the file; the
// mapped pages of the file are read once and never again, so they stay
// as evictable page cache. Resident memory is about the file size. (With
// --no-mmap the file itself is read into memory as well, so it doubles.)

// mlxPack is a quantized weight of an MLX pack, checked against its
// config.
type mlxPack struct {
	dt                    compute.DType
	rows, cols            int
	codes, scales, biases safetensors.Tensor
}

// mlxSource is a Source over an MLX affine pack.
type mlxSource struct {
	safetensorsSource
	packs  map[string]*mlxPack // by weight name
	stored map[string]Stored   // weights repacked so far
	bufs   [][]byte            // their memory
}

// newMLXSource checks every quantized tensor of d against q (nil when
// config.json has no quantization block) before anything is repacked.
// Errors name the tensor.
func newMLXSource(d *safetensors.Dir, q *Quantization) (*mlxSource, error) {
	s := &mlxSource{safetensorsSource: safetensorsSource{d}, packs: map[string]*mlxPack{}, stored: map[string]Stored{}}
	for _, name := range d.Names() {
		t, _ := d.Tensor(name)
		module, ok := strings.CutSuffix(name, ".scales")
		if !ok {
			// A packed weight without scales would load as a matrix of
			// integers.
			if base, ok := strings.CutSuffix(name, ".weight"); ok && t.DType == safetensors.U32 {
				if _, ok := d.Tensor(base + ".scales"); !ok {
					return nil, fmt.Errorf("tensor %s: packed U32 codes without %s.scales", name, base)
				}
			}
			continue
		}
		p, err := planMLX(d, q, module)
		if err != nil {
			return nil, err
		}
		s.packs[module+".weight"] = p
	}
	return s, nil
}

// planMLX checks the quantized weight module.weight.
func planMLX(d *safetensors.Dir, q *Quantization, module string) (*mlxPack, error) {
	name := module + ".weight"
	w, ok := d.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s.scales has no %s", module, name)
	}
	sc, _ := d.Tensor(module + ".scales")
	bi, ok := d.Tensor(module + ".biases")
	if !ok {
		return nil, fmt.Errorf("tensor %s: quantized without %s.biases (only MLX's affine mode is supported)", name, module)
	}
	if q == nil || q.Method != "" {
		return nil, fmt.Errorf("tensor %s: MLX scales and biases, but config.json has no MLX \"quantization\" block", name)
	}
	p, ok := q.For(module)
	switch {
	case !ok:
		return nil, fmt.Errorf("tensor %s: quantized, but config.json's quantization block marks %s unquantized", name, module)
	case p.Mode != "" && p.Mode != "affine":
		return nil, fmt.Errorf("tensor %s: MLX quantization mode %q is not supported (affine only)", name, p.Mode)
	case w.DType != safetensors.U32 || len(w.Shape) != 2:
		return nil, fmt.Errorf("tensor %s: packed codes of type %s and shape %v, want U32 [out, in·bits/32]", name, w.DType, w.Shape)
	}
	var scale compute.DType
	switch sc.DType {
	case safetensors.BF16:
		scale = compute.BF16
	case safetensors.F16:
		scale = compute.F16
	case safetensors.F32:
		scale = compute.F32
	default:
		return nil, fmt.Errorf("tensor %s.scales: type %s, want a float type", module, sc.DType)
	}
	dt, err := compute.MLXAffine(p.Bits, p.GroupSize, scale)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	rows, words := w.Shape[0], w.Shape[1]
	if words*32%p.Bits != 0 {
		return nil, fmt.Errorf("tensor %s: %d words per row do not hold a whole number of %d-bit codes", name, words, p.Bits)
	}
	cols := words * 32 / p.Bits
	if cols%p.GroupSize != 0 {
		return nil, fmt.Errorf("tensor %s: input dimension %d (%d words of %d-bit codes) is not a whole number of groups of %d", name, cols, words, p.Bits, p.GroupSize)
	}
	want := []int{rows, cols / p.GroupSize}
	if !slices.Equal(sc.Shape, want) {
		return nil, fmt.Errorf("tensor %s.scales has shape %v, want %v for %s %v at %d bits in groups of %d", module, sc.Shape, want, name, w.Shape, p.Bits, p.GroupSize)
	}
	if bi.DType != sc.DType || !slices.Equal(bi.Shape, want) {
		return nil, fmt.Errorf("tensor %s.biases is %s %v, want %s %v like the scales", module, bi.DType, bi.Shape, sc.DType, want)
	}
	return &mlxPack{dt: dt, rows: rows, cols: cols, codes: w, scales: sc, biases: bi}, nil
}

// Lookup implements Source.
func (s *mlxSource) Lookup(name string) (Stored, bool) {
	p, ok := s.packs[name]
	if !ok {
		return s.safetensorsSource.Lookup(name)
	}
	if st, ok := s.stored[name]; ok {
		return st, true
	}
	rb, _ := p.dt.RowBytes(p.cols)
	size := p.rows * rb
	buf, err := mmap.Anon(max(size, 1))
	if err == nil {
		s.bufs = append(s.bufs, buf)
	} else {
		buf = make([]byte, size) // no address space left for a mapping
	}
	buf = buf[:size]
	// planMLX checked every length MLXBlocks checks.
	if err := quant.MLXBlocks(buf, p.dt, p.rows, p.cols, p.codes.Data, p.scales.Data, p.biases.Data); err != nil {
		panic(fmt.Sprintf("model: tensor %s: %v", name, err))
	}
	st := Stored{DType: p.dt, Shape: []int{p.rows, p.cols}, Data: buf}
	s.stored[name] = st
	return st, true
}

// release frees the repacked weights. Tensors made from them must not be
// used afterwards.
func (s *mlxSource) release() error {
	var first error
	for _, b := range s.bufs {
		if err := mmap.Free(b); err != nil && first == nil {
			first = err
		}
	}
	s.bufs, s.stored = nil, nil
	return first
}
