package model

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/gguf"
)

// BERT as llama.cpp stores it (architecture "bert": convert_hf_to_gguf.py's
// BertModel, src/models/bert.cpp):
//
//   - Tensors outside the layers: token_embd (word embeddings),
//     position_embd, token_types (optional), token_embd_norm (weight and
//     bias); per layer attn_q, attn_k, attn_v and attn_output (weights and
//     biases), attn_output_norm, ffn_up, ffn_down and layer_output_norm.
//     The pooler is left out: embeddings do not use it (a classifier
//     reads it: see below).
//   - Keys: bert.context_length, embedding_length, block_count,
//     feed_forward_length, attention.head_count,
//     attention.layer_norm_epsilon, attention.causal (false) and
//     pooling_type (0 none, 1 mean, 2 CLS, 3 last, 4 rank: the
//     classification head's score);
//     tokenizer.ggml.token_type_count is the token type table's size.
//   - The activation is not stored: llama.cpp runs GELU (its tanh form;
//     lem computes the erf form that transformers' "gelu" names, which
//     differs by less than 1e-3 per value).
//
// XLM-RoBERTa (and RoBERTa) checkpoints are written under "bert" as
// llama.cpp's converter writes them (XLMRobertaModel): the position table
// loses its first padding_idx + 1 rows, which RoBERTa never uses, and
// context_length is max_position_embeddings less those rows, so that
// positions count from 0 as in BERT. Such a file reads back as a BERT
// model; its vocabulary is a SentencePiece Unigram one (tokenizer model
// "t5").
//
// A cross-encoder's classification head (bge-reranker) is stored as
// llama.cpp stores it: cls (dense, followed by tanh on the first row) and
// cls.output (the projection to the labels), and the file's pooling_type
// is 4 (rank). It reads back as RoBERTa's head.
var bertGGUFLayout = TensorLayout{
	act:     "gelu",
	compose: composeBERT,
	prefix:  "encoder.layer.",
	global: map[string]string{
		"embeddings.word_embeddings.weight":       "token_embd.weight",
		"embeddings.position_embeddings.weight":   "position_embd.weight",
		"embeddings.token_type_embeddings.weight": "token_types.weight",
		"embeddings.LayerNorm.weight":             "token_embd_norm.weight",
		"embeddings.LayerNorm.bias":               "token_embd_norm.bias",
		"classifier.dense.weight":                 "cls.weight",
		"classifier.dense.bias":                   "cls.bias",
		"classifier.out_proj.weight":              "cls.output.weight",
		"classifier.out_proj.bias":                "cls.output.bias",
	},
	layer: map[string]string{
		"attention.self.query.weight":       "attn_q.weight",
		"attention.self.query.bias":         "attn_q.bias",
		"attention.self.key.weight":         "attn_k.weight",
		"attention.self.key.bias":           "attn_k.bias",
		"attention.self.value.weight":       "attn_v.weight",
		"attention.self.value.bias":         "attn_v.bias",
		"attention.output.dense.weight":     "attn_output.weight",
		"attention.output.dense.bias":       "attn_output.bias",
		"attention.output.LayerNorm.weight": "attn_output_norm.weight",
		"attention.output.LayerNorm.bias":   "attn_output_norm.bias",
		"intermediate.dense.weight":         "ffn_up.weight",
		"intermediate.dense.bias":           "ffn_up.bias",
		"output.dense.weight":               "ffn_down.weight",
		"output.dense.bias":                 "ffn_down.bias",
		"output.LayerNorm.weight":           "layer_output_norm.weight",
		"output.LayerNorm.bias":             "layer_output_norm.bias",
	},
	drop: []string{"pooler."},
}

var bertGGUFMeta = ggufMeta{readAll: true, writeAll: true, read: bertFromGGUF, write: bertToGGUF}

// keyTokenTypes is the size of the token type table.
const keyTokenTypes = "tokenizer.ggml.token_type_count"

// bertFromGGUF reads a "bert" file's keys.
func bertFromGGUF(k *ggufKeys, c *Config, g *GGUF) error {
	c.NumHiddenLayers = k.need("num_hidden_layers")
	c.HiddenSize = k.need("hidden_size")
	c.IntermediateSize = k.need("intermediate_size")
	c.NumAttentionHeads = k.need("num_attention_heads")
	c.MaxPositionEmbeddings = k.need("max_position_embeddings")
	c.LayerNormEps = 1e-12
	k.eps("attention.layer_norm_epsilon", &c.LayerNormEps)
	if k.err != nil {
		return k.err
	}
	if v, ok := k.f.Value(k.arch + ".attention.causal"); ok {
		if b, isBool := v.Bool(); !isBool || b {
			return fmt.Errorf("key %s.attention.causal is %v: a BERT encoder attends both ways (want false)", k.arch, v)
		}
	}
	if c.NumHiddenLayers > MaxLayers {
		return fmt.Errorf("key %s.block_count: %d layers is more than the %d supported", k.arch, c.NumHiddenLayers, MaxLayers)
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("key %s.embedding_length %d is not a multiple of attention.head_count %d", k.arch, c.HiddenSize, c.NumAttentionHeads)
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	c.Raw["layer_norm_eps"] = rawNumber(c.LayerNormEps)
	if n, ok := k.f.Uint(keyTokenTypes); ok {
		c.Raw["type_vocab_size"] = rawNumber(float64(n))
	}
	// The tensors' shapes are checked by the loader against these sizes.
	return nil
}

// bertToGGUF writes a BERT config's keys.
func bertToGGUF(l *GGUFLayout, w *ggufWriter) error {
	c := l.cfg
	var pet string
	if _, err := c.Get("position_embedding_type", &pet); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	if pet != "" && pet != "absolute" {
		return fmt.Errorf("%s: position_embedding_type %q has no GGUF form (only \"absolute\")", c.ModelType, pet)
	}
	switch c.HiddenAct {
	case "gelu", "gelu_new", "gelu_pytorch_tanh":
	default:
		return fmt.Errorf("%s: hidden_act %q: llama.cpp runs BERT files with GELU only", c.ModelType, c.HiddenAct)
	}
	if c.NumAttentionHeads <= 0 || c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("%s: %d heads do not split hidden_size %d", c.ModelType, c.NumAttentionHeads, c.HiddenSize)
	}
	eps := c.NormEps()
	if eps == 0 {
		eps = 1e-12
	}
	off := positionOffset(c)
	if c.MaxPositionEmbeddings <= off {
		return fmt.Errorf("%s: max_position_embeddings %d leaves no positions after offset %d", c.ModelType, c.MaxPositionEmbeddings, off)
	}
	w.u32("max_position_embeddings", c.MaxPositionEmbeddings-off)
	w.u32("hidden_size", c.HiddenSize)
	w.u32("num_hidden_layers", c.NumHiddenLayers)
	w.u32("intermediate_size", c.IntermediateSize)
	w.u32("num_attention_heads", c.NumAttentionHeads)
	w.f32("attention.layer_norm_epsilon", eps)
	l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".attention.causal", Value: gguf.Bool(false)})
	types := 2
	if _, err := c.Get("type_vocab_size", &types); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	l.KV = append(l.KV, gguf.KV{Key: keyTokenTypes, Value: gguf.Uint32(uint32(max(types, 1)))})
	// A classifier's label names, unless they are transformers' default
	// pair (LABEL_0, LABEL_1), as llama.cpp's converter writes them.
	var labels map[string]string
	if _, err := c.Get("id2label", &labels); err != nil {
		return fmt.Errorf("%s: %w", c.ModelType, err)
	}
	head := slices.ContainsFunc(c.Architectures, func(a string) bool { return strings.HasSuffix(a, "ForSequenceClassification") })
	if head && len(labels) > 0 && !(len(labels) == 2 && labels["0"] == "LABEL_0") {
		names := make([]string, len(labels))
		for i := range names {
			n, ok := labels[strconv.Itoa(i)]
			if !ok {
				return fmt.Errorf("%s: id2label has no label %d", c.ModelType, i)
			}
			names[i] = n
		}
		l.KV = append(l.KV, gguf.KV{Key: l.Arch + ".classifier.output_labels", Value: gguf.Array(names)})
	}
	return nil
}

// composeBERT presents a checkpoint's tensors under the names the layout
// maps: the base model's prefix ("roberta.", "bert.") of a
// sequence-classification checkpoint is dropped, BERT's pooler and
// classifier become the dense and output projections of RoBERTa's head
// (the same computation: dense and tanh on the first row, then the
// projection), and the position table loses the rows a RoBERTa-numbered
// model never uses (see bertGGUFLayout).
func composeBERT(c *Config, src Source, names []string) ([]composite, error) {
	off := positionOffset(c)
	bertHead := slices.Contains(names, "classifier.weight")
	var out []composite
	for _, n := range names {
		base := n
		for _, p := range []string{"roberta.", "bert."} {
			if r, ok := strings.CutPrefix(n, p); ok {
				base = r
				break
			}
		}
		if bertHead {
			if r, ok := strings.CutPrefix(base, "pooler.dense."); ok {
				base = "classifier.dense." + r
			} else if r, ok := strings.CutPrefix(base, "classifier."); ok && (r == "weight" || r == "bias") {
				base = "classifier.out_proj." + r
			}
		}
		skip := 0
		if base == "embeddings.position_embeddings.weight" {
			skip = off
		}
		if base == n && skip == 0 {
			continue
		}
		st, ok := src.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("tensor %s is missing", n)
		}
		cut := 0
		shape := st.Shape
		if skip > 0 {
			if len(st.Shape) != 2 || st.Shape[0] <= skip || st.DType.Quantized() {
				return nil, fmt.Errorf("%s: shape %v (%s) has no rows after the first %d", n, st.Shape, st.DType, skip)
			}
			rowBytes, err := st.DType.RowBytes(st.Shape[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			cut = skip * rowBytes
			shape = []int{st.Shape[0] - skip, st.Shape[1]}
		}
		name := n
		out = append(out, composite{
			name:  base,
			parts: []string{name},
			dtype: st.DType,
			shape: shape,
			build: func() []byte {
				st, _ := src.Lookup(name)
				return st.Data[cut:]
			},
		})
	}
	return out, nil
}

// GGUFPooling values of "<arch>.pooling_type", as llama.cpp numbers them.
const (
	GGUFPoolNone = 0
	GGUFPoolMean = 1
	GGUFPoolCLS  = 2
	GGUFPoolLast = 3
	GGUFPoolRank = 4
)

// IsEncoderPath reports whether path is an encoder model: a directory whose
// config.json names an encoder family, or a GGUF file whose architecture
// is one.
func IsEncoderPath(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	if st.IsDir() {
		cfg, err := LoadConfig(path)
		return err == nil && IsEncoder(cfg.ModelType)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	a, ok := archByGGUF[f.Architecture()]
	return ok && a.Encoder != nil
}

// OpenEncoderGGUF loads an encoder model stored as a GGUF file (a BERT
// file as llama.cpp writes it) onto a backend. Tensors stay memory-mapped
// in their stored type. The file is returned for its tokenizer and pooling
// metadata; it is closed with the LoadedEncoder.
func OpenEncoderGGUF(path string, b compute.Backend) (*LoadedEncoder, *gguf.File, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	e, err := loadEncoderGGUF(f, b)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return &LoadedEncoder{Encoder: e, Dir: path, close: f.Close}, f, nil
}

func loadEncoderGGUF(f *gguf.File, b compute.Backend) (Encoder, error) {
	arch := f.Architecture()
	if a, ok := archByGGUF[arch]; ok && a.Encoder == nil {
		return nil, fmt.Errorf("architecture %q is a decoder model, not an encoder", arch)
	}
	g, err := readGGUF(f, GGUFOptions{})
	if err != nil {
		return nil, err
	}
	return LoadEncoder(g.Config, g, b)
}
