package model

import (
	"fmt"

	"github.com/lem-engine/lem/compute"
)

// The encoder families: BERT and XLM-RoBERTa (absolute and token type
// position embeddings, post-LayerNorm blocks with biases, GELU), and
// ModernBERT (rotary positions with separate global and local bases,
// local layers attending within a symmetric window, pre-LayerNorm blocks
// without biases, GeGLU), each with an optional sequence-classification
// head (cross-encoder rerankers).
func init() {
	Register(Arch{ModelTypes: []string{"bert"}, Encoder: loadBERT, GGUF: "bert", Tensors: &bertGGUFLayout, Meta: bertGGUFMeta})
	Register(Arch{ModelTypes: []string{"xlm-roberta", "roberta"}, Encoder: loadBERT, GGUF: "bert"})
	Register(Arch{ModelTypes: []string{"modernbert"}, Encoder: loadModernBERT})
}

// encoder is the network of every encoder family; nil tensors are absent
// in a family.
type encoder struct {
	cfg    *Config
	b      compute.Backend
	bi     compute.Bidirectional
	modern bool // ModernBERT's pre-norm blocks, rope and GeGLU

	hid, vocab, types, maxTokens, posOffset, ff int
	eps                                         float32
	act                                         compute.Activation

	word, pos, typ *compute.Tensor
	embNorm, final norm
	layers         []encLayer
	head           *encHead
}

// encLayer is one block. In BERT attnNorm and ffnNorm follow the residual
// adds; in ModernBERT they precede the attention (absent on layer 0) and
// the MLP.
type encLayer struct {
	q, k, v, o        affine
	up, gate, down    affine // gate: ModernBERT's GeGLU multiplier
	attnNorm, ffnNorm norm
	attn              compute.Attention
	rope              *compute.Rope
}

// encHead is a sequence-classification head, run on the host: pool
// (the first row, or the mean of the rows), dense, activation, optional
// LayerNorm, output projection.
type encHead struct {
	mean         bool
	dense        hostLinear
	act          string
	normW, normB []float32
	normEps      float64
	out          hostLinear
}

func (m *encoder) Config() *Config { return m.cfg }
func (m *encoder) Labels() int {
	if m.head == nil {
		return 0
	}
	return m.head.out.out
}
func (m *encoder) MaxTokens() int { return m.maxTokens }

// newEncoder checks what every family needs.
func newEncoder(cfg *Config, b compute.Backend, modern bool) (*encoder, error) {
	bi, ok := b.(compute.Bidirectional)
	if !ok {
		return nil, fmt.Errorf("%s: backend %s cannot run encoder models (no bidirectional attention)", cfg.ModelType, b.Name())
	}
	act, err := compute.ParseActivation(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	if cfg.IntermediateSize <= 0 || cfg.NumAttentionHeads <= 0 {
		return nil, fmt.Errorf("%s: config needs intermediate_size and num_attention_heads", cfg.ModelType)
	}
	if cfg.NumKeyValueHeads != cfg.NumAttentionHeads || cfg.HeadDim*cfg.NumAttentionHeads != cfg.HiddenSize {
		return nil, fmt.Errorf("%s: %d heads of %d do not split hidden_size %d", cfg.ModelType, cfg.NumAttentionHeads, cfg.HeadDim, cfg.HiddenSize)
	}
	m := &encoder{
		cfg: cfg, b: b, bi: bi, modern: modern, act: act,
		hid: cfg.HiddenSize, vocab: cfg.VocabSize, ff: cfg.IntermediateSize,
		eps: float32(cfg.NormEps()),
	}
	return m, nil
}

// prefix returns the name prefix of the base model's tensors: none in a
// bare model, the base model's name in a model with a head.
func prefix(l *loader, probe string, candidates ...string) (string, error) {
	for _, p := range candidates {
		if l.has(p + probe) {
			return p, nil
		}
	}
	return "", fmt.Errorf("tensor %s is missing", probe)
}

// positionOffset is the first row of the position table that a model
// uses: RoBERTa numbers positions from padding_idx + 1, BERT from 0.
func positionOffset(cfg *Config) int {
	if cfg.ModelType == "bert" {
		return 0
	}
	pad := 1
	if cfg.PadTokenID != nil {
		pad = *cfg.PadTokenID
	}
	return pad + 1
}

// loadBERT loads BERT and XLM-RoBERTa.
func loadBERT(cfg *Config, src Source, b compute.Backend) (Encoder, error) {
	m, err := newEncoder(cfg, b, false)
	if err != nil {
		return nil, err
	}
	if m.eps == 0 {
		m.eps = 1e-12
	}
	var pet string
	if _, err := cfg.Get("position_embedding_type", &pet); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	if pet != "" && pet != "absolute" {
		return nil, fmt.Errorf("%s: position_embedding_type %q is not supported (only \"absolute\")", cfg.ModelType, pet)
	}
	m.posOffset = positionOffset(cfg)
	m.maxTokens = cfg.MaxPositionEmbeddings - m.posOffset
	if m.maxTokens <= 0 {
		return nil, fmt.Errorf("%s: max_position_embeddings %d leaves no positions after offset %d", cfg.ModelType, cfg.MaxPositionEmbeddings, m.posOffset)
	}
	l := &loader{src: src, b: b}
	p, err := prefix(l, "embeddings.word_embeddings.weight", "", "bert.", "roberta.", "model.")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	hid, ff := m.hid, m.ff
	m.word = l.weight(p+"embeddings.word_embeddings.weight", m.vocab, hid)
	m.pos = l.weight(p+"embeddings.position_embeddings.weight", cfg.MaxPositionEmbeddings, hid)
	if name := p + "embeddings.token_type_embeddings.weight"; l.has(name) {
		s, _ := src.Lookup(name)
		if len(s.Shape) == 2 {
			m.types = s.Shape[0]
		}
		m.typ = l.weight(name, m.types, hid)
	}
	m.embNorm = l.norm(p+"embeddings.LayerNorm", hid)
	for i := range cfg.NumHiddenLayers {
		lp := fmt.Sprintf("%sencoder.layer.%d.", p, i)
		ly := encLayer{attn: encAttention(cfg, 0)}
		ly.q = l.affine(lp+"attention.self.query", hid, hid, true)
		ly.k = l.affine(lp+"attention.self.key", hid, hid, true)
		ly.v = l.affine(lp+"attention.self.value", hid, hid, true)
		ly.o = l.affine(lp+"attention.output.dense", hid, hid, true)
		ly.attnNorm = l.norm(lp+"attention.output.LayerNorm", hid)
		ly.up = l.affine(lp+"intermediate.dense", ff, hid, true)
		ly.down = l.affine(lp+"output.dense", hid, ff, true)
		ly.ffnNorm = l.norm(lp+"output.LayerNorm", hid)
		m.layers = append(m.layers, ly)
	}
	switch {
	case l.has("classifier.out_proj.weight"):
		// RoBERTa's head: dense and tanh on the first row, then out_proj.
		h := &encHead{act: "tanh", dense: l.host("classifier.dense", hid, hid)}
		h.out = l.host("classifier.out_proj", hostRows(src, "classifier.out_proj.weight"), hid)
		m.head = h
	case l.has("classifier.weight"):
		// BERT's: the pooler (dense and tanh on the first row), then the
		// classifier.
		h := &encHead{act: "tanh", dense: l.host(p+"pooler.dense", hid, hid)}
		h.out = l.host("classifier", hostRows(src, "classifier.weight"), hid)
		m.head = h
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

// hostRows returns the first dimension of a stored matrix (the number of
// labels of a classifier), 0 when it is absent or not a matrix.
func hostRows(src Source, name string) int {
	s, ok := src.Lookup(name)
	if !ok || len(s.Shape) != 2 {
		return 0
	}
	return s.Shape[0]
}

// encAttention is a block's attention: all heads over all heads, scaled by
// head_dim^-½, within window (0: every row).
func encAttention(cfg *Config, window int) compute.Attention {
	a := newAttention(0, cfg.NumAttentionHeads, cfg.NumAttentionHeads, cfg.HeadDim, 0, nil).attn
	a.Window = window
	return a
}

// loadModernBERT loads ModernBERT.
func loadModernBERT(cfg *Config, src Source, b compute.Backend) (Encoder, error) {
	m, err := newEncoder(cfg, b, true)
	if err != nil {
		return nil, err
	}
	if m.eps == 0 {
		m.eps = 1e-5
	}
	m.maxTokens = cfg.MaxPositionEmbeddings
	if m.maxTokens <= 0 {
		return nil, fmt.Errorf("%s: max_position_embeddings must be positive", cfg.ModelType)
	}
	every, local := 3, 128
	for _, k := range []struct {
		key string
		dst *int
	}{{"global_attn_every_n_layers", &every}, {"local_attention", &local}} {
		if _, err := cfg.Get(k.key, k.dst); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
		}
		if *k.dst <= 0 {
			return nil, fmt.Errorf("%s: key %q must be positive, got %d", cfg.ModelType, k.key, *k.dst)
		}
	}
	globalTheta, localTheta := 160000.0, 10000.0
	if p, ok := cfg.RopeByLayerType[FullAttention]; ok {
		globalTheta = p.Theta
	} else if _, err := cfg.Get("global_rope_theta", &globalTheta); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	if p, ok := cfg.RopeByLayerType[SlidingAttention]; ok {
		localTheta = p.Theta
	} else if _, err := cfg.Get("local_rope_theta", &localTheta); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	ropes := map[bool]*compute.Rope{}
	for global, theta := range map[bool]float64{true: globalTheta, false: localTheta} {
		r, err := NewRope(RopeParams{Type: "default", Theta: theta, Factor: 1, PartialRotaryFactor: 1}, cfg.HeadDim, cfg.MaxPositionEmbeddings)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
		}
		ropes[global] = r
	}
	_, explicit := cfg.Raw["layer_types"]
	l := &loader{src: src, b: b}
	p, err := prefix(l, "embeddings.tok_embeddings.weight", "", "model.")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
	}
	hid, ff := m.hid, m.ff
	m.word = l.weight(p+"embeddings.tok_embeddings.weight", m.vocab, hid)
	m.embNorm = l.norm(p+"embeddings.norm", hid)
	m.final = l.norm(p+"final_norm", hid)
	for i := range cfg.NumHiddenLayers {
		global := i%every == 0
		if explicit {
			global = cfg.LayerType(i) != SlidingAttention
		}
		window := 0
		if !global {
			window = local/2 + 1
		}
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		ly := encLayer{attn: encAttention(cfg, window), rope: ropes[global]}
		if l.has(lp + "attn_norm.weight") {
			ly.attnNorm = l.norm(lp+"attn_norm", hid)
		}
		ly.q, ly.k, ly.v = l.split3(lp+"attn.Wqkv", hid, hid)
		ly.o = l.affine(lp+"attn.Wo", hid, hid, false)
		ly.ffnNorm = l.norm(lp+"mlp_norm", hid)
		ly.up, ly.gate = l.split2(lp+"mlp.Wi", ff, hid)
		ly.down = l.affine(lp+"mlp.Wo", hid, ff, false)
		m.layers = append(m.layers, ly)
	}
	if l.has("classifier.weight") {
		h := &encHead{act: "gelu", normEps: float64(m.eps)}
		var pooling string
		for _, k := range []struct {
			key string
			dst *string
		}{{"classifier_pooling", &pooling}, {"classifier_activation", &h.act}} {
			if _, err := cfg.Get(k.key, k.dst); err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.ModelType, err)
			}
		}
		switch pooling {
		case "", "cls":
		case "mean":
			h.mean = true
		default:
			return nil, fmt.Errorf("%s: classifier_pooling %q is not supported (cls or mean)", cfg.ModelType, pooling)
		}
		if err := hostActivate(nil, h.act); err != nil {
			return nil, fmt.Errorf("%s: classifier_activation: %w", cfg.ModelType, err)
		}
		h.dense = l.host("head.dense", hid, hid)
		h.normW = l.hostVals("head.norm.weight", hid)
		if l.has("head.norm.bias") {
			h.normB = l.hostVals("head.norm.bias", hid)
		}
		h.out = l.host("classifier", hostRows(src, "classifier.weight"), hid)
		m.head = h
	}
	if l.err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.ModelType, l.err)
	}
	return m, nil
}

// split3 loads a fused [3·n, in] projection (and its bias, if stored) as
// three of n rows each.
func (l *loader) split3(name string, n, in int) (a, b, c affine) {
	parts := l.splitN(name, 3, n, in)
	return parts[0], parts[1], parts[2]
}

// split2 is split3 for a fused pair.
func (l *loader) split2(name string, n, in int) (a, b affine) {
	parts := l.splitN(name, 2, n, in)
	return parts[0], parts[1]
}

func (l *loader) splitN(name string, k, n, in int) []affine {
	parts := make([]affine, k)
	var bias []float32
	if l.has(name + ".bias") {
		bias = l.hostVals(name+".bias", k*n)
	}
	for i := range parts {
		parts[i].w = l.rows(name+".weight", []int{k * n, in}, seq(i*n, (i+1)*n))
		if bias != nil && l.err == nil {
			parts[i].b = l.b.Alloc(compute.F32, n)
			l.b.Upload(parts[i].b, bias[i*n:(i+1)*n])
		}
	}
	return parts
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// Encode implements Encoder.
func (m *encoder) Encode(inputs []EncoderInput) ([]EncoderOutput, error) {
	total, err := checkInputs(inputs, m.vocab, m.types, m.maxTokens)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.cfg.ModelType, err)
	}
	if len(inputs) == 0 {
		return nil, nil
	}
	b := m.b
	var allocs []*compute.Tensor
	alloc := func(dt compute.DType, shape ...int) *compute.Tensor {
		t := b.Alloc(dt, shape...)
		allocs = append(allocs, t)
		return t
	}
	defer func() {
		for _, t := range allocs {
			b.Free(t)
		}
	}()
	ids := make([]int32, 0, total)
	pos := make([]int32, 0, total)
	types := make([]int32, 0, total)
	starts := make([]int, len(inputs)+1)
	for i, in := range inputs {
		ids = append(ids, in.IDs...)
		for j := range in.IDs {
			pos = append(pos, int32(j+m.posOffset))
			if in.TypeIDs != nil {
				types = append(types, in.TypeIDs[j])
			} else {
				types = append(types, 0)
			}
		}
		starts[i+1] = starts[i] + len(in.IDs)
	}
	upload := func(v []int32) *compute.Tensor {
		t := alloc(compute.I32, len(v))
		b.UploadInts(t, v)
		return t
	}
	hid := m.hid
	x, h, o := alloc(compute.F32, total, hid), alloc(compute.F32, total, hid), alloc(compute.F32, total, hid)
	q, k, v, a := alloc(compute.F32, total, hid), alloc(compute.F32, total, hid), alloc(compute.F32, total, hid), alloc(compute.F32, total, hid)
	f1, f2 := alloc(compute.F32, total, m.ff), alloc(compute.F32, total, m.ff)
	idsT, posT := upload(ids), upload(pos)
	b.Embed(x, m.word, idsT)
	if m.pos != nil {
		b.Embed(h, m.pos, posT)
		b.Add(x, x, h)
	}
	if m.typ != nil {
		b.Embed(h, m.typ, upload(types))
		b.Add(x, x, h)
	}
	m.layerNorm(x, x, m.embNorm)
	lin := func(dst, in *compute.Tensor, w affine) {
		b.MatMul(dst, in, w.w)
		if w.b != nil {
			b.Add(dst, dst, w.b)
		}
	}
	for i := range m.layers {
		ly := &m.layers[i]
		in := x
		if m.modern && ly.attnNorm.w != nil {
			m.layerNorm(h, x, ly.attnNorm)
			in = h
		}
		lin(q, in, ly.q)
		lin(k, in, ly.k)
		lin(v, in, ly.v)
		if ly.rope != nil {
			b.RoPE(q, posT, ly.attn.Heads, ly.rope)
			b.RoPE(k, posT, ly.attn.KVHeads, ly.rope)
		}
		for s := range inputs {
			lo, hi := starts[s], starts[s+1]
			m.bi.AttendAll(b.View(a, lo, hi), b.View(q, lo, hi), b.View(k, lo, hi), b.View(v, lo, hi), &ly.attn)
		}
		lin(o, a, ly.o)
		b.Add(x, x, o)
		if m.modern {
			m.layerNorm(h, x, ly.ffnNorm)
			lin(f1, h, ly.up)
			lin(f2, h, ly.gate)
			b.GLU(f1, f1, f2, m.act)
		} else {
			m.layerNorm(x, x, ly.attnNorm)
			lin(f1, x, ly.up)
			b.Activate(f1, f1, m.act)
		}
		lin(o, f1, ly.down)
		b.Add(x, x, o)
		if !m.modern {
			m.layerNorm(x, x, ly.ffnNorm)
		}
	}
	if m.final.w != nil {
		m.layerNorm(x, x, m.final)
	}
	all := make([]float32, total*hid)
	b.Read(all, x)
	if r, ok := b.(compute.ErrorReporter); ok {
		if err := r.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", m.cfg.ModelType, err)
		}
	}
	out := make([]EncoderOutput, len(inputs))
	for s := range inputs {
		out[s].Hidden = all[starts[s]*hid : starts[s+1]*hid : starts[s+1]*hid]
		if m.head != nil {
			out[s].Logits = m.head.apply(out[s].Hidden, hid)
		}
	}
	return out, nil
}

func (m *encoder) layerNorm(dst, x *compute.Tensor, n norm) {
	m.b.LayerNorm(dst, x, n.w, n.b, m.eps)
}

// apply runs the head over one input's hidden rows.
func (h *encHead) apply(hidden []float32, hid int) []float32 {
	pooled := make([]float32, hid)
	if h.mean {
		rows := len(hidden) / hid
		for r := range rows {
			for i := range hid {
				pooled[i] += hidden[r*hid+i]
			}
		}
		for i := range pooled {
			pooled[i] /= float32(rows)
		}
	} else {
		copy(pooled, hidden[:hid])
	}
	y := h.dense.apply(pooled)
	hostActivate(y, h.act) // checked at load
	if h.normW != nil {
		hostLayerNorm(y, h.normW, h.normB, h.normEps)
	}
	return h.out.apply(y)
}
