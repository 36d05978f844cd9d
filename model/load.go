package model

import (
	"fmt"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/safetensors"
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
// safetensors weights) onto a backend. An MLX affine pack (mlx-lm's
// quantized layout, see mlx.go) loads with its quantized weights as MLX
// affine dtypes.
func OpenDir(dir string, b compute.Backend) (*Loaded, error) {
	return OpenDirWith(dir, b, OpenOptions{})
}

// OpenOptions configure OpenDirWith.
type OpenOptions struct {
	// NoMmap reads the weight files into memory (transparent huge pages
	// where the kernel allows) instead of mapping them: slower to start,
	// faster to decode on the CPU (lem's --no-mmap).
	NoMmap bool
	// Progress, when set, is told how loading goes: of the weight files'
	// bytes, those read into memory with NoMmap, else the bytes of the
	// tensors handed to the backend.
	Progress Progress
}

// OpenDirWith is OpenDir with options.
func OpenDirWith(dir string, b compute.Backend, opts OpenOptions) (*Loaded, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if a, ok := archByType[cfg.ModelType]; !ok || a.Load == nil {
		// Fail before mapping any weights.
		_, err := Load(cfg, nil, b)
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var (
		read      func(int64)
		readTotal int64
		progress  = opts.Progress
	)
	if opts.NoMmap && progress != nil {
		// Reading the files into memory is the slow part: it is the
		// progress, and handing the tensors over then says nothing more.
		files, err := safetensors.DirFiles(dir)
		if err != nil {
			return nil, err
		}
		read, readTotal = ReadProgress(progress, files)
		progress = nil
	}
	src, err := openSource(dir, cfg, opts, read)
	if err != nil {
		return nil, err
	}
	m, reads, err := loadReads(cfg, src, b, progress, src.bytes)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if read != nil {
		opts.Progress(readTotal, readTotal)
	}
	return &Loaded{Model: m, Dir: dir, Reads: reads, closers: []func() error{src.Close}}, nil
}

// DirSource is the tensors of a model directory as the architecture
// loaders see them: an MLX pack's quantized weights as one tensor of an
// MLX affine dtype each, under the weight's name.
type DirSource struct {
	Source
	names   []string
	closers []func() error
	bytes   int64 // of the files' tensors
}

// OpenSource opens the safetensors weights of a model directory.
func OpenSource(dir string) (*DirSource, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	return openSource(dir, cfg, OpenOptions{}, nil)
}

// openSource opens the weights of dir; read, when set, is told of the
// bytes NoMmap's reading adds.
func openSource(dir string, cfg *Config, opts OpenOptions, read func(int64)) (*DirSource, error) {
	st, err := safetensors.OpenDirWith(dir, safetensors.OpenOptions{NoMmap: opts.NoMmap, Read: read})
	if err != nil {
		return nil, err
	}
	d := &DirSource{Source: safetensorsSource{st}, closers: []func() error{st.Close}}
	for _, name := range st.Names() {
		if t, ok := st.Tensor(name); ok {
			d.bytes += int64(len(t.Data))
		}
	}
	if !isMLX(cfg, st) {
		d.names = st.Names()
		return d, nil
	}
	ms, err := newMLXSource(st, cfg.Quantization)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d.Source = ms
	d.closers = append(d.closers, ms.release)
	for _, name := range st.Names() {
		if m, ok := strings.CutSuffix(name, ".scales"); ok && ms.packs[m+".weight"] != nil {
			continue
		}
		if m, ok := strings.CutSuffix(name, ".biases"); ok && ms.packs[m+".weight"] != nil {
			continue
		}
		d.names = append(d.names, name)
	}
	return d, nil
}

// Info returns the dtype, shape and size in bytes a tensor loads with,
// without repacking it, and whether it exists.
func (d *DirSource) Info(name string) (dt compute.DType, shape []int, size int, ok bool) {
	if ms, isMLX := d.Source.(*mlxSource); isMLX {
		if p := ms.packs[name]; p != nil {
			rb, _ := p.dt.RowBytes(p.cols)
			return p.dt, []int{p.rows, p.cols}, p.rows * rb, true
		}
	}
	s, ok := d.Lookup(name)
	return s.DType, s.Shape, len(s.Data), ok
}

// Names returns the names of the tensors, in file order; an MLX pack's
// scales and biases are part of their weight and not listed.
func (d *DirSource) Names() []string { return d.names }

// Close releases the files and any repacked weights; tensors looked up
// must not be used afterwards.
func (d *DirSource) Close() error {
	var first error
	for _, c := range d.closers {
		if err := c(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// isMLX reports whether a directory holds an MLX pack: its config has
// MLX's quantization block, or a tensor has MLX scales beside U32 codes.
func isMLX(cfg *Config, d *safetensors.Dir) bool {
	if q := cfg.Quantization; q != nil && q.Method == "" {
		return true
	}
	for _, name := range d.Names() {
		if m, ok := strings.CutSuffix(name, ".scales"); ok {
			if w, ok := d.Tensor(m + ".weight"); ok && w.DType == safetensors.U32 {
				return true
			}
		}
	}
	return false
}
