package server

// fimPrompt returns the token ids of a fill-in-the-middle prompt: the
// model completes the text between prefix and suffix. The prompt is built
// from the markers the model's tokenizer declares (tokenizer.FIM), the
// texts encoded as plain text (marker strings written in them stay text);
// a model without markers is a 400 naming it. param names the suffix field
// in errors, promptParam the prompt.
func (m *Model) fimPrompt(prefix, suffix, promptParam, param string) ([]int32, error) {
	tok := m.eng.Tokenizer
	f, ok := tok.FIM()
	if !ok {
		return nil, invalid(param, "model %q cannot fill in the middle: its tokenizer declares no fill-in-the-middle tokens (such as <|fim_prefix|>, <fim_prefix> or <PRE>); use a code model trained for it, or leave %s out", m.id, param)
	}
	pre, err := m.encodeBounded(tok.EncodePlainLimit, prefix, false, promptParam)
	if err != nil {
		return nil, err
	}
	suf, err := m.encodeBounded(tok.EncodePlainLimit, suffix, false, param)
	if err != nil {
		return nil, err
	}
	ids := f.Prompt(pre, suf)
	if tok.AddsBOS() && tok.BOS() >= 0 {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	return ids, nil
}
