package model

import (
	"fmt"

	"lem/compute"
	"lem/safetensors"
)

// safetensorsSource adapts a safetensors directory to Source.
type safetensorsSource struct{ d *safetensors.Dir }

func (s safetensorsSource) Lookup(name string) (Stored, bool) {
	t, ok := s.d.Tensor(name)
	if !ok {
		return Stored{}, false
	}
	var dt compute.DType
	switch t.DType {
	case safetensors.F32:
		dt = compute.F32
	case safetensors.F16:
		dt = compute.F16
	case safetensors.BF16:
		dt = compute.BF16
	case safetensors.I32:
		dt = compute.I32
	default:
		// Unsupported element types surface as a lookup of a tensor whose
		// dtype the backend rejects.
		return Stored{DType: 255, Shape: t.Shape, Data: t.Data}, true
	}
	return Stored{DType: dt, Shape: t.Shape, Data: t.Data}, true
}

// Loaded is a model with the files it reads from.
type Loaded struct {
	Model
	Dir string
	// Reads accounts what the model reads of its weights.
	Reads   WeightReads
	closers []func() error
}

// Close releases the model's files. The model must not be used afterwards.
func (l *Loaded) Close() error {
	var first error
	for _, c := range l.closers {
		if err := c(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// OpenDir loads a Hugging Face model directory (config.json and
// safetensors weights) onto a backend.
func OpenDir(dir string, b compute.Backend) (*Loaded, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if _, ok := registry[cfg.ModelType]; !ok {
		// Fail before mapping any weights.
		_, err := Load(cfg, nil, b)
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m, reads, err := LoadReads(cfg, safetensorsSource{st}, b)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &Loaded{Model: m, Dir: dir, Reads: reads, closers: []func() error{st.Close}}, nil
}
