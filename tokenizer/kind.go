package tokenizer

// Kind names the tokenizer's algorithm for people: "byte-level BPE" (GPT-2,
// Llama 3, Qwen), "SentencePiece BPE" (Llama 2, Gemma), "BPE", "Unigram" or "WordPiece" (BERT).
func (t *Tokenizer) Kind() string {
	if _, ok := t.model.(*wordPieceModel); ok {
		return ModelWordPiece.String()
	}
	if _, ok := t.model.(*bpeModel); !ok {
		return ModelUnigram.String()
	}
	for _, d := range t.decoders {
		switch d.(type) {
		case byteLevelDecoder, *byteLevelDecoder:
			return "byte-level BPE"
		case metaspaceDecoder, *metaspaceDecoder, byteFallbackDecoder, *byteFallbackDecoder:
			return "SentencePiece BPE"
		}
	}
	if t.byteFallbackDecode {
		return "SentencePiece BPE"
	}
	return ModelBPE.String()
}
