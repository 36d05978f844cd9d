package synth

import "strings"

// StoredTensor is a weight as a model file stores it, for accounting the
// bytes that running the model reads.
type StoredTensor struct {
	Name  string
	Shape []int // outermost dimension first, so an embedding table is [vocab, hidden]
	Bytes int64 // as stored, whatever the type (quantized blocks included)
}

// DecodeBytes returns the bytes of weights that one decode step reads: each
// weight tensor once, except token embedding tables, of which only the
// token's row is read, and the output projection in full. When tied is set
// the output projection is the embedding table, so that table is read in
// full as well as its row.
//
// Decode speed in tokens per second times DecodeBytes is the weight
// bandwidth the kernels achieve, to compare with the machine's. It counts
// every tensor of the file, so it assumes a dense model (all experts of a
// mixture would be over-counted) and ignores the KV cache, which is small
// next to the weights at short contexts.
func DecodeBytes(tensors []StoredTensor, tied bool) int64 {
	var n int64
	for _, t := range tensors {
		if !isEmbedding(t.Name) {
			n += t.Bytes
			continue
		}
		if len(t.Shape) > 0 && t.Shape[0] > 0 {
			n += t.Bytes / int64(t.Shape[0])
		}
		if tied && isTokenEmbedding(t.Name) {
			n += t.Bytes
		}
	}
	return n
}

// isEmbedding reports whether a tensor is a lookup table indexed by token
// id, in Hugging Face or GGUF naming.
func isEmbedding(name string) bool {
	return isTokenEmbedding(name) ||
		strings.HasSuffix(name, "embed_tokens_per_layer.weight") ||
		name == "per_layer_token_embd.weight"
}

// isTokenEmbedding reports whether a tensor is the input token embedding,
// the one an output projection can be tied to.
func isTokenEmbedding(name string) bool {
	return strings.HasSuffix(name, "embed_tokens.weight") ||
		name == "token_embd.weight" ||
		strings.HasSuffix(name, "wte.weight")
}

// Stored lists the geometry's tensors stored as d.
func (g *Geometry) Stored(d DType) []StoredTensor {
	specs := g.Tensors()
	out := make([]StoredTensor, len(specs))
	for i, s := range specs {
		out[i] = StoredTensor{Name: s.Name, Shape: s.Shape, Bytes: s.Elements() * int64(d.Size())}
	}
	return out
}
