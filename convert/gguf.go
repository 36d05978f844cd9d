// Package convert writes models in quantized forms: GGUF files that
// llama.cpp loads (ToGGUF) and MLX affine-quantized directories (ToMLX). It
// reads a Hugging Face model directory (safetensors of any float dtype) or
// a GGUF file, and streams one tensor at a time, so memory stays bounded by
// the largest tensor rather than the model.
package convert

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/gguf"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
)

// GGUFOptions configure ToGGUF.
type GGUFOptions struct {
	// Type is the file type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
	// q2_k, q3_k_m, q4_k_m, q5_k_m or q6_k (see FileTypes).
	Type string
	// Name is general.name; empty keeps the source's name, or uses the
	// source's base name.
	Name string
	// Threads quantize each tensor's rows in parallel (0: GOMAXPROCS).
	Threads int
	// Progress, when set, is called after each tensor is written.
	Progress func(Progress)
}

// Progress reports one written tensor.
type Progress struct {
	Index, Count int    // tensors written so far (1-based), of Count
	Name         string // GGUF or Hugging Face name
	Type         string // the type written ("q4_k"), "" for MLX tensors
	Written      int64  // bytes of tensor data written so far
}

// Result summarises a conversion.
type Result struct {
	Path      string
	Tensors   int
	InBytes   int64 // tensor data of the source
	OutBytes  int64 // tensor data written
	FileBytes int64
	Types     map[compute.DType]int // GGUF: tensors per type
	Quantized int                   // MLX: weights quantized (the rest pass through)
	Elapsed   time.Duration
	Warnings  []string
}

// input is a model being converted: its config and tensors under Hugging
// Face names.
type input struct {
	cfg      *model.Config
	src      model.Source
	names    []string // HF tensor names, in source order
	permuted bool     // Q/K rows already in llama.cpp's order
	kv       []gguf.KV
	name     string
	inBytes  int64
	warnings []string
	close    func() error
}

// openInput opens a Hugging Face directory or a GGUF file.
func openInput(path string) (*input, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return openDir(path)
	}
	return openGGUFInput(path)
}

// stSource adapts a safetensors directory to model.Source. Tensors of a
// dtype lem cannot read come back with an unknown dtype, which the
// converter reports by name.
type stSource struct{ d *safetensors.Dir }

func (s stSource) Lookup(name string) (model.Stored, bool) {
	t, ok := s.d.Tensor(name)
	if !ok {
		return model.Stored{}, false
	}
	dt := compute.DType(255)
	switch t.DType {
	case safetensors.F32:
		dt = compute.F32
	case safetensors.F16:
		dt = compute.F16
	case safetensors.BF16:
		dt = compute.BF16
	}
	return model.Stored{DType: dt, Shape: t.Shape, Data: t.Data}, true
}

func openDir(dir string) (*input, error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg.Quantization != nil {
		return nil, fmt.Errorf("%s: the weights are already quantized (%s); convert from the float checkpoint", dir, cmp.Or(cfg.Quantization.Method, "mlx"))
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	in := &input{cfg: cfg, src: stSource{st}, close: st.Close, name: filepath.Base(filepath.Clean(dir))}
	for _, n := range st.Names() {
		if strings.HasSuffix(n, "rotary_emb.inv_freq") {
			continue // recomputed from the config
		}
		in.names = append(in.names, n)
		t, _ := st.Tensor(n)
		in.inBytes += int64(len(t.Data))
	}
	return in, nil
}

func openGGUFInput(path string) (*input, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	g, err := model.ReadGGUF(f, model.GGUFOptions{})
	if err != nil {
		f.Close()
		return nil, err
	}
	in := &input{
		cfg: g.Config, src: g, names: g.Names(), permuted: g.Permuted, close: f.Close,
		name: strings.TrimSuffix(filepath.Base(path), ".gguf"),
	}
	if n, ok := f.String("general.name"); ok && n != "" {
		in.name = n
	}
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			in.kv = append(in.kv, kv)
		}
	}
	in.inBytes = f.DataSize()
	return in, nil
}

// plannedTensor is one tensor of the output.
type plannedTensor struct {
	hf    string // source name; "" for an extra tensor
	name  string // GGUF name
	dims  []int64
	typ   compute.DType
	heads int // permute rows over this many heads (0: no)
	shift float32
	// encode maps each row of values (in the stored shape) before it is
	// written; nil keeps them.
	encode func(row []float32, r int)
	extra  []float32 // data of an extra tensor
	order  [3]int
}

// ToGGUF converts the model at src (a Hugging Face directory or a GGUF
// file) to a GGUF file at dst, which llama.cpp loads: general.*, the
// architecture's hyperparameters, the tokenizer and chat templates, and the
// tensors under llama.cpp's names and in the types opts.Type's recipe
// picks. The file is written to a temporary name beside dst and renamed
// when complete.
func ToGGUF(src, dst string, opts GGUFOptions) (*Result, error) {
	start := time.Now()
	ft, err := lookupFileType(opts.Type)
	if err != nil {
		return nil, err
	}
	in, err := openInput(src)
	if err != nil {
		return nil, err
	}
	defer in.close()
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		kv, err := TokenizerKV(src, in.cfg.VocabSize, in.cfg)
		if err != nil {
			return nil, err
		}
		if kv == nil {
			in.warnings = append(in.warnings, "no tokenizer.json: the GGUF file has no vocabulary")
		}
		in.kv = kv
	}
	layout, err := model.NewGGUFLayout(in.cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	in.warnings = append(in.warnings, layout.Warnings...)
	if st, err := os.Stat(src); err == nil && st.IsDir() && model.IsEncoder(in.cfg.ModelType) {
		pool, err := encoderPooling(src)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(in.names, func(n string) bool { return strings.HasPrefix(n, "classifier.") }) {
			pool = model.GGUFPoolRank // a cross-encoder: its score
		}
		layout.KV = append(layout.KV, gguf.KV{Key: layout.Arch + ".pooling_type", Value: gguf.Uint32(pool)})
	}
	if in.src, in.names, err = layout.Source(in.src, in.names); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	plan, err := planTensors(in, layout, ft)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}

	w := gguf.NewWriter()
	set := func(key string, v gguf.Value) {
		if err == nil {
			err = w.SetKV(key, v)
		}
	}
	set(gguf.KeyArchitecture, gguf.String(layout.Arch))
	set("general.type", gguf.String("model"))
	set("general.name", gguf.String(cmp.Or(opts.Name, in.name)))
	set("general.file_type", gguf.Uint32(ft.id))
	set("general.quantization_version", gguf.Uint32(2))
	for _, kv := range layout.KV {
		set(kv.Key, kv.Value)
	}
	for _, kv := range in.kv {
		set(kv.Key, kv.Value)
	}
	for _, t := range plan {
		if err == nil {
			gt, _ := quant.ToGGUF(t.typ)
			err = w.AddTensorInfo(t.name, gt, t.dims)
		}
	}
	if err != nil {
		return nil, err
	}

	res := &Result{Path: dst, Tensors: len(plan), InBytes: in.inBytes, Types: map[compute.DType]int{}, Warnings: in.warnings}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 4<<20)
	if err := w.WriteHeader(bw); err != nil {
		return nil, err
	}
	threads := cmp.Or(opts.Threads, runtime.GOMAXPROCS(0))
	for i, t := range plan {
		data, err := produce(in, t, threads)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %w", src, cmp.Or(t.hf, t.name), err)
		}
		if err := w.WriteTensorData(t.name, data); err != nil {
			return nil, err
		}
		res.OutBytes += int64(len(data))
		res.Types[t.typ]++
		if opts.Progress != nil {
			opts.Progress(Progress{Index: i + 1, Count: len(plan), Name: t.name, Type: t.typ.String(), Written: res.OutBytes})
		}
	}
	if err := w.Finish(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("write %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return nil, err
	}
	ok = true
	res.FileBytes = w.Written()
	res.Elapsed = time.Since(start)
	return res, nil
}

// planTensors names, orders and types every output tensor, before anything
// is written: unknown tensors and unreadable dtypes are reported here.
func planTensors(in *input, layout *model.GGUFLayout, ft fileType) ([]plannedTensor, error) {
	var plan []plannedTensor
	var unknown, badType []string
	for i, hf := range in.names {
		name, ok := layout.TensorName(hf)
		if !ok {
			if hf == "lm_head.weight" || layout.Drops(hf) { // tied to the embeddings, or unused
				continue
			}
			unknown = append(unknown, hf)
			continue
		}
		s, _ := describe(in.src, hf)
		if !s.DType.Known() || s.DType == compute.I32 {
			badType = append(badType, hf)
			continue
		}
		shape := layout.StoredShape(hf, s.Shape)
		dims := make([]int64, len(shape))
		for j, d := range shape {
			dims[len(shape)-1-j] = int64(d)
		}
		t := plannedTensor{hf: hf, name: name, dims: dims, encode: layout.Encode(hf)}
		if !in.permuted {
			t.heads = layout.PermuteHeads(hf)
		}
		t.shift = layout.NormShift(hf)
		t.order = tensorOrder(name, i)
		plan = append(plan, t)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("tensors with no place in a %s GGUF file: %s", layout.Arch, strings.Join(unknown, ", "))
	}
	if len(badType) > 0 {
		return nil, fmt.Errorf("tensors of a type that cannot be converted: %s", strings.Join(badType, ", "))
	}
	for _, e := range layout.Extra {
		plan = append(plan, plannedTensor{name: e.Name, dims: e.Dims, extra: e.Data, order: tensorOrder(e.Name, 0)})
	}
	slices.SortStableFunc(plan, func(a, b plannedTensor) int {
		return cmp.Or(cmp.Compare(a.order[0], b.order[0]), cmp.Compare(a.order[1], b.order[1]), cmp.Compare(a.order[2], b.order[2]))
	})
	names := make([]string, len(plan))
	for i, t := range plan {
		names[i] = t.name
	}
	r := newRecipe(ft, layout.Arch, in.cfg, names)
	for i := range plan {
		plan[i].typ = r.pick(plan[i].name, plan[i].dims)
		if plan[i].extra != nil {
			plan[i].typ = compute.F32
		}
	}
	return plan, nil
}

// describe returns a tensor's type and shape, without building it when the
// source can say so (composite tensors of a layout's Source).
func describe(src model.Source, name string) (model.Stored, bool) {
	if d, ok := src.(interface {
		Describe(string) (model.Stored, bool)
	}); ok {
		return d.Describe(name)
	}
	return src.Lookup(name)
}

// tensorOrder sorts tensors as llama.cpp's converter writes them: the token
// embedding and rope tables, then the layers in order, then the output.
func tensorOrder(name string, idx int) [3]int {
	switch {
	case name == "token_embd.weight":
		return [3]int{0, 0, idx}
	case strings.HasPrefix(name, "rope_"):
		return [3]int{1, 0, idx}
	case strings.HasPrefix(name, "blk."):
		return [3]int{2, layerOf(name), idx}
	case name == "output_norm.weight":
		return [3]int{3, 0, idx}
	}
	return [3]int{4, 0, idx}
}

// produce returns the output bytes of one tensor.
func produce(in *input, t plannedTensor, threads int) ([]byte, error) {
	if t.extra != nil {
		out := make([]byte, 4*len(t.extra))
		return out, quant.Quantize(out, t.extra, compute.F32)
	}
	s, ok := in.src.Lookup(t.hf)
	if !ok {
		return nil, errors.New("missing")
	}
	// Rows and columns of the stored shape (a layout may store a tensor
	// with another shape of the same elements).
	rows, cols := 1, 1
	if len(t.dims) > 0 {
		cols = int(t.dims[0])
		for _, d := range t.dims[1:] {
			rows *= int(d)
		}
	}
	// Same type and nothing to change: copy the bytes (rows are moved whole,
	// so a permutation needs no decoding either).
	if s.DType == t.typ && t.shift == 0 && t.encode == nil {
		if t.heads == 0 {
			return s.Data, nil
		}
		rb, err := s.DType.RowBytes(cols)
		if err != nil {
			return nil, err
		}
		return model.PermuteRows(s.Data, rows, rb, t.heads, false)
	}
	inRow, err := s.DType.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if len(s.Data) != rows*inRow {
		return nil, fmt.Errorf("%d bytes of data for shape %v of %s", len(s.Data), s.Shape, s.DType)
	}
	if s.DType.Quantized() && cols != s.Shape[len(s.Shape)-1] {
		return nil, fmt.Errorf("cannot store %s rows of %d elements as rows of %d", s.DType, s.Shape[len(s.Shape)-1], cols)
	}
	outRow, err := t.typ.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	out := make([]byte, rows*outRow)
	err = parallelRows(rows, threads, func(lo, hi int) error {
		buf := make([]float32, cols)
		for r := lo; r < hi; r++ {
			if err := quant.Dequantize(buf, s.Data[r*inRow:(r+1)*inRow], s.DType); err != nil {
				return err
			}
			if t.shift != 0 {
				for i, v := range buf {
					buf[i] = v + t.shift
				}
			}
			if t.encode != nil {
				t.encode(buf, r)
			}
			if err := quant.Quantize(out[r*outRow:(r+1)*outRow], buf, t.typ); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if t.heads > 0 {
		return model.PermuteRows(out, rows, outRow, t.heads, false)
	}
	return out, nil
}

// parallelRows runs fn over [0, rows) in contiguous ranges on up to
// threads goroutines and returns the first error.
func parallelRows(rows, threads int, fn func(lo, hi int) error) error {
	n := min(threads, rows)
	if n <= 1 {
		return fn(0, rows)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		lo, hi := i*rows/n, (i+1)*rows/n
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(lo, hi)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// encoderPooling returns the <arch>.pooling_type of an encoder directory,
// from its sentence-transformers Pooling module (modules.json and that
// module's config.json): CLS, mean or last token. A directory without one
// gets mean pooling, as lem serves such a model.
func encoderPooling(dir string) (uint32, error) {
	data, err := os.ReadFile(filepath.Join(dir, "modules.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return model.GGUFPoolMean, nil
	}
	if err != nil {
		return 0, err
	}
	var modules []struct{ Type, Path string }
	if err := json.Unmarshal(data, &modules); err != nil {
		return 0, fmt.Errorf("%s: modules.json: %w", dir, err)
	}
	for _, m := range modules {
		if !strings.HasSuffix(m.Type, ".Pooling") {
			continue
		}
		path := filepath.Join(dir, m.Path, "config.json")
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		var c struct {
			CLS  bool `json:"pooling_mode_cls_token"`
			Mean bool `json:"pooling_mode_mean_tokens"`
			Last bool `json:"pooling_mode_lasttoken"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		switch {
		case c.CLS:
			return model.GGUFPoolCLS, nil
		case c.Last:
			return model.GGUFPoolLast, nil
		case c.Mean:
			return model.GGUFPoolMean, nil
		}
		return 0, fmt.Errorf("%s: a pooling mode other than CLS, mean or last token has no GGUF form", path)
	}
	return model.GGUFPoolMean, nil
}
