package tokenizer

// EncodeSpecial encodes one text with the post-processor's special tokens
// ([CLS] text [SEP] for BERT, <s> text </s> for XLM-RoBERTa) and returns
// the token type id of every token (all 0 for one text). Special tokens
// written in the text are recognised, as Encode does; the ids are those of
// Encode(text, true).
func (t *Tokenizer) EncodeSpecial(text string) (ids, typeIDs []int32) {
	if t.single == nil {
		ids = t.Encode(text, true)
		return ids, make([]int32, len(ids))
	}
	return t.applyTemplate(t.single, t.Encode(text, false), nil)
}

// EncodePair encodes a pair of texts as one sequence, the way cross-encoders
// (rerankers) and sentence-pair models take a query and a document:
// [CLS] a [SEP] b [SEP] for BERT, with token type ids 0 for the first part
// and 1 for the second; <s> a </s></s> b </s> for XLM-RoBERTa, all type 0.
// The layout is the post-processor's pair template; without one, the texts'
// ids are concatenated, typed 0 and 1. Special tokens written in the texts
// are recognised, as Encode does.
func (t *Tokenizer) EncodePair(a, b string) (ids, typeIDs []int32) {
	ea, eb := t.Encode(a, false), t.Encode(b, false)
	if t.pair == nil {
		tmpl := []TemplatePiece{{Seq: 0}, {Seq: 1, TypeID: 1}}
		if len(t.prefix) > 0 || len(t.suffix) > 0 {
			tmpl = []TemplatePiece{{Seq: -1, IDs: t.prefix}, {Seq: 0}, {Seq: -1, IDs: t.suffix},
				{Seq: -1, IDs: t.prefix, TypeID: 1}, {Seq: 1, TypeID: 1}, {Seq: -1, IDs: t.suffix, TypeID: 1}}
		}
		return t.applyTemplate(tmpl, ea, eb)
	}
	return t.applyTemplate(t.pair, ea, eb)
}

// PairTokens returns how many special tokens EncodePair adds around the
// two texts' own ids, for fitting a pair into a context.
func (t *Tokenizer) PairTokens() int {
	ids, _ := t.EncodePair("", "")
	return len(ids)
}

func (t *Tokenizer) applyTemplate(tmpl []TemplatePiece, a, b []int32) (ids, typeIDs []int32) {
	n := len(a) + len(b)
	for _, p := range tmpl {
		n += len(p.IDs)
	}
	ids, typeIDs = make([]int32, 0, n), make([]int32, 0, n)
	for _, p := range tmpl {
		part := p.IDs
		switch p.Seq {
		case 0:
			part = a
		case 1:
			part = b
		}
		ids = append(ids, part...)
		for range part {
			typeIDs = append(typeIDs, p.TypeID)
		}
	}
	return ids, typeIDs
}
