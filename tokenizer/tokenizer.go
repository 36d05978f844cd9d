// Package tokenizer implements the tokenizers of open-weight language
// models in pure Go, exactly: byte-level BPE (GPT-2, Llama 3, Qwen),
// SentencePiece-style BPE with byte fallback (Llama 2, Gemma) and Unigram,
// with the normalizers, pre-tokenizers, added tokens, decoders and
// post-processing that Hugging Face tokenizer.json files describe.
//
// Load, LoadDir and Parse read tokenizer.json (optionally gzipped, with
// tokenizer_config.json beside it). Other formats fill a Spec and call New.
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"fmt"
	"math"
	"strings"
	"sync"
)

// Tokenizer encodes text to token ids and decodes ids to text. It is
// immutable after construction and safe for concurrent use.
type Tokenizer struct {
	tokens  []string // token text by id, added tokens included
	special []bool   // by id
	byteTok []bool   // by id: a <0xXX> byte-fallback token
	vocab   map[string]int32
	addedID map[string]int32

	added, addedPlain         *addedMatcher // raw-text added tokens
	normAdded, normAddedPlain *addedMatcher // normalized added tokens

	normalizers        []normalizer
	pre                []preTokenizer
	model              model
	decoders           []decoderStep
	byteFallbackDecode bool

	prefix, suffix []int32
	single, pair   []TemplatePiece
	bos, eos       int32
	maxTokenBytes  int

	pool sync.Pool // *scratch
}

// model turns one pre-token into ids.
type model interface {
	encode(dst []int32, word string, sc *scratch) []int32
}

// scratch holds per-call buffers, reused through a pool.
type scratch struct {
	segs, segs2     []segment
	pieces, pieces2 []piece
	matches         [][2]int
	spans, folded   []span
	ids             []int32
	ranks, next     []int32
	prev            []int32
	heap            []heapEntry
	buf             []byte
	lattice         []latticeNode

	// limit is the number of ids past which the call stops early
	// (EncodeLimit); math.MaxInt when there is none.
	limit int
}

// full reports whether ids have passed the call's limit.
func (sc *scratch) full(ids []int32) bool { return len(ids) > sc.limit }

// maxScratch is the capacity in elements past which a scratch buffer is
// dropped rather than kept in the pool, so that one huge input does not
// leave its buffers behind.
const maxScratch = 1 << 16

// trim drops the buffers grown past maxScratch.
func (sc *scratch) trim() {
	sc.segs, sc.segs2 = capped(sc.segs), capped(sc.segs2)
	sc.pieces, sc.pieces2 = capped(sc.pieces), capped(sc.pieces2)
	sc.matches = capped(sc.matches)
	sc.spans, sc.folded = capped(sc.spans), capped(sc.folded)
	sc.ids, sc.ranks, sc.next, sc.prev = capped(sc.ids), capped(sc.ranks), capped(sc.next), capped(sc.prev)
	sc.heap = capped(sc.heap)
	sc.buf = capped(sc.buf)
	sc.lattice = capped(sc.lattice)
}

// capped returns s, or nil when its capacity is over maxScratch.
func capped[S ~[]E, E any](s S) S {
	if cap(s) > maxScratch {
		return nil
	}
	return s
}

// New builds a tokenizer from a Spec. The tokenizer may keep the Spec's
// slices (Scores, for one); do not modify them afterwards.
func New(spec Spec) (*Tokenizer, error) {
	t := &Tokenizer{bos: spec.BOS, eos: spec.EOS}
	n := len(spec.Vocab)
	for _, a := range spec.Added {
		if a.ID < 0 {
			return nil, fmt.Errorf("added token %q: negative id %d", a.Content, a.ID)
		}
		if int(a.ID) >= n {
			n = int(a.ID) + 1
		}
	}
	if limit := 2*(len(spec.Vocab)+len(spec.Added)) + 1024; n > limit {
		return nil, fmt.Errorf("token ids up to %d for %d tokens: ids too sparse", n-1, len(spec.Vocab)+len(spec.Added))
	}
	t.tokens = make([]string, n)
	t.special = make([]bool, n)
	t.byteTok = make([]bool, n)
	copy(t.tokens, spec.Vocab)
	t.vocab = make(map[string]int32, len(spec.Vocab))
	for id, s := range spec.Vocab {
		if s == "" {
			continue
		}
		if _, dup := t.vocab[s]; dup {
			// Keep the first id, but later ones still decode.
			continue
		}
		t.vocab[s] = int32(id)
	}
	for id, ty := range spec.Types {
		if id < n && ty == TokenControl {
			t.special[id] = true
		}
	}
	t.addedID = make(map[string]int32, len(spec.Added))
	for _, a := range spec.Added {
		t.tokens[a.ID] = a.Content
		if a.Special {
			t.special[a.ID] = true
		}
		t.addedID[a.Content] = a.ID
	}
	for id, s := range t.tokens {
		if _, ok := byteFallbackValue(s); ok {
			t.byteTok[id] = true
		}
	}
	for name, id := range map[string]int32{"unknown": spec.Unk, "BOS": spec.BOS, "EOS": spec.EOS} {
		if id < -1 || int(id) >= n {
			return nil, fmt.Errorf("%s token id %d out of range [0, %d)", name, id, n)
		}
	}

	for i, nd := range spec.Normalizers {
		c, err := compileNormalizer(nd)
		if err != nil {
			return nil, fmt.Errorf("normalizer %d: %w", i, err)
		}
		t.normalizers = append(t.normalizers, c)
	}
	pre, deferred, err := compilePreTokenizers(spec.PreTokenizers)
	if err != nil {
		return nil, err
	}
	t.pre = pre
	for i, d := range spec.Decoders {
		c, err := compileDecoder(d)
		if err != nil {
			return nil, fmt.Errorf("decoder %d: %w", i, err)
		}
		if d.Kind == DecByteFallback {
			t.byteFallbackDecode = true
		}
		t.decoders = append(t.decoders, c)
	}

	switch spec.Model {
	case ModelBPE:
		m, err := newBPE(&spec, t.vocab, deferred)
		if err != nil {
			return nil, fmt.Errorf("BPE model: %w", err)
		}
		t.model = m
	case ModelUnigram:
		m, err := newUnigram(&spec, t.vocab, deferred)
		if err != nil {
			return nil, fmt.Errorf("Unigram model: %w", err)
		}
		t.model = m
	case ModelWordPiece:
		m, err := newWordPiece(&spec, t.vocab)
		if err != nil {
			return nil, fmt.Errorf("WordPiece model: %w", err)
		}
		t.model = m
	default:
		return nil, fmt.Errorf("unsupported model kind %d", spec.Model)
	}

	var raw, norm []AddedToken
	for _, a := range spec.Added {
		if a.Normalized {
			norm = append(norm, a)
		} else {
			raw = append(raw, a)
		}
	}
	plain := func(toks []AddedToken) []AddedToken {
		var out []AddedToken
		for _, a := range toks {
			if !a.Special {
				out = append(out, a)
			}
		}
		return out
	}
	self := func(a AddedToken) string { return a.Content }
	normalized := func(a AddedToken) string { return t.normalize(a.Content) }
	t.added = newAddedMatcher(raw, self)
	t.addedPlain = newAddedMatcher(plain(raw), self)
	t.normAdded = newAddedMatcher(norm, normalized)
	t.normAddedPlain = newAddedMatcher(plain(norm), normalized)

	if spec.Prefix != nil || spec.Suffix != nil {
		t.prefix = append([]int32(nil), spec.Prefix...)
		t.suffix = append([]int32(nil), spec.Suffix...)
	} else {
		if spec.AddBOS && spec.BOS >= 0 {
			t.prefix = []int32{spec.BOS}
		}
		if spec.AddEOS && spec.EOS >= 0 {
			t.suffix = []int32{spec.EOS}
		}
	}
	for _, id := range append(append([]int32(nil), t.prefix...), t.suffix...) {
		if id < 0 || int(id) >= n {
			return nil, fmt.Errorf("post-processor token id %d out of range [0, %d)", id, n)
		}
	}
	for _, tmpl := range [][]TemplatePiece{spec.Single, spec.Pair} {
		for _, p := range tmpl {
			if p.Seq < -1 || p.Seq > 1 {
				return nil, fmt.Errorf("post-processor template: sequence %d out of range", p.Seq)
			}
			for _, id := range p.IDs {
				if id < 0 || int(id) >= n {
					return nil, fmt.Errorf("post-processor token id %d out of range [0, %d)", id, n)
				}
			}
		}
	}
	t.single, t.pair = spec.Single, spec.Pair
	t.maxTokenBytes = maxTokenBytes(&spec)
	t.pool.New = func() any { return new(scratch) }
	return t, nil
}

func (t *Tokenizer) normalize(s string) string {
	for _, n := range t.normalizers {
		s = n.normalize(s)
	}
	return s
}

// Encode returns the token ids of text. Added tokens (special or not)
// written in the text are recognised. With addSpecial the tokenizer's
// default special tokens are added (BOS where the model's post-processor
// or tokenizer_config.json adds one).
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	ids, _ := t.encode(text, addSpecial, t.added, t.normAdded, false, math.MaxInt)
	return ids
}

// EncodePlain is Encode for untrusted text: special tokens written in the
// text are encoded as ordinary text, never as their special ids.
// Non-special added tokens are still recognised.
func (t *Tokenizer) EncodePlain(text string, addSpecial bool) []int32 {
	ids, _ := t.encode(text, addSpecial, t.addedPlain, t.normAddedPlain, false, math.MaxInt)
	return ids
}

// EncodeLimit is Encode for text that may be too long: it stops once the
// encoding has more than limit ids, the special tokens addSpecial adds
// included. When the encoding has at most limit ids it returns them and
// true, exactly as Encode does. Otherwise it returns false and the ids
// encoded so far, the first ones of Encode's result and more than limit
// of them; the work and memory spent are then about those of encoding
// limit tokens' worth of text.
func (t *Tokenizer) EncodeLimit(text string, addSpecial bool, limit int) ([]int32, bool) {
	return t.encode(text, addSpecial, t.added, t.normAdded, false, max(limit, 0))
}

// EncodePlainLimit is EncodeLimit with EncodePlain's treatment of special
// tokens.
func (t *Tokenizer) EncodePlainLimit(text string, addSpecial bool, limit int) ([]int32, bool) {
	return t.encode(text, addSpecial, t.addedPlain, t.normAddedPlain, false, max(limit, 0))
}

// encode encodes text with the given added tokens, stopping once there are
// more than limit ids. It reports whether it got to the end with no more
// than limit ids. With quoted, the text holds a Quoter's guards, which
// encodeText removes.
func (t *Tokenizer) encode(text string, addSpecial bool, added, normAdded *addedMatcher, quoted bool, limit int) ([]int32, bool) {
	ids := make([]int32, 0, min(len(text)/3, limit)+len(t.prefix)+len(t.suffix)+1)
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	sc := t.pool.Get().(*scratch)
	sc.limit = limit
	if added == nil {
		ids = t.encodeText(ids, text, true, normAdded, quoted, sc)
	} else {
		segs := added.split(sc.segs[:0], text)
		sc.segs = segs
		for _, s := range segs {
			if sc.full(ids) {
				break
			}
			if s.tok >= 0 {
				ids = append(ids, added.toks[s.tok].ID)
				continue
			}
			ids = t.encodeText(ids, text[s.start:s.end], s.start == 0, normAdded, quoted, sc)
		}
	}
	done := !sc.full(ids)
	sc.trim()
	t.pool.Put(sc)
	if !done {
		return ids, false
	}
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids, len(ids) <= limit
}

// encodeText encodes a stretch of input without raw added tokens. With
// quoted, the guards in text keep normalized added tokens from matching
// and are removed before the text is pre-tokenized.
func (t *Tokenizer) encodeText(ids []int32, text string, first bool, normAdded *addedMatcher, quoted bool, sc *scratch) []int32 {
	if quoted && normAdded == nil {
		text, quoted = Unquote(text), false
	}
	s := t.normalize(text)
	if s == "" {
		return ids
	}
	if normAdded == nil {
		return t.encodeNormalized(ids, s, first, sc)
	}
	segs := normAdded.split(sc.segs2[:0], s)
	sc.segs2 = segs
	for k := 0; k < len(segs) && !sc.full(ids); k++ {
		g := segs[k]
		if g.tok >= 0 {
			ids = append(ids, normAdded.toks[g.tok].ID)
			continue
		}
		piece := s[g.start:g.end]
		if quoted {
			if piece = Unquote(piece); piece == "" {
				continue
			}
		}
		ids = t.encodeNormalized(ids, piece, first && g.start == 0, sc)
	}
	return ids
}

// pieceBatch is how many pieces a streaming first pre-tokenizer produces
// at a time (a variable for tests).
var pieceBatch = 1024

// encodeNormalized pre-tokenizes normalized text and runs the model. When
// the first pre-tokenizer can produce its pieces a batch at a time, the
// text goes through the pipeline in batches, so that the pieces of a long
// text are never all held at once.
func (t *Tokenizer) encodeNormalized(ids []int32, s string, first bool, sc *scratch) []int32 {
	if len(t.pre) > 0 {
		if st, ok := t.pre[0].(streamer); ok && st.streams() {
			p := piece{s, first}
			for i := 0; i < len(s) && !sc.full(ids); {
				var pieces []piece
				pieces, i = st.pretokenizeFrom(sc.pieces[:0], p, i, pieceBatch)
				ids = t.encodePieces(ids, pieces, t.pre[1:], sc)
			}
			return ids
		}
	}
	return t.encodePieces(ids, append(sc.pieces[:0], piece{s, first}), t.pre, sc)
}

// encodePieces runs the pre-tokenizers steps over pieces, which must be
// held in sc.pieces, and the model over the result.
func (t *Tokenizer) encodePieces(ids []int32, pieces []piece, steps []preTokenizer, sc *scratch) []int32 {
	for _, p := range steps {
		out := sc.pieces2[:0]
		for _, pc := range pieces {
			out = p.pretokenize(out, pc, sc)
		}
		sc.pieces2 = pieces
		pieces = out
	}
	sc.pieces = pieces
	for _, pc := range pieces {
		if sc.full(ids) {
			break
		}
		ids = t.model.encode(ids, pc.text, sc)
	}
	return ids
}

// Decode returns the text of ids. With skipSpecial, special tokens are left
// out; otherwise they appear as their text. Ids outside the vocabulary are
// ignored.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
			continue
		}
		if skipSpecial && t.special[id] {
			continue
		}
		toks = append(toks, t.tokens[id])
	}
	if len(t.decoders) == 0 {
		return strings.Join(toks, " ")
	}
	for _, d := range t.decoders {
		toks = d.decodeChain(toks)
	}
	return strings.Join(toks, "")
}

// VocabSize returns the number of token ids: one more than the largest id
// of the vocabulary and the added tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given by its text (an added token's
// content, or a vocabulary entry in the model's alphabet).
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.addedID[s]; ok {
		return id, true
	}
	id, ok := t.vocab[s]
	return id, ok
}

// Token returns the text of a token id as stored in the vocabulary, or ""
// for an unknown id.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// IsSpecial reports whether id is a special token (one that Decode skips
// when asked to).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence token id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddsBOS reports whether Encode with addSpecial starts with BOS.
func (t *Tokenizer) AddsBOS() bool {
	return t.bos >= 0 && len(t.prefix) > 0 && t.prefix[0] == t.bos
}
