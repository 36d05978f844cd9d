package model

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/quant"
	"github.com/lem-engine/lem/gguf"
)

// GGUF files as llama.cpp writes them. A GGUF file names its architecture
// in general.architecture, keeps the hyperparameters under "<arch>." keys
// and names tensors its own way (token_embd, blk.N.attn_q, …). This file
// maps both directions: reading a GGUF file as a Config and a Source of
// Hugging Face-named tensors, and telling a writer (package lem/convert)
// how to lay a Hugging Face model out for llama.cpp.
//
// Facts of llama.cpp's converter that matter here:
//   - For the llama-family architectures (llama, granite, smollm3; Mistral
//     is written as llama) the rows of Q and K (weights and biases) are
//     permuted within each head so that rope pairs are adjacent: HF row
//     h·(d/2)+j becomes row 2j+h. Other architectures keep the HF layout.
//     Reading, lem keeps the stored rows (memory-mapped, in their stored
//     type) and rotates adjacent pairs instead (compute.Rope.Interleaved).
//     Q·K dot products are unchanged by a permutation applied to both, and V
//     is never permuted, so attention is exactly the same.
//   - Gemma stores RMSNorm weights as w+1; the HF checkpoint stores w.
//   - Llama 3 rope scaling is stored as per-pair frequency divisors
//     (rope_freqs.weight), not as rope parameters.
//   - A missing output.weight means the output projection is tied to
//     token_embd.

// TensorLayout describes how one GGUF architecture stores a family's
// tensors. Families build it in their files; it has no exported fields.
type TensorLayout struct {
	act       string // hidden activation (GGUF does not store it)
	permuted  bool   // Q/K rows permuted for adjacent-pair rope
	normShift float32
	// unshifted are the per-layer Hugging Face suffixes of norm weights
	// that the file stores without normShift.
	unshifted []string
	// layer maps per-layer Hugging Face suffixes to GGUF suffixes, beyond
	// the ones all families share.
	layer map[string]string
	// swaPeriod is llama.cpp's sliding-window pattern for the family: every
	// swaPeriod-th layer is full attention (0: every layer slides when a
	// window is set).
	swaPeriod int
	// rules, when set, returns the tensors (per-layer ones by Hugging Face
	// suffix, others by name) that the file stores with another shape or
	// other values.
	rules func(c *Config) map[string]ggufRule
	// compose, when set, regroups a checkpoint's tensors into the ones the
	// file stores (stacked experts, split projections).
	compose func(c *Config, src Source, names []string) ([]composite, error)
	// global maps Hugging Face names of tensors outside the layers to GGUF
	// names, for families that name them their own way (nil: ggufGlobal).
	global map[string]string
	// prefix is the prefix of per-layer Hugging Face names ("" for
	// "model.layers.").
	prefix string
	// drop are prefixes of Hugging Face names that the file leaves out
	// (BERT's pooler, which embeddings do not use).
	drop []string
}

// ggufRule describes a per-layer tensor that a GGUF file stores with
// another shape or other values than the Hugging Face checkpoint.
type ggufRule struct {
	// shape maps a Hugging Face shape to the stored one and unshape maps it
	// back (shapes outermost first); nil keeps the shape. The elements stay
	// in the same order.
	shape, unshape func(s []int) []int
	// encode maps one row of Hugging Face values (row r of the stored
	// shape) to the stored values in place, decode back; nil keeps the
	// values.
	encode, decode func(row []float32, r int)
}

// ggufCommonLayer are the per-layer names all families share.
var ggufCommonLayer = map[string]string{
	"input_layernorm.weight":    "attn_norm.weight",
	"self_attn.q_proj.weight":   "attn_q.weight",
	"self_attn.q_proj.bias":     "attn_q.bias",
	"self_attn.k_proj.weight":   "attn_k.weight",
	"self_attn.k_proj.bias":     "attn_k.bias",
	"self_attn.v_proj.weight":   "attn_v.weight",
	"self_attn.v_proj.bias":     "attn_v.bias",
	"self_attn.o_proj.weight":   "attn_output.weight",
	"self_attn.o_proj.bias":     "attn_output.bias",
	"self_attn.qkv_proj.weight": "attn_qkv.weight",
	"self_attn.q_norm.weight":   "attn_q_norm.weight",
	"self_attn.k_norm.weight":   "attn_k_norm.weight",
	"mlp.gate_proj.weight":      "ffn_gate.weight",
	"mlp.up_proj.weight":        "ffn_up.weight",
	"mlp.down_proj.weight":      "ffn_down.weight",
	"mlp.gate_up_proj.weight":   "ffn_up.weight", // phi3: gate and up fused
}

// Global tensor names.
var ggufGlobal = map[string]string{
	"model.embed_tokens.weight": "token_embd.weight",
	"model.norm.weight":         "output_norm.weight",
	"lm_head.weight":            "output.weight",
}

// GGUF tensors that carry rope data rather than weights.
const (
	ggufRopeFreqs      = "rope_freqs.weight"
	ggufRopeLongFactor = "rope_factors_long.weight"
	ggufRopeShortFact  = "rope_factors_short.weight"
)

// ggufName maps a Hugging Face tensor name to its GGUF name in family fam.
func ggufName(fam TensorLayout, hf string) (string, bool) {
	if n, ok := fam.globals()[hf]; ok {
		return n, true
	}
	idx, suffix, ok := layerSuffix(hf)
	if !ok {
		return "", false
	}
	n, ok := fam.layer[suffix]
	if !ok {
		n, ok = ggufCommonLayer[suffix]
	}
	if !ok {
		return "", false
	}
	return "blk." + idx + "." + n, true
}

// globals returns the family's names of the tensors outside the layers.
func (fam TensorLayout) globals() map[string]string {
	if fam.global != nil {
		return fam.global
	}
	return ggufGlobal
}

// layerPrefixes are the prefixes of per-layer Hugging Face tensor names.
var layerPrefixes = []string{"model.layers.", "backbone.layers.", "encoder.layer."}

// layerSuffix splits a per-layer Hugging Face name into the layer index
// and the rest ("model.layers.3.mlp.gate.weight" → "3", "mlp.gate.weight").
func layerSuffix(hf string) (idx, suffix string, ok bool) {
	rest := ""
	for _, p := range layerPrefixes {
		if r, found := strings.CutPrefix(hf, p); found {
			rest, ok = r, true
			break
		}
	}
	if !ok {
		return "", "", false
	}
	idx, suffix, ok = strings.Cut(rest, ".")
	if !ok {
		return "", "", false
	}
	if _, err := strconv.ParseUint(idx, 10, 31); err != nil {
		return "", "", false
	}
	return idx, suffix, true
}

// hfLayerNames inverts ggufName for one family: GGUF suffix → HF suffix. The
// fused phi3 ffn_up is resolved by the caller.
func hfLayerNames(fam TensorLayout) map[string]string {
	m := map[string]string{}
	for hf, g := range ggufCommonLayer {
		if hf != "mlp.gate_up_proj.weight" {
			m[g] = hf
		}
	}
	for hf, g := range fam.layer {
		m[g] = hf
	}
	return m
}

// isNormWeight reports whether a Hugging Face tensor is an RMSNorm weight.
func isNormWeight(hf string) bool {
	return strings.HasSuffix(hf, "norm.weight")
}

// shift returns what the family's files add to a Hugging Face tensor (the
// norm shift for norm weights, 0 for the rest).
func (fam TensorLayout) shift(hf string) float32 {
	if fam.normShift == 0 || !isNormWeight(hf) {
		return 0
	}
	if _, suffix, ok := layerSuffix(hf); ok && slices.Contains(fam.unshifted, suffix) {
		return 0
	}
	return fam.normShift
}

// GGUFOptions adjust OpenGGUFWith and ReadGGUF.
type GGUFOptions struct {
	// DequantizeToF32 widens block-quantized tensors to F32 when they are
	// looked up, for backends whose Weight does not accept quantized dtypes
	// yet. It costs 4 bytes per weight of memory instead of the stored
	// size; it is meant for tests and fallbacks, not for serving.
	DequantizeToF32 bool
	// Progress, when set, is told how many bytes of the file's tensors
	// have been handed to the backend (see OpenOptions).
	Progress Progress
}

// OpenGGUF loads a GGUF model file (or the first part of a split model)
// onto a backend. Tensors stay memory-mapped in their stored type.
func OpenGGUF(path string, b compute.Backend) (*Loaded, error) {
	return OpenGGUFWith(path, b, GGUFOptions{})
}

// OpenGGUFWith is OpenGGUF with options.
func OpenGGUFWith(path string, b compute.Backend, opts GGUFOptions) (*Loaded, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	l, err := LoadGGUF(f, b, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// LoadGGUF loads an opened GGUF file onto a backend. The Loaded takes
// ownership of f and closes it on Close; on error f is left open.
func LoadGGUF(f *gguf.File, b compute.Backend, opts GGUFOptions) (*Loaded, error) {
	g, err := ReadGGUF(f, opts)
	if err != nil {
		return nil, err
	}
	var total int64
	if opts.Progress != nil {
		for _, t := range f.Tensors {
			total += max(t.Size(), 0)
		}
	}
	m, reads, err := loadReads(g.Config, g, b, opts.Progress, total)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	return &Loaded{Model: m, Dir: f.Name, Reads: reads, closers: []func() error{f.Close}}, nil
}

// GGUF is a GGUF file read as a model: its configuration and its tensors
// under Hugging Face names. It implements Source.
type GGUF struct {
	File   *gguf.File
	Arch   string
	Config *Config
	// Permuted reports that Q and K rows are in llama.cpp's permuted order
	// (rope pairs adjacent); Config's rope parameters say Interleaved then.
	Permuted bool

	fam     TensorLayout
	rules   map[string]ggufRule // by Hugging Face layer suffix
	opts    GGUFOptions
	tensors map[string]gguf.TensorInfo // by HF name
	names   []string                   // HF names in file order
	derived map[string]Stored          // shifted norms, dequantized tensors
	// ffPerLayer and kvPerLayer are feed_forward_length and
	// attention.head_count_kv when the file gives one per layer, else nil.
	ffPerLayer, kvPerLayer []int
}

// ReadGGUF interprets a parsed GGUF file as a model. It checks, before
// anything is loaded, that the architecture is one lem implements, that
// every tensor has a type lem computes with and a name it understands, and
// that the hyperparameters are complete; errors name the keys and tensors.
func ReadGGUF(f *gguf.File, opts GGUFOptions) (*GGUF, error) {
	g, err := readGGUF(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	return g, nil
}

func readGGUF(f *gguf.File, opts GGUFOptions) (*GGUF, error) {
	arch := f.Architecture()
	if arch == "" {
		return nil, fmt.Errorf("no %s key: not a model file", gguf.KeyArchitecture)
	}
	reg, ok := archByGGUF[arch]
	if !ok {
		return nil, fmt.Errorf("unsupported architecture %q (supported: %s)", arch, strings.Join(GGUFArchitectures(), ", "))
	}
	fam := *reg.Tensors
	g := &GGUF{
		File: f, Arch: arch, Permuted: fam.permuted, fam: fam, opts: opts,
		tensors: map[string]gguf.TensorInfo{},
		derived: map[string]Stored{},
	}
	var badType, unknown []string
	for _, t := range f.Tensors {
		if _, ok := quant.FromGGUF(t.Type); !ok {
			badType = append(badType, fmt.Sprintf("%s (%s)", t.Name, t.Type))
		}
	}
	if len(badType) > 0 {
		return nil, fmt.Errorf("unsupported tensor types: %s", listSome(badType))
	}
	layer := hfLayerNames(fam)
	global := map[string]string{}
	for hf, gn := range fam.globals() {
		global[gn] = hf
	}
	for _, t := range f.Tensors {
		hf, ok := global[t.Name]
		switch {
		case ok:
		case t.Name == ggufRopeFreqs || t.Name == ggufRopeLongFactor || t.Name == ggufRopeShortFact:
			continue
		default:
			hf, ok = g.hfName(t, layer)
		}
		if !ok {
			unknown = append(unknown, t.Name)
			continue
		}
		g.tensors[hf] = t
		g.names = append(g.names, hf)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("tensors not part of a %s model: %s", arch, listSome(unknown))
	}
	cfg, err := ggufConfig(f, arch, reg, g)
	if err != nil {
		return nil, err
	}
	g.Config = cfg
	if fam.rules != nil {
		g.rules = fam.rules(cfg)
	}
	return g, nil
}

// hfName maps a per-layer GGUF tensor to its Hugging Face name.
func (g *GGUF) hfName(t gguf.TensorInfo, layer map[string]string) (string, bool) {
	rest, ok := strings.CutPrefix(t.Name, "blk.")
	if !ok {
		return "", false
	}
	idx, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if _, err := strconv.ParseUint(idx, 10, 31); err != nil {
		return "", false
	}
	hf, ok := layer[suffix]
	if !ok {
		return "", false
	}
	if suffix == "ffn_up.weight" && hf == "mlp.up_proj.weight" {
		// A file without ffn_gate fuses gate and up into ffn_up (phi3).
		if _, _, ok := g.File.Tensor("blk." + idx + ".ffn_gate.weight"); !ok {
			hf = "mlp.gate_up_proj.weight"
		}
	}
	return g.fam.layerPrefix() + idx + "." + hf, true
}

// layerPrefix returns the prefix of the family's per-layer Hugging Face
// names.
func (fam TensorLayout) layerPrefix() string {
	if fam.prefix != "" {
		return fam.prefix
	}
	return "model.layers."
}

// ruleKey returns the key of TensorLayout.rules for a Hugging Face name: its
// layer suffix, or the whole name for tensors outside the layers.
func ruleKey(hf string) string {
	if _, suffix, ok := layerSuffix(hf); ok {
		return suffix
	}
	return hf
}

// listSome joins names, eliding all but the first ten.
func listSome(names []string) string {
	if len(names) > 10 {
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}

// Names returns the Hugging Face names of the file's weights, in file
// order.
func (g *GGUF) Names() []string { return slices.Clone(g.names) }

// Lookup implements Source: the tensor's stored type, Hugging Face shape
// ([out, in]: GGUF lists dimensions innermost first) and bytes, a slice of
// the mapping. Gemma norm weights are returned as w (GGUF stores w+1), in
// a new F32 buffer.
func (g *GGUF) Lookup(name string) (Stored, bool) {
	if s, ok := g.derived[name]; ok {
		return s, true
	}
	t, ok := g.tensors[name]
	if !ok {
		return Stored{}, false
	}
	dt, _ := quant.FromGGUF(t.Type) // checked by ReadGGUF
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[len(t.Dims)-1-i] = int(d)
	}
	s := Stored{DType: dt, Shape: shape, Data: g.File.TensorData(t)}
	shift := g.fam.shift(name)
	rule, hasRule := g.rules[ruleKey(name)]
	decode := hasRule && rule.decode != nil
	if shift == 0 && !decode && !(g.opts.DequantizeToF32 && dt.Quantized()) {
		if hasRule && rule.unshape != nil {
			s.Shape = rule.unshape(shape)
		}
		return s, true
	}
	vals, err := toF32(s)
	if err != nil {
		// Leave the stored tensor: the loader reports what it cannot use.
		return s, true
	}
	if shift != 0 {
		for i := range vals {
			vals[i] -= shift
		}
	}
	if decode {
		cols := 1
		if len(shape) > 0 {
			cols = max(shape[len(shape)-1], 1)
		}
		for r := 0; r*cols < len(vals); r++ {
			rule.decode(vals[r*cols:(r+1)*cols], r)
		}
	}
	if hasRule && rule.unshape != nil {
		shape = rule.unshape(shape)
	}
	d := Stored{DType: compute.F32, Shape: shape, Data: f32Bytes(vals)}
	g.derived[name] = d
	return d, true
}

// f32Bytes returns the little-endian bytes of vals.
func f32Bytes(vals []float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		u := math.Float32bits(v)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// ggufKeys reads the typed "<arch>." keys of a file, remembering the first
// error.
type ggufKeys struct {
	f    *gguf.File
	arch string
	err  error
	// names is the architecture's key table (keyNames); raw, when set,
	// receives each value read through it under its Hugging Face key.
	names map[string]string
	raw   map[string]json.RawMessage
}

// resolve returns the GGUF key (with the "<arch>." prefix) of a name the
// reader asks for, and the Hugging Face key when the table has one.
func (k *ggufKeys) resolve(name string) (full, hf string) {
	g, ok := ggufKeyName(k.names, name)
	if ok {
		hf = name
	}
	return k.arch + "." + g, hf
}

// record keeps a value read through the table under its Hugging Face key.
func (k *ggufKeys) record(hf string, v json.RawMessage) {
	if hf != "" && k.raw != nil {
		k.raw[hf] = v
	}
}

func (k *ggufKeys) fail(err error) {
	if k.err == nil {
		k.err = err
	}
}

// uint reads a non-negative integer key; ok is false when it is absent.
func (k *ggufKeys) uint(key string) (int, bool) {
	full, hf := k.resolve(key)
	v, ok := k.f.Value(full)
	if !ok {
		return 0, false
	}
	n, ok := v.Uint()
	if !ok || n > math.MaxInt32 {
		k.fail(fmt.Errorf("key %s: want a non-negative integer, got %s %v", full, v.Type(), v))
		return 0, false
	}
	k.record(hf, rawNumber(float64(n)))
	return int(n), true
}

// need reads a required positive integer key.
func (k *ggufKeys) need(key string) int {
	n, ok := k.uint(key)
	full, _ := k.resolve(key)
	if !ok {
		if _, present := k.f.Value(full); !present {
			k.fail(fmt.Errorf("missing key %s", full))
		}
		return 0
	}
	if n == 0 {
		k.fail(fmt.Errorf("key %s is 0", full))
	}
	return n
}

// float reads a number key.
func (k *ggufKeys) float(key string) (float64, bool) {
	full, hf := k.resolve(key)
	v, ok := k.f.Value(full)
	if !ok {
		return 0, false
	}
	x, ok := v.Float()
	if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
		k.fail(fmt.Errorf("key %s: want a finite number, got %s %v", full, v.Type(), v))
		return 0, false
	}
	k.record(hf, json.RawMessage(strconv.FormatFloat(x, 'g', -1, 64)))
	return x, true
}

// eps reads a normalisation epsilon into dst when the key is present; it
// must be a positive float32.
func (k *ggufKeys) eps(key string, dst *float64) {
	v, ok := k.float(key)
	if !ok {
		return
	}
	if err := checkEps(v); err != nil {
		full, _ := k.resolve(key)
		k.fail(fmt.Errorf("key %s: %w", full, err))
		return
	}
	*dst = v
}

func (k *ggufKeys) str(key string) (string, bool) {
	full, _ := k.resolve(key)
	v, ok := k.f.Value(full)
	if !ok {
		return "", false
	}
	s, ok := v.Str()
	if !ok {
		k.fail(fmt.Errorf("key %s: want a string, got %s", full, v.Type()))
	}
	return s, ok
}

// ggufMeta says how a family's config is stored as "<arch>." metadata
// beyond the shared keys: how the shared keys vary, and hooks, defined in
// the family's file, for the family's own keys. The zero value stores
// the shared keys only.
type ggufMeta struct {
	// read reads the family's own keys into c: after the shared keys,
	// the layer types and the rope (with readAll, in place of all of
	// them but the vocabulary).
	read func(k *ggufKeys, c *Config, g *GGUF) error
	// write writes them: after the shared keys and the soft caps, before
	// the sliding window (with writeAll, in place of all of them).
	write func(l *GGUFLayout, w *ggufWriter) error
	// writeRope writes keys that belong beside the rope's.
	writeRope func(l *GGUFLayout, w *ggufWriter)
	// readAll and writeAll: the hooks do the whole work (no attention
	// keys: Mamba2; keys per layer type: Gemma 4's writer). ownRope: read
	// reads the rope itself.
	readAll, writeAll, ownRope bool
	// ff is how feed_forward_length is stored; ffSize, when set, gives
	// the width written (LFM2's FeedForwardSize), else intermediate_size.
	ff     ffForm
	ffSize func(c *Config) int
	// kvZero: head_count_kv holds one count per layer, 0 for the layers
	// without attention (LFM2). kvDiffer: the counts may differ per layer
	// (Gemma 4, whose read keeps them).
	kvZero, kvDiffer bool
	// eps is the normalisation epsilon of a file without one (1e-5 when
	// 0).
	eps float64
	// windowed says llama.cpp applies attention.sliding_window to the
	// family (as of September 2025); for the others it attends to the
	// whole context whatever the key says, since windowIgnoredSince
	// when that is set.
	windowed           bool
	windowIgnoredSince string
	// noRope says the family's hooks store no_rope_layers (by a fixed
	// rule they check); other families refuse it.
	noRope bool
	// otherLayers are the layer types beside attention that a file of the
	// family holds when write leaves the sliding window to the shared
	// code ("conv").
	otherLayers []string
	// yarnNoTruncate: llama.cpp's YaRN for the family does not round its
	// correction range (gpt-oss's "truncate": false); the keys cannot
	// say so.
	yarnNoTruncate bool
}

// ffForm is how a family stores feed_forward_length.
type ffForm uint8

const (
	ffRequired ffForm = iota // one width, required
	ffOptional               // one width, absent when the checkpoint has none
	ffPerLayer               // one width, or one per layer
)

// ggufConfig builds the Config of a GGUF file from its "<arch>." keys and
// tensor shapes.
func ggufConfig(f *gguf.File, arch string, reg *Arch, g *GGUF) (*Config, error) {
	fam := *reg.Tensors
	meta := reg.Meta
	c := &Config{
		ModelType: reg.ModelTypes[0],
		HiddenAct: fam.act,
		Raw:       map[string]json.RawMessage{},
	}
	k := &ggufKeys{f: f, arch: arch, names: keyNames(arch), raw: c.Raw}
	if meta.readAll {
		if err := meta.read(k, c, g); err != nil {
			return nil, err
		}
		if err := ggufVocab(f, c, g); err != nil {
			return nil, err
		}
		return c, nil
	}
	c.NumHiddenLayers = k.need("num_hidden_layers")
	c.HiddenSize = k.need("hidden_size")
	switch meta.ff {
	case ffOptional:
		c.IntermediateSize, _ = k.uint("intermediate_size")
	case ffPerLayer:
		// One width per layer, or one for all.
		if c.NumHiddenLayers > 0 && c.NumHiddenLayers <= MaxLayers {
			ff, err := ggufPerLayer(k, "intermediate_size", c.NumHiddenLayers)
			if err != nil {
				return nil, err
			}
			if ff == nil || ff[0] == 0 {
				return nil, fmt.Errorf("missing key %s.feed_forward_length", arch)
			}
			c.IntermediateSize = ff[0]
			if _, isArray := gguf.ArrayOf[uint32](mustValue(f, arch+".feed_forward_length")); isArray {
				g.ffPerLayer = ff
			}
		}
	default:
		c.IntermediateSize = k.need("intermediate_size")
	}
	c.NumAttentionHeads = k.need("num_attention_heads")
	c.NumKeyValueHeads = c.NumAttentionHeads
	kvHeads, err := ggufPerLayer(k, "num_key_value_heads", c.NumHiddenLayers)
	if err != nil {
		return nil, err
	}
	g.kvPerLayer = kvHeads
	if kvHeads != nil {
		c.NumKeyValueHeads = 0
		for i, n := range kvHeads {
			switch {
			case n == 0 && meta.kvZero:
				// A layer without attention.
			case c.NumKeyValueHeads != 0 && n != c.NumKeyValueHeads && !meta.kvDiffer:
				return nil, fmt.Errorf("key %s.attention.head_count_kv: layer %d has %d key/value heads, layer 0 %d: per-layer head counts are not supported", arch, i, n, c.NumKeyValueHeads)
			case c.NumKeyValueHeads == 0:
				c.NumKeyValueHeads = n // kvDiffer: layer 0's; the family's read keeps the others
			}
		}
	}
	c.MaxPositionEmbeddings, _ = k.uint("max_position_embeddings")
	c.RMSNormEps = cmp.Or(meta.eps, 1e-5)
	k.eps("rms_norm_eps", &c.RMSNormEps)
	if k.err != nil {
		return nil, k.err
	}
	if c.NumHiddenLayers > MaxLayers {
		return nil, fmt.Errorf("key %s.block_count: %d layers is more than the %d supported", arch, c.NumHiddenLayers, MaxLayers)
	}
	if c.NumKeyValueHeads == 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, fmt.Errorf("key %s.attention.head_count_kv: %d attention heads are not a multiple of %d key/value heads", arch, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	c.HeadDim, _ = k.uint("head_dim")
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return nil, fmt.Errorf("key %s.attention.key_length absent, and embedding_length %d is not a multiple of head_count %d", arch, c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if v, ok := k.uint("attention.value_length"); ok && v != c.HeadDim {
		return nil, fmt.Errorf("key %s.attention.value_length %d differs from key_length %d, which %s models do not do", arch, v, c.HeadDim, arch)
	}

	if err := ggufVocab(f, c, g); err != nil {
		return nil, err
	}

	// Soft caps, and the multipliers' defaults.
	c.FinalLogitSoftcapping, _ = k.float("final_logit_softcapping")
	c.AttnLogitSoftcapping, _ = k.float("attn_logit_softcapping")
	c.EmbeddingMultiplier, c.ResidualMultiplier, c.LogitsScaling = 1, 1, 1
	if err := ggufLayerTypes(c, k, fam); err != nil {
		return nil, err
	}
	if !meta.ownRope {
		if err := ggufRope(c, k, g); err != nil {
			return nil, err
		}
		c.RopeParams.NoTruncate = meta.yarnNoTruncate
	}
	if meta.read != nil {
		if err := meta.read(k, c, g); err != nil {
			return nil, err
		}
	}
	return c, k.err
}

// ggufPerLayer reads a key that holds one integer, or one per layer (nil
// when absent).
func ggufPerLayer(k *ggufKeys, key string, n int) ([]int, error) {
	full, hf := k.resolve(key)
	v, ok := k.f.Value(full)
	if !ok {
		return nil, nil
	}
	if x, ok := v.Uint(); ok && x <= math.MaxInt32 {
		k.record(hf, rawNumber(float64(x)))
		out := make([]int, n)
		for i := range out {
			out[i] = int(x)
		}
		return out, nil
	}
	for _, arr := range []func() ([]int, bool){
		func() ([]int, bool) { return intsOf[uint32](v) },
		func() ([]int, bool) { return intsOf[int32](v) },
	} {
		if xs, ok := arr(); ok {
			if len(xs) != n {
				return nil, fmt.Errorf("key %s: %d values for %d layers", full, len(xs), n)
			}
			return xs, nil
		}
	}
	return nil, fmt.Errorf("key %s: want an integer or one per layer, got %s", full, v.Type())
}

// intsOf reads an array value of element type T as non-negative ints.
func intsOf[T uint32 | int32](v gguf.Value) ([]int, bool) {
	xs, ok := gguf.ArrayOf[T](v)
	if !ok {
		return nil, false
	}
	out := make([]int, len(xs))
	for i, x := range xs {
		if x < 0 {
			return nil, false
		}
		out[i] = int(x)
	}
	return out, true
}

// hasLayerTensor reports whether any layer of the file holds the tensor
// with the given Hugging Face suffix.
func (g *GGUF) hasLayerTensor(suffix string) bool {
	for _, n := range g.names {
		if _, s, ok := layerSuffix(n); ok && s == suffix {
			return true
		}
	}
	return false
}

// ggufVocab reads the vocabulary size from the token embedding, whether the
// output projection is tied to it, and the special tokens the engine stops
// on.
func ggufVocab(f *gguf.File, c *Config, g *GGUF) error {
	embName := g.fam.globalHF("token_embd.weight")
	emb, ok := g.tensors[embName]
	if !ok {
		return errors.New("tensor token_embd.weight is missing")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != int64(c.HiddenSize) {
		return fmt.Errorf("tensor token_embd.weight has dims %v, want [%d, vocab]", emb.Dims, c.HiddenSize)
	}
	c.VocabSize = int(emb.Dims[1])
	if c.VocabSize <= 0 {
		return fmt.Errorf("tensor token_embd.weight has dims %v: no rows for the vocabulary", emb.Dims)
	}
	_, hasOutput := g.tensors[g.fam.globalHF("output.weight")]
	c.TieWordEmbeddings = !hasOutput

	// Negative ids (-1) mean none.
	for _, key := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
		"tokenizer.ggml.eom_token_id", "tokenizer.ggml.padding_token_id"} {
		id, ok := f.Int(key)
		if !ok || id < 0 {
			continue
		}
		if id >= int64(c.VocabSize) {
			return fmt.Errorf("key %s: token id %d is outside the vocabulary (%d rows in token_embd.weight)", key, id, c.VocabSize)
		}
		switch v := int(id); key {
		case "tokenizer.ggml.bos_token_id":
			c.BOSTokenID = &v
		case "tokenizer.ggml.padding_token_id":
			c.PadTokenID = &v
		default:
			if !slices.Contains(c.EOSTokenIDs, v) {
				c.EOSTokenIDs = append(c.EOSTokenIDs, v)
			}
		}
	}
	return nil
}

// globalHF returns the Hugging Face name of a GGUF tensor outside the
// layers.
func (fam TensorLayout) globalHF(name string) string {
	for hf, n := range fam.globals() {
		if n == name {
			return hf
		}
	}
	return ""
}

// ggufLayerTypes reads the sliding window and which layers use it.
func ggufLayerTypes(c *Config, k *ggufKeys, fam TensorLayout) error {
	n := c.NumHiddenLayers
	c.LayerTypes = make([]string, n)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = FullAttention
	}
	c.SlidingWindow, _ = k.uint("sliding_window")
	if c.SlidingWindow == 0 {
		return k.err
	}
	sliding := func(i int) bool {
		return fam.swaPeriod == 0 || (i+1)%fam.swaPeriod != 0
	}
	key := k.arch + ".attention.sliding_window_pattern"
	if v, ok := k.f.Value(key); ok {
		if p, ok := v.Uint(); ok {
			if p > 0 {
				sliding = func(i int) bool { return (i+1)%int(p) != 0 }
			}
		} else if bs, ok := gguf.ArrayOf[bool](v); ok && len(bs) == n {
			sliding = func(i int) bool { return bs[i] }
		} else {
			return fmt.Errorf("key %s: want a period or %d bools, got %s", key, n, v.Type())
		}
	}
	for i := range c.LayerTypes {
		if sliding(i) {
			c.LayerTypes[i] = SlidingAttention
		}
	}
	return k.err
}

// ggufRope reads the rope parameters.
func ggufRope(c *Config, k *ggufKeys, g *GGUF) error {
	p := RopeParams{Type: "default", Theta: 10000, Factor: 1, PartialRotaryFactor: 1, Interleaved: g.Permuted}
	if v, ok := k.float("rope_theta"); ok {
		p.Theta = v
	}
	if d, ok := k.uint("rope.dimension_count"); ok && d != c.HeadDim {
		if d == 0 || d > c.HeadDim || d%2 != 0 {
			return fmt.Errorf("key %s.rope.dimension_count: %d rotary dimensions for head size %d", k.arch, d, c.HeadDim)
		}
		p.PartialRotaryFactor = float64(d) / float64(c.HeadDim)
	}
	p.OriginalMaxPositionEmbeddings, _ = k.uint("rope.scaling.original_context_length")
	scaling, _ := k.str("rope.scaling.type")
	factor, hasFactor := k.float("rope.scaling.factor")
	switch scaling {
	case "", "none":
	case "linear":
		if hasFactor && factor > 0 {
			p.Type, p.Factor = "linear", factor
		}
	case "yarn":
		p.Type, p.BetaFast, p.BetaSlow = "yarn", 32, 1
		if hasFactor && factor > 0 {
			p.Factor = factor
		}
		if v, ok := k.float("rope.scaling.yarn_beta_fast"); ok {
			p.BetaFast = v
		}
		if v, ok := k.float("rope.scaling.yarn_beta_slow"); ok {
			p.BetaSlow = v
		}
		if v, ok := k.float("rope.scaling.yarn_attn_factor"); ok {
			p.AttentionFactor = v
		}
	case "longrope":
		p.Type = "longrope"
		var err error
		if p.ShortFactor, err = g.f64Tensor(ggufRopeShortFact); err != nil {
			return err
		}
		if p.LongFactor, err = g.f64Tensor(ggufRopeLongFactor); err != nil {
			return err
		}
		if p.ShortFactor == nil {
			return fmt.Errorf("key %s.rope.scaling.type is longrope but tensor %s is missing", k.arch, ggufRopeShortFact)
		}
		if v, ok := k.float("rope.scaling.attn_factor"); ok {
			p.AttentionFactor = v
		}
	default:
		return fmt.Errorf("key %s.rope.scaling.type: unsupported rope scaling %q", k.arch, scaling)
	}
	ff, err := g.f64Tensor(ggufRopeFreqs)
	if err != nil {
		return err
	}
	p.FreqFactors = ff
	if err := p.validate(k.arch + "."); err != nil {
		return err
	}
	c.PartialRotaryFactor = p.PartialRotaryFactor
	c.RopeParams = p
	return k.err
}

// f64Tensor reads a small F32 tensor of the file as float64s, or nil when
// the file does not hold it.
func (g *GGUF) f64Tensor(name string) ([]float64, error) {
	t, data, ok := g.File.Tensor(name)
	if !ok {
		return nil, nil
	}
	dt, _ := quant.FromGGUF(t.Type)
	if len(t.Dims) != 1 || t.Dims[0] > 1<<16 {
		return nil, fmt.Errorf("tensor %s has dims %v, want one small dimension", name, t.Dims)
	}
	vals := make([]float32, t.Dims[0])
	if err := quant.Dequantize(vals, data, dt); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	out := make([]float64, len(vals))
	for i, v := range vals {
		out[i] = float64(v)
	}
	return out, nil
}

// GGUFTensor is a small tensor a GGUF writer adds beside the weights.
type GGUFTensor struct {
	Name string
	Dims []int64 // innermost first
	Data []float32
}

// GGUFLayout tells a writer how to store a Hugging Face model as a GGUF
// file that llama.cpp loads: the architecture, its metadata, how to name
// and transform each tensor, and the extra tensors to add.
type GGUFLayout struct {
	Arch string
	// KV holds the "<arch>." hyperparameters (not general.* or
	// tokenizer.* keys).
	KV []gguf.KV
	// Extra holds F32 tensors llama.cpp reads beside the weights
	// (rope_freqs.weight for Llama 3 rope scaling).
	Extra []GGUFTensor
	// Warnings name what the file holds that llama.cpp itself does not
	// read, so that llama.cpp would compute differently from lem.
	Warnings []string

	cfg   *Config
	fam   TensorLayout
	rules map[string]ggufRule
}

// NewGGUFLayout returns the GGUF layout of a model, or an error naming
// what GGUF (or lem's reading of it) cannot express.
func NewGGUFLayout(cfg *Config) (*GGUFLayout, error) {
	reg, ok := archByType[cfg.ModelType]
	if !ok || reg.GGUF == "" {
		return nil, fmt.Errorf("model_type %q has no GGUF layout (supported: %s)", cfg.ModelType, strings.Join(ggufWritable(), ", "))
	}
	arch := reg.GGUF
	fam := *archByGGUF[arch].Tensors
	l := &GGUFLayout{Arch: arch, cfg: cfg, fam: fam}
	if fam.rules != nil {
		l.rules = fam.rules(cfg)
	}
	if err := l.metadata(); err != nil {
		return nil, err
	}
	return l, nil
}

// StoredShape returns the shape (outermost first) in which the file stores
// a Hugging Face tensor of the given shape.
func (l *GGUFLayout) StoredShape(hf string, shape []int) []int {
	if r, ok := l.rules[ruleKey(hf)]; ok && r.shape != nil {
		return r.shape(shape)
	}
	return shape
}

// Encode returns the function that turns each row of a Hugging Face
// tensor's values (row r of its stored shape) into the stored values, or
// nil when they are stored as they are. Norm shifts are separate
// (NormShift).
func (l *GGUFLayout) Encode(hf string) func(row []float32, r int) {
	return l.rules[ruleKey(hf)].encode
}

// Source returns a checkpoint's tensors as the file stores them, and their
// names in order: where the family regroups tensors (experts stacked per
// projection, a fused projection split), the regrouped tensors replace
// their parts, at the place of the first part. The returned Source also
// implements Describe, which gives a tensor's type and shape without
// building it.
func (l *GGUFLayout) Source(src Source, names []string) (Source, []string, error) {
	v := &ggufView{src: src, built: map[string]*composite{}}
	if l.fam.compose == nil {
		return v, names, nil
	}
	comps, err := l.fam.compose(l.cfg, src, names)
	if err != nil {
		return nil, nil, err
	}
	used := map[string]bool{}
	at := map[string][]string{} // first part → composites placed there
	for i := range comps {
		c := &comps[i]
		v.built[c.name] = c
		for _, p := range c.parts {
			used[p] = true
		}
		at[c.parts[0]] = append(at[c.parts[0]], c.name)
	}
	var out []string
	for _, n := range names {
		if !used[n] {
			out = append(out, n)
		}
		out = append(out, at[n]...)
	}
	return v, out, nil
}

// composite is a tensor a GGUF file stores that the checkpoint holds as
// parts (experts stacked, projections split or transposed).
type composite struct {
	name  string   // Hugging Face-style name, as ggufName maps it
	parts []string // the checkpoint tensors it is built from
	dtype compute.DType
	shape []int
	// build returns the tensor's bytes. compose checks the parts' types
	// and shapes, so building cannot fail.
	build func() []byte
}

// ggufView is a checkpoint seen through a layout: composite tensors
// replace their parts.
type ggufView struct {
	src   Source
	built map[string]*composite
}

func (v *ggufView) Lookup(name string) (Stored, bool) {
	c, ok := v.built[name]
	if !ok {
		return v.src.Lookup(name)
	}
	return Stored{DType: c.dtype, Shape: c.shape, Data: c.build()}, true
}

// Describe returns a tensor's type and shape (Data is nil) without
// building a composite.
func (v *ggufView) Describe(name string) (Stored, bool) {
	if c, ok := v.built[name]; ok {
		return Stored{DType: c.dtype, Shape: c.shape}, true
	}
	return v.src.Lookup(name)
}

// Permuted reports whether Q and K rows are stored permuted for
// adjacent-pair rope (the llama family).
func (l *GGUFLayout) Permuted() bool { return l.fam.permuted }

// NormShift returns what the file adds to a Hugging Face tensor's values:
// 1 for the RMSNorm weights of the families that store w+1 (Gemma, the
// Qwen delta-rule hybrids), 0 otherwise.
func (l *GGUFLayout) NormShift(hf string) float32 { return l.fam.shift(hf) }

// TensorName returns the GGUF name of a Hugging Face tensor, or false for a
// tensor the layout does not store.
func (l *GGUFLayout) TensorName(hf string) (string, bool) {
	if hf == "lm_head.weight" && l.cfg.TieWordEmbeddings {
		return "", false
	}
	return ggufName(l.fam, hf)
}

// Drops reports whether the layout leaves a Hugging Face tensor out of the
// file (BERT's pooler).
func (l *GGUFLayout) Drops(hf string) bool {
	for _, p := range l.fam.drop {
		if strings.HasPrefix(hf, p) {
			return true
		}
	}
	return false
}

// IsNorm reports whether a Hugging Face tensor is an RMSNorm weight (kept in
// F32 and shifted by NormShift).
func (l *GGUFLayout) IsNorm(hf string) bool { return isNormWeight(hf) }

// PermuteHeads returns how many heads the rows of a Hugging Face tensor are
// permuted over when the layout permutes Q and K (the head count for q_proj,
// the key/value head count for k_proj, weights and biases), or 0 when the
// tensor is stored as is.
func (l *GGUFLayout) PermuteHeads(hf string) int {
	if !l.fam.permuted {
		return 0
	}
	switch {
	case strings.HasSuffix(hf, ".self_attn.q_proj.weight"), strings.HasSuffix(hf, ".self_attn.q_proj.bias"):
		return l.cfg.NumAttentionHeads
	case strings.HasSuffix(hf, ".self_attn.k_proj.weight"), strings.HasSuffix(hf, ".self_attn.k_proj.bias"):
		return l.cfg.NumKeyValueHeads
	}
	return 0
}

// PermuteRows reorders the rows of a Q or K tensor (rows of rowBytes bytes,
// heads heads of rows/heads rows each) as llama.cpp's converter does, so
// that rope pairs become adjacent: within each head, row h·(n/2)+j moves to
// row 2j+h. With inverse set it undoes the permutation. Rows are moved
// whole, so it is exact for quantized rows too.
func PermuteRows(src []byte, rows, rowBytes, heads int, inverse bool) ([]byte, error) {
	if heads <= 0 || rows%heads != 0 || (rows/heads)%2 != 0 || len(src) != rows*rowBytes {
		return nil, fmt.Errorf("cannot permute %d rows of %d bytes (%d bytes) over %d heads", rows, rowBytes, len(src), heads)
	}
	dst := make([]byte, len(src))
	per := rows / heads
	hp := per / 2
	for h := range heads {
		for half := range 2 {
			for j := range hp {
				from := h*per + half*hp + j // HF order
				to := h*per + 2*j + half    // GGUF order
				if inverse {
					from, to = to, from
				}
				copy(dst[to*rowBytes:(to+1)*rowBytes], src[from*rowBytes:(from+1)*rowBytes])
			}
		}
	}
	return dst, nil
}

// ggufWriter writes "<arch>." keys of a layout: a Hugging Face key of the
// architecture's table under its GGUF key, any other name as it is.
type ggufWriter struct {
	l     *GGUFLayout
	names map[string]string
	// window is set by a family's write that wrote the sliding window
	// itself.
	window bool
}

func (w *ggufWriter) u32(key string, v int) {
	key, _ = ggufKeyName(w.names, key)
	w.l.KV = append(w.l.KV, gguf.KV{Key: w.l.Arch + "." + key, Value: gguf.Uint32(uint32(v))})
}

func (w *ggufWriter) f32(key string, v float64) {
	key, _ = ggufKeyName(w.names, key)
	w.l.KV = append(w.l.KV, gguf.KV{Key: w.l.Arch + "." + key, Value: gguf.Float32(float32(v))})
}

func (w *ggufWriter) str(key, v string) {
	w.l.KV = append(w.l.KV, gguf.KV{Key: w.l.Arch + "." + key, Value: gguf.String(v)})
}

// metadata builds the "<arch>." keys and extra tensors.
func (l *GGUFLayout) metadata() error {
	c := l.cfg
	meta := archByGGUF[l.Arch].Meta
	w := &ggufWriter{l: l, names: keyNames(l.Arch)}
	u32, f32, str := w.u32, w.f32, w.str
	if meta.writeAll {
		return meta.write(l, w)
	}
	for i := range c.NumHiddenLayers {
		if c.HeadDimFor(i) != c.HeadDim || c.KVHeadsFor(i) != c.NumKeyValueHeads || (c.IntermediateSizeFor(i) != c.IntermediateSize && meta.ff != ffPerLayer) {
			return fmt.Errorf("%s: layer %d has its own sizes (per-layer config), which this GGUF layout does not store", c.ModelType, i)
		}
	}
	if c.MaxPositionEmbeddings > 0 {
		u32("max_position_embeddings", c.MaxPositionEmbeddings)
	}
	u32("hidden_size", c.HiddenSize)
	u32("num_hidden_layers", c.NumHiddenLayers)
	switch {
	case meta.ffSize != nil:
		u32("intermediate_size", meta.ffSize(c))
	case meta.ff == ffOptional && c.IntermediateSize == 0:
		// The converter writes no key it has no value for.
	default:
		u32("intermediate_size", c.IntermediateSize)
	}
	u32("num_attention_heads", c.NumAttentionHeads)
	if meta.kvZero {
		// One count per layer, 0 for the layers without attention.
		kv := make([]uint32, c.NumHiddenLayers)
		for i := range kv {
			if t := c.LayerType(i); t == FullAttention || t == SlidingAttention {
				kv[i] = uint32(c.NumKeyValueHeads)
			}
		}
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".attention.head_count_kv", Value: gguf.Array(kv)})
	} else {
		u32("num_key_value_heads", c.NumKeyValueHeads)
	}
	u32("head_dim", c.HeadDim)
	u32("attention.value_length", c.HeadDim)
	f32("rms_norm_eps", c.NormEps())
	u32("vocab_size", c.VocabSize)

	full := c.Rope(FullAttention)
	rotary := int(float64(c.HeadDim) * full.PartialRotaryFactor)
	rotary -= rotary % 2
	u32("rope.dimension_count", rotary)
	f32("rope_theta", full.Theta)
	switch full.Type {
	case "", "default", "dynamic":
	case "linear":
		str("rope.scaling.type", "linear")
		f32("rope.scaling.factor", full.Factor)
	case "yarn":
		str("rope.scaling.type", "yarn")
		f32("rope.scaling.factor", full.Factor)
		if full.OriginalMaxPositionEmbeddings > 0 {
			u32("rope.scaling.original_context_length", full.OriginalMaxPositionEmbeddings)
		}
		f32("rope.scaling.yarn_beta_fast", full.BetaFast)
		f32("rope.scaling.yarn_beta_slow", full.BetaSlow)
		if full.AttentionFactor != 0 {
			f32("rope.scaling.yarn_attn_factor", full.AttentionFactor)
		}
		if full.MScale != 0 {
			return fmt.Errorf("%s: yarn mscale has no GGUF key here", c.ModelType)
		}
		// The reader gives each family its one truncate setting.
		if full.NoTruncate != meta.yarnNoTruncate {
			return fmt.Errorf("%s: yarn truncate=%v has no GGUF key; %s files are read with truncate=%v", c.ModelType, !full.NoTruncate, l.Arch, !meta.yarnNoTruncate)
		}
	case "llama3":
		l.Extra = append(l.Extra, llama3FreqFactors(full, c.HeadDim, rotary))
	case "longrope":
		str("rope.scaling.type", "longrope")
		if full.OriginalMaxPositionEmbeddings > 0 {
			u32("rope.scaling.original_context_length", full.OriginalMaxPositionEmbeddings)
		}
		if full.AttentionFactor != 0 {
			f32("rope.scaling.attn_factor", full.AttentionFactor)
		}
		for _, t := range []struct {
			name string
			f    []float64
		}{{ggufRopeShortFact, full.ShortFactor}, {ggufRopeLongFactor, full.LongFactor}} {
			if len(t.f) == 0 {
				continue
			}
			d := make([]float32, len(t.f))
			for i, v := range t.f {
				d[i] = float32(v)
			}
			l.Extra = append(l.Extra, GGUFTensor{Name: t.name, Dims: []int64{int64(len(d))}, Data: d})
		}
	default:
		return fmt.Errorf("%s: rope_type %q has no GGUF form", c.ModelType, full.Type)
	}
	if meta.writeRope != nil {
		meta.writeRope(l, w)
	}
	if c.FinalLogitSoftcapping > 0 {
		f32("final_logit_softcapping", c.FinalLogitSoftcapping)
	}
	if c.AttnLogitSoftcapping > 0 {
		f32("attn_logit_softcapping", c.AttnLogitSoftcapping)
	}
	if c.NoRopeLayers != nil && !meta.noRope {
		return fmt.Errorf("%s: no_rope_layers has no GGUF form", c.ModelType)
	}
	if meta.write != nil {
		if err := meta.write(l, w); err != nil {
			return err
		}
	}
	if w.window {
		return nil
	}
	return l.slidingKeys(u32, meta)
}

// slidingKeys writes the sliding window and, when the layers that use it
// are not the family's default, the per-layer pattern.
func (l *GGUFLayout) slidingKeys(u32 func(string, int), meta ggufMeta) error {
	c := l.cfg
	var pattern []bool
	slides := false
	for i := range c.NumHiddenLayers {
		s := c.LayerType(i) == SlidingAttention
		pattern = append(pattern, s)
		slides = slides || s
		if t := c.LayerType(i); t != FullAttention && t != SlidingAttention && !slices.Contains(meta.otherLayers, t) {
			return fmt.Errorf("%s: layer %d is %q, which a dense GGUF model cannot hold", c.ModelType, i, t)
		}
	}
	if !slides || c.SlidingWindow <= 0 {
		return nil
	}
	u32("sliding_window", c.SlidingWindow)
	if !meta.windowed {
		since := ""
		if meta.windowIgnoredSince != "" {
			since = " since " + meta.windowIgnoredSince
		}
		l.Warnings = append(l.Warnings, fmt.Sprintf("sliding_window %d: written as %s.attention.sliding_window, which llama.cpp's %s ignores%s (it attends to the whole context, so it computes differently from position %d on)",
			c.SlidingWindow, l.Arch, l.Arch, since, c.SlidingWindow))
	}
	def := true
	for i, s := range pattern {
		if s != (l.fam.swaPeriod == 0 || (i+1)%l.fam.swaPeriod != 0) {
			def = false
		}
	}
	if !def {
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".attention.sliding_window_pattern", Value: gguf.Array(pattern)})
		if meta.windowed {
			l.Warnings = append(l.Warnings, fmt.Sprintf("layer_types: the sliding layers differ from llama.cpp's fixed pattern for %s; written as %s.attention.sliding_window_pattern, which llama.cpp does not read",
				l.Arch, l.Arch))
		}
	}
	return nil
}

// llama3FreqFactors computes rope_freqs.weight for Llama 3 rope scaling as
// llama.cpp's converter does: per rotated pair, 1 for short wavelengths,
// the factor for long ones and a smooth blend between, applied as a divisor
// of the pair's frequency.
func llama3FreqFactors(p RopeParams, headDim, rotary int) GGUFTensor {
	factor := p.Factor
	low, high := p.LowFreqFactor, p.HighFreqFactor
	if low == 0 {
		low = 1
	}
	if high == 0 {
		high = 4
	}
	old := float64(p.OriginalMaxPositionEmbeddings)
	if old == 0 {
		old = 8192
	}
	lowWave, highWave := old/low, old/high
	out := make([]float32, rotary/2)
	for i := range out {
		freq := float64(1 / float32(math.Pow(p.Theta, float64(float32(2*i)/float32(rotary)))))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(factor)
		default:
			smooth := (old/wave - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return GGUFTensor{Name: ggufRopeFreqs, Dims: []int64{int64(len(out))}, Data: out}
}

// mustValue returns a key's value, or the zero Value when it is absent.
func mustValue(f *gguf.File, key string) gguf.Value {
	v, _ := f.Value(key)
	return v
}
