package convert

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/internal/half"
	"github.com/lem-engine/lem/model"
	"github.com/lem-engine/lem/safetensors"
)

// MLXOptions configure ToMLX.
type MLXOptions struct {
	Bits      int // 2, 4 or 8
	GroupSize int // 32, 64 or 128 (0: 64)
	Threads   int // 0: GOMAXPROCS
	Progress  func(Progress)
}

// mlxCopied are the files of a model directory ToMLX copies unchanged.
var mlxCopied = []string{
	"tokenizer.json", "tokenizer.json.gz", "tokenizer_config.json", "special_tokens_map.json",
	"tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
	"chat_template.jinja", "chat_template.json", "generation_config.json",
}

// ToMLX writes the Hugging Face model directory src as an MLX
// affine-quantized directory dst, as mlx_lm.convert lays it out: every 2-D
// weight whose input dimension is a whole number of groups (embeddings
// included) becomes weight (U32 [out, in·bits/32], codes packed
// least-significant first), scales and biases ([out, in/group], in the
// weight's float type: BF16 for a BF16 model); everything else passes
// through unchanged. config.json gains a "quantization" block, and the
// tokenizer and chat template files are copied. The weights are streamed
// into one model.safetensors, one tensor at a time.
//
// Per group along the input dimension, with n = 2^bits − 1: the step is
// (max − min)/n (at least 1e-7); the edge of larger magnitude (the min, or
// else the max with a negative step) is anchored to an exact code
// q0 = round(edge/step); scale = edge/q0 and bias = edge (scale = step and
// bias = 0 when q0 is 0); codes = clamp(round((w − bias)/scale), 0, n). All
// in float32, rounding half away from zero.
func ToMLX(src, dst string, opts MLXOptions) (*Result, error) {
	start := time.Now()
	group := cmp.Or(opts.GroupSize, 64)
	switch {
	case opts.Bits != 2 && opts.Bits != 4 && opts.Bits != 8:
		return nil, fmt.Errorf("--bits %d: MLX affine packs hold 2, 4 or 8 bits", opts.Bits)
	case group != 32 && group != 64 && group != 128:
		return nil, fmt.Errorf("--group-size %d: MLX affine packs use groups of 32, 64 or 128", group)
	}
	if st, err := os.Stat(src); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s: MLX output needs a Hugging Face model directory as input", src)
	}
	in, err := openDir(src)
	if err != nil {
		return nil, err
	}
	defer in.close()
	cfgRaw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return nil, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return nil, fmt.Errorf("%s/config.json: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}

	// Plan every output tensor first, so the header can go out before the
	// data.
	type mlxTensor struct {
		hf         string
		quantized  bool
		dtype      safetensors.DType // of the pass-through tensor, or of scales and biases
		shape      []int
		rows, cols int
	}
	var plan []mlxTensor
	var header []stTensor
	var bad []string
	for _, name := range in.names {
		s, _ := in.src.Lookup(name)
		t, _ := in.src.(stSource).d.Tensor(name)
		mt := mlxTensor{hf: name, dtype: t.DType, shape: t.Shape}
		if len(t.Shape) == 2 && strings.HasSuffix(name, ".weight") && t.Shape[1]%group == 0 && t.Shape[1]*opts.Bits%32 == 0 {
			if !s.DType.Known() {
				bad = append(bad, name)
				continue
			}
			mt.quantized = true
			mt.rows, mt.cols = t.Shape[0], t.Shape[1]
			base := strings.TrimSuffix(name, ".weight")
			header = append(header,
				stTensor{name, safetensors.U32, []int{mt.rows, mt.cols * opts.Bits / 32}},
				stTensor{base + ".scales", mt.dtype, []int{mt.rows, mt.cols / group}},
				stTensor{base + ".biases", mt.dtype, []int{mt.rows, mt.cols / group}})
		} else {
			header = append(header, stTensor{name, t.DType, t.Shape})
		}
		plan = append(plan, mt)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: tensors of a type that cannot be quantized: %s", src, strings.Join(bad, ", "))
	}
	hdr, err := stHeader(header, map[string]string{"format": "mlx"})
	if err != nil {
		return nil, err
	}

	res := &Result{Path: dst, InBytes: in.inBytes}
	out := filepath.Join(dst, "model.safetensors")
	tmp, err := os.CreateTemp(dst, ".model.safetensors.tmp*")
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
	written := int64(0)
	write := func(b []byte) error {
		n, err := bw.Write(b)
		written += int64(n)
		return err
	}
	if err := write(hdr); err != nil {
		return nil, err
	}
	threads := cmp.Or(opts.Threads, runtime.GOMAXPROCS(0))
	for i, mt := range plan {
		s, _ := in.src.Lookup(mt.hf)
		if !mt.quantized {
			if err := write(s.Data); err != nil {
				return nil, err
			}
			res.OutBytes += int64(len(s.Data))
		} else {
			w, sc, bi, err := mlxQuantize(s, mt.rows, mt.cols, opts.Bits, group, mt.dtype, threads)
			if err != nil {
				return nil, fmt.Errorf("%s: tensor %s: %w", src, mt.hf, err)
			}
			for _, b := range [][]byte{w, sc, bi} {
				if err := write(b); err != nil {
					return nil, err
				}
				res.OutBytes += int64(len(b))
			}
			res.Quantized++
		}
		res.Tensors++
		if opts.Progress != nil {
			opts.Progress(Progress{Index: i + 1, Count: len(plan), Name: mt.hf, Written: res.OutBytes})
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("write %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return nil, err
	}
	ok = true

	// config.json with the quantization block, then the tokenizer files.
	q, _ := json.Marshal(map[string]int{"group_size": group, "bits": opts.Bits})
	cfg["quantization"] = q
	cfgOut, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), append(cfgOut, '\n'), 0o644); err != nil {
		return nil, err
	}
	for _, name := range mlxCopied {
		if err := copyFile(filepath.Join(src, name), filepath.Join(dst, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	res.FileBytes = written
	res.Elapsed = time.Since(start)
	return res, nil
}

// mlxQuantize quantizes a [rows, cols] tensor and returns the packed
// codes, scales and biases as safetensors data.
func mlxQuantize(s model.Stored, rows, cols, bits, group int, dt safetensors.DType, threads int) (w, scales, biases []byte, err error) {
	inRow, err := s.DType.RowBytes(cols)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(s.Data) != rows*inRow {
		return nil, nil, nil, fmt.Errorf("%d bytes of data for shape [%d %d] of %s", len(s.Data), rows, cols, s.DType)
	}
	wordsPerRow := cols * bits / 32
	groups := cols / group
	es := dt.Size()
	w = make([]byte, rows*wordsPerRow*4)
	scales = make([]byte, rows*groups*es)
	biases = make([]byte, rows*groups*es)
	err = parallelRows(rows, threads, func(lo, hi int) error {
		x := make([]float32, cols)
		codes := make([]uint32, group)
		for r := lo; r < hi; r++ {
			if err := quant.Dequantize(x, s.Data[r*inRow:(r+1)*inRow], s.DType); err != nil {
				return err
			}
			words := make([]uint32, wordsPerRow)
			for g := range groups {
				scale, bias := mlxGroup(x[g*group:(g+1)*group], bits, codes)
				for j, c := range codes {
					bit := (g*group + j) * bits
					words[bit/32] |= c << (bit % 32)
				}
				putFloat(scales[(r*groups+g)*es:], scale, dt)
				putFloat(biases[(r*groups+g)*es:], bias, dt)
			}
			for k, v := range words {
				binary.LittleEndian.PutUint32(w[(r*wordsPerRow+k)*4:], v)
			}
		}
		return nil
	})
	return w, scales, biases, err
}

// mlxGroup quantizes one group and returns its scale and bias.
func mlxGroup(x []float32, bits int, codes []uint32) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	step := max((hi-lo)/nBins, 1e-7)
	edge := lo
	if !(abs32(lo) > abs32(hi)) {
		edge, step = hi, -step
	}
	q0 := roundAway(edge / step)
	scale, bias = step, 0
	if q0 != 0 {
		scale, bias = edge/q0, edge
	}
	for j, v := range x {
		c := roundAway((v - bias) / scale)
		codes[j] = uint32(min(max(c, 0), nBins))
	}
	return scale, bias
}

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

// roundAway rounds half away from zero.
func roundAway(v float32) float32 { return float32(math.Round(float64(v))) }

// putFloat stores v in b as dt (F32, F16 or BF16).
func putFloat(b []byte, v float32, dt safetensors.DType) {
	switch dt {
	case safetensors.F16:
		binary.LittleEndian.PutUint16(b, half.F32ToF16(v))
	case safetensors.F32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	default:
		binary.LittleEndian.PutUint16(b, half.F32ToBF16(v))
	}
}

// mlxDequantize decodes one row of an MLX affine pack: codes packed
// least-significant first in words, with one scale and bias per group.
func mlxDequantize(dst []float32, words []uint32, scales, biases []float32, bits, group int) {
	mask := uint32(1)<<bits - 1
	for j := range dst {
		bit := j * bits
		c := words[bit/32] >> (bit % 32) & mask
		g := j / group
		dst[j] = scales[g]*float32(c) + biases[g]
	}
}

// stTensor is a tensor entry of a safetensors header.
type stTensor struct {
	name  string
	dtype safetensors.DType
	shape []int
}

// stHeader returns the 8-byte length and the JSON header of a safetensors
// file whose tensors follow back to back in the given order, padded with
// spaces to a multiple of 8 bytes.
func stHeader(tensors []stTensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{")
	str := func(s string) {
		q, _ := json.Marshal(s)
		b.Write(q)
	}
	if len(metadata) > 0 {
		str("__metadata__")
		b.WriteString(":{")
		first := true
		for _, k := range sortedKeys(metadata) {
			if !first {
				b.WriteByte(',')
			}
			first = false
			str(k)
			b.WriteByte(':')
			str(metadata[k])
		}
		b.WriteString("}")
	}
	var off int64
	for _, t := range tensors {
		n := int64(t.dtype.Size())
		for _, d := range t.shape {
			n *= int64(d)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		str(t.name)
		b.WriteString(`:{"dtype":`)
		str(string(t.dtype))
		b.WriteString(`,"shape":[`)
		for i, d := range t.shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, off+n)
		off += n
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > safetensors.MaxHeaderSize {
		return nil, fmt.Errorf("safetensors header of %d bytes exceeds the limit of %d", b.Len(), safetensors.MaxHeaderSize)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(b.Len()))
	return append(out, b.Bytes()...), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// copyFile copies src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
