package synth

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Special tokens of the built-in tokenizer, placed after the merges as
// Qwen's are.
const (
	EndOfText = "<|endoftext|>"
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
)

// ChatTemplate is the built-in tokenizer's chat template: plain ChatML.
// Message content may be a string or a list of parts, whose text parts are
// concatenated.
const ChatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- else -%}
{%- for part in message['content'] -%}
{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}
`

// splitPattern is the pre-tokenizer split of the Qwen 2 family, which the
// built-in tokenizer shares so that it exercises the same pipeline.
const splitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// corpus is the text the built-in tokenizer's merges are learnt from.
const corpus = `The engine reads a model from a directory and keeps the weights in the
form the file stores them. Each layer of the network is a block of attention
followed by a small feed forward network, and the output of every block is
added back to the stream that flows through the model. When a prompt
arrives, the tokens are cut into pieces, the pieces are looked up in the
embedding table, and the whole prompt is processed at once. After that the
model produces one token at a time: it reads every weight once for each new
token, so the speed of decoding is set by how fast memory can be read.

A benchmark measures two numbers. The first is how many prompt tokens per
second the machine can process when it has the whole prompt in hand; this is
limited by arithmetic, because each weight is used for many tokens. The
second is how many new tokens per second it can generate; this is limited by
memory bandwidth, because each weight is used for one token only. Reporting
the second number as a fraction of the measured bandwidth tells us how close
the kernels come to what the hardware allows.

Random weights are good enough for measuring speed. The values do not
matter to the time a matrix product takes, only the shapes and the storage
type do. A synthetic model of the right size therefore gives the same
figures as the real one, without downloading many gigabytes first. The
tokenizer here is small and simple, but it follows the same rules as the
tokenizers of real models: text is split into words, the words are turned
into bytes, and frequent pairs of bytes are merged into longer tokens.

Questions and answers follow a template. The user writes a message, the
assistant writes a reply, and special markers show where each turn starts
and where it ends. A server renders the conversation with the template,
encodes it, generates until the end marker appears, and sends the text back
to the client. Streaming clients receive the text piece by piece as it is
produced, never splitting a character in the middle.

Numbers such as 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32, 64, 128, 256, 512
and 1024 appear in configurations; so do words like hidden, intermediate,
heads, layers, vocabulary, context, position, rotary, theta, scaling,
window, sliding, norm, epsilon, bias, tie, embeddings, float, half, brain.
Code uses brackets (), [], {}, quotes "like this", and symbols: + - * / = <
> ! ? : ; , . _ # @ $ % & | ~ ^ and the backslash \ too.
`

// byteAlphabet maps each byte to the printable character that byte-level
// BPE vocabularies spell it with: printable Latin-1 bytes stand for
// themselves, the others take the code points from 256 up in byte order.
func byteAlphabet() [256]rune {
	var m [256]rune
	n := 0
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// BuiltinTokenizer is a small byte-level BPE tokenizer: the 256 byte
// tokens, merges learnt from a built-in text, then the special tokens.
type BuiltinTokenizer struct {
	Vocab   []string    // by id
	Merges  [][2]string // in priority order
	Special []string    // the special tokens, which follow the vocabulary
}

// SpecialID returns the id of a special token, or -1.
func (t *BuiltinTokenizer) SpecialID(tok string) int {
	if i := slices.Index(t.Special, tok); i >= 0 {
		return len(t.Vocab) + i
	}
	return -1
}

// Size returns the number of token ids, specials included.
func (t *BuiltinTokenizer) Size() int { return len(t.Vocab) + len(t.Special) }

// NewBuiltinTokenizer learns merges until the tokenizer has vocab ids, or
// the corpus has no more pairs to merge; filler words (see fillerWord)
// make up the rest.
func NewBuiltinTokenizer(vocab int) (*BuiltinTokenizer, error) {
	specials := []string{EndOfText, ImStart, ImEnd}
	if vocab < 256+len(specials) {
		return nil, fmt.Errorf("built-in tokenizer: vocabulary of %d is smaller than its %d byte and special tokens", vocab, 256+len(specials))
	}
	alpha := byteAlphabet()
	t := &BuiltinTokenizer{Special: specials}
	index := map[string]bool{}
	for b := range 256 {
		t.Vocab = append(t.Vocab, string(alpha[b]))
		index[string(alpha[b])] = true
	}

	// Words of the corpus as symbol sequences, with their counts.
	type word struct {
		syms  []string
		count int
	}
	counts := map[string]int{}
	for _, w := range regexp.MustCompile(`[ ]?[\p{L}]+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+`).FindAllString(corpus, -1) {
		counts[w]++
	}
	var words []word
	for _, w := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		var syms []string
		for _, b := range []byte(w) {
			syms = append(syms, string(alpha[b]))
		}
		words = append(words, word{syms, counts[w]})
	}

	want := vocab - len(specials)
	for len(t.Vocab) < want {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		if len(pairs) == 0 {
			break
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || n == bestN && cmp.Or(strings.Compare(p[0], best[0]), strings.Compare(p[1], best[1])) < 0 {
				best, bestN = p, n
			}
		}
		merged := best[0] + best[1]
		t.Merges = append(t.Merges, best)
		if !index[merged] {
			index[merged] = true
			t.Vocab = append(t.Vocab, merged)
		}
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, merged)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			words[wi].syms = out
		}
	}
	// Filler words make up the rest: no merge produces them, so text never
	// encodes to them, but each decodes to a word of its own, so that what
	// random weights generate streams as visible text.
	for i := 0; len(t.Vocab) < want; i++ {
		w := fillerWord(i)
		if !index[w] {
			index[w] = true
			t.Vocab = append(t.Vocab, w)
		}
	}
	return t, nil
}

// fillerWord returns the i-th filler token: a space and a made-up word
// ("Ġ" is the byte-level alphabet's space).
func fillerWord(i int) string {
	w := []byte{'q'}
	for {
		w = append(w, byte('a'+i%26))
		i /= 26
		if i == 0 {
			break
		}
	}
	return "Ġ" + string(append(w, 'x'))
}

// TokenizerJSON returns the tokenizer.json of t: NFC normalisation, the
// Qwen 2 split, byte-level encoding and decoding.
func (t *BuiltinTokenizer) TokenizerJSON() ([]byte, error) {
	var b bytes.Buffer
	str := func(s string) { b.Write(jsonString(s)) }
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range t.Special {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": ", len(t.Vocab)+i)
		str(s)
		b.WriteString(`, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}`)
	}
	b.WriteString("\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n")
	b.WriteString(`  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": `)
	str(splitPattern)
	b.WriteString(`}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},` + "\n")
	b.WriteString(`  "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},` + "\n")
	b.WriteString(`  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},` + "\n")
	b.WriteString(`  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,` + "\n    \"vocab\": {")
	for id, s := range t.Vocab {
		if id > 0 {
			b.WriteString(", ")
		}
		str(s)
		fmt.Fprintf(&b, ": %d", id)
	}
	b.WriteString("},\n    \"merges\": [")
	for i, m := range t.Merges {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('[')
		str(m[0])
		b.WriteString(", ")
		str(m[1])
		b.WriteByte(']')
	}
	b.WriteString("]\n  }\n}\n")
	return b.Bytes(), nil
}

// TokenizerConfig returns the tokenizer_config.json of t, with the ChatML
// chat template.
func (t *BuiltinTokenizer) TokenizerConfig(maxLength int) ([]byte, error) {
	decoder := map[string]any{}
	for i, s := range t.Special {
		decoder[fmt.Sprint(len(t.Vocab)+i)] = map[string]any{
			"content": s, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true,
		}
	}
	return marshal(map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         decoder,
		"bos_token":                    nil,
		"eos_token":                    ImEnd,
		"pad_token":                    EndOfText,
		"unk_token":                    nil,
		"chat_template":                ChatTemplate,
		"clean_up_tokenization_spaces": false,
		"errors":                       "replace",
		"model_max_length":             maxLength,
		"tokenizer_class":              "PreTrainedTokenizerFast",
	})
}
